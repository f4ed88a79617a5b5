"""The native table on this host, and the ratios that show what the kernel optimised.

    python benchmarks/native_table.py [--iterations N] [--repeats R]

Needs root (CAP_SYS_ADMIN) on Linux. On a 6.18 kernel an optimised nop5 should run well ahead of the
page-crossing nop5 the kernel cannot optimise, and every single-stepped probe (ret) far behind an
emulated one (nop). Figures, not assertions.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from uprobe_lab.native import NativeUnavailable, run_native_benches  # noqa: E402

RATIOS = [
    ("uprobe-nop5", "uprobe-nop5-pagecross", "optimised nop5 vs page-crossing nop5 (int3)"),
    ("uretprobe-nop5", "uretprobe-nop5-pagecross", "optimised uretprobe-nop5 vs page-crossing"),
    ("uprobe-nop", "uprobe-ret", "emulated nop vs single-stepped ret"),
    ("syscall-count", "uprobe-nop", "a bare syscall vs an int3 probe hit"),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    try:
        rows = {r["bench"]: r for r in run_native_benches(iterations=args.iterations, repeats=args.repeats)}
    except NativeUnavailable as err:
        print(f"native benchmarks are not possible here: {err}", file=sys.stderr)
        return 2
    for r in rows.values():
        flag = {True: "optimised", False: "int3", None: ""}[r["optimized"]]
        print(f"{r['bench']:<26}: {r['mops']:8.3f} ± {r['stddev']:5.3f}M/s  {flag:<10} site {r['site_bytes']}")
    print()
    for fast, slow, what in RATIOS:
        print(f"{rows[fast]['mops'] / rows[slow]['mops']:6.2f}x  {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
