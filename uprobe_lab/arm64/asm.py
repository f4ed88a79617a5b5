"""Hand encodings of the AArch64 instructions the lab's programs and tests need.

Every function returns the 32-bit instruction word as an int (what a listing prints, e.g.
``a9bf7bfd``); ``b(word)`` turns it into the 4 little-endian bytes that sit in memory.
tests/test_arm64_asm.py checks each encoder against Capstone. Branches to labels go through
``Assembler`` fixups (``bl_to``, ``bcond_to``...).
"""
from __future__ import annotations

import struct

from ..program import Assembler

SP = ZR = 31  # register number 31 is sp or xzr, depending on the instruction
FP, LR = 29, 30

NOP = 0xD503201F
RET = 0xD65F03C0  # ret (x30)
UPROBES_BRK_IMM = 0x005
AARCH64_BREAK_MON = 0xD4200000
BRK64_OPCODE_UPROBES = AARCH64_BREAK_MON | (UPROBES_BRK_IMM << 5)  # 0xd42000a0, brk #0x5

COND = {"eq": 0, "ne": 1, "cs": 2, "hs": 2, "cc": 3, "lo": 3, "mi": 4, "pl": 5, "vs": 6, "vc": 7,
        "hi": 8, "ls": 9, "ge": 10, "lt": 11, "gt": 12, "le": 13, "al": 14}


def b(word: int) -> bytes:
    """The instruction word as it sits in memory (little endian)."""
    return struct.pack("<I", word & 0xFFFFFFFF)


def reg_number(r: int) -> int:
    """``r``, once checked to be a register number an encoding's 5-bit field holds."""
    if not 0 <= r <= 31:
        raise ValueError(f"register number {r} is not 0..31")
    return r


def brk(imm: int) -> int:
    return AARCH64_BREAK_MON | ((imm & 0xFFFF) << 5)


def svc(imm: int = 0) -> int:
    return 0xD4000001 | ((imm & 0xFFFF) << 5)


def ret(rn: int = LR) -> int:
    return 0xD65F0000 | (reg_number(rn) << 5)


def br(rn: int) -> int:
    return 0xD61F0000 | (reg_number(rn) << 5)


def blr(rn: int) -> int:
    return 0xD63F0000 | (reg_number(rn) << 5)


# Load/store pair. Variants: "pre" ([rn, #imm]!), "post" ([rn], #imm), "offset" ([rn, #imm]).
_PAIR_BASE = {"post": 0x28800000, "offset": 0x29000000, "pre": 0x29800000}


