"""x86-64 trap entries into the uprobe core: twin of exc_int3 and exc_debug
(arch/x86/kernel/traps.c), which reach kernel/events/uprobes.c through the die notifiers
(arch_uprobe_exception_notify in arch/x86/kernel/uprobes.c).
"""
from __future__ import annotations

from .. import uprobes as core
from .constants import UPROBE_SWBP_INSN, UPROBE_SWBP_INSN_SIZE


def is_swbp_at(proc, vaddr: int) -> bool:
    """Whether an int3 is at vaddr. The lab's own arch hook, no kernel twin: it does what the generic
    is_trap_at_addr() (kernel/events/uprobes.c) does with the weak defaults is_trap_insn() and
    is_swbp_insn(), which x86 keeps. An unreadable address is -EFAULT there, i.e. not a breakpoint."""
    raw = proc.read_page(vaddr, 1)
    return raw is not None and raw[0] == UPROBE_SWBP_INSN


def uprobe_get_swbp_addr(regs) -> int:
    return regs.ip - UPROBE_SWBP_INSN_SIZE


def exc_int3(proc) -> None:
    """#BP from user mode: uprobes claim it (uprobe_pre_sstep_notifier) or the task gets SIGTRAP."""
    proc.trace.emit("exceptions")
    regs = proc.kernel_entry()
    proc.trace.emit("exc_bp", ip=regs.ip - 1)
    if not core.uprobe_pre_sstep_notifier(proc):
        proc.force_sig("SIGTRAP", f"int3 at {regs.ip - 1:#x} and no uprobes in this process")
        return
    core.handle_swbp(proc, regs)  # uprobe_notify_resume(), on the way back to user mode
    regs.flush()  # the registers the kernel set are in place even when a signal follows
    if not proc.signal:
        proc.trace.emit("iret", ip=regs.ip)
        proc.exit_to_user_mode()


def exc_debug(proc) -> None:
    """#DB after a single-step: finish an XOL step, or a plain SIGTRAP."""
    proc.trace.emit("exceptions")
    regs = proc.kernel_entry()
    proc.trace.emit("exc_db", ip=regs.ip)
    if not core.uprobe_post_sstep_notifier(proc):
        proc.force_sig("SIGTRAP", f"single-step trap at {regs.ip:#x}")
        return
    core.handle_singlestep(proc, regs)
    regs.flush()
    if not proc.signal:
        proc.trace.emit("iret", ip=regs.ip)
        proc.exit_to_user_mode()
