"""Chapter 07's views: the tables and figures it shows are the library's counts, arranged."""
import os

from uprobe_lab.native import example
from uprobe_lab.views import many_cpus as v
from native_support import native


def test_the_shared_state_table_has_a_column_per_kernel_and_the_kernels_accesses():
    table = v.shared_per_hit("uprobe-nop")
    assert list(table.columns) == list(v.KERNELS)
    assert table.loc["uprobes_treelock", "6.8"] == "2 spinlock" and table.loc["uprobes_treelock", "6.10"] == "2 atomic"
    assert not any("atomic" in cell or "spinlock" in cell for cell in table["6.14"])
    assert v.shared_writes("uprobe-nop", ["6.8", "6.14"]) == {"6.8": 8, "6.14": 0}


def test_every_state_any_kernel_touches_has_a_box():
    states = v.all_states()
    assert {"mm->mmap_lock", "uprobes_treelock", "sighand->siglock", "utask->ri_pool"} <= set(states)
    assert len(states) == len(set(states))


def test_xol_slots_sleep_only_past_the_slots_there_are():
    assert v.xol_slots(64)["slept for a slot"] > 0
    assert v.xol_slots(31)["slept for a slot"] == 0
    assert v.xol_slots(64, arch="arm64")["slept for a slot"] == 0


def test_without_native_probes_the_machine_section_shows_the_recording(monkeypatch):
    monkeypatch.setenv(example.ENV, "recorded")
    run = v.native_scaling()
    assert run["recorded"] and "recorded" in run["reason"]
    table = v.native_scaling_table(run)
    assert list(table.index) == [1, 2] and set(table.columns) == {"uprobe-nop", "uretprobe-nop", "uprobe-ret"}
    # the recording's hits are exact: every producer's calls counted
    assert all(r["hits"] == r["cpus"] * r["iterations"] * r["repeats"] for r in run["rows"])


@native
def test_a_cpu_another_bench_holds_sends_the_chapter_to_the_recording(monkeypatch, tmp_path):
    from uprobe_lab.native.bench import CPU_LOCK_DIR_ENV, _cpu_lock

    monkeypatch.setenv(CPU_LOCK_DIR_ENV, str(tmp_path))  # locks of its own: another bench on the machine is no matter
    monkeypatch.setattr(v, "CPU_WAIT_S", 0.2)
    busy = min(os.sched_getaffinity(0))
    with _cpu_lock(busy) as mine:
        assert mine
        run = v.native_scaling(iterations=1000, repeats=1)
    assert run["recorded"] and f"CPU {busy} ran another lab bench" in run["reason"]
