"""The arm64 arch hooks of uprobes: twin of arch/arm64/kernel/probes/uprobes.c.

``Arm64ArchOps`` implements uprobe_lab.arch_ops.ArchOps; every Arm64Process has one, with its STP
and MTE setting. Analysis is in arm64.decode, simulation in arm64.simulate, the BRK, step and svc
entries in arm64.traps, the CLI's and notebooks' ``analyze_word`` in arm64.analyze.

Here: the BRK in text, hardware-step XOL (a second exception, then pc = vaddr + 4), and return
probes, which hijack the link register (x30); the trampoline is a BRK in XOL slot 0 (arm64 has no
uretprobe syscall).

What the lab leaves out: ``arch_uprobe_xol_was_trapped`` (a fault inside the XOL step kills the
process here, after ``arch_uprobe_abort_xol``), and the Guarded Control Stack (GCS), which probes
support since 6.18 (Jeremy Linton's series, merged with the arm64 6.18 pull: efb07ac534e2 "arm64:
probes: Add GCS support to bl/blr/ret", 4a601714bb24 "arm64: uprobes: Add GCS support to uretprobes").
For a task with GCS enabled the kernel's arch_uretprobe_hijack_return_addr reads the GCS entry at
GCSPR_EL0, gives up on the return probe (-1) when it differs from the link register, writes the
trampoline address there too, and sends SIGSEGV when the GCS cannot be read or written; the simulated
bl/blr push and ret pop the GCS (arm64.simulate). The lab's tasks run without GCS.
"""
from __future__ import annotations

from .. import uprobes as core
from ..errors import LabError
from . import asm
from .constants import MAX_UINSN_BYTES, TASK_SIZE, UPROBE_XOL_SLOT_BYTES
from .decode import STP_MODES, ArchUprobe, arch_uprobe_analyze_insn
from .simulate import HANDLERS

UPROBE_SWBP_INSN = asm.BRK64_OPCODE_UPROBES


# --- breakpoints in text ------------------------------------------------------------------

def set_swbp(proc, auprobe: ArchUprobe, vaddr: int) -> None:
    proc.write(vaddr, asm.b(UPROBE_SWBP_INSN))
    proc.trace.emit("text_patches", ip=vaddr, note="brk #0x5")


def set_orig_insn(proc, auprobe: ArchUprobe, vaddr: int) -> None:
    proc.write(vaddr, auprobe.insn)
    proc.trace.emit("text_patches", ip=vaddr, note="original instruction")


def is_swbp_at(proc, vaddr: int) -> bool:
    """Whether the uprobes BRK is at vaddr. The lab's own arch hook, no kernel twin: it does what the generic
    is_trap_at_addr() (kernel/events/uprobes.c) does with the weak defaults is_trap_insn() and
    is_swbp_insn(), which arm64 keeps. An unreadable address is -EFAULT there, i.e. not a breakpoint."""
    return proc.read_page(vaddr, 4) == asm.b(UPROBE_SWBP_INSN)


def uprobe_get_swbp_addr(regs) -> int:
    """arm64 overrides the weak default: a BRK exception leaves pc on the BRK itself."""
    return regs.ip


def arch_uprobe_optimize(proc, auprobe, vaddr: int) -> None:
    """No optimisation on arm64."""


def arch_uprobe_skip_sstep(proc, auprobe: ArchUprobe, regs) -> bool:
    if not auprobe.simulate:
        return False
    HANDLERS[auprobe.handler](proc, auprobe.word, regs.ip, regs)
    return True


def arch_uprobe_pre_xol(proc, auprobe: ArchUprobe, regs) -> None:
    """pc = the XOL slot, and user_enable_single_step()."""
    regs.ip = proc.utask.xol_vaddr
    proc.single_step = True


def arch_uprobe_post_xol(proc, auprobe: ArchUprobe, regs) -> int:
    """pc = vaddr + 4, and user_disable_single_step()."""
    regs.ip = proc.utask.vaddr + 4
    proc.single_step = False
    return 0


def arch_uprobe_abort_xol(proc, auprobe: ArchUprobe, regs) -> None:
    """The step faulted or was cut short: pc = vaddr, and user_disable_single_step()
    (arch/arm64/kernel/probes/uprobes.c); the step the hardware had begun is forgotten too."""
    regs.ip = proc.utask.vaddr
    proc.single_step = False
    proc._stepped = False


# --- return probes ------------------------------------------------------------------------

def arch_uretprobe_hijack_return_addr(proc, trampoline_vaddr: int, regs) -> int:
    """Swap the link register for the trampoline; no stack access at all (and, the task having no GCS,
    no GCS entry to check and rewrite as 6.18 does)."""
    orig = regs.get("x30")
    regs.set("x30", trampoline_vaddr)
    return orig


def arch_uretprobe_is_alive(ri, ctx: int, regs) -> bool:
    """RP_CHECK_CHAIN_CALL: sp <= stack (a plain B to a retprobed label); otherwise sp < stack."""
    if ctx == core.RP_CHECK_CHAIN_CALL:
        return regs.sp <= ri.stack
    return regs.sp < ri.stack


def arch_uretprobe_trampoline(proc) -> bytes:
    """Slot 0 of the XOL area: the weak default, one UPROBE_SWBP_INSN."""
    return asm.b(UPROBE_SWBP_INSN)


class Arm64ArchOps:
    """``proc.arch_ops`` of an arm64 process (uprobe_lab.arch_ops.ArchOps), with its STP/MTE setting.

    ``store`` is the STP simulation's version: the seed's v2 ("pin") simulates only without MTE, v1
    ("uaccess") had no MTE check."""

    MAX_UINSN_BYTES = MAX_UINSN_BYTES
    UPROBE_XOL_SLOT_BYTES = UPROBE_XOL_SLOT_BYTES
    TASK_SIZE = TASK_SIZE

    def __init__(self, stp: str = "xol", mte: bool = False, store: str = "pin"):
        if stp not in STP_MODES:
            raise LabError(f"stp must be one of {', '.join(STP_MODES)}, got {stp!r}")
        self.stp, self.mte, self.store = stp, mte, store

    def arch_uprobe_analyze_insn(self, raw: bytes, vaddr: int, kernel=None) -> ArchUprobe:
        return arch_uprobe_analyze_insn(raw, vaddr, kernel, self.stp, self.mte and self.store == "pin")

    set_swbp = staticmethod(set_swbp)
    set_orig_insn = staticmethod(set_orig_insn)
    is_swbp_at = staticmethod(is_swbp_at)
    uprobe_get_swbp_addr = staticmethod(uprobe_get_swbp_addr)
    arch_uprobe_optimize = staticmethod(arch_uprobe_optimize)
    arch_uprobe_skip_sstep = staticmethod(arch_uprobe_skip_sstep)
    arch_uprobe_pre_xol = staticmethod(arch_uprobe_pre_xol)
    arch_uprobe_post_xol = staticmethod(arch_uprobe_post_xol)
    arch_uprobe_abort_xol = staticmethod(arch_uprobe_abort_xol)
    arch_uretprobe_hijack_return_addr = staticmethod(arch_uretprobe_hijack_return_addr)
    arch_uretprobe_is_alive = staticmethod(arch_uretprobe_is_alive)
    arch_uretprobe_trampoline = staticmethod(arch_uretprobe_trampoline)
