"""Charts fit for a projector: whole counts on count axes, legends that list only drawn bars, readable
annotations, and a linear throughput-by-kernel chart whose circles are the seeds' own figures."""
import math

import matplotlib
import pytest

matplotlib.use("Agg")

from matplotlib.collections import PolyCollection  # noqa: E402
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
    dots = next(c for c in ax.collections if not isinstance(c, PolyCollection))  # the band is a PolyCollection
    circles = {tuple(p) for p in dots.get_offsets().tolist()}
    # Intel i7-1165G7, uretprobe-nop: seed 000 1.498 and seed 002 (v1) 1.487 M/s on 6.10; both 1.969 M/s with
    # the uretprobe syscall (6.11)
    kernels = [t.get_text() for t in ax.get_xticklabels()]
    assert circles == {(kernels.index("6.10"), 1.498), (kernels.index("6.10"), 1.487), (kernels.index("6.11"), 1.969)}


def test_arm64_bench_legend_names_the_stp_handling_and_gains_print_one_decimal():
    legend = plot_published_bench().axes[0].get_legend()
    assert legend.get_title().get_text() == "the probed STP is"
    assert stp_gains().set_index("bench").loc["uprobe-push", "speedup_pct"] == 30.0


# --- every chart the course draws: no tick labels over each other, nothing cut off by the figure's edge ------

def _charts_01_to_04():
    from uprobe_lab.bench import events_table
    from uprobe_lab.views.arm64 import plot_published_stp
    from uprobe_lab.views.uretprobe import plot_trampoline_events

    events = events_table(["uprobe-nop", "uprobe-push", "uprobe-ret"], kernels=["6.18"]).set_index("bench")
    yield "01 events", charts.events_per_hit_chart(events.to_dict("index"), title="events per hit, kernel 6.18")
    yield "02 trampoline events", plot_trampoline_events()
    yield "04 published bench", plot_published_bench()
    yield "04 published stp", plot_published_stp()


def _charts_05():
    from uprobe_lab.views import model as model_views

    repro = model.reproduction()
    for (source, table), rows in repro.groupby(["source", "table"], sort=False):
        if not rows["duplicate_of"].iloc[0]:  # seed 004 quotes 003's table; chapter 05 draws it once
            yield f"05 seed {source[:3]} {table}", charts.seed_table_chart(repro, source, table)
    yield "05 error", charts.error_chart(repro)
    yield "05 breakdown", model_views.breakdown_for("intel")
    yield "05 kernel history", charts.kernel_history_chart()


def _charts_07():
    from uprobe_lab.views import many_cpus

    for kernel, bench in (("6.10", "uprobe-nop"), ("6.13", "uprobe-ret"), ("6.14", "uretprobe-nop")):
        yield f"07 lines {bench} {kernel}", many_cpus.lines_figure(bench, kernel, 8)
    yield "07 transfers", many_cpus.transfers_chart(many_cpus.transfers_curve("uprobe-nop", iterations=5))
    yield "07 this machine", many_cpus.native_scaling_chart(many_cpus.native_scaling(recorded=True))


def _charts_07_scaling():
    from uprobe_lab.model import contention
    from uprobe_lab.views import many_cpus

    result = contention.evaluate()  # every held-out row's transfers emulated: the slow part
    for table in contention.scaling_table()["table"].unique():
        yield f"07 scaling {table}", many_cpus.scaling_chart(result, table)


COURSE_CHARTS = {"01-04": _charts_01_to_04, "05": _charts_05, "07": _charts_07,
                 "07 scaling": pytest.param(_charts_07_scaling, marks=pytest.mark.slow)}


