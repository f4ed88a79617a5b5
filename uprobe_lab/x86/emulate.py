"""Emulating a probed x86-64 instruction in the kernel: twin of branch_emulate_op, push_emulate_op
and arch_uprobe_skip_sstep in arch/x86/kernel/uprobes.c.

What the lab leaves out: the "mangled call" fallback of a call whose emulated push fails, and the
difference between send_sig and force_sig. A program that was single-stepping through the probed
instruction gets ``send_sig(SIGTRAP, current, 0)`` from arch_uprobe_skip_sstep, which leaves SIGTRAP
pending while it is blocked and drops it while it is ignored; the lab's process has no signal masks
or handlers, so the SIGTRAP takes its default action (``force_sig``): the process dies.
"""
from __future__ import annotations

from ..constants import MASK64
from .constants import X86_EFLAGS_TF
from .decode import JCC_TAKEN, ArchUprobe


def emulate_push_stack(proc, regs, value: int) -> bool:
    new_sp = regs.sp - 8
    if not proc.copy_to_user(new_sp, value.to_bytes(8, "little")):
        return False
    regs.sp = new_sp
    return True


def branch_emulate_op(proc, auprobe: ArchUprobe, regs) -> bool:
    new_ip = regs.ip + auprobe.decoded.length
    offs = auprobe.branch_offs
    if auprobe.branch_opc1 == 0xE8:
        if not emulate_push_stack(proc, regs, new_ip):
            return False
    elif auprobe.branch_opc1 in JCC_TAKEN and not JCC_TAKEN[auprobe.branch_opc1](regs.flags):
        offs = 0
    regs.ip = (new_ip + offs) & MASK64
    return True


def push_emulate_op(proc, auprobe: ArchUprobe, regs) -> bool:
    if not emulate_push_stack(proc, regs, regs.get(auprobe.push_reg)):
        return False
    regs.ip = regs.ip + auprobe.decoded.length
    return True


EMULATE = {"branch": branch_emulate_op, "push": push_emulate_op}


def arch_uprobe_skip_sstep(proc, auprobe: ArchUprobe, regs) -> bool:
    emulate = EMULATE.get(auprobe.ops)
    if emulate is None or not emulate(proc, auprobe, regs):
        return False
    if regs.flags & X86_EFLAGS_TF:
        proc.force_sig("SIGTRAP", "emulated a probed instruction while the trap flag was set")
    return True
