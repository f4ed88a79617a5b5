"""Instructions to put before the referee: a seeded generator of mixed classes, and two sweeps.

Every instruction is built from its encoding fields (prefixes, REX, VEX/EVEX, opcode, ModRM,
displacement, immediate) and kept only if Capstone decodes it to exactly those bytes. Memory
operands are [reg+disp8] (every register points into the harness's DATA) or RIP-relative with a
displacement that lands in DATA; relative branches aim at a landing pad of the harness.

Classes: ``1-byte``, ``0f`` (two- and three-byte legacy maps), ``prefixed`` (legacy prefixes in
front), ``VEX``, ``EVEX``, ``RIP-relative``, ``branches``, ``nops``, ``syscall``. The sweeps:
``vex_sweep`` (every register-form VEX opcode: map x pp x opcode, L/W the first Capstone accepts)
and ``evex_sweep`` (the same for EVEX at 512 bits).
"""
from __future__ import annotations

import itertools
import random
import struct
from dataclasses import dataclass
from functools import lru_cache

import capstone

from ..x86 import asm
from . import x86_harness as H

CLASSES = ("1-byte", "0f", "prefixed", "VEX", "EVEX", "RIP-relative", "branches", "nops", "syscall")
# each drawn case takes ~1 KB and ~1 ms; under perf uprobes each takes the kernel ~85 ms to tear down, one at a
# time, so the most is a run of over two hours
MAX_SAMPLE = 100_000

# Not judged: they read clocks, counters, random numbers or CPU identity (two unprobed runs could
# differ), wait on memory, or would break the child's own runtime (fs/gs base and selectors).
EXCLUDED_MNEMONICS = {
    "rdtsc", "rdtscp", "rdrand", "rdseed", "rdpid", "rdpru", "rdpmc", "cpuid", "monitorx", "mwaitx", "umwait",
    "tpause", "umonitor", "wrfsbase", "wrgsbase", "lfs", "lgs", "lss", "vmcall", "vmmcall", "vmfunc", "syscall",
    "sysenter", "xgetbv", "enclu", "pconfig",
}
SEGMENT_WRITES = ("fs", "gs")

LEGACY_PREFIXES = [0x66, 0xF2, 0xF3, 0x2E, 0x3E, 0x26, 0x36, 0x64, 0x65, 0x67, 0xF0]
NOT_OPCODES = set(LEGACY_PREFIXES) | set(range(0x40, 0x50)) | {0x0F, 0xC4, 0xC5, 0x62, 0x8F}
BRANCH_1BYTE = set(range(0x70, 0x80)) | {0xE0, 0xE1, 0xE2, 0xE3, 0xE8, 0xE9, 0xEB, 0xC2, 0xC3, 0xCA, 0xCB}


@dataclass(frozen=True)
class Case:
    cls: str
    insn: bytes
    text: str
    flags: int

    @property
    def hex(self) -> str:
        return self.insn.hex()


@lru_cache(maxsize=1)
def _cs() -> capstone.Cs:
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    md.detail = True
    return md


def decode(raw: bytes, addr: int = H.SITE):
    """Capstone's reading of the first instruction of ``raw`` at ``addr``, or None."""
    return next(_cs().disasm(bytes(raw), addr, 1), None)


def _random_flags(rng: random.Random) -> int:
    flags = 0x202
    for bit in (0x1, 0x4, 0x10, 0x40, 0x80, 0x800):
        if rng.random() < 0.5:
            flags |= bit
    return flags


def _modrm(rng: random.Random, riprel: bool) -> bytes:
    """ModRM (+disp): register form, [reg+disp8] with a base other than rsp/r12, or a RIP-relative disp32
    placeholder (fixed up once the length is known)."""
    reg = rng.randrange(8)
    if riprel:
        return bytes([(reg << 3) | 5]) + b"\0\0\0\0"
    if rng.random() < 0.5:
        return bytes([0xC0 | (reg << 3) | rng.randrange(8)])
    rm = rng.choice([0, 1, 2, 3, 5, 6, 7])
    return bytes([0x40 | (reg << 3) | rm, rng.randrange(-0x40, 0x40) & 0xFF])


