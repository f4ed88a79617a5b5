"""The arm64 chapter's charts of seed 001: Figures outside pyplot, drawing the published numbers."""
import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from uprobe_lab.views.arm64 import plot_published_bench, plot_published_stp, published_stp  # noqa: E402


def test_plots_are_figures_left_out_of_pyplot():
    open_before = plt.get_fignums()
    figs = [plot_published_stp(), plot_published_bench()]
    assert all(isinstance(f, Figure) for f in figs)
    assert plt.get_fignums() == open_before


def test_published_stp_bars_are_the_seed_values():
    df = published_stp()
    fig = plot_published_stp()
    assert [ax.get_title().split()[0] for ax in fig.axes] == ["redis-get", "redis-set", "grep"]
    for ax in fig.axes:
        bench = ax.get_title().split()[0]
        want = df[df["bench"] == bench].set_index("variant")["value"]
        assert [b.get_height() for b in ax.patches] == [want[k] for k in ("no-uprobe", "single-stepped-stp", "emulated-stp")]
        assert not any(math.isnan(b.get_height()) for b in ax.patches)


def test_published_bench_bars_per_variant():
    df = published_stp()
    table = df[df["table"] == "kunpeng916-bench"].pivot(index="bench", columns="kernel", values="value")
    ax = plot_published_bench().axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["xol-stp", "simulated-stp"]
    heights = [b.get_height() for b in ax.patches]
    assert heights == list(table["xol-stp"]) + list(table["simulated-stp"])
    assert [t.get_text() for t in ax.get_xticklabels()] == list(table.index)


def test_the_published_charts_fit_one_slide_together():
    # chapter 04 shows both on one 1280x720 slide: taller, the bar labels fell under the navigation buttons
    assert plot_published_bench().get_figheight() + plot_published_stp().get_figheight() <= 5.5
    assert "STP series" in plot_published_stp().get_suptitle()  # the series named, not only its seed number


def test_the_seed_s_table_holds_every_published_figure_in_one_row_per_bench():
    from uprobe_lab.views.arm64 import STP_COLUMNS, published_stp_table

    wide, long = published_stp_table(), published_stp()
    assert len(wide) == long["bench"].nunique() <= 10  # one slide
    for row in long.itertuples():
        cell = wide.loc[wide["bench"] == row.bench, STP_COLUMNS[row.kernel]]
        assert cell.tolist() == [row.value], (row.bench, row.kernel)
    assert wide.loc[wide["bench"] == "uprobe-push", "no probe"].tolist() == [""]  # the bench has no such row
