"""Do price-bench figures move between processes by more than each process states? Figures, not assertions.

    python benchmarks/price_processes.py [--processes 6] [--rounds 8] [--round-seconds 0.25]

Runs :func:`uprobe_lab.native.price_benches.measure_price_rows` in fresh processes one after the other
(``python -m uprobe_lab.native.price_benches``), each on the same few configurations, and prints per
configuration each process's ratio over the reference with the error it stated, the sd of those ratios
between processes, and the error :func:`~uprobe_lab.native.price_benches.combine_processes` gives their
mean. A process that states less than the processes move is what combine_processes is for.
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
sys.path.insert(0, str(ROOT))

from uprobe_lab.native import price_benches as pb  # noqa: E402

CONFIGS = "uprobe-nop:1,uprobe-nop5:1,syscall-count:0,usermode-count:0,uretprobe-nop:1"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--round-seconds", type=float, default=0.25)
    parser.add_argument("--configs", default=CONFIGS)
    args = parser.parse_args()
    runs = []
    for i in range(args.processes):
        proc = subprocess.run([sys.executable, "-m", "uprobe_lab.native.price_benches", "--configs", args.configs,
                               "--rounds", str(args.rounds), "--budget", str(args.round_seconds * args.rounds),
                               "--rel-tol", "1"], capture_output=True, text=True, cwd=ROOT)
        if proc.returncode != 0:
            print(proc.stderr.strip().splitlines()[-1], file=sys.stderr)
            return 1
        runs.append(json.loads(proc.stdout))
        print(f"process {i + 1}: " + ", ".join(f"{r['bench']} x{r['consumers']} {r['ratio']:.4g} "
                                               f"+-{100 * r['rel_err']:.1f}%" for r in runs[-1]), flush=True)
    combined = pb.combine_processes(runs, rel_tol=1.0) if len(runs) <= max(pb.T80_OVER_Z80) + 1 else None
    for i, rows in enumerate(zip(*runs)):
        ratios = [r["ratio"] for r in rows]
        between = 100 * statistics.stdev(ratios) / statistics.fmean(ratios)
        stated = 100 * statistics.median(r["rel_err"] for r in rows)
        line = (f"{rows[0]['bench']:>15} x{rows[0]['consumers']}: between processes sd {between:.2f}%, "
                f"each process stated (median) {stated:.2f}%")
        if combined:
            line += f"; their mean +-{100 * combined[i]['rel_err']:.2f}%"
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
