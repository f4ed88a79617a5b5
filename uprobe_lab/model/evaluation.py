"""The evaluation protocol (see :mod:`uprobe_lab.model`), in code: every published M/s row predicted with
an 80% interval, each held-out row marked moved or unmoved, duplicates marked, and the headline figures.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..published import source_label
from .fit import Profile
from .prices import events_for
from .profiles import (PROFILES, ROLE_FIT, ROLE_HELDOUT, bench_rows, fit_with_carried_prior, get_profile,
                       moved_heldout, outside_rows)

ROLE_MOVED, ROLE_UNMOVED = "moved", "unmoved"
REPRO_COLUMNS = ["source", "table", "cpu", "arch", "bench", "variant", "kernel", "published_mops",
                 "predicted_mops", "low_mops", "high_mops", "error_pct", "half_width_pct", "inside", "role",
                 "duplicate_of"]


def _roles(rows: pd.DataFrame) -> list[str]:
    """fit / moved / unmoved per row (held-out rows compared with their table's before row)."""
    before = {}
    for r in rows[rows["role"] == ROLE_FIT].itertuples(index=False):
        before.setdefault((r.source, r.table, r.bench), str(r.kernel))
    out = []
    for r in rows.itertuples(index=False):
        if r.role == ROLE_FIT:
            out.append(ROLE_FIT)
            continue
        k0 = before.get((r.source, r.table, r.bench))
        same = k0 is not None and events_for(r.bench, r.arch, str(r.kernel)) == events_for(r.bench, r.arch, k0)
        out.append(ROLE_UNMOVED if same else ROLE_MOVED)
    return out


def _predict_rows(rows: pd.DataFrame, profile_for) -> pd.DataFrame:
    out = []
    for r, role in zip(rows.itertuples(index=False), _roles(rows)):
        prof: Profile = profile_for(r)
        pred, lo, hi = prof.interval(r.bench, str(r.kernel))
        half = 100 * max(pred - lo, hi - pred) / pred
        out.append({"source": r.source, "table": r.table, "cpu": r.cpu, "arch": r.arch, "bench": r.bench,
                    "variant": r.variant, "kernel": r.kernel, "published_mops": r.value,
                    "predicted_mops": pred, "low_mops": lo, "high_mops": hi,
                    "error_pct": 100 * (pred / r.value - 1), "half_width_pct": half,
                    "inside": bool(lo <= r.value <= hi), "role": role, "duplicate_of": r.duplicate_of})
    return pd.DataFrame(out, columns=REPRO_COLUMNS)


def reproduction(progress=None) -> pd.DataFrame:
    """Every published M/s row with the CPU profile's prediction and 80% interval, and its role."""
    by_cpu = {cpu: name for name, (cpu, _) in PROFILES.items()}

    def profile_for(r):
        if progress:
            progress(f"{source_label(r.source)} {r.bench}")
        return get_profile(by_cpu[r.cpu])

    return _predict_rows(bench_rows(), profile_for)


def per_table_alone(progress=None, rows: pd.DataFrame | None = None) -> pd.DataFrame:
    """Like :func:`reproduction`, but each non-duplicate seed table (or table of ``rows``, as
    :func:`.profiles.bench_rows` gives them) is fitted on its own current rows alone (and its prior
    leaves out only the host rows its own moved rows test)."""
    rows = bench_rows() if rows is None else rows
    rows = rows[rows["duplicate_of"] == ""]
    parts = []
    for (source, table), grp in rows.groupby(["source", "table"], sort=False):
        fit_rows = grp[grp["role"] == ROLE_FIT].rename(columns={"value": "mops"})
        arch, cpu = grp["arch"].iloc[0], grp["cpu"].iloc[0]
        prof = fit_with_carried_prior(fit_rows, arch, moved_heldout(grp), f"{source_label(source)} {table}", cpu)
        if progress:
            progress(f"{source_label(source)} {table}")
        parts.append(_predict_rows(grp, lambda r, p=prof: p))
    return pd.concat(parts, ignore_index=True)


def outside_seeds_alone(progress=None) -> pd.DataFrame:
    """Protocol rule 8: every table posted outside the seeds, each fitted on its own before rows alone."""
    return per_table_alone(progress, outside_rows())


def moved_rows(repro: pd.DataFrame) -> pd.DataFrame:
    """The rows that test a prediction: moved held-out rows of non-duplicate tables."""
    return repro[(repro["role"] == ROLE_MOVED) & (repro["duplicate_of"] == "")]


def coverage_tail(n: int, inside: int, level: float = 0.8) -> float:
    """P(at most ``inside`` of ``n`` rows inside) when each row falls inside a calibrated ``level`` interval
    independently: how surprising a coverage below the level is on so few rows. Rows that share a cause
    (one CPU's rows, one path) are not independent; that makes a low count likelier still, so the figure
    understates how little a few rows can say about the intervals."""
    return sum(math.comb(n, k) * level ** k * (1 - level) ** (n - k) for k in range(inside + 1))


def headline(repro: pd.DataFrame) -> dict:
    """Moved rows: count, median |error| %, coverage (share inside their 80% interval) with its binomial tail
    (:func:`coverage_tail`), widest half-width %; unmoved rows apart: count and median |error| %."""
    mv = moved_rows(repro)
    un = repro[(repro["role"] == ROLE_UNMOVED) & (repro["duplicate_of"] == "")]
    inside = int(mv["inside"].sum())
    return {"moved_rows": len(mv), "moved_median_abs_err_pct": float(mv["error_pct"].abs().median()),
            "moved_coverage": float(mv["inside"].mean()) if len(mv) else math.nan,
            "moved_coverage_tail": coverage_tail(len(mv), inside) if len(mv) else math.nan,
            "moved_max_half_width_pct": float(mv["half_width_pct"].max()),
            "moved_median_half_width_pct": float(mv["half_width_pct"].median()),
            "unmoved_rows": len(un), "unmoved_median_abs_err_pct": float(un["error_pct"].abs().median()),
            "unmoved_coverage": float(un["inside"].mean()) if len(un) else math.nan}


# The protocol's targets for the moved rows (the module doc of uprobe_lab.model): (headline key, goal, at most?)
TARGETS = (("moved_median_abs_err_pct", 5.0, True), ("moved_coverage", 0.80, False),
           ("moved_max_half_width_pct", 15.0, True))


def targets_met(h: dict) -> dict[str, bool]:
    """Per target of :data:`TARGETS`: whether the headline ``h`` meets it."""
    return {key: (h[key] <= goal) if at_most else (h[key] >= goal) for key, goal, at_most in TARGETS}


def targets_text(h: dict) -> str:
    """The headline against the protocol's targets, each said met or missed."""
    met = targets_met(h)
    said = {"moved_median_abs_err_pct": lambda v, g: f"median |error| {v:.1f}% (target <= {g:g}%)",
            "moved_coverage": lambda v, g: f"{100 * v:.0f}% of the moved rows inside their 80% intervals "
                                            f"(target >= {100 * g:.0f}%)",
            "moved_max_half_width_pct": lambda v, g: f"widest half-width {v:.1f}% (target <= {g:g}%)"}
    parts = [f"{said[key](h[key], goal)}: {'met' if met[key] else 'missed'}" for key, goal, _ in TARGETS]
    missed = [key for key in met if not met[key]]
    verdict = ("every target met" if not missed else
               f"{len(missed)} of {len(TARGETS)} targets missed")
    return f"Against the protocol's targets, {verdict}: " + "; ".join(parts) + "."


def headline_text(h: dict, what: str) -> str:
    return (f"{what}: {h['moved_rows']} moved rows, median |error| {h['moved_median_abs_err_pct']:.1f}%, "
            f"{100 * h['moved_coverage']:.0f}% inside their 80% intervals (half-width median "
            f"{h['moved_median_half_width_pct']:.1f}%, widest {h['moved_max_half_width_pct']:.1f}%; "
            f"chance of as few inside were the intervals right: {h['moved_coverage_tail']:.2f}); "
            f"apart: {h['unmoved_rows']} unmoved held-out rows, median |error| "
            f"{h['unmoved_median_abs_err_pct']:.1f}%, {100 * h['unmoved_coverage']:.0f}% inside")


def error_summary(repro: pd.DataFrame) -> pd.DataFrame:
    """Per non-duplicate seed table: fit rows' median |error|, unmoved and moved rows apart (count,
    median |error|, coverage, widest half-width)."""
    out = []
    for (source, table), grp in repro[repro["duplicate_of"] == ""].groupby(["source", "table"], sort=False):
        fit = grp[grp["role"] == ROLE_FIT]
        un = grp[grp["role"] == ROLE_UNMOVED]
        mv = grp[grp["role"] == ROLE_MOVED]
        out.append({"source": source_label(source), "table": table, "fit_rows": len(fit),
                    "fit_median_abs_err": fit["error_pct"].abs().median(),
                    "unmoved_rows": len(un), "unmoved_median_abs_err": un["error_pct"].abs().median(),
                    "moved_rows": len(mv), "moved_median_abs_err": mv["error_pct"].abs().median(),
                    "moved_inside": int(mv["inside"].sum()),
                    "moved_max_half_width": mv["half_width_pct"].max() if len(mv) else np.nan})
    return pd.DataFrame(out)


__all__ = ["REPRO_COLUMNS", "ROLE_FIT", "ROLE_HELDOUT", "ROLE_MOVED", "ROLE_UNMOVED", "coverage_tail", "error_summary", "headline",
           "headline_text", "moved_rows", "TARGETS", "targets_met", "targets_text", "outside_seeds_alone", "per_table_alone", "reproduction"]
