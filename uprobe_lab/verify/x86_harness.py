"""The machine code that runs one instruction from a known state and records the state after it.

Everything lives at fixed addresses below 2 GiB, so the harness addresses its buffers with
absolute disp32 operands and needs no relocation:

* CODE (a file, mapped r-x): the entry routine, the probed SITE, landing pads around it, the
  common store routine, a signal handler and its exit path. The site is file-backed because a
  uprobe names an inode and an offset.
* DATA (rw): 64 KiB of patterned memory that every general register points into, with the test
  stack at its top filled with the address of RET_PAD (so a ``ret`` lands somewhere known).
* CTRL (rw): the input and output register blocks (in the order of ucontext's gregs, so the
  signal handler can copy them with one ``rep movsq``), XSAVE areas and scratch stacks.

One run: entry saves the caller's registers and extended state, restores the test's extended
state (XRSTOR of TEMPLATE), loads the opmask registers, flags and all 16 GPRs, and jumps to SITE.
The instruction falls through into FALL (right after it, as in real code: the kernel's XOL slot
gets those bytes too) or branches to a pad; every pad stores rax, puts its own address in eax and
jumps to COMMON, which stores the rest and XSAVEs. A signal instead goes to ``sig_handler``, which
copies the interrupted registers out of the ucontext and resumes at ``sig_exit``. The entry
returns 0 after a normal run, 1 after a signal.
"""
from __future__ import annotations

import struct

CODE = 0x1000_0000
CODE_SIZE = 0x2000
DATA = CODE + CODE_SIZE
DATA_SIZE = 0x10000
CTRL = 0x1010_0000
CTRL_SIZE = 0x20000

SITE = CODE + 0x800
PAD_BACK = SITE - 0x40  # a backward branch target within rel8 reach
PAD_FWD = SITE + 0x40  # a forward one
RET_PAD = CODE + 0xA00  # what the test stack holds
COMMON = CODE + 0xB00
SIG_HANDLER = CODE + 0xC00
SIG_EXIT = CODE + 0xD00
SAVE_TEMPLATE = CODE + 0xE00
ENTRY = CODE
PADS = {"fall": None, "back": PAD_BACK, "fwd": PAD_FWD, "ret": RET_PAD}

# ucontext_t's gregs order (sys/ucontext.h REG_R8 .. REG_EFL); rip holds the landing pad after a
# normal run and the interrupted rip after a signal.
GREGS = ["r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "rdi", "rsi", "rbp", "rbx", "rdx", "rax",
         "rcx", "rsp", "rip", "eflags"]
GPRS = [r for r in GREGS if r not in ("rip", "eflags")]
REGNUM = {"rax": 0, "rcx": 1, "rdx": 2, "rbx": 3, "rsp": 4, "rbp": 5, "rsi": 6, "rdi": 7,
          **{f"r{i}": i for i in range(8, 16)}}

IN_REGS = CTRL
OUT_REGS = CTRL + 0x100
OUT_SIGNO = CTRL + 0x200
OUT_SIGADDR = CTRL + 0x208
SAVE_RSP = CTRL + 0x210
CSTATE = CTRL + 0x1000  # the caller's extended state
TEMPLATE = CTRL + 0x2000  # the test's extended state
OUT_XSAVE = CTRL + 0x3000
IN_XSAVE = CTRL + 0x4000  # the test's extended state just before the instruction
XSAVE_SIZE = 0x1000
# The components every XSAVE/XRSTOR here asks for: x87, SSE, AVX, MPX, opmask, ZMM_Hi256, Hi16_ZMM and PKRU.
# In the standard format they end at 2696 bytes (PKRU at 2688), inside XSAVE_SIZE; asking for all (-1)
# would add AMX's 8 KB of tile data on a CPU that has it and overrun the next area.
XSAVE_RFBM = 0x2FF
TMP_STACK = CTRL + 0x6000
ALT_STACK = CTRL + 0x8000
ALT_STACK_SIZE = CTRL_SIZE - 0x8000

UCONTEXT_GREGS = 40  # offsetof(ucontext_t, uc_mcontext.gregs) on x86-64
SIGINFO_ADDR = 16  # offsetof(siginfo_t, si_addr)
X86_EFLAGS_TF = 0x100

