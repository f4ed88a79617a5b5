"""Programs that test return probes on x86-64, and the checks built on them.

The register round trip is modelled on ``uretprobe_regs`` in the kernel selftest
tools/testing/selftests/bpf/prog_tests/uprobe_syscall.c, which records whatever the registers
hold before and after calling ``uretprobe_regs_trigger`` (``movq $0xdeadbeef,%rax; ret``, return-
probed at its entry). The lab's version loads random values into every general-purpose register
(and the arithmetic flags) first, calls a probed function that is only a ``ret``, and stores what
the caller sees afterwards. With a transparent uretprobe the two sets are
equal; with the broken teaching trampoline (no saves around ``syscall``) rcx and r11 differ.

The other programs give the core's return-instance rules something to chew on: a recursion
deeper than MAX_URETPROBE_DEPTH, a setjmp/longjmp-style unwind over probed frames, a tail call
(chained instances), a caller that survives a consumer moving sp (sys_uretprobe's iret path),
and a direct ``syscall`` with the uretprobe number from outside the trampoline.

Data lives in one read-write page (``[heap]`` at DATA_BASE); ``make_uretprobe_process`` maps it.
"""
from __future__ import annotations

import random
from functools import lru_cache

from ..program import Assembler, Program
from ..uprobes import UprobeConsumer, uprobe_register
from . import asm
from .constants import __NR_uretprobe
from .process import GPRS, X86Process

TEXT_BASE = 0x500000
DATA_BASE = 0x600000
DATA_SIZE = 0x1000
PAD = asm.INT3

# Layout of the register buffer: before[] at 0, after[] at AFTER; one u64 per register.
REG_ORDER = ["ax", "cx", "dx", "bx", "bp", "si", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "di"]
SLOT = {name: 8 * i for i, name in enumerate(REG_ORDER)}
SLOT["flags"] = 8 * len(REG_ORDER)
AFTER = 0x100
# The flags a user program can set with popf and that no instruction here changes:
# CF PF AF ZF SF DF OF (never TF: that would single-step the program).
USER_FLAGS = 0x1 | 0x4 | 0x10 | 0x40 | 0x80 | 0x400 | 0x800
X86_NAME = {"ax": "rax", "cx": "rcx", "dx": "rdx", "bx": "rbx", "bp": "rbp", "si": "rsi", "di": "rdi",
            "sp": "rsp", **{f"r{i}": f"r{i}" for i in range(8, 16)}}


def emit_regs_roundtrip(a: Assembler) -> None:
    """regs_roundtrip(buf): registers <- buf.before, call uretprobe_regs_trigger, buf.after <- registers."""
    a.function("regs_roundtrip")
    a.emit(asm.push("rdi"))  # the buffer pointer, for after the call
    a.emit(asm.mov_load("rax", "rdi", SLOT["flags"]) + asm.push("rax") + asm.POPFQ)
    for name in REG_ORDER:  # rdi last: it is the base register
        a.emit(asm.mov_load(X86_NAME[name], "rdi", SLOT[name]))
    asm.call(a, "uretprobe_regs_trigger")
    a.emit(asm.push("rdi"))  # what the caller got in rdi; then the buffer pointer back in rdi
    a.emit(asm.mov_load("rdi", "rsp", 8))
    for name in REG_ORDER[:-1]:
        a.emit(asm.mov_store("rdi", AFTER + SLOT[name], X86_NAME[name]))
    a.emit(asm.PUSHFQ + asm.pop("rax") + asm.mov_store("rdi", AFTER + SLOT["flags"], "rax"))
    a.emit(asm.pop("rax") + asm.mov_store("rdi", AFTER + SLOT["di"], "rax"))
    a.emit(asm.pop("rdi") + asm.RET)
    a.align(16, PAD)
    # The selftest's trigger is movq $0xdeadbeef,%rax; ret, probed at its entry; the lab's holds one ret
    # (the probe sits on that ret), so rax keeps the random value the round trip loaded.
    a.function("uretprobe_regs_trigger")
    a.emit(asm.RET)
    a.align(16, PAD)
    a.function("uretprobe_regs_trigger_nop")  # the same with a nop first (emulated, not stepped)
    a.emit(asm.NOP + asm.RET)


