"""The host kernel as referee: run instructions under real uprobes and compare with the lab.

``verify(arch="x86_64", ...)`` dispatches on the architecture: ``x86*.py`` here probe this host's
kernel through perf's uprobe PMU; an arm64 referee plugs in as ``verify/arm64.py`` with a
``verify_arm64(**options)`` that returns a report with ``format()`` and ``as_dict()``.
"""
from __future__ import annotations

import importlib

from ..errors import LabError

ARCHES = ("x86_64", "arm64")


def verify(arch: str = "x86_64", **options):
    """Run the referee for ``arch``; the report has ``format()`` (text) and ``as_dict()`` (JSON)."""
    if arch not in ARCHES:
        raise LabError(f"no referee for {arch!r}; choose one of {', '.join(ARCHES)}")
    name = "x86" if arch == "x86_64" else arch
    try:
        module = importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as err:
        if err.name != f"{__name__}.{name}":
            raise
        raise LabError(f"the {arch} referee is not part of this version of the lab yet") from None
    return getattr(module, f"verify_{name}")(**options)
