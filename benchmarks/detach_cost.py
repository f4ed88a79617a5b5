"""What attaching and detaching a perf uprobe costs here: why the price benches attach each probe once.

    python benchmarks/detach_cost.py [--repeats 3]

Opens 1, 2, 4 and 8 perf uprobe events (one BPF consumer on them) on the bench's uprobe-nop target, runs
it, then closes the events one after another, and again from one thread per event. Closing an event
unregisters its uprobe consumer, and the kernel then waits until no handler can still be running it
(``uprobe_unregister_sync`` in kernel/events/uprobes.c: RCU grace periods), so a close costs far more
than an open; whether closes from several threads overlap says whether those waits are shared. Prints
median milliseconds. Figures, not assertions.
Needs root on Linux (native probes).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from uprobe_lab.bench import bench_spec  # noqa: E402
from uprobe_lab.native.bpf import BpfCounter  # noqa: E402
from uprobe_lab.native.code import NativeCode  # noqa: E402
from uprobe_lab.native.perf import open_uprobe  # noqa: E402
from uprobe_lab.native.support import check_native_support  # noqa: E402


def close_all(fds: list[int], threaded: bool) -> None:
    if not threaded:
        for fd in fds:
            os.close(fd)
        return
    threads = [threading.Thread(target=os.close, args=(fd,)) for fd in fds]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def one_cycle(nc: NativeCode, target: str, n: int, threaded: bool) -> tuple[float, float]:
    """(ms to open n events, ms to close them) with the probe hit in between."""
    t0 = time.perf_counter()
    fds = [open_uprobe(nc.path, nc.offset(target)) for _ in range(n)]
    opened = time.perf_counter()
    try:
        with BpfCounter() as counter:
            for fd in fds:
                counter.attach(fd)
            nc.run(nc.addr(target), 2000)
    finally:
        t1 = time.perf_counter()
        close_all(fds, threaded)
    return 1e3 * (opened - t0), 1e3 * (time.perf_counter() - t1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    arch = check_native_support()
    target = bench_spec("uprobe-nop", arch).target
    with NativeCode(arch) as nc:
        for threaded in (False, True):
            for n in (1, 2, 4, 8):
                cycles = [one_cycle(nc, target, n, threaded) for _ in range(args.repeats)]
                open_ms = statistics.median(c[0] for c in cycles)
                close_ms = statistics.median(c[1] for c in cycles)
                how = "one thread each" if threaded else "one after another"
                print(f"{n} events: open {open_ms:6.1f} ms, close ({how}) {close_ms:6.1f} ms, "
                      f"{close_ms / n:5.1f} ms per event")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
