"""Whether native benches can run on this host: every check once, in the order a reader meets them.

The errors themselves (``NativeUnavailable`` and the messages with their way out) are in
uprobe_lab.native.errors, which code.py and perf.py raise too.
"""
from __future__ import annotations

import os
import platform

from . import code, perf
from .arch import ARCHES, host_arch
from .errors import not_linux, unsupported_arch


def check_native_support(arch: str | None = None) -> str:
    """Raise NativeUnavailable unless native benches can run here; return the lab's arch name.

    Checks, in order: Linux; an architecture with bench bytes that matches this host (a row of
    uprobe_lab.native.arch.ARCHES: x86_64, and arm64, which is untested); the uprobe PMU;
    a directory that allows exec mappings; and a trial perf_event_open of a uprobe on a scratch file
    nobody maps (so nothing is patched), which is where missing privileges show up.
    """
    sysname = os.uname().sysname if hasattr(os, "uname") else platform.system()
    if sysname != "Linux":
        raise not_linux(sysname)
    host = host_arch()
    arch = arch or host
    if arch not in ARCHES:
        raise unsupported_arch(arch, "the lab has no bytes for this architecture")
    if arch != host:
        raise unsupported_arch(arch, f"its bytes cannot run on this {host} host")
    perf.uprobe_pmu_type()
    with code.scratch_dir() as d:
        perf.trial_open(d)
    return arch
