"""Single-stepping a probed x86-64 instruction out of line: twin of arch_uprobe_pre_xol and
arch_uprobe_post_xol (default_post_xol_op) in arch/x86/kernel/uprobes.c.

A RIP-relative instruction runs with its operand rewritten to a scratch register (x86.riprel). A
fault inside the step is aborted (arch_uprobe_abort_xol): the signal is delivered at the probed
address, as on a 6.18 host. What the lab leaves out: arch_uprobe_ignore, and the difference between
send_sig and force_sig: arch_uprobe_post_xol owes a single-stepping program ``send_sig(SIGTRAP,
current, 0)``, which a blocked SIGTRAP leaves pending and an ignored one drops, but the lab's process
has no signal masks or handlers, so the SIGTRAP takes its default action (``force_sig``).
"""
from __future__ import annotations

from .constants import X86_EFLAGS_TF
from .decode import UPROBE_FIX_CALL, UPROBE_FIX_IP, UPROBE_FIX_SETF, ArchUprobe
from .emulate import emulate_push_stack
from .riprel import UPROBE_FIX_RIP_MASK, riprel_post_xol, riprel_pre_xol


def arch_uprobe_pre_xol(proc, auprobe: ArchUprobe, regs) -> None:
    utask = proc.utask
    regs.ip = utask.xol_vaddr
    if auprobe.fixups & UPROBE_FIX_RIP_MASK:  # only RIP-relative steps reach x86/riprel.py
        riprel_pre_xol(proc, auprobe, regs)
    utask.saved_tf = bool(regs.flags & X86_EFLAGS_TF)
    regs.flags = regs.flags | X86_EFLAGS_TF


def arch_uprobe_post_xol(proc, auprobe: ArchUprobe, regs) -> int:
    """Fix up after the out-of-line step (default_post_xol_op), then settle the trap flag.

    A program that was itself single-stepping (TF set before the probe) gets the SIGTRAP its step
    owed it; a stepped popf keeps the TF it may have loaded (UPROBE_FIX_SETF)."""
    utask = proc.utask
    send_sigtrap = utask.saved_tf
    if auprobe.fixups & UPROBE_FIX_RIP_MASK:
        riprel_post_xol(proc, auprobe, regs)
    if auprobe.fixups & UPROBE_FIX_IP:
        regs.ip = regs.ip + utask.vaddr - utask.xol_vaddr
    elif auprobe.fixups & UPROBE_FIX_CALL:
        regs.sp = regs.sp + 8  # pop the return address the XOL copy pushed...
        if not emulate_push_stack(proc, regs, utask.vaddr + auprobe.decoded.length):  # ...push the real one
            regs.ip = utask.vaddr  # -ERESTART: run the probed call again
            send_sigtrap = False
    if auprobe.fixups & UPROBE_FIX_SETF:
        utask.saved_tf = True
    if send_sigtrap:
        proc.force_sig("SIGTRAP", f"the program was single-stepping through the probed insn at {utask.vaddr:#x}")
    if not utask.saved_tf:
        regs.flags = regs.flags & ~X86_EFLAGS_TF
    return 0


def arch_uprobe_abort_xol(proc, auprobe: ArchUprobe, regs) -> None:
    """The step faulted (arch_uprobe_xol_was_trapped): undo it and go back to the probed address.

    The kernel held the fault's signal (uprobe_deny_signal) and delivers it after this, with ip at
    the probed instruction, so a handler sees the same state as without the probe."""
    utask = proc.utask
    if auprobe.fixups & UPROBE_FIX_RIP_MASK:
        riprel_post_xol(proc, auprobe, regs)
    regs.ip = utask.vaddr
    if not utask.saved_tf:
        regs.flags = regs.flags & ~X86_EFLAGS_TF
