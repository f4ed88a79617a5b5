"""The arm64 side of the differential fuzzer (uprobe_lab.fuzz): programs, state and mechanisms."""
from __future__ import annotations

import random

from ..fuzz_target import Config
from .constants import STACK_TOP
from .randprog import fuzz_program
from .stp import aarch64_insn_is_stp_fp_lr_sp_64b


class Arm64FuzzTarget:
    arch = "arm64"
    entry = "gen"
    trace_registers = ("x30",)  # the LR hijack

    def configs(self) -> list[Config]:
        return [Config(self.arch, "stp=xol", None, (("stp", "xol"),)),
                Config(self.arch, "stp=simulate/pin", None, (("stp", "simulate"), ("stp_store", "pin"))),
                Config(self.arch, "stp=simulate/uaccess", None, (("stp", "simulate"), ("stp_store", "uaccess")))]

    def program(self, rng, size):
        return fuzz_program(rng, **({"n": size} if size else {}))

    def load(self, proc, program) -> None:
        proc.load(program, "/lab/fuzz")

    def args(self, seed: int) -> tuple[int, ...]:
        rng = random.Random(~seed)
        return tuple(rng.getrandbits(64) for _ in range(8))

    def final_state(self, proc) -> dict:
        state = proc.regs().as_dict()
        state.pop("ip")
        state["stack"] = (STACK_TOP - 0x1000, proc.read(STACK_TOP - 0x1000, 0x1000))
        return state

    def special_sites(self, insns) -> list[int]:
        return []

    def record_hit(self, proc, vaddr: int, regs) -> None:
        return None

    def mechanism(self, proc, uprobe, records: list, ret: bool) -> str:
        if ret:
            return "uretprobe"
        stp = "stp-" if aarch64_insn_is_stp_fp_lr_sp_64b(uprobe.auprobe.word) else ""
        return stp + uprobe.auprobe.action

    def return_trace(self, proc) -> int | None:
        """The LR hijack leaves the trampoline's address in lr and in the stack words it was spilled to."""
        return proc.mm.xol_area.vaddr if proc.mm.xol_area else None

    def classify(self, config: Config, vaddr, records: list, got: dict, replay) -> str:
        return "BUG"  # no known divergence on arm64


TARGET = Arm64FuzzTarget()
