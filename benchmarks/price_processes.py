"""Do price-bench rows move between processes by more than each process states? Figures, not assertions.

    python benchmarks/price_processes.py [--processes 6] [--rounds 8] [--round-seconds 0.25] [--configs b:k,...]

Runs :func:`uprobe_lab.native.price_benches.measure_price_rows` in fresh processes one after the other
(``python -m uprobe_lab.native.price_benches``), each on the same few configurations. It prints a line per
process (each configuration's ratio over the reference, with the error the process stated), then a line per
configuration: the sd of its ratios between processes next to the median stated error. The ratio is what a row's error is about: the
reference's own rate, which moves with the whole machine, is left out of it.
Needs root on Linux (native probes).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CONFIGS = "uprobe-nop:1,uprobe-nop5:1,syscall-count:0,usermode-count:0,uretprobe-nop:1"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--round-seconds", type=float, default=0.25)
    parser.add_argument("--configs", default=CONFIGS, help="bench:consumers,...")
    args = parser.parse_args()
    if args.processes < 2:
        parser.error("--processes must be at least 2 to compare them")
    runs = []
    for i in range(args.processes):
        proc = subprocess.run([sys.executable, "-m", "uprobe_lab.native.price_benches", "--configs", args.configs,
                               "--rounds", str(args.rounds), "--budget", str(args.round_seconds * args.rounds),
                               "--rel-tol", "1"], capture_output=True, text=True, cwd=ROOT)
        if proc.returncode != 0:
            lines = proc.stderr.strip().splitlines()
            print(lines[-1] if lines else f"exit status {proc.returncode}", file=sys.stderr)
            return 1
        runs.append(json.loads(proc.stdout))
        print(f"process {i + 1}: " + ", ".join(f"{r['bench']} x{r['consumers']} {r['ratio']:.4g} "
                                               f"+-{100 * r['rel_err']:.1f}%" for r in runs[-1]), flush=True)
    if any([(r["bench"], r["consumers"]) for r in run] != [(r["bench"], r["consumers"]) for r in runs[0]]
           for run in runs):
        print("the processes measured different configurations (a 32-bit row left out in some?)", file=sys.stderr)
        return 1
    for rows in zip(*runs):
        ratios = [r["ratio"] for r in rows]
        print(f"{rows[0]['bench']:>15} x{rows[0]['consumers']}: between processes sd "
              f"{100 * statistics.stdev(ratios) / statistics.fmean(ratios):.2f}%, each process stated (median) "
              f"{100 * statistics.median(r['rel_err'] for r in rows):.2f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
