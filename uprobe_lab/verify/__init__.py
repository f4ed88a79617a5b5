"""A real kernel as referee: run instructions under real uprobes and compare with the lab.

``verify(arch="x86_64", ...)`` dispatches on the architecture to ``verify_<name>(**options)`` of the
module of that name here: ``x86`` (``x86*.py``) probes this host's kernel through perf's uprobe PMU,
``arm64`` (``arm64*.py``) boots a Debian arm64 kernel under QEMU. Each returns a report with
``format()`` and ``as_dict()``.
"""
from __future__ import annotations

import importlib

from ..arches import ARCHES
from ..errors import LabError


def verify(arch: str = "x86_64", **options):
    """Run the referee for ``arch``; the report has ``format()`` (text) and ``as_dict()`` (JSON)."""
    if arch not in ARCHES:
        raise LabError(f"no referee for {arch!r}; choose one of {', '.join(ARCHES)}")
    name = "x86" if arch == "x86_64" else arch
    module = importlib.import_module(f"{__name__}.{name}")
    return getattr(module, f"verify_{name}")(**options)
