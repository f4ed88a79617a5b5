"""An emulated arm64 process, and the hardware effects Unicorn leaves out.

Unicorn reports a BRK as interrupt 7 with pc still on the BRK (as ELR_EL1 would be) and gives no
ESR, so the BRK entry decodes the instruction to see which BRK it was; if the kernel model does
not move pc, the BRK runs again. ``svc`` arrives as interrupt 2 with pc after it. Unicorn has no
hardware single-step for user code: while ``single_step`` is set, a code hook on the
``[uprobes]`` page raises the step exception before the instruction after the stepped one, as
MDSCR_EL1.SS would. Every run has an instruction budget (``run(max_insns=...)``).
"""
from __future__ import annotations

from unicorn import UC_ARCH_ARM64, UC_HOOK_CODE, UC_HOOK_INTR, UC_MODE_ARM
from unicorn import arm64_const as A

from ..constants import PAGE_SIZE
from ..errors import LabError
from ..process import EmulatedProcess, RegsView, pt_regs_fields
from ..uprobes import uprobe_abort_xol
from . import traps
from .constants import EXIT_ADDR, STACK_SIZE, STACK_TOP, TASK_SIZE
from .decode import is_bc_cond
from .simulate import simulate_b_cond
from .stp import STP_STORES
from .uprobes import Arm64ArchOps

XOL_PAGE = TASK_SIZE - PAGE_SIZE  # where get_xol_area() maps [uprobes]

EXCP_UDEF, EXCP_SWI, EXCP_BKPT = 1, 2, 7  # Unicorn/QEMU interrupt numbers


class PtRegs(RegsView):
    """arm64 struct user_pt_regs: regs[0..30], sp, pc (``ip``, instruction_pointer()), pstate.

    ``pstate`` holds only the NZCV flags (what b.cond reads), 32 bits wide as in Unicorn. ``pc``, ``fp`` and ``lr`` are
    aliases of ``ip``, ``x29`` and ``x30``.
    """

    UC_REGS = {**{f"x{i}": getattr(A, f"UC_ARM64_REG_X{i}") for i in range(29)},
               "x29": A.UC_ARM64_REG_X29, "x30": A.UC_ARM64_REG_X30,
               "sp": A.UC_ARM64_REG_SP, "ip": A.UC_ARM64_REG_PC, "pstate": A.UC_ARM64_REG_NZCV}
    _fields_ = pt_regs_fields(UC_REGS, narrow=("pstate",))
    __slots__ = ()

    pc = property(lambda self: self.get("ip"), lambda self, v: self.set("ip", v))
    fp = property(lambda self: self.get("x29"), lambda self, v: self.set("x29", v))
    lr = property(lambda self: self.get("x30"), lambda self, v: self.set("x30", v))


