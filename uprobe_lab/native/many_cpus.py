"""The kernel bench's ``-p N -a`` on this host: N producer threads, one pinned to each of N CPUs, one probe.

As tools/testing/selftests/bpf/bench.c does it: each producer thread is pinned to the next CPU (``-a``,
``next_cpu()`` from CPU 0 up) and calls the target in a loop; the BPF consumer counts each hit in its CPU's
slot (``hits[cpu & CPU_MASK]``: :class:`.bpf.BpfCounter` with ``per_cpu``), so the counter shares no line
between CPUs and only the kernel's own sharing shows. A timed interval starts when every thread has been
released at once and ends when the last has made its ``iterations`` calls; ``mops`` is the total rate,
``mops_per_cpu`` that over N, as the bench prints ``(N cpus): X M/s (Y M/s/cpu)``. The CLI's run adds the
machine's own scaling (:mod:`uprobe_lab.machine_scaling`): the no-probe and syscall loops on the same CPUs,
and every row run on the first CPU alone as well.

The threads call native code through ctypes, which lets go of Python's lock for the call, so they do run
at once. Ctrl-C stops them within one chunk of calls (``CHUNK_S``), and the probe, the counter, the mapping
and every CPU's pin are released before the KeyboardInterrupt goes on.
"""
from __future__ import annotations

import contextlib
import os
import statistics
import sys
import threading
import time
from typing import Callable, Iterable

from ..bench import bench_spec
from ..errors import LabError, is_int
from .bench import calls_filling, cpu_lock, cpu_lock_holder, host_benches, open_bench_event
from .bpf import BpfCounter
from .code import NativeCode
from .host import kernel_release
from ..machine_scaling import BASELINES, compare_with_baselines, interval_seconds
from .support import check_native_support

LOCK_WAIT_S = 300  # how long a CPU another lab bench holds is waited for
CHUNK = 1 << 16  # calls of a thread's first ctypes call; it looks for a stop between two
# how long the later ones last: a no-probe loop makes 2**16 calls in 0.1 ms, and two threads taking Python's lock
# back that often kept 0.89-0.93 of its one-CPU rate at 2 CPUs on the lab's VM, where 10 ms chunks keep 1.01-1.03
CHUNK_S = 0.01
DEFAULT_ITERATIONS = 200_000  # calls per thread per timed interval
DEFAULT_REPEATS = 3
MANY_CPU_BENCHES = ("uprobe-nop", "uretprobe-nop", "uprobe-ret")  # the scaling tables' benches, when none is named


def producer_cpus(cpus: int) -> list[int]:
    """The first ``cpus`` CPUs this process may run on, as ``-a`` takes them; a LabError when there are fewer."""
    allowed = sorted(os.sched_getaffinity(0))
    if not is_int(cpus) or not 1 <= cpus <= len(allowed):
        raise LabError(f"-p {cpus!r}: this machine lets the lab run on {len(allowed)} CPU(s) "
                       f"({', '.join(map(str, allowed))}), one producer per CPU; give -p 1 to {len(allowed)}, "
                       "or use --mode emulated for more")
    return allowed[:cpus]


@contextlib.contextmanager
def held_cpu(cpu: int, wait_s: float = LOCK_WAIT_S):
    """Hold ``cpu``'s lab bench lock for the block, waiting up to ``wait_s`` for another lab bench to let go of it:
    each producer needs its CPU to itself. A wait is said on stderr at once: who holds the CPU, for how long
    this bench waits, and that Ctrl-C stops it."""
    deadline = time.monotonic() + wait_s
    said = None
    while True:
        with cpu_lock(cpu) as mine:
            if mine:
                yield
                return
        holder = cpu_lock_holder(cpu)
        if time.monotonic() > deadline:
            raise LabError(f"CPU {cpu} ran another lab bench ({holder}) for the {wait_s:g} s waited: each producer "
                           "needs a CPU of its own; let the other finish, or give a smaller -p")
        if holder != said:
            print(f"waiting for CPU {cpu}: {holder} is benchmarking on it; waiting up to "
                  f"{max(deadline - time.monotonic(), 0):.0f} s more for it to finish (Ctrl-C to stop)",
                  file=sys.stderr, flush=True)
            said = holder
        time.sleep(0.2)


