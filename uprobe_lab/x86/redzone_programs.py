"""Leaf functions that keep a live value in the red zone across a probe site, and a check that says so.

The System V x86-64 ABI lets a leaf function use the 128 bytes below %rsp (the red zone) without
moving %rsp; signal handlers and the kernel must leave them alone. A probe is supposed to be
invisible to the program. An optimised nop5 site breaks that: its ``call`` stores the return
address at rsp-8 and the trampoline pushes three more words below it - all inside the red zone.

* ``redzone_leaf_nop5(x)``: stores x at -8(%rsp), runs a nop5 (the probe site), returns -8(%rsp).
* ``redzone_leaf_nop10(x)``: the same around a nop10 site, for 7.3's scheme
  (``lea -0x80(%rsp),%rsp; call``), which keeps the red zone.
* ``call_sys_uprobe()``: ``syscall(336)`` from ordinary text, to show sys_uprobe refusing it.

``check_transparency`` runs a function with and without a probe and reports every difference a
program could see: its return value, callee-saved registers, and the red zone's bytes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from ..program import Assembler, Program
from ..uprobes import CountingConsumer, uprobe_register
from . import asm
from .constants import STACK_TOP, __NR_uprobe
from .optimize import REDZONE_SIZE
from .process import X86Process

REDZONE_BASE = 0x500000
SLOT = -8  # where the leaf keeps its live value
PAD = asm.INT3
SITE_OFFSET = len(asm.mov_store_rsp_disp8("rdi", SLOT))  # the probe site follows the store


@lru_cache(maxsize=None)
def redzone_program(base: int = REDZONE_BASE) -> Program:
    a = Assembler("x86_64", base)
    for name, site in (("redzone_leaf_nop5", asm.X86_NOPS[5]), ("redzone_leaf_nop10", asm.NOP10)):
        a.align(16, PAD)
        a.function(name)
        a.emit(asm.mov_store_rsp_disp8("rdi", SLOT))  # x lives in the red zone...
        a.emit(site)  # ...across the probe site...
        a.emit(asm.mov_load_rsp_disp8("rax", SLOT) + asm.RET)  # ...and is read back
    a.align(16, PAD)
    a.function("call_sys_uprobe")
    a.emit(asm.mov_imm_sx("rax", __NR_uprobe) + asm.SYSCALL + asm.RET)
    a.end_function()
    a.pad_to(base + 0x1000, PAD)
    return a.link()


def site_of(symbol: str, program: Program | None = None) -> int:
    """Address of the probe site (the nop) inside a red-zone leaf."""
    return (program or redzone_program()).resolve(symbol) + SITE_OFFSET


def make_redzone_process(kernel=None, **options):
    """An x86-64 process with the red-zone programs loaded."""
    proc = X86Process(kernel, **options)
    proc.load(redzone_program(), "/lab/redzone")
    return proc


CALLEE_SAVED = ("bx", "bp", "r12", "r13", "r14", "r15")


@dataclass
class TransparencyReport:
    """What a probe changed that the probed program can see; ``ok`` when nothing."""

    symbol: str
    kernel: str
    arg: int
    expected: int
    got: int
    regs_changed: dict = field(default_factory=dict)
    redzone_changed: list = field(default_factory=list)  # offsets from the leaf's rsp at the probe site
    site_bytes: str = ""

    @property
    def ok(self) -> bool:
        return self.expected == self.got and not self.regs_changed and not self.redzone_changed

    def __str__(self) -> str:
        if self.ok:
            return f"{self.symbol} on {self.kernel}: transparent (returned {self.got:#x} as without the probe)"
        lines = [f"{self.symbol} on {self.kernel}: NOT transparent (site now {self.site_bytes})"]
        if self.expected != self.got:
            lines.append(f"  return value {self.got:#x}, expected {self.expected:#x} (the live red-zone value)")
        for name, (a, b) in self.regs_changed.items():
            lines.append(f"  %{name}: {a:#x} -> {b:#x}")
        if self.redzone_changed:
            offs = ", ".join(f"rsp{o:+d}" for o in self.redzone_changed)
            lines.append(f"  red-zone bytes written by the probe: {offs}")
        return "\n".join(lines)


def _run_leaf(proc, symbol: str, arg: int) -> tuple[int, dict, bytes]:
    entry_sp = ((STACK_TOP - 0x100) & ~0xF) - 8  # what X86Process.call() gives the callee
    regs = proc.regs()
    for i, name in enumerate(CALLEE_SAVED):
        regs.set(name, 0x1111111111111111 * (i + 1))
    regs.flush()
    # the leaf's red zone, filled with a pattern the probe must not disturb
    proc.write(entry_sp + 8 - REDZONE_SIZE - 8, bytes([0x5A]) * (REDZONE_SIZE + 8))
    ret = proc.call(symbol, arg)
    after = proc.regs()
    # after ret, the caller's sp is entry_sp + 8; the leaf's red zone is below entry_sp
    zone = proc.read(entry_sp - REDZONE_SIZE, REDZONE_SIZE)
    return ret, {n: after.get(n) for n in CALLEE_SAVED}, zone


def check_transparency(symbol: str, kernel=None, arg: int = 0x1234_5678_9ABC_DEF0, hits: int = 3,
                       **options) -> TransparencyReport:
    """Call ``symbol`` unprobed, then probed at its site ``hits`` times (so it gets optimised), and compare.

    The leaf itself writes its slot at rsp-8 with ``arg``; every other red-zone byte must keep the
    pattern, and the slot must still hold ``arg``.
    """
    plain = make_redzone_process(kernel, **options)
    expected, regs0, zone0 = _run_leaf(plain, symbol, arg)
    proc = make_redzone_process(kernel, **options)
    uprobe_register(proc, site_of(symbol), CountingConsumer())
    for _ in range(hits):
        got, regs1, zone1 = _run_leaf(proc, symbol, arg)
    changed = {n: (regs0[n], regs1[n]) for n in CALLEE_SAVED if regs0[n] != regs1[n]}
    diff = sorted({(i - REDZONE_SIZE) // 8 * 8 for i in range(REDZONE_SIZE) if zone0[i] != zone1[i]})
    site_len = 5 if symbol.endswith("nop5") else 10
    return TransparencyReport(symbol, proc.kernel.name, arg, expected, got, changed, diff,
                              proc.read(site_of(symbol), site_len).hex(" "))