def _finish(raw: bytes, riprel: bool, rng: random.Random):
    """Decode ``raw`` (+ random immediate bytes); fix a RIP-relative disp to land in DATA; the instruction
    bytes, or None if Capstone does not take them."""
    tail = bytes(rng.randrange(256) for _ in range(8))
    ins = decode(raw + tail)
    if ins is None or ins.size < len(raw):
        return None
    code = bytearray(ins.bytes)
    if riprel:
        if ins.disp_size != 4 or not any(op.type == capstone.x86.X86_OP_MEM and op.mem.base == capstone.x86.X86_REG_RIP
                                         for op in ins.operands):
            return None
        target = H.DATA + 0x1000 + rng.randrange(0, 0x800, 8)
        code[ins.disp_offset : ins.disp_offset + 4] = struct.pack("<i", target - (H.SITE + ins.size))
    return bytes(code)


def _legacy(rng: random.Random, cls: str, riprel: bool = False) -> bytes:
    prefix = b""
    if cls == "prefixed":
        prefix = bytes(rng.sample(LEGACY_PREFIXES, rng.randrange(1, 3)))
    if rng.random() < 0.4:
        prefix += bytes([0x40 | rng.randrange(16)])
    if cls == "1-byte" or (cls in ("prefixed", "RIP-relative") and rng.random() < 0.5):
        op = rng.choice([b for b in range(256) if b not in NOT_OPCODES and b not in BRANCH_1BYTE])
        opcode = bytes([op])
    else:
        kind = rng.random()
        if kind < 0.6:
            second = rng.choice([b for b in range(256) if not 0x80 <= b <= 0x8F and b not in (0x38, 0x3A, 0x05)])
            opcode = bytes([0x0F, second])
        else:
            opcode = bytes([0x0F, rng.choice([0x38, 0x3A]), rng.randrange(256)])
    return prefix + opcode + _modrm(rng, riprel)


def _vex(rng: random.Random, riprel: bool = False) -> bytes:
    mmmmm, pp, L, W = rng.randrange(1, 4), rng.randrange(4), rng.randrange(2), rng.randrange(2)
    vvvv = rng.randrange(16)
    if mmmmm == 1 and W == 0 and rng.random() < 0.4:
        prefix = bytes([0xC5, 0x80 | ((~vvvv & 0xF) << 3) | (L << 2) | pp])
    else:
        prefix = bytes([0xC4, 0xE0 | mmmmm, (W << 7) | ((~vvvv & 0xF) << 3) | (L << 2) | pp])
    return prefix + bytes([rng.randrange(256)]) + _modrm(rng, riprel)


def _evex(rng: random.Random, riprel: bool = False, mm: int | None = None, pp: int | None = None,
          W: int | None = None, LL: int | None = None, opcode: int | None = None, reg_form: bool = False) -> bytes:
    mm = rng.randrange(1, 4) if mm is None else mm
    pp = rng.randrange(4) if pp is None else pp
    W = rng.randrange(2) if W is None else W
    LL = rng.randrange(3) if LL is None else LL
    opcode = rng.randrange(256) if opcode is None else opcode
    p0 = 0xF0 | mm  # R X B R' = 1111 (inverted: registers 0-15)
    p1 = (W << 7) | (0xF << 3) | 0x04 | pp  # vvvv = 1111 (unused/xmm0), bit 2 always 1
    p2 = (LL << 5) | 0x08  # z=0, b=0, V'=1, aaa=000
    modrm = bytes([0xC0 | (1 << 3) | 2]) if reg_form else _modrm(rng, riprel)
    return bytes([0x62, p0, p1, p2, opcode]) + modrm


def _branch(rng: random.Random) -> bytes | None:
    """A branch aimed at a pad (or an indirect one through the stack's RET_PAD)."""
    target = rng.choice([None, H.PAD_BACK, H.PAD_FWD])
    kind = rng.randrange(7)
    if kind == 0:
        op, size = bytes([0x70 | rng.randrange(16)]), 1
    elif kind == 1:
        op, size = bytes([0x0F, 0x80 | rng.randrange(16)]), 4
    elif kind == 2:
        op, size = rng.choice([(b"\xeb", 1), (b"\xe9", 4)])
    elif kind == 3:
        op, size = b"\xe8", 4
    elif kind == 4:
        op, size = bytes([rng.choice([0xE0, 0xE1, 0xE2, 0xE3])]), 1
    elif kind == 5:
        return rng.choice([b"\xc3", b"\xc2\x08\x00", b"\xf3\xc3", b"\xff\x24\x24", b"\xff\x14\x24"])  # ret.., via [rsp]
    else:
        prefix = rng.choice([b"\x66", b"\xf2", b"\x2e", b"\x3e", b"\x48"])
        op, size = prefix + rng.choice([bytes([0x70 | rng.randrange(16)]), b"\xeb"]), 1
    length = len(op) + size
    dest = H.SITE + length if target is None else target
    disp = dest - (H.SITE + length)
    return op + (struct.pack("<b", disp) if size == 1 else struct.pack("<i", disp))