def _defects(fig) -> list[str]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)  # the course's charts are bare Figures: draw them as Agg would
    canvas.draw()
    renderer = canvas.get_renderer()
    edge = fig.bbox
    out = []

    def cut(artist, what):
        box = artist.get_window_extent(renderer)
        if box.width and (box.x0 < edge.x0 - 1 or box.y0 < edge.y0 - 1 or box.x1 > edge.x1 + 1 or box.y1 > edge.y1 + 1):
            out.append(f"{what} cut off by the figure's edge")

    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())  # labels of ticks outside the view are never drawn
            labels = [t for loc, t in zip(axis.get_majorticklocs(), axis.get_ticklabels())
                      if t.get_visible() and t.get_text() and lo - 1e-9 * abs(hi - lo) <= loc <= hi * (1 + 1e-9)]
            boxes = [t.get_window_extent(renderer) for t in labels]
            for (a, ta), (b, tb) in zip(zip(boxes, labels), list(zip(boxes, labels))[1:]):
                if a.overlaps(b):
                    out.append(f"tick labels {ta.get_text()!r} and {tb.get_text()!r} overlap")
            for t in labels:
                cut(t, f"tick label {t.get_text()!r}")
        texts = [t for t in ax.texts + [ax.title] if t.get_text()]
        for t in texts:
            cut(t, f"text {t.get_text()!r}")
        boxes = [(t, t.get_window_extent(renderer)) for t in texts]
        for i, (a, box_a) in enumerate(boxes):  # annotations side by side must not run into each other
            for b, box_b in boxes[i + 1:]:
                if box_a.overlaps(box_b):
                    out.append(f"texts {a.get_text()!r} and {b.get_text()!r} overlap")
        if ax.get_legend():
            cut(ax.get_legend(), "legend")
            if min(t.get_fontsize() for t in ax.get_legend().get_texts()) < 9:
                out.append("legend too small to read (under 9 pt)")
        for container in ax.containers:  # errorbar whiskers, the bars' own and errorbar()'s
            for line in getattr(container, "lines", (None, (), ()))[2] or ():
                for path in line.get_paths() if hasattr(line, "get_paths") else ():
                    ext = path.transformed(line.get_transform()).get_extents()
                    inside = ax.bbox
                    if ext.y1 > inside.y1 + 1 or ext.y0 < inside.y0 - 1:
                        out.append("an interval whisker runs out of the plot")
                        break
    return out


@pytest.mark.parametrize("charts_of", COURSE_CHARTS.values(), ids=COURSE_CHARTS.keys())
def test_course_charts_have_no_overlapping_tick_labels_and_nothing_cut_off(charts_of):
    """Every chart a chapter shows (a chapter's charts per case, so they draw in parallel), drawn as it draws it."""
    found = {name: d for name, fig in charts_of() if (d := _defects(fig))}
    assert found == {}


def test_chapter_05_draws_each_distinct_seed_table_once(monkeypatch, capsys):
    drawn = []
    monkeypatch.setattr("IPython.display.display", drawn.append)
    repro = model.reproduction()
    charts.seed_table_charts(repro)
    titles = [fig.axes[0].get_title() for fig in drawn]
    quoted = [t for _, _, t in charts.seed_tables(repro) if t]
    assert quoted and len(titles) == len(set(titles)) == len(charts.seed_tables(repro)) - len(quoted)
    assert capsys.readouterr().out.count("the same figures as seed") == len(quoted)  # said where it would be


def test_presenting_chapter_05_shows_one_seed_table_at_a_time_and_another_when_picked(monkeypatch):
    monkeypatch.setenv("UPROBE_LAB_LECTURE", "1")
    shown = []
    monkeypatch.setattr("IPython.display.display", shown.append)
    charts.seed_table_charts(model.reproduction())
    (box,) = shown
    picker, chart = box.children
    first = chart.value
    assert first.startswith('<img class="uprobe-lab-chart" alt="Seed 000')
    picker.value = picker.options[-1]
    assert chart.value.startswith(f'<img class="uprobe-lab-chart" alt="Seed {picker.value[:3]}')


SLIDE_COLUMN_PX = 1184  # a slide's width at 1280x720 less its margins (the lecture's paged.css)


@pytest.mark.parametrize("charts_of", COURSE_CHARTS.values(), ids=COURSE_CHARTS.keys())
def test_course_charts_as_presented_fit_a_slide_with_nothing_overlapping(charts_of):
    """Presenting, a chart's text is raised to 12 pt (views.readable) and the chart shown as wide as it is drawn
    (views.chart_html), where 12 pt is 16 px at 1280x720: it must be no wider than a slide, so it is not shrunk,
    and its bigger text must still run into nothing."""
    import re

    from uprobe_lab.views import chart_html

    found = {}
    for name, fig in charts_of():
        width = float(re.search(r"width: calc\(([\d.]+) \*", chart_html(fig))[1])  # raises the text first
        problems = _defects(fig) + ([f"{width:.0f} px wide"] if width > SLIDE_COLUMN_PX else [])
        if min(t.get_fontsize() for t in fig.findobj(matplotlib.text.Text) if t.get_text()) < 12:
            problems.append("text under 12 pt")
        if problems:
            found[name] = problems
    assert found == {}
