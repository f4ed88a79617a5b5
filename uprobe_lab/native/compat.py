"""A 32-bit (compat) task on this x86-64 kernel: the uretprobe trampoline it gets, and what its hits cost.

arch/x86/kernel/uprobes.c ``arch_uretprobe_trampoline()`` hands the uretprobe syscall trampoline only to
a task in 64-bit mode (``user_64bit_mode(regs)``); a compat task's slot 0 of ``[uprobes]`` is still the
single ``int3`` every task had before 6.11. So on a 6.11+ kernel a 32-bit program returns from a
uretprobe the old way, through a second exception, next to a 64-bit program that returns through the
syscall: both paths, measured on one machine.

The program (:func:`compat_program`) is a static i386 ELF built here, a dozen hand-encoded instructions
(tests check each with Capstone): it waits for one byte on stdin (so the probe is attached before
the loop starts), reads its thread CPU clock, calls ``target`` (``nop; ret``) or ``peek`` (the same,
but it stores the return address it was called with) N times, reads the clock again, and writes the
two clock readings, the last return address ``peek`` saw and the byte at that address to stdout, then
waits for a second byte before it exits (so its /proc/<pid>/maps can be read). With a uretprobe on
``peek`` that address is the trampoline in ``[uprobes]``.

What the lab leaves out: the i386 vDSO (clock_gettime is a plain int 0x80), compat tasks' other
differences (4-byte return addresses, int 0x80 syscalls) beyond the trampoline.
"""
from __future__ import annotations

import contextlib
import math
import os
import struct
import subprocess
from dataclasses import dataclass

import pandas as pd

from .bpf import BpfCounter
from .code import scratch_dir
from ..sites import mapping_at
from .errors import NativeUnavailable
from .host import parse_maps
from .perf import bench_trigger_event

BASE = 0x08048000
DATA = 0x0804A000  # one page of zeroed data, apart from the code page the probe writes into
T0, T1, RET_SLOT, GO_BYTE = DATA, DATA + 8, DATA + 16, DATA + 20
REPORT_BYTES = 20  # t0 (timespec32), t1 (timespec32), the return address peek saw
CLOCK_THREAD_CPUTIME_ID = 3
# i386 syscall numbers (arch/x86/entry/syscalls/syscall_32.tbl)
NR_EXIT, NR_READ, NR_WRITE, NR_CLOCK_GETTIME = 1, 3, 4, 265
EHDR_SIZE, PHDR_SIZE = 52, 32
MAX_CALLS = 1 << 32  # the loop counts in esi
EXEC_FAILED = "this kernel does not run 32-bit programs (CONFIG_IA32_EMULATION off, or ia32_emulation=0 on its command line)"


def _u32(v: int) -> bytes:
    return struct.pack("<I", v & 0xFFFFFFFF)


def mov_imm(reg: str, value: int) -> bytes:
    """mov r32, imm32 (B8+r)."""
    return bytes([0xB8 + ["eax", "ecx", "edx", "ebx", "esp", "ebp", "esi", "edi"].index(reg)]) + _u32(value)


INT80 = b"\xcd\x80"
XOR_EBX_EBX = b"\x31\xdb"
DEC_ESI = b"\x4e"
NOP, RET = b"\x90", b"\xc3"
MOV_EAX_ESP0 = b"\x8b\x04\x24"  # mov eax, [esp]: the return address this call pushed


def mov_ecx_from(addr: int) -> bytes:
    return b"\x8b\x0d" + _u32(addr)  # mov ecx, [addr]


def mov_mem_from_eax(addr: int) -> bytes:
    return b"\xa3" + _u32(addr)  # mov [addr], eax


def syscall3(nr: int, ebx: bytes, ecx: bytes, edx: bytes = b"") -> bytes:
    return mov_imm("eax", nr) + ebx + ecx + edx + INT80


@dataclass(frozen=True)
class CompatProgram:
    image: bytes  # the whole ELF file
    symbols: dict  # name -> address (target, peek, loop, _start)

    def offset(self, name: str) -> int:
        """File offset of a symbol: what a uprobe on this file names."""
        return self.symbols[name] - BASE


