"""An emulated x86-64 process, and the hardware effects Unicorn leaves out.

Unicorn raises interrupt 3 after an int3 (rip already past it) and interrupt 1 after an
instruction executed with the trap flag set - exactly #BP and #DB. It does *not* do what the
``syscall`` instruction does to registers: the CPU saves the next rip in rcx and rflags in r11.
The syscall hook does that here, and because Unicorn itself adds 2 to rip after the hook, a
kernel that moves rip (sys_uretprobe, sys_uprobe) must be written back 2 bytes short.

Nor does Unicorn check that a branch target is canonical: a near call, jmp or ret to a
non-canonical address completes (a call's push included, rsp 8 lower) and only the fetch at the
target fails, or with TF set the single-step trap comes first, at the target. The host's Intel CPU
raises #GP on the branch itself: rip stays on it and every register is as before it, but the
return address a call stores is left written in the word below rsp (a 6.18 host on an Intel Xeon:
``ff 15`` through a pointer to 0x2139e073cc643173). The lab models that for an instruction whose
start state it kept (``_branch_start``): the one an out-of-line step runs, and any address given to
``watch_insn``. Arriving at a non-canonical rip with every register but rsp as that instruction
found them, the CPU is put back to its start and the #GP is delivered (SIGSEGV; in a step, the
kernel aborts it first: arch_uprobe_abort_xol). A branch elsewhere keeps Unicorn's state (rip at the
target): a hook on every instruction to know which one branched would slow every run. Only Intel is
modelled: AMD's manuals also give the #GP to the branch, but whether an AMD call leaves its return
address written has not been checked against an AMD host.
"""
from __future__ import annotations

from unicorn import UC_ARCH_X86, UC_HOOK_CODE, UC_HOOK_INSN, UC_HOOK_INTR, UC_MODE_64
from unicorn import x86_const as X

from ..process import EmulatedProcess, RegsView, pt_regs_fields
from ..uprobes import uprobe_abort_xol
from . import syscalls, traps
from .decode import UPROBE_FIX_IP
from .constants import CANONICAL_BITS, EXIT_ADDR, STACK_SIZE, STACK_TOP, SYSCALL_INSN_SIZE, X86_EFLAGS_IF, X86_EFLAGS_TF
from .uprobes import X86ArchOps


class PtRegs(RegsView):
    """x86-64 struct pt_regs (arch/x86/include/asm/ptrace.h), by the kernel's field names (ax, cx, r11,
    ip, flags, sp, ...) and at its offsets: orig_ax, cs and ss, which the lab does not use, hold their
    places and stay 0."""

    UC_REGS = {
        "r15": X.UC_X86_REG_R15, "r14": X.UC_X86_REG_R14, "r13": X.UC_X86_REG_R13, "r12": X.UC_X86_REG_R12,
        "bp": X.UC_X86_REG_RBP, "bx": X.UC_X86_REG_RBX, "r11": X.UC_X86_REG_R11, "r10": X.UC_X86_REG_R10,
        "r9": X.UC_X86_REG_R9, "r8": X.UC_X86_REG_R8, "ax": X.UC_X86_REG_RAX, "cx": X.UC_X86_REG_RCX,
        "dx": X.UC_X86_REG_RDX, "si": X.UC_X86_REG_RSI, "di": X.UC_X86_REG_RDI, "ip": X.UC_X86_REG_RIP,
        "flags": X.UC_X86_REG_RFLAGS, "sp": X.UC_X86_REG_RSP,
    }
    _fields_ = pt_regs_fields(UC_REGS, unfilled={"orig_ax": "di", "cs": "ip", "ss": "sp"})
    __slots__ = ()


GPRS = [n for n in PtRegs.UC_REGS if n not in ("ip", "flags")]


def is_canonical(addr: int) -> bool:
    """Bits 63..47 all equal (4-level paging: 48-bit virtual addresses)."""
    top = addr >> (CANONICAL_BITS - 1)
    return top in (0, (1 << (65 - CANONICAL_BITS)) - 1)