def emit_recurse(a: Assembler) -> None:
    """recurse(n): calls itself until n == 1; each frame returns its own n."""
    a.function("recurse")
    a.emit(asm.push("rbx") + asm.mov_rr("rbx", "rdi") + asm.dec("rdi"))
    asm.jcc8(a, "jz", "recurse.base")
    asm.call(a, "recurse")
    a.label("recurse.base")
    a.emit(asm.mov_rr("rax", "rbx") + asm.pop("rbx") + asm.RET)


def emit_longjmp(a: Assembler) -> None:
    """lj_outer -> lj_a -> lj_b -> lj_longjmp, which restores lj_outer's sp and jumps to lj_landing.

    lj_outer is the setjmp: it keeps its stack pointer in r15 (callee-saved, untouched below).
    lj_a and lj_b never return: their frames, and any return instances for them, are skipped.
    lj_outer returns 1 after the longjmp, 0 if the call chain returned normally (it cannot).
    """
    a.function("lj_outer")
    a.emit(asm.push("rbx") + asm.mov_rr("r15", "rsp") + asm.xor_rr32("rax", "rax"))
    asm.call(a, "lj_a")
    a.label("lj_landing")
    a.emit(asm.pop("rbx") + asm.RET)
    a.align(16, PAD)
    for name, callee in (("lj_a", "lj_b"), ("lj_b", "lj_longjmp")):
        a.function(name)
        a.emit(asm.push("rbp") + asm.mov_rr("rbp", "rsp"))
        asm.call(a, callee)
        a.emit(asm.pop("rbp") + asm.RET)
        a.align(16, PAD)
    a.function("lj_longjmp")
    a.emit(asm.mov_rr("rsp", "r15") + asm.mov_imm32("rax", 1))
    asm.jmp(a, "lj_landing")


def emit_tail_call(a: Assembler) -> None:
    """tail_caller does some work, then jumps (not calls) to tail_callee, which returns 7."""
    a.function("tail_caller")
    a.emit(asm.push("rbp") + asm.pop("rbp"))
    asm.jmp(a, "tail_callee")
    a.align(16, PAD)
    a.function("tail_callee")
    a.emit(asm.NOP + asm.mov_imm32("rax", 7) + asm.RET)


def emit_sp_caller(a: Assembler) -> None:
    """sp_caller(buf): rcx, r11 <- buf[0], buf[1]; call sp_target; buf[2], buf[3] <- rcx, r11.

    It keeps its own sp in r12, so it survives a return consumer that moves sp.
    """
    a.function("sp_caller")
    a.emit(asm.push("rbx") + asm.push("r12") + asm.mov_rr("rbx", "rdi") + asm.mov_rr("r12", "rsp"))
    a.emit(asm.mov_load("rcx", "rbx", 0) + asm.mov_load("r11", "rbx", 8))
    asm.call(a, "sp_target")
    a.emit(asm.mov_rr("rsp", "r12"))
    a.emit(asm.mov_store("rbx", 16, "rcx") + asm.mov_store("rbx", 24, "r11"))
    a.emit(asm.pop("r12") + asm.pop("rbx") + asm.RET)
    a.align(16, PAD)
    a.function("sp_target")
    a.emit(asm.NOP + asm.mov_imm32("rax", 5) + asm.RET)


def emit_direct_syscall(a: Assembler) -> None:
    """uretprobe_syscall_direct(): the uretprobe syscall from ordinary text (must get SIGILL on 6.11+).

    sigill_outer calls it from inside a probed function, so a return instance is pending.
    """
    a.function("uretprobe_syscall_direct")
    a.emit(asm.mov_imm_sx("rax", __NR_uretprobe) + asm.SYSCALL + asm.RET)
    a.align(16, PAD)
    a.function("sigill_outer")
    a.emit(asm.NOP)
    asm.call(a, "uretprobe_syscall_direct")
    a.emit(asm.RET)


def emit_stepper_target(a: Assembler) -> None:
    """stepper_caller: recognisable rcx/r11, then a call to stepper_target (returns 0x42)."""
    a.function("stepper_caller")
    a.emit(asm.mov_imm64("rcx", 0xCCCC_CCCC) + asm.mov_imm64("r11", 0x1111_1111))
    asm.call(a, "stepper_target")
    a.emit(asm.RET)
    a.align(16, PAD)
    a.function("stepper_target")
    a.emit(asm.NOP + asm.mov_imm32("rax", 0x42) + asm.RET)


