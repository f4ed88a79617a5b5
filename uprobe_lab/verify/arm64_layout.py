"""Where everything sits in the referee's guest, and the code of one case (shared by guest and lab).

The guest maps the cases file at ``CODE``; case *i* is the page ``CODE + i * SLOT``:

    0x000  entry: load x0-x30, sp, nzcv, v0, v1 from the init block, then ``b P``
    0x0fc  ``b pad_back``      (target of a branch by -4)
    0x100  P: the instruction under test (the probe goes here)
    0x104  ``b pad_fall``      (the next instruction)
    0x108  ``b pad_fwd``       (target of a branch by +8; also what x16, x17, x30 point at)
    0x140  F: ``mov x9, x30; add x0, x0, #1; ret`` (the function a uretprobe case calls)
    0x200, 0x300, 0x400  the three pads: store every register into the record at ``SHARED``,
           then ``br`` to ``FINISH`` (in the guest's /init; in the lab an unmapped stop address)
    0x900  the literal pool; 0xc00 the init block (304 bytes: clear of the pool)

``SHARED`` is a MAP_SHARED page the parent reads after the child exits: the record (layout
``REC``) and, inside it, the 256-byte scratch buffer that sp and x2/x3 point into.
"""
from __future__ import annotations

import struct

from ..arm64 import asm
from . import arm64_enc as enc

CODE = 0x10000000
PAGE = SLOT = 0x1000
P = 0x100
F = 0x140
PADS = {"back": 0x200, "fall": 0x300, "fwd": 0x400}
PAD_ID = {"back": 1, "fall": 2, "fwd": 3}
INIT = 0xC00
LIT = 0x900
SHARED = 0x20000000
FINISH = 0x401000  # the guest's finish routine (fixed address in /init)
SIGNAL_ENTRY = 0x401400  # the guest's handler for SIGILL/SIGTRAP/SIGBUS/SIGSEGV: record, then FINISH

# the record at SHARED, written by the pads (regs) and by the guest's harness (the rest)
REC = {"x": 0, "sp": 248, "nzcv": 256, "pad": 264, "v0": 272, "v1": 288, "attach0": 304, "attach1": 312,
       "seen": 320, "xol": 328, "xol_bytes": 336, "status": 352, "tag": 360, "sig": 368, "sig_pc": 376, "scratch": 384}
SCRATCH_SIZE = 256
REC_SIZE = REC["scratch"] + SCRATCH_SIZE
SCRATCH = SHARED + REC["scratch"]
# init block layout (at INIT in each slot)
INIT_SP, INIT_NZCV, INIT_V0, INIT_V1 = 248, 256, 272, 288


def slot_base(index: int) -> int:
    return CODE + index * SLOT


def default_regs(base: int) -> dict[str, int]:
    """x0-x30 and sp a case starts with unless it overrides them (pointers into the scratch buffer,
    branch registers at pad_fwd, x8 = getppid for svc)."""
    target = base + P + 8
    regs = {f"x{i}": (0x1111 * (i + 1)) | (i << 40) for i in range(31)}
    regs.update(x0=0x0123456789ABCDEF, x1=0xFEDCBA9876543210, x2=SCRATCH + 0x40, x3=SCRATCH + 0x80,
                x4=0x8000000000000001, x5=0, x6=0xFFFFFFFF00000000, x7=7, x8=173,
                x16=target, x17=target, x30=target, sp=SCRATCH + 0x80)
    return regs


V0 = bytes(range(16))
V1 = bytes(range(0x10, 0x20))


def scratch_init() -> bytes:
    return bytes((i * 7 + 3) & 0xFF for i in range(SCRATCH_SIZE))


def shared_page() -> bytes:
    """The shared page as each run starts it: zeros, and the scratch buffer's pattern."""
    page = bytearray(PAGE)
    page[REC["scratch"]: REC["scratch"] + SCRATCH_SIZE] = scratch_init()
    return bytes(page)


def literal_pool() -> bytes:
    return b"".join(struct.pack("<Q", 0x8877665544332211 + i * 0x0101010101010101) for i in range(8))


def _pad(pad_id: int) -> list[int]:
    words = [enc.msr("tpidr_el0", 0), asm.movz(0, SHARED >> 16, shift=16)]
    words += [asm.stp(r, r + 1, 0, 8 * r, "offset") for r in range(1, 30, 2)]  # x1..x30
    words += [enc.mrs(1, "tpidr_el0"), asm.str_imm(1, 0, REC["x"]),
              asm.add_imm(1, asm.SP, 0), asm.str_imm(1, 0, REC["sp"]),
              enc.mrs(1, "nzcv"), asm.str_imm(1, 0, REC["nzcv"]),
              enc.str_q(0, 0, REC["v0"]), enc.str_q(1, 0, REC["v1"]),
              asm.movz(1, pad_id), asm.str_imm(1, 0, REC["pad"])]
    return words + enc.mov_imm64(1, FINISH) + [asm.br(1)]


def _entry() -> list[int]:
    words = [asm.adr(30, INIT), asm.ldr_imm(0, 30, INIT_NZCV), enc.msr("nzcv", 0),
             asm.ldr_imm(0, 30, INIT_SP), asm.add_imm(asm.SP, 0, 0),
             enc.ldr_q(0, 30, INIT_V0), enc.ldr_q(1, 30, INIT_V1)]
    words += [asm.ldp(r, r + 1, 30, 8 * r, "offset") for r in range(0, 30, 2)]  # x0..x29
    words.append(asm.ldr_imm(30, 30, 240))
    return words


def slot_code(base: int, word: int, regs: dict[str, int], nzcv: int = 0) -> bytes:
    """The 4 KiB page of one case at address ``base``."""
    page = bytearray(asm.b(asm.brk(0x3E8)) * (SLOT // 4))  # brk #1000 anywhere a stray branch lands

    def put(off, words):
        for i, w in enumerate(words):
            page[off + 4 * i: off + 4 * i + 4] = asm.b(w)

    entry = _entry()
    put(0, entry + [asm.b_imm(P - 4 * len(entry))])
    put(P - 4, [asm.b_imm(PADS["back"] - (P - 4)), word, asm.b_imm(PADS["fall"] - (P + 4)),
                asm.b_imm(PADS["fwd"] - (P + 8))])
    put(F, [asm.mov_reg(9, 30), asm.add_imm(0, 0, 1), asm.RET])
    for name, off in PADS.items():
        put(off, _pad(PAD_ID[name]))
    init = b"".join(struct.pack("<Q", regs[f"x{i}"] & (2**64 - 1)) for i in range(31))
    init += struct.pack("<QQ", regs["sp"], nzcv) + bytes(8) + V0 + V1
    page[INIT: INIT + len(init)] = init
    pool = literal_pool()
    page[LIT: LIT + len(pool)] = pool
    return bytes(page)
