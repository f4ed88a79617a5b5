"""Hand encodings of the few x86-64 instructions the lab's programs need.

Each function returns the instruction's bytes; tests/test_x86_asm.py checks every one against
Capstone. Branches to labels go through ``Assembler`` fixups.
"""
from __future__ import annotations

import struct

from ..program import Assembler

REG64 = {"rax": 0, "rcx": 1, "rdx": 2, "rbx": 3, "rsp": 4, "rbp": 5, "rsi": 6, "rdi": 7,
         "r8": 8, "r9": 9, "r10": 10, "r11": 11, "r12": 12, "r13": 13, "r14": 14, "r15": 15}

# The kernel's x86_nops table, indexed by length: BYTES_NOP1..BYTES_NOP11 of arch/x86/include/asm/nops.h
# (64-bit; NOP9-NOP11 since df25edbac31e "x86/alternatives: Add longer 64-bit NOPs", 6.5).
X86_NOPS = {
    1: bytes.fromhex("90"),
    2: bytes.fromhex("6690"),
    3: bytes.fromhex("0f1f00"),
    4: bytes.fromhex("0f1f4000"),
    5: bytes.fromhex("0f1f440000"),
    6: bytes.fromhex("660f1f440000"),
    7: bytes.fromhex("0f1f8000000000"),
    8: bytes.fromhex("0f1f840000000000"),
    9: bytes.fromhex("2e0f1f840000000000"),  # cs nopl 0x0(%rax,%rax,1)
    10: bytes.fromhex("662e0f1f840000000000"),  # osp cs nopl ...
    11: bytes.fromhex("66662e0f1f840000000000"),  # osp osp cs nopl ...
}
ASM_NOP_MAX = 11
# NOP9-NOP11 carry a CS prefix, which is_prefix_bad() refuses before branch_setup_xol_ops compares any
# x86_nops[] pattern (a 6.18 host answers -ENOTSUPP for all three): only x86_nops[1..8] can be probed, and
# emulated from 6.16; 7.3 (and 7.2.y from 7.2.6) accepts x86_nops[10] as its optimisable nop10, without those
# checks
PROBEABLE_NOP_MAX = 8
NOP10 = X86_NOPS[10]  # nopw %cs:0x0(%rax,%rax,1): the site 7.3 optimises

NOP = b"\x90"
RET = b"\xc3"
INT3 = b"\xcc"
SYSCALL = b"\x0f\x05"


def _rex_b(reg: int) -> bytes:
    return b"\x41" if reg >= 8 else b""


def push(reg: str) -> bytes:
    r = REG64[reg]
    return _rex_b(r) + bytes([0x50 + (r & 7)])


def pop(reg: str) -> bytes:
    r = REG64[reg]
    return _rex_b(r) + bytes([0x58 + (r & 7)])


def mov_rr(dst: str, src: str) -> bytes:
    """mov %src, %dst (64-bit, opcode 89 /r)."""
    d, s = REG64[dst], REG64[src]
    rex = 0x48 | (0x04 if s >= 8 else 0) | (0x01 if d >= 8 else 0)
    return bytes([rex, 0x89, 0xC0 | ((s & 7) << 3) | (d & 7)])


def mov_imm32(reg: str, imm: int) -> bytes:
    """mov $imm, %e<reg> (b8+r id): zero-extends into the 64-bit register."""
    r = REG64[reg]
    return _rex_b(r) + bytes([0xB8 + (r & 7)]) + struct.pack("<I", imm & 0xFFFFFFFF)


def mov_imm_sx(reg: str, imm: int) -> bytes:
    """mov $imm, %reg with a sign-extended 32-bit immediate (REX.W c7 /0 id), as gas encodes mov $335,%rax."""
    r = REG64[reg]
    return bytes([0x48 | (1 if r >= 8 else 0), 0xC7, 0xC0 | (r & 7)]) + struct.pack("<i", imm)


def mov_imm64(reg: str, imm: int) -> bytes:
    """movabs $imm, %reg (REX.W b8+r io)."""
    r = REG64[reg]
    return bytes([0x48 | (1 if r >= 8 else 0), 0xB8 + (r & 7)]) + struct.pack("<Q", imm & (2**64 - 1))


def xor_rr32(dst: str, src: str) -> bytes:
    d, s = REG64[dst], REG64[src]
    rex = (0x40 | (0x04 if s >= 8 else 0) | (0x01 if d >= 8 else 0)) if (s >= 8 or d >= 8) else None
    return (bytes([rex]) if rex else b"") + bytes([0x31, 0xC0 | ((s & 7) << 3) | (d & 7)])


def dec(reg: str) -> bytes:
    r = REG64[reg]
    return bytes([0x48 | (1 if r >= 8 else 0), 0xFF, 0xC8 | (r & 7)])


def call_reg(reg: str) -> bytes:
    r = REG64[reg]
    return _rex_b(r) + bytes([0xFF, 0xD0 | (r & 7)])


def ret_imm16(imm: int) -> bytes:
    return b"\xc2" + struct.pack("<H", imm)