def _producer(nc: NativeCode, addr: int, cpu: int, iterations: int, start: threading.Barrier,
              done: threading.Barrier, stop: threading.Event, repeats: int, errors: list) -> None:
    try:
        os.sched_setaffinity(0, {cpu})  # pid 0 from a thread: this thread only
        chunk = CHUNK
        for _ in range(repeats):
            start.wait()
            left = iterations
            while left and not stop.is_set():
                calls = min(left, chunk)
                t0 = time.perf_counter()
                nc.run(addr, calls)
                chunk = max(CHUNK, int(calls * CHUNK_S / max(time.perf_counter() - t0, 1e-9)))
                left -= calls
            done.wait()
    except threading.BrokenBarrierError:
        pass
    except BaseException as err:  # handed to the main thread, which raises it
        errors.append(err)
        stop.set()
        start.abort()
        done.abort()


def _timed(nc: NativeCode, addr: int, cpus: list[int], iterations: int, repeats: int,
           progress: Callable[[int], object] | None) -> list[float]:
    """Total M calls/s of each timed interval, ``len(cpus)`` threads each making ``iterations`` calls."""
    start, done = threading.Barrier(len(cpus) + 1), threading.Barrier(len(cpus) + 1)
    stop, errors = threading.Event(), []
    threads = [threading.Thread(target=_producer, args=(nc, addr, cpu, iterations, start, done, stop, repeats, errors),
                                name=f"producer-cpu{cpu}", daemon=True) for cpu in cpus]
    for t in threads:
        t.start()
    rates = []
    try:
        for _ in range(repeats):
            start.wait()
            t0 = time.perf_counter_ns()
            done.wait()
            rates.append(len(cpus) * iterations * 1e3 / max(time.perf_counter_ns() - t0, 1))
            if progress is not None:
                progress(1)
    except threading.BrokenBarrierError:
        pass
    finally:  # Ctrl-C or a thread's error: stop every thread before the probe goes
        stop.set()
        start.abort()
        done.abort()
        for t in threads:
            t.join()
    if errors:
        raise errors[0]
    return rates


