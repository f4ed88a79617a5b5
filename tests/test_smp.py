"""Many CPUs hitting one probe: exact counts, what each kernel's hit shares with other CPUs, and XOL slots running out.

The shared state each version touches is pinned from the kernel source, read apart from the lab's code
(kernel/events/uprobes.c before and after each commit named in uprobe_lab.kernel.RULES; the commits and
their releases are listed in docs/references.md).
"""
import threading
import time

import pytest

from uprobe_lab import LabError, ProcessKilled
from uprobe_lab.bench import bench_process, run_bench_on_cpus
from uprobe_lab.cli import main
from uprobe_lab.kernel import release_rules
from uprobe_lab.smp import run_on_cpus
from test_stopped_runs import ctrl_c_once_running, hang_guard, in_a_run  # noqa: F401 (hang_guard: a fixture)


@pytest.mark.parametrize("arch", ["x86_64", "arm64"])
@pytest.mark.parametrize("kernel", ["6.8", "6.10", "6.13", "6.14", "6.18"])
@pytest.mark.parametrize("name", ["uprobe-nop", "uretprobe-nop", "uprobe-ret"])
def test_every_thread_hits_exactly_its_iterations(arch, kernel, name):
    for cpus in (1, 2, 8, 64):
        row = run_bench_on_cpus(name, arch, kernel, iterations=25, cpus=cpus)
        assert row["hits"] == 25 * cpus, (cpus, row)
        assert row["events_per_hit"]["consumers"] == 1


# (cache line, kind) -> accesses per hit, as the kernel source has them. Lines by hand from the layouts
# (x86-64, no lock debugging): struct uprobe's rb_node (0-23), ref (24) and register_rwsem.count (32) share the
# line at +0; trace_uprobe's nhit is at 104 (devent 24 + consumer 32 + path 16 + inode, filename, offset,
# ref_ctr_offset 8 each), on the line at +64; 6.12's xol_area {wq 24, slot_count 4 + 4, bitmap, page, vaddr} is
# 56 bytes, one line, where 6.8-6.11's put vaddr at 88 or 96, past the line of slot_count (24).
MMAP = {"struct mm_struct: mmap_lock (atomic)": 2}
UPROBE = "struct uprobe +0: rb_node, ref, register_rwsem"
NHIT = {"struct trace_uprobe +64: nhit (write)": 1}  # tu->nhit++ until 10cdb82aa77f (6.12)
FILTER = {"struct trace_probe_event: filter.rwlock (atomic)": 2}  # read_lock + read_unlock until cdf355cc60e3 (6.10)
NOP_6_8 = {**MMAP, "uprobes_treelock +0: rwlock or spinlock (spinlock)": 2, f"{UPROBE} (atomic)": 4, **NHIT, **FILTER}
NOP_6_10 = {**MMAP, "uprobes_treelock +0: rwlock or spinlock (atomic)": 2, f"{UPROBE} (atomic)": 4, **NHIT}
LOCKLESS = {"uprobes_seqcount +0: sequence (read)": 1, f"{UPROBE} (read)": 1}  # rb_find_rcu reads rb_node
AREA_6_12 = "struct xol_area +0: wq, slot_count, bitmap, page, vaddr"
NOP_6_12 = {**MMAP, **LOCKLESS, "uprobes_srcu (per-CPU counters) (per-cpu)": 2, f"{AREA_6_12} (read)": 1}
NOP_6_13 = {**MMAP, **LOCKLESS, "current->trc_reader_nesting (per-task)": 2}
NOP_6_14 = {"struct mm_struct: mm_lock_seq (read)": 1, **LOCKLESS, "current->trc_reader_nesting (per-task)": 2}
# a step: the copy into slot 1's first line, a bitmap bit taken and freed, slot_count until 6.13, the siglock
STEP = {"[uprobes] slot 1 +0: ixol (write)": 1, "xol_area->bitmap[] +0: slots 0-31 (atomic)": 2,
        "struct sighand_struct +0: siglock (spinlock)": 2}


