"""What a widget redraws goes into a widget's value - an HTML widget's markup (a figure as SVG) - never into an
``ipywidgets.Output``.

Why not an Output widget: it can stall a lecture's loading for good. ``./lab lecture`` has Voila run the chapter
with nbclient, which stands in for the front end of every Output widget (nbclient/output_widget.py): when a cell
displays or prints into one, or clears it at once, nbclient sends the kernel the widget's new outputs (a
comm_msg) on the shell channel, the socket on which it is waiting for that cell's execute_reply.
jupyter_client's Session.send writes to that asyncio socket through a blocking shadow of it
(``zmq.Socket.shadow``), behind pyzmq's asyncio bookkeeping; the send makes libzmq process the socket's pending
commands, which takes the socket's ready signal (ZMQ_FD, edge-triggered) for an execute_reply that has just
arrived, and pyzmq, not having seen the send, does not look again. The reply then sits unread while nbclient
waits for it, without end unless a cell timeout wakes it (lecture.CELL_TIMEOUT_S, 40 s): the page stays at
"Executing i of n" with the kernel idle, a few runs in a hundred of a cell that draws into an Output widget (4 in
300 of chapter 07's widget cell with nbclient alone, none in 300 drawn into an Image). A widget whose value the
kernel replaces sends nothing back, so it cannot stall.
"""
from __future__ import annotations

import functools
import html

from matplotlib.figure import Figure

from ..errors import LabError
from . import chart_html, table_html


def figure_view():
    """An empty HTML widget for figures: :func:`show_figure` draws one into it."""
    import ipywidgets as w

    view = w.HTML()
    view.figure = None
    return view


def show_figure(view, fig: Figure) -> None:
    """Draw ``fig`` into the HTML widget ``view`` as an SVG with its text as text (``views.chart_html``: measured and
    scaled on a slide like every other chart); ``view.figure`` is the one shown."""
    view.figure = fig
    view.value = chart_html(fig)


def widget_table_html(frame) -> str:
    """A DataFrame for an HTML widget's value: as the page shows every table (``views.table_html``), inside the
    notebook's table style, which an HTML widget's content does not get as an output does."""
    return f"<div class='jp-RenderedHTMLCommon' style='line-height:normal'>{table_html(frame)}</div>"


def lab_error_html(err: LabError) -> str:
    """A LabError as the command line prints it, ``error: `` and its message (what is wrong and the way out)."""
    return f"<p style='color:#b00'>error: {html.escape(str(err))}</p>"


def shows_lab_errors(view, *others):
    """The decorator every widget callback goes through (a button's click, a control's observer): a LabError it
    raises shows in ``view``, the HTML widget the callback draws into, as :func:`lab_error_html`, and ``others``
    (the views that would show the failed choice's figure or table) are emptied. Left to ipywidgets, a LabError
    would come with a page of the lab's frames, as a bug does: a click's through IPython's showtraceback, an
    observer's through the kernel's comm log. Any other exception (a bug) goes on up to ipywidgets, traceback and
    all."""
    def wrap(callback):
        @functools.wraps(callback)
        def run(*args, **kwargs):
            try:
                return callback(*args, **kwargs)
            except LabError as err:
                for shown in (view, *others):
                    if hasattr(shown, "figure"):  # a figure_view: it shows no figure now
                        shown.figure = None
                    shown.value = ""
                view.value = lab_error_html(err)
        run.shows_lab_errors = True  # what tests/test_widgets_driven.py checks every callback for
        return run
    return wrap
