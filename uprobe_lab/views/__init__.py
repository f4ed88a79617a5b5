"""Widgets and charts for the notebooks. Logic lives in the library; these only show it.

Charts are built on matplotlib.figure.Figure, so they work headless; ``display(fig)`` shows one."""