def mov_store_rsp_disp8(src: str, disp: int) -> bytes:
    """mov %src, disp8(%rsp) (REX.W 89 /r, SIB base rsp)."""
    s = REG64[src]
    return bytes([0x48 | (0x04 if s >= 8 else 0), 0x89, 0x44 | ((s & 7) << 3), 0x24]) + struct.pack("<b", disp)


def mov_load_rsp_disp8(dst: str, disp: int) -> bytes:
    """mov disp8(%rsp), %dst (REX.W 8b /r, SIB base rsp)."""
    d = REG64[dst]
    return bytes([0x48 | (0x04 if d >= 8 else 0), 0x8B, 0x44 | ((d & 7) << 3), 0x24]) + struct.pack("<b", disp)


def rel32(opcode: bytes, src_end: int, target: int) -> bytes:
    disp = target - src_end
    if not -(2**31) <= disp < 2**31:
        raise ValueError(f"target {target:#x} is out of rel32 reach of {src_end:#x}")
    return opcode + struct.pack("<i", disp)


def call_rel32(src: int, target: int) -> bytes:
    """call target, placed at ``src`` (e8 rel32) - what the kernel writes over an optimised nop5."""
    return rel32(b"\xe8", src + 5, target)


# --- label-aware helpers -------------------------------------------------------------------

def _patch_rel32(buf: bytearray, off: int, addr: int, target: int) -> None:
    buf[off + 1 : off + 5] = struct.pack("<i", target - (addr + 5))  # e8/e9 rel32


def _patch_rel8(buf: bytearray, off: int, addr: int, target: int) -> None:
    disp = target - (addr + 2)
    if not -128 <= disp < 128:
        raise ValueError(f"rel8 branch at {addr:#x} cannot reach {target:#x}")
    buf[off + 1] = disp & 0xFF


def call(a: Assembler, label: str) -> None:
    a.emit(b"\xe8\0\0\0\0")
    a.fixup(label, _patch_rel32, 5)


def jmp(a: Assembler, label: str) -> None:
    a.emit(b"\xe9\0\0\0\0")
    a.fixup(label, _patch_rel32, 5)


JCC = {"jo": 0, "jno": 1, "jb": 2, "jae": 3, "je": 4, "jz": 4, "jne": 5, "jnz": 5, "jbe": 6, "ja": 7,
       "js": 8, "jns": 9, "jp": 10, "jnp": 11, "jl": 12, "jge": 13, "jle": 14, "jg": 15}


def jcc8(a: Assembler, cond: str, label: str) -> None:
    a.emit(bytes([0x70 + JCC[cond], 0]))
    a.fixup(label, _patch_rel8, 2)


ALU_RR = {"add": 0x01, "or": 0x09, "and": 0x21, "sub": 0x29, "xor": 0x31, "cmp": 0x39}


def alu_rr(op: str, dst: str, src: str) -> bytes:
    """add/or/and/sub/xor/cmp %src, %dst (64-bit, REX.W op /r)."""
    d, s = REG64[dst], REG64[src]
    rex = 0x48 | (0x04 if s >= 8 else 0) | (0x01 if d >= 8 else 0)
    return bytes([rex, ALU_RR[op], 0xC0 | ((s & 7) << 3) | (d & 7)])


def inc(reg: str) -> bytes:
    r = REG64[reg]
    return bytes([0x48 | (1 if r >= 8 else 0), 0xFF, 0xC0 | (r & 7)])


def lea_disp8(dst: str, base: str, disp: int) -> bytes:
    """lea disp8(%base), %dst (base must not be rsp/r12, which need a SIB byte)."""
    d, b = REG64[dst], REG64[base]
    if b & 7 == 4:
        raise ValueError("lea_disp8 does not encode an rsp/r12 base")
    rex = 0x48 | (0x04 if d >= 8 else 0) | (0x01 if b >= 8 else 0)
    return bytes([rex, 0x8D, 0x40 | ((d & 7) << 3) | (b & 7)]) + struct.pack("<b", disp)


# --- memory operands and flags, for the uretprobe test programs -------------------------------

PUSHFQ = b"\x9c"
POPFQ = b"\x9d"


def _modrm_mem(reg: int, base: int, disp: int) -> bytes:
    """ModRM (+SIB) + displacement for ``disp(%base)``: disp8 when it fits, else disp32."""
    if -128 <= disp < 128:
        mod, tail = 1, struct.pack("<b", disp)
    else:
        mod, tail = 2, struct.pack("<i", disp)
    sib = b"\x24" if base & 7 == 4 else b""  # rsp/r12 as base need a SIB byte
    return bytes([(mod << 6) | ((reg & 7) << 3) | (base & 7)]) + sib + tail


def mov_load(dst: str, base: str, disp: int) -> bytes:
    """mov disp(%base), %dst (REX.W 8b /r)."""
    d, b = REG64[dst], REG64[base]
    return bytes([0x48 | (0x04 if d >= 8 else 0) | (0x01 if b >= 8 else 0), 0x8B]) + _modrm_mem(d, b, disp)


def mov_store(base: str, disp: int, src: str) -> bytes:
    """mov %src, disp(%base) (REX.W 89 /r)."""
    s, b = REG64[src], REG64[base]
    return bytes([0x48 | (0x04 if s >= 8 else 0) | (0x01 if b >= 8 else 0), 0x89]) + _modrm_mem(s, b, disp)


