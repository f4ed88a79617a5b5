"""The contract between the generic uprobe core and an architecture, written once.

kernel/events/uprobes.c reaches the architecture only through the hooks include/linux/uprobes.h
declares (``arch_uprobe_analyze_insn``, ``set_swbp``, ``arch_uprobe_pre_xol``, ...) and a few
constants from asm/uprobes.h. The lab's core (uprobe_lab.uprobes) does the same through
``proc.arch_ops``, an object with exactly the members of ``ArchOps`` below, by their kernel names, but for
one hook of the lab's own, ``is_swbp_at`` (see ``LAB_OWN_HOOKS``).
A new architecture provides one such object (x86.uprobes.X86ArchOps, arm64.uprobes.Arm64ArchOps)
and its process class, and is listed in uprobe_lab.arches; a new kernel version is a row in
uprobe_lab.kernel whose fields those hooks read.

The hardware side (which trap or syscall enters the kernel) belongs to each arch's process class and
its ``traps`` module, not to this contract: the core is entered through ``handle_swbp``,
``handle_singlestep``, ``uprobe_handle_trampoline`` and ``handle_syscall_uprobe``.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

from .kernel import KernelVersion


@runtime_checkable
class ArchUprobe(Protocol):
    """struct arch_uprobe as the core uses it (each arch adds its own fields)."""

    insn: bytes  # the original bytes the breakpoint covers
    ixol: bytes  # what arch_uprobe_copy_ixol writes into an XOL slot

    @property
    def action(self) -> str:  # "emulate"/"simulate" or "xol"
        ...

    def describe(self) -> str:  # one line for traces and reprs
        ...


@runtime_checkable
class ArchOps(Protocol):
    """The arch hooks of include/linux/uprobes.h (and the asm/uprobes.h constants) the core calls."""

    MAX_UINSN_BYTES: int  # how many bytes arch_uprobe_analyze_insn is given
    UPROBE_XOL_SLOT_BYTES: int  # one XOL slot
    TASK_SIZE: int  # top of user space: the XOL page is mapped just below it

    # registration: may the instruction be probed, and how will it run
    def arch_uprobe_analyze_insn(self, raw: bytes, vaddr: int, kernel: KernelVersion) -> ArchUprobe: ...

    # the breakpoint in text
    def set_swbp(self, proc, auprobe: ArchUprobe, vaddr: int) -> None: ...
    def set_orig_insn(self, proc, auprobe: ArchUprobe, vaddr: int) -> None: ...
    # the lab's own hook, no kernel twin: the generic is_trap_at_addr() (kernel/events/uprobes.c) reads
    # the opcode and asks the weak is_trap_insn()/is_swbp_insn(); here the arch does both
    def is_swbp_at(self, proc, vaddr: int) -> bool: ...
    def uprobe_get_swbp_addr(self, regs) -> int: ...

    # after the consumers ran: optimise the site (x86: nop5 on 6.18, nop10 on 7.3), emulate, or step out of line
    def arch_uprobe_optimize(self, proc, auprobe: ArchUprobe, vaddr: int) -> None: ...
    def arch_uprobe_skip_sstep(self, proc, auprobe: ArchUprobe, regs) -> bool: ...
    def arch_uprobe_pre_xol(self, proc, auprobe: ArchUprobe, regs) -> None: ...
    def arch_uprobe_post_xol(self, proc, auprobe: ArchUprobe, regs) -> int: ...
    def arch_uprobe_abort_xol(self, proc, auprobe: ArchUprobe, regs) -> None: ...  # the step faulted

    # return probes
    def arch_uretprobe_hijack_return_addr(self, proc, trampoline_vaddr: int, regs) -> int: ...
    def arch_uretprobe_is_alive(self, ri, ctx: int, regs) -> bool: ...  # ri: uprobes.ReturnInstance
    def arch_uretprobe_trampoline(self, proc) -> bytes: ...


ARCH_HOOKS = tuple(name for name in vars(ArchOps) if name.startswith(("arch_", "set_", "is_", "uprobe_")))
ARCH_CONSTANTS = ("MAX_UINSN_BYTES", "UPROBE_XOL_SLOT_BYTES", "TASK_SIZE")
LAB_OWN_HOOKS = ("is_swbp_at",)  # hooks with no kernel function of their name
