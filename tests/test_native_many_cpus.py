"""bench --mode native -p N: producers pinned one per CPU on this host's kernel, one probe, exact hits, nothing left."""
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time

import capstone
import pytest

from uprobe_lab import LabError
from uprobe_lab.cli import main
from uprobe_lab.native.bpf import counter_program
from uprobe_lab.native.many_cpus import producer_cpus, run_native_benches_on_cpus
from native_support import cpu_held_elsewhere, native, perf_fds, require_bpf
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
def test_bench_native_p_prints_the_kernel_bench_s_line_and_the_machine_s_baselines(capsys):
    require_bpf()
    if CPUS < 2:
        pytest.skip("the baselines' scaling needs 2 CPUs; this process may run on one")
    before_fds, before_mask = fd_count(), os.sched_getaffinity(0)
    first = min(before_mask)
    argv = ["bench", "uprobe-nop", "--mode", "native", "-p", "2", "--iterations", "20000"]
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("uprobe-nop ( 2 cpus)") and "M/s/cpu" in out[0] and "[native, 200000 hits]" in out[0]
    assert out[1].startswith("  per CPU ") and f"x its rate on CPU {first} alone (" in out[1]
    assert "x the no-probe loop's scaling and " in out[1] and out[1].endswith("x the syscall loop's scaling")
    assert out[2].startswith("usermode-count ( 2 cpus)")
    assert out[3].startswith("  the no-probe loop, a baseline: per CPU")
    assert out[4].startswith("syscall-count ( 2 cpus)") and out[5].startswith("  the syscall loop, a baseline: per CPU")

    assert main(argv + ["--json"]) == 0
    nop, loop, syscall = rows = json.loads(capsys.readouterr().out)
    assert [r["bench"] for r in rows] == ["uprobe-nop", "usermode-count", "syscall-count"]
    assert nop["hits"] == 2 * 20_000 * 5 and nop["iterations"] == 20_000
    for row in rows:
        assert row["cpus"] == 2 and row["one_cpu"]["cpu"] == first
        assert row["scaling"] == pytest.approx(row["mops_per_cpu"] / row["one_cpu"]["mops_per_cpu"])
    # plausible: per CPU, a call with nothing in it is faster than a syscall, which is faster than a trap to a probe
    for rate in (lambda r: r["mops_per_cpu"], lambda r: r["one_cpu"]["mops_per_cpu"]):
        assert rate(loop) > rate(syscall) > rate(nop), rows
    # the baselines' intervals last as long as the bench's, so a faster loop makes more calls in each
    assert loop["lasts_as_long_as"] == syscall["lasts_as_long_as"] == "uprobe-nop"
    assert loop["iterations"] > syscall["iterations"] > nop["iterations"]
    assert nop["ratio_of"] == "scaling" and nop["baseline_ratios"] == pytest.approx(
        {"usermode-count": nop["scaling"] / loop["scaling"], "syscall-count": nop["scaling"] / syscall["scaling"]})
    _nothing_left(before_fds, before_mask)


@native
def test_a_busy_cpu_is_waited_for_out_loud_within_2_s(monkeypatch, tmp_path):
    """Another bench holds CPU 0 (locks in a directory of this test's own): the -p run says at once who holds it,
    how long it waits and how to stop, then gives up with a LabError when the wait is over."""
    from uprobe_lab.native.bench import CPU_LOCK_DIR_ENV

    require_bpf()
    monkeypatch.setenv(CPU_LOCK_DIR_ENV, str(tmp_path))
    said = []

    class Stamped(io.StringIO):
        def write(self, text):
            said.append((time.monotonic(), text))
            return len(text)

    monkeypatch.setattr(sys, "stderr", Stamped())
    with cpu_held_elsewhere(min(os.sched_getaffinity(0)), tmp_path) as pid:
        t0 = time.monotonic()
        with pytest.raises(LabError, match=f"pid {pid}"):
            run_native_benches_on_cpus(["uprobe-nop"], CPUS, iterations=1000, repeats=1, lock_wait_s=3)
    first, text = said[0]
    assert first - t0 < 2 and f"pid {pid} (" in text and "up to 3 s more" in text and "Ctrl-C to stop" in text


@native
def test_ctrl_c_stops_a_bench_waiting_for_a_cpu(tmp_path):
    from uprobe_lab.native.bench import CPU_LOCK_DIR_ENV

    require_bpf()
    env = {**os.environ, CPU_LOCK_DIR_ENV: str(tmp_path)}
    with cpu_held_elsewhere(min(os.sched_getaffinity(0)), tmp_path) as pid:
        bench = subprocess.Popen([sys.executable, "-m", "uprobe_lab", "bench", "uprobe-nop", "--mode", "native",
                                  "-p", str(CPUS), "--iterations", "1000"], stderr=subprocess.PIPE, text=True, env=env)
        try:
            line = bench.stderr.readline()
            assert line.startswith("waiting for CPU") and f"pid {pid} (" in line and "Ctrl-C to stop" in line
            bench.send_signal(signal.SIGINT)
            assert bench.wait(timeout=30) == 130
            assert bench.stderr.read().strip() == "interrupted"
        finally:
            bench.kill()
            bench.wait()
