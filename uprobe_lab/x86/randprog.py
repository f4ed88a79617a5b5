"""Random x86-64 programs for transparency tests and the differential fuzzer.

Instructions the kernel emulates, single-steps, or both; calls, so return probes have something to
return from; nop5 and nop10 sites. A program's result is its final registers and data page, which
a probe must never change (except for the red-zone case the fuzzer classifies).
"""
from __future__ import annotations

import random

from ..program import Assembler, Program
from . import asm

# Registers the generated code computes with; rsp is the stack and rbx points at the data page.
SCRATCH = ["rax", "rcx", "rdx", "rsi", "rdi", "r8", "r9", "r10", "r11"]


def lea_base_ok(reg: str) -> bool:
    return asm.REG64[reg] & 7 != 4


# --- programs for the differential fuzzer (uprobe_lab.fuzz) -------------------------------------

FUZZ_DATA = 0x600000  # one rw page; %rbx points at it, stores there are part of the compared state
FUZZ_REPEATS = 3  # fuzz_main calls fuzz_target this often: a nop5 site runs optimised from the 2nd time
LEAF_BODY = 6


def _leaf_body(a: Assembler, rng: random.Random) -> None:
    for _ in range(rng.randint(1, LEAF_BODY)):
        choice = rng.random()
        r1, r2 = rng.choice(SCRATCH), rng.choice(SCRATCH)
        if choice < 0.4:
            a.emit(asm.alu_rr(rng.choice(list(asm.ALU_RR)), r1, r2))
        elif choice < 0.6:
            a.emit(asm.X86_NOPS[5] if rng.random() < 0.5 else asm.X86_NOPS[rng.randint(1, asm.PROBEABLE_NOP_MAX)])
        elif choice < 0.8:
            a.emit(asm.lea_disp8(r1, r2 if lea_base_ok(r2) else "rax", rng.randint(-128, 127)))
        else:
            a.emit(asm.mov_rr(r1, r2))


def fuzz_program(rng: random.Random, n: int = 28, leaves: int = 2, branchy: bool = True,
                 base: int = 0x400000) -> Program:
    """``fuzz_main`` calls ``fuzz_target`` FUZZ_REPEATS times; ``fuzz_target`` calls leaves ``leaf0..``.

    Arithmetic, moves, standard nops, pushes/pops, lea, forward jcc and red-zone stores, plus calls (uretprobes on the leaves, call emulation),
    nop5 sites (6.18 optimises them), nop10 sites (7.3 optimises them, older kernels refuse them), stores to
    the data page, and red-zone loads. A red-zone slot is loaded only while the program's own value
    is known to be there: written on every path since the last call (a callee, or a return
    trampoline, may write below %rsp). So a probe that clobbers live red-zone data shows up in the
    registers and the data page, where the comparison sees it.
    """
    a = Assembler("x86_64", base)
    a.function("fuzz_main")
    for _ in range(FUZZ_REPEATS):
        asm.call(a, "fuzz_target")
    a.emit(asm.RET)
    for k in range(leaves):
        a.align(16, asm.INT3)
        a.function(f"leaf{k}")
        _leaf_body(a, rng)
        a.emit(asm.RET)
    a.align(16, asm.INT3)
    a.function("fuzz_target")
    a.emit(asm.mov_imm64("rbx", FUZZ_DATA))
    for reg in SCRATCH:
        a.emit(asm.mov_imm64(reg, rng.getrandbits(64)))
    depth = 0
    valid: set[int] = set()  # red-zone/stack slots (offset from the entry %rsp) holding the program's value
    pending: list[tuple[str, int]] = []
    for i in range(n):
        for label, left in list(pending):
            if left == 0:
                a.label(label)
                pending.remove((label, left))
        pending = [(lab, left - 1) for lab, left in pending]
        sp = -8 * depth
        choice = rng.random()
        r1, r2 = rng.choice(SCRATCH), rng.choice(SCRATCH)
        if choice < 0.2:
            a.emit(asm.alu_rr(rng.choice(list(asm.ALU_RR)), r1, r2))
        elif choice < 0.25:
            a.emit(asm.inc(r1) if rng.random() < 0.5 else asm.dec(r1))
        elif choice < 0.3:
            a.emit(asm.mov_rr(r1, r2))
        elif choice < 0.42:
            a.emit(asm.X86_NOPS[5])
        elif choice < 0.45:
            a.emit(asm.NOP10 if rng.random() < 0.5 else asm.X86_NOPS[rng.randint(1, asm.PROBEABLE_NOP_MAX)])
        elif choice < 0.5 and depth < 6 and not pending:
            a.emit(asm.push(r1))
            depth += 1
            valid.add(sp - 8)
        elif choice < 0.55 and depth > 0 and not pending:
            a.emit(asm.pop(r1))
            depth -= 1
        elif choice < 0.6:
            a.emit(asm.lea_disp8(r1, r2 if lea_base_ok(r2) else "rax", rng.randint(-128, 127)))
        elif choice < 0.67 and leaves:
            asm.call(a, f"leaf{rng.randrange(leaves)}")
            valid = {s for s in valid if s >= sp}  # the callee and a return trampoline own what is below
        elif choice < 0.72:
            a.emit(asm.mov_store("rbx", 8 * rng.randrange(16), r1))
        elif choice < 0.82:
            live = [s for s in valid if sp - 128 <= s < sp]
            if live:
                a.emit(asm.mov_load_rsp_disp8(r1, rng.choice(live) - sp))
            else:
                a.emit(asm.mov_rr(r1, r2))
        elif choice < 0.9 and branchy and not pending:
            label = f"skip{i}"
            asm.jcc8(a, rng.choice(list(asm.JCC)), label)
            pending.append((label, rng.randint(1, 4)))
        else:
            slot = sp - 8 * rng.randint(1, 6)
            a.emit(asm.mov_store_rsp_disp8(r1, slot - sp))  # the red zone: a leaf may keep data here
            if not pending:  # a store a branch may skip leaves the slot's old contents
                valid.add(slot)
    for label, _ in pending:
        a.label(label)
    for _ in range(depth):
        a.emit(asm.pop("r11"))
    for k, slot in enumerate(sorted(s for s in valid if -128 <= s < 0)):  # what is still live below %rsp
        a.emit(asm.mov_load_rsp_disp8("r11", slot) + asm.mov_store("rbx", 0x100 + 8 * k, "r11"))
    a.emit(asm.RET)
    a.end_function()
    return a.link()
