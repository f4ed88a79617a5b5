"""The nop5 optimisation (6.18): twin of the optimisation half of arch/x86/kernel/uprobes.c."""
from __future__ import annotations


def in_uprobe_trampoline(proc, ip: int) -> bool:
    mapping = proc.mapping_at(ip)
    return mapping is not None and mapping.name == "[uprobes-trampoline]"


def is_optimized(proc, vaddr: int) -> bool:
    """The site holds ``call rel32`` whose target is a [uprobes-trampoline] page."""
    insn = proc.read(vaddr, 5)
    if insn[0] != 0xE8:
        return False
    target = vaddr + 5 + int.from_bytes(insn[1:5], "little", signed=True)
    return in_uprobe_trampoline(proc, target)


def arch_uprobe_optimize(proc, auprobe, vaddr: int) -> None:
    """Not modelled yet: 6.18 behaves like 6.16 until the nop5 chapter lands."""


def sys_uprobe(proc, regs) -> int:
    """Not modelled yet: behaves as a caller outside any trampoline (-ENXIO)."""
    return -6
