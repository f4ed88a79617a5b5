"""The referee's cases: a sweep of the decode classes arch/arm64/kernel/probes/decode-insn.c tells apart.

Each case is one instruction word at P of its page (see arm64_layout), run unprobed and under a
uprobe in a fresh child, with the registers it starts with. Encodings are written from the Arm ARM's
field layouts; tests/test_verify_arm64.py checks that Capstone reads every word as an instruction
(or, for udf and the unallocated hints, as what the case names).
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from ..arm64 import asm
from . import arm64_layout as L
from ..program import disasm


@dataclass(frozen=True)
class Case:
    cls: str  # the class in the per-class table
    word: int
    regs: tuple = ()  # (name, value) overrides of arm64_layout.default_regs
    nzcv: int = 0
    kind: str = "insn"  # "insn": entry probe at P; "uretprobe": return probe on F, P calls F
    note: str = ""

    def text(self) -> str:
        d = disasm(asm.b(self.word), "arm64", L.CODE + L.P)
        return d[0][2] if d else f"udf/.inst {self.word:#010x}"


def _rel(offset: int, bits: int, shift: int) -> int:
    return ((offset >> 2) & ((1 << bits) - 1)) << shift


def branches() -> list[Case]:
    out = []
    for off in (8, -4):
        out += [Case("branch", asm.b_imm(off)), Case("branch", asm.b_imm(off, link=True))]
    for cond in range(16):
        for flags in (0x0, 0xF << 28 if cond % 2 == 0 else 0x6 << 28):
            out.append(Case("branch", 0x54000000 | _rel(8, 19, 5) | cond, nzcv=flags))
    out.append(Case("branch", 0x54000000 | _rel(-4, 19, 5) | 0, nzcv=0x4 << 28))
    for rt in (5, 6, 0):  # x5 = 0, x6 = 0xffffffff00000000 (w6 = 0), x0 != 0
        for x in (True, False):
            for nz in (False, True):
                out.append(Case("branch", asm.cbz(rt, 8, nz, x)))
    for bit in (0, 1, 63, 62):  # x4 = 1 << 63 | 1
        for nz in (False, True):
            out.append(Case("branch", asm.tbz(4, bit, 8, nz)))
    out += [Case("branch", asm.br(16)), Case("branch", asm.blr(17)), Case("branch", asm.RET),
            Case("branch", asm.ret(16)), Case("branch", asm.blr(30), note="blr lr: pc is read before lr is set")]
    # pointer-authenticated branches (FEAT_PAuth): branches, but not br/blr/ret, so not simulated
    out += [Case("pac-branch", w) for w in (0xD65F0BFF, 0xD65F0FFF, 0xD61F0A1F, 0xD63F0A1F, 0xD71F0A11,
                                             0xD73F0A11)]
    return out


def adr_adrp() -> list[Case]:
    return [Case("adr/adrp", asm.adr(rd, off, page)) for rd, off, page in
            ((0, 0, False), (1, 0x100, False), (2, -0x10, False), (0, 0, True), (3, 0x1000, True),
             (4, -0x3000, True), (31, 0x20, False))]


def literal_loads() -> list[Case]:
    out = []
    lit = L.LIT - L.P
    for opc_v, cls in ((0x18000000, "ldr-literal"), (0x58000000, "ldr-literal"), (0x98000000, "ldr-literal"),
                       (0xD8000000, "prfm-literal"), (0x1C000000, "fp-ldr-literal"),
                       (0x5C000000, "fp-ldr-literal"), (0x9C000000, "fp-ldr-literal")):
        for off, rt in ((lit, 0), (lit + 8, 1), (-4, 1), (0x10, 0)):  # v0/v1: the vector registers recorded
            out.append(Case(cls, opc_v | _rel(off, 19, 5) | rt))
    return out


def exclusives_atomics() -> list[Case]:
    ex = [0xC85F7C40, 0x885F7C40, 0x085F7C40, 0x485F7C40,  # ldxr x0/w0, ldxrb, ldxrh [x2]
          0xC8007C41, 0x88007C41, 0xC85FFC40, 0xC800FC41,  # stxr w0, x1 / w1; ldaxr; stlxr
          0xC87F0440, 0xC8200440, 0xC87F8440, 0x887F0440]  # ldxp x0,x1; stxp w0,x0,x1; ldaxp; ldxp w
    ordered = [0xC8DFFC40, 0x88DFFC40, 0x08DFFC40, 0xC89FFC41, 0x089FFC41,  # ldar x/w/b, stlr x/b
               0xF8BFC040, 0xB8BFC040, 0xC8DF7C40, 0xC89F7C41]  # ldapr x/w, ldlar, stllr
    atomics = [0xF8210040, 0xB8210040, 0xF8E10040, 0x38210040, 0x78210040,  # ldadd x/w, ldaddal, ldaddb/h
               0xF8211040, 0xF8212040, 0xF8213040, 0xF8214040, 0xF8215040, 0xF8216040, 0xF8217040,
               0xF8218040, 0xF8A18040,  # ldclr ldeor ldset ldsmax ldsmin ldumax ldumin swp swpa
               0xC8A17C40, 0xC8E17C40, 0x88A17C40, 0x48207C40, 0xF83F0040]  # cas casal casw casp stadd
    return ([Case("exclusive", w) for w in ex] + [Case("ordered", w) for w in ordered]
            + [Case("atomic", w) for w in atomics])


def hints() -> list[Case]:
    """Every HINT #0..#127: nop, yield, wfe, wfi, sev, sevl, the PAC and BTI hints, the rest."""
    return [Case("hint", 0xD503201F | (imm << 5)) for imm in range(128)]


