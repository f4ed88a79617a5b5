"""RIP-relative operands under XOL: twin of riprel_analyze / riprel_pre_xol / riprel_post_xol in
arch/x86/kernel/uprobes.c.

An instruction copied into an XOL slot that addresses memory relative to rip would address memory
relative to the slot. The kernel rewrites the copy: ModRM ``00 reg 101`` (disp32(%rip)) becomes
``10 reg rr`` (disp32(%rr)) with a scratch register rr, which it loads with the address of the
instruction after the *original* one before the step and restores after it. The scratch register
is rsi, else rdi, else rbx: one that neither ModRM.reg nor VEX.vvvv names (both read as 3 bits,
so r14 counts as rsi; a two-byte VEX prefix carries vvvv too, see vex_prefix_byte2). REX.B is
cleared, and VEX3/EVEX get their inverted X and B bits set, so rr is rsi/rdi/rbx and not
r14/r15/r11. Left out: XOP prefixes (the kernel has a TODO for their vvvv as well).

In the kernel ``insn`` and ``ixol`` are one buffer (a union); the lab keeps the original bytes in
``insn`` and the rewritten copy in ``ixol`` so both can be shown.
"""
from __future__ import annotations

UPROBE_FIX_RIP_SI = 0x08
UPROBE_FIX_RIP_DI = 0x10
UPROBE_FIX_RIP_BX = 0x20
UPROBE_FIX_RIP_MASK = UPROBE_FIX_RIP_SI | UPROBE_FIX_RIP_DI | UPROBE_FIX_RIP_BX
SCRATCH = {UPROBE_FIX_RIP_SI: "si", UPROBE_FIX_RIP_DI: "di", UPROBE_FIX_RIP_BX: "bx"}


def vex_prefix_byte2(insn) -> int:
    """``insn->vex_prefix.bytes[2]`` as the kernel's decoder fills it (insn_get_prefixes, arch/x86/lib/insn.c).

    VEX3 and EVEX: their byte 2 (W vvvv . pp). VEX2 has only two bytes, so the decoder fakes a VEX3-like
    byte 2 from its second byte (R vvvv L pp) masked with 0x7f: vvvv kept, W read as 0. Without a VEX
    prefix riprel_analyze starts from 0xff, whose vvvv reads as register 0 (rax), never si or di."""
    if not insn.vex_prefix:
        return 0xFF
    if len(insn.vex_prefix) == 2:
        return insn.vex_prefix[1] & 0x7F
    return insn.vex_prefix[2]


def riprel_analyze(auprobe, insn) -> None:
    """Rewrite ``auprobe.ixol`` and set a UPROBE_FIX_RIP_* fixup if ``insn`` is RIP-relative."""
    if not insn.rip_relative:
        return
    ixol = bytearray(auprobe.ixol)
    if insn.rex_offset is not None:
        ixol[insn.rex_offset] &= 0xFE  # REX 0100wrxb: clear b
    if len(insn.vex_prefix) >= 3:
        ixol[insn.vex_offset + 1] |= 0x60  # VEX3/EVEX: set the inverted X and B bits
    reg = (insn.modrm >> 3) & 7
    reg2 = ((vex_prefix_byte2(insn) >> 3) & 7) ^ 7  # vex.vvvv: bits 6-3, inverted; 3 low bits
    if reg != 6 and reg2 != 6:
        reg2, fix = 6, UPROBE_FIX_RIP_SI
    elif reg != 7 and reg2 != 7:
        reg2, fix = 7, UPROBE_FIX_RIP_DI
    else:
        reg2, fix = 3, UPROBE_FIX_RIP_BX
    ixol[insn.modrm_offset] = 0x80 | (reg << 3) | reg2  # "00 reg 101" -> "10 reg reg2", disp32 kept
    auprobe.ixol = bytes(ixol)
    auprobe.fixups |= fix


def riprel_scratch(auprobe) -> str:
    return SCRATCH[auprobe.fixups & UPROBE_FIX_RIP_MASK]


# The two below run only for a probe with a UPROBE_FIX_RIP_* fixup: x86.xol tests it first, so a
# step without one never calls into this module.
def riprel_pre_xol(proc, auprobe, regs) -> None:
    """Save the scratch register, point it at the instruction after the probed one."""
    utask = proc.utask
    name = riprel_scratch(auprobe)
    utask.saved_scratch_register = regs.get(name)
    regs.set(name, utask.vaddr + auprobe.decoded.length)


def riprel_post_xol(proc, auprobe, regs) -> None:
    """Restore the scratch register the step borrowed."""
    regs.set(riprel_scratch(auprobe), proc.utask.saved_scratch_register)