@pytest.mark.parametrize("name, kernel, shared", [
    ("uprobe-nop", "6.8", NOP_6_8),  # spin_lock(&uprobes_treelock), get/put_uprobe, down_read(register_rwsem)
    ("uprobe-nop", "6.10", NOP_6_10),  # 0dc715295d41: read_lock; cdf355cc60e3: no filter lock
    ("uprobe-nop", "6.12", NOP_6_12),  # cd7bdd9d46a9, 8617408f7a01, cc01bd044e6a, 10cdb82aa77f
    ("uprobe-nop", "6.13", NOP_6_13),  # 87195a1ee332: RCU Tasks Trace; 7a166094bd2b: no slot_count by vaddr
    ("uprobe-nop", "6.14", NOP_6_14),  # e0925f2dc4de: no mmap_lock
    ("uprobe-nop", "6.18", NOP_6_14),
    # a uretprobe adds the return instance's reference and the return consumers' rwsem, on the same line...
    ("uretprobe-nop", "6.10", {**NOP_6_10, f"{UPROBE} (atomic)": 8, "kmalloc (per-CPU slab) (per-cpu)": 1}),
    # ...then an SRCU lease (dd1a7567784e) and the return's own read section
    ("uretprobe-nop", "6.13", {**NOP_6_13, "current->trc_reader_nesting (per-task)": 4,
                               "kmalloc (per-CPU slab) (per-cpu)": 1, "uretprobes_srcu (per-CPU counters) (per-cpu)": 2}),
    ("uretprobe-nop", "6.14", {**NOP_6_14, "current->trc_reader_nesting (per-task)": 4,  # 8622e45b5da1: ri_pool
                               "utask->ri_pool (per-task)": 1, "uretprobes_srcu (per-CPU counters) (per-cpu)": 2}),
    # a stepped ret: before 6.12 the lookup's reference covers the step
    ("uprobe-ret", "6.10", {**NOP_6_10, **STEP, "struct xol_area +0: wq, slot_count, bitmap (atomic)": 2}),
    ("uprobe-ret", "6.12", {**NOP_6_12, **STEP, f"{UPROBE} (atomic)": 2, f"{AREA_6_12} (atomic)": 2}),  # try_get
    ("uprobe-ret", "6.13", {**NOP_6_13, **STEP, f"{UPROBE} (atomic)": 2}),  # 7a166094bd2b
    ("uprobe-ret", "6.15", {**NOP_6_14, **{k: v for k, v in STEP.items() if "siglock" not in k},  # 83179cd67846
                            f"{UPROBE} (atomic)": 2}),
])
def test_each_kernel_shares_what_its_source_shares(name, kernel, shared):
    assert run_bench_on_cpus(name, "x86_64", kernel, iterations=10, cpus=1)["shared_per_hit"] == shared


def test_a_release_has_its_own_rules_and_a_modelled_row_stays_itself():
    assert release_rules("6.13").name == "6.13" and release_rules("6.13").rcu_tasks_trace
    assert not release_rules("6.8.0-45-generic").treelock_rwlock
    assert release_rules("6.11") is release_rules("6.11") and not release_rules("6.11").lockless_lookup
    with pytest.raises(LabError, match="not a kernel release"):
        release_rules("jammy")


@pytest.mark.parametrize("kernel, busy", [("6.10", True), ("6.13", True), ("6.14", False)])
def test_lines_move_between_cpus_only_where_a_hit_writes_shared_state(kernel, busy):
    one = run_bench_on_cpus("uprobe-nop", "x86_64", kernel, iterations=100, cpus=1)
    many = run_bench_on_cpus("uprobe-nop", "x86_64", kernel, iterations=100, cpus=8)
    assert one["line_transfers_per_hit"] == 0
    if busy:  # the mmap_lock line (and before 6.12 more) changes hands on most hits
        assert many["line_transfers_per_hit"] > 0.3
    else:  # read-only lines (mm_lock_seq, uprobes_seqcount, the probe's first line): the 7 other CPUs fetch each once
        proc, _, target = bench_process("uprobe-nop", "x86_64", release_rules(kernel))
        proc.call("producer_loop", 1, target)
        run_on_cpus(proc, 8, "producer_loop", 100, target)
        assert proc.trace.counts["line_transfers"] == 7 * 3


def test_more_threads_than_xol_slots_sleep_until_one_is_freed():
    # x86-64: 4096 / 128 = 32 slots, slot 0 the return trampoline: 31 threads can step at once
    proc, consumer, target = bench_process("uprobe-ret", "x86_64", "6.18")
    sched = run_on_cpus(proc, 64, "producer_loop", 20, target, seed=3, switch_on_exit=1.0)
    assert consumer.hits == 64 * 20
    assert sched.sleeps > 0 and sched.most_asleep >= 1
    assert proc.trace.counts["xol_waits"] == sched.sleeps
    assert not any(proc.mm.xol_area.bitmap[1:])  # every slot freed again
    proc, consumer, target = bench_process("uprobe-ret", "x86_64", "6.18")
    assert run_on_cpus(proc, 31, "producer_loop", 20, target, seed=3, switch_on_exit=1.0).sleeps == 0


def test_arm64s_four_byte_slots_leave_room_for_64_threads():
    proc, consumer, target = bench_process("uprobe-push", "arm64", "6.18")  # stp x29, x30: stepped
    sched = run_on_cpus(proc, 64, "producer_loop", 10, target, seed=3, switch_on_exit=1.0)
    assert consumer.hits == 640 and sched.sleeps == 0
    assert proc.trace.counts["xol_steps"] == 640


def test_the_same_seed_interleaves_the_same_way():
    runs = [run_bench_on_cpus("uprobe-ret", "x86_64", "6.10", iterations=30, cpus=40, seed=s) for s in (5, 5, 6)]
    assert runs[0]["line_transfers_per_hit"] == runs[1]["line_transfers_per_hit"]
    assert runs[0]["xol_waits"] == runs[1]["xol_waits"]
    assert runs[0]["hits"] == runs[2]["hits"] == 1200


