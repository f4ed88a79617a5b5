"""The kernel bench's targets for x86-64, byte for byte, and the producer loop that calls them.

Twin of tools/testing/selftests/bpf/benchs/bench_trigger.c: the targets are what GCC emits for
``uprobe_target_{nop,push,ret,nop5}`` with ``-O2 -fno-omit-frame-pointer`` and ``__nocf_check``
(no endbr64). 7.3's bench renamed the x86 target to ``uprobe_target_nop10`` (the 10-byte nop
``66 2e 0f 1f 84 00 00 00 00 00``); the lab keeps both. The USDT targets are the bodies of the
bench's ``usdt_1`` / ``usdt_2``: the USDT site (see uprobe_lab.usdt) and ``ret``, one per site shape.
``uprobe_syscall_probe`` is libbpf's feature probe for the uprobe syscall: ``syscall(336)`` from
outside any trampoline, its result left in rax. ``futex_wake_private`` / ``futex_wake_shared`` are not
the bench's: they wake no one on the word at rsp, and differ only in the page reference a shared futex
takes (see uprobe_lab.x86.syscalls.sys_futex), which prices a page pin for the cost model. The producer is the bench's ``while (true) target();`` loop, made finite: it takes
the iteration count in rdi and the target in rsi (System V ABI), so the same bytes can be called
natively through ctypes. ``opaque_noop_func`` is a bare ``ret`` (the bench builds it without
``__nocf_check``, so a CET build would start it with endbr64; the lab leaves that out).
"""
from __future__ import annotations

from functools import lru_cache

from ..program import Assembler, Program
from ..usdt import USDT_SHAPES
from . import asm
from .constants import FUTEX_PRIVATE_FLAG, FUTEX_WAKE, __NR_futex, __NR_getpgid, __NR_uprobe

# the USDT bench targets, one per site shape (the kernel bench's usdt_1 is "nop", usdt_2 the usdt.h default)
USDT_TARGETS = {"nop": "usdt_nop", "nop,nop5": "usdt_nop5", "nop,nop10": "usdt_nop10"}

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
    for name, op in (("futex_wake_private", FUTEX_WAKE | FUTEX_PRIVATE_FLAG), ("futex_wake_shared", FUTEX_WAKE)):
        a.align(16, PAD)  # the price benches' page-pin pair: futex(rsp, op, 1), the return address as the word
        a.function(name)
        a.emit(asm.mov_imm32("rax", __NR_futex) + asm.mov_rr("rdi", "rsp") + asm.mov_imm32("rsi", op)
               + asm.mov_imm32("rdx", 1) + asm.SYSCALL + asm.RET)
    a.align(16, PAD)
    a.function("uprobe_target_nop10")
    a.emit(asm.NOP10 + asm.RET)
    a.align(16, PAD)
    a.function("uprobe_syscall_probe")  # libbpf probe_uprobe_syscall(): syscall(__NR_uprobe) off the trampoline
    a.emit(asm.mov_imm32("rax", __NR_uprobe) + asm.SYSCALL + asm.RET)
    for shape, name in USDT_TARGETS.items():
        a.align(16, PAD)
        a.function(name)
        a.emit(USDT_SHAPES[shape].site + asm.RET)
    a.end_function()


def emit_at(a: Assembler, addr: int, name: str, code: bytes) -> None:
    """A function ``name`` holding ``code`` + ret at ``addr`` (padding up to it with int3)."""
    a.pad_to(addr, PAD)
    a.function(name)
    a.emit(code + asm.RET)
    a.end_function()


@lru_cache(maxsize=None)
def bench_program(base: int = TEXT_BASE) -> Program:
    """All bench targets in five text pages; each page-crossing site straddles its own page boundary.

    The kernel cannot optimise a site that crosses a page (no atomic cross-page write): the nop5
    whose first two bytes end page 0, the nop10 whose first three end page 1, and the USDT sites
    whose long nop (at +1) crosses the end of pages 2 and 3.
    """
    a = Assembler("x86_64", base)
    emit_producer_loop(a)
    emit_targets(a)
    emit_at(a, base + PAGE - 2, "uprobe_target_nop5_pagecross", asm.X86_NOPS[5])
    emit_at(a, base + 2 * PAGE - 3, "uprobe_target_nop10_pagecross", asm.NOP10)
    emit_at(a, base + 3 * PAGE - 4, "usdt_nop10_pagecross", USDT_SHAPES["nop,nop10"].site)
    emit_at(a, base + 4 * PAGE - 3, "usdt_nop5_pagecross", USDT_SHAPES["nop,nop5"].site)
    a.pad_to(base + 5 * PAGE, PAD)
    return a.link()
