"""A "this machine" profile: the cost model fitted on native figures, with intervals, and what it predicts.

The rows to calibrate on are :mod:`.price_benches`' (the consumer scan and one bench per event kind,
each timed to a stated relative error); :func:`.price_benches.price_rows_or_recorded` measures them here or hands back
the bundled recording, saying which. Native rows name their kernel as ``uname -r``
(``6.18.44-fc-v857``); :func:`uprobe_lab.kernel.modelled_kernel` maps a release to the modelled version it hits like
(a 6.14 kernel behaves as 6.11, a 6.19 as 6.18, a 7.2.3 as 6.18).

A calibration refuses rows noisier than its tolerance (``rel_tol``, the row's relative error of the
figure) and names them; a fitted price outside :data:`uprobe_lab.model.PLAUSIBLE_NS` comes back in
``profile.warnings`` (and as a UserWarning). The prior is the bundled host recordings' prices carried
across (as for the published CPUs, :mod:`uprobe_lab.model.priors`: ratios, +-40% each, and the two
recordings' spread). With the consumer
scan among the rows the data separate the trap from the handler themselves and outweigh it; the prior
matters when a noisy row is left out: a price only that row pinned stays at the recordings' ratio with
its spread, and the calibration says so (a warning naming the price and the rows left out; ``prior alone``
in :func:`prices_table`). Under an uninformative prior it was set by whatever combination of the remaining rows
happened to touch it (on a busy VM, leaving usermode-count out fitted user_insn at -35 ns and predicted
usermode-count at 0.8 M/s against 400 measured).
"""
from __future__ import annotations

import functools
import math
import warnings

import pandas as pd

from .. import model
from ..bench import bench_names
from ..kernel import KERNELS, row_for_release
from ..model import fit as fitmod
from ..errors import shown
from ..process import LabError

PROFILE_NAME = "this-machine"
REL_TOL = 0.05


@functools.lru_cache(maxsize=None)
def native_table_prices(arch: str) -> frozenset[str]:
    """The prices some bench of the native table counts on some kernel it is predicted for: an unpinned
    one of these makes a prediction meaningless (no such bench pins a page or wakes a futex)."""
    counted = set()
    for bench in bench_names(arch):
        for kernel in KERNELS:
            try:
                counts = model.price_counts(model.events_for(bench, arch, kernel))
            except LabError:
                continue  # a probe that kernel refuses (a nop10 before 7.3 or 7.2.6)
            counted.update(p for p, c in zip(model.PRICE_NAMES, counts) if c)
    return frozenset(counted)


def figure_rel_err(r: dict) -> float:
    """A native row's relative error: its own ``rel_err`` (price rows), else the standard error of a mean
    over ``repeats`` timed intervals, stddev / mops / sqrt(repeats) (bench-table rows)."""
    if "rel_err" in r:
        return float(r["rel_err"])
    mops, sd, n = float(r["mops"]), float(r.get("stddev", 0.0)), int(r.get("repeats", 1) or 1)
    return sd / mops / math.sqrt(n) if mops > 0 else math.inf


ROW_KEYS = ("arch", "kernel", "bench", "mops")
ROWS_FROM = ("a native result dict, as in run_native_benches(), price_benches.price_rows_or_recorded()[0] or "
             "example.load_example()['benches']")


def check_row(i: int, r) -> None:
    """Refuse a native row that lacks a key the calibration reads, or whose rate is no rate."""
    if isinstance(r, dict) and "refused" in r:  # bench.refused_row: a probe this kernel refuses measured nothing
        raise LabError(f"row {i} ({shown(r.get('bench'))}) has no rate: {r['refused']}; leave it out of the rows")
    missing = [k for k in ROW_KEYS if not isinstance(r, dict) or k not in r]
    if missing:
        raise LabError(f"row {i}, {shown(r)}, lacks {', '.join(missing)}: each row is {ROWS_FROM}, with "
                       f"{', '.join(ROW_KEYS)}")
    try:
        mops = float(r["mops"])
    except (TypeError, ValueError):
        mops = math.nan
    if not 0 < mops < math.inf:  # NaN too
        raise LabError(f"row {i} ({shown(r['bench'])}) has mops={shown(r['mops'])}: a rate of hits in millions a "
                       "second is a finite number above 0 (a bench that ran no hit measured nothing); measure it "
                       "again or leave the row out")


