"""The kernel bench's ``-p N -a`` on this host: N producer threads, one pinned to each of N CPUs, one probe.

As tools/testing/selftests/bpf/bench.c does it: each producer thread is pinned to the next CPU (``-a``,
``next_cpu()`` from CPU 0 up) and calls the target in a loop; the BPF consumer counts each hit in its CPU's
slot (``hits[cpu & CPU_MASK]``: :class:`.bpf.BpfCounter` with ``per_cpu``), so the counter shares no line
between CPUs and only the kernel's own sharing shows. A timed interval starts when every thread has been
released at once and ends when the last has made its ``iterations`` calls; ``mops`` is the total rate,
``mops_per_cpu`` that over N, as the bench prints ``(N cpus): X M/s (Y M/s/cpu)``.

The threads call native code through ctypes, which lets go of Python's lock for the call, so they do run
at once. Ctrl-C stops them within one chunk of calls (``CHUNK``), and the probe, the counter, the mapping
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
from .bench import _cpu_lock, available_benches, cpu_lock_holder, open_bench_event
from .bpf import BpfCounter
from .code import NativeCode
from .host import kernel_release
from .support import check_native_support

LOCK_WAIT_S = 300  # how long a CPU another lab bench holds is waited for
CHUNK = 1 << 16  # calls per ctypes call: a thread looks for a stop between two
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
def _held_cpu(cpu: int, wait_s: float = LOCK_WAIT_S):
    """Hold ``cpu``'s lab bench lock for the block, waiting up to ``wait_s`` for another lab bench to let go of it:
    each producer needs its CPU to itself. A wait is said on stderr at once: who holds the CPU, for how long
    this bench waits, and that Ctrl-C stops it."""
    deadline = time.monotonic() + wait_s
    said = None
    while True:
        with _cpu_lock(cpu) as mine:
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
        for _ in range(repeats):
            start.wait()
            left = iterations
            while left and not stop.is_set():
                calls = min(left, CHUNK)
                nc.run(addr, calls)
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
                               repeats: int = DEFAULT_REPEATS, progress=None,
                               lock_wait_s: float = LOCK_WAIT_S) -> list[dict]:
    """``bench --mode native -p N``: each bench with N producers pinned to this host's first N CPUs (each CPU's
    lab lock held, so another lab bench does not share them). One row per bench: bench, arch, mode, kernel,
    cpus, iterations, repeats, hits (counted by the BPF consumer), mops, mops_per_cpu, stddev."""
    if isinstance(names, str):
        raise ValueError(f"names is a list of bench names: run_native_benches_on_cpus([{names!r}], ...)")
    if not (is_int(iterations) and is_int(repeats)) or iterations < 1 or repeats < 1:
        raise ValueError(f"iterations and repeats are ints >= 1, got {iterations!r} and {repeats!r}")
    arch = check_native_support(None)
    chosen = producer_cpus(cpus)
    with contextlib.ExitStack() as held, NativeCode(arch) as nc:
        for cpu in chosen:
            held.enter_context(_held_cpu(cpu, lock_wait_s))
        have = available_benches(nc.program)
        wanted = list(names or MANY_CPU_BENCHES)
        unknown = [n for n in wanted if n not in have]
        if unknown:
            raise ValueError(f"unknown native bench(es) {', '.join(unknown)}; known: {', '.join(have)}")
        return [run_native_bench_on_cpus(nc, n, chosen, iterations, repeats, progress) for n in wanted]
