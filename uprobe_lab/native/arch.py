"""Which architectures the native mode knows, as one small table.

Each row says how to call perf_event_open on that architecture and where the bench bytes come
from. x86_64 is the only architecture measured so far. The arm64 row takes its bytes from
``uprobe_lab.arm64.programs.bench_program``, but native arm64 is UNTESTED: nothing in this package
has run on an arm64 kernel yet.
"""
from __future__ import annotations

import importlib
import os
import platform
from dataclasses import dataclass


@dataclass(frozen=True)
class ArchSpec:
    name: str  # the lab's name for it ("x86_64", "arm64")
    machines: tuple[str, ...]  # what os.uname().machine says on such a host
    perf_event_open_nr: int  # __NR_perf_event_open
    programs_module: str  # module whose bench_program(base) gives the bench bytes


ARCHES: dict[str, ArchSpec] = {
    # arch/x86/entry/syscalls/syscall_64.tbl: 298 common perf_event_open
    "x86_64": ArchSpec("x86_64", ("x86_64", "amd64"), 298, "uprobe_lab.x86.programs"),
    # include/uapi/asm-generic/unistd.h: #define __NR_perf_event_open 241 (arm64 uses the generic table)
    "arm64": ArchSpec("arm64", ("aarch64", "arm64"), 241, "uprobe_lab.arm64.programs"),
}


def host_arch() -> str:
    """The lab's name for this machine's architecture, or the raw machine name if unknown."""
    machine = os.uname().machine if hasattr(os, "uname") else platform.machine()
    for spec in ARCHES.values():
        if machine in spec.machines:
            return spec.name
    return machine


def arch_spec(arch: str | None = None) -> ArchSpec | None:
    """The table row for ``arch`` (default: this host), or None if the lab has no row for it."""
    return ARCHES.get(arch or host_arch())


def perf_event_open_nr(arch: str | None = None) -> int:
    spec = arch_spec(arch)
    if spec is None:
        raise KeyError(f"no perf_event_open number known for {arch or host_arch()!r}")
    return spec.perf_event_open_nr


def load_bench_program(arch: str | None = None):
    """``bench_program`` of the arch's programs module; ImportError if the lab has no row for ``arch``."""
    spec = arch_spec(arch)
    if spec is None:
        raise ImportError(f"no bench bytes for {arch or host_arch()!r}")
    return importlib.import_module(spec.programs_module).bench_program
