"""The model's tables for the CLI: ``bench --mode model``, ``reproduce``'s comparison, ``predict``."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd

from .. import bench as _bench
from ..process import LabError
from .fit import ROW_SIGMA_FLOOR, Z80
from .prices import ARM64_KERNEL, BENCH_ALIASES, events_for, kernel_label, kernel_setup
from .profiles import bench_rows, fit_with_carried_prior, get_profile
from ..kernel import DEFAULT_KERNEL, URETPROBES_SINCE, refuse_uretprobe_before, version_name
from ..published import format_bench_line

# Rows a calibration leans on, and what is left to the carried prior without them.
NEEDED_ROWS = {
    "uprobe-nop": "the int3 trap and handler prices (the scale of the carried prior)",
    "syscall-count": "the syscall price",
    "usermode-count": "the loop's price per instruction",
}


def format_comparison(repro: pd.DataFrame) -> str:
    """Published and model side by side in run_bench_uprobes.sh's ``name : x.xxx ± y.yyyM/s`` format; the
    model's ``±`` is its 80% interval's half-width (the larger side), then the error and the role."""

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


# Bounds on a measured rate (M/s): below MIN_MOPS is a unit mistake, not a uprobe (1000 calls/s); above
# MAX_MOPS no CPU runs even the plain loop (1e11 calls/s), and the fit's times per hit underflow toward 0.
MIN_MOPS = 0.001
MAX_MOPS = 1e5
# Rows of one bench that differ by more than this factor (carried to the target kernel) are not repeats of one
# measurement: run-to-run spread on the lab's hosts is a few percent, a unit slip or another machine is not.
CONFLICT_RATIO = 1.5


def repeats_combined(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per (bench, kernel): the mean rate of its repeats, and as its error the larger of the rows'
    own (root mean square: listing a figure twice does not make it more exact) and the standard error of
    the mean their spread shows. Refuses repeats that differ by more than CONFLICT_RATIO."""
    groups = rows.assign(err2=rows["rel_err"].astype(float) ** 2).groupby(["bench", "kernel"], sort=False)
    table = groups.agg(mops=("mops", "mean"), low=("mops", "min"), high=("mops", "max"), n=("mops", "size"),
                       sd=("mops", "std"), err2=("err2", "mean"))
    wide = table[table["high"] > CONFLICT_RATIO * table["low"]]
    if len(wide):
        (bench, kernel), r = wide.index[0], wide.iloc[0]
        raise LabError(f"the measured rows for {bench} on {kernel} disagree: {r['low']:g} and {r['high']:g} M/s "
                       f"(a factor of {r['high'] / r['low']:.3g}); repeats of one measurement differ by a few "
                       "percent - keep the right row, and give another machine's rows in a file of their own")
    spread = (table["sd"].fillna(0.0) / table["mops"] / np.sqrt(table["n"])).to_numpy()
    table["rel_err"] = np.maximum(np.sqrt(table["err2"].to_numpy()), spread)
    return table.reset_index()[["bench", "kernel", "mops", "rel_err"]]


