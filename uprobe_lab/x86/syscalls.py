"""The x86-64 syscall entry the lab serves: twin of do_syscall_64 (arch/x86/entry/syscall_64.c)
and the few entries of syscall_64.tbl a probed program needs.

Only getpgid (the bench's syscall-count producer), uretprobe (6.11+) and uprobe (6.18, 7.3) are served;
every other number returns -ENOSYS.
"""
from __future__ import annotations

from ..constants import MASK64
from ..kernel import KernelVersion
from ..process import sys_getpgid
from . import optimize
from .constants import ENOSYS, X86_EFLAGS_RF, X86_EFLAGS_TF, __NR_getpgid, __NR_uprobe, __NR_uretprobe
from .uretprobe import sys_uretprobe



def syscall_table(kernel: KernelVersion) -> dict:
    """The syscalls a process on ``kernel`` is served, by number (sys_call_table)."""
    table = {__NR_getpgid: sys_getpgid}
    if kernel.uretprobe_syscall:
        table[__NR_uretprobe] = sys_uretprobe
    if kernel.uprobe_syscall:
        table[__NR_uprobe] = optimize.sys_uprobe
    return table


def do_syscall_64(proc, regs) -> None:
    """Dispatch a syscall; return by sysret when rcx/r11 allow it, else by iret (as the kernel does)."""
    proc.trace.emit("syscalls", ip=regs.ip, note=lambda: f"nr {regs.ax}")
    handler = proc.syscalls.get(regs.ax)
    ret = handler(proc, regs) if handler else -ENOSYS
    if proc.signal:
        return
    regs.ax = ret & MASK64
    # do_syscall_64 also checks cs/ss and (with 5-level paging) a wider canonical range; the lab
    # models 4-level paging, where a user ip below 2**47 is canonical
    sysret_ok = (regs.cx == regs.ip and regs.r11 == regs.flags
                 and not regs.flags & (X86_EFLAGS_TF | X86_EFLAGS_RF) and regs.ip < (1 << 47))
    proc.trace.emit("sysret" if sysret_ok else "iret", ip=regs.ip)
