"""The model's tables for the CLI: ``bench --mode model``, ``reproduce``'s comparison, ``predict``."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd

from .. import bench as _bench
from ..process import LabError
from .fit import ROW_SIGMA_FLOOR, Z80
from .prices import ARM64_KERNEL, events_for, kernel_setup
from .profiles import bench_rows, fit_with_carried_prior, get_profile

# Rows a calibration leans on, and what is left to the carried prior without them.
NEEDED_ROWS = {
    "uprobe-nop": "the int3 trap and handler prices (the scale of the carried prior)",
    "syscall-count": "the syscall price",
    "usermode-count": "the loop's price per instruction",
}


def format_comparison(repro: pd.DataFrame) -> str:
    """Published and model side by side in run_bench_uprobes.sh's ``name : x.xxx ± y.yyyM/s`` format; the
    model's ``±`` is its 80% interval's half-width (the larger side), then the error and the role."""
    from ..published import format_bench_line

    pub = bench_rows().reset_index(drop=True)
    blocks = []
    for (source, table, variant), grp in repro.groupby(["source", "table", "variant"], sort=False):
        first = grp.iloc[0]
        dup = f" [repeats {first['duplicate_of']}: not counted]" if first["duplicate_of"] else ""
        lines = [f"{source} {table} {variant} ({first['cpu']}, kernel {first['kernel']}) "
                 f"- published | model, 80% interval{dup}:"]
        for r in grp.itertuples(index=False):
            match = pub[(pub["source"] == source) & (pub["table"] == table) & (pub["variant"] == variant)
                        & (pub["bench"] == r.bench)]
            pm = float(match["pm"].iloc[0]) if len(match) else None
            half = max(r.predicted_mops - r.low_mops, r.high_mops - r.predicted_mops)
            mark = "in " if r.inside else "OUT"
            lines.append(format_bench_line(r.bench, r.published_mops, pm)
                         + f" | {r.predicted_mops:8.3f} \u00b1 {half:5.3f}M/s  {r.error_pct:+6.1f}% {mark} [{r.role}]")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def model_table(names=None, arch: str = "x86_64", kernel=None, cpu: str | None = None, **options) -> list[dict]:
    """The model's bench table for a CPU profile: [{bench, mops, stddev, low, high, mode, ...}]; stddev is
    the predictive standard deviation in M/s (the 80% interval's width / 2.563)."""
    from ..kernel import DEFAULT_KERNEL

    prof = get_profile(cpu, arch)
    if prof.arch != arch:
        raise LabError(f"profile {prof.name} is {prof.arch}, not {arch}")
    kernel = str(kernel or (ARM64_KERNEL if arch == "arm64" else DEFAULT_KERNEL))
    out = []
    for name in list(names or _bench.bench_names(arch)):
        ev = events_for(name, arch, kernel, **options)
        t, _ = prof.hit_interval(ev)
        mops, lo, hi = prof.interval(name, kernel, **options)
        out.append({"bench": name, "mops": round(mops, 3), "stddev": round((hi - lo) / (2 * Z80), 3),
                    "low": round(lo, 3), "high": round(hi, 3), "mode": "model", "arch": arch, "kernel": kernel,
                    "cpu": prof.name, "ns_per_hit": round(t, 1), "events_per_hit": ev})
    return out


def predict_from_measured(measured: pd.DataFrame, to_kernel: str) -> pd.DataFrame:
    """Fit a profile on an unseen machine's measurements (columns arch, kernel, bench, mops; optional
    rel_err; kernel may be a release such as 6.14.2) and predict the same benches on ``to_kernel``.

    Each prediction is the bench's own measurement times the model's ratio of its time per hit on the
    two kernels (a bench whose events do not change keeps its figure; one that gets slower in the input
    never gets faster in the output). A row without ``rel_err`` is taken to be good to 2%. The 80% interval combines the ratio's posterior uncertainty, the
    model error (for benches whose events change) and the row's own error.

    Returns bench, predicted_mops, low_80, high_80; ``.attrs["warnings"]`` names what the calibration
    lacked (each also issued as a UserWarning). Refuses tables with no probe row, several arches, or a
    rate that is not a positive number."""
    missing = {"arch", "kernel", "bench", "mops"} - set(measured.columns)
    if missing:
        raise LabError(f"measured table lacks columns: {', '.join(sorted(missing))}")
    arches = set(measured["arch"].astype(str))
    if len(arches) != 1:
        raise LabError(f"measured rows must be from one architecture, got {sorted(arches)}")
    arch = arches.pop()
    kernel_setup(arch, str(to_kernel))  # refuse an unknown target before fitting
    rows = measured.assign(kernel=measured["kernel"].astype(str),
                           mops=pd.to_numeric(measured["mops"], errors="coerce").astype(float))
    bad = rows[~(np.isfinite(rows["mops"]) & (rows["mops"] > 0))]
    if len(bad):  # a zero or negative rate would fit negative prices and predict nonsense
        r = bad.iloc[0]
        raise LabError(f"measured row {r['bench']} has mops {measured.loc[bad.index[0], 'mops']!r}; mops is a "
                       "measured rate in millions of calls per second, a positive number")
    if "rel_err" not in rows:  # a figure without its error is taken to be good to the model's floor (2%)
        rows["rel_err"] = ROW_SIGMA_FLOOR
    rows["rel_err"] = rows["rel_err"].fillna(ROW_SIGMA_FLOOR)
    for k in rows["kernel"]:
        kernel_setup(arch, k)
    notes = [f"no {b} row: {what} is set by the prior carried from the host recordings"
             for b, what in NEEDED_ROWS.items() if b not in set(rows["bench"])]
    prof = fit_with_carried_prior(rows, arch, [], "measured", "measured machine")
    notes += [f"fitted price {w}" for w in prof.warnings]
    for n in notes:
        warnings.warn(n, stacklevel=2)
    out = []
    for r in rows.drop_duplicates("bench").itertuples(index=False):
        speedup, log_sd = prof.change(r.bench, r.kernel, str(to_kernel))
        mops = float(r.mops) * speedup
        half = Z80 * math.hypot(log_sd, float(r.rel_err))
        out.append({"bench": r.bench, "predicted_mops": mops, "low_80": mops * math.exp(-half),
                    "high_80": mops * math.exp(half)})
    result = pd.DataFrame(out, columns=["bench", "predicted_mops", "low_80", "high_80"])
    result.attrs["warnings"] = notes
    return result
