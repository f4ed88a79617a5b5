"""The architectures the lab emulates: how to make a process, its bench program, and analyze()."""
from __future__ import annotations

from .errors import LabError


def _x86():
    from .x86 import analyze, programs
    from .x86.process import X86Process
    return X86Process, programs.bench_program, analyze.analyze_hex


def _arm64():
    from .arm64 import programs, uprobes
    from .arm64.process import Arm64Process
    return Arm64Process, programs.bench_program, uprobes.analyze_hex


ARCHES = {"x86_64": _x86, "arm64": _arm64}


def arch_parts(arch: str):
    """(process class, bench_program(), analyze_hex()) for an architecture name."""
    try:
        return ARCHES[arch]()
    except KeyError:
        raise LabError(f"unknown architecture {arch!r}: the lab emulates {', '.join(ARCHES)}") from None


def make_process(arch: str = "x86_64", kernel=None, **options):
    """A fresh emulated process of ``arch`` with the kernel bench program loaded."""
    process_cls, bench_program, _ = arch_parts(arch)
    proc = process_cls(kernel, **options)
    proc.load(bench_program())
    return proc