def test_the_process_calls_as_before_after_its_threads_return():
    proc, consumer, target = bench_process("uretprobe-nop", "x86_64", "6.18")
    run_on_cpus(proc, 4, "producer_loop", 10, target)
    assert proc.scheduler is None and proc.cpu == 0 and not proc.utask.return_instances
    proc.call("producer_loop", 5, target)
    assert consumer.hits == 45


def test_a_thread_that_dies_kills_the_process():
    proc, _, _ = bench_process("uprobe-nop", "x86_64", "6.18")
    with pytest.raises(ProcessKilled, match="SIGSEGV"):
        run_on_cpus(proc, 4, 0x1000)
    assert proc.signal == "SIGSEGV"


@pytest.mark.parametrize("cpus", [0, 257, "2", True])
def test_a_cpu_count_outside_the_bench_s_range_is_refused(cpus):
    proc, _, target = bench_process("uprobe-nop", "x86_64", "6.18")
    with pytest.raises(LabError, match="cpus is an int from 1 to 256"):
        run_on_cpus(proc, cpus, "producer_loop", 1, target)


def test_bench_p_prints_exact_hits_per_kernel(capsys):
    assert main(["bench", "uprobe-nop", "uretprobe-nop", "-p", "2", "--kernel", "6.13", "--iterations", "50"]) == 0
    out = capsys.readouterr().out
    assert "uprobe-nop ( 2 cpus)" in out and "100 hits exact [x86_64 6.13]" in out
    assert main(["bench", "uprobe-nop", "-p", "2", "--mode", "model"]) == 2
    assert "-p is a --mode emulated or --mode native setting" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["uprobe-ret", "uretprobe-nop"])
def test_ctrl_c_stops_the_threads_and_leaves_the_process_usable(name, hang_guard):
    if in_a_run():
        pytest.skip("needs Python's own SIGINT handler (something else replaced it)")
    proc, consumer, target = bench_process(name, "x86_64", "6.18")
    done = threading.Event()
    thread = ctrl_c_once_running(done)
    try:
        with pytest.raises(KeyboardInterrupt):
            run_on_cpus(proc, 40, "producer_loop", 10 ** 6, target, switch_on_exit=1.0)
    finally:
        done.set()
        thread.join()
    assert proc.signal is None and proc.scheduler is None and not any(proc.mm.xol_area.bitmap[1:])
    before = consumer.hits
    proc.call("producer_loop", 40, target)
    assert consumer.hits - before == 40


def test_a_process_made_for_n_cpus_calls_on_all_of_them():
    import uprobe_lab as ul
    from uprobe_lab.smp import call_on_cpus

    proc = ul.new_process("arm64", "6.18", cpus=4)
    consumer = ul.CountingConsumer()
    ul.attach(proc, "uprobe_target_nop", consumer)
    sched = call_on_cpus(proc, "producer_loop", 25, proc.program.resolve("uprobe_target_nop"))
    assert consumer.hits == 100 and [t.cpu for t in sched.threads] == [0, 1, 2, 3]
    with pytest.raises(LabError, match="cpus is an int from 1 to 256"):
        ul.new_process(cpus=0)


def test_a_long_run_tells_its_progress_in_hits():
    """The scheduler looks at ``progress`` between slices; a bench with a probe tells it the hits so far, a few
    times a second, never more than the run makes."""
    proc, _, target = bench_process("uprobe-nop", "x86_64", "6.18")
    looked = []
    run_on_cpus(proc, 4, "producer_loop", 20, target, progress=lambda: looked.append(1))
    assert len(looked) > 1
    told = []
    t0 = time.monotonic()
    row = run_bench_on_cpus("uretprobe-ret", "x86_64", "6.8", iterations=1500, cpus=8, progress=told.append)
    took = time.monotonic() - t0  # about 1 s on an idle 2-core VM
    assert row["hits"] == 8 * 1500
    assert told == sorted(told) and all(0 < n < 8 * 1500 for n in told)
    assert len(told) >= max(2, int(took / 0.2) - 2)  # about every 0.2 s (-2: the warm-up and setup before the first)


def test_bench_p_draws_a_bar_of_calls_once_a_run_takes_over_a_second(capsys, monkeypatch):
    import uprobe_lab.cli as cli

    with monkeypatch.context() as m:
        m.setattr(cli, "PROGRESS_DELAY_S", 0.0)  # as if the run had taken longer than the delay: how fast it is varies
        assert main(["bench", "uretprobe-ret", "-p", "8", "--iterations", "2500", "--kernel", "6.8"]) == 0
    err = capsys.readouterr().err
    assert "uretprobe-ret:" in err and "/20000 [" in err and "call/s" in err  # 8 x 2500 calls
    assert main(["bench", "uprobe-nop", "-p", "2", "--iterations", "10", "--kernel", "6.18"]) == 0
    assert capsys.readouterr().err == ""  # a short run draws none