def predict_from_measured(measured: pd.DataFrame, to_kernel: str) -> pd.DataFrame:
    """Fit a profile on an unseen machine's measurements (columns arch, kernel, bench, mops; optional
    rel_err; kernel may be a release such as 6.14.2) and predict the same benches on ``to_kernel``.

    Each prediction is the bench's own measurement times the model's ratio of its time per hit on the
    two kernels (a bench whose events do not change keeps its figure; one that gets slower in the input
    never gets faster in the output). A row without ``rel_err`` is taken to be good to 2%. The 80% interval combines the ratio's posterior uncertainty, the
    model error (for benches whose events change) and the row's own error.

    Several rows of one bench on one kernel are repeats, fitted and carried as their mean
    (:func:`repeats_combined`); a bench measured on several kernels is predicted from each, and the
    figures are combined weighted by their intervals. Rows of one bench that disagree by more than
    CONFLICT_RATIO are refused, not averaged.

    Returns bench, predicted_mops, low_80, high_80; ``.attrs["warnings"]`` names what the calibration
    lacked (each also issued as a UserWarning). Refuses tables with no probe row, several arches, or a
    rate that is not a positive number, and uretprobe rows for a ``to_kernel`` older than uretprobes (3.10)."""
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
    bad = rows[~(np.isfinite(rows["mops"]) & (rows["mops"] > 0) & (rows["mops"] <= MAX_MOPS))]
    if len(bad):  # a zero or negative rate would fit negative prices, a huge one times that underflow
        r, given = bad.iloc[0], measured.loc[bad.index[0], "mops"]
        given = repr(given) if isinstance(given, str) else given  # 'fast', but 1e+308, not np.float64(1e+308)
        raise LabError(f"measured row {r['bench']} has mops {given}; mops is a "
                       f"measured rate in millions of calls per second, a positive number of at most {MAX_MOPS:g}")
    rel_err = pd.to_numeric(rows["rel_err"], errors="coerce") if "rel_err" in rows else np.nan
    # a figure without its error is taken to be good to the model's floor (2%)
    rows = repeats_combined(rows.assign(rel_err=rel_err).fillna({"rel_err": ROW_SIGMA_FLOOR}))
    # each release read as the label of its modelled version (refusing an unknown one): what follows prices a
    # table of many releases by its few versions
    rows = rows.assign(kernel=rows["kernel"].map({k: kernel_label(arch, k) for k in rows["kernel"].unique()}))
    have = set(rows["bench"].unique())
    notes = [f"no {b} row: {what} is set by the prior carried from the host recordings"
             for b, what in NEEDED_ROWS.items() if b not in have]
    prof = fit_with_carried_prior(rows, arch, [], "measured", "measured machine")
    # the output is a table of figures, one per measured bench: a bench the target cannot run has none to give
    none = [b for b in have if _bench.bench_spec(BENCH_ALIASES.get(b, b), arch).probe == "uretprobe"
            and refuse_uretprobe_before(str(to_kernel), b)]
    if none:
        raise LabError(f"kernel {str(to_kernel).strip()} has no uretprobes (they came in Linux "
                       f"{version_name(URETPROBES_SINCE)}), so the measured rows of {', '.join(sorted(none))} cannot be "
                       f"carried to it: drop them from the measured table, or predict a release from "
                       f"{version_name(URETPROBES_SINCE)} on")
    notes += [f"fitted price {w}" for w in prof.warnings]
    for n in notes:
        warnings.warn(n, stacklevel=2)
    out = []
    for bench, group in rows.groupby("bench", sort=False):
        codes, kernels = pd.factorize(group["kernel"])
        change = np.array([prof.change(bench, k, str(to_kernel)) for k in kernels]).reshape(-1, 2)[codes]
        logs = np.log(group["mops"].to_numpy(float) * change[:, 0])
        halves = Z80 * np.hypot(change[:, 1], group["rel_err"].to_numpy(float))
        if logs.max() - logs.min() > math.log(CONFLICT_RATIO):
            raise LabError(f"the measured rows for {bench} disagree: carried to {to_kernel} they give "
                           f"{math.exp(logs.min()):.4g} and {math.exp(logs.max()):.4g} M/s; keep the right rows, and "
                           "give another machine's rows in a file of their own")
        weights = halves ** -2.0
        log_mops = float(np.dot(weights, logs) / weights.sum())
        # the parts share the fitted prices, so their errors are not independent: no narrower than the best
        half = float(halves.min())
        out.append({"bench": bench, "predicted_mops": math.exp(log_mops), "low_80": math.exp(log_mops - half),
                    "high_80": math.exp(log_mops + half)})
    result = pd.DataFrame(out, columns=["bench", "predicted_mops", "low_80", "high_80"])
    result.attrs["warnings"] = notes
    return result
