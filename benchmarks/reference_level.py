"""Does the price benches' reference take the machine's state out of a row? Figures, not assertions.

    python benchmarks/reference_level.py [--rounds 8] [--round-seconds 0.5]

Times a few price-bench configurations the way :func:`uprobe_lab.native.price_benches.measure_price_rows`
does (interleaved rounds, each interval followed by one of the reference uprobe) and prints, per
configuration, the spread of its raw interval rates and of its rates over the reference interval next to
them (the 90th over the 10th percentile, and the round medians' coefficient of variation), and how far
apart its fast and slow raw intervals are (the median of the faster half over the median of the slower
half). On a shared virtual CPU that flips between a fast and a slow state, the raw rates are bimodal and
the ratios are not; a path that slows by as much as the reference does has the reference's fast/slow.
Needs root on Linux (native probes).
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from uprobe_lab.native import price_benches as pb  # noqa: E402
from uprobe_lab.native.support import check_native_support  # noqa: E402

CONFIGS = [("uprobe-nop", 1), ("uprobe-nop5", 1), ("syscall-count", 0), ("uprobe-ret", 1), ("uretprobe-nop", 1)]


def spread(values: list[float]) -> str:
    q = statistics.quantiles(values, n=10)
    return f"q90/q10 {q[-1] / q[0]:.3f}"


def fast_over_slow(values: list[float]) -> str:
    ordered = sorted(values)
    half = len(ordered) // 2
    return f"fast/slow {statistics.median(ordered[-half:]) / statistics.median(ordered[:half]):.2f}"


def cv(values: list[float]) -> str:
    return f"cv {100 * statistics.stdev(values) / statistics.fmean(values):5.1f}%"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--round-seconds", type=float, default=0.5)
    args = parser.parse_args()
    arch = check_native_support()
    states = {cfg: {} for cfg in CONFIGS}
    with pb.attached_run(arch, CONFIGS, states) as (reference, rigs):
        for _ in range(args.rounds):
            for cfg in CONFIGS:
                pb._round(rigs[cfg], *cfg, args.round_seconds, states[cfg], reference)
    scale, levels = pb.reference_levels({cfg: st["refs"] for cfg, st in states.items()})
    refs = [y for st in states.values() for r in st["refs"] for y in r]
    print(f"reference: typical {scale:.3f} M/s, round levels {min(levels):.2f}..{max(levels):.2f} "
          f"(sd {statistics.stdev(levels):.3f}); raw {spread(refs)}, {fast_over_slow(refs)}")
    for (bench, consumers), st in states.items():
        raw = [x for r in st["rounds"] for x in r]
        ratios = [x / y for r, refs in zip(st["rounds"], st["refs"]) for x, y in zip(r, refs)]
        raw_meds = [statistics.median(r) for r in st["rounds"]]
        ratio_meds = [statistics.median([x / y for x, y in zip(r, refs)]) for r, refs in zip(st["rounds"], st["refs"])]
        print(f"{bench:>15} x{consumers}: {len(raw)} intervals; raw {spread(raw)}, {fast_over_slow(raw)}, "
              f"round medians {cv(raw_meds)}"
              f" | over the reference {spread(ratios)}, round medians {cv(ratio_meds)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
