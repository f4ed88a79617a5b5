"""The presenter switch: ``./lab lecture`` sets UPROBE_LAB_LECTURE=1 for the Voila server it starts, and the
notebooks ask ``lecture_mode()`` before printing what a widget is there to reveal step by step.

Headless runs (the test suite, ``jupyter nbconvert --execute``, the course site) and JupyterLab do not set it, so
they still print every walk: without a widget front end the printout is the only way to see it.
"""
from __future__ import annotations

import os

ENV = "UPROBE_LAB_LECTURE"


def lecture_mode() -> bool:
    """Whether the notebook is being presented (``./lab lecture``)."""
    return os.environ.get(ENV, "").strip().lower() not in ("", "0", "no", "false")


def print_walk(*items) -> None:
    """Print a stepper's walk - steps (anything with ``describe()``), lists of them, or text - unless presenting."""
    if lecture_mode():
        return
    for item in items:
        for part in (item if isinstance(item, (list, tuple)) else [item]):
            print(part.describe() if hasattr(part, "describe") else part)
