"""The x86-64 half of uprobes: twin of arch/x86/kernel/uprobes.c.

Instruction analysis (emulate / single-step out of line / reject), the emulators for nops,
branches and pushes, XOL fixups, the return-address hijack, both uretprobe trampolines and
``sys_uretprobe``, and the trap entries that lead into the generic core. The nop5 optimisation
(6.18) lives in uprobe_lab.x86.optimize.

What the lab leaves out: 32-bit and compat tasks, shadow stacks, seccomp, and rewriting
RIP-relative operands for XOL (the kernel borrows a scratch register; the lab refuses such a
probe with an error that says so). Also: abort_xol / xol_was_trapped (a fault inside the XOL step
kills the process at the slot address instead of restarting at the probe), arch_uprobe_ignore,
the "mangled call" fallback of a call whose emulated push fails, and the kernel's reading of VEX
instructions in branch_setup_xol_ops: its decoder takes the byte after a VEX prefix as the opcode,
so by the code a VEX instruction whose opcode byte is 0x70-0x7f or 0x90 would be taken for a jcc
or a nop and emulated; not checked on a live kernel, so the lab steps every VEX instruction out of
line. Capstone stands in for the kernel's instruction decoder.

sys_uretprobe is the merged, hardened form (fa6192adc32f, March 2025, backported to stable) on
every version; released 6.11 did not yet refuse a call when no [uprobes] page exists.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import capstone
from capstone import x86_const as CX

from .. import uprobes as core
from ..kernel import __NR_getpgid, __NR_uprobe, __NR_uretprobe, KernelVersion, get_kernel
from ..process import MASK64
from ..uprobes import UnprobeableInstruction
from . import asm

UPROBE_SWBP_INSN = 0xCC
UPROBE_SWBP_INSN_SIZE = 1
UPROBE_XOL_SLOT_BYTES = 128
MAX_UINSN_BYTES = 16
X86_EFLAGS_TF = 0x100
X86_EFLAGS_RF = 0x10000
ENOSYS = 38

UPROBE_FIX_IP = 0x01
UPROBE_FIX_CALL = 0x02
UPROBE_FIX_SETF = 0x04

ARCH_UPROBE_FLAG_CAN_OPTIMIZE = "can_optimize"
ARCH_UPROBE_FLAG_OPTIMIZE_FAIL = "optimize_fail"


def _bitmap(rows: str) -> set[int]:
    bits = "".join(rows.split())
    return {i for i, b in enumerate(bits) if b == "1"}


# good_insns_64, one row of 16 opcodes per line (0 = refused).
GOOD_INSNS_64 = _bitmap("""
1111110011111101 1111110011111100 1111111011111110 1111111011111110
1111111111111111 1111111111111111 0001111111110000 1111111111111111
1101111111111111 1111111111011111 1111111111111111 1111111111111111
1111111111110000 1111000111111111 1111000011010000 1011011111001111""")
# The kernel also has good_2byte_insns, but for a 64-bit task it is never consulted: bit 0x0f is set in
# good_insns_64, so uprobe_init_insn() accepts every two-byte opcode (0f xx) on its first test. Checked on
# a 6.18 host: uprobes attach to syscall (0f 05) and ud2 (0f 0b) and refuse int3, hlt and EVEX (62 ...).


LEGACY_PREFIXES = {0xF0, 0xF2, 0xF3, 0x2E, 0x36, 0x3E, 0x26, 0x64, 0x65, 0x66, 0x67}
BAD_PREFIXES = {0x26: "ES segment", 0x2E: "CS segment", 0x36: "SS segment", 0x3E: "DS segment", 0xF0: "lock"}

PUSH_REGS = ["ax", "cx", "dx", "bx", "sp", "bp", "si", "di"]
PUSH_REGS_REX_B = ["r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15"]

# Conditional jumps by short opcode: the flags test the kernel's CASE_COND evaluates.
CF, PF, ZF, SF, OF = 0x1, 0x4, 0x40, 0x80, 0x800


def _flag(flags: int, bit: int) -> bool:
    return bool(flags & bit)


JCC_TAKEN = {
    0x70: lambda f: _flag(f, OF), 0x72: lambda f: _flag(f, CF), 0x74: lambda f: _flag(f, ZF),
    0x78: lambda f: _flag(f, SF), 0x7A: lambda f: _flag(f, PF),
    0x76: lambda f: _flag(f, CF) or _flag(f, ZF),
    0x7C: lambda f: _flag(f, SF) != _flag(f, OF),
    0x7E: lambda f: _flag(f, ZF) or _flag(f, SF) != _flag(f, OF),
}
for _op in list(JCC_TAKEN):
    JCC_TAKEN[_op + 1] = (lambda t: lambda f: not t(f))(JCC_TAKEN[_op])


@dataclass
class Insn:
    """The decoded probed instruction (the fields of the kernel's struct insn that uprobes use)."""

    raw: bytes
    length: int
    mnemonic: str
    op_str: str
    prefixes: bytes
    rex: int
    vex: bool
    opcode: bytes
    modrm: int | None
    rip_relative: bool
    target: int | None  # branch target for relative branches


_CS = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
_CS.detail = True


def insn_decode(raw: bytes, vaddr: int = 0) -> Insn:
    """Decode one instruction (the kernel's insn_decode); UnprobeableInstruction if it is not one."""
    insns = list(_CS.disasm(bytes(raw[:MAX_UINSN_BYTES]), vaddr, 1))
    if not insns:
        raise UnprobeableInstruction(f"{bytes(raw[:8]).hex(' ')}... does not decode as an x86-64 instruction (-ENOEXEC)")
    ci = insns[0]
    code = bytes(ci.bytes)
    i = 0
    while i < len(code) and code[i] in LEGACY_PREFIXES:
        i += 1
    prefixes = code[:i]
    rex = 0
    if i < len(code) and 0x40 <= code[i] <= 0x4F:
        rex = code[i]
        i += 1
    vex = code[i] in (0xC4, 0xC5)
    if vex:  # the kernel decoder takes the byte after the VEX prefix as a one-byte opcode
        i += 3 if code[i] == 0xC4 else 2
        opcode = code[i : i + 1]
    elif code[i] == 0x0F:
        opcode = code[i : i + (3 if code[i + 1] in (0x38, 0x3A) else 2)]
    else:
        opcode = code[i : i + 1]
    end = i + len(opcode)
    modrm = code[end] if end < len(code) else None
    rip_relative = any(op.type == CX.X86_OP_MEM and op.mem.base == CX.X86_REG_RIP for op in ci.operands)
    target = None
    if ci.group(CX.X86_GRP_JUMP) or ci.group(CX.X86_GRP_CALL):
        if ci.operands and ci.operands[0].type == CX.X86_OP_IMM:
            target = ci.operands[0].imm & MASK64
    return Insn(code, ci.size, ci.mnemonic, ci.op_str, prefixes, rex, vex, opcode, modrm, rip_relative, target)


@dataclass
class ArchUprobe:
    """struct arch_uprobe: the original bytes, the copy for XOL, and how the kernel will run them."""

    insn: bytes
    ixol: bytes
    decoded: Insn
    vaddr: int
    ops: str  # "branch" (emulated), "push" (emulated) or "default" (single-stepped out of line)
    reason: str
    branch_opc1: int = 0
    branch_offs: int = 0
    push_reg: str = ""
    fixups: int = 0
    flags: set = field(default_factory=set)

    @property
    def action(self) -> str:
        return "xol" if self.ops == "default" else "emulate"

    @property
    def length(self) -> int:
        return self.decoded.length

    def describe(self) -> str:
        return f"{self.decoded.mnemonic} {self.decoded.op_str}".strip() + f" [{self.action}]"


def uprobe_init_insn(insn: Insn) -> None:
    """Refuse bad prefixes, exception-masking moves and opcodes outside the good-insn tables."""
    for p in insn.prefixes:
        if p in BAD_PREFIXES:
            raise UnprobeableInstruction(
                f"{insn.mnemonic} {insn.op_str}: the {BAD_PREFIXES[p]} prefix ({p:#04x}) is refused by "
                "is_prefix_bad() (-ENOTSUPP); probe another instruction")
    op1 = insn.opcode[0]
    if not insn.vex and (op1 == 0x17 or (op1 == 0x8E and insn.modrm is not None and (insn.modrm >> 3) & 7 == 2)):
        raise UnprobeableInstruction(f"{insn.mnemonic} {insn.op_str}: a move to %ss masks exceptions for one "
                                     "instruction, so it cannot be single-stepped (insn_masking_exception)")
    if op1 in GOOD_INSNS_64:
        return
    raise UnprobeableInstruction(
        f"{insn.mnemonic} {insn.op_str}".strip() + f" (opcode {insn.opcode.hex(' ')}) is not in the kernel's good_insns "
        "table: uprobes cannot probe it (int3/int N/iret/hlt/cli/sti/in/out...); "
        "pick a neighbouring instruction")


def branch_setup_xol_ops(auprobe: ArchUprobe, insn: Insn, kernel: KernelVersion) -> bool:
    opc1 = insn.opcode[0]
    if kernel.emulate_all_nops and insn.length <= asm.ASM_NOP_MAX and insn.raw == asm.X86_NOPS[insn.length]:
        auprobe.ops, auprobe.branch_opc1, auprobe.branch_offs = "branch", opc1, 0
        since = "" if insn.opcode == b"\x90" else " (since 6.16; single-stepped before)"
        auprobe.reason = f"a standard nop, x86_nops[{insn.length}]: emulated as a jump of 0{since}"
        return True
    if insn.vex:
        return False
    if opc1 == 0x90:
        auprobe.ops, auprobe.branch_opc1, auprobe.branch_offs = "branch", opc1, 0
        auprobe.reason = "prefix* + 0x90: emulated as a nop"
        return True
    if opc1 in (0xEB, 0xE9):
        what = "jmp: emulated (ip += offset)"
    elif opc1 == 0xE8:
        what = "call rel32: emulated (push the return address, ip += offset)"
    elif opc1 == 0x0F and len(insn.opcode) == 2 and insn.opcode[1] - 0x10 in JCC_TAKEN:
        opc1 = insn.opcode[1] - 0x10  # jcc near checks the same condition as jcc short
        what = "jcc near: emulated (flags decide)"
    elif opc1 in JCC_TAKEN:
        what = "jcc short: emulated (flags decide)"
    else:
        return False
    if 0x66 in insn.prefixes:
        raise UnprobeableInstruction(f"{insn.mnemonic} {insn.op_str}: branches with a 0x66 operand-size prefix "
                                     "are refused (-ENOTSUPP): Intel and AMD disagree on them")
    auprobe.ops, auprobe.branch_opc1 = "branch", opc1
    auprobe.branch_offs = insn.target - (auprobe.vaddr + insn.length)
    auprobe.reason = what
    return True


def push_setup_xol_ops(auprobe: ArchUprobe, insn: Insn) -> bool:
    opc1 = insn.opcode[0]
    if insn.vex or not 0x50 <= opc1 <= 0x57 or insn.length > 2:
        return False
    if insn.length == 2:
        if insn.rex != 0x41 or insn.prefixes:  # only REX.B: push %r8..%r15
            return False
        auprobe.push_reg = PUSH_REGS_REX_B[opc1 - 0x50]
    else:
        auprobe.push_reg = PUSH_REGS[opc1 - 0x50]
    auprobe.ops = "push"
    auprobe.reason = f"push %{insn.op_str}: emulated (store on the user stack, sp -= 8)"
    return True


def arch_uprobe_analyze_insn(raw: bytes, vaddr: int, kernel: KernelVersion) -> ArchUprobe:
    """Decide, as the kernel does, how a probe on these bytes will run: emulate, xol, or refuse."""
    if kernel.nop10_redzone:  # dev-tree scheme only: its own path for nop10 sites
        from .optimize import is_nop10_site, nop10_analyze_insn
        if is_nop10_site(raw):
            return nop10_analyze_insn(raw, vaddr, kernel)
    insn = insn_decode(raw, vaddr)
    uprobe_init_insn(insn)
    # ixol is what the kernel copies into an XOL slot: all MAX_UINSN_BYTES it read from the file
    auprobe = ArchUprobe(insn.raw, bytes(raw[:MAX_UINSN_BYTES]), insn, vaddr, "default", "")
    if can_optimize(insn, vaddr):
        auprobe.flags.add(ARCH_UPROBE_FLAG_CAN_OPTIMIZE)
    if branch_setup_xol_ops(auprobe, insn, kernel) or push_setup_xol_ops(auprobe, insn):
        return auprobe
    fix = UPROBE_FIX_IP
    op1 = insn.opcode[0] if not insn.vex else None
    if op1 == 0x9D:
        auprobe.fixups |= UPROBE_FIX_SETF
    if op1 in (0xC3, 0xCB, 0xC2, 0xCA, 0xEA):
        fix = 0  # ret/lret/jmp absolute: ip is already right
    elif op1 == 0x9A:
        fix = UPROBE_FIX_CALL
    elif op1 == 0xFF and insn.modrm is not None:
        reg = (insn.modrm >> 3) & 7
        if reg in (2, 3):
            fix = UPROBE_FIX_CALL
        elif reg in (4, 5):
            fix = 0
    if insn.rip_relative:
        raise UnprobeableInstruction(
            f"{insn.mnemonic} {insn.op_str} addresses memory relative to rip. The kernel single-steps it "
            "after rewriting the operand to use a scratch register (riprel_analyze); the lab does not model "
            "that rewrite - probe a neighbouring instruction")
    auprobe.fixups |= fix
    auprobe.reason = {UPROBE_FIX_IP: "single-stepped out of line, then ip += vaddr - xol_vaddr",
                      UPROBE_FIX_CALL: "single-stepped out of line, then the pushed return address is fixed",
                      0: "single-stepped out of line; it sets ip itself (ret/jmp)"}[fix]
    return auprobe


def can_optimize(insn: Insn, vaddr: int) -> bool:
    """A 5-byte nop (0x90 with prefixes, or NOPL 0f 1f /0) that does not cross a page (6.18)."""
    if insn.length != 5 or insn.vex:
        return False
    is_nop = insn.opcode == b"\x90"
    is_nopl = insn.opcode == b"\x0f\x1f" and insn.modrm is not None and (insn.modrm >> 3) & 7 == 0
    return (is_nop or is_nopl) and 0x1000 - (vaddr & 0xFFF) >= 5


# --- breakpoints in text ------------------------------------------------------------------

def set_swbp(proc, auprobe: ArchUprobe, vaddr: int) -> None:
    """Write int3 over the first byte (uprobe_write_opcode); keep an already optimised site."""
    from .optimize import is_optimized
    if ARCH_UPROBE_FLAG_CAN_OPTIMIZE in auprobe.flags and is_optimized(proc, vaddr):
        return
    proc.write(vaddr, bytes([UPROBE_SWBP_INSN]))
    proc.trace.emit("text_patches", ip=vaddr, note="int3")


def set_orig_insn(proc, auprobe: ArchUprobe, vaddr: int) -> None:
    from . import optimize
    if ARCH_UPROBE_FLAG_CAN_OPTIMIZE in auprobe.flags and optimize.is_optimized(proc, vaddr):
        optimize.swbp_unoptimize(proc, auprobe, vaddr)
        return
    proc.write(vaddr, auprobe.insn[:1])
    proc.trace.emit("text_patches", ip=vaddr, note="original first byte")


def is_swbp_at(proc, vaddr: int) -> bool:
    return proc.read(vaddr, 1)[0] == UPROBE_SWBP_INSN


def uprobe_get_swbp_addr(regs) -> int:
    return regs.ip - UPROBE_SWBP_INSN_SIZE


def arch_uprobe_optimize(proc, auprobe: ArchUprobe, vaddr: int) -> None:
    if proc.kernel.optimize_nop5 and ARCH_UPROBE_FLAG_CAN_OPTIMIZE in auprobe.flags:
        from .optimize import arch_uprobe_optimize as optimize
        optimize(proc, auprobe, vaddr)


# --- emulation ----------------------------------------------------------------------------

def emulate_push_stack(proc, regs, value: int) -> bool:
    new_sp = regs.sp - 8
    if not proc.copy_to_user(new_sp, value.to_bytes(8, "little")):
        return False
    regs.sp = new_sp
    return True


def branch_emulate_op(proc, auprobe: ArchUprobe, regs) -> bool:
    new_ip = regs.ip + auprobe.length
    offs = auprobe.branch_offs
    if auprobe.branch_opc1 == 0xE8:
        if not emulate_push_stack(proc, regs, new_ip):
            return False
    elif auprobe.branch_opc1 in JCC_TAKEN and not JCC_TAKEN[auprobe.branch_opc1](regs.flags):
        offs = 0
    regs.ip = (new_ip + offs) & MASK64
    return True


def push_emulate_op(proc, auprobe: ArchUprobe, regs) -> bool:
    if not emulate_push_stack(proc, regs, regs.get(auprobe.push_reg)):
        return False
    regs.ip = regs.ip + auprobe.length
    return True


EMULATE = {"branch": branch_emulate_op, "push": push_emulate_op}


def arch_uprobe_skip_sstep(proc, auprobe: ArchUprobe, regs) -> bool:
    emulate = EMULATE.get(auprobe.ops)
    if emulate is None or not emulate(proc, auprobe, regs):
        return False
    if regs.flags & X86_EFLAGS_TF:
        proc.force_sig("SIGTRAP", "emulated a probed instruction while the trap flag was set")
    return True


# --- single-stepping out of line ----------------------------------------------------------

def arch_uprobe_pre_xol(proc, auprobe: ArchUprobe, regs) -> None:
    utask = proc.utask
    regs.ip = utask.xol_vaddr
    utask.saved_tf = bool(regs.flags & X86_EFLAGS_TF)
    regs.flags = regs.flags | X86_EFLAGS_TF


def arch_uprobe_post_xol(proc, auprobe: ArchUprobe, regs) -> int:
    """Fix up after the out-of-line step (default_post_xol_op), then settle the trap flag.

    A program that was itself single-stepping (TF set before the probe) gets the SIGTRAP its step
    owed it; a stepped popf keeps the TF it may have loaded (UPROBE_FIX_SETF)."""
    utask = proc.utask
    send_sigtrap = utask.saved_tf
    if auprobe.fixups & UPROBE_FIX_IP:
        regs.ip = regs.ip + utask.vaddr - utask.xol_vaddr
    elif auprobe.fixups & UPROBE_FIX_CALL:
        regs.sp = regs.sp + 8  # pop the return address the XOL copy pushed...
        if not emulate_push_stack(proc, regs, utask.vaddr + auprobe.length):  # ...push the real one
            regs.ip = utask.vaddr  # -ERESTART: run the probed call again
            send_sigtrap = False
    if auprobe.fixups & UPROBE_FIX_SETF:
        utask.saved_tf = True
    if send_sigtrap:
        proc.force_sig("SIGTRAP", f"the program was single-stepping through the probed insn at {utask.vaddr:#x}")
    if not utask.saved_tf:
        regs.flags = regs.flags & ~X86_EFLAGS_TF
    return 0


# --- return probes ------------------------------------------------------------------------

def arch_uretprobe_hijack_return_addr(proc, trampoline_vaddr: int, regs) -> int:
    """Swap the return address at [sp] for the trampoline; return the original (or -1)."""
    raw = proc.copy_from_user(regs.sp, 8)
    if raw is None:
        return -1
    orig = int.from_bytes(raw, "little")
    if orig == trampoline_vaddr:
        return orig
    if not proc.copy_to_user(regs.sp, trampoline_vaddr.to_bytes(8, "little")):
        proc.force_sig("SIGSEGV", f"return address clobbered: %sp={regs.sp:#x}, %ip={regs.ip:#x}")
        return -1
    return orig


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
    """Offset of the label right after ``syscall``: the only rip sys_uretprobe accepts."""
    return len(uretprobe_trampoline(_NO_SLS, save_regs).split(asm.SYSCALL)[0]) + len(asm.SYSCALL)


def arch_uretprobe_trampoline(proc) -> bytes:
    """Slot 0 of the XOL area: one int3 before 6.11, the syscall trampoline after."""
    if not proc.kernel.uretprobe_syscall:
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
    if tramp == core.UPROBE_NO_TRAMPOLINE_VADDR or regs.ip != tramp + uretprobe_syscall_check_offset(proc.uretprobe_saves_regs):
        proc.force_sig("SIGILL", f"sys_uretprobe called from {regs.ip:#x}, not from the [uprobes] trampoline")
        return -1
    names = uretprobe_syscall_args(proc.uretprobe_saves_regs)
    size = 8 * len(names)
    raw = proc.copy_from_user(regs.sp, size)
    if raw is None:
        proc.force_sig("SIGILL", "sys_uretprobe could not read the saved registers")
        return -1
    # expose the "right" values of r11/cx/ax/sp to the consumers
    for i, name in enumerate(names):
        regs.set(name, int.from_bytes(raw[8 * i : 8 * i + 8], "little"))
    regs.sp = regs.sp + size
    ip, sp = regs.ip, regs.sp
    core.uprobe_handle_trampoline(proc, regs)
    if proc.signal:
        return -1
    if regs.sp != sp:  # a consumer moved sp: nothing to do but return via iret
        return regs.ax
    regs.sp = regs.sp - size
    # ax's slot carries the real return address to the trampoline's ret; r11/cx as the consumers left them
    values = {name: regs.get(name) for name in names}
    values["ax"] = regs.ip
    args = b"".join(values[name].to_bytes(8, "little") for name in names)
    regs.ip = ip
    if not proc.copy_to_user(regs.sp, args):
        proc.force_sig("SIGILL", "sys_uretprobe could not write the stack")
        return -1
    regs.r11 = regs.flags  # ensure sysret, see do_syscall_64()
    regs.cx = regs.ip
    return regs.ax


# --- kernel entries -----------------------------------------------------------------------

def sys_getpgid(proc, regs) -> int:
    return 1


def syscall_table(kernel: KernelVersion) -> dict:
    table = {__NR_getpgid: sys_getpgid}
    if kernel.uretprobe_syscall:
        table[__NR_uretprobe] = sys_uretprobe
    if kernel.optimize_nop5:
        from . import optimize
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


def exc_int3(proc) -> None:
    """#BP from user mode: uprobes claim it (uprobe_pre_sstep_notifier) or the task gets SIGTRAP."""
    proc.trace.emit("exceptions")
    regs = proc.kernel_entry()
    proc.trace.emit("exc_bp", ip=regs.ip - 1)
    if not core.uprobe_pre_sstep_notifier(proc):
        proc.force_sig("SIGTRAP", f"int3 at {regs.ip - 1:#x} and no uprobes in this process")
        return
    core.handle_swbp(proc, regs)  # uprobe_notify_resume(), on the way back to user mode
    regs.flush()  # the registers the kernel set are in place even when a signal follows
    if not proc.signal:
        proc.trace.emit("iret", ip=regs.ip)


def exc_debug(proc) -> None:
    """#DB after a single-step: finish an XOL step, or a plain SIGTRAP."""
    proc.trace.emit("exceptions")
    regs = proc.kernel_entry()
    proc.trace.emit("exc_db", ip=regs.ip)
    if not core.uprobe_post_sstep_notifier(proc):
        proc.force_sig("SIGTRAP", f"single-step trap at {regs.ip:#x}")
        return
    core.handle_singlestep(proc, regs)
    regs.flush()
    if not proc.signal:
        proc.trace.emit("iret", ip=regs.ip)


_NO_SLS = KernelVersion("no-sls", True, False, False, False)


def analyze_hex(hexbytes: str, kernel: KernelVersion, vaddr: int = 0x400000, **_options) -> dict:
    """What the kernel would do with a probe on these bytes (memory order): for the CLI and notebooks."""
    try:
        raw = bytes.fromhex(hexbytes.replace(" ", ""))
    except ValueError:
        raise core.LabError(f"{hexbytes!r} is not hex bytes; write them in memory order, e.g. 0f1f440000") from None
    if not raw:
        raise core.LabError("no bytes given; write an instruction in memory order, e.g. 0f1f440000")
    try:
        auprobe = arch_uprobe_analyze_insn(raw, vaddr, kernel)
    except UnprobeableInstruction as err:
        decoded = list(_CS.disasm(raw, vaddr, 1))
        first = decoded[0] if decoded else None
        return {"mnemonic": first.mnemonic if first else None, "op_str": first.op_str if first else None,
                "length": first.size if first else None, "action": "reject", "reason": str(err)}
    d = auprobe.decoded
    if d.length < len(raw):
        raise core.LabError(f"{raw.hex()} holds more than one instruction: the first is {d.length} bytes "
                            f"({d.mnemonic} {d.op_str}); pass one instruction")
    return {"mnemonic": d.mnemonic, "op_str": d.op_str, "length": d.length, "action": auprobe.action,
            "reason": auprobe.reason}


def analyze_table(hexes, kernel=None):
    """``analyze_hex`` of several instructions as a pandas DataFrame, one row each with the whole reason.

    ``hexes`` are hex bytes in memory order (spaces allowed); ``kernel`` a version or its name (None:
    the default). The ``bytes`` column shows each instruction's bytes space-separated."""
    import pandas as pd

    version = get_kernel(kernel)
    rows = []
    for hexbytes in hexes:
        r = analyze_hex(hexbytes, version)
        rows.append({"bytes": bytes.fromhex(hexbytes.replace(" ", "")).hex(" "), **r})
    return pd.DataFrame(rows, columns=["bytes", "mnemonic", "op_str", "length", "action", "reason"])
