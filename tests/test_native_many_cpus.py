"""bench --mode native -p N: producers pinned one per CPU on this host's kernel, one probe, exact hits, nothing left."""
import os
import signal
import threading

import capstone
import pytest

from uprobe_lab import LabError
from uprobe_lab.cli import main
from uprobe_lab.native.bpf import counter_program
from uprobe_lab.native.many_cpus import producer_cpus, run_native_benches_on_cpus
from native_support import native, perf_fds, require_bpf
from test_native import fd_count, mapped_bench_files

CPUS = min(2, len(os.sched_getaffinity(0)))


def test_the_per_cpu_counter_keys_by_the_cpu_as_the_bench_does():
    md = capstone.Cs(capstone.CS_ARCH_BPF, capstone.CS_MODE_BPF_EXTENDED)
    text = [f"{i.mnemonic} {i.op_str}".strip() for i in md.disasm(counter_program(7, per_cpu=True), 0)]
    # key = bpf_get_smp_processor_id() & 255 (helper 8), stored where the one-slot program stores 0
    assert text[:3] == ["call 0x8", "and64 r0, 0xff", "stxw [r10+0xfffc], r0"]
    one = [f"{i.mnemonic} {i.op_str}".strip() for i in md.disasm(counter_program(7), 0)]
    assert text[3:] == one[1:]


def test_more_producers_than_cpus_is_refused_with_the_count():
    allowed = len(os.sched_getaffinity(0))
    with pytest.raises(LabError, match=f"lets the lab run on {allowed} CPU"):
        producer_cpus(allowed + 1)
    assert producer_cpus(1) == [min(os.sched_getaffinity(0))]


def _nothing_left(before_fds, before_mask):
    assert fd_count() == before_fds and not perf_fds() and not mapped_bench_files()
    assert os.sched_getaffinity(0) == before_mask
    assert not [t for t in threading.enumerate() if t.name.startswith("producer-cpu")]


@native
@pytest.mark.xdist_group("native-table")  # the CPUs to itself, as the native table
def test_every_producer_s_hits_are_counted_and_nothing_is_left():
    require_bpf()
    before_fds, before_mask = fd_count(), os.sched_getaffinity(0)
    rows = run_native_benches_on_cpus(["uprobe-nop", "uretprobe-nop", "uprobe-ret"], CPUS, iterations=20_000, repeats=2)
    for row in rows:
        assert row["hits"] == CPUS * 20_000 * 2, row
        assert row["cpus"] == CPUS and row["mops_per_cpu"] == pytest.approx(row["mops"] / CPUS)
    _nothing_left(before_fds, before_mask)


@native
@pytest.mark.xdist_group("native-table")
def test_ctrl_c_stops_every_producer_and_releases_the_probe():
    require_bpf()
    before_fds, before_mask = fd_count(), os.sched_getaffinity(0)

    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("needs Python's own SIGINT handler")
    ctrl_c = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))  # while the producers run
    ctrl_c.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_native_benches_on_cpus(["uprobe-nop"], CPUS, iterations=10 ** 9, repeats=3)
    finally:
        ctrl_c.cancel()
    _nothing_left(before_fds, before_mask)


@native
@pytest.mark.xdist_group("native-table")
def test_bench_native_p_prints_the_kernel_bench_s_line(capsys):
    require_bpf()
    assert main(["bench", "uprobe-nop", "--mode", "native", "-p", str(CPUS), "--iterations", "20000"]) == 0
    out = capsys.readouterr().out
    assert f"uprobe-nop ({CPUS:2} cpus)" in out and "M/s/cpu" in out and f"[native, {CPUS * 20000 * 5} hits]" in out
