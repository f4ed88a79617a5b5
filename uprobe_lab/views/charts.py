"""Charts of the published tables next to the cost model. Built on ``matplotlib.figure.Figure`` so they
work headless (no pyplot state, no display needed); in a notebook, ``display(fig)`` shows one."""
from __future__ import annotations

import math
import textwrap

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from .. import model
from ..kernel import KERNELS
from ..presenter import lecture_mode
from ..published import cpu_words, figure_words, seed_speedups
from . import chart_html
from .redraw import shows_lab_errors

BEFORE_COLOR, AFTER_COLOR = "#8da0cb", "#fc8d62"


ROLE_HATCH = {"moved": "xx"}  # fit and unmoved rows: "//"


LOOP_BENCHES = ("base", "usermode-count", "syscall-count")  # no probe: their rate counts loop iterations


def rate_label(benches, log: bool = False) -> str:
    """A rate axis's label: hits, or loop iterations for the benches without a probe, and a log scale said."""
    loops = [b for b in LOOP_BENCHES if b in set(benches)]
    what = f"M/s (hits; loop iterations for {', '.join(loops)})" if loops else "M hits/s"
    return what + (", log scale" if log else "") + " - higher is better"


def seed_tables(repro) -> list[tuple[str, str, str]]:
    """(source, table, the seed it quotes or "") for each published table, in the seeds' order."""
    return [(source, table, rows["duplicate_of"].iloc[0])
            for (source, table), rows in repro.groupby(["source", "table"], sort=False)]


def seed_table_charts(repro):
    """Every seed table's chart, one under another, a table a later seed quotes charted once (and said so there).
    Presenting, one chart at a time with a picker above it: a slide holds one."""
    from IPython.display import display

    if lecture_mode():
        display(seed_table_picker(repro))
        return
    for source, table, quoted in seed_tables(repro):
        if quoted:
            print(f"seed {source[:3]} {table}: the same figures as seed {quoted}, charted above")
        else:
            display(seed_table_chart(repro, source, table))


def seed_table_picker(repro):
    """A seed table's chart with buttons to pick another table. It redraws by replacing the HTML it shows."""
    import ipywidgets as w

    tables = {f"{source[:3]} {table}": (source, table) for source, table, quoted in seed_tables(repro) if not quoted}
    picker = w.ToggleButtons(options=list(tables), description="seed table")
    chart = w.HTML()

    @shows_lab_errors(chart)
    def show(change=None):
        chart.value = chart_html(seed_table_chart(repro, *tables[picker.value]))

    picker.observe(show, names="value")
    show()
    return w.VBox([picker, chart])


