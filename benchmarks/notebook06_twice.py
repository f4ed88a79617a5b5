"""Run chapter 06 twice on this machine and say whether the two runs agree within their intervals.

    python benchmarks/notebook06_twice.py [--runs 2]

Each run executes notebooks/06_your_machine.ipynb top to bottom in its own kernel (nbclient), as a learner
would, and keeps the chapter's "predict the other kernels" table (``pred``). The runs are then compared
with :func:`uprobe_lab.native.calibrate.runs_agree`: is each run's predicted figure inside the other run's
80% interval? And each predicted speedup from the measured kernel (a ratio within one run, which a step in
the whole machine's speed between the runs does not move)? Each pair's closest call says how much of its
interval the nearest miss used, and a table gives each price row run by run, how far it moved between the
runs (also over the run's uprobe-nop row) and the error the runs stated for it. Figures, not assertions. Needs root on Linux for native runs; elsewhere both runs calibrate
the bundled recording and agree trivially, which the script says.
"""
from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
from pathlib import Path

import nbformat
import pandas as pd
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from uprobe_lab.native import calibrate  # noqa: E402

NOTEBOOK = ROOT / "notebooks" / "06_your_machine.ipynb"
SAVE = ("print('ROWS_CSV'); print(profile.measured.to_csv(index=False)); "
        "print('PRED_CSV'); print(pred.to_csv(index=False)); "
        "print('SOURCE', price_source, '| left out:', ', '.join(profile.dropped) or 'none')")


def run_once() -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """Execute chapter 06 once; its prediction table, the price rows it calibrated on, and where they came from."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(SAVE))
    with tempfile.TemporaryDirectory() as tmp:
        env_path = os.environ.get("PYTHONPATH", "")
        os.environ["PYTHONPATH"] = f"{ROOT}{os.pathsep}{env_path}" if env_path else str(ROOT)
        NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": tmp}}).execute()
    text = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.get("output_type") == "stream")
    rows_csv, _, rest = text.partition("ROWS_CSV\n")[2].partition("PRED_CSV\n")
    csv, _, source = rest.rpartition("SOURCE ")
    return pd.read_csv(io.StringIO(csv)), pd.read_csv(io.StringIO(rows_csv)), source.strip()


def rows_between_runs(price_rows: list[pd.DataFrame]) -> pd.DataFrame:
    """Per price row: its figure in each run, how much it moved between the runs (cv), the same over the
    run's uprobe-nop x1 row (the whole machine's speed cancels: what the speedups see), and the error the
    runs stated for it (median rel_err): a row that moves by more than it says breaks the agreement."""
    both = pd.concat([r.assign(run=i + 1) for i, r in enumerate(price_rows)])
    wide = both.pivot_table(index=["bench", "consumers"], columns="run", values="mops", sort=False)
    if ("uprobe-nop", 1) not in wide.index:
        raise SystemExit("the runs' price rows have no uprobe-nop x1 row to compare the others with")
    relative = wide / wide.loc[("uprobe-nop", 1)]
    out = wide.round(3).rename(columns=lambda c: f"run {c}")
    out.columns.name = None
    out["between_cv_pct"] = (100 * wide.std(axis=1) / wide.mean(axis=1)).round(1)
    out["over_nop_cv_pct"] = (100 * relative.std(axis=1) / relative.mean(axis=1)).round(1)
    out["stated_pct"] = (100 * both.groupby(["bench", "consumers"], sort=False)["rel_err"].median()).round(1)
    return out.reset_index()


def half_widths(pred: pd.DataFrame, change: bool = False) -> pd.Series:
    """Each prediction's (or predicted speedup's) 80% interval half-width, % of the figure (the wider side).
    Speedups between kernels with the same events are exactly 1, with no interval: left out."""
    out = []
    for k in calibrate.kernel_columns(pred):
        col = f"{k} change" if change else k
        moved = pred[pred[col] != 1.0] if change else pred
        out.append(100 * pd.concat([moved[col] - moved[f"{col} low"], moved[f"{col} high"] - moved[col]],
                                   axis=1).max(axis=1) / moved[col])
    return pd.concat(out, ignore_index=True)


def closest_call(same: pd.DataFrame) -> tuple[float, str]:
    """The largest share of an interval side that a gap between the runs used, over a runs_agree table's
    rows and both directions (below 1: every figure inside the other run's interval), and where."""
    if same.empty:
        return 0.0, "nothing to compare"
    shares = same[["a_share", "b_share"]].max(axis=1)
    r = same.loc[shares.idxmax()]
    return float(shares.max()), f"{r.bench} on {r.kernel}: {r.run_a:.3f} against {r.run_b:.3f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2, help="runs to make; every pair is compared")
    args = parser.parse_args()
    runs, price_rows = [], []
    for i in range(args.runs):
        pred, rows, source = run_once()
        price_rows.append(rows)
        hw, hw_change = half_widths(pred), half_widths(pred, change=True)
        print(f"run {i + 1}: price rows {source}; interval half-widths median {hw.median():.1f}%, "
              f"widest {hw.max():.1f}%; speedups' median {hw_change.median():.1f}%, widest {hw_change.max():.1f}%")
        runs.append(pred)
    kernels = calibrate.kernel_columns(runs[0])
    if len(runs) > 1:
        print("\nprice rows, run by run (M/s):\n" + rows_between_runs(price_rows).to_string(index=False))
    for i in range(len(runs)):
        for j in range(i + 1, len(runs)):
            for what, change in (("predictions", False), ("predicted speedups (those not exactly 1)", True)):
                same = calibrate.runs_agree(runs[i], runs[j], kernels=kernels, change=change)
                if change:  # the same events on both kernels: 1 in every run, nothing to compare
                    same = same[(same["run_a"] != 1.0) | (same["run_b"] != 1.0)]
                both = same["a_in_b"] & same["b_in_a"]
                print(f"\nruns {i + 1} and {j + 1}: {int(both.sum())} of {len(same)} {what} inside each other's "
                      f"80% interval ({int(same['a_in_b'].sum())} of run {i + 1}'s in run {j + 1}'s, "
                      f"{int(same['b_in_a'].sum())} the other way)")
                print(same[~both].to_string(index=False) if (~both).any() else "  (no disagreement)")
                worst, where = closest_call(same)
                print(f"  closest call: {100 * worst:.0f}% of the interval side it had to stay within ({where})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
