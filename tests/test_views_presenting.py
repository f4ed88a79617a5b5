"""What the lecture shows instead of the notebook's outputs: charts as SVG whose text is text, no smaller than
12 pt and sized in the slides' own pixels; tables without bare row numbers and with places to break."""
import base64
import re
import xml.etree.ElementTree as ET

import matplotlib
import pandas as pd

matplotlib.use("Agg")

from matplotlib.figure import Figure  # noqa: E402

from uprobe_lab.views import DESIGN_DPI, chart_html, readable, table_html  # noqa: E402


def _svg_of(html: str) -> ET.Element:
    data = re.search(r'src="data:image/svg\+xml;base64,([^"]+)"', html)[1]
    return ET.fromstring(base64.b64decode(data))


def _small_chart() -> Figure:
    fig = Figure(figsize=(6, 3))
    ax = fig.add_subplot()
    ax.bar(["uprobe-nop", "uprobe-ret"], [3.0, 1.1], label="published")
    ax.legend(fontsize=7)
    ax.set_title("a title", fontsize=9)
    ax.annotate("+31%", (0, 3.0), fontsize=8)
    return fig


def test_a_presented_chart_is_svg_text_of_12_pt_or_more_as_wide_as_drawn_in_slide_pixels():
    html = chart_html(_small_chart())
    svg = _svg_of(html)
    texts = [t for t in svg.iter("{http://www.w3.org/2000/svg}text")]
    assert {"uprobe-nop", "published", "a title", "+31%"} <= {"".join(t.itertext()) for t in texts}  # text, not paths
    sizes = [float(re.search(r"font[^;]*?([\d.]+)px", t.get("style"))[1]) for t in texts]
    assert min(sizes) >= 12  # points: 16 px on a 1280x720 slide
    width_pt = float(svg.get("width").removesuffix("pt"))
    css = re.search(r"width: calc\(([\d.]+) \* var\(--px, 1px\)\)", html)
    assert abs(float(css[1]) - width_pt * DESIGN_DPI / 72) < 1 and "max-width: 100%" in html
    assert 'alt="a title"' in html


def test_readable_raises_small_text_and_leaves_big_text_alone():
    fig = _small_chart()
    fig.axes[0].set_xlabel("big", fontsize=20)
    readable(fig)
    ax = fig.axes[0]
    assert ax.get_xlabel() == "big" and ax.xaxis.label.get_fontsize() == 20
    assert ax.title.get_fontsize() == 12 and ax.texts[0].get_fontsize() == 12
    assert min(t.get_fontsize() for t in ax.get_legend().get_texts()) == 12
    assert min(t.get_fontsize() for t in ax.get_xticklabels() + ax.get_yticklabels()) >= 12


def test_a_presented_table_drops_bare_row_numbers_and_may_break_after_underscores():
    df = pd.DataFrame({"uaccess_bytes": [16, 0], "usdt": ["uprobe_lab:nop10_pagecross", "x/y"]})
    html = table_html(df)
    assert "uaccess_<wbr>bytes" in html and "uprobe_<wbr>lab:<wbr>nop10_<wbr>pagecross" in html
    assert "<th>0</th>" not in html and "<td>16</td>" in html  # no index column of 0, 1
    assert re.sub("<wbr>", "", html).count("uprobe_lab:nop10_pagecross") == 1  # the words themselves unchanged
    numbered = df.set_axis(pd.Index([0, 1]))  # 0, 1 as integers, as a filter or a concat leaves them, not a range
    assert "<th>0</th>" not in table_html(numbered) and "<th>0</th>" in table_html(df.iloc[[1, 0]])
    named = table_html(df.set_index("usdt"))
    assert "<th>x/<wbr>y</th>" in named  # an index that says something stays


def test_figures_are_png_for_a_reader_and_svg_in_html_while_presenting(monkeypatch):
    from IPython.core.interactiveshell import InteractiveShell

    import uprobe_lab.views as views

    monkeypatch.delenv("UPROBE_LAB_LECTURE", raising=False)
    shell = InteractiveShell.instance()
    monkeypatch.setattr("IPython.get_ipython", lambda: shell)
    views._show_figures()
    formatters = shell.display_formatter.formatters
    assert Figure in formatters["image/png"].type_printers
    assert Figure not in formatters["text/html"].type_printers
    monkeypatch.setenv("UPROBE_LAB_LECTURE", "1")
    views._show_figures()
    assert Figure not in formatters["image/png"].type_printers
    assert formatters["text/html"].type_printers[Figure] is chart_html
    assert formatters["text/html"].type_printers[pd.DataFrame] is table_html
    formatters["text/html"].type_printers.pop(Figure)  # the shell is shared: leave it as the rest of the suite knows
    formatters["text/html"].type_printers.pop(pd.DataFrame)
    monkeypatch.delenv("UPROBE_LAB_LECTURE")
    views._show_figures()
    assert Figure in formatters["image/png"].type_printers