def seed_table_chart(repro, source: str, table: str) -> Figure:
    """One seed table: published (solid) vs model (hatched; cross-hatched where the row is moved, i.e. tests a
    prediction) per bench, before and after, with each speedup as the seed's table gives it (and as its text
    states it, "(!)" where the two differ) and, in grey italics below it, as the model predicts it."""
    grp = repro[(repro["source"] == source) & (repro["table"] == table)]
    variants = list(dict.fromkeys(grp["variant"]))
    benches = list(dict.fromkeys(grp["bench"]))
    speed = seed_speedups()
    speed = speed[(speed["source"] == source) & (speed["table"] == table)].set_index("bench")
    # at most 12 inches wide, so a slide shows it at its drawn size (views.chart_html): text 12 pt is 16 px there
    fig = Figure(figsize=(min(12, max(8.5, 1.15 * len(benches) + 3.3)), 5.2), layout="constrained")
    ax = fig.add_subplot()
    x = np.arange(len(benches))
    width = 0.8 / (2 * len(variants))
    colors = [BEFORE_COLOR, AFTER_COLOR] + ["#66c2a5"] * 4
    top = 0.0
    for i, variant in enumerate(variants):
        rows = grp[grp["variant"] == variant].set_index("bench")
        pub = [rows["published_mops"].get(b, math.nan) for b in benches]
        mod = [rows["predicted_mops"].get(b, math.nan) for b in benches]
        off = (2 * i - len(variants)) * width + width / 2
        ax.bar(x + off, pub, width, color=colors[i], label=f"{variant} published")
        for role in dict.fromkeys(rows["role"]):  # one legend entry per role: moved bars test a prediction
            mine = [m if rows["role"].get(b) == role else math.nan for b, m in zip(benches, mod)]
            ax.bar(x + off + width, mine, width, color="white", edgecolor=colors[i],
                   hatch=ROLE_HATCH.get(role, "//"), label=f"{variant} model, {role}")
        if "low_mops" in rows:  # the model's 80% interval (an unbounded top is drawn to the plot's edge)
            lo = np.array([rows["low_mops"].get(b, math.nan) for b in benches])
            hi = np.array([rows["high_mops"].get(b, math.nan) for b in benches])
            hi = np.where(np.isinf(hi), 10 * np.nanmax(pub + mod), hi)
            ax.errorbar(x + off + width, mod, yerr=[np.array(mod) - lo, hi - np.array(mod)], fmt="none",
                        ecolor="k", elinewidth=0.8, capsize=2)
        top = max(top, np.nanmax(pub + [0]), np.nanmax(mod + [0]) if not all(map(math.isnan, mod)) else 0)
    for j, bench in enumerate(benches):  # above each bench: the seed's words, the table's speedup, the model's
        if bench not in speed.index:
            continue
        s = speed.loc[bench]
        label = f"{s['speedup_pct']:+.1f}%" + (" (!)" if s["discrepancy"] else "")
        if isinstance(s["stated_speedup"], str):
            label = f"seed: {s['stated_speedup']}\n{label}"
        here = grp[grp["bench"] == bench]
        tops = [here["published_mops"].max(), here["predicted_mops"].max()]
        if "high_mops" in here:  # above the interval's whisker too, when it has a top
            tops.append(here["high_mops"].replace(np.inf, np.nan).max())
        ymax = np.nanmax(tops)
        pred = grp[grp["bench"] == bench].set_index("variant")["predicted_mops"]
        above = 4
        if len(pred) == 2 and not pred.isna().any():
            ax.annotate(f"{100 * (pred.iloc[1] / pred.iloc[0] - 1):+.1f}%", (j, ymax), xytext=(0, above),
                        textcoords="offset points", ha="center", va="bottom", fontsize=12, fontstyle="italic",
                        color="0.35")
            above += 16
        ax.annotate(label, (j, ymax), xytext=(0, above), textcoords="offset points", ha="center", va="bottom",
                    fontsize=12)
    crowded = len(benches) > 5  # their names slanted would overlap: upright
    ax.set_xticks(x, benches, rotation=90 if crowded else 30, ha="center" if crowded else "right", fontsize=12)
    log = top > 50  # usermode-count dwarfs the rest
    ax.set_ylabel(textwrap.fill(rate_label(benches, log), 40, break_on_hyphens=False), fontsize=12)
    if log:
        ax.set_yscale("log")
        ax.set_ylim(top=top * 20)  # room for its speedups above it
    else:
        ax.set_ylim(0, top * 1.6 if top else 1)
    ax.set_title(f"Seed {source[:3]}, {cpu_words(grp['cpu'].iloc[0] if len(grp) else '')}: published (solid) vs "
                 "model (hatched)\nspeedups: the table's (the seed's words above it), the model's in grey italics",
                 fontsize=13)
    ax.legend(fontsize=12, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)  # beside: inside the figure
    return fig


