"""Charts and chapter text of 05-08 that name what a figure is: a prediction with its interval, a patch set's
before/after columns for the releases they stand for, loop iterations for the benches without a probe, a log axis,
a target missed, and a cache line with the fields of its kernel's version."""
from pathlib import Path

import nbformat
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PolyCollection

from uprobe_lab import model
from uprobe_lab.native import calibrate, example
from uprobe_lab.published import figure_words
from uprobe_lab.views import charts, many_cpus, native

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def _text(stem: str) -> str:
    nb = nbformat.read(NOTEBOOKS / f"{stem}.ipynb", as_version=4)
    return " ".join(" ".join(c.source for c in nb.cells if c.cell_type == "markdown").split())


@pytest.fixture(scope="module")
def repro():
    return model.reproduction()


def test_an_unmerged_patch_set_s_columns_are_named_for_what_they_are():
    # seed 003: Jiri Olsa's RFCv2 12/18 of 24 Feb 2025, "current" vs "after the change", charted at 6.11 / 6.18
    assert figure_words("003_4679909cb9325581.txt", ["6.11", "6.18", "6.11"]) == \
        "RFCv2 before/after (Feb 2025), standing for 6.11 / 6.18 rules"
    assert figure_words("003_4679909cb9325581.txt", ["6.18"]) == "RFCv2 (Feb 2025), standing for 6.18 rules"
    assert figure_words("000_721b81d609a5b978.txt", ["6.10", "6.11"]) == "published"


def test_the_release_history_draws_each_line_s_80_percent_band_and_names_the_rfc_circles():
    fig = charts.kernel_history_chart()
    intel, nop5 = fig.axes
    for ax in (intel, nop5):  # one band per bench line
        assert sum(isinstance(c, PolyCollection) for c in ax.collections) == len(charts.HISTORY_BENCHES)
    said = " ".join(nop5.get_title().split())
    assert "circles: RFCv2 before/after (Feb 2025), standing for 6.11 / 6.18 rules" in said
    assert "circles" not in intel.get_title()  # the Intel laptop's circles are its merged patch's published rows
    title = nop5.get_legend().get_title().get_text()
    assert "80% interval" in title and "published" not in title


def test_the_native_chart_names_the_6_18_figures_as_the_rfc_s():
    ex = example.load_example()
    comparison = calibrate.native_vs_model(ex["benches"], calibrate.calibrate(ex["benches"]))
    fig = native.native_chart(comparison)
    legend = fig.axes[0].get_legend() or fig.legends[0]  # below the bars: the figure's legend
    labels = [t.get_text() for t in legend.get_texts()]
    assert "RFCv2 (Feb 2025), standing for 6.18 rules (an unnamed x86-64 machine), for scale" in labels


def test_a_seed_chart_says_its_log_axis_and_the_loops_iterations(repro):
    seed3 = charts.seed_table_chart(repro, "003_4679909cb9325581.txt", "nop5-bench").axes[0]
    label = " ".join(seed3.get_ylabel().split())
    assert seed3.get_yscale() == "log" and "log scale" in label
    assert "loop iterations for usermode-count, syscall-count" in label
    intel = charts.seed_table_chart(repro, "000_721b81d609a5b978.txt", "intel").axes[0]
    assert intel.get_yscale() == "linear" and intel.get_ylabel().startswith("M hits/s")


def test_the_error_chart_s_legend_stands_beside_the_rows(repro):
    fig = charts.error_chart(repro)
    FigureCanvasAgg(fig).draw()
    ax = fig.axes[0]
    legend = ax.get_legend().get_window_extent()
    assert legend.x0 >= ax.get_window_extent().x1  # right of the plot: rows at x = 67-71 stay visible


def test_the_targets_line_says_which_target_was_missed():
    # the protocol's targets: median |error| <= 5%, coverage >= 80%, widest half-width <= 15%
    h = {"moved_median_abs_err_pct": 4.2, "moved_coverage": 0.75, "moved_max_half_width_pct": 13.4}
    text = model.targets_text(h)
    assert text.startswith("Against the protocol's targets, 1 of 3 targets missed")
    assert "75% of the moved rows inside their 80% intervals (target >= 80%): missed" in text
    assert "median |error| 4.2% (target <= 5%): met" in text
    assert model.targets_text({**h, "moved_coverage": 0.8}).startswith("Against the protocol's targets, every")


@pytest.mark.parametrize("kernel, fields", [("6.10", "wq, slot_count, bitmap"),
                                            ("6.12", "wq, slot_count, bitmap, page, vaddr"),
                                            ("6.13", "wq, bitmap, page, vaddr"), ("6.18", "wq, bitmap, page, vaddr")])
def test_struct_xol_area_s_first_line_is_one_box_with_its_kernel_s_fields(kernel, fields):
    # 6.12 put vaddr beside slot_count; 6.13 (7a166094bd2b) dropped slot_count
    xol = [b for b in many_cpus.boxes(kernel) if b.startswith("struct xol_area +0")]
    assert xol == [f"struct xol_area +0: {fields}"]
    mm = [b for b in many_cpus.boxes(kernel) if b.startswith("struct mm_struct")]
    assert mm == ["struct mm_struct: mmap_lock", "struct mm_struct: mm_lock_seq"]  # two lines, two boxes


def test_chapter_text_says_what_the_figures_are():
    t05, t06, t07 = _text("05_reproducing_benchmarks"), _text("06_your_machine"), _text("07_many_cpus")
    assert "at 7.2 (the 7.2.y line" not in t05 and "falls back to its 6.16 level at 7.3" in t05  # the chart's axis
    assert "the single-CPU cost model's events do not have" in t05 and "kernel history does not have" not in t05
    assert "dd1a7567784e" in t06 and "8622e45b5da1" in t06  # the 6.10/6.11 uretprobe bars on this kernel
    assert "On 2026-12-02" not in t06 and "256 of 270" not in t06  # the history is docs/performance.md's
    assert "its T1, the table's published 1-CPU row" in t07
    nb05 = nbformat.read(NOTEBOOKS / "05_reproducing_benchmarks.ipynb", as_version=4)
    assert any("model.targets_text(" in c.source for c in nb05.cells if c.cell_type == "code")
