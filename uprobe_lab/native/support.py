"""Whether native benches can run on this host: every check once, in the order a reader meets them.

The errors themselves (``NativeUnavailable`` and the messages with their way out) are in
uprobe_lab.native.errors, which code.py and perf.py raise too.
"""
from __future__ import annotations

import os
import platform

from . import code, perf
from .arch import ARCHES, host_arch, load_bench_program
from .errors import not_linux, unsupported_arch


def check_native_support(arch: str | None = None) -> str:
    """Raise NativeUnavailable unless native benches can run here; return the lab's arch name.

    Checks, in order: Linux; an architecture with bench bytes that matches this host (only x86_64
    now; arm64 plugs in through uprobe_lab.native.arch.ARCHES and is untested); the uprobe PMU;
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
    module = ARCHES[arch].programs_module
    try:
        load_bench_program(arch)
    except ImportError as err:
        # Only the module (or a package above it) being absent means "no bytes yet"; an import that
        # fails inside it is a broken install or a bug, and its own error says which module is missing.
        if err.name is None or not (module == err.name or module.startswith(err.name + ".")):
            raise
        raise unsupported_arch(arch, f"{module} does not exist yet") from None
    perf.uprobe_pmu_type()
    with code.scratch_dir() as d:
        perf.trial_open(d)
    return arch