STACK_TOP = DATA + 0xE000  # rsp at the start of a run
STACK_FILL = 0x400  # bytes above rsp holding RET_PAD
OPMASKS = [0x0123456789ABCDEF ^ (k * 0x1111111111111111) for k in range(8)]


def out_offset(name: str) -> int:
    return 8 * GREGS.index(name)


def _abs(addr: int) -> bytes:  # SIB with no base and no index: [disp32]
    return b"\x25" + struct.pack("<i", addr)


def mov_load(reg: str, addr: int) -> bytes:
    """mov reg, qword [addr] (REX.W 8b /r)."""
    r = REGNUM[reg]
    return bytes([0x48 | (4 if r >= 8 else 0), 0x8B, 0x04 | ((r & 7) << 3)]) + _abs(addr)


def mov_store(addr: int, reg: str) -> bytes:
    """mov qword [addr], reg (REX.W 89 /r)."""
    r = REGNUM[reg]
    return bytes([0x48 | (4 if r >= 8 else 0), 0x89, 0x04 | ((r & 7) << 3)]) + _abs(addr)


def push(reg: str) -> bytes:
    r = REGNUM[reg]
    return (b"\x41" if r >= 8 else b"") + bytes([0x50 + (r & 7)])


def pop(reg: str) -> bytes:
    r = REGNUM[reg]
    return (b"\x41" if r >= 8 else b"") + bytes([0x58 + (r & 7)])


def mov_rsp_imm(addr: int) -> bytes:
    return b"\x48\xc7\xc4" + struct.pack("<i", addr)  # mov rsp, imm32 (sign-extended)


def mov_eax_imm(value: int) -> bytes:
    return b"\xb8" + struct.pack("<I", value & 0xFFFFFFFF)


def mov_edx_imm(value: int) -> bytes:
    return b"\xba" + struct.pack("<I", value & 0xFFFFFFFF)


def rfbm() -> bytes:
    """edx:eax = XSAVE_RFBM, the requested-feature bitmap of the XSAVE/XRSTOR that follows."""
    return mov_eax_imm(XSAVE_RFBM) + mov_edx_imm(XSAVE_RFBM >> 32)


def xsave64(addr: int) -> bytes:
    return b"\x48\x0f\xae\x24" + _abs(addr)  # 0f ae /4


def xrstor64(addr: int) -> bytes:
    return b"\x48\x0f\xae\x2c" + _abs(addr)  # 0f ae /5


def mov_rax_imm64(value: int) -> bytes:
    return b"\x48\xb8" + struct.pack("<Q", value)


def kmovq_k_rax(k: int) -> bytes:
    return b"\xc4\xe1\xfb\x92" + bytes([0xC0 | (k << 3)])  # VEX.L0.F2.0F.W1 92 /r: kmovq k, rax


def jmp_rel32(src: int, dst: int) -> bytes:
    return b"\xe9" + struct.pack("<i", dst - (src + 5))


PUSHFQ, POPFQ, POP_RAX, CLD, RET = b"\x9c", b"\x9d", b"\x58", b"\xfc", b"\xc3"
CALLEE_SAVED = ["rbx", "rbp", "r12", "r13", "r14", "r15"]


def entry_code(opmask: bool) -> bytes:
    code = b"".join(push(r) for r in CALLEE_SAVED)
    code += mov_store(SAVE_RSP, "rsp")
    code += rfbm() + xsave64(CSTATE) + xrstor64(TEMPLATE)
    if opmask:
        for k, value in enumerate(OPMASKS):
            code += mov_rax_imm64(value) + kmovq_k_rax(k)
    code += rfbm() + xsave64(IN_XSAVE)  # the opmask loads clobbered rax
    code += mov_rsp_imm(TMP_STACK) + b"\xff\x34" + _abs(IN_REGS + out_offset("eflags")) + POPFQ  # push [..]; popfq
    for reg in GPRS:
        code += mov_load(reg, IN_REGS + out_offset(reg))  # rsp last but one, rcx/rsp order is irrelevant
    return code + jmp_rel32(ENTRY + len(code), SITE)


def pad_code(addr: int) -> bytes:
    """Store rax, name this pad in eax, go to COMMON (18 bytes; the same shape for every pad)."""
    head = mov_store(OUT_REGS + out_offset("rax"), "rax") + mov_eax_imm(addr)
    return head + jmp_rel32(addr + len(head), COMMON)


