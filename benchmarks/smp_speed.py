"""How fast the emulator runs many CPUs: emulated hits/s with N threads (bench -p N) against one thread, same run.

    python benchmarks/smp_speed.py [--hits N]

Each bench runs the same number of hits in total at every N (N threads x hits/N calls), so the ratio is what the
scheduler's context switches and the shared-line bookkeeping cost per hit. The goal: with 64 threads, at least
half the one-thread rate (a 64-CPU chapter cell should cost at most twice a one-CPU one).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from uprobe_lab.bench import bench_process  # noqa: E402
from uprobe_lab.smp import run_on_cpus  # noqa: E402

GOAL_RATIO_64 = 0.5


def rate(bench: str, kernel: str, cpus: int, hits: int) -> float:
    proc, consumer, target = bench_process(bench, "x86_64", kernel)
    proc.call("producer_loop", 4, target)
    before = consumer.hits
    t0 = time.perf_counter()
    run_on_cpus(proc, cpus, "producer_loop", hits // cpus, target)
    return (consumer.hits - before) / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hits", type=int, default=12_800)
    args = parser.parse_args()
    for bench, kernel in (("uprobe-nop", "6.10"), ("uprobe-nop", "6.18"), ("uretprobe-nop", "6.18"),
                          ("uprobe-ret", "6.18")):
        base = rate(bench, kernel, 1, args.hits)
        cells = [f"1 cpu {base / 1e3:6.1f}k hits/s"]
        for n in (8, 64):
            r = rate(bench, kernel, n, args.hits)
            cells.append(f"{n} cpus {r / 1e3:6.1f}k ({r / base:.2f}x)")
            if n == 64:
                met = "goal met" if r / base >= GOAL_RATIO_64 else "goal missed"
        print(f"{bench:<14} {kernel:<5} " + "  ".join(cells) + f"  [64 cpus >= {GOAL_RATIO_64}x: {met}]")


if __name__ == "__main__":
    main()
