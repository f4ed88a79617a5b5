"""Views for notebook 06 (your machine): native vs model vs published, predictions, the host's trampolines.

Figures are ``matplotlib.figure.Figure`` (headless, no pyplot state); tables are pandas DataFrames;
listings are plain text.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from ..errors import LabError, shown
from ..native.calibrate import kernel_change, kernel_columns
from ..published import cpu_words, figure_words
from ..text import wrap
from .redraw import shows_lab_errors, widget_table_html

NATIVE_COLOR, MODEL_COLOR, PUBLISHED_COLOR = "#66c2a5", "#fc8d62", "#8da0cb"


def results_table(rows: list[dict]) -> pd.DataFrame:
    """The native result dicts as a table: bench, M/s ± stddev, hits, optimised, site bytes, and the kernel
    where the rows come from more than one (one kernel is the run's, which its banner names)."""
    cols = ["bench", "mops", "stddev", "hits", "iterations", "repeats", "optimized", "site_bytes", "kernel"]
    df = pd.DataFrame(rows)
    if "kernel" in df and df["kernel"].nunique() == 1:
        df = df.drop(columns="kernel")
    return df[[c for c in cols if c in df.columns]].round({"mops": 3, "stddev": 3})


def published_words(comparison: pd.DataFrame) -> str:
    """The legend of the published bars: whose figures, and what they are (an unmerged patch set's columns stand
    for a release's rules, they were not measured on it)."""
    shown = comparison[comparison["published_mops"].astype(float).notna()]
    cpus = ", ".join(sorted({cpu_words(c) for c in shown["published_cpu"] if isinstance(c, str) and c}))
    kernel = shown["kernel"].iloc[0] if len(shown) else ""
    words = [figure_words(src, [kernel]) for src in dict.fromkeys(shown.get("published_source", []))
             if isinstance(src, str) and src]
    return f"{'; '.join(dict.fromkeys(words)) or 'published'} ({cpus}), for scale"


def native_chart(comparison: pd.DataFrame, title: str = "") -> Figure:
    """Per bench: native M/s (with ± stddev), the calibrated model, and the published figure (log scale).

    ``comparison`` is :func:`uprobe_lab.native.calibrate.native_vs_model`.
    """
    benches = list(comparison["bench"])
    fig = Figure(figsize=(max(7, 0.9 * len(benches)), 4.4), layout="constrained")
    ax = fig.add_subplot()
    x = np.arange(len(benches))
    w = 0.27
    ax.bar(x - w, comparison["native_mops"], w, yerr=comparison["native_stddev"], capsize=2,
           color=NATIVE_COLOR, label="native (this machine)")
    model_err = None
    if "model_low" in comparison:  # the model's 80% interval
        model_err = [comparison["model_mops"] - comparison["model_low"],
                     (comparison["model_high"] - comparison["model_mops"]).clip(upper=10 * comparison["model_mops"])]
    ax.bar(x, comparison["model_mops"], w, color="white", edgecolor=MODEL_COLOR, hatch="//", yerr=model_err,
           capsize=2, label="model, calibrated on the price benches (80% interval)")
    pub = comparison["published_mops"].astype(float)
    if pub.notna().any():
        ax.bar(x + w, pub, w, color=PUBLISHED_COLOR, label=published_words(comparison))
    ax.set_xticks(x, benches, rotation=30, ha="right", fontsize=9)
    ax.set_yscale("log")
    ax.set_ylabel("M/s, log scale (higher is better)")
    kernel = comparison["kernel"].iloc[0] if len(comparison) else ""
    ax.set_title(title or f"kernel {kernel}: native vs model vs published", fontsize=11)
    # below the bars: beside them, its long labels would squeeze the plot to a third of the figure's width
    fig.legend(*ax.get_legend_handles_labels(), fontsize=9, loc="outside lower center", frameon=False)
    return fig


def predictions_chart(pred: pd.DataFrame, kernels=None) -> Figure:
    """The calibrated profile's predictions per kernel (one group of bars per bench), measured marked."""
    kernels = list(kernels or kernel_columns(pred))
    # probe benches only: usermode-count and syscall-count run hundreds of times faster and would force a log
    # axis, on which a 30% change between kernels all but disappears
    pred = pred[pred["bench"].str.contains("probe")].reset_index(drop=True)
    benches = list(pred["bench"])
    fig = Figure(figsize=(max(8, 1.0 * len(benches)), 4.6), layout="constrained")
    ax = fig.add_subplot()
    x = np.arange(len(benches))
    w = 0.8 / max(len(kernels), 1)
    colors = ["#8da0cb", "#a6d854", "#ffd92f", "#fc8d62", "#e78ac3"]
    for i, k in enumerate(kernels):
        err = None
        if f"{k} low" in pred:  # 80% intervals
            err = [pred[k] - pred[f"{k} low"], (pred[f"{k} high"] - pred[k]).clip(upper=pred[k])]
        ax.bar(x - 0.4 + (i + 0.5) * w, pred[k], w, color=colors[i % len(colors)], label=f"model {k}",
               yerr=err, error_kw={"elinewidth": 0.7, "capsize": 1.5})
    ax.scatter(x, pred["measured_mops"], marker="_", s=250, color="black", zorder=3,
               label=f"measured ({pred['measured_on'].iloc[0]})")
    ax.set_xticks(x, benches, rotation=30, ha="right", fontsize=10)
    ax.set_ylabel("M hits/s (higher is better)", fontsize=10)
    ax.set_title("This machine's profile: predicted throughput per kernel", fontsize=12)
    ax.legend(fontsize=9, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    return fig


SNAPSHOT_KEYS = ("kernel", "site_listing", "trampolines", "mappings")


def check_snapshot(snapshot) -> None:
    """Refuse what is not a snapshot, naming the keys it lacks."""
    missing = [k for k in SNAPSHOT_KEYS if not isinstance(snapshot, dict) or k not in snapshot]
    if missing:
        raise LabError(f"a snapshot is a value of run.snapshots or what compare.host_bench_snapshot(bench) returns, "
                       f"a dict with {', '.join(SNAPSHOT_KEYS)}; {shown(snapshot)} lacks {', '.join(missing)}")


def trampoline_listing(snapshot: dict) -> str:
    """The probe site and every trampoline of a snapshot, disassembled, with where they were read."""
    check_snapshot(snapshot)
    side = snapshot.get("side", "host")
    lines = [f"{side}: {snapshot.get('bench', '')} after {snapshot.get('hits', '?')} hits, kernel {snapshot['kernel']}",
             "probe site:"]
    lines += [f"  {s}" for s in snapshot["site_listing"]] or ["  (unreadable)"]
    for t in snapshot["trampolines"]:
        lines.append(wrap(f"{t['name']} {t['start']}-{t['end']} {t['perms']}  (read via {t['read_via']}):"))
        lines += [f"  {s}" for s in t["listing"]] or ["  (unreadable)"]
        for slot, code in sorted(t.get("slots", {}).items(), key=lambda kv: int(kv[0])):
            lines.append(f"  XOL slot {slot}: {code}")
    return "\n".join(lines)


def maps_lines(snapshot: dict) -> str:
    """The [uprobes] / [uprobes-trampoline] rows, /proc/self/maps style."""
    check_snapshot(snapshot)
    rows = [f"{int(m['start'], 16):x}-{int(m['end'], 16):x} {m['perms']} {m['name']}" for m in snapshot["mappings"]]
    return "\n".join(rows) or "(no uprobe mappings)"


NOT_COMPARED = "see below"  # a site's bytes: a call's hold its distance, which ASLR moves; the next row compares its form


def comparison_style(table: pd.DataFrame):
    """A Styler marking rows where host and emulator differ, a row not compared byte for byte (``same`` is None)
    saying what it is compared by instead; falls back to the table without jinja2."""
    def color(row):
        same = row["same"]
        c = "" if same is None or (isinstance(same, float) and math.isnan(same)) else (
            "background-color: #e5f5e0" if same else "background-color: #fee0d2")
        return [c] * len(row)

    try:
        return (table.style.apply(color, axis=1).hide(axis="index")  # row numbers: width a slide lacks
                .format(lambda v: NOT_COMPARED if v is None else v, subset=["same"]))
    except ImportError:  # pragma: no cover - Styler needs jinja2
        return table


def kernel_picker(pred: pd.DataFrame):
    """Toggle between kernel versions and see what each would do to this machine's figures."""
    import ipywidgets as w

    kernels = kernel_columns(pred)
    picker = w.ToggleButtons(options=kernels, value=kernels[0], description="kernel")
    out = w.HTML()  # redrawn by value (views.redraw says why not an Output widget)

    @shows_lab_errors(out)
    def show(change=None):
        out.value = widget_table_html(kernel_change(pred, picker.value).round(3))

    picker.observe(show, names="value")
    show()
    return w.VBox([picker, out])


SHORT_INTERVAL_US = 1000  # a timed interval shorter than this: the clock's reads and the loop's start weigh on it


def _loop_note(row, comparison: pd.DataFrame) -> str:
    """Why usermode-count, the loop with no probe, can fall outside: what its own row and the probe rows say."""
    interval = row.get("native_interval_us", float("nan"))
    if interval < SHORT_INTERVAL_US:
        return (f"usermode-count, the loop with no probe: its timed intervals lasted {interval:.3g} us each, so "
                "short that reading the clock and starting the loop weigh on them; give it more iterations")
    probes = comparison[comparison["bench"] != "usermode-count"]
    if len(probes) and probes["native_inside"].astype(bool).mean() > 0.5:
        return ("usermode-count, the loop with no probe, is outside while most probe rows are inside: the "
                "machine's speed did not move with it, so look at this row itself (its intervals and stddev) and "
                "measure it again, `python -m uprobe_lab bench usermode-count --mode native`")
    return "usermode-count, the loop with no probe, is outside along with most probe rows"


def outside_note(comparison: pd.DataFrame, profile) -> str:
    """Which measured rows fall outside the model's 80% intervals, by how much, and the likely causes the rows
    themselves point to (a whole-machine shift, the single step's trap, the bare loop's speed)."""
    out = comparison[~comparison["native_inside"].astype(bool)]
    if out.empty:
        return f"All {len(comparison)} measured rows fall inside the model's 80% intervals."
    lines = [f"{len(out)} of {len(comparison)} measured rows fall outside the model's 80% intervals "
             f"({out['model_error_pct'].min():+.1f}% to {out['model_error_pct'].max():+.1f}%, model against "
             "measured). Likely causes, as the rows show them:"]
    probe = out[out["bench"] != "usermode-count"]
    for side, sign in (("faster", -1), ("slower", 1)):  # a model above the measured rate: the table ran slower
        if len(probe) >= 3 and (sign * probe["model_error_pct"] > 0).mean() > 0.5:
            lines.append(f"- most probe rows are {side} than the model: the machine ran {side} while the table was "
                         "measured than while the price benches were (a shared virtual machine's speed swings between "
                         f"runs; the price benches' own level moved {100 * profile.level_sd:.1f}% between rounds)")
    stepped = out[out["bench"].str.endswith("-ret")]
    if len(stepped) and any("xol_step" in w for w in profile.warnings):
        lines.append("- the stepped rows (" + ", ".join(stepped["bench"]) + ") hang on the single step's price, "
                     "which is far above a native CPU's: a hypervisor intercepts the #DB trap, and how long it takes "
                     "varies from run to run")
    if "usermode-count" in set(out["bench"]):
        lines.append("- " + _loop_note(out[out["bench"] == "usermode-count"].iloc[0], comparison))
    lines.append("Run the chapter again: a machine whose rows move between runs by more than the intervals allow is "
                 "telling you about itself, not about the kernel.")
    return wrap("\n".join(lines))
