"""Charts fit for a projector: whole counts on count axes, legends that list only drawn bars, readable
annotations, and a linear throughput-by-kernel chart whose circles are the seeds' own figures."""
import math

import matplotlib

matplotlib.use("Agg")

from uprobe_lab import model  # noqa: E402
from uprobe_lab.views import charts  # noqa: E402
from uprobe_lab.views.arm64 import plot_published_bench, stp_gains  # noqa: E402


def test_events_chart_legend_lists_only_drawn_kinds_and_ticks_are_whole():
    rows = {"uprobe-nop": {"exceptions": 1, "emulated": 1, "consumers": 1},
            "uprobe-ret": {"exceptions": 2, "xol_steps": 1, "consumers": 1}}
    ax = charts.events_per_hit_chart(rows).axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["exceptions", "emulated", "xol_steps", "consumers"]
    assert all(float(t).is_integer() for t in ax.get_yticks())


def test_seed_chart_titles_in_words_and_annotations_readable():
    repro = model.reproduction()
    fig = charts.seed_table_chart(repro, "000_721b81d609a5b978.txt", "intel")
    ax = fig.axes[0]
    assert ax.get_title().startswith("Seed 000, Intel i7-1165G7")
    assert ax.texts and min(t.get_fontsize() for t in ax.texts) >= 9
    nop5 = charts.seed_table_chart(repro, "003_4679909cb9325581.txt", "nop5-bench").axes[0]
    assert "unnamed x86-64 machine" in nop5.get_title()
    # the after rows: uprobe-nop5 and uretprobe-nop5 change events with the patch (moved), the rest do not
    labels = [t.get_text() for t in nop5.get_legend().get_texts()]
    assert {"after model, moved", "after model, unmoved", "current model, fit"} <= set(labels)
    moved = next(c for c in nop5.containers if c.get_label() == "after model, moved")
    ticks = [t.get_text() for t in nop5.get_xticklabels()]
    drawn = [ticks[i] for i, bar in enumerate(moved) if not math.isnan(bar.get_height())]
    assert drawn == ["uprobe-nop5", "uretprobe-nop5"]


def test_kernel_history_chart_is_linear_and_its_circles_are_the_seed_figures():
    fig = charts.kernel_history_chart(profiles=("intel",), benches=("uretprobe-nop",))
    ax = fig.axes[0]
    assert ax.get_yscale() == "linear"
    circles = {tuple(p) for p in ax.collections[0].get_offsets().tolist()}
    # Intel i7-1165G7, uretprobe-nop: seed 000 1.498 and seed 002 (v1) 1.487 M/s on 6.10; both 1.969 M/s with
    # the uretprobe syscall (6.11)
    kernels = [t.get_text() for t in ax.get_xticklabels()]
    assert circles == {(kernels.index("6.10"), 1.498), (kernels.index("6.10"), 1.487), (kernels.index("6.11"), 1.969)}


def test_arm64_bench_legend_names_the_stp_handling_and_gains_print_one_decimal():
    legend = plot_published_bench().axes[0].get_legend()
    assert legend.get_title().get_text() == "the probed STP is"
    assert stp_gains().set_index("bench").loc["uprobe-push", "speedup_pct"] == 30.0
