"""Random arm64 functions for the differential fuzzer, the twin of uprobe_lab.x86.randprog.

``gen`` builds a 48-byte frame (``stp x29, x30, [sp, #-48]!``, simulated or stepped depending on
the STP option), then runs moves, arithmetic, compares, loads and stores in its frame, nops,
``adr``, calls to the leaf ``leaf`` (uretprobes, ``bl`` simulation), stack pairs, and forward
branches of every simulated kind (b.cond, cbz/cbnz, tbz/tbnz, b). arm64 Linux has no red zone:
nothing live is kept below sp.
"""
from __future__ import annotations

import random

from ..program import Assembler, Program
from . import asm

TEXT = 0x400000
KINDS = ["movz", "add", "eor", "cmp", "str", "ldr", "nop", "adr", "bl", "stp", "branch"]


def fuzz_program(rng: random.Random, n: int = 32, branchy: bool = True, base: int = TEXT) -> Program:
    a = Assembler("arm64", base)
    a.function("leaf")
    asm.emit(a, asm.add_reg(0, 0, 1), asm.NOP, asm.RET)
    a.align(16, asm.b(asm.brk(0x3E8)))
    a.function("gen")
    asm.emit(a, asm.stp(29, 30, 31, -48), asm.mov_sp(29, 31))
    for off in range(16, 48, 8):  # the frame's slots start out known, so every ldr reads a known value
        asm.emit(a, asm.str_imm(rng.randrange(0, 8), 31, off))
    pending: list[tuple[str, int]] = []
    kinds = KINDS if branchy else KINDS[:-1]
    for i in range(n):
        r1, r2, r3 = (rng.randrange(0, 8) for _ in range(3))
        kind = rng.choice(kinds)
        if kind == "movz":
            asm.emit(a, asm.movz(r1, rng.getrandbits(16)))
        elif kind == "add":
            asm.emit(a, asm.add_reg(r1, r2, r3))
        elif kind == "eor":
            asm.emit(a, asm.eor_reg(r1, r2, r3))
        elif kind == "cmp":
            asm.emit(a, asm.cmp_imm(r1, rng.randrange(0, 4)))
        elif kind == "str":
            asm.emit(a, asm.str_imm(r1, 31, 16 + 8 * rng.randrange(0, 4)))
        elif kind == "ldr":
            asm.emit(a, asm.ldr_imm(r1, 31, 16 + 8 * rng.randrange(0, 4)))
        elif kind == "nop":
            asm.emit(a, asm.NOP)
        elif kind == "adr":
            asm.adr_to(a, r1, "leaf")
        elif kind == "bl":
            asm.bl_to(a, "leaf")
        elif kind == "stp":
            asm.emit(a, asm.stp(29, 30, 31, -16), asm.ldp(29, 30, 31, 16))
        else:
            label = f"l{i}"
            how = rng.choice(["bcond", "cbz", "cbnz", "tbz", "tbnz", "b"])
            if how == "bcond":
                asm.bcond_to(a, rng.choice(["eq", "ne", "hs", "lo", "mi", "gt", "le"]), label)
            elif how in ("cbz", "cbnz"):
                asm.cbz_to(a, r1, label, nonzero=how == "cbnz", x=rng.random() < 0.5)
            elif how in ("tbz", "tbnz"):
                asm.tbz_to(a, r1, rng.randrange(0, 64), label, nonzero=how == "tbnz")
            else:
                asm.b_to(a, label)
            pending.append((label, i + rng.randrange(1, 5)))
        for label, at in [p for p in pending if p[1] <= i]:
            a.label(label)
            pending.remove((label, at))
    for label, _ in pending:
        a.label(label)
    asm.emit(a, asm.ldp(29, 30, 31, 48), asm.RET)
    a.end_function()
    return a.link()
