"""Views: matplotlib charts (and, in the notebooks, widgets) over the lab's data."""