def measured_frame(rows: list[dict]) -> pd.DataFrame:
    """Native result dicts (bench table or price-bench rows) -> arch, kernel, release, bench, consumers,
    mops, stddev, rel_err (relative error of the figure: price rows carry it, a bench row's is
    stddev / mops / sqrt(repeats))."""
    if not isinstance(rows, (list, tuple)):
        raise LabError(f"the rows are a list, each {ROWS_FROM}; got {shown(rows)}")
    out = []
    for i, r in enumerate(rows):
        check_row(i, r)
        kernel = row_for_release(r["kernel"])[0]  # older than every modelled version: the oldest answers
        out.append({"arch": r["arch"], "kernel": kernel, "release": r["kernel"], "bench": r["bench"],
                    "consumers": int(r.get("consumers", 1) or 1), "mops": float(r["mops"]),
                    "stddev": float(r.get("stddev", float(r["mops"]) * float(r.get("rel_err", 0.0)))),
                    "rel_err": figure_rel_err(r)})
    return pd.DataFrame(out, columns=["arch", "kernel", "release", "bench", "consumers", "mops", "stddev", "rel_err"])


def machine_state_note(rows: list[dict]) -> str:
    """What the price rows say of the machine's speed states (:func:`.price_benches.slower_state`), in a sentence."""
    r = next((r for r in rows if "machine_states" in r), None)
    if r is None:
        return "these rows do not say which speed states their run saw (recorded before the price benches told them apart)"
    if r["machine_states"] == 1:
        return "the machine kept one speed while the price benches ran: every interval of theirs counts"
    return (f"the machine ran at two speeds, {r['fast_over_slow']:.2f} times apart: the figures are the slower state's "
            f"({100 * r['state_share']:.0f}% of the reference's intervals), since how long each state lasts changes "
            "from run to run more than their speeds do")


SPEED_BENCH = "uprobe-nop"  # the one bench both runs measure alike: one int3 probe and one consumer on a `nop; ret`
SPEED_TOL_MAX = 0.10  # errors allowing more than this: a difference the size of the VM's two states hides in them


def run_speed_note(native_rows: list[dict], prof: model.Profile) -> str:
    """Whether the native table ran at the machine speed the price benches saw, in a sentence: the one bench
    both runs measure alike (``SPEED_BENCH``, one consumer) in each, against twice their combined error (the
    two rows' own and the machine's movement between rounds, ``level_sd``, once for each run)."""
    def rate(frame: pd.DataFrame):
        row = frame[(frame["bench"] == SPEED_BENCH) & (frame["consumers"] == 1)]
        return (float(row["mops"].iloc[0]), float(row["rel_err"].iloc[0])) if len(row) else None
    prices = rate(prof.measured) if isinstance(prof.measured, pd.DataFrame) else None
    table = rate(measured_frame(native_rows))
    if prices is None or table is None:
        return (f"the native table and the price benches do not both have {SPEED_BENCH}: "
                "whether they ran at one machine speed is unknown")
    (p, p_err), (t, t_err) = prices, table
    tol = 2 * math.sqrt(p_err ** 2 + t_err ** 2 + 2 * prof.level_sd ** 2)
    change = t / p - 1
    if abs(change) <= tol < SPEED_TOL_MAX:
        return (f"the native table ran at the price benches' speed: {SPEED_BENCH} {t:.3g} M/s against {p:.3g}, "
                f"within {100 * tol:.1f}%")
    if abs(change) <= tol:
        return (f"whether the native table ran at the price benches' speed its rows are too noisy to tell: "
                f"{SPEED_BENCH} {t:.3g} M/s against {p:.3g} ({100 * change:+.0f}%), within the {100 * tol:.0f}% their "
                "errors allow")
    return (f"the native table ran at another speed than the price benches: {SPEED_BENCH} {t:.3g} M/s against "
            f"{p:.3g}, {100 * abs(change):.0f}% {'slower' if change < 0 else 'faster'} (more than the "
            f"{100 * tol:.1f}% their errors allow), so expect the table's rows about that much off the model")


def model_error_note(prof: model.Profile, shown: int = 3) -> str:
    """The model's own error on a calibration's rows (``sigma_model``, which every predicted interval carries)
    and the rows furthest from the fit (:func:`..model.fit.misfits`), in a sentence."""
    worst = ", ".join(f"{label} {100 * abs(r):.1f}% {'slower' if r > 0 else 'faster'}"
                      for label, r in fitmod.misfits(prof)[:shown])
    return (f"the model's own error on these rows is {100 * prof.sigma_model:.1f}% (at least "
            f"{100 * fitmod.ROW_SIGMA_FLOOR:.0f}%), in every interval below; furthest from the fitted prices "
            f"(the row's time against the model's): {worst}")


VM_STEP_NOTE = ("; expected on a virtual machine, as these rows' is: its hypervisor intercepts the single "
                "step's #DB (benchmarks/single_step_trap.py)")
