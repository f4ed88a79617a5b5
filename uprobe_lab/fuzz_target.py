"""What the differential fuzzer (uprobe_lab.fuzz) needs from an architecture, written once.

uprobe_lab.fuzz is arch-neutral: it generates a program, runs it unprobed and then once per probe,
compares the final states and labels each hit's mechanism, all through a ``FuzzTarget``. Each
architecture has one (x86.fuzz_target.TARGET, arm64.fuzz_target.TARGET).
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Protocol

from .arches import get_arch
from .program import Program


@dataclass(frozen=True)
class Config:
    """One way to run a probe hit: the architecture, a kernel, and process options."""

    arch: str
    label: str
    kernel: object = None
    options: tuple = ()

    def process(self):
        return get_arch(self.arch).process(self.kernel, **dict(self.options))


class FuzzTarget(Protocol):
    arch: str
    entry: str  # the generated program's entry symbol
    trace_registers: tuple[str, ...]  # registers that may hold return_trace() after a return probe

    def configs(self) -> list[Config]:
        """Every kernel and option set a probe hit is run under."""

    def program(self, rng: random.Random, size: int | None) -> Program:
        """A random program whose result depends only on its input (the seed)."""

    def load(self, proc, program: Program) -> None:
        """Map the program (and any data it uses) into a fresh process."""

    def args(self, seed: int) -> tuple[int, ...]:
        """The entry's arguments for this seed."""

    def final_state(self, proc) -> dict:
        """Everything the program computed: registers, flags, the stack it owns, its data."""

    def special_sites(self, insns: list[tuple[int, bytes]]) -> list[int]:
        """Sites the kernel treats specially, probed in every program (the others are sampled)."""

    def record_hit(self, proc, vaddr: int, regs) -> tuple | None:
        """What an entry hit leaves that classify() may need (None: nothing)."""

    def mechanism(self, proc, uprobe, records: list, ret: bool) -> str:
        """Which mechanism ran the hit (emulate, xol, nop5-opt, uretprobe-syscall, simulate, ...)."""

    def return_trace(self, proc) -> int | None:
        """A value a return probe leaves in the state by design (arm64: the trampoline in lr)."""

    def classify(self, config: Config, vaddr: int | None, records: list, got: dict,
                 replay: Callable[[Callable], dict]) -> str:
        """'BUG', or the name of a known, documented divergence; ``replay(hook)`` reruns unprobed."""
