"""Widgets over the cost model (chapter 05): a CPU-profile breakdown and live price sliders.

Without a widget front end (a headless run, a terminal) each widget shows itself as text: the tables
behind its chart, for the profile and prices it is set to.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from .. import model
from ..errors import check_choice
from ..published import load_published
from .charts import breakdown_chart
from .redraw import figure_view, show_figure, shows_lab_errors, widget_table_html

BREAKDOWN_BENCHES = ("uprobe-nop", "uprobe-ret", "uprobe-nop5", "uretprobe-nop")
SLIDER_PRICES = ("exception", "syscall", "handler", "xol_step", "return_instance")
SLIDER_BENCHES = ("uprobe-nop", "uprobe-ret", "uretprobe-nop", "uretprobe-ret")


def x86_profile_names() -> list[str]:
    return model.profile_names("x86_64")


def breakdown_rows(profile_name: str, kernels=("6.10", "6.11", "6.18"), benches=BREAKDOWN_BENCHES) -> list:
    """[("kernel bench", {priced kind: ns per hit})] for a CPU profile."""
    prof = model.get_profile(profile_name)
    return [(f"{kernel} {b}", model.breakdown(prof.prices, model.events_for(b, "x86_64", kernel)))
            for kernel in kernels for b in benches]


def breakdown_for(profile_name: str, kernels=("6.10", "6.11", "6.18"), benches=BREAKDOWN_BENCHES) -> Figure:
    """Where each hit's nanoseconds go, for a CPU profile, across kernel versions."""
    return breakdown_chart(breakdown_rows(profile_name, kernels, benches))


def breakdown_text(profile_name: str) -> str:
    """The breakdown widget's content as text: the fit report and ns per hit by priced kind."""
    ns = pd.DataFrame(dict(breakdown_rows(profile_name))).T
    ns = ns.loc[:, (ns.abs() > 1e-9).any()]
    return (f"CPU profile {model.get_profile(profile_name).name}\n"
            f"{model.fit_report(profile_name).drop(columns=['covers']).round(2).to_string(index=False)}\n\n"
            f"ns per hit:\n{ns.round(1).to_string()}")


def published_2024(table: str = "intel", benches=SLIDER_BENCHES) -> pd.DataFrame:
    """Seed 002's figures for ``benches``: one column per variant (current = 6.10, fix = 6.11)."""
    pub = load_published()
    pub = pub[pub["source"].str.startswith("002") & (pub["table"] == table) & pub["bench"].isin(benches)]
    return pub.pivot(index="bench", columns="variant", values="value").loc[list(benches)]


def table_2024(cpu: str) -> str | None:
    """The name of seed 002's table measured on ``cpu`` (None: seed 002 has no table for that CPU)."""
    pub = load_published()
    tables = pub.loc[pub["source"].str.startswith("002") & (pub["cpu"] == cpu), "table"].unique()
    return tables[0] if len(tables) else None


def price_table(profile: model.Profile, benches=SLIDER_BENCHES,
                published: pd.DataFrame | None = None) -> pd.DataFrame:
    """The model's M/s on 6.10 and 6.11 under ``profile``'s prices, each with its 80% interval's half-width
    (``± 6.10``, the larger side), next to the published figures if given."""
    table = pd.DataFrame(index=list(benches))
    for k in ("6.10", "6.11"):
        iv = [profile.interval(b, k) for b in benches]
        table[f"model {k}"] = [m for m, _, _ in iv]
        table[f"\u00b1 {k}"] = [max(m - lo, hi - m) for m, lo, hi in iv]
    if published is not None:
        table["published current"] = published["current"]
        table["published fix"] = published["fix"]
    return table