def _nop(rng: random.Random) -> bytes:
    # x86_nops[1..8] plus shapes around them; NOP10 stands for the 0x2e-prefixed ones (9-11) the kernel refuses
    choices = [asm.X86_NOPS[n] for n in range(1, asm.PROBEABLE_NOP_MAX + 1)] + [asm.NOP10, b"\x66\x66\x90", b"\xf3\x90", b"\x48\x90",
                                             b"\x66\x0f\x1f\x44\x00\x00", b"\x0f\x1f\x44\x00\x08",
                                             b"\x0f\x1f\x80\x00\x00\x00\x01", b"\x2e\x0f\x1f\x44\x00\x00"]
    return rng.choice(choices)


def _excluded(ins) -> bool:
    if ins.mnemonic in EXCLUDED_MNEMONICS:
        return True
    ops = ins.op_str.split(",")
    if ins.mnemonic in ("mov", "pop") and ops and ops[0].strip() in SEGMENT_WRITES:
        return True
    return False


def make_case(cls: str, raw: bytes, flags: int) -> Case | None:
    ins = decode(raw)
    if ins is None or ins.size != len(raw) or (cls != "syscall" and _excluded(ins)):
        return None
    return Case(cls, bytes(raw), f"{ins.mnemonic} {ins.op_str}".strip(), flags)


def random_case(rng: random.Random, cls: str) -> Case | None:
    riprel = cls == "RIP-relative"
    if cls in ("1-byte", "0f", "prefixed"):
        raw = _finish(_legacy(rng, cls), False, rng)
    elif cls == "RIP-relative":
        kind = rng.random()
        body = _legacy(rng, "RIP-relative", True) if kind < 0.6 else _vex(rng, True) if kind < 0.85 else _evex(rng, True)
        raw = _finish(body, True, rng)
    elif cls == "VEX":
        raw = _finish(_vex(rng), False, rng)
    elif cls == "EVEX":
        raw = _finish(_evex(rng), False, rng)
    elif cls == "branches":
        raw = _branch(rng)
    elif cls == "nops":
        raw = _nop(rng)
    elif cls == "syscall":
        raw = asm.SYSCALL
    else:
        raise ValueError(f"unknown class {cls!r}")
    return make_case(cls, raw, _random_flags(rng)) if raw else None


def random_cases(n: int, seed: int, classes=CLASSES) -> list[Case]:
    """``n`` instructions from ``seed``, the classes taken in turn (a few syscalls and nops)."""
    rng = random.Random(seed)
    classes = list(classes)
    light = {"syscall": 0.1, "nops": 0.4}  # few distinct forms: fewer of them
    out: list[Case] = []
    while len(out) < n:
        cls = classes[rng.randrange(len(classes))]
        if rng.random() > light.get(cls, 1.0):
            continue
        for _ in range(200):
            case = random_case(rng, cls)
            if case is not None:
                out.append(case)
                break
    return out


def vex_sweep(flags: int = 0x202) -> list[Case]:
    """Every register-form VEX opcode Capstone knows: (map, pp, opcode) with the first L/W it accepts."""
    out = []
    for mmmmm in (1, 2, 3):
        for pp in range(4):
            for op in range(256):
                for L, W, vvvv in itertools.product((0, 1), (0, 1), (0xC, 0xF)):  # vvvv: xmm3, or unused
                    raw = bytes([0xC4, 0xE0 | mmmmm, (W << 7) | (vvvv << 3) | (L << 2) | pp, op, 0xCA])
                    ins = decode(raw + b"\x11")
                    if ins is not None and ins.size in (4, 5, 6):  # no ModRM (vzeroupper), ModRM, + imm8
                        case = make_case("VEX", bytes(ins.bytes), flags)
                        if case:
                            out.append(case)
                        break
    return out


def evex_sweep(flags: int = 0x202) -> list[Case]:
    """Every register-form EVEX opcode Capstone knows at 512 bits: (map, pp, opcode), W0 else W1."""
    out = []
    for mm in (1, 2, 3):
        for pp in range(4):
            for op in range(256):
                for W in (0, 1):
                    raw = _evex(random.Random(0), mm=mm, pp=pp, W=W, LL=2, opcode=op, reg_form=True)
                    ins = decode(raw + b"\x11")
                    if ins is not None and ins.size in (6, 7):
                        case = make_case("EVEX", bytes(ins.bytes), flags)
                        if case:
                            out.append(case)
                        break
    return out
