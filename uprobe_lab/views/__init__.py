"""Widgets and charts for the notebooks. Logic lives in the library; these only show it."""
