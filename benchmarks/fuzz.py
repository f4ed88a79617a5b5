"""Long profile of the differential fuzzer (uprobe_lab.fuzz).

    python benchmarks/fuzz.py --programs 500 --seed 1 --arch all

Prints programs x mechanisms tried (probe runs per mechanism and per kernel/options) and the
divergences by class; every BUG divergence is printed with its reproducer (seed, config, probe,
differences, listing). Exit status 1 if there is any BUG divergence.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from tqdm import tqdm

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from uprobe_lab.fuzz import TARGETS, fuzz  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--programs", type=int, default=200, help="programs per architecture")
    p.add_argument("--seed", type=int, default=1, help="program i uses seed + i")
    p.add_argument("--arch", choices=[*TARGETS, "all"], default="all")
    p.add_argument("--sites", type=int, default=0, help="random entry-probe sites per program and config "
                   "besides the nop5/nop10 sites (0: every instruction)")
    p.add_argument("--size", type=int, default=None, help="instructions in the generated body")
    args = p.parse_args(argv)
    start = time.time()
    with tqdm(total=args.programs * (len(TARGETS) if args.arch == "all" else 1), unit="prog") as bar:
        def progress(result):
            bar.update(1)
            bar.set_postfix(runs=result.probe_runs, bugs=len(result.bugs))

        result = fuzz(args.arch, args.programs, args.seed, sites=args.sites or None, size=args.size,
                      progress=progress)
    print(f"{result.programs} programs x {len(result.mechanisms)} mechanisms tried "
          f"({result.probe_runs} probe runs, {time.time() - start:.0f} s)")
    print(result.summary())
    for bug in result.bugs:
        print("\n" + str(bug))
    return 1 if result.bugs else 0


if __name__ == "__main__":
    sys.exit(main())
