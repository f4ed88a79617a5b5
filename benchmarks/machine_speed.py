"""How steady this machine's speed is: a fixed loop timed on the thread's CPU clock, over and over.

    python benchmarks/machine_speed.py [--seconds 8] [--every 0.1]

On a virtual CPU whose host is shared, the same work can take 10-60% longer from one second to the
next (another tenant on the sibling hyperthread, a frequency change), and time stolen by the host is
not the cause when /proc/stat's steal column stays near zero. Native figures measured minutes apart
then differ by as much, whatever their own error bars say: the printout shows the steps. Figures only.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time


def loop_rate(n: int = 200_000) -> float:
    """M iterations per second of a bare Python loop, on this thread's CPU clock."""
    t0 = time.thread_time_ns()
    i = 0
    while i < n:
        i += 1
    return n * 1e3 / max(time.thread_time_ns() - t0, 1)


def steal_ticks() -> int:
    with open("/proc/stat") as f:
        return int(f.readline().split()[8])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--every", type=float, default=0.1, help="seconds between printed samples")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    rates, shown, steal0 = [], [], steal_ticks()
    end = next_show = time.monotonic()
    end += args.seconds
    while time.monotonic() < end:
        rates.append(loop_rate())
        if time.monotonic() >= next_show:
            shown.append(rates[-1])
            next_show += args.every
    print(" ".join(f"{r:.1f}" for r in shown))
    print(f"{len(rates)} samples, M loops/s: median {statistics.median(rates):.2f}, min {min(rates):.2f}, "
          f"max {max(rates):.2f}, max/min {max(rates) / min(rates):.2f}, cv {100 * statistics.stdev(rates) / statistics.mean(rates):.1f}%; "
          f"steal ticks over the run: {steal_ticks() - steal0}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