def system() -> list[Case]:
    mrs = [0xD53B4200, 0xD53BD040, 0xD53B4400, 0xD53B4420, 0xD53B4220, 0xD53B0020, 0xD53B00E0,  # nzcv tpidr
           0xD5380000, 0xD53800A0, 0xD5380600, 0xD53BE000, 0xD53BD060]  # midr mpidr isar0 cntfrq tpidrro
    msr = [0xD51B4200, 0xD51BD040, 0xD51B4400, 0xD51B4420, 0xD50346FF, 0xD503403F]  # nzcv tpidr fpcr fpsr daifset
    barriers = [0xD50339BF, 0xD5033F9F, 0xD5033FDF, 0xD50330FF, 0xD503305F, 0xD503309F, 0xD503349F]
    cache = [0xD50B7422, 0xD50B7A22, 0xD50B7E22, 0xD50B7522, 0xD50B7B22]  # dc zva/cvac/civac, ic ivau, dc cvau
    exc = [0xD4000001, 0xD4000002, 0xD4000003, 0xD4200000, 0xD42000A0, 0xD4400000, 0xD4A00001]
    return ([Case("mrs", w) for w in mrs] + [Case("msr", w) for w in msr] + [Case("barrier", w) for w in barriers]
            + [Case("cache-maint", w) for w in cache] + [Case("exception", w) for w in exc]
            + [Case("udf", 0x00000000), Case("udf", 0x0000DEAD)])


def pac_data() -> list[Case]:
    return [Case("pac-data", w) for w in (0xDAC10020, 0xDAC11020, 0xDAC143E0, 0x9AC23020, 0xF8200440,
                                           0xDAC10420)]  # pacia autia xpaci pacga ldraa pacib


def simd_fp() -> list[Case]:
    words = [0x9E670020, 0x9E660020, 0x1E602820, 0x1E200820, 0x1F410400, 0x1E22C000, 0x9E620020,
             0x9E780000, 0x4E218400, 0x6F00E400, 0x4E040C20, 0x4C407040, 0x4C007040, 0x3DC00040,
             0x3D800440, 0xAD400440, 0xAD000440, 0xFD400040, 0xBC404040, 0x6E211C00, 0x4E010000,
             0x4E284820, 0x5E004020, 0x1E612000, 0x1E611C00, 0x1E61C000, 0x1E264000, 0x0E205800,
             0x4EA11C20, 0x1E6E1000]
    return [Case("simd-fp", w) for w in words]


def loads_stores() -> list[Case]:
    words = [0xF9400440, 0xF9000440, 0xB9400840, 0xB9000840, 0x39400C40, 0x39000C40, 0x79401040,
             0x79001040, 0x39C00C40, 0x79C01040, 0xB9800840, 0xF8408C40, 0xF8408440, 0xF81F8C40,
             0xF8616840, 0xF8217840, 0xF85F8040, 0xF81F8040, 0xF8408840, 0xF8008841, 0xF9800040,
             0xA9400440, 0xA9000440, 0xA9C10440, 0xA8C10440, 0x29400440, 0x69400440, 0xA8810440,
             0xA9400FE2, 0xF94003E0, 0xF90003E1, 0xA9410FE0, 0x38401440, 0xB8404440]
    out = [Case("load-store", w) for w in words]
    # the stp fp/lr forms of the STP chapter, and their near misses
    pairs = [asm.stp(29, 30, 31, -16), asm.stp(29, 30, 31, -32), asm.stp(29, 30, 31, -48),
             asm.stp(29, 30, 31, -64), asm.stp(29, 30, 31, -128), asm.stp(29, 30, 31, 16, "offset"),
             asm.stp(29, 30, 31, -16, "post"), asm.stp(30, 29, 31, -16), asm.stp(29, 30, 31, -8, x=False),
             asm.stp(29, 30, 2, -16), asm.stp(19, 20, 31, -16), asm.stp(29, 30, 31, -8),
             asm.ldp(29, 30, 31, 16), asm.ldp(29, 30, 31, 16, "pre"), asm.stp(29, 30, 31, 0, "offset")]
    return out + [Case("stp-fp-lr", w) for w in pairs]