def tail_code(result: int) -> bytes:
    """XSAVE the test state, give the caller its own back, return ``result``."""
    code = rfbm() + xsave64(OUT_XSAVE) + xrstor64(CSTATE)
    code += mov_load("rsp", SAVE_RSP) + b"".join(pop(r) for r in reversed(CALLEE_SAVED))
    return code + CLD + mov_eax_imm(result) + RET


def common_code() -> bytes:
    code = mov_store(OUT_REGS + out_offset("rip"), "rax")
    code += b"".join(mov_store(OUT_REGS + out_offset(r), r) for r in GPRS if r != "rax")
    code += mov_rsp_imm(TMP_STACK) + PUSHFQ + POP_RAX + mov_store(OUT_REGS + out_offset("eflags"), "rax")
    return code + tail_code(0)


def sig_handler_code() -> bytes:
    """handler(signo=edi, info=rsi, uc=rdx): copy gregs out, resume at SIG_EXIT on TMP_STACK, TF off."""
    g = UCONTEXT_GREGS
    code = b"\x89\x3c" + _abs(OUT_SIGNO)  # mov [OUT_SIGNO], edi
    code += b"\x48\x8b\x46" + bytes([SIGINFO_ADDR])  # mov rax, [rsi+16]
    code += mov_store(OUT_SIGADDR, "rax")
    code += b"\x48\x8d\x72" + bytes([g])  # lea rsi, [rdx+40]
    code += b"\xbf" + struct.pack("<I", OUT_REGS)  # mov edi, OUT_REGS
    code += b"\xb9" + struct.pack("<I", len(GREGS))  # mov ecx, 18
    code += b"\xf3\x48\xa5"  # rep movsq
    gr = lambda name: struct.pack("<i", g + out_offset(name))
    code += b"\x48\xc7\x82" + gr("rip") + struct.pack("<i", SIG_EXIT)  # mov qword [rdx+rip], SIG_EXIT
    code += b"\x48\xc7\x82" + gr("rsp") + struct.pack("<i", TMP_STACK)  # mov qword [rdx+rsp], TMP_STACK
    code += b"\x48\x81\xa2" + gr("eflags") + struct.pack("<i", ~X86_EFLAGS_TF)  # and qword [rdx+efl], ~TF
    return code + RET


def build_image(insn: bytes, opmask: bool) -> bytes:
    """The CODE file for one instruction: harness, SITE = ``insn`` followed by the FALL pad, pads."""
    image = bytearray(b"\xcc" * CODE_SIZE)  # anything stray traps

    def put(addr: int, code: bytes) -> None:
        image[addr - CODE : addr - CODE + len(code)] = code

    put(ENTRY, entry_code(opmask))
    put(SITE, bytes(insn) + pad_code(SITE + len(insn)))
    for addr in (PAD_BACK, PAD_FWD, RET_PAD):
        put(addr, pad_code(addr))
    put(COMMON, common_code())
    put(SIG_HANDLER, sig_handler_code())
    put(SIG_EXIT, tail_code(1))
    put(SAVE_TEMPLATE, rfbm() + xsave64(TEMPLATE) + RET)
    return bytes(image)


def data_image() -> bytes:
    """DATA's contents at the start of a run: a fixed pattern, RET_PAD above the initial rsp."""
    words = [(i * 0x9E3779B97F4A7C15 + 0x0123456789ABCDEF) & (2**64 - 1) for i in range(DATA_SIZE // 8)]
    data = bytearray(struct.pack(f"<{len(words)}Q", *words))
    lo = STACK_TOP - DATA
    data[lo : lo + STACK_FILL] = struct.pack("<Q", RET_PAD) * (STACK_FILL // 8)
    return bytes(data)


def initial_gprs() -> dict[str, int]:
    """Every GPR points into DATA (a memory operand [reg+disp8] stays inside it), rsp at the test stack."""
    regs = {r: DATA + 0x2000 + 0x800 * REGNUM[r] + 0x40 for r in GPRS}
    regs["rsp"] = STACK_TOP
    return regs


def vector_pattern(i: int) -> bytes:
    """ymm<i>'s 32 bytes at the start of a run."""
    return bytes(((i * 37 + j * 11 + 5) & 0xFF) for j in range(32))
