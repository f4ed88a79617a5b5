"""arm64 exception entries into the uprobe core: twin of the BRK and single-step hooks
(uprobe_brk_handler, uprobe_single_step_handler in arch/arm64/kernel/probes/uprobes.c; in
arch/arm64/kernel/entry-common.c a BRK reaches the first through el0_brk64 -> do_el0_brk64 and the step
through el0_softstp -> do_el0_softstep since the arm64 debug-exception rework, both through
el0_dbg -> do_debug_exception before it) and of el0_svc for the one syscall the bench makes.

The kernel's ESR-based dispatch is replaced by decoding the trapping instruction (Unicorn reports
no ESR).
"""
from __future__ import annotations

from .. import uprobes as core
from ..constants import MASK64
from ..process import sys_getpgid
from .constants import ENOSYS, __NR_getpgid
from .uprobes import UPROBE_SWBP_INSN


def exc_brk(proc) -> None:
    """BRK from EL0: uprobe_brk_handler() claims BRK #5 if this mm has uprobes; else SIGTRAP."""
    proc.trace.emit("exceptions")
    regs = proc.kernel_entry()
    pc = regs.ip
    proc.trace.emit("exc_brk", ip=pc)
    word = int.from_bytes(proc.read(pc, 4), "little")
    if word != UPROBE_SWBP_INSN:
        proc.force_sig("SIGTRAP", f"brk #{(word >> 5) & 0xFFFF:#x} at {pc:#x} (not the uprobe BRK)")
        return
    if not core.uprobe_pre_sstep_notifier(proc):
        proc.force_sig("SIGTRAP", f"brk #0x5 at {pc:#x} and no uprobes in this process")
        return
    core.handle_swbp(proc, regs)  # uprobe_notify_resume(), on the way back to user mode
    regs.flush()  # the registers the kernel set are in place even when a signal follows
    if not proc.signal:
        proc.trace.emit("eret", ip=regs.ip)
        proc.exit_to_user_mode()


def exc_step(proc) -> None:
    """Hardware single-step exception: uprobe_single_step_handler() -> handle_singlestep()."""
    proc.trace.emit("exceptions")
    regs = proc.kernel_entry()
    proc.trace.emit("exc_step", ip=regs.ip)
    if not core.uprobe_post_sstep_notifier(proc):
        proc.force_sig("SIGTRAP", f"single-step exception at {regs.ip:#x}")
        return
    core.handle_singlestep(proc, regs)
    regs.flush()
    if not proc.signal:
        proc.trace.emit("eret", ip=regs.ip)
        proc.exit_to_user_mode()


def syscall_table(kernel=None) -> dict:
    """The syscalls an arm64 process is served, by number: only getpgid (the bench's syscall-count)."""
    return {__NR_getpgid: sys_getpgid}


def el0_svc(proc) -> None:
    """svc #0: the syscall number in x8, served from proc.syscalls (getpgid); others get -ENOSYS."""
    regs = proc.kernel_entry()
    nr = regs.get("x8")
    proc.trace.emit("syscalls", ip=regs.ip, note=lambda: f"nr {nr}")
    handler = proc.syscalls.get(nr)
    regs.set("x0", (handler(proc, regs) if handler else -ENOSYS) & MASK64)
    regs.flush()
    proc.trace.emit("eret", ip=regs.ip)
    proc.exit_to_user_mode()
