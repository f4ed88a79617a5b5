"""The contention model's protocol (docs/model.md, "Many CPUs" and "Many CPUs, version 2"): fit on the fitting
tables, score the held-out ones, for both versions.

    python benchmarks/contention_model.py [--rows]
    python benchmarks/contention_model.py --unseen RUN.json [RUN.json ...] --cores C
    python benchmarks/contention_model.py --unseen BENCH.txt [...] --cores C --kernel RELEASE

Prints v1's figures as its one run recorded them (the counts by field it had then), then v1's form and v2 on
today's counts by cache line: the fitted parameters per machine, the 80% interval, the scores against their
goals and, with --rows, every held-out row of v2 with its prediction and interval.

With --unseen, scores v2 instead on a table it has never seen: the files `bench --mode native -p N --json` wrote
on a machine of C physical cores (one run per N, the benches and the no-probe loop beside them), every row with
its prediction and 80% interval, then the median |error| and the share inside against the unseen table's goals.
A file that is not JSON is read as the kernel bench's output (its `Summary: hits` lines, or the `name (N cpus): X ±
S M/s (Y M/s/cpu)` lines of the 2024 tables), a 1-CPU run per bench among them and `usermode-count` (the no-probe
loop) at every N; --kernel says the release they ran on.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from uprobe_lab.errors import LabError  # noqa: E402
from uprobe_lab.model import contention, unseen  # noqa: E402


def scores(median: float, inside: float, peaks: tuple[int, int] | None, median_goal: float = 0.15) -> None:
    lines = [("median |error|", f"{median:.1%}", f"<= {median_goal:.0%}", median <= median_goal),
             ("inside 80% interval", f"{inside:.1%}", ">= 80%", inside >= 0.8)]
    if peaks is not None:
        lines.append(("peaks within one step", f"{peaks[0]} of {peaks[1]}", "all", peaks[0] == peaks[1]))
    for label, value, goal, met in lines:
        print(f"  {label:<22} {value:>10}  goal {goal:<7} {'goal met' if met else 'goal missed'}")


def read_runs(path: str, kernel: str | None) -> list:
    """A file's rows: the JSON `bench --json` wrote, or else the kernel bench's text lines, of release `kernel`."""
    with open(path) as f:
        text = f.read()
    try:
        data = json.loads(text)
    except ValueError:
        if kernel is None:
            raise LabError(f"{path} is not bench --json output, and text lines do not say their kernel: "
                           "pass --kernel RELEASE (the machine's uname -r)") from None
        return unseen.runs_from_bench_text(text, kernel)
    return data if isinstance(data, list) else [data]


def score_unseen(paths: list[str], cores: int, kernel: str | None = None) -> None:
    runs = [row for path in paths for row in read_runs(path, kernel)]
    result = unseen.score_unseen(runs, cores)
    low, high = result["interval_log"]
    print(f"v2 on an unseen table ({len(result['rows'])} rows at N >= 2, C = {cores}; 80% interval "
          f"x{math.exp(-high):.2f} .. x{math.exp(-low):.2f} of the prediction, from the fitting tables):")
    print("  m(N), the no-probe loop's per-CPU rate at N over 1: " +
          ", ".join(f"{n}: {m:.3f}" for n, m in sorted(result["machine_scaling"].items())))
    columns = ["bench", "config", "producers", "total_mops", "model_mops", "low", "high", "error"]
    print(result["rows"][columns].round(3).to_string(index=False))
    scores(result["median_abs_error"], result["inside_80"], None, median_goal=0.10)


def show(result: dict, title: str) -> None:
    print(title)
    for machine, (tau0, gamma, eta, *kappa) in result["params"].items():
        extra = f"  kappa = {kappa[0]:.3f}" if kappa else ""
        print(f"  {machine:<20} tau0 = {tau0:6.1f} ns  gamma = {gamma:.3f}  eta = {eta:.2f}{extra}")
    low, high = result["interval_log"]
    print(f"  80% interval: x{math.exp(-high):.2f} .. x{math.exp(-low):.2f} of the prediction "
          f"({result['fitting_rows']} fitting rows, leave one table out; {result['held_out_rows']} held-out rows)")
    peaks = sum(p["within_one_step"] for p in result["peaks"])
    scores(result["median_abs_error"], result["inside_80"], (peaks, len(result["peaks"])))
    for p in result["peaks"]:
        print(f"    {' / '.join(p['curve'])}: published peak {p['published_peak']}, model {p['model_peak']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", action="store_true", help="print every held-out row of v2")
    parser.add_argument("--unseen", nargs="+", metavar="RUN",
                        help="score v2 on these bench -p N --json runs or kernel bench '(N cpus)' text files")
    parser.add_argument("--cores", type=int, help="with --unseen: the machine's physical cores")
    parser.add_argument("--kernel", help="with --unseen text files: the release they ran on (uname -r)")
    args = parser.parse_args()
    if args.unseen:
        if args.cores is None:
            parser.error("--unseen needs --cores: the machine's physical core count")
        try:
            score_unseen(args.unseen, args.cores, args.kernel)
        except (LabError, OSError, ValueError) as err:  # a file that is missing, unreadable or of no bench
            sys.exit(f"error: {err}")
        return
    v1 = contention.V1_RECORDED
    print("v1 as recorded (counts by field, 129 held-out rows):")
    scores(v1["median_abs_error"], v1["inside_80"], v1["peaks"])
    show(contention.evaluate(1), "v1's form on the counts by cache line (not a version: v1's form, v2's counts):")
    result = contention.evaluate(2)
    show(result, "v2 (counts by cache line, the machine's own scaling; not blind on these tables):")
    if args.rows:
        columns = ["table", "config", "bench", "producers", "total_mops", "model_mops", "low", "high", "error"]
        print(result["held_out"][columns].round(3).to_string(index=False))


if __name__ == "__main__":
    main()
