"""The kernel bench's targets as GCC compiles them for arm64, and the producer loop that calls them.

Twin of tools/testing/selftests/bpf/benchs/bench_trigger.c built with ``-O2`` and frame pointers:

    uprobe_target_nop:   nop; ret
    uprobe_target_push:  stp x29, x30, [sp, #-16]!; mov x29, sp; bl opaque_noop_func;
                         mov w0, #1; ldp x29, x30, [sp], #16; ret
    uprobe_target_ret:   ret

The nop5 targets are x86-only (``#ifdef __x86_64__`` in the bench). The producer is the bench's
``while (true) target();`` loop made finite: ``producer_loop(n, target)`` takes the count in x0
and the target in x1 (AAPCS64). Functions are 16-byte aligned; the gaps hold ``brk #0x3e8`` (what
``__builtin_trap()`` emits), so a stray jump traps instead of sliding.
"""
from __future__ import annotations

from functools import lru_cache

from ..program import Assembler, Program
from . import asm
from .asm import FP, LR, SP
from .constants import __NR_getpgid

TEXT_BASE = 0x400000
PAGE = 0x1000
PAD = asm.b(asm.brk(0x3E8))


def emit_producer_loop(a: Assembler) -> None:
    """producer_loop(n, target): call target n times; x19/x20 are callee-saved."""
    a.function("producer_loop")
    asm.emit(a, asm.stp(FP, LR, SP, -32), asm.mov_sp(FP, SP), asm.stp(19, 20, SP, 16, "offset"),
             asm.mov_reg(19, 0), asm.mov_reg(20, 1))
    a.label("producer_loop.again")
    asm.emit(a, asm.blr(20), asm.subs_imm(19, 19, 1))
    asm.bcond_to(a, "ne", "producer_loop.again")
    asm.emit(a, asm.ldp(19, 20, SP, 16, "offset"), asm.ldp(FP, LR, SP, 32), asm.RET)


def emit_targets(a: Assembler) -> None:
    a.align(16, PAD)
    a.function("opaque_noop_func")
    asm.emit(a, asm.RET)
    a.align(16, PAD)
    a.function("uprobe_target_nop")
    asm.emit(a, asm.NOP, asm.RET)
    a.align(16, PAD)
    a.function("uprobe_target_push")
    asm.emit(a, asm.stp(FP, LR, SP, -16), asm.mov_sp(FP, SP))
    asm.bl_to(a, "opaque_noop_func")
    asm.emit(a, asm.movz(0, 1, x=False), asm.ldp(FP, LR, SP, 16), asm.RET)
    a.align(16, PAD)
    a.function("uprobe_target_ret")
    asm.emit(a, asm.RET)
    a.align(16, PAD)
    a.function("getpgid_syscall")  # syscall-count's producer body: syscall(__NR_getpgid, 0)
    asm.emit(a, asm.movz(8, __NR_getpgid), asm.movz(0, 0), asm.svc(0), asm.RET)
    a.end_function()


@lru_cache(maxsize=None)
def bench_program(base: int = TEXT_BASE) -> Program:
    """All arm64 bench targets in one text page."""
    a = Assembler("arm64", base)
    emit_producer_loop(a)
    emit_targets(a)
    a.pad_to(base + PAGE, PAD)
    return a.link()