VM_CARRIED_STEP_NOTE = ("; on a virtual machine the step's price is its hypervisor's #DB intercept, which the "
                        "recorded machines' hypervisors need not share")


def left_to_prior(prof: model.Profile) -> list[str]:
    """The prices some native-table bench counts that the rows left to the carried prior
    (:func:`..model.fit.prior_only`): what a calibration warns of and :func:`prices_table` marks."""
    return [p for p in fitmod.prior_only(prof) if p in native_table_prices(prof.arch)]


def prior_only_note(prof: model.Profile, prices: list[str], dropped: list[str], virtualised: bool) -> str:
    """A warning naming the prices the rows left to the carried prior (:func:`..model.fit.prior_only`),
    with what that prior says and, when rows were left out as noisy, which ones."""
    report = prof.report().set_index("price")
    told = ", ".join(f"{p} {report.loc[p, 'ns']:.0f} +- {report.loc[p, 'sd']:.0f} ns" for p in prices)
    why = "no row kept here pins them" + (f" (left out as too noisy: {', '.join(dropped)})" if dropped else "")
    note = (f"set by the prior alone, carried from the recorded machines: {told}; {why}; every prediction that "
            "counts them stands on that prior, not on this machine")
    return note + (VM_CARRIED_STEP_NOTE if virtualised and "xol_step" in prices else "")


def calibrate(rows: list[dict], cpu: str = "this machine", rel_tol: float = REL_TOL,
              drop_noisy: bool = False, virtualised: bool = False, machine: str = "") -> model.Profile:
    """Fit the model's prices on native rows: a Profile whose ``interval(bench, kernel)`` and
    ``predict(bench, kernel)`` work like the published CPUs'.

    Rows noisier than ``rel_tol`` are refused (LabError naming them), or with ``drop_noisy`` left out
    with a UserWarning that names them (``profile.dropped``; ``profile.measured`` keeps every row offered,
    as :func:`measured_frame` reads it). The rows' ``level_sd`` (how much the whole
    machine's speed moved over the run that measured them) becomes ``profile.level_sd``, which every
    predicted figure's interval includes twice, for the run that measured the prices and the run whose
    figure is predicted (a predicted speedup's does not: both its times come from one run). ``virtualised``: the rows come from a virtual machine, whose
    hypervisor intercepts the single step's #DB as the recordings' did, so their ``xol_step`` is carried
    (a noisy ``uprobe-ret`` left out then leaves the step at the recordings' price, not unpinned).
    ``machine``: the rows' machine as :func:`uprobe_lab.model.profiles.machine_label` names it; a bundled
    recording of that same machine stays out of the prior: its rows would count twice, as prior and as data
    (counting them twice narrowed the predicted intervals' median half-width on the rows of the first
    ``host_prices_6.18_xeon_b.json`` from 4.2% to 3.8%; on the other two recordings' rows it moved it by less
    than 0.1%)."""
    measured = offered = measured_frame(rows)
    if measured.empty:
        raise LabError(f"no rows to calibrate on: give a list of rows, each {ROWS_FROM}")
    arches = sorted(set(measured["arch"]))
    if len(arches) != 1:
        raise LabError(f"native rows must be from one architecture, got {arches}")
    noisy = measured[measured["rel_err"] > rel_tol]
    dropped = [f"{r.bench} x{r.consumers} ({100 * r.rel_err:.1f}%)" if math.isfinite(r.rel_err) else
               f"{r.bench} x{r.consumers} (no error: fewer than two intervals in the machine's slower state)"
               for r in noisy.itertuples()]
    if dropped and not drop_noisy:
        raise LabError(f"refusing to calibrate on rows noisier than {100 * rel_tol:.0f}%: {', '.join(dropped)}; "
                       "measure again with a longer budget (more intervals) or on a quieter machine, or drop those rows")
    if dropped:
        warnings.warn(f"left out of the calibration, noisier than {100 * rel_tol:.0f}%: {', '.join(dropped)}",
                      stacklevel=2)
        measured = measured[measured["rel_err"] <= rel_tol]
        if measured.empty:
            raise LabError(f"every row is noisier than {100 * rel_tol:.0f}%: measure again with a longer budget or on a quieter machine")
    arch = arches[0]
    prof = model.profiles.fit_with_carried_prior(measured, arch, [], PROFILE_NAME, cpu,
                                                 target_virtualised=virtualised, machine=machine)
    prof.dropped = dropped
    prof.measured = offered
    prof.level_sd = max((float(r.get("level_sd", 0.0)) for r in rows), default=0.0)
    prof.state_note = machine_state_note(rows)
    prof.fit_note = model_error_note(prof)
    if virtualised:  # say which of the warning's causes it is, where the lab knows
        prof.warnings = [w + VM_STEP_NOTE if w.startswith("xol_step ") else w for w in prof.warnings]
    carried = left_to_prior(prof)
    if carried:
        prof.warnings.append(prior_only_note(prof, carried, dropped, virtualised))
    free = [p for p in fitmod.unpinned(prof) if p in native_table_prices(arch)]
    if free:
        prof.warnings.append(f"not pinned by these rows (predictions that count them are not meaningful): "
                             f"{', '.join(free)}")
    for w in prof.warnings:
        warnings.warn(f"{cpu}: {w}", stacklevel=2)
    return prof