def breakdown_chart(rows) -> Figure:
    """Stacked ns per hit by priced kind. ``rows`` is [(label, {price: ns})]."""
    fig = Figure(figsize=(max(8, 0.45 * len(rows) + 3), 4.4), layout="constrained")
    ax = fig.add_subplot()
    kinds = list(dict.fromkeys(k for _, parts in rows for k, v in parts.items() if abs(v) > 1e-9))
    bottom = np.zeros(len(rows))
    cmap = [f"C{i}" for i in range(10)]
    for i, kind in enumerate(kinds):
        vals = np.array([parts.get(kind, 0.0) for _, parts in rows])
        ax.bar(range(len(rows)), vals, bottom=bottom, label=kind, color=cmap[i % 10])
        bottom += vals
    ax.set_xticks(range(len(rows)), [label for label, _ in rows], rotation=90,
                  fontsize=9)
    ax.set_ylabel("ns per hit")
    ax.set_title("Where a hit's time goes: emulator counts x fitted prices", fontsize=11)
    ax.legend(fontsize=9, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    return fig


def error_chart(repro) -> Figure:
    """Model error per row with its 80% interval: fit rows, unmoved held-out rows (their events do not
    change: they test the fit) and moved held-out rows (the predictions)."""
    fig = Figure(figsize=(8, 4), layout="constrained")
    ax = fig.add_subplot()
    done = repro.dropna(subset=["predicted_mops"]).reset_index(drop=True)
    if "duplicate_of" in done:
        done = done[done["duplicate_of"] == ""].reset_index(drop=True)
    for role, color, marker in (("fit", BEFORE_COLOR, "o"), ("unmoved", "0.6", "s"), ("moved", AFTER_COLOR, "D")):
        part = done[done["role"] == role]
        if len(part):
            if "low_mops" in part:
                pub = part["published_mops"]
                lo = 100 * (part["low_mops"] / pub - 1)
                hi = np.minimum(100 * (part["high_mops"] / pub - 1), 100.0)
                ax.errorbar(part.index, part["error_pct"], yerr=[part["error_pct"] - lo, hi - part["error_pct"]],
                            fmt="none", ecolor=color, elinewidth=0.8)
            ax.scatter(part.index, part["error_pct"], color=color, marker=marker, label=role, s=18)
    ax.axhspan(-5, 5, color="0.9", zorder=0)
    ax.axhline(0, color="0.5", lw=0.8)
    ax.set_ylabel("model error %")
    ax.set_xlabel("published M/s row")
    ax.legend(fontsize=9, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)  # beside: never over a row
    return fig


EVENT_COLUMNS = ("exceptions", "syscalls", "emulated", "xol_steps", "consumers")


def events_per_hit_chart(rows: dict[str, dict[str, float]], kinds=EVENT_COLUMNS, title: str = "", ax=None):
    """Grouped bars: for each label (e.g. a bench) the count of each event kind per hit."""
    if ax is None:
        fig = Figure(figsize=(max(8, 1.4 * len(rows) + 2.5), 3.5), layout="constrained")  # room for each label
        ax = fig.add_subplot()
    labels = list(rows)
    kinds = [k for k in kinds if any(rows[label].get(k, 0) for label in labels)]  # a legend entry per drawn bar
    width = 0.8 / len(kinds)
    x = np.arange(len(labels))
    for i, kind in enumerate(kinds):
        ax.bar(x + i * width, [rows[label].get(kind, 0) for label in labels], width, label=kind)
    ax.set_xticks(x + width * (len(kinds) - 1) / 2, labels, fontsize=11)
    ax.set_ylabel("count per hit", fontsize=11)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # events are whole counts
    ax.set_ylim(0, max([rows[label].get(k, 0) for label in labels for k in kinds] + [1]) * 1.1)
    ax.set_title(title, fontsize=12)
    ax.legend(fontsize=10, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)  # beside, never over a bar
    return ax.figure


HISTORY_BENCHES = ("uprobe-nop", "uprobe-ret", "uprobe-nop5", "uretprobe-nop", "uretprobe-nop5")


def kernel_history_chart(profiles=("intel", "nop5"), benches=HISTORY_BENCHES, kernels=None) -> Figure:
    """Throughput by kernel version on a linear axis, one panel per published CPU: lines are the CPU's fitted
    profile priced on each modelled kernel's events, with its 80% interval as a band; circles are what that CPU's
    seed table measured, named for what they are (a patch set's before/after columns stand for a release's rules)."""
    kernels = list(kernels or [k for k in KERNELS if k[:1].isdigit()])
    rows = model.bench_rows()
    fig = Figure(figsize=(4.9 * len(profiles) + 2.2, 4.8), layout="constrained")  # two panels within 12 in
    axes = fig.subplots(1, len(profiles), sharey=True, squeeze=False)[0]
    x = np.arange(len(kernels))
    for ax, name in zip(axes, profiles):
        prof = model.get_profile(name)
        measured = rows[rows["cpu"] == prof.cpu]
        for i, bench in enumerate(benches):
            color = f"C{i}"
            iv = np.array([prof.interval(bench, k) for k in kernels])
            ax.plot(x, iv[:, 0], marker="o", ms=4, lw=2, color=color, label=bench)
            ax.fill_between(x, iv[:, 1], np.minimum(iv[:, 2], 2 * iv[:, 0]), color=color, alpha=0.15, lw=0)
            seen = measured[measured["bench"] == bench].drop_duplicates(["kernel", "value"])
            pos = [kernels.index(k) for k in seen["kernel"] if k in kernels]
            ax.scatter(pos, [v for k, v in zip(seen["kernel"], seen["value"]) if k in kernels], s=90,
                       facecolor="white", edgecolor=color, linewidth=2, zorder=3)
        ax.set_xticks(x, kernels, fontsize=11)
        ax.set_xlabel("kernel version", fontsize=11)
        shown = measured[measured["kernel"].isin(kernels) & measured["bench"].isin(benches)]
        words = "; ".join(dict.fromkeys(w for w in (figure_words(src, grp["kernel"]) for src, grp
                                                    in shown.groupby("source", sort=False)) if w != "published"))
        # under the CPU, where they are no release's figures: what the circles are
        ax.set_title(cpu_words(prof.cpu) + ("\n" + textwrap.fill(f"circles: {words}", 48) if words else ""),
                     fontsize=12 if not words else 11)
        ax.set_ylim(bottom=0)
        ax.grid(axis="y", color="0.9")
    axes[0].set_ylabel(rate_label(benches), fontsize=11)
    axes[-1].legend(fontsize=10, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False,
                    title="line: model, band: its 80% interval\ncircle: the seed's figure", title_fontsize=10)
    fig.suptitle("What each kernel release bought, bench by bench", fontsize=13)
    return fig
