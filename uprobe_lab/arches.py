"""The architectures the lab emulates, one row each: adding an architecture is adding a row.

Each row names the process class (whose ``arch_ops`` implements uprobe_lab.arch_ops.ArchOps),
the kernel bench program, and the ``analyze`` that answers "what would the kernel do with a
probe on this instruction" for the CLI and notebooks.
"""
from __future__ import annotations

import inspect

from dataclasses import dataclass
from typing import Callable

from .arm64 import analyze as arm64_analyze, programs as arm64_programs
from .arm64.process import Arm64Process
from .errors import LabError, is_int, shown
from .process import EmulatedProcess
from .smp import MAX_CPUS
from .x86 import analyze as x86_analyze, programs as x86_programs
from .x86.process import X86Process


@dataclass(frozen=True)
class Arch:
    name: str
    process: type[EmulatedProcess]
    bench_program: Callable  # () -> Program: the kernel bench's targets and producer loop
    analyze: Callable  # (instruction text, KernelVersion, **options) -> dict; x86 takes hex bytes, arm64 a word


ARCHES = {
    "x86_64": Arch("x86_64", X86Process, x86_programs.bench_program, x86_analyze.analyze_hex),
    "arm64": Arch("arm64", Arm64Process, arm64_programs.bench_program, arm64_analyze.analyze_word),
}


def get_arch(name: str) -> Arch:
    """The row for an architecture name ('x86_64', 'arm64')."""
    try:
        return ARCHES[name]
    except (KeyError, TypeError):  # TypeError: a list or dict is no name
        raise LabError(f"unknown architecture {shown(name)}: the lab emulates {', '.join(ARCHES)}") from None


def check_options(func: Callable, options: dict, what: str) -> None:
    """Refuse keyword options ``func`` does not take, naming the ones it does (a typo is not ignored)."""
    params = inspect.signature(func).parameters
    accepted = [n for n, p in params.items() if p.kind is p.KEYWORD_ONLY or
                (p.kind is p.POSITIONAL_OR_KEYWORD and p.default is not p.empty and n != "kernel")]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise LabError(f"{what} takes no option {', '.join(map(repr, unknown))}; "
                       f"it takes {', '.join(accepted) or 'none'}")


def make_process(arch: str = "x86_64", kernel=None, cpus: int = 1, **options) -> EmulatedProcess:
    """A fresh emulated process of ``arch`` with the kernel bench program loaded. ``cpus``: how many emulated CPUs
    its threads run on when a call is made on all of them (uprobe_lab.smp.call_on_cpus)."""
    row = get_arch(arch)
    check_options(row.process, options, f"an {arch} process")
    if not is_int(cpus) or not 1 <= cpus <= MAX_CPUS:
        raise LabError(f"cpus is an int from 1 to {MAX_CPUS} (the kernel bench's limit), got {cpus!r}")
    proc = row.process(kernel, **options)
    proc.load(row.bench_program())
    proc.cpus = cpus
    return proc
