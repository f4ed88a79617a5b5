"""Random x86-64 functions for transparency tests and the differential fuzzer.

Straight-line arithmetic, pushes/pops, stack stores and loads, standard nops, and forward
conditional jumps - instructions the kernel emulates, single-steps, or both. Each function
starts by loading known values into registers and ends with ``ret``; its result is the final
register file and stack, which a probe must never change.
"""
from __future__ import annotations

import random

from ..program import Assembler, Program
from . import asm

# rsp is the stack; rbx/rbp/r12-r15 are callee-saved: generated code saves nothing, so it leaves them alone.
SCRATCH = ["rax", "rcx", "rdx", "rsi", "rdi", "r8", "r9", "r10", "r11"]


def random_function(rng: random.Random, n: int = 24, base: int = 0x400000, branchy: bool = True) -> Program:
    a = Assembler("x86_64", base)
    a.function("fuzz_target")
    for reg in SCRATCH:
        a.emit(asm.mov_imm64(reg, rng.getrandbits(64)))
    depth = 0
    pending: list[tuple[str, int]] = []  # (label, instructions until it is placed)
    for i in range(n):
        for label, left in list(pending):
            if left == 0:
                a.label(label)
                pending.remove((label, left))
        pending = [(lab, left - 1) for lab, left in pending]
        choice = rng.random()
        r1, r2 = rng.choice(SCRATCH), rng.choice(SCRATCH)
        if choice < 0.35:
            a.emit(asm.alu_rr(rng.choice(list(asm.ALU_RR)), r1, r2))
        elif choice < 0.45:
            a.emit(asm.inc(r1) if rng.random() < 0.5 else asm.dec(r1))
        elif choice < 0.55:
            a.emit(asm.mov_rr(r1, r2))
        elif choice < 0.65:
            a.emit(asm.X86_NOPS[rng.randint(1, asm.ASM_NOP_MAX)])
        elif choice < 0.75 and depth < 6 and not pending:  # a skipped push/pop would unbalance the stack
            a.emit(asm.push(r1))
            depth += 1
        elif choice < 0.82 and depth > 0 and not pending:
            a.emit(asm.pop(r1))
            depth -= 1
        elif choice < 0.9:
            a.emit(asm.lea_disp8(r1, r2 if REG_OK_FOR_LEA(r2) else "rax", rng.randint(-128, 127)))
        elif branchy and not pending:
            label = f"skip{i}"
            asm.jcc8(a, rng.choice(list(asm.JCC)), label)
            pending.append((label, rng.randint(1, 4)))
        else:
            a.emit(asm.mov_store_rsp_disp8(r1, -8 * rng.randint(1, 8)))  # red zone below sp: a leaf may use it
    for label, _ in pending:
        a.label(label)
    for _ in range(depth):
        a.emit(asm.pop("r11"))
    a.emit(asm.RET)
    a.end_function()
    return a.link()


def REG_OK_FOR_LEA(reg: str) -> bool:
    return asm.REG64[reg] & 7 != 4
