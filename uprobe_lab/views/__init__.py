"""Widgets and charts for the notebooks. Logic lives in the library; these only show it.

Charts are built on matplotlib.figure.Figure, so they work headless; ``display(fig)`` shows one. Such a
figure has no pyplot manager, so IPython only knows how to show it as an image once the inline backend has
registered its PNG formatter (``%matplotlib inline`` or importing pyplot under it). Importing this package
in an IPython kernel registers it, so ``display(fig)`` draws the chart instead of printing
``<Figure size ... with 1 Axes>``.

While presenting (``./lab lecture``) a chart is shown as SVG instead (``chart_html``): sharp on a projector, its
text real text that the slides' test can measure, and sized in the slides' screen-scaled pixels; and a table's
headers may break after an underscore (``table_html``), so a wide one fits the slide."""
from __future__ import annotations

import base64
import html
import io
import re

from ..presenter import lecture_mode

DESIGN_DPI = 96  # CSS pixels per inch: a chart drawn w inches wide is w * 96 px wide on a 1280x720 slide
SLIDE_MIN_PT = 12  # the smallest text on a chart while presenting: 16 px on a 1280x720 slide


def readable(fig, points: float = SLIDE_MIN_PT):
    """Raise every text of ``fig`` smaller than ``points`` (tick labels, legends, annotations) to it."""
    from matplotlib.text import Text

    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            ticks = axis.get_ticklabels(which="both")
            if ticks and min(t.get_fontsize() for t in ticks) < points:
                axis.set_tick_params(which="both", labelsize=points)
    for text in fig.findobj(Text):
        if text.get_fontsize() < points:
            text.set_fontsize(points)
    return fig


def chart_html(fig) -> str:
    """A figure as an SVG image with its text as text, as wide as it was drawn in the slides' pixels (``--px``,
    which grow with the screen; 1 px outside the slides), never wider than its column. A chart's fonts, in
    points, are then 4/3 as many pixels on a 1280x720 slide; ``readable`` raises the smaller ones to 12 pt, 16 px
    (on the figure itself: a chart is drawn to be shown)."""
    import matplotlib

    readable(fig)
    svg = io.BytesIO()
    with matplotlib.rc_context({"svg.fonttype": "none"}):  # text as <text>, not as outlines
        fig.savefig(svg, format="svg", bbox_inches="tight")
    data = svg.getvalue()
    width_pt = float(re.search(rb'<svg[^>]*\swidth="([\d.]+)pt"', data)[1])
    title = next((ax.get_title() for ax in fig.axes if ax.get_title()), "") or (
        fig.get_suptitle())
    return (f'<img class="uprobe-lab-chart" alt="{html.escape(title or "chart")}" '
            f'style="width: calc({width_pt * DESIGN_DPI / 72:.0f} * var(--px, 1px)); max-width: 100%; height: auto" '
            f'src="data:image/svg+xml;base64,{base64.b64encode(data).decode()}">')


def table_html(df) -> str | None:
    """A DataFrame as pandas shows it, narrower: without the row numbers 0, 1, 2... when that is all its index
    says, and its words breakable after an underscore, a colon or a slash (``uaccess_<wbr>bytes``,
    ``uprobe_lab:<wbr>nop10_<wbr>pagecross``), so a wide table fits a slide's width instead of scrolling sideways."""
    import pandas as pd

    index = df.index
    numbers_only = index.name is None and index.equals(pd.RangeIndex(len(df)))  # 0, 1, 2... whatever its type
    html_ = df.to_html(index=False, notebook=True, max_rows=pd.get_option("display.max_rows"),
                       max_cols=pd.get_option("display.max_columns"),
                       show_dimensions=pd.get_option("display.show_dimensions")) if numbers_only else df._repr_html_()
    return html_ and re.sub(r"(<t[hd][^>]*>)([^<]*)(?=</t[hd]>)",
                            lambda m: m[1] + re.sub(r"([_:/])(?=\w)", r"\1<wbr>", m[2]), html_)


def _show_figures() -> None:
    try:
        from IPython import get_ipython
        from IPython.core.pylabtools import select_figure_formats
    except ImportError:  # pragma: no cover - IPython comes with ipywidgets/jupyterlab
        return
    shell = get_ipython()
    if shell is None or not hasattr(shell, "display_formatter"):
        return
    import pandas as pd
    from matplotlib.figure import Figure

    formatters = shell.display_formatter.formatters
    if lecture_mode():
        for mime in ("image/png", "image/svg+xml", "image/jpeg", "application/pdf"):  # the HTML one alone
            if mime in formatters:
                formatters[mime].type_printers.pop(Figure, None)
        formatters["text/html"].for_type(Figure, chart_html)
        formatters["text/html"].for_type(pd.DataFrame, table_html)
        return
    png = formatters.get("image/png")
    if png is not None and Figure not in png.type_printers:
        select_figure_formats(shell, {"png"})


_show_figures()
