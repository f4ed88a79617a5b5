"""x86-64 return probes: twin of the uretprobe half of arch/x86/kernel/uprobes.c.

The return-address hijack, both trampolines in slot 0 of ``[uprobes]`` (an int3 before 6.11, the
syscall trampoline after) and ``sys_uretprobe``.

sys_uretprobe is the merged, hardened form (fa6192adc32f: mainline 6.15, and the 6.12-6.14 stable lines) on
every version; released 6.11 did not yet refuse a call when no [uprobes] page exists. What the lab
leaves out: shadow stacks and seccomp.
"""
from __future__ import annotations

import struct
from functools import lru_cache

from .. import uprobes as core
from ..kernel import KernelVersion
from . import asm
from .constants import UPROBE_SWBP_INSN, __NR_uretprobe


def arch_uretprobe_hijack_return_addr(proc, trampoline_vaddr: int, regs) -> int:
    """Swap the return address at [sp] for the trampoline; return the original, or -1 (no return probe).

    As in the kernel, a write that fails altogether only gives up (-1); one that stops part-way has
    clobbered the return address, which is logged (pr_err) and costs the task a SIGSEGV. Left out:
    ``rasize = sizeof_long(regs)``, 4 bytes for a compat task: the lab's compat task runs 64-bit code
    and pushes 8-byte return addresses, so it is served 8 bytes too; and shstk_update_last_frame."""
    rasize = 8
    raw = proc.copy_from_user(regs.sp, rasize)
    if raw is None:
        return -1
    orig = int.from_bytes(raw, "little")
    if orig == trampoline_vaddr:  # already hijacked (a chained return probe)
        return orig
    nleft = proc.copy_to_user_nleft(regs.sp, trampoline_vaddr.to_bytes(rasize, "little"))
    if not nleft:
        return orig
    if nleft != rasize:
        message = f"return address clobbered: pid=1, %sp={regs.sp:#x}, %ip={regs.ip:#x}"
        proc.dmesg.append(message)
        proc.force_sig("SIGSEGV", message)
    return -1


def arch_uretprobe_is_alive(ri, ctx: int, regs) -> bool:
    if ctx == core.RP_CHECK_CALL:  # sp was just decremented by "call" insn
        return regs.sp < ri.stack
    return regs.sp <= ri.stack


def uretprobe_trampoline(kernel: KernelVersion, save_regs: bool = True) -> bytes:
    """The syscall trampoline copied to slot 0 of [uprobes] (6.11+).

    ``save_regs=False`` builds the broken teaching variant: without the pushes, syscall's own
    writes to rcx and r11 reach the probed program.
    """
    saves = asm.push("rax") + asm.push("rcx") + asm.push("r11") if save_regs else asm.push("rax")
    restores = asm.pop("r11") + asm.pop("rcx") if save_regs else b""
    code = saves + asm.mov_imm_sx("rax", __NR_uretprobe) + asm.SYSCALL + restores + asm.RET
    return code + (asm.INT3 if kernel.trampoline_sls_int3 else b"")


@lru_cache(maxsize=None)
def uretprobe_syscall_check_offset(save_regs: bool = True) -> int:
    """Offset of the label right after ``syscall`` in the trampoline: ``uretprobe_syscall_check -
    uretprobe_trampoline_entry``, the offset trampoline_check_ip() adds."""
    return len(uretprobe_trampoline(_NO_SLS, save_regs).split(asm.SYSCALL)[0]) + len(asm.SYSCALL)


def trampoline_check_ip(tramp: int, save_regs: bool = True) -> int:
    """Twin of trampoline_check_ip() in arch/x86/kernel/uprobes.c: the only rip sys_uretprobe accepts, the
    address right after ``syscall`` in the trampoline at ``tramp``."""
    return tramp + uretprobe_syscall_check_offset(save_regs)


def arch_uretprobe_trampoline(proc) -> bytes:
    """Slot 0 of the XOL area: one int3 before 6.11, the syscall trampoline after - for a task in 64-bit
    mode only (``user_64bit_mode(regs)``): a compat task (``proc.compat_task``) gets the int3 on every
    version. The lab's compat task runs the same 64-bit code; only the trampoline changes, which is what
    a 32-bit program's hits cost differently (uprobe_lab.native.compat runs a real one on the host)."""
    if not proc.kernel.uretprobe_syscall or proc.compat_task:
        return bytes([UPROBE_SWBP_INSN])
    return uretprobe_trampoline(proc.kernel, proc.uretprobe_saves_regs)


def uretprobe_syscall_args(save_regs: bool = True) -> tuple[str, ...]:
    """struct uretprobe_syscall_args: the registers the trampoline pushed, lowest address first.

    The broken teaching trampoline pushes only rax, so its kernel twin reads and writes one slot.
    """
    return ("r11", "cx", "ax") if save_regs else ("ax",)


def sys_uretprobe(proc, regs) -> int:
    """The uretprobe syscall (335): return probes without a trap. Merged form, incl. fa6192adc32f.

    With the broken teaching trampoline (``proc.uretprobe_saves_regs`` False) only rax was saved:
    the consumers and the program get whatever ``syscall`` left in rcx and r11.
    """
    tramp = core.uprobe_get_trampoline_vaddr(proc)
    if tramp == core.UPROBE_NO_TRAMPOLINE_VADDR or regs.ip != trampoline_check_ip(tramp, proc.uretprobe_saves_regs):
        proc.force_sig("SIGILL", f"sys_uretprobe called from {regs.ip:#x}, not from the [uprobes] trampoline")
        return -1
    names = uretprobe_syscall_args(proc.uretprobe_saves_regs)
    size = 8 * len(names)
    raw = proc.copy_from_user(regs.sp, size)
    if raw is None:
        proc.force_sig("SIGILL", "sys_uretprobe could not read the saved registers")
        return -1
    # expose the "right" values of r11/cx/ax/sp to the consumers
    for name, value in zip(names, struct.unpack(f"<{len(names)}Q", raw)):
        regs.set(name, value)
    regs.sp = regs.sp + size
    ip, sp = regs.ip, regs.sp
    core.uprobe_handle_trampoline(proc, regs)
    if proc.signal:
        return -1
    if regs.sp != sp:  # a consumer moved sp: nothing to do but return via iret
        return regs.ax
    regs.sp = regs.sp - size
    # ax's slot carries the real return address to the trampoline's ret; r11/cx as the consumers left them
    args = struct.pack(f"<{len(names)}Q", *[regs.ip if name == "ax" else regs.get(name) for name in names])
    regs.ip = ip
    if not proc.copy_to_user(regs.sp, args):
        proc.force_sig("SIGILL", "sys_uretprobe could not write the stack")
        return -1
    regs.r11 = regs.flags  # ensure sysret, see do_syscall_64()
    regs.cx = regs.ip
    return regs.ax


_NO_SLS = KernelVersion("no-sls", frozenset({"uretprobe_syscall"}))  # the syscall trampoline, no int3 after its ret
