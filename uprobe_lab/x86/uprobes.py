"""The x86-64 arch hooks of uprobes: twin of arch/x86/kernel/uprobes.c as the generic core sees it.

``X86ArchOps`` implements uprobe_lab.arch_ops.ArchOps; every X86Process has one as
``proc.arch_ops``. Each hook lives where the kernel file's own sections put it:

==========================================================================  =============
hook                                                                        module
==========================================================================  =============
arch_uprobe_analyze_insn                                                    x86.decode
arch_uprobe_skip_sstep (branch/push emulation)                              x86.emulate
arch_uprobe_pre_xol, arch_uprobe_post_xol, arch_uprobe_abort_xol            x86.xol
arch_uretprobe_hijack_return_addr, arch_uretprobe_is_alive, trampoline      x86.uretprobe
set_swbp, set_orig_insn, arch_uprobe_optimize (6.18 nop5, 7.3 nop10)        x86.optimize
is_swbp_at (the lab's own), uprobe_get_swbp_addr, exc_int3/exc_debug        x86.traps
==========================================================================  =============

The syscalls (do_syscall_64, sys_uretprobe, sys_uprobe) are in x86.syscalls; the CLI's and
notebooks' ``analyze_hex``/``analyze_table`` in x86.analyze.
"""
from __future__ import annotations

from . import constants, decode, emulate, optimize, traps, uretprobe, xol
from .decode import ARCH_UPROBE_FLAG_CAN_OPTIMIZE, ArchUprobe


class X86ArchOps:
    """``proc.arch_ops`` of an x86-64 process (uprobe_lab.arch_ops.ArchOps)."""

    MAX_UINSN_BYTES = constants.MAX_UINSN_BYTES
    UPROBE_XOL_SLOT_BYTES = constants.UPROBE_XOL_SLOT_BYTES
    TASK_SIZE = constants.TASK_SIZE

    arch_uprobe_analyze_insn = staticmethod(decode.arch_uprobe_analyze_insn)
    set_swbp = staticmethod(optimize.set_swbp)
    set_orig_insn = staticmethod(optimize.set_orig_insn)
    is_swbp_at = staticmethod(traps.is_swbp_at)
    uprobe_get_swbp_addr = staticmethod(traps.uprobe_get_swbp_addr)
    arch_uprobe_pre_xol = staticmethod(xol.arch_uprobe_pre_xol)
    arch_uprobe_post_xol = staticmethod(xol.arch_uprobe_post_xol)
    arch_uprobe_abort_xol = staticmethod(xol.arch_uprobe_abort_xol)
    arch_uretprobe_hijack_return_addr = staticmethod(uretprobe.arch_uretprobe_hijack_return_addr)
    arch_uretprobe_is_alive = staticmethod(uretprobe.arch_uretprobe_is_alive)
    arch_uretprobe_trampoline = staticmethod(uretprobe.arch_uretprobe_trampoline)

    # Called on every hit: they pick the module that does the work, so a hit that needs no
    # optimisation or no emulation never enters x86.optimize or x86.emulate.
    @staticmethod
    def arch_uprobe_optimize(proc, auprobe: ArchUprobe, vaddr: int) -> None:
        if ARCH_UPROBE_FLAG_CAN_OPTIMIZE in auprobe.flags:
            optimize.arch_uprobe_optimize(proc, auprobe, vaddr)

    @staticmethod
    def arch_uprobe_skip_sstep(proc, auprobe: ArchUprobe, regs) -> bool:
        return auprobe.ops != "default" and emulate.arch_uprobe_skip_sstep(proc, auprobe, regs)