class X86Process(EmulatedProcess):
    """An x86-64 process: text, stack, and (once a probe needs it) the ``[uprobes]`` XOL page."""

    arch = "x86_64"
    uc_arch, uc_mode = UC_ARCH_X86, UC_MODE_64
    Regs = PtRegs
    PC, SP, RETVAL = X.UC_X86_REG_RIP, X.UC_X86_REG_RSP, X.UC_X86_REG_RAX
    STEPPER_REGS = ("ip", "sp", "ax", "cx", "r11", "flags")
    EXEC_IMPLIES_READ = True  # protection_map[VM_EXEC] is PAGE_READONLY_EXEC: [uprobes] reads fine
    TASK_STATE = ("utask", "_syscall_tf_ip", "_branch_start")

    def __init__(self, kernel=None, record: bool = False, count_insns: bool = False,
                 uretprobe_saves_regs: bool = True, compat_task: bool = False):
        super().__init__(kernel, record)
        self.arch_ops = X86ArchOps()
        # False selects the broken teaching trampoline that does not save rcx/r11 around syscall
        self.uretprobe_saves_regs = uretprobe_saves_regs
        # True: the kernel treats this as a 32-bit task, whose uretprobes return through an int3 on every
        # version (the code the lab runs stays 64-bit; see arch_uretprobe_trampoline)
        self.compat_task = compat_task
        self.count_insns = count_insns
        self.syscalls.update(syscalls.syscall_table(self.kernel))
        self.map("[stack]", STACK_TOP - STACK_SIZE, STACK_SIZE, "rw-p")
        self._syscall_tf_ip = None  # a syscall executed with TF set: where its (delayed) step trap is due
        self._branch_start = None  # Unicorn context as a kept instruction began (what a #GP in it restores)
        self._spare_context = None  # a context no thread holds, for the next kept start (``_keep_branch_start``)
        self.uc.reg_write(X.UC_X86_REG_RFLAGS, 0x2 | X86_EFLAGS_IF)  # user mode always runs with IF set
        self.uc.hook_add(UC_HOOK_INTR, self._on_interrupt)
        self.uc.hook_add(UC_HOOK_INSN, self._on_syscall, None, 1, 0, X.UC_X86_INS_SYSCALL)
        if count_insns:
            self.uc.hook_add(UC_HOOK_CODE, self._on_insn)

    def fork_options(self) -> dict:
        return {**super().fork_options(), "count_insns": self.count_insns,
                "uretprobe_saves_regs": self.uretprobe_saves_regs, "compat_task": self.compat_task}

    # --- hardware -> kernel entries ---
    def _on_insn(self, uc, address, size, user_data):
        self.trace.emit("user_insns", ip=address)

    def _on_interrupt(self, uc, intno, user_data):
        if intno == 3:
            traps.exc_int3(self)
            # a step begins: keep its start only for an instruction that sets ip itself (a branch; the
            # others get UPROBE_FIX_IP), the only kind that can jump to a non-canonical address
            uprobe = self.utask.active_uprobe
            branches = uprobe is not None and not self.signal and not uprobe.auprobe.fixups & UPROBE_FIX_IP
            if branches or self._branch_start is not None:  # most hits neither keep nor hold a start
                self._keep_branch_start(branches)
        elif intno == 1:
            if self.arch_fault():
                return
            if self._syscall_tf_ip is not None and self.pc == self._syscall_tf_ip:
                # syscall masks TF on entry (MSR_SYSCALL_MASK) and the exit restores it by iret, so the
                # step trap comes after the *next* instruction, not after the syscall (6.18 host)
                self._syscall_tf_ip = None
                return
            self._syscall_tf_ip = None
            traps.exc_debug(self)
        else:  # #DE, #UD, #GP...: a fault inside an XOL step is reported at the probed address
            self._keep_branch_start(False)
            pc = self.pc
            uprobe_abort_xol(self)
            self.force_sig("SIGSEGV", f"unexpected interrupt {intno} at pc={pc:#x}")

    def watch_insn(self, addr: int) -> None:
        """Keep the registers each time the instruction at ``addr`` starts, so that a branch from it
        to a non-canonical address faults as on Intel (see the module doc): one code hook on one
        address, no cost elsewhere."""
        def keep(uc, address, size, user_data):
            self._keep_branch_start(True)
        self.uc.hook_add(UC_HOOK_CODE, keep, None, addr, addr)

    def _keep_branch_start(self, keep: bool) -> None:
        """Keep the CPU's state as the instruction about to run begins (``keep``), or keep nothing. A context
        that is let go is the spare the next kept start is written into: a stepped branch keeps one on every
        hit, and saving into a new context costs four times updating one. A context is held by one thread at a
        time (a new thread holds none: ``new_task_state``)."""
        if self._branch_start is not None:
            self._spare_context = self._branch_start
        self._branch_start = None
        if keep:
            context, self._spare_context = self._spare_context, None
            if context is None:
                context = self.uc.context_save()
            else:
                self.uc.context_update(context)
            self._branch_start = context

    def arch_fault(self) -> bool:
        """Unicorn stopped at a non-canonical rip (a fetch fault, or the step trap before it): if the
        kept instruction branched there, make it Intel's #GP on that instruction and return True.

        The registers go back to the instruction's start (rip on it, rsp before any push; a call's
        stored return address stays in memory). In an out-of-line step the kernel's path for a trapped
        step follows: exc_general_protection sets trap_nr and force_sig(SIGSEGV), uprobe_deny_signal
        finds arch_uprobe_xol_was_trapped() and handle_singlestep() calls arch_uprobe_abort_xol()
        instead of the post-xol fixups (no return address fixup, no -ERESTART), ip = the probed
        address."""
        start = self._branch_start
        if start is None:
            return False
        self._keep_branch_start(False)  # start is the spare now: read below before anything keeps again
        target = self.pc
        if is_canonical(target):
            return False
        regs = self.kernel_entry()
        kept = {name: start.reg_read(uc_reg) for name, uc_reg in PtRegs.UC_REGS.items()}
        if any(regs.get(name) != kept[name] for name in GPRS if name != "sp"):
            return False  # a later instruction branched there
        for name, value in kept.items():
            regs.set(name, value)
        regs.flush()
        uprobe_abort_xol(self)
        self.force_sig("SIGSEGV", f"general protection fault: branch to non-canonical {target:#x} "
                                  f"at {kept['ip']:#x}")
        return True

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
        self._keep_branch_start(False)

    def new_task_state(self) -> dict:
        return {**super().new_task_state(), "_branch_start": None}  # a kept start's context is one thread's own

    # --- conveniences for notebooks and tests ---
    def prepare_call(self, target, *args: int, stack_top: int | None = None) -> tuple[int, int]:
        """Set up a System V call of ``target`` (arguments in rdi, rsi, ...) returning to EXIT_ADDR."""
        self.check_call_args(args, 6)
        addr = self.call_address(target)
        regs = self.regs()
        for name, value in zip(("di", "si", "dx", "cx", "r8", "r9"), args):
            regs.set(name, value)
        sp = ((stack_top or STACK_TOP) - 0x100) & ~0xF
        regs.set("sp", sp - 8)
        regs.flush()
        self.write_u64(sp - 8, EXIT_ADDR)
        return addr, EXIT_ADDR
