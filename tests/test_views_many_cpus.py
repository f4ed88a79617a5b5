"""Chapter 07's views: the tables and figures it shows are the library's counts, arranged."""
import os

import pytest

from uprobe_lab.errors import LabError
from uprobe_lab.native import example
from uprobe_lab.views import many_cpus as v
from native_support import native, refuse_bpf


def test_the_shared_state_table_has_a_column_per_kernel_and_the_kernels_accesses():
    table = v.shared_per_hit("uprobe-nop")
    assert list(table.columns) == list(v.KERNELS)
    tree = "uprobes_treelock +0: rwlock or spinlock"
    assert table.loc[tree, "6.8"] == "2 spinlock" and table.loc[tree, "6.10"] == "2 atomic"
    # 6.12's lockless lookup reads the line its stepped hits write (try_get_uprobe): one row, both accesses
    assert v.shared_per_hit("uprobe-ret", ["6.12"]).loc["struct uprobe +0: rb_node, ref, register_rwsem", "6.12"] == \
        "2 atomic, 1 read"
    assert not any("atomic" in cell or "spinlock" in cell or "write" in cell for cell in table["6.14"])
    # 6.8: mmap_lock 2, the tree's spinlock 2, the probe's line 4 (get/put_uprobe, down/up_read), nhit++ 1, the
    # filter's read_lock/unlock 2
    assert v.shared_writes("uprobe-nop", ["6.8", "6.14"]) == {"6.8": 11, "6.14": 0}


@pytest.mark.filterwarnings("ignore:kernel 3.9")  # shared_writes' layout note: 3.9 counted on 6.8's structures
@pytest.mark.parametrize("view", [
    lambda: v.shared_writes("uretprobe-nop", ["3.9"]),
    lambda: v.shared_per_hit("uretprobe-nop", ["6.10", "3.9"]),
    lambda: v.transfers_curve("uretprobe-nop", ["3.9"], cpus=(1, 2)),
    lambda: v.exact_hits(["uretprobe-nop"], ["3.9"], cpus=(1,)),
    lambda: v.lines_figure("uretprobe-nop", "3.9", 2),
], ids=["shared_writes", "shared_per_hit", "transfers_curve", "exact_hits", "lines_figure"])
def test_a_uretprobe_bench_before_uretprobes_is_refused_in_its_own_words(view):
    """A release from 3.5 to 3.9 has uprobes and no uretprobes: each view says so, naming the release and the way
    out, where it indexed counts that a refused row has not."""
    with pytest.raises(LabError, match=r"kernel 3\.9 has no uretprobes, so no uretprobe-nop: they came in Linux "
                                       r"3\.10; give a release from 3\.10 on"):
        view()


def test_every_state_any_kernel_touches_has_a_box():
    states = v.all_states()
    assert {"struct mm_struct: mmap_lock", "uprobes_treelock +0: rwlock or spinlock", "struct sighand_struct +0: siglock",
            "utask->ri_pool"} <= set(states)
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
    # the probes in the order they ran, then the machine's baselines without a probe
    assert list(table.index) == [1, 2] and list(table.columns) == [
        "uprobe-nop", "uretprobe-nop", "uprobe-ret", "usermode-count", "syscall-count"]
    # the recording's hits are exact: every producer's calls counted
    assert all(r["hits"] == r["cpus"] * r["iterations"] * r["repeats"] for r in run["rows"])


def test_a_consumer_refused_past_the_trial_open_sends_the_chapter_to_the_recording_with_the_reason(monkeypatch):
    """perf_event_open may pass where bpf(2) does not (a kernel without CONFIG_BPF_SYSCALL, an LSM): the chapter
    shows the recording and says why, and the kernel does not die of a NativeUnavailable."""
    monkeypatch.setattr(v, "native_reason", lambda: None)
    monkeypatch.setattr(v, "run_native_benches_on_cpus", refuse_bpf)
    run = v.native_scaling()
    assert run["recorded"] and run["reason"].startswith("bpf(2) refused the BPF consumer the native benches attach")
    assert run["reason"].endswith("run as root on such a kernel, or the emulator (uprobe_lab.bench.run_benches) "
                                  "runs everywhere")


@native
def test_a_cpu_another_bench_holds_sends_the_chapter_to_the_recording(monkeypatch, tmp_path):
    from uprobe_lab.native.bench import CPU_LOCK_DIR_ENV, cpu_lock

    monkeypatch.setenv(CPU_LOCK_DIR_ENV, str(tmp_path))  # locks of its own: another bench on the machine is no matter
    monkeypatch.setattr(v, "CPU_WAIT_S", 0.2)
    busy = min(os.sched_getaffinity(0))
    with cpu_lock(busy) as mine:
        assert mine
        run = v.native_scaling(iterations=1000, repeats=1)
    assert run["recorded"] and f"CPU {busy} ran another lab bench" in run["reason"]


def _rows(kernel, rates):
    """Native -p rows: {bench: (M/s per CPU on 1 CPU, on 2 CPUs)}."""
    return [{"bench": b, "kernel": kernel, "cpus": n, "mops_per_cpu": r[n - 1]} for b, r in rates.items() for n in (1, 2)]


