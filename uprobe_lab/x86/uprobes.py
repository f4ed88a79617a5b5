"""The x86-64 arch hooks of uprobes: twin of arch/x86/kernel/uprobes.c as the generic core sees it.

An X86Process's ``proc.arch_ops`` is this module. Each hook lives where the kernel file's own
sections put it:

==========================================================================  =============
hook                                                                        module
==========================================================================  =============
arch_uprobe_analyze_insn                                                    x86.decode
arch_uprobe_skip_sstep (branch/push emulation)                              x86.emulate
arch_uprobe_pre_xol, arch_uprobe_post_xol                                   x86.xol
arch_uretprobe_hijack_return_addr, arch_uretprobe_is_alive, trampoline      x86.uretprobe
set_swbp, set_orig_insn, arch_uprobe_optimize (6.18 nop5)                   x86.optimize
is_swbp_at, uprobe_get_swbp_addr (and exc_int3/exc_debug)                   x86.traps
==========================================================================  =============

The syscalls (do_syscall_64, sys_uretprobe, sys_uprobe) are in x86.syscalls; the CLI's and
notebooks' ``analyze_hex``/``analyze_table`` in x86.analyze.
"""
from .constants import MAX_UINSN_BYTES, TASK_SIZE, UPROBE_XOL_SLOT_BYTES
from .decode import arch_uprobe_analyze_insn
from .emulate import arch_uprobe_skip_sstep
from .optimize import arch_uprobe_optimize, set_orig_insn, set_swbp
from .traps import is_swbp_at, uprobe_get_swbp_addr
from .uretprobe import arch_uretprobe_hijack_return_addr, arch_uretprobe_is_alive, arch_uretprobe_trampoline
from .xol import arch_uprobe_post_xol, arch_uprobe_pre_xol

__all__ = ["MAX_UINSN_BYTES", "TASK_SIZE", "UPROBE_XOL_SLOT_BYTES", "arch_uprobe_analyze_insn",
           "arch_uprobe_skip_sstep", "arch_uprobe_optimize", "set_orig_insn", "set_swbp", "is_swbp_at",
           "uprobe_get_swbp_addr", "arch_uretprobe_hijack_return_addr", "arch_uretprobe_is_alive",
           "arch_uretprobe_trampoline", "arch_uprobe_post_xol", "arch_uprobe_pre_xol"]