def stp(rt: int, rt2: int, rn: int, imm: int, mode: str = "pre", x: bool = True, load: bool = False) -> int:
    """stp/ldp of x (x=True, imm a multiple of 8) or w registers (imm a multiple of 4)."""
    scale = 8 if x else 4
    if imm % scale or not -64 <= imm // scale <= 63:
        raise ValueError(f"pair offset {imm} must be a multiple of {scale} in [{-64 * scale}, {63 * scale}]")
    word = _PAIR_BASE[mode] | ((2 if x else 0) << 30) | (0x00400000 if load else 0)
    return word | (((imm // scale) & 0x7F) << 15) | (reg_number(rt2) << 10) | (reg_number(rn) << 5) | reg_number(rt)


def ldp(rt: int, rt2: int, rn: int, imm: int, mode: str = "post", x: bool = True) -> int:
    return stp(rt, rt2, rn, imm, mode, x, load=True)


def add_imm(rd: int, rn: int, imm: int) -> int:
    """add xd, xn, #imm (64-bit); ``add x29, sp, #0`` is ``mov x29, sp``."""
    return 0x91000000 | ((imm & 0xFFF) << 10) | (reg_number(rn) << 5) | reg_number(rd)


def mov_sp(rd: int, rn: int) -> int:
    return add_imm(rd, rn, 0)


def subs_imm(rd: int, rn: int, imm: int) -> int:
    return 0xF1000000 | ((imm & 0xFFF) << 10) | (reg_number(rn) << 5) | reg_number(rd)


def mov_reg(rd: int, rm: int) -> int:
    """mov xd, xm (orr xd, xzr, xm)."""
    return 0xAA0003E0 | (reg_number(rm) << 16) | reg_number(rd)


def movz(rd: int, imm16: int, x: bool = True, shift: int = 0) -> int:
    """movz xd/wd, #imm16, lsl #shift (shift 0, 16, 32 or 48)."""
    return (0xD2800000 if x else 0x52800000) | ((shift // 16) << 21) | ((imm16 & 0xFFFF) << 5) | reg_number(rd)


def b_imm(offset: int, link: bool = False) -> int:
    return (0x94000000 if link else 0x14000000) | ((offset >> 2) & 0x3FFFFFF)


def bcond(cond: str, offset: int) -> int:
    return 0x54000000 | (((offset >> 2) & 0x7FFFF) << 5) | COND[cond]


def cbz(rt: int, offset: int, nonzero: bool = False, x: bool = True) -> int:
    return (0x35000000 if nonzero else 0x34000000) | (0x80000000 if x else 0) \
        | (((offset >> 2) & 0x7FFFF) << 5) | reg_number(rt)


def tbz(rt: int, bit: int, offset: int, nonzero: bool = False) -> int:
    return (0x37000000 if nonzero else 0x36000000) | ((bit >> 5) << 31) | ((bit & 0x1F) << 19) \
        | (((offset >> 2) & 0x3FFF) << 5) | reg_number(rt)


def adr(rd: int, offset: int, page: bool = False) -> int:
    imm = (offset >> 12) if page else offset
    return (0x90000000 if page else 0x10000000) | ((imm & 3) << 29) | (((imm >> 2) & 0x7FFFF) << 5) | reg_number(rd)


def ldr_lit(rt: int, offset: int) -> int:
    return 0x58000000 | (((offset >> 2) & 0x7FFFF) << 5) | reg_number(rt)


def unsigned_offset(base: int, scale: int, rt: int, rn: int, imm: int) -> int:
    """A load/store with an unsigned scaled 12-bit offset, [xn, #imm]; ``base`` names width and direction."""
    if imm % scale or not 0 <= imm // scale < 4096:
        raise ValueError(f"offset {imm} must be a multiple of {scale} in [0, {4095 * scale}]")
    return base | ((imm // scale) << 10) | (reg_number(rn) << 5) | reg_number(rt)


def str_imm(rt: int, rn: int, imm: int = 0) -> int:
    """str xt, [xn, #imm] (unsigned offset, imm a multiple of 8)."""
    return unsigned_offset(0xF9000000, 8, rt, rn, imm)


def ldr_imm(rt: int, rn: int, imm: int = 0) -> int:
    return unsigned_offset(0xF9400000, 8, rt, rn, imm)


def add_reg(rd: int, rn: int, rm: int) -> int:
    return 0x8B000000 | (reg_number(rm) << 16) | (reg_number(rn) << 5) | reg_number(rd)


def eor_reg(rd: int, rn: int, rm: int) -> int:
    return 0xCA000000 | (reg_number(rm) << 16) | (reg_number(rn) << 5) | reg_number(rd)


def cmp_imm(rn: int, imm: int) -> int:
    return subs_imm(ZR, rn, imm)


# --- label branches: the Assembler patches the offset once the label is known -------------

def _patch(encode):
    def patch(buf: bytearray, start: int, addr: int, target: int) -> None:
        old = struct.unpack_from("<I", buf, start)[0]
        struct.pack_into("<I", buf, start, encode(old, target - addr))
    return patch


def emit(a: Assembler, *ws: int) -> None:
    for w in ws:
        a.emit(b(w))


def bl_to(a: Assembler, label: str, link: bool = True) -> None:
    a.emit(b(b_imm(0, link)))
    a.fixup(label, _patch(lambda old, off: (old & 0xFC000000) | ((off >> 2) & 0x3FFFFFF)), 4)


def b_to(a: Assembler, label: str) -> None:
    bl_to(a, label, link=False)


def bcond_to(a: Assembler, cond: str, label: str) -> None:
    a.emit(b(bcond(cond, 0)))
    a.fixup(label, _patch(lambda old, off: (old & ~(0x7FFFF << 5)) | (((off >> 2) & 0x7FFFF) << 5)), 4)


def cbz_to(a: Assembler, rt: int, label: str, nonzero: bool = False, x: bool = True) -> None:
    a.emit(b(cbz(rt, 0, nonzero, x)))
    a.fixup(label, _patch(lambda old, off: (old & ~(0x7FFFF << 5)) | (((off >> 2) & 0x7FFFF) << 5)), 4)


def tbz_to(a: Assembler, rt: int, bit: int, label: str, nonzero: bool = False) -> None:
    a.emit(b(tbz(rt, bit, 0, nonzero)))
    a.fixup(label, _patch(lambda old, off: (old & ~(0x3FFF << 5)) | (((off >> 2) & 0x3FFF) << 5)), 4)


def adr_to(a: Assembler, rd: int, label: str) -> None:
    a.emit(b(adr(rd, 0)))
    a.fixup(label, _patch(lambda old, off: (old & 0x9F00001F) | adr(0, off) & ~0x9F00001F), 4)