class Arm64Process(EmulatedProcess):
    """An AArch64 process: text, stack, and (once a probe needs it) the ``[uprobes]`` XOL page.

    ``stp``: how a probed ``stp x29, x30, [sp, #imm]!`` runs - "xol" (upstream) or "simulate"
    (the unmerged patch); ``stp_store``: "pin" (the seed's v2) or "uaccess" (v1);
    ``mte``: the system supports MTE (turns v2's simulation off; v1 had no such check); ``sp_alignment_check``:
    SCTLR_EL1.SA0, on as in Linux.
    """

    arch = "arm64"
    uc_arch, uc_mode = UC_ARCH_ARM64, UC_MODE_ARM
    Regs = PtRegs
    PC, SP, RETVAL = A.UC_ARM64_REG_PC, A.UC_ARM64_REG_SP, A.UC_ARM64_REG_X0
    STEPPER_REGS = ("ip", "sp", "x0", "x29", "x30", "pstate")
    # arm64 Linux maps PROT_EXEC readable on a CPU without FEAT_PAN3 (execute-only mappings were reverted in 5.5,
    # 24cecc377463, and came back in 5.13 for EPAN CPUs only, 18107f8a2df6): the lab models such a CPU, where code
    # stepped in [uprobes] can load from the page, as the referee's kernels show under QEMU 7.2 (QEMU 10 has EPAN).
    EXEC_IMPLIES_READ = True
    TASK_STATE = ("utask", "single_step", "_stepped")

    def __init__(self, kernel=None, record: bool = False, count_insns: bool = False, stp: str | None = None,
                 stp_store: str = "pin", mte: bool = False, sp_alignment_check: bool = True):
        super().__init__(kernel, record)
        if stp_store not in STP_STORES:
            raise LabError(f"stp_store must be one of {', '.join(STP_STORES)}, got {stp_store!r}")
        self.arch_ops = Arm64ArchOps(stp or "xol", mte, stp_store)
        self.syscalls.update(traps.syscall_table(self.kernel))
        self.stp_store = stp_store
        self.sp_alignment_check = sp_alignment_check
        self.single_step = False  # MDSCR_EL1.SS for this task (user_enable_single_step)
        self._stepped = False
        self.count_insns = count_insns
        self.map("[stack]", STACK_TOP - STACK_SIZE, STACK_SIZE, "rw-p")
        self.uc.hook_add(UC_HOOK_INTR, self._on_interrupt)
        if count_insns:
            self.uc.hook_add(UC_HOOK_CODE, self._on_insn)
        else:  # only the XOL page needs watching for the single-step
            self.uc.hook_add(UC_HOOK_CODE, self._on_insn, None, XOL_PAGE, XOL_PAGE + PAGE_SIZE - 1)

    @property
    def stp(self) -> str:
        return self.arch_ops.stp

    def fork_options(self) -> dict:
        return {**super().fork_options(), "count_insns": self.count_insns, "stp": self.stp,
                "stp_store": self.stp_store, "mte": self.arch_ops.mte, "sp_alignment_check": self.sp_alignment_check}

    # --- hardware -> kernel entries ---
    def _on_insn(self, uc, address, size, user_data):
        if self.single_step:
            if self._stepped:  # one instruction ran with SS set: the step exception fires here
                self._stepped = False
                traps.exc_step(self)
                return
            self._stepped = True
        if self.count_insns:
            self.trace.emit("user_insns", ip=address)

    def _on_interrupt(self, uc, intno, user_data):
        if intno == EXCP_BKPT:
            traps.exc_brk(self)
        elif intno == EXCP_SWI:
            traps.el0_svc(self)
        elif intno == EXCP_UDEF and self._bc_cond():
            pass
        elif intno == EXCP_UDEF:
            pc = self.pc
            uprobe_abort_xol(self)  # undefined in the XOL slot: the signal arrives at the probed address
            self.force_sig("SIGILL", f"undefined instruction at {pc:#x}")
        else:  # e.g. an alignment fault (an atomic at an odd address): from the XOL slot, too, the kernel
            pc = self.pc  # delivers the signal at the probed address (the arm64 referee shows it)
            uprobe_abort_xol(self)
            self.force_sig("SIGSEGV", f"unexpected exception {intno} at {pc:#x}")

    def _bc_cond(self) -> bool:
        """FEAT_HBC's BC.cond, which Unicorn's CPU lacks (it raises UNDEF): run it as a CPU with FEAT_HBC does, as a
        b.cond (the hint only steers branch prediction). The referee's QEMU -cpu max has FEAT_HBC."""
        pc = self.pc
        word = int.from_bytes(self.read(pc, 4), "little")
        if not is_bc_cond(word):
            return False
        regs = self.regs()
        simulate_b_cond(self, word, pc, regs)
        regs.flush()
        return True

    # --- conveniences for notebooks and tests ---
    def prepare_call(self, target, *args: int, stack_top: int | None = None) -> tuple[int, int]:
        """Set up an AAPCS64 call of ``target`` (arguments in x0..x7, lr = EXIT_ADDR)."""
        self.check_call_args(args, 8)
        addr = self.call_address(target)
        regs = self.regs()
        for i, value in enumerate(args):
            regs.set(f"x{i}", value)
        regs.set("sp", ((stack_top or STACK_TOP) - 0x100) & ~0xF)
        regs.set("x30", EXIT_ADDR)
        regs.flush()
        return addr, EXIT_ADDR
