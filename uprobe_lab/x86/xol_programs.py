"""Two tiny programs whose out-of-line step needs a fixup (arch/x86/kernel/uprobes.c): a RIP-relative load,
which the XOL slot runs through a scratch register, and a ``syscall``, whose rcx/r11 the step leaves pointing
into the slot. Chapter 01 shows them; tests/test_x86_vex_riprel.py checks them. Each runs plain or probed."""
from __future__ import annotations

from ..uprobes import CountingConsumer, uprobe_register
from .constants import __NR_getpgid
from .process import X86Process

TEXT = 0x400000
DATA = 0x401000
RIPREL_LOAD = bytes.fromhex("488b05f90f0000")  # mov rax, [rip+0xff9]: the quadword at DATA
DATA_WORD = 0x1122334455667788
SCRATCH_SI = 0x5151  # rsi before the run: the slot borrows rsi and must give it back
SYSCALL_THEN_LEA = bytes.fromhex("0f05488d1500000000")  # syscall (getpgid, 121); lea rdx, [rip]
SYSCALL_END = TEXT + len(SYSCALL_THEN_LEA)
SYSCALL_FLAGS = 0x202  # IF and the always-one bit: the flags the syscall is made with


def riprel_process(code: bytes = RIPREL_LOAD, kernel: str = "6.18") -> X86Process:
    """``code`` then ``ret`` at TEXT, a page of DATA_WORDs at DATA."""
    proc = X86Process(kernel)
    proc.map("/lab/riprel", TEXT, 0x1000, "r-xp", code + b"\xc3")
    proc.map("[data]", DATA, 0x1000, "rw-p", DATA_WORD.to_bytes(8, "little") * 512)
    return proc


def riprel_run(probed: bool, code: bytes = RIPREL_LOAD, kernel: str = "6.18"):
    """Run ``code`` once with rsi = SCRATCH_SI, a counting uprobe on it if ``probed``: (process, uprobe or None)."""
    proc = riprel_process(code, kernel)
    regs = proc.regs()
    regs.si = SCRATCH_SI
    regs.flush()
    probe = uprobe_register(proc, TEXT, CountingConsumer()) if probed else None
    proc.run(TEXT, TEXT + len(code))
    return proc, probe


def syscall_run(probed: bool, kernel: str = "6.18"):
    """``syscall; lea rdx, [rip]`` with IF set, a counting uprobe on the syscall if ``probed``: (process, result).
    rdx tells where the lea ran (its address + 7)."""
    proc = X86Process(kernel)
    proc.map("/lab/sc", TEXT, 0x1000, "r-xp", SYSCALL_THEN_LEA + b"\xcc")
    regs = proc.regs()
    regs.ax, regs.flags = __NR_getpgid, SYSCALL_FLAGS
    regs.flush()
    if probed:
        uprobe_register(proc, TEXT, CountingConsumer())
    result = proc.run(TEXT, SYSCALL_END)
    return proc, result