def data_processing() -> list[Case]:
    words = [0x91000420, 0xD1000420, 0xB1000420, 0xF1000420, 0x8B020020, 0xCB020020, 0xAB020020,
             0x8A020020, 0xAA020020, 0xCA020020, 0xD2824680, 0xF2A24680, 0x92824680, 0x9B020C20,
             0x9B028C20, 0x9B427C20, 0x9AC20C20, 0x9AC20820, 0x9AC22020, 0x9AC22420, 0xD37CEC20,
             0x93407C20, 0x93C21020, 0xDAC01020, 0xDAC00020, 0xDAC00C20, 0x9A821020, 0x9A9F17E0,
             0xFA421824, 0x1AC24020, 0x9AC25C20, 0x9A020020, 0x910003E0, 0x910043FF, 0xD10043FF]
    return [Case("data-processing", w) for w in words]


def mops() -> list[Case]:
    return [Case("mops", w) for w in (0x19010440, 0x1D010440, 0x19C10440)]  # cpyfp, cpyp, setp (FEAT_MOPS)


def uretprobes() -> list[Case]:
    return [Case("uretprobe", asm.b_imm(L.F - L.P, link=True), kind="uretprobe",
                 note="bl F; F: mov x9, x30 - x9 shows the hijacked return address")]


N, Z, C, V = 8 << 28, 4 << 28, 2 << 28, 1 << 28


def branch_outcomes() -> list[Case]:
    """The outcomes branches() leaves out, so each simulate handler's answer shows in some case:
    pl, vc, ge and ls also not taken, hi and lt also taken, N != V both ways for ge/lt/gt/le (the
    kernel's __check_ge/__check_gt fold V into N with shifts), and cbz/cbnz/tbz/tbnz taken backwards
    (the sign of their imm19/imm14). Appended after the older cases, so those keep their slots."""
    bcond = [(5, N), (7, V), (8, C), (9, C), (10, N), (10, V), (11, N), (11, V), (12, N), (12, N | V),
             (13, N), (13, N | V)]
    out = [Case("branch", 0x54000000 | _rel(8, 19, 5) | cond, nzcv=flags) for cond, flags in bcond]
    out += [Case("branch", asm.cbz(5, -4)), Case("branch", asm.cbz(6, -4, nonzero=True)),
            Case("branch", asm.cbz(6, -4, x=False)), Case("branch", asm.tbz(4, 62, -4)),
            Case("branch", asm.tbz(4, 63, -4, nonzero=True)), Case("branch", asm.tbz(4, 0, -4, nonzero=True))]
    return out


def all_cases() -> list[Case]:
    return (branches() + adr_adrp() + literal_loads() + exclusives_atomics() + hints() + system() + pac_data()
            + simd_fp() + loads_stores() + data_processing() + mops() + uretprobes() + branch_outcomes())


# op0 (bits 28:25) of the A64 top-level decode: (mask, value) of the group a random word is drawn from
GROUPS = {"uniform": (0, 0), "load-store": (0x0A000000, 0x08000000), "branch": (0x1C000000, 0x14000000)}
MAX_SAMPLE = 2000  # each case boots nothing but runs twice under TCG (~50 ms): 2000 add about 100 s


def direct_branch_offset(word: int) -> int | None:
    """The byte offset of b/bl, b.cond/bc.cond, cbz/cbnz or tbz/tbnz, None for any other word."""
    if word & 0x7C000000 == 0x14000000:
        imm, bits = word & 0x3FFFFFF, 26
    elif word & 0xFF000000 == 0x54000000 or word & 0x7E000000 == 0x34000000:
        imm, bits = (word >> 5) & 0x7FFFF, 19
    elif word & 0x7E000000 == 0x36000000:
        imm, bits = (word >> 5) & 0x3FFF, 14
    else:
        return None
    return (imm - (1 << bits) if imm >> (bits - 1) else imm) * 4


def loops_back(word: int) -> bool:
    """A branch to the probe itself or into the entry code before it, which runs on into the probe
    again: an endless loop on both sides that tells nothing (``b pad_back``, at P - 4, is the exit)."""
    off = direct_branch_offset(word)
    return off is not None and -L.P <= off <= 0 and off != -4


def random_cases(n: int, seed: int) -> list[Case]:
    """``n`` words from ``seed``, the groups taken in turn: any 32-bit word, the load/store group and the
    branch/exception/system group; each starts with random flags, so conditional branches go both ways."""
    rng = random.Random(seed)
    out = []
    names = list(GROUPS)
    while len(out) < n:
        group = names[len(out) % len(names)]
        mask, value = GROUPS[group]
        word = (rng.getrandbits(32) & ~mask) | value
        nzcv = rng.randrange(16) << 28
        if not loops_back(word):
            out.append(Case(f"random {group}", word, nzcv=nzcv))
    return out


def regs_for(case: Case, base: int) -> dict[str, int]:
    regs = L.default_regs(base)
    regs.update(dict(case.regs))
    return regs