def compat_program(calls: int, func: str = "target") -> CompatProgram:
    """The i386 program that calls ``func`` (``target`` or ``peek``) ``calls`` times (see the module doc)."""
    if not 1 <= calls < MAX_CALLS:
        raise ValueError(f"calls must be in 1 .. 2**32-1 (the loop counts in esi), got {calls}")
    start = BASE + EHDR_SIZE + 2 * PHDR_SIZE  # code follows the ELF header and two program headers
    head = (syscall3(NR_READ, XOR_EBX_EBX, mov_imm("ecx", GO_BYTE), mov_imm("edx", 1))
            + syscall3(NR_CLOCK_GETTIME, mov_imm("ebx", CLOCK_THREAD_CPUTIME_ID), mov_imm("ecx", T0))
            + mov_imm("esi", calls))
    loop = start + len(head)
    tail = (syscall3(NR_CLOCK_GETTIME, mov_imm("ebx", CLOCK_THREAD_CPUTIME_ID), mov_imm("ecx", T1))
            + syscall3(NR_WRITE, mov_imm("ebx", 1), mov_imm("ecx", T0), mov_imm("edx", REPORT_BYTES))
            + syscall3(NR_WRITE, mov_imm("ebx", 1), mov_ecx_from(RET_SLOT), mov_imm("edx", 1))
            + syscall3(NR_READ, XOR_EBX_EBX, mov_imm("ecx", GO_BYTE), mov_imm("edx", 1))  # stay for /proc/pid/maps
            + syscall3(NR_EXIT, XOR_EBX_EBX, b""))
    body_len = 5 + len(DEC_ESI) + 2  # call rel32; dec esi; jnz rel8
    target = loop + body_len + len(tail)
    symbols = {"_start": start, "loop": loop, "target": target, "peek": target + len(NOP + RET)}
    if func not in ("target", "peek"):
        raise ValueError(f"func is target or peek, got {func!r}")
    call = b"\xe8" + _u32(symbols[func] - (loop + 5))
    jnz = b"\x75" + bytes([-body_len & 0xFF])  # back to loop
    funcs = NOP + RET + NOP + MOV_EAX_ESP0 + mov_mem_from_eax(RET_SLOT) + RET
    code = head + call + DEC_ESI + jnz + tail + funcs
    size = EHDR_SIZE + 2 * PHDR_SIZE + len(code)
    ehdr = (b"\x7fELF" + bytes([1, 1, 1, 0]) + bytes(8)  # ELFCLASS32, little-endian, SysV
            + struct.pack("<HHIIIIIHHHHHH", 2, 3, 1, start, EHDR_SIZE, 0, 0, EHDR_SIZE, PHDR_SIZE, 2, 0, 0, 0))
    pt_load = 1
    text = struct.pack("<IIIIIIII", pt_load, 0, BASE, BASE, size, size, 5, 0x1000)  # r-x, the whole file
    data = struct.pack("<IIIIIIII", pt_load, 0, DATA, DATA, 0, 0x1000, 6, 0x1000)  # rw-, zero-filled
    return CompatProgram(ehdr + text + data + code, symbols)


@dataclass
class CompatRun:
    """What one run of the program reported: calls, thread CPU ns spent in the loop, the return address
    ``peek`` last saw (0 when it was not called), the byte there, the mapping holding it, and ``hits``: its
    consumers' runs (calls x consumers)."""

    calls: int
    loop_ns: int
    ret_addr: int
    ret_byte: int | None
    ret_mapping: str
    hits: int

    @property
    def mops(self) -> float:
        return self.calls * 1e3 / max(self.loop_ns, 1)


