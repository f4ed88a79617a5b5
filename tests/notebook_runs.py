"""Each chapter executed once per test process, shared by the tests that read its outputs.

test_notebooks.py (does it run?), test_site.py (the site is built from these runs) and test_presenter.py
(what a headless run prints) all need the same headless execution; running it once for all of them is
what keeps the full suite within its time. They carry the ``notebooks`` xdist group, so a parallel run
gives them one worker and so one cache. The returned notebooks are shared: read them, do not change them.
"""
from __future__ import annotations

import functools
import os
from pathlib import Path

from uprobe_lab import presenter
from uprobe_lab.native import example
from uprobe_lab.site import execute_notebook

NOTEBOOK_DIR = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))


def executed(name: str, lecture: bool = False, recorded: bool = False):
    """``name`` run top to bottom as headless Run All (or as ./lab lecture, or with chapter 06 reading its
    recording instead of this host: UPROBE_LAB_NATIVE=recorded); raises LabError on a cell's error."""
    return _executed(name, lecture, recorded)  # one cache key however the caller spells the arguments


@functools.cache
def _executed(name: str, lecture: bool, recorded: bool):
    wanted = {presenter.ENV: "1" if lecture else None, example.ENV: "recorded" if recorded else None}
    saved = {key: os.environ.get(key) for key in wanted}
    try:
        _set_environ(wanted)  # the notebook's kernel inherits this process's environment
        return execute_notebook(NOTEBOOK_DIR / name)
    finally:
        _set_environ(saved)


def _set_environ(values: dict[str, str | None]) -> None:
    for key, value in values.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def code_outputs(nb) -> list[dict]:
    return [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
