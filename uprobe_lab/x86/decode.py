"""Instruction analysis for x86-64 uprobes: twin of the decode half of arch/x86/kernel/uprobes.c.

``arch_uprobe_analyze_insn`` decides, as the kernel does, whether a probe on these bytes is
emulated (branches, pushes, nops), single-stepped out of line (with which fixups) or refused, and
fills struct arch_uprobe (``ArchUprobe``). Capstone stands in for the kernel's instruction decoder
(``insn_decode``).

What the lab leaves out: 32-bit and compat tasks, and rewriting RIP-relative operands for XOL (the
kernel borrows a scratch register; the lab refuses such a probe with an error that says so). Also
the kernel's reading of VEX instructions in branch_setup_xol_ops: its decoder takes the byte after a
VEX prefix as the opcode, so by the code a VEX instruction whose opcode byte is 0x70-0x7f or 0x90
would be taken for a jcc or a nop and emulated; not checked on a live kernel, so the lab steps
every VEX instruction out of line.

The nop10 site of the development-tree red-zone scheme (``kernel.nop10_redzone``, never released)
has its own analysis path here, ``nop10_analyze_insn``; its optimisation is in x86.optimize.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import capstone
from capstone import x86_const as CX

from ..constants import MASK64, PAGE_SIZE
from ..kernel import KernelVersion
from ..uprobes import UnprobeableInstruction
from . import asm
from .constants import MAX_UINSN_BYTES

UPROBE_FIX_IP = 0x01
UPROBE_FIX_CALL = 0x02
UPROBE_FIX_SETF = 0x04

ARCH_UPROBE_FLAG_CAN_OPTIMIZE = "can_optimize"
ARCH_UPROBE_FLAG_OPTIMIZE_FAIL = "optimize_fail"
ARCH_UPROBE_FLAG_NOP10 = "nop10_site"  # dev-tree red-zone scheme
NOP10_OPT_INSN_SIZE = 10


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


X86_64_DISASM = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
X86_64_DISASM.detail = True


def insn_decode(raw: bytes, vaddr: int = 0) -> Insn:
    """Decode one instruction (the kernel's insn_decode); UnprobeableInstruction if it is not one."""
    insns = list(X86_64_DISASM.disasm(bytes(raw[:MAX_UINSN_BYTES]), vaddr, 1))
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
    if kernel.nop10_redzone and is_nop10_site(raw):  # dev-tree scheme only: its own path for nop10 sites
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



# --- the development-tree nop10 scheme (not released) ----------------------------------------

def is_nop10_site(raw: bytes) -> bool:
    """``66 2e 0f 1f 84 <sib> <disp32>``: a 10-byte nopw with a CS prefix, the dev-tree USDT site.

    The SIB byte and disp32 may be anything: after an unoptimize they hold the old ``call``.
    """
    return len(raw) >= 10 and raw[:5] == asm.NOP10[:5]


def nop10_analyze_insn(raw: bytes, vaddr: int, kernel: KernelVersion) -> ArchUprobe:
    """The dev-tree scheme's own analysis path for a nop10 site (released 6.18 refuses the CS prefix).

    The probe is emulated as a 10-byte nop on the int3 path and may be optimised if it does not
    cross a page.
    """
    insn = insn_decode(raw[:10], vaddr)
    auprobe = ArchUprobe(insn.raw, insn.raw, insn, vaddr, "branch", "")
    auprobe.branch_opc1, auprobe.branch_offs = 0x0F, 0  # a jump of 0: ip += 10
    auprobe.reason = "nop10 site (dev-tree red-zone scheme): emulated as a nop, optimisable to lea+call"
    auprobe.flags.add(ARCH_UPROBE_FLAG_NOP10)
    if PAGE_SIZE - (vaddr & (PAGE_SIZE - 1)) >= NOP10_OPT_INSN_SIZE:
        auprobe.flags.add(ARCH_UPROBE_FLAG_CAN_OPTIMIZE)
    return auprobe
