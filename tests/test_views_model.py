"""The chapter-05 widgets' logic: published marks, prices driving the chart, the breakdown."""
from matplotlib.figure import Figure

from uprobe_lab import model
from uprobe_lab.views import model as views


def test_published_2024_columns_are_the_seed_rows():
    pub = views.published_2024("intel")
    assert list(pub.index) == list(views.SLIDER_BENCHES)
    assert pub.loc["uretprobe-nop", "current"] == 1.487 and pub.loc["uretprobe-nop", "fix"] == 1.969


def test_price_chart_follows_the_prices():
    prof = model.get_profile("intel")
    heights = lambda fig: [round(p.get_height(), 6) for p in fig.axes[0].patches]
    base = heights(views.price_chart(prof))
    cheaper = heights(views.price_chart(prof.with_prices(exception=prof.prices["exception"] / 2)))
    assert len(base) == 2 * len(views.SLIDER_BENCHES)
    assert all(c > b for c, b in zip(cheaper, base))  # every bench takes an exception: all get faster


def test_breakdown_and_widgets_build():
    fig = views.breakdown_for("intel")
    assert fig.axes and views.x86_profile_names()
    dropdown, chart, report = views.breakdown_widget().children  # drawn by value (views/redraw.py), chart first
    assert dropdown.value in views.x86_profile_names()
    shown = report.value.replace("<wbr>", "")  # what the reader sees: a column name may break after "_"
    assert "prior_ns" in shown and "prior_from" not in shown
    assert chart.figure.axes and "data:image/svg+xml;base64," in chart.value
    assert len(views.price_sliders("intel").children) == len(views.SLIDER_PRICES) + 1


def test_price_sliders_mark_the_chosen_profiles_table(monkeypatch):
    seen = []
    monkeypatch.setattr(views, "price_chart", lambda profile, published=None: seen.append(published) or Figure())
    views.price_sliders("amd")
    assert seen and seen[-1].equals(views.published_2024("amd"))
    views.price_sliders("nop5")  # seed 002 did not run on the nop5 machine: no marks, not another CPU's
    assert seen[-1] is None


def test_widgets_show_their_content_as_text():
    text = views.breakdown_widget()._repr_mimebundle_()["text/plain"]
    assert "intel-i7-1165g7" in text and "prior_ns" in text and "6.11 uretprobe-nop" in text
    sliders = views.price_sliders("amd")
    text = sliders._repr_mimebundle_()["text/plain"]
    amd = views.published_2024("amd")
    assert "exception=" in text and f"{amd.loc['uretprobe-nop', 'fix']:.3f}" in text
    sliders.children[0].value = 2 * sliders.children[0].value  # a dearer exception: the text follows
    assert sliders._repr_mimebundle_()["text/plain"] != text


def test_moving_a_price_slider_redraws_the_chart_with_that_price(monkeypatch):
    drawn = []
    real_chart = views.price_chart

    def spy(profile, *args, **kwargs):
        drawn.append(dict(profile.prices))
        return real_chart(profile, *args, **kwargs)

    monkeypatch.setattr(views, "price_chart", spy)
    *sliders, _ = views.price_sliders("intel").children
    assert len(drawn) == 1  # drawn once with the profile's own prices
    exception = next(s for s in sliders if s.description == "exception")
    new = round(exception.value / 2, 1)
    assert new != exception.value
    exception.value = new
    assert len(drawn) == 2, "moving the exception slider did not redraw the chart"
    assert drawn[-1]["exception"] == new
    assert drawn[-1]["syscall"] == drawn[0]["syscall"]  # the other prices stay


def test_the_error_summary_shows_counts_whole_and_no_median_blank():
    summary = model.error_summary(model.reproduction())
    shown = views.summary_by_table(summary)
    first = shown.iloc[:, 0]  # seed 000's intel table: no unmoved rows, so no median of them
    assert first["fit_rows"] == "3" and first["unmoved_rows"] == "0" and first["unmoved_median_abs_err"] == ""
    assert first["fit_median_abs_err"] == f"{summary.iloc[0]['fit_median_abs_err']:.1f}"
    assert list(views.summary_by_table(summary.drop(columns="source"), index=["table"]).columns) == list(summary["table"])
