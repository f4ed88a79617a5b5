"""The contention model's protocol (docs/model.md, "Many CPUs"): fit on the fitting tables, score the held-out ones.

    python benchmarks/contention_model.py [--rows]

Prints the fitted parameters per machine, the 80% interval, the three scores against their goals and, with
--rows, every held-out row with its prediction and interval.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from uprobe_lab.model import contention  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", action="store_true", help="print every held-out row")
    args = parser.parse_args()
    result = contention.evaluate()
    for machine, (tau0, gamma, eta) in result["params"].items():
        print(f"{machine:<20} tau0 = {tau0:6.1f} ns  gamma = {gamma:.3f}  eta = {eta:.2f}")
    low, high = result["interval_log"]
    print(f"80% interval: x{2.718281828 ** -high:.2f} .. x{2.718281828 ** -low:.2f} of the prediction "
          f"({result['fitting_rows']} fitting rows, leave one table out)")
    peaks = sum(p["within_one_step"] for p in result["peaks"])
    for label, value, goal, met in (
            ("median |error|", f"{result['median_abs_error']:.1%}", "<= 15%", result["median_abs_error"] <= 0.15),
            ("inside 80% interval", f"{result['inside_80']:.1%}", ">= 80%", result["inside_80"] >= 0.8),
            ("peaks within one step", f"{peaks} of {len(result['peaks'])}", "all", peaks == len(result["peaks"]))):
        print(f"{label:<22} {value:>10}  goal {goal:<7} {'goal met' if met else 'goal missed'}")
    for p in result["peaks"]:
        print(f"  {' / '.join(p['curve'])}: published peak {p['published_peak']}, model {p['model_peak']}")
    if args.rows:
        columns = ["table", "config", "bench", "producers", "total_mops", "model_mops", "low", "high", "error"]
        print(result["held_out"][columns].round(3).to_string(index=False))


if __name__ == "__main__":
    main()
