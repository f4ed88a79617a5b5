"""The kernel bench's targets for x86-64, byte for byte, and the producer loop that calls them.

Twin of tools/testing/selftests/bpf/benchs/bench_trigger.c: the targets are what GCC emits for
``uprobe_target_{nop,push,ret,nop5}`` with ``-O2 -fno-omit-frame-pointer`` and ``__nocf_check``
(no endbr64). The producer is the bench's ``while (true) target();`` loop, made finite: it takes
the iteration count in rdi and the target in rsi (System V ABI), so the same bytes can be called
natively through ctypes. ``opaque_noop_func`` is a bare ``ret`` (the bench builds it without
``__nocf_check``, so a CET build would start it with endbr64; the lab leaves that out).
"""
from __future__ import annotations

from functools import lru_cache

from ..program import Assembler, Program
from . import asm
from .constants import __NR_getpgid

TEXT_BASE = 0x400000
PAGE = 0x1000
PAD = asm.INT3  # padding between functions; a stray jump there traps

def emit_producer_loop(a: Assembler) -> None:
    """producer_loop(n, target): call target n times. rbx/r12 are callee-saved; rbp keeps rsp 16-aligned."""
    a.function("producer_loop")
    a.emit(asm.push("rbx") + asm.push("r12") + asm.push("rbp"))
    a.emit(asm.mov_rr("rbx", "rdi") + asm.mov_rr("r12", "rsi"))
    a.label("producer_loop.again")
    a.emit(asm.call_reg("r12"))
    a.emit(asm.dec("rbx"))
    asm.jcc8(a, "jnz", "producer_loop.again")
    a.emit(asm.pop("rbp") + asm.pop("r12") + asm.pop("rbx") + asm.RET)


def emit_targets(a: Assembler) -> None:
    a.align(16, PAD)
    a.function("opaque_noop_func")
    a.emit(asm.RET)
    a.align(16, PAD)
    a.function("uprobe_target_nop")
    a.emit(asm.NOP + asm.RET)
    a.align(16, PAD)
    a.function("uprobe_target_push")
    a.emit(asm.push("rbp") + asm.mov_rr("rbp", "rsp"))
    asm.call(a, "opaque_noop_func")
    a.emit(asm.mov_imm32("rax", 1) + asm.pop("rbp") + asm.RET)
    a.align(16, PAD)
    a.function("uprobe_target_ret")
    a.emit(asm.RET)
    a.align(16, PAD)
    a.function("uprobe_target_nop5")
    a.emit(asm.X86_NOPS[5] + asm.RET)
    a.align(16, PAD)
    a.function("getpgid_syscall")  # syscall-count's producer body: syscall(__NR_getpgid)
    a.emit(asm.mov_imm32("rax", __NR_getpgid) + asm.xor_rr32("rdi", "rdi") + asm.SYSCALL + asm.RET)
    a.end_function()


@lru_cache(maxsize=None)
def bench_program(base: int = TEXT_BASE) -> Program:
    """All bench targets in two text pages; the page-crossing nop5 straddles the page boundary."""
    a = Assembler("x86_64", base)
    emit_producer_loop(a)
    emit_targets(a)
    # A nop5 whose first two bytes end page 0: the kernel cannot optimise it (no atomic cross-page write).
    a.pad_to(base + PAGE - 2, PAD)
    a.function("uprobe_target_nop5_pagecross")
    a.emit(asm.X86_NOPS[5] + asm.RET)
    a.end_function()
    a.pad_to(base + 2 * PAGE, PAD)
    return a.link()
