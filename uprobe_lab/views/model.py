"""Widgets over the cost model (chapter 05): a CPU-profile breakdown and live price sliders."""
from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from .. import model
from ..published import load_published
from .charts import breakdown_chart

BREAKDOWN_BENCHES = ("uprobe-nop", "uprobe-ret", "uprobe-nop5", "uretprobe-nop")
SLIDER_PRICES = ("exception", "syscall", "handler", "xol_step", "return_instance")
SLIDER_BENCHES = ("uprobe-nop", "uprobe-ret", "uretprobe-nop", "uretprobe-ret")


def x86_profile_names() -> list[str]:
    return model.profile_names("x86_64")


def breakdown_for(profile_name: str, kernels=("6.10", "6.11", "6.18"), benches=BREAKDOWN_BENCHES) -> Figure:
    """Where each hit's nanoseconds go, for a CPU profile, across kernel versions."""
    prof = model.get_profile(profile_name)
    rows = [(f"{kernel} {b}", model.breakdown(prof.prices, model.events_for(b, "x86_64", kernel)))
            for kernel in kernels for b in benches]
    return breakdown_chart(rows)


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


def price_chart(profile: model.Profile, benches=SLIDER_BENCHES, published: pd.DataFrame | None = None) -> Figure:
    """The model's M/s on 6.10 and 6.11 under ``profile``'s prices, with the published marks."""
    fig = Figure(figsize=(7, 3.2), layout="constrained")
    ax = fig.add_subplot()
    x = np.arange(len(benches))
    for i, kernel in enumerate(("6.10", "6.11")):
        ax.bar(x + (i - 0.5) * 0.4, [profile.predict(b, kernel) for b in benches], 0.4, label=f"model {kernel}")
    if published is not None:
        for i, variant in enumerate(("current", "fix")):
            ax.scatter(x + (i - 0.5) * 0.4, published[variant].to_numpy(), color="k", marker="_", s=300,
                       label="published" if i == 0 else None, zorder=3)
    ax.set_xticks(x, benches)
    ax.set_ylabel("M/s")
    ax.legend(fontsize=8)
    return fig


def breakdown_widget():
    """A CPU-profile dropdown: the fit report and the per-hit cost breakdown of the chosen profile."""
    import ipywidgets as w
    from IPython.display import display

    cpu = w.Dropdown(options=x86_profile_names(), description="CPU profile")
    out = w.Output()

    def show(change=None):
        out.clear_output(wait=True)
        with out:
            display(model.fit_report(cpu.value).round(2))
            display(breakdown_for(cpu.value))

    cpu.observe(show, names="value")
    show()
    return w.VBox([cpu, out])


def price_sliders(profile_name: str = "intel", prices=SLIDER_PRICES):
    """Sliders over a profile's prices driving price_chart: what if an exception cost less?

    The published marks are seed 002's figures for the profile's own CPU (none if seed 002 did not run on it)."""
    import ipywidgets as w
    from IPython.display import display

    prof = model.get_profile(profile_name)
    table = table_2024(prof.cpu)
    published = published_2024(table) if table else None
    sliders = {k: w.FloatSlider(value=round(prof.prices[k], 1), min=0, max=max(2 * prof.prices[k], 10), step=0.1,
                                description=k, continuous_update=False) for k in prices}
    out = w.Output()

    def redraw(change=None):
        out.clear_output(wait=True)
        with out:
            display(price_chart(prof.with_prices(**{k: s.value for k, s in sliders.items()}), published=published))

    for s in sliders.values():
        s.observe(redraw, names="value")
    redraw()
    return w.VBox([*sliders.values(), out])