def _run(rows, host="6.18.44, 2 CPUs (a virtual machine)"):
    return {"recorded": True, "reason": "test", "host": host, "rows": rows}


def test_the_machine_text_says_what_its_table_shows():
    # the learner's VM: 1.155 -> 0.676 M/s per CPU is 59%; 0.754 -> 0.446 is 59%; a ret hit at 0.038 M/s is
    # 1 / 0.038 = 26.3 us, 1 / 1.155 = 0.87 us a nop hit, 30 times less
    text = " ".join(v.native_scaling_text(_run(_rows("6.18.44", {
        "uprobe-nop": (1.155, 0.676), "uretprobe-nop": (0.754, 0.446), "uprobe-ret": (0.038, 0.036)}))).split())
    assert "At 2 CPUs against 1, per CPU: uprobe-nop keeps 59% of its one-CPU rate (1.16 -> 0.676 M/s)" in text
    assert "uretprobe-nop keeps 59%" in text and "uprobe-nop and uretprobe-nop fall" in text
    # 6.14+ (e0925f2dc4de) shares nothing on these hits: the fall is the machine's
    assert "a uprobe-nop or uretprobe-nop hit writes nothing another CPU writes" in text
    assert "their fall is the machine's, not the kernel's" in text
    assert "a uprobe-ret hit costs 26.3 us, 30 times uprobe-nop's 0.87 us" in text and "hypervisor" in text


def test_a_drop_the_machine_shows_without_a_probe_is_named_the_machines():
    rates = {"uprobe-nop": (1.2, 0.7), "usermode-count": (800.0, 480.0), "syscall-count": (10.0, 6.0)}
    text = " ".join(v.native_scaling_text(_run(_rows("6.18.44", rates))).split())
    assert "Without any probe the machine drops as far (the loop with no probe 60% of its one-CPU rate" in text
    assert "the fall of uprobe-nop is the machine's own" in text
    rates["usermode-count"], rates["syscall-count"] = (800.0, 790.0), (10.0, 9.9)  # the machine holds: the probe's
    text = " ".join(v.native_scaling_text(_run(_rows("6.18.44", rates))).split())
    assert "uprobe-nop falls further than the machine without a probe" in text


def test_on_a_kernel_whose_hits_share_lines_the_text_names_them_and_a_flat_curve_is_said_flat():
    # 6.8: mmap_lock, the tree lock, the probe's reference and the consumers' rwsem (one line: 4), a lock and an
    # unlock each, the perf filter's read_lock and unlock (2) and trace_uprobe's nhit++ (1): 2 + 2 + 4 + 2 + 1 = 11
    text = " ".join(v.native_scaling_text(_run(_rows("6.8.0", {"uprobe-nop": (3.0, 1.5)}), host="6.8.0")).split())
    assert "A uprobe-nop hit on 6.8.0 still writes shared lines (uprobe-nop: 11 writes)" in text
    flat = v.native_scaling_text(_run(_rows("6.18.44", {"uprobe-nop": (1.67, 1.66)})))
    assert "Each probe keeps its one-CPU rate within 10%" in " ".join(flat.split())


def test_the_model_misses_are_listed_both_ways_with_the_lease_curve_too_high():
    from uprobe_lab.model import contention
    text = " ".join(v.model_misses(contention.evaluate()).split())
    high, low = text.split("Too low")
    # andrii-srcu-uretprobe-commit-2024-10 (scaling.csv): with the lease, 47.554 M/s at 80 CPUs and 42.39 at 64, where
    # the model, with nothing shared, keeps climbing; before the speculative lookup (RFC v3), 15.224 at 80 CPUs
    assert "with SRCU for uretprobes (after)" in high and "against 47.6" in high and "published 42.4" in high
    assert "before [RFC v3]" in low and "published 15.2" in low
    assert text.startswith("Too high by more than 15% on ") and "held-out curves" in low



def test_the_model_misses_render_as_two_lists_in_markdown():
    from uprobe_lab.model import contention
    text = v.model_misses(contention.evaluate())  # the chapter shows it as Markdown
    assert "\n\nToo low by more than 15%" in text  # a blank line ends the first list: "Too low" is no list item's tail


def test_every_public_function_serves_a_chapter_the_package_or_a_recording():
    # a view only a test calls is dead code: each is called by a notebook, by the package (this module included),
    # or names the command that made a bundled recording
    import inspect
    import re
    from pathlib import Path

    import uprobe_lab
    package = Path(uprobe_lab.__file__).parent
    here = Path(v.__file__)
    others = [p.read_text() for p in package.rglob("*.py") if p != here]
    others += [p.read_text() for p in (package.parent / "notebooks").glob("*.ipynb")]
    others += [p.read_text() for p in (package / "data").glob("*.json")]
    own = here.read_text()
    unused = [name for name, f in vars(v).items() if inspect.isfunction(f) and f.__module__ == v.__name__
              and not name.startswith("_") and not any(re.search(rf"\b{name}\b", t) for t in others)
              and len(re.findall(rf"\b{name}\b", own)) < 2]
    assert unused == []