def prices_table(profile: model.Profile) -> pd.DataFrame:
    """The calibrated prices (mean and sd) next to their prior and the plausible range, with a warning column."""
    rep = profile.report()
    rep["plausible_ns"] = [f"{lo:g}..{hi:g}" for lo, hi in (model.PLAUSIBLE_NS[p] for p in rep["price"])]
    carried = left_to_prior(profile)
    rep["warning"] = ["outside plausible range" if any(w.startswith(p + " ") for w in profile.warnings)
                      else "prior alone" if p in carried else "" for p in rep["price"]]
    for col in ("ns", "sd", "prior_ns", "prior_sd"):
        rep[col] = rep[col].round(2)
    return rep[["price", "ns", "sd", "prior_ns", "prior_sd", "plausible_ns", "warning", "prior_from"]]


def predict_kernels(profile: model.Profile, rows: list[dict], kernels=None) -> pd.DataFrame:
    """One row per bench of a native table: measured here (kernel, M/s, stddev), then the calibrated
    prediction for each kernel in ``kernels`` (default: every modelled version) with its 80% interval (``<k>``, ``<k> low``, ``<k> high``),
    and the speedup the model predicts from the measured kernel to that one, with its 80% interval
    (``<k> change``, ``<k> change low``, ``<k> change high``: a ratio within one run, so the machine's speed
    cancels out of it, which it does not of the figures)."""
    measured = measured_frame(rows)
    measured = measured[measured["consumers"] == 1].drop_duplicates("bench")
    out = measured[["bench", "kernel", "mops", "stddev"]].rename(
        columns={"kernel": "measured_on", "mops": "measured_mops"}).reset_index(drop=True)
    kernels = list(kernels or KERNELS)
    for k in kernels:
        iv = [profile.interval(b, k) for b in out["bench"]]
        out[k] = [round(m, 3) for m, _, _ in iv]
        out[f"{k} low"] = [round(lo, 3) for _, lo, _ in iv]
        out[f"{k} high"] = [round(hi, 3) for _, _, hi in iv]
        ch = [profile.change(b, here, k) for b, here in zip(out["bench"], out["measured_on"])]
        out[f"{k} change"] = [round(r, 4) for r, _ in ch]
        out[f"{k} change low"] = [round(r * math.exp(-fitmod.Z80 * sd), 4) for r, sd in ch]
        out[f"{k} change high"] = [round(r * math.exp(fitmod.Z80 * sd), 4) for r, sd in ch]
    return out


def predict_benches(profile: model.Profile, benches, kernel: str) -> pd.DataFrame:
    """Benches this machine cannot run, predicted for ``kernel`` with their 80% intervals: bench, kernel, mops,
    low, high (a 6.18 kernel refuses a probe on the nop10 that 7.3 optimises; the profile still prices it)."""
    rows = [(b, kernel, *(round(x, 3) for x in profile.interval(b, kernel))) for b in benches]
    return pd.DataFrame(rows, columns=["bench", "kernel", "mops", "low", "high"])


def kernel_columns(pred: pd.DataFrame) -> list[str]:
    """The kernels a predict_kernels table has predictions for."""
    return [c for c in pred.columns if c[:1].isdigit() and " " not in c]


def interval_share(x: float, mid: float, low: float, high: float) -> float:
    """How much of the interval side toward ``x`` the gap from ``mid`` to ``x`` uses: up to 1 inside."""
    side = (high - mid) if x > mid else (mid - low)
    gap = abs(x - mid)
    return gap / side if side > 0 else (math.inf if gap else 0.0)


