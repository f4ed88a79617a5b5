"""The few AArch64 encodings the referee's guest program needs beyond uprobe_lab.arm64.asm (use
those first: ldr_imm/str_imm, movz with a shift, add_imm, cmp_imm... live there).

Each returns the 32-bit word; tests/test_verify_arm64.py checks every one against Capstone.
"""
from __future__ import annotations

from ..arm64.asm import movz, reg_number, unsigned_offset

SYSREG = {"nzcv": 0xDA10, "tpidr_el0": 0xDE82}  # op0:op1:CRn:CRm:op2 as mrs/msr carry it


def movk(rd: int, imm16: int, shift: int = 0) -> int:
    return 0xF2800000 | ((shift // 16) << 21) | ((imm16 & 0xFFFF) << 5) | reg_number(rd)


def mov_imm64(rd: int, value: int) -> list[int]:
    """movz + movk for every non-zero 16-bit chunk above the first."""
    words = [movz(rd, value & 0xFFFF)]
    for shift in (16, 32, 48):
        if (value >> shift) & 0xFFFF:
            words.append(movk(rd, (value >> shift) & 0xFFFF, shift))
    return words


def mrs(rt: int, reg: str) -> int:
    return 0xD5300000 | (SYSREG[reg] << 5) | reg_number(rt)


def msr(reg: str, rt: int) -> int:
    return 0xD5100000 | (SYSREG[reg] << 5) | reg_number(rt)


def ldr_w(rt, rn, imm=0):
    return unsigned_offset(0xB9400000, 4, rt, rn, imm)


def str_w(rt, rn, imm=0):
    return unsigned_offset(0xB9000000, 4, rt, rn, imm)


def ldr_q(rt, rn, imm=0):
    return unsigned_offset(0x3DC00000, 16, rt, rn, imm)


def str_q(rt, rn, imm=0):
    return unsigned_offset(0x3D800000, 16, rt, rn, imm)


def ldrb_reg(rt, rn, rm):
    return 0x38606800 | (reg_number(rm) << 16) | (reg_number(rn) << 5) | reg_number(rt)


def ldr_w_reg(rt, rn, rm):
    return 0xB8606800 | (reg_number(rm) << 16) | (reg_number(rn) << 5) | reg_number(rt)


def sub_imm(rd, rn, imm):
    return 0xD1000000 | ((imm & 0xFFF) << 10) | (reg_number(rn) << 5) | reg_number(rd)


def sub_w_imm(rd, rn, imm):
    return 0x51000000 | ((imm & 0xFFF) << 10) | (reg_number(rn) << 5) | reg_number(rd)


def cmp_reg(rn, rm):
    return 0xEB00001F | (reg_number(rm) << 16) | (reg_number(rn) << 5)


def cmp_w_reg(rn, rm):
    return 0x6B00001F | (reg_number(rm) << 16) | (reg_number(rn) << 5)


def cmp_w_imm(rn, imm):
    return 0x7100001F | ((imm & 0xFFF) << 10) | (reg_number(rn) << 5)


def lsl_imm(rd, rn, shift):
    """lsl xd, xn, #shift (ubfm xd, xn, #(-shift mod 64), #(63 - shift))."""
    return 0xD3400000 | (((-shift) % 64) << 16) | ((63 - shift) << 10) | (reg_number(rn) << 5) | reg_number(rd)


def lsr_imm(rd, rn, shift):
    """lsr xd, xn, #shift (ubfm xd, xn, #shift, #63)."""
    return 0xD340FC00 | (shift << 16) | (reg_number(rn) << 5) | reg_number(rd)


def and_0xf(rd, rn):
    """and xd, xn, #0xf (N=1, immr=0, imms=3)."""
    return 0x92400C00 | (reg_number(rn) << 5) | reg_number(rd)


def orr_reg(rd, rn, rm):
    return 0xAA000000 | (reg_number(rm) << 16) | (reg_number(rn) << 5) | reg_number(rd)


def madd(rd, rn, rm, ra):
    return 0x9B000000 | (reg_number(rm) << 16) | (reg_number(ra) << 10) | (reg_number(rn) << 5) | reg_number(rd)


def movn(rd: int, imm16: int) -> int:
    """mov xd, #~imm16 (movn)."""
    return 0x92800000 | ((imm16 & 0xFFFF) << 5) | reg_number(rd)


def ldrb_post(rt, rn, imm=1):
    return 0x38400400 | ((imm & 0x1FF) << 12) | (reg_number(rn) << 5) | reg_number(rt)


def strb_post(rt, rn, imm=1):
    return 0x38000400 | ((imm & 0x1FF) << 12) | (reg_number(rn) << 5) | reg_number(rt)


def str_x_reg(rt, rn, rm):
    return 0xF8206800 | (reg_number(rm) << 16) | (reg_number(rn) << 5) | reg_number(rt)


def ldr_x_reg(rt, rn, rm):
    return 0xF8606800 | (reg_number(rm) << 16) | (reg_number(rn) << 5) | reg_number(rt)
