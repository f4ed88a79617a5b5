"""The x86-64 syscall entry the lab serves: twin of do_syscall_64 (arch/x86/entry/syscall_64.c)
and the few entries of syscall_64.tbl a probed program needs.

Only getpgid (the bench's syscall-count producer), futex's FUTEX_WAKE (the price benches' page-pin pair),
uretprobe (6.11+) and uprobe (6.18, 7.3) are served; every other number returns -ENOSYS.
"""
from __future__ import annotations

from ..constants import MASK64
from ..kernel import KernelVersion
from ..process import sys_getpgid
from . import optimize
from .constants import (EFAULT, EINVAL, ENOSYS, FUTEX_PRIVATE_FLAG, FUTEX_WAKE, TASK_SIZE, X86_EFLAGS_RF, X86_EFLAGS_TF,
                        __NR_futex, __NR_getpgid, __NR_uprobe, __NR_uretprobe)
from .uretprobe import sys_uretprobe


def sys_futex(proc, regs) -> int:
    """futex(uaddr, FUTEX_WAKE[_PRIVATE], n) with nobody waiting (kernel/futex/waitwake.c futex_wake).

    The two flavours differ in get_futex_key (kernel/futex/core.c): a private futex is keyed by mm and
    address and never touches the page, so an unmapped word below TASK_SIZE_MAX still returns 0; a
    shared one first takes a reference on the page with get_user_pages_fast and drops it again
    (``pages_pinned``), so an unmapped word is -EFAULT, and so is a read-only one: every mapping of the
    lab is anonymous, and a read-only anonymous page "will never change". The lab leaves out the hash bucket, the waiters
    (there are none: the result is 0) and every other futex operation (-ENOSYS; the kernel also says
    -ENOSYS for FUTEX_WAKE with FUTEX_CLOCK_REALTIME)."""
    op = regs.si & 0xFFFFFFFF
    if op not in (FUTEX_WAKE, FUTEX_WAKE | FUTEX_PRIVATE_FLAG):
        return -ENOSYS
    uaddr = regs.di
    if uaddr % 4:
        return -EINVAL  # the word must be 4-byte aligned
    if uaddr > TASK_SIZE:
        return -EFAULT  # access_ok: valid_user_address
    if not op & FUTEX_PRIVATE_FLAG:
        mapping = proc.mapping_at(uaddr)
        if mapping is None or mapping.perms[:2] != "rw":
            return -EFAULT  # no page to reference, or a read-only anonymous one
        proc.trace.emit("pages_pinned", ip=regs.ip, note="get_futex_key: get_user_pages_fast + put_page")
    proc.trace.emit("futex_wakes", ip=regs.ip, note="futex_hash: no waiter on the bucket")
    return 0


def syscall_table(kernel: KernelVersion) -> dict:
    """The syscalls a process on ``kernel`` is served, by number (sys_call_table)."""
    table = {__NR_getpgid: sys_getpgid, __NR_futex: sys_futex}
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
    # "if (unlikely(regs->ip >= TASK_SIZE_MAX)) return false;": TASK_SIZE_MAX is (1 << 47) - PAGE_SIZE
    # with the lab's 4-level paging (the lab's TASK_SIZE: a 64-bit task's TASK_SIZE is TASK_SIZE_MAX), so
    # an ip in the last page below 2**47 returns by iret, e.g. after a syscall that ends the top user
    # page. Left out: the cs/ss and XENPV checks, and 5-level paging.
    sysret_ok = (regs.cx == regs.ip and regs.r11 == regs.flags
                 and not regs.flags & (X86_EFLAGS_TF | X86_EFLAGS_RF) and regs.ip < TASK_SIZE)
    proc.trace.emit("sysret" if sysret_ok else "iret", ip=regs.ip)
    proc.exit_to_user_mode()