def price_chart(profile: model.Profile, benches=SLIDER_BENCHES, published: pd.DataFrame | None = None) -> Figure:
    """The model's M/s on 6.10 and 6.11 under ``profile``'s prices, with the published marks."""
    fig = Figure(figsize=(7, 3.2), layout="constrained")
    ax = fig.add_subplot()
    x = np.arange(len(benches))
    model_mops = price_table(profile, benches)
    for i, kernel in enumerate(("6.10", "6.11")):
        ax.bar(x + (i - 0.5) * 0.4, model_mops[f"model {kernel}"].to_numpy(), 0.4, label=f"model {kernel}",
               yerr=model_mops[f"\u00b1 {kernel}"].to_numpy(), error_kw={"elinewidth": 0.8, "capsize": 2})
    if published is not None:
        for i, variant in enumerate(("current", "fix")):
            ax.scatter(x + (i - 0.5) * 0.4, published[variant].to_numpy(), color="k", marker="_", s=300,
                       label="published" if i == 0 else None, zorder=3)
    ax.set_xticks(x, benches)
    ax.set_ylabel("M/s (error bars: 80% intervals)")
    ax.legend(fontsize=8)
    return fig


def summary_by_table(summary: pd.DataFrame, index=("source", "table")) -> pd.DataFrame:
    """:func:`uprobe_lab.model.error_summary` with a column per table: counts as whole numbers, errors and
    half-widths to 0.1%, and blank where a table has no rows to take a figure of (a column of floats would show
    a count as 3.0 and a missing median as NaN)."""
    by_table = summary.set_index(list(index)).T
    counts = by_table.index.str.endswith(("_rows", "_inside"))
    return by_table.apply(lambda col: ["" if pd.isna(v) else f"{v:.0f}" if count else f"{v:.1f}"
                                       for v, count in zip(col, counts)])


def text_vbox(children, text):
    """A VBox that a widget front end draws, and that shows itself as ``text()`` everywhere else
    (a plain VBox would show only ``VBox(children=...)`` there)."""
    import ipywidgets as w

    class TextVBox(w.VBox):
        def _repr_mimebundle_(self, **kwargs):
            data = dict(super()._repr_mimebundle_(**kwargs) or {})
            data["text/plain"] = text()
            return data

    return TextVBox(children)


def breakdown_widget():
    """A CPU-profile dropdown: the per-hit cost breakdown of the chosen profile and its fit report."""
    import ipywidgets as w

    cpu = w.Dropdown(options=x86_profile_names(), description="CPU profile")
    report, chart = w.HTML(), figure_view()  # redrawn by value (views.redraw says why not an Output widget)

    @shows_lab_errors(chart, report)
    def show(change=None):
        show_figure(chart, breakdown_for(cpu.value))
        # the prices; where each prior comes from is the chapter's appendix, not a column of each row here
        report.value = widget_table_html(model.fit_report(cpu.value).drop(columns="prior_from").round(2))

    cpu.observe(show, names="value")
    show()
    return text_vbox([cpu, chart, report], lambda: breakdown_text(cpu.value))  # the chart under its dropdown


def price_sliders(profile_name: str = "intel", prices=SLIDER_PRICES):
    """Sliders over a profile's prices driving price_chart: what if an exception cost less?

    The published marks are seed 002's figures for the profile's own CPU (none if seed 002 did not run on it)."""
    import ipywidgets as w

    prof = model.get_profile(profile_name)
    prices = (prices,) if isinstance(prices, str) else prices  # one price's name: one slider
    for k in prices:
        check_choice(k, model.PRICE_NAMES, "a slider's price", f"the default is {', '.join(SLIDER_PRICES)}")
    table = table_2024(prof.cpu)
    published = published_2024(table) if table else None
    sliders = {k: w.FloatSlider(value=round(prof.prices[k], 1), min=0, max=max(2 * prof.prices[k], 10), step=0.1,
                                description=k, continuous_update=False) for k in prices}
    chart = figure_view()  # redrawn by value (views.redraw says why not an Output widget)

    def chosen() -> model.Profile:
        return prof.with_prices(**{k: s.value for k, s in sliders.items()})

    @shows_lab_errors(chart)
    def redraw(change=None):
        show_figure(chart, price_chart(chosen(), published=published))

    def text() -> str:
        return ("prices (ns): " + ", ".join(f"{k}={s.value:g}" for k, s in sliders.items()) + "\nM/s:\n"
                + price_table(chosen(), published=published).round(3).to_string())

    for s in sliders.values():
        s.observe(redraw, names="value")
    redraw()
    return text_vbox([*sliders.values(), chart], text)