def run_native_bench_on_cpus(nc: NativeCode, name: str, cpus: list[int], iterations: int = DEFAULT_ITERATIONS,
                             repeats: int = DEFAULT_REPEATS, progress=None) -> dict:
    """One bench with a producer on each of ``cpus``; the probe is gone when this returns or raises."""
    bench = bench_spec(name, nc.arch)
    addr = nc.addr(bench.target)
    row = {"bench": name, "arch": nc.arch, "mode": "native", "kernel": kernel_release(), "cpus": len(cpus),
           "iterations": iterations, "repeats": repeats}
    with contextlib.ExitStack() as stack:
        counter = None
        if bench.probe is not None:
            ev, _, _, refused = open_bench_event(nc, name, row["kernel"])
            if refused:
                return refused
            stack.callback(ev.close)
            counter = stack.enter_context(BpfCounter(per_cpu=True))
            counter.attach(ev.fd)
        _timed(nc, addr, cpus, max(1_000, iterations // 10), 1, None)  # warm-up: every CPU, sites optimised
        before = counter.count() if counter else 0
        rates = _timed(nc, addr, cpus, iterations, repeats, progress)
        hits = counter.count() - before if counter else len(cpus) * iterations * repeats
    mops = statistics.fmean(rates)
    row.update(hits=hits, mops=mops, mops_per_cpu=mops / len(cpus),
               stddev=statistics.stdev(rates) if len(rates) > 1 else 0.0)
    return row


def run_native_benches_on_cpus(names: Iterable[str] | None, cpus: int, iterations: int = DEFAULT_ITERATIONS,
                               repeats: int = DEFAULT_REPEATS, progress=None, lock_wait_s: float = LOCK_WAIT_S,
                               baselines: bool = False, one_cpu: bool = False) -> list[dict]:
    """``bench --mode native -p N``: each bench with N producers pinned to this host's first N CPUs (each CPU's
    lab lock held, so another lab bench does not share them). One row per bench: bench, arch, mode, kernel,
    cpus, iterations, repeats, hits (counted by the BPF consumer), mops, mops_per_cpu, stddev.

    baselines  also run the machine's baselines (uprobe_lab.machine_scaling.BASELINES: the no-probe loop and
               the syscall loop) on the same CPUs, each interval as long as the shortest bench's
               (``lasts_as_long_as`` names it); their rows come last, unless ``names`` has them
    one_cpu    also run every row on the first of the CPUs alone: ``one_cpu`` {cpu, mops_per_cpu, stddev} and
               ``scaling``, and each bench's ``baseline_ratios`` (machine_scaling.compare_with_baselines)
    """
    if isinstance(names, str):
        raise ValueError(f"names is a list of bench names: run_native_benches_on_cpus([{names!r}], ...)")
    if not (is_int(iterations) and is_int(repeats)) or iterations < 1 or repeats < 1:
        raise ValueError(f"iterations and repeats are ints >= 1, got {iterations!r} and {repeats!r}")
    arch = check_native_support(None)
    wanted = list(names or MANY_CPU_BENCHES)
    host_benches(arch, wanted)
    chosen = producer_cpus(cpus)
    with contextlib.ExitStack() as held, NativeCode(arch) as nc:
        for cpu in chosen:
            held.enter_context(held_cpu(cpu, lock_wait_s))
        rows = [_run_row(nc, n, chosen, iterations, repeats, progress, one_cpu) for n in wanted]
        if baselines:
            rows += _run_baselines(nc, [b for b in BASELINES if b not in wanted], rows, chosen, iterations, repeats,
                                   progress, one_cpu)
    return compare_with_baselines(rows) if baselines or one_cpu else rows


def runs_planned(names: Iterable[str] | None, cpus: int, baselines: bool = False, one_cpu: bool = False) -> int:
    """How many timed runs (each ``repeats`` intervals) :func:`run_native_benches_on_cpus` makes: a progress total."""
    wanted = list(names or MANY_CPU_BENCHES)
    rows = len(wanted) + (sum(b not in wanted for b in BASELINES) if baselines else 0)
    return rows * (2 if one_cpu and cpus > 1 else 1)


def _run_row(nc: NativeCode, name: str, cpus: list[int], iterations: int, repeats: int, progress,
             one_cpu: bool) -> dict:
    """One bench on ``cpus`` and then, if asked and there are several, on the first of them alone."""
    row = run_native_bench_on_cpus(nc, name, cpus, iterations, repeats, progress)
    if one_cpu and len(cpus) > 1 and not row.get("refused"):
        alone = run_native_bench_on_cpus(nc, name, cpus[:1], iterations, repeats, progress)
        row["one_cpu"] = {"cpu": cpus[0], "mops_per_cpu": alone["mops_per_cpu"], "stddev": alone["stddev"]}
    return row


def _run_baselines(nc: NativeCode, names: list[str], rows: list[dict], cpus: list[int], iterations: int,
                   repeats: int, progress, one_cpu: bool) -> list[dict]:
    """The baselines' rows, each interval as long as the shortest measured bench's (``iterations`` calls when no
    bench was measured). Not as many calls: a no-probe loop makes them a hundred times faster than a probed one,
    in intervals so short that thread start-up and the barriers weigh as much as the calls. Not the longest: a
    stepped bench's intervals can last seconds, and the baselines would take longer than the benches."""
    shortest = min((r for r in rows if r.get("mops_per_cpu")), key=interval_seconds, default=None)
    out = []
    for name in names:
        if shortest is None:
            out.append(_run_row(nc, name, cpus, iterations, repeats, progress, one_cpu))
            continue
        calls = _calls_lasting(nc, name, cpus, interval_seconds(shortest))
        out.append({**_run_row(nc, name, cpus, calls, repeats, progress, one_cpu),
                    "lasts_as_long_as": shortest["bench"]})
    return out


def _calls_lasting(nc: NativeCode, name: str, cpus: list[int], seconds: float) -> int:
    """Calls per producer of bench ``name`` (one without a probe) that fill ``seconds`` on ``cpus``, from trial
    intervals grown until one lasts bench.CALIBRATION_S (or ``seconds``, if shorter)."""
    addr = nc.addr(bench_spec(name, nc.arch).target)
    return calls_filling(seconds, lambda calls: _timed(nc, addr, cpus, calls, 1, None)[0] / len(cpus))