class CompatBench:
    """``with CompatBench(calls, func, probe) as bench: bench.run()``: the i386 program written once and
    its uprobe or uretprobe (``probe``, on ``consumers`` perf events with a BPF consumer each) on ``func``
    attached once, for the whole block; each :meth:`run` is one process. The probe sits on the file for every
    process (:func:`.perf.bench_trigger_event`, as the kernel bench attaches: the uprobe then fires in every
    task mapping the file, and its BPF program counts each hit whichever CPU the task is on), so a run pays no attach and no
    detach, which waits for the kernel (about 0.1 s). The probe, every process and the scratch file are
    released on every way out, Ctrl-C included."""

    def __init__(self, calls: int, func: str = "target", probe: str | None = None, consumers: int = 1):
        if probe not in (None, "uprobe", "uretprobe"):
            raise ValueError(f"probe is None, 'uprobe' or 'uretprobe', got {probe!r}")
        if consumers < 1:
            raise ValueError(f"consumers must be >= 1, got {consumers}")
        self.program = compat_program(calls, func)
        self.calls, self.func, self.probe, self.consumers = calls, func, probe, consumers
        self._stack = contextlib.ExitStack()
        self._counter = None
        self.path = ""

    def __enter__(self) -> "CompatBench":
        try:
            d = self._stack.enter_context(scratch_dir())
            self.path = os.path.join(d, "compat_bench")
            with open(self.path, "wb") as f:
                f.write(self.program.image)
            os.chmod(self.path, 0o700)
            if self.probe:
                self._counter = self._stack.enter_context(BpfCounter())
                for _ in range(self.consumers):  # one perf event each, as the 64-bit consumer scan has
                    event = self._stack.enter_context(bench_trigger_event(
                        self.path, self.program.offset(self.func), retprobe=self.probe == "uretprobe"))
                    self._counter.attach(event.fd)
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()

    def run(self) -> CompatRun:
        """Run the program once and return what it reported, with the consumers' runs its hits took."""
        before = self._counter.count() if self._counter else 0
        with contextlib.ExitStack() as stack:
            try:
                proc = subprocess.Popen([self.path], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            except OSError as err:
                raise NativeUnavailable(f"cannot run a 32-bit program here: {EXEC_FAILED} ({err.strerror})") from None
            stack.callback(_reap, proc)
            proc.stdin.write(b"g")
            proc.stdin.flush()
            report = proc.stdout.read(REPORT_BYTES)
            if len(report) < REPORT_BYTES:
                raise RuntimeError(f"the 32-bit program stopped early (exit status {proc.wait()})")
            byte = proc.stdout.read(1) if self.func == "peek" else b""  # target stores no address: nothing to read
            s0, n0, s1, n1, ret = struct.unpack("<IIIII", report)
            with open(f"/proc/{proc.pid}/maps") as f:
                where = mapping_at(parse_maps(f.read()), ret) if ret else None
            hits = self._counter.count() - before if self._counter else 0
            proc.stdin.write(b"x")
            proc.stdin.flush()
        return CompatRun(self.calls, (s1 - s0) * 1_000_000_000 + n1 - n0, ret, byte[0] if byte else None,
                         where.name if where else "", hits)


def run_compat(calls: int, func: str = "target", probe: str | None = None) -> CompatRun:
    """Run the i386 program once, with a uprobe or uretprobe (``probe``) on ``func`` carrying a BPF
    consumer, and return what it reported (one :meth:`CompatBench.run`)."""
    with CompatBench(calls, func, probe) as bench:
        return bench.run()


def compat_reason() -> str | None:
    """Why 32-bit programs cannot run here, or None when they can (one unprobed run of the program)."""
    try:
        run_compat(1)
    except NativeUnavailable as err:
        return str(err)
    return None


def _reap(proc: subprocess.Popen) -> None:
    """Let the program go (or kill it) and wait for it, so no process outlives its probe."""
    with contextlib.suppress(OSError):
        proc.stdin.close()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    proc.stdout.close()


RETURN_PATH_ROWS = {"64-bit task: syscall": ("uprobe-nop", "uretprobe-nop"),
                    "32-bit task: int3": ("uprobe-nop-compat", "uretprobe-nop-compat")}


def return_paths(rows) -> pd.DataFrame:
    """What a uretprobe's return costs on the machine that measured ``rows`` (price-bench rows: a list of
    dicts or a DataFrame with bench, consumers, mops and optionally rel_err): per task, ns per hit of the
    uprobe and of the uretprobe on the same target, their difference (the return path) and its error
    from the two rows' errors. A pair with a row missing gets NaN and says which."""
    frame = pd.DataFrame(rows)
    if "consumers" in frame:
        frame = frame[frame["consumers"].fillna(1).astype(int) == 1]
    ones = frame.drop_duplicates("bench").set_index("bench")
    out = []
    for task, pair in RETURN_PATH_ROWS.items():
        missing = [b for b in pair if b not in ones.index]
        if missing:
            out.append({"task: return through": task, "uprobe ns": math.nan, "uretprobe ns": math.nan,
                        "return path ns": math.nan, "+- ns": math.nan, "note": f"no {', '.join(missing)} row"})
            continue
        ns = [1000 / float(ones.loc[b, "mops"]) for b in pair]
        err = [n * float(ones.loc[b, "rel_err"]) if "rel_err" in ones else 0.0 for n, b in zip(ns, pair)]
        out.append({"task: return through": task, "uprobe ns": ns[0], "uretprobe ns": ns[1],
                    "return path ns": ns[1] - ns[0], "+- ns": math.hypot(*err), "note": ""})
    return pd.DataFrame(out)