def runs_agree(pred_a: pd.DataFrame, pred_b: pd.DataFrame, kernels=None,
               change: bool = False) -> pd.DataFrame:
    """Two calibrations' predictions side by side: is each run's figure inside the other's 80% interval
    (``a_in_b``, ``b_in_a``), and how much of that interval's side does the gap use (``a_share``,
    ``b_share``: :func:`interval_share`)? ``change``: compare the predicted speedups from the measured kernel
    instead of the figures (a run that found the whole machine faster moves every figure, and none of the
    speedups)."""
    kernels = list(kernels or KERNELS)
    a, b = pred_a.set_index("bench"), pred_b.set_index("bench")
    out = []
    for bench in a.index.intersection(b.index):
        for k in kernels:
            ra, rb = a.loc[bench], b.loc[bench]
            col = f"{k} change" if change else k
            out.append({"bench": bench, "kernel": k, "run_a": ra[col], "run_b": rb[col],
                        "a_in_b": bool(rb[f"{col} low"] <= ra[col] <= rb[f"{col} high"]),
                        "b_in_a": bool(ra[f"{col} low"] <= rb[col] <= ra[f"{col} high"]),
                        "a_share": interval_share(ra[col], rb[col], rb[f"{col} low"], rb[f"{col} high"]),
                        "b_share": interval_share(rb[col], ra[col], ra[f"{col} low"], ra[f"{col} high"])})
    return pd.DataFrame(out)


def published_for(kernel: str, arch: str = "x86_64") -> pd.DataFrame:
    """Published M/s on ``kernel`` (one row per bench, the first table that has it): bench, mops, cpu."""
    rows = model.bench_rows()
    rows = rows[(rows["arch"] == arch) & (rows["kernel"].astype(str) == str(kernel))]
    rows = rows.drop_duplicates("bench")
    return rows[["bench", "value", "cpu", "source"]].rename(columns={"value": "mops"}).reset_index(drop=True)


def native_vs_model(rows: list[dict], profile: model.Profile) -> pd.DataFrame:
    """Per bench of a native table: native M/s +- stddev, the calibrated model on the same kernel with its
    80% interval, the published figure for that kernel (another machine: for scale, not fitted) and how long
    one timed interval of the native row lasted (``native_interval_us``)."""
    measured = measured_frame(rows)
    measured = measured[measured["consumers"] == 1]
    interval_us = {r["bench"]: r["iterations"] / r["mops"] for r in rows if r.get("iterations") and r.get("mops")}
    out = []
    for r in measured.itertuples(index=False):
        pub = published_for(r.kernel, profile.arch).set_index("bench")
        m, lo, hi = profile.interval(r.bench, r.kernel)
        out.append({"bench": r.bench, "kernel": r.kernel, "native_mops": r.mops, "native_stddev": r.stddev,
                    "model_mops": round(m, 3), "model_low": round(lo, 3), "model_high": round(hi, 3),
                    "model_error_pct": round(100 * (m / r.mops - 1), 1), "native_inside": bool(lo <= r.mops <= hi),
                    "published_mops": pub["mops"].get(r.bench, float("nan")),
                    "published_cpu": pub["cpu"].get(r.bench, ""),
                    "published_source": pub["source"].get(r.bench, ""),
                    "native_interval_us": interval_us.get(r.bench, float("nan"))})
    return pd.DataFrame(out)


def kernel_change(pred: pd.DataFrame, kernel: str) -> pd.DataFrame:
    """What moving this machine to ``kernel`` would do, bench by bench: measured here, predicted there (with
    its 80% range where the table has it), and the change the model predicts from this kernel to that one."""
    if kernel not in kernel_columns(pred):
        raise LabError(f"no prediction for kernel {kernel!r}; predicted: {', '.join(kernel_columns(pred))}")
    out = pred[["bench", "measured_on", "measured_mops"]].copy()
    out[f"predicted_on_{kernel}"] = pred[kernel]
    if f"{kernel} low" in pred:
        out["range_80"] = [f"{lo:.3f}..{hi:.3f}" for lo, hi in zip(pred[f"{kernel} low"], pred[f"{kernel} high"])]
    if f"{kernel} change" in pred:  # the model's own speedup (defined also when the measured kernel is not predicted)
        out["change_pct"] = (100 * (pred[f"{kernel} change"] - 1)).round(1)
    else:
        here = [pred.loc[i, k] if k in pred.columns else math.nan for i, k in zip(pred.index, pred["measured_on"])]
        out["change_pct"] = (100 * (pred[kernel] / pd.Series(here, index=pred.index) - 1)).round(1)
    if f"{kernel} change low" in pred:
        out["change_80"] = [f"{100 * (lo - 1):+.1f}..{100 * (hi - 1):+.1f}%"
                            for lo, hi in zip(pred[f"{kernel} change low"], pred[f"{kernel} change high"])]
    return out
