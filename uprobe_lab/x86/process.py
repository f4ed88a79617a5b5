"""An emulated x86-64 process, and the hardware effects Unicorn leaves out.

Unicorn raises interrupt 3 after an int3 (rip already past it) and interrupt 1 after an
instruction executed with the trap flag set - exactly #BP and #DB. It does *not* do what the
``syscall`` instruction does to registers: the CPU saves the next rip in rcx and rflags in r11.
The syscall hook does that here, and because Unicorn itself adds 2 to rip after the hook, a
kernel that moves rip (sys_uretprobe, sys_uprobe) must be written back 2 bytes short.
"""
from __future__ import annotations

from unicorn import UC_ARCH_X86, UC_HOOK_CODE, UC_HOOK_INSN, UC_HOOK_INTR, UC_MODE_64
from unicorn import x86_const as X

from ..process import EmulatedProcess, RegsView, pt_regs_fields
from ..uprobes import uprobe_abort_xol
from . import syscalls, traps
from .constants import EXIT_ADDR, STACK_SIZE, STACK_TOP, SYSCALL_INSN_SIZE, X86_EFLAGS_IF, X86_EFLAGS_TF
from .uprobes import X86ArchOps


class PtRegs(RegsView):
    """x86-64 struct pt_regs, by the kernel's field names (ax, cx, r11, ip, flags, sp, ...)."""

    UC_REGS = {
        "r15": X.UC_X86_REG_R15, "r14": X.UC_X86_REG_R14, "r13": X.UC_X86_REG_R13, "r12": X.UC_X86_REG_R12,
        "bp": X.UC_X86_REG_RBP, "bx": X.UC_X86_REG_RBX, "r11": X.UC_X86_REG_R11, "r10": X.UC_X86_REG_R10,
        "r9": X.UC_X86_REG_R9, "r8": X.UC_X86_REG_R8, "ax": X.UC_X86_REG_RAX, "cx": X.UC_X86_REG_RCX,
        "dx": X.UC_X86_REG_RDX, "si": X.UC_X86_REG_RSI, "di": X.UC_X86_REG_RDI, "ip": X.UC_X86_REG_RIP,
        "flags": X.UC_X86_REG_RFLAGS, "sp": X.UC_X86_REG_RSP,
    }
    _fields_ = pt_regs_fields(UC_REGS)
    __slots__ = ()


GPRS = [n for n in PtRegs.UC_REGS if n not in ("ip", "flags")]


class X86Process(EmulatedProcess):
    """An x86-64 process: text, stack, and (once a probe needs it) the ``[uprobes]`` XOL page."""

    arch = "x86_64"
    uc_arch, uc_mode = UC_ARCH_X86, UC_MODE_64
    Regs = PtRegs
    PC, SP, RETVAL = X.UC_X86_REG_RIP, X.UC_X86_REG_RSP, X.UC_X86_REG_RAX
    STEPPER_REGS = ("ip", "sp", "ax", "cx", "r11", "flags")
    EXEC_IMPLIES_READ = True  # protection_map[VM_EXEC] is PAGE_READONLY_EXEC: [uprobes] reads fine

    def __init__(self, kernel=None, record: bool = False, count_insns: bool = False,
                 uretprobe_saves_regs: bool = True, compat_task: bool = False):
        super().__init__(kernel, record)
        self.arch_ops = X86ArchOps()
        # False selects the broken teaching trampoline that does not save rcx/r11 around syscall
        self.uretprobe_saves_regs = uretprobe_saves_regs
        # True: the kernel treats this as a 32-bit task, whose uretprobes return through an int3 on every
        # version (the code the lab runs stays 64-bit; see arch_uretprobe_trampoline)
        self.compat_task = compat_task
        self.syscalls.update(syscalls.syscall_table(self.kernel))
        self.map("[stack]", STACK_TOP - STACK_SIZE, STACK_SIZE, "rw-p")
        self._syscall_tf_ip = None  # a syscall executed with TF set: where its (delayed) step trap is due
        self.uc.reg_write(X.UC_X86_REG_RFLAGS, 0x2 | X86_EFLAGS_IF)  # user mode always runs with IF set
        self.uc.hook_add(UC_HOOK_INTR, self._on_interrupt)
        self.uc.hook_add(UC_HOOK_INSN, self._on_syscall, None, 1, 0, X.UC_X86_INS_SYSCALL)
        if count_insns:
            self.uc.hook_add(UC_HOOK_CODE, self._on_insn)

    # --- hardware -> kernel entries ---
    def _on_insn(self, uc, address, size, user_data):
        self.trace.emit("user_insns", ip=address)

    def _on_interrupt(self, uc, intno, user_data):
        if intno == 3:
            traps.exc_int3(self)
        elif intno == 1:
            if self._syscall_tf_ip is not None and self.pc == self._syscall_tf_ip:
                # syscall masks TF on entry (MSR_SYSCALL_MASK) and the exit restores it by iret, so the
                # step trap comes after the *next* instruction, not after the syscall (6.18 host)
                self._syscall_tf_ip = None
                return
            self._syscall_tf_ip = None
            traps.exc_debug(self)
        else:  # #DE, #UD, #GP...: a fault inside an XOL step is reported at the probed address
            pc = self.pc
            uprobe_abort_xol(self)
            self.force_sig("SIGSEGV", f"unexpected interrupt {intno} at pc={pc:#x}")

    def _on_syscall(self, uc, user_data):
        regs = self.kernel_entry()
        next_ip = regs.ip + SYSCALL_INSN_SIZE
        # What the syscall instruction itself does (Unicorn does neither):
        regs.cx = next_ip
        regs.r11 = regs.flags
        regs.ip = next_ip  # pt_regs->ip is the instruction after syscall
        self._syscall_tf_ip = next_ip if regs.flags & X86_EFLAGS_TF else None
        syscalls.do_syscall_64(self, regs)
        regs.ip -= SYSCALL_INSN_SIZE  # Unicorn's rip still points at the syscall and it adds 2 after this hook
        regs.flush()

    def abandon_run(self) -> None:
        super().abandon_run()
        self._syscall_tf_ip = None  # no delayed step trap is due any more

    # --- conveniences for notebooks and tests ---
    def prepare_call(self, target, *args: int) -> tuple[int, int]:
        """Set up a System V call of ``target`` (arguments in rdi, rsi, ...) returning to EXIT_ADDR."""
        self.check_call_args(args, 6)
        addr = self.program.resolve(target) if isinstance(target, str) else target
        regs = self.regs()
        for name, value in zip(("di", "si", "dx", "cx", "r8", "r9"), args):
            regs.set(name, value)
        sp = (STACK_TOP - 0x100) & ~0xF
        regs.set("sp", sp - 8)
        regs.flush()
        self.write_u64(sp - 8, EXIT_ADDR)
        return addr, EXIT_ADDR
