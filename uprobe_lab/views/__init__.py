"""Widgets and charts for the notebooks. Logic lives in the library; these only show it.

Charts are built on matplotlib.figure.Figure, so they work headless; ``display(fig)`` shows one. Such a
figure has no pyplot manager, so IPython only knows how to show it as an image once the inline backend has
registered its PNG formatter (``%matplotlib inline`` or importing pyplot under it). Importing this package
in an IPython kernel registers it, so ``display(fig)`` draws the chart instead of printing
``<Figure size ... with 1 Axes>``."""


def _show_figures_as_png() -> None:
    try:
        from IPython import get_ipython
        from IPython.core.pylabtools import select_figure_formats
    except ImportError:  # pragma: no cover - IPython comes with ipywidgets/jupyterlab
        return
    shell = get_ipython()
    if shell is None or not hasattr(shell, "display_formatter"):
        return
    from matplotlib.figure import Figure

    png = shell.display_formatter.formatters.get("image/png")
    if png is not None and Figure not in png.type_printers:
        select_figure_formats(shell, {"png"})


_show_figures_as_png()