@lru_cache(maxsize=None)
def uretprobe_program(base: int = TEXT_BASE) -> Program:
    a = Assembler("x86_64", base)
    for emit in (emit_regs_roundtrip, emit_recurse, emit_longjmp, emit_tail_call, emit_sp_caller,
                 emit_direct_syscall, emit_stepper_target):
        emit(a)
        a.align(16, PAD)
    a.end_function()
    return a.link()


def make_uretprobe_process(kernel=None, **options) -> X86Process:
    """An X86Process with the test program loaded and a read-write data page at DATA_BASE."""
    proc = X86Process(kernel, **options)
    proc.load(uretprobe_program(), "/lab/uretprobe_tests")
    proc.map("[heap]", DATA_BASE, DATA_SIZE, "rw-p")
    return proc


def random_registers(seed: int | None = None) -> dict[str, int]:
    """Random 64-bit values for every GPR the round trip loads, plus random arithmetic flags."""
    rng = random.Random(seed)
    values = {name: rng.getrandbits(64) for name in REG_ORDER}
    values["flags"] = (rng.getrandbits(32) & USER_FLAGS) | 0x2  # bit 1 always reads as 1
    return values


def regs_roundtrip(proc: X86Process, values: dict[str, int]) -> dict[str, int]:
    """Run regs_roundtrip with ``values`` and return what the caller saw after the probed call."""
    for name in REG_ORDER + ["flags"]:
        proc.write_u64(DATA_BASE + SLOT[name], values[name])
    proc.call("regs_roundtrip", DATA_BASE)
    after = {name: proc.read_u64(DATA_BASE + AFTER + SLOT[name]) for name in REG_ORDER}
    after["flags"] = proc.read_u64(DATA_BASE + AFTER + SLOT["flags"]) & (USER_FLAGS | 0x2)
    return after


class RegsRecorder(UprobeConsumer):
    """A return consumer that keeps every register it was shown, and may change some of them."""

    def __init__(self, changes: dict[str, int] | None = None, name: str = "regs-recorder"):
        self.changes = dict(changes or {})
        self.seen: list[dict[str, int]] = []
        self.funcs: list[int] = []
        super().__init__(ret_handler=self._ret, name=name)

    def _ret(self, regs, func: int) -> None:
        self.seen.append({n: regs.get(n) for n in GPRS + ["ip", "flags"]})
        self.funcs.append(func)
        for name, value in self.changes.items():
            regs.set(name, value)


def return_consumer_regs(kernel=None) -> tuple[X86Process, dict[str, int]]:
    """One call of ``stepper_caller`` with a return probe on ``stepper_target`` (the chapter's stepper): the
    process and the registers its return consumer was shown."""
    proc = make_uretprobe_process(kernel)
    rec = RegsRecorder()
    uprobe_register(proc, "stepper_target", rec)
    proc.call("stepper_caller")
    return proc, rec.seen[0]


def check_registers_equal(kernel=None, uretprobe_saves_regs: bool = True, seed: int | None = 0,
                          probe: bool = True) -> dict:
    """The selftest's "registers equal" check: {register: (loaded, seen by caller)} for each mismatch.

    An empty dict means the return probe was invisible to the program. ``seen_by_consumer`` is
    added when a consumer ran, with its mismatches against the values the function returned with.
    """
    proc = make_uretprobe_process(kernel, uretprobe_saves_regs=uretprobe_saves_regs)
    consumer = RegsRecorder()
    if probe:
        uprobe_register(proc, "uretprobe_regs_trigger", consumer)
    values = random_registers(seed)
    after = regs_roundtrip(proc, values)
    diff = {n: (values[n], after[n]) for n in values if values[n] != after[n]}
    if consumer.seen:
        seen = consumer.seen[-1]
        bad = {n: (values[n], seen[n]) for n in REG_ORDER if seen[n] != values[n]}
        if bad:
            diff["seen_by_consumer"] = bad
    return diff
