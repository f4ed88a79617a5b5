"""Kernel claims the emulator's tests make, asked of this host: the same machine code, at the same
address, run under real uprobes and in the lab's model of the host's kernel, leaves the same values.

* red zone (tests/test_nop5.py): 6.18's optimised nop5 ``call``s [uprobes-trampoline], so a leaf's red
  zone loses four words: sys_uprobe (arch/x86/kernel/uprobes.c) reads ``struct uprobe_syscall_args``
  {ax, r11, cx, retaddr} from the trampoline's sp and writes it back there before the trampoline pops
  it: rsp-8 holds the call's return address (site + 5), rsp-16 rcx, rsp-24 r11, rsp-32 rax - the
  values those registers had, so they come back intact - and nothing below rsp-32 is touched. The
  first hit is still the int3 (handle_swbp optimises the site after the consumers ran, then emulates
  the nop): its trap frame is on the kernel stack, so the red zone is intact after it.
* a VEX kmovq (c4 e1 f8 90 c1) optimised as a nop5 (chapter 01's kernel bug), as the lab's hit_verdict says.
* sys_uretprobe from ordinary text (tests/test_uretprobes.py): it force_sig(SIGILL)s unless ip is the
  trampoline's, both with no [uprobes] area at all and with a return instance pending; sys_uprobe
  returns -ENXIO (6.18) to ordinary text even once the process has a [uprobes-trampoline].
* every register across a uretprobe return (the 6.11+ syscall trampoline saves rax, rcx, r11).
* MAX_URETPROBE_DEPTH (include/linux/uprobes.h: 64): prepare_uretprobe hijacks no return address once
  64 instances are live, so of 70 nested calls the 64 entered first (the outer ones) are reported.
* the XOL slot (chapter 01): [uprobes] is one execute-only page at TASK_SIZE - PAGE_SIZE, and a stepped
  hit's slot holds the 16 bytes the kernel copies (a ``ret`` and the 15 bytes after it; the RIP-relative
  load rewritten to go through rsi, whose value the program gets back); a stepped ``syscall`` leaves rcx,
  rdx (the ``lea`` after it, run in the slot too) and r11 (TF set) as the lab does.
* what a consumer is shown: on return (exercises 02.3 and 02.5) ip the return address, sp where the caller
  finds it, rax/rcx/r11 the program's; at an optimised nop5 (chapter 03's sys_uprobe) the site's ip, sp,
  rax, rcx and r11.
* where a fresh process's [uprobes-trampoline] lands (chapter 03: find_nearest_trampoline, the free page
  nearest the call's end), r-x, one page, still there after the probe goes.
* how many stepped hits a process's [uprobes] holds at once (the cheat sheet's 31 on x86-64): one more waits.

Each probe is closed in a ``with`` (Ctrl-C included) and the site checked restored afterwards; the syscall
one runs in a forked child, which the kernel kills.
"""
from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import json
import os
import signal
import struct
import subprocess
import sys
import types
from pathlib import Path

import pytest

from native_support import host_kernel_rules, native, perf_fds, require_bpf
from uprobe_lab.arches import make_process
from uprobe_lab.errors import ProcessKilled
from uprobe_lab.native.bpf import BpfCounter
from uprobe_lab.native.code import NativeCode
from uprobe_lab.native.host import parse_maps, read_any
from uprobe_lab.native.perf import UprobeEvent
from uprobe_lab.own_program import hit_verdict
from uprobe_lab.program import Assembler
from uprobe_lab.sites import calls_uprobe_trampoline
from uprobe_lab.uprobes import (MAX_URETPROBE_DEPTH, CountingConsumer, UprobeConsumer, get_xol_area,
                                uprobe_register, uprobe_unregister)
from uprobe_lab.usdt import ENXIO
from uprobe_lab.x86 import asm, optimize
from uprobe_lab.x86 import xol_programs as xp
from uprobe_lab.x86.constants import MAX_UINSN_BYTES, TASK_SIZE, X86_EFLAGS_TF, __NR_getpgid, __NR_uprobe
from uprobe_lab.x86.programs import emit_at
from uprobe_lab.x86.process import PtRegs, X86Process
from uprobe_lab.x86.uretprobe_programs import (AFTER, DATA_BASE, DATA_SIZE, REG_ORDER, SLOT, USER_FLAGS, RegsRecorder,
                                               emit_direct_syscall, emit_recurse, emit_regs_roundtrip,
                                               random_registers, regs_roundtrip)

pytestmark = [native, pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86-64 machine code")]

NOP5 = asm.X86_NOPS[5]
RAX, RCX, R11 = 0xA0A0_0000_0000_00A0, 0xC1C1_0000_0000_00C1, 0x1111_0000_0000_0011
FILL = [0x5A5A_0000_0000_0000 | k for k in range(1, 7)]  # rsp-8 .. rsp-48 before the site
OUT_WORDS = len(FILL) + 3  # the six red-zone words after the site, then rax, rcx, r11
HITS = 3  # the first takes the int3 (and optimises the site), the others the call
SEEN_REGS = {"sp": "rsp", "ax": "rax", "cx": "rcx", "r11": "r11"}  # pt_regs name: register


def claims_program(base: int = 0x500000):
    """The machine code both sides run: the lab's own uretprobe test functions and a red-zone leaf."""
    a = Assembler("x86_64", base)
    a.function("redzone_nop5")  # redzone_nop5(out): red zone and rax/rcx/r11 set, a nop5, all copied to out
    a.emit(asm.mov_imm64("rax", RAX) + asm.mov_imm64("rcx", RCX) + asm.mov_imm64("r11", R11))
    for k, value in enumerate(FILL, 1):
        a.emit(asm.mov_imm64("rdx", value) + asm.mov_store("rsp", -8 * k, "rdx"))
    a.function("redzone_nop5_site")
    a.emit(NOP5)
    for k in range(1, len(FILL) + 1):
        a.emit(asm.mov_load("rdx", "rsp", -8 * k) + asm.mov_store("rdi", 8 * (k - 1), "rdx"))
    for k, reg in enumerate(("rax", "rcx", "r11")):
        a.emit(asm.mov_store("rdi", 8 * (len(FILL) + k), reg))
    a.emit(asm.RET)
    a.align(16, asm.INT3)
    emit_regs_roundtrip(a)
    a.align(16, asm.INT3)
    # regs_roundtrip loads every register and the flags and restores none: callable from C only like this
    a.function("regs_roundtrip_c")
    callee_saved = ("rbx", "rbp", "r12", "r13", "r14", "r15")
    a.emit(asm.PUSHFQ + b"".join(asm.push(r) for r in callee_saved))
    asm.call(a, "regs_roundtrip")
    a.emit(b"".join(asm.pop(r) for r in reversed(callee_saved)) + asm.POPFQ + asm.RET)
    a.align(16, asm.INT3)
    emit_recurse(a)
    a.align(16, asm.INT3)
    emit_direct_syscall(a)
    a.align(16, asm.INT3)
    a.function("uprobe_syscall_direct")  # syscall 336 (sys_uprobe) from ordinary text
    a.emit(asm.mov_imm_sx("rax", __NR_uprobe) + asm.SYSCALL + asm.RET)
    a.align(16, asm.INT3)
    emit_xol_programs(a)
    a.align(16, asm.INT3)
    emit_seen_programs(a)
    a.end_function()
    return a.link()


def emit_xol_programs(a: Assembler) -> None:
    """Three sites a hit single-steps in an XOL slot, each with what chapter 01 shows of it (xol_programs):

    * xol_ret: ``ret`` and the 15 bytes after it, which the kernel copies into the slot with it;
    * xol_riprel(out): rsi = SCRATCH_SI, chapter 01's ``mov rax, [rip+0xff9]`` (its quadword 0xff9 past
      the instruction), then out = rax, rsi;
    * xol_syscall(out): flags 0x202, chapter 01's ``syscall`` (getpgid) then ``lea rdx, [rip]``, then
      out = rcx, rdx, r11."""
    a.function("xol_ret")
    a.emit(asm.RET + bytes(range(0x41, 0x50)))
    a.align(16, asm.INT3)
    a.function("xol_riprel")
    a.emit(asm.mov_imm64("rsi", xp.SCRATCH_SI))
    a.function("xol_riprel_site")
    site = a.here
    a.emit(xp.RIPREL_LOAD + asm.mov_store("rdi", 0, "rax") + asm.mov_store("rdi", 8, "rsi") + asm.RET)
    a.pad_to(site + len(xp.RIPREL_LOAD) + int.from_bytes(xp.RIPREL_LOAD[3:], "little"), asm.INT3)
    a.emit(struct.pack("<Q", xp.DATA_WORD))
    a.align(16, asm.INT3)
    a.function("xol_syscall")
    a.emit(b"\x68" + struct.pack("<I", xp.SYSCALL_FLAGS) + asm.POPFQ + asm.mov_imm_sx("rax", __NR_getpgid))  # push imm32
    a.function("xol_syscall_site")
    a.emit(xp.SYSCALL_THEN_LEA + b"".join(asm.mov_store("rdi", 8 * k, r) for k, r in enumerate(("rcx", "rdx", "r11"))))
    a.emit(asm.RET)


def emit_seen_programs(a: Assembler) -> None:
    """What a consumer is shown, and what the program has there:

    * seen_caller(out): rcx = RCX, r11 = R11, a call to seen_target (rax = 0x42), then out = rsp, rax, rcx,
      r11 as the caller finds them after the return; seen_caller_return is the call's return address;
    * seen_nop5(out): rax, rcx, r11 = RAX, RCX, R11, a nop5 (seen_nop5_site), then out = rsp, rax, rcx, r11."""
    store_out = b"".join(asm.mov_store("rdi", 8 * k, r) for k, r in enumerate(SEEN_REGS.values())) + asm.RET
    a.function("seen_caller")
    a.emit(asm.mov_imm64("rcx", RCX) + asm.mov_imm64("r11", R11))
    asm.call(a, "seen_target")
    a.function("seen_caller_return")
    a.emit(store_out)
    a.align(16, asm.INT3)
    a.function("seen_target")
    a.emit(asm.mov_imm32("rax", 0x42) + asm.RET)
    a.align(16, asm.INT3)
    a.function("seen_nop5")
    a.emit(asm.mov_imm64("rax", RAX) + asm.mov_imm64("rcx", RCX) + asm.mov_imm64("r11", R11))
    a.function("seen_nop5_site")
    a.emit(NOP5 + store_out)


@pytest.fixture(scope="module")
def kernel():
    return host_kernel_rules()


@pytest.fixture(scope="module")
def nc():
    with NativeCode(program=claims_program) as code:
        yield code


def lab_process(nc, kernel) -> X86Process:
    """The lab's model of this host's kernel, with the same program mapped where this process maps it."""
    proc = X86Process(kernel)
    proc.load(nc.program, "/lab/claims")
    proc.map("[heap]", DATA_BASE, DATA_SIZE, "rw-p")
    return proc


@contextlib.contextmanager
def probe(nc, name: str, retprobe: bool = False, **kw):
    """A perf uprobe on ``name``, checked gone (site bytes back, no perf fd) once the block ends."""
    original = nc.read(name, 5)
    with UprobeEvent(nc.path, nc.offset(name), retprobe, **kw) as ev:
        yield ev
    assert ev.fd is None and not perf_fds() and nc.read(name, 5) == original


def test_the_program_is_position_independent():
    assert claims_program(0x500000).code == claims_program(0x7F12_3456_7000).code


# --- a. the red zone ----------------------------------------------------------------------------

def expected_slots(site: int, optimised_hit: bool) -> list[int]:
    """What arch/x86/kernel/uprobes.c leaves in rsp-8 .. rsp-48 and rax, rcx, r11 (see the module doc)."""
    zone = [site + 5, RCX, R11, RAX] + FILL[4:] if optimised_hit else FILL
    return zone + [RAX, RCX, R11]


def test_red_zone_after_int3_and_optimised_hits_is_what_the_lab_says(nc, kernel):
    site = nc.addr("redzone_nop5_site")
    leaf = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(nc.addr("redzone_nop5"))
    out = (ctypes.c_uint64 * OUT_WORDS)()
    host = []
    with probe(nc, "redzone_nop5_site") as ev:
        for _ in range(HITS):
            leaf(ctypes.addressof(out))
            host.append(list(out))
        host_hits = ev.count()
        host_optimised = calls_uprobe_trampoline(nc.read("redzone_nop5_site", 5), site, parse_maps())

    proc, consumer = lab_process(nc, kernel), CountingConsumer()
    uprobe_register(proc, site, consumer)
    lab = []
    for _ in range(HITS):
        proc.call("redzone_nop5", DATA_BASE)
        lab.append([proc.read_u64(DATA_BASE + 8 * i) for i in range(OUT_WORDS)])

    assert host_hits == consumer.hits == HITS
    assert host_optimised == optimize.is_optimized(proc, site)
    assert host == [expected_slots(site, host_optimised and hit > 0) for hit in range(HITS)]
    assert lab == host


# --- the page's end: a nop5 is optimised only when its five bytes fit in one page ---------------

PAGE = 0x1000
PAGE_EDGE = {"nop5_fits": PAGE - 5, "nop5_crosses": 2 * PAGE - 4}  # offset from the page-aligned base


def page_edge_program(base: int = 0x500000):
    """Two nop5 functions: one in the last five bytes of the first page, one with its last byte on the third."""
    a = Assembler("x86_64", base)
    for name, offset in PAGE_EDGE.items():
        emit_at(a, base + offset, name, NOP5)
    return a.link()


@pytest.mark.parametrize("name", PAGE_EDGE)
def test_a_nop5_at_a_page_s_end_is_optimised_as_the_lab_says(name, kernel):
    with NativeCode(program=page_edge_program) as nc:
        site = nc.addr(name)
        assert site % PAGE == PAGE_EDGE[name] % PAGE
        call = ctypes.CFUNCTYPE(None)(site)
        with probe(nc, name) as ev:
            for _ in range(HITS):
                call()
            hits = ev.count()
            optimised = calls_uprobe_trampoline(nc.read(name, 5), site, parse_maps())
    assert hits == HITS
    assert optimised == (hit_verdict(NOP5, site, kernel)["probe"] == "optimise")
    # can_optimize(): PAGE_SIZE - (vaddr & ~PAGE_MASK) >= 5, on a kernel that optimises a nop5 at all
    assert optimised == (kernel.optimize_nop5 and name == "nop5_fits")


KMOVQ = bytes.fromhex("c4e1f890c1")  # kmovq k0, k1: VEX, opcode byte 0x90, five bytes


def cpu_has(flag: str) -> bool:
    """Whether /proc/cpuinfo lists ``flag`` for this machine's CPUs."""
    with open("/proc/cpuinfo") as f:
        return any(line.startswith("flags") and flag in line.split() for line in f)


def test_a_kmovq_passes_for_a_nop5_and_is_optimised_as_the_lab_says(kernel):
    """Chapter 01: insn_is_nop() ignores the VEX prefix, so a 6.18 kernel takes kmovq for a nop5, emulates its
    first hit as one and rewrites it into a call; the kmovq itself never runs. It runs if a host steps it,
    which needs AVX-512 (else the SIGILL would kill this Python)."""
    if not cpu_has("avx512f"):
        pytest.skip("no AVX-512 on this CPU: a host that stepped the kmovq would kill this process with SIGILL")

    def program(base: int = 0x500000):
        a = Assembler("x86_64", base)
        a.function("kmovq_site")
        a.emit(KMOVQ + asm.RET)
        a.end_function()
        return a.link()

    with NativeCode(program=program) as nc:
        site = nc.addr("kmovq_site")
        with probe(nc, "kmovq_site") as ev:
            for _ in range(HITS):
                ctypes.CFUNCTYPE(None)(site)()
            hits = ev.count()
            optimised = calls_uprobe_trampoline(nc.read("kmovq_site", 5), site, parse_maps())
    assert hits == HITS
    assert optimised == (hit_verdict(KMOVQ, site, kernel)["probe"] == "optimise") == kernel.optimize_nop5


# --- b. sys_uretprobe from anywhere but the trampoline -------------------------------------------

def host_call_in_child(nc, name: str, uretprobe_on: str | None = None) -> dict:
    """Call ``name`` in a forked child (a uretprobe on ``uretprobe_on`` for that child only): how it ended,
    what it saw just before the call, and the uretprobe's count."""
    res_r, res_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no Python cleanup, no traceback dump, just the call
        try:
            faulthandler.disable()
            os.close(res_r)
            os.read(go_r, 1)
            with open("/proc/self/maps") as f:
                xol = "[uprobes]" in f.read()
            entry = nc.read(uretprobe_on, 1) if uretprobe_on else b"-"
            os.write(res_w, bytes([xol]) + entry)
            value = ctypes.CFUNCTYPE(ctypes.c_uint64)(nc.addr(name))()
            os.write(res_w, struct.pack("<Q", value))
        finally:
            os._exit(0)
    os.close(res_w)
    os.close(go_r)
    report = {}
    try:
        with contextlib.ExitStack() as stack:
            ev = stack.enter_context(probe(nc, uretprobe_on, True, pid=pid)) if uretprobe_on else None
            os.write(go_w, b"g")
            _, status = os.waitpid(pid, 0)
            pid = 0
            if ev:
                report["hits"] = ev.count()
        data = os.read(res_r, 10)
    finally:
        if pid:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(res_r)
        os.close(go_w)
    report["xol_before"], report["entry_byte"] = bool(data[0]), data[1:2]
    if os.WIFSIGNALED(status):
        report["ended"] = ("signal", signal.Signals(os.WTERMSIG(status)).name)
    else:
        report["ended"] = ("returned", struct.unpack("<Q", data[2:10])[0])
    return report


def lab_call(nc, kernel, name: str, uretprobe_on: str | None = None) -> dict:
    proc = lab_process(nc, kernel)
    consumer = CountingConsumer(ret=True)
    if uretprobe_on:
        uprobe_register(proc, uretprobe_on, consumer)
    try:
        ended = ("returned", proc.call(name))
    except ProcessKilled:
        ended = ("signal", proc.signal)
    return {"ended": ended, "hits": consumer.hits}


@pytest.mark.parametrize("name, uretprobe_on", [("uretprobe_syscall_direct", None), ("sigill_outer", "sigill_outer")],
                         ids=["no-uprobes-no-xol-area", "uretprobe-pending"])
def test_uretprobe_syscall_off_the_trampoline_ends_as_the_lab_says(nc, kernel, name, uretprobe_on):
    host = host_call_in_child(nc, name, uretprobe_on)
    lab = lab_call(nc, kernel, name, uretprobe_on)
    assert not host["xol_before"]  # a fork child gets no [uprobes] (VM_DONTCOPY): nothing to be called from
    if uretprobe_on:
        assert host["entry_byte"] == b"\xcc"  # the child's copy of the entry was probed when it made the call
        assert host["hits"] == lab["hits"] == 0  # killed before its return: the consumer never ran
    if kernel.uretprobe_syscall:  # 6.11+: sys_uretprobe's force_sig(SIGILL)
        assert host["ended"] == ("signal", "SIGILL")
    assert host["ended"] == lab["ended"]


def test_uprobe_syscall_off_the_trampoline_returns_what_the_lab_says(nc, kernel):
    """sys_uprobe asks where it was called from (in_uprobe_trampoline(regs->ip)), not whether a trampoline
    exists: with this process's nop5 site optimised it still refuses ordinary text. (Without a
    trampoline: test_native_scheme.py.)"""
    leaf = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(nc.addr("redzone_nop5"))
    out = (ctypes.c_uint64 * OUT_WORDS)()
    with probe(nc, "redzone_nop5_site"):
        for _ in range(HITS):
            leaf(ctypes.addressof(out))
        host_tramp = any(m.name == "[uprobes-trampoline]" for m in parse_maps())
        host = ctypes.CFUNCTYPE(ctypes.c_int64)(nc.addr("uprobe_syscall_direct"))()
    proc = lab_process(nc, kernel)
    uprobe_register(proc, "redzone_nop5_site", CountingConsumer())
    for _ in range(HITS):
        proc.call("redzone_nop5", DATA_BASE)
    lab = ctypes.c_int64(proc.call("uprobe_syscall_direct")).value
    assert host_tramp == (proc.find_mapping("[uprobes-trampoline]") is not None)
    if kernel.optimize_nop5:
        assert host_tramp and host == -ENXIO
    assert host == lab


# --- c. every register across a uretprobe return --------------------------------------------------

def host_roundtrip(nc, values: dict, retprobe: bool) -> tuple[dict, int | None]:
    buf = (ctypes.c_uint64 * 64)()
    for name in REG_ORDER + ["flags"]:
        buf[SLOT[name] // 8] = values[name]
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(nc.addr("regs_roundtrip_c"))
    hits = None
    with probe(nc, "uretprobe_regs_trigger", True) if retprobe else contextlib.nullcontext() as ev:
        fn(ctypes.addressof(buf))
        if ev:
            hits = ev.count()
    after = {name: buf[(AFTER + SLOT[name]) // 8] for name in REG_ORDER + ["flags"]}
    after["flags"] &= USER_FLAGS | 0x2  # what regs_roundtrip compares in the lab too
    return after, hits


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_registers_across_a_uretprobe_return_are_what_the_lab_says(nc, kernel, seed):
    values = random_registers(seed)
    plain, _ = host_roundtrip(nc, values, retprobe=False)
    probed, hits = host_roundtrip(nc, values, retprobe=True)
    proc, rec = lab_process(nc, kernel), RegsRecorder()
    uprobe_register(proc, "uretprobe_regs_trigger", rec)
    lab = regs_roundtrip(proc, values)
    assert hits == len(rec.seen) == 1
    assert plain == values  # the round trip itself changes nothing
    assert (probed["cx"], probed["r11"]) == (values["cx"], values["r11"])  # what syscall/sysret would clobber
    assert probed == plain
    assert lab == probed


# --- d. the return-instance depth limit -----------------------------------------------------------

def test_a_70_deep_recursion_reports_the_outer_64_returns_as_the_lab_does(nc, kernel):
    """Two uretprobe events on recurse: one counts, one carries a BPF program that adds each return
    value (each frame returns its own n), which tells the outer 64 (70..7) from the inner 64 (64..1)."""
    require_bpf()
    recurse = ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.c_uint64)(nc.addr("recurse"))
    with BpfCounter(add_reg=PtRegs.ax.offset) as summed, probe(nc, "recurse", True) as counted, \
            UprobeEvent(nc.path, nc.offset("recurse"), True) as carrier:
        summed.attach(carrier.fd)
        assert recurse(70) == 70
        host = (counted.count(), summed.count())
        assert recurse(3) == 3  # the limit is on live instances: a shallow call is reported whole again
        host_after = (counted.count(), summed.count())
    proc, rec = lab_process(nc, kernel), RegsRecorder()
    uprobe_register(proc, "recurse", rec)
    assert proc.call("recurse", 70) == 70
    lab = (len(rec.seen), sum(s["ax"] for s in rec.seen))
    proc.call("recurse", 3)
    lab_after = (len(rec.seen), sum(s["ax"] for s in rec.seen))
    assert host == (MAX_URETPROBE_DEPTH, sum(range(70 - MAX_URETPROBE_DEPTH + 1, 71)))  # 64 returns, n = 7..70
    assert host_after == (host[0] + 3, host[1] + 1 + 2 + 3)
    assert (lab, lab_after) == (host, host_after)


# --- e. the XOL slot: where [uprobes] is, and what a stepped hit copies into it ---------------------

def host_xol_area():
    xol, = [m for m in parse_maps() if m.name == "[uprobes]"]
    return xol


def lab_xol_copy(nc, kernel, site: str, fn: str, *args) -> tuple[X86Process, bytes, int]:
    """The lab's hit of ``site`` (calling ``fn``): its process, the instruction copy it stepped, and where."""
    proc = lab_process(nc, kernel)
    uprobe = uprobe_register(proc, site, CountingConsumer())
    proc.call(fn, *args)
    slot = proc.mm.xol_area.slot_vaddr(1)  # slot 0 holds the return trampoline: a lone step takes slot 1
    assert proc.read(slot, MAX_UINSN_BYTES) == uprobe.auprobe.ixol
    return proc, uprobe.auprobe.ixol, slot


@pytest.mark.parametrize("site, fn", [("xol_ret", "xol_ret"), ("xol_riprel_site", "xol_riprel")])
def test_the_xol_slot_holds_the_copy_the_lab_says(nc, kernel, site, fn):
    """xol_get_insn_slot() copies the 16 bytes of uprobe->arch.ixol (MAX_UINSN_BYTES) into a free slot of a
    one-page [uprobes] (__create_xol_area: VM_EXEC only); for a RIP-relative instruction those are
    riprel_analyze()'s rewrite, not the original bytes."""
    out = (ctypes.c_uint64 * 2)()
    with probe(nc, site) as ev:
        ctypes.CFUNCTYPE(None, ctypes.c_void_p)(nc.addr(fn))(ctypes.addressof(out))
        assert ev.count() == 1
        xol = host_xol_area()
        proc, copy, slot = lab_xol_copy(nc, kernel, site, fn, DATA_BASE)
        host_copy, how = read_any(xol.start + slot - proc.mm.xol_area.vaddr, MAX_UINSN_BYTES)
    lab_xol = proc.find_mapping("[uprobes]")
    assert host_copy is not None, how
    assert (xol.end - xol.start, xol.perms) == (lab_xol.end - lab_xol.start, lab_xol.perms) == (PAGE, "--xp")
    assert host_copy == copy
    original = nc.program.code[nc.program.resolve(site) - nc.program.base:][:MAX_UINSN_BYTES]
    if site == "xol_ret":  # copied as it is, with what follows it
        assert copy == original
    else:  # the slot loads through rsi, which the hit gives back: the program sees the quadword and its own rsi
        assert copy[:len(xp.RIPREL_LOAD)] != xp.RIPREL_LOAD and copy[len(xp.RIPREL_LOAD):] == original[len(xp.RIPREL_LOAD):]
        assert list(out) == [xp.DATA_WORD, xp.SCRATCH_SI] == [proc.read_u64(DATA_BASE + 8 * k) for k in range(2)]


def test_a_stepped_syscall_leaves_rcx_rdx_and_r11_where_the_lab_says(nc, kernel):
    """syscall clears TF on entry and the return restores it, so the #DB comes one instruction late: the lea
    after it runs in the slot too, and rcx (syscall's return address), rdx (the lea's) and r11 (the flags,
    TF included) all show the step."""
    out = (ctypes.c_uint64 * 3)()
    with probe(nc, "xol_syscall_site") as ev:
        ctypes.CFUNCTYPE(None, ctypes.c_void_p)(nc.addr("xol_syscall"))(ctypes.addressof(out))
        assert ev.count() == 1
        xol = host_xol_area()
    proc, _, slot = lab_xol_copy(nc, kernel, "xol_syscall_site", "xol_syscall", DATA_BASE)
    lab = [proc.read_u64(DATA_BASE + 8 * k) for k in range(3)]
    lab_start = proc.mm.xol_area.vaddr
    assert xol.start <= out[0] < xol.end  # the rcx syscall saved points into [uprobes]
    assert [out[0] - xol.start, out[1] - xol.start, out[2]] == [lab[0] - lab_start, lab[1] - lab_start, lab[2]]
    assert lab == [slot + 2, slot + len(xp.SYSCALL_THEN_LEA), xp.SYSCALL_FLAGS | X86_EFLAGS_TF]


def test_the_xol_area_is_where_the_lab_maps_it(nc, kernel):
    """__create_xol_area() asks get_unmapped_area() for TASK_SIZE - PAGE_SIZE ("Try to map as high as
    possible"): free in a process whose stack sits lower, as a randomised one does."""
    if cpu_has("la57"):
        pytest.skip("a CPU with 5-level paging: the host's TASK_SIZE may not be the lab's 4-level one")
    taken = [m.name or "an anonymous mapping" for m in parse_maps()
             if m.start <= TASK_SIZE - PAGE < m.end and m.name != "[uprobes]"]
    if taken:  # no randomisation (setarch -R, randomize_va_space=0, a debugger): the stack ends at TASK_SIZE
        pytest.skip(f"{taken[0]} holds the page the kernel asks for first, so [uprobes] goes lower: run with "
                    "address randomisation on")
    with probe(nc, "xol_ret"):
        ctypes.CFUNCTYPE(None)(nc.addr("xol_ret"))()  # a stepped hit: [uprobes] is mapped by now
        xol = host_xol_area()
    proc, _, _ = lab_xol_copy(nc, kernel, "xol_ret", "xol_ret")
    assert xol.start == proc.mm.xol_area.vaddr == TASK_SIZE - PAGE


# --- f. what a consumer is shown -------------------------------------------------------------------

SHOWN = ("ip", *SEEN_REGS)


def host_consumer_sums(nc, site: str, fn: str, retprobe: bool, calls: int) -> tuple[dict, list[dict], bool]:
    """``fn(out)`` called ``calls`` times under five (u|uret)probe events on ``site``, each carrying a BPF program
    that adds one register (ip, sp, ax, cx, r11) of every hit: those sums, what each call left in out, and
    whether the site called [uprobes-trampoline] by then."""
    require_bpf()
    original, outs = nc.read(site, 5), []
    call = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(nc.addr(fn))
    with contextlib.ExitStack() as stack:
        counters = {}
        for name in SHOWN:
            counters[name] = stack.enter_context(BpfCounter(add_reg=getattr(PtRegs, name).offset))
            counters[name].attach(stack.enter_context(UprobeEvent(nc.path, nc.offset(site), retprobe)).fd)
        for _ in range(calls):
            out = (ctypes.c_uint64 * len(SEEN_REGS))()
            call(ctypes.addressof(out))
            outs.append(dict(zip(SEEN_REGS, out)))
        sums = {name: counter.count() for name, counter in counters.items()}
        optimised = calls_uprobe_trampoline(nc.read(site, 5), nc.addr(site), parse_maps())
    assert not perf_fds() and nc.read(site, 5) == original
    return sums, outs, optimised


def lab_consumer_seen(nc, kernel, site: str, fn: str, retprobe: bool, calls: int) -> tuple[list[dict], list[dict]]:
    """The same calls in the lab: the registers its consumer was shown at each hit, and each call's out."""
    proc, seen, outs = lab_process(nc, kernel), [], []

    def record(regs, *func) -> int:  # a handler (regs) or a ret_handler (regs, func)
        seen.append({n: regs.get(n) for n in SHOWN})
        return 0

    uprobe_register(proc, site, UprobeConsumer(ret_handler=record) if retprobe else UprobeConsumer(handler=record))
    for _ in range(calls):
        proc.call(fn, DATA_BASE)
        outs.append({name: proc.read_u64(DATA_BASE + 8 * k) for k, name in enumerate(SEEN_REGS)})
    return seen, outs


def test_a_return_consumer_sees_the_caller_s_ip_sp_and_registers_as_the_lab_says(nc, kernel):
    """Chapter 02's exercises 02.3 and 02.5: uprobe_handle_trampoline() sets ip to the return address, and
    sys_uretprobe shows sp as the caller finds it after the return (the trampoline's three saves added
    back) and rax, rcx, r11 from those saves."""
    host, (host_after,), _ = host_consumer_sums(nc, "seen_target", "seen_caller", True, 1)
    (lab,), (lab_after,) = lab_consumer_seen(nc, kernel, "seen_target", "seen_caller", True, 1)
    assert host["ip"] == lab["ip"] == nc.addr("seen_caller_return")
    assert host["sp"] - host_after["sp"] == lab["sp"] - lab_after["sp"] == 0
    assert {n: host[n] for n in ("ax", "cx", "r11")} == {n: lab[n] for n in ("ax", "cx", "r11")} \
        == {"ax": 0x42, "cx": RCX, "r11": R11}
    assert {n: host_after[n] for n in ("ax", "cx", "r11")} == {n: lab_after[n] for n in ("ax", "cx", "r11")}


def test_a_consumer_at_an_optimised_nop5_sees_the_site_s_registers_as_the_lab_says(nc, kernel):
    """Chapter 03: sys_uprobe sets ip = the call's return address - 5 (the site) and sp back above its four
    words, and restores rax, rcx and r11 from them: the consumer sees the site's registers, on the first
    hit (the int3) and the optimised ones alike."""
    site = nc.addr("seen_nop5_site")
    assert site % PAGE <= PAGE - len(NOP5)  # in one page: optimised on a kernel that optimises nop5s
    host, host_after, host_optimised = host_consumer_sums(nc, "seen_nop5_site", "seen_nop5", False, HITS)
    lab, lab_after = lab_consumer_seen(nc, kernel, "seen_nop5_site", "seen_nop5", False, HITS)
    assert host_optimised == kernel.optimize_nop5
    assert [s["ip"] for s in lab] == [site] * HITS and host["ip"] == HITS * site
    assert [s["sp"] for s in lab] == [a["sp"] for a in lab_after] and host["sp"] == sum(a["sp"] for a in host_after)
    for name, value in (("ax", RAX), ("cx", RCX), ("r11", R11)):
        assert [s[name] for s in lab] == [value] * HITS and host[name] == HITS * value % (1 << 64)
        assert [a[name] for a in host_after] == [a[name] for a in lab_after] == [value] * HITS


# --- g. where a fresh process's [uprobes-trampoline] lands, and that it stays ----------------------

FRESH_TRAMPOLINE = """
import json
from uprobe_lab.native.code import NativeCode
from uprobe_lab.native.perf import UprobeEvent

def maps():
    with open("/proc/self/maps") as f:
        return f.read()

with NativeCode() as nc:
    before = maps()
    with UprobeEvent(nc.path, nc.offset("uprobe_target_nop5")):
        nc.run("uprobe_target_nop5", 3)
        during = maps()
    print(json.dumps({"site": nc.addr("uprobe_target_nop5"), "before": before, "during": during, "after": maps()}))
"""


def run_in_fresh_python(script: str, *args: str) -> dict:
    """What ``script`` prints as JSON, run by a Python of its own that imports this tree's lab (killed after 2 min)."""
    repo = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")]))}
    run = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def test_a_fresh_process_s_trampoline_lands_where_the_lab_s_find_nearest_trampoline_puts_it(kernel):
    """Chapter 03: find_nearest_trampoline() takes the free page closest to the call's end, up or down; the
    page is r-x and stays after the probe goes. The host's process is a fresh one (this one may have a
    trampoline in reach already, which the kernel would reuse); the lab's twin is given its maps."""
    if not kernel.optimize_nop5:
        pytest.skip(f"{kernel} optimises no nop5: it maps no [uprobes-trampoline] for one")
    host = run_in_fresh_python(FRESH_TRAMPOLINE)
    before, during, after = (parse_maps(host[k]) for k in ("before", "during", "after"))
    new = [m for m in during if m not in before]
    assert [m.name for m in new] == ["[uprobes-trampoline]"], new
    (tramp,) = new
    assert [m for m in after if m not in before] == new  # the probe went, the page stayed

    maps_only = types.SimpleNamespace(mappings=before, kernel=kernel)  # all find_nearest_trampoline reads
    assert tramp.start == optimize.find_nearest_trampoline(maps_only, host["site"])
    proc = make_process("x86_64", kernel)
    consumer = CountingConsumer()
    uprobe = uprobe_register(proc, "uprobe_target_nop5", consumer)
    proc.call("producer_loop", 3, uprobe.vaddr)
    lab = proc.find_mapping("[uprobes-trampoline]")
    uprobe_unregister(proc, uprobe, consumer)
    assert proc.find_mapping("[uprobes-trampoline]") == lab
    assert (tramp.end - tramp.start, tramp.perms) == (lab.end - lab.start, lab.perms) == (PAGE, "r-xp")


# --- h. how many steps a process's [uprobes] holds at once ----------------------------------------

XOL_SLOTS = """
import ctypes, json, sys, threading, time
from uprobe_lab.native.code import NativeCode
from uprobe_lab.native.perf import UprobeEvent
from uprobe_lab.program import Assembler
from uprobe_lab.x86 import asm

SLEEP = float(sys.argv[1])
NR_NANOSLEEP = 35  # arch/x86/entry/syscalls/syscall_64.tbl


def program(base=0x500000):  # sleeper(ts): nanosleep(ts, NULL) by a syscall the probe steps, a nop, ret
    a = Assembler("x86_64", base)
    a.function("sleeper")
    a.emit(asm.xor_rr32("rsi", "rsi") + asm.mov_imm_sx("rax", NR_NANOSLEEP))
    a.function("sleeper_site")
    a.emit(asm.SYSCALL + asm.NOP + asm.RET)
    a.end_function()
    return a.link()


ts = (ctypes.c_long * 2)(int(SLEEP), round(SLEEP % 1 * 1e9))  # struct timespec: tv_nsec < 1e9
waited, shortest = {}, SLEEP
with NativeCode(program=program) as nc:
    sleeper = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(nc.addr("sleeper"))
    with UprobeEvent(nc.path, nc.offset("sleeper_site")):  # the breakpoint is in the mm: every thread steps
        for n in map(int, sys.argv[2:]):
            start, took = threading.Barrier(n), []

            def run():
                start.wait()
                t0 = time.monotonic()
                sleeper(ctypes.addressof(ts))
                took.append(time.monotonic() - t0)

            threads = [threading.Thread(target=run) for _ in range(n)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            waited[n] = sum(t > 1.5 * SLEEP for t in took)
            shortest = min(shortest, *took)
print(json.dumps({"waited": waited, "shortest": shortest}))
"""


@pytest.mark.slow  # two rounds of one-second sleeps
def test_a_process_steps_as_many_hits_at_once_as_the_lab_s_xol_area_has_free_slots(kernel):
    """Cheat sheet and chapter 07: [uprobes] is one page of UPROBE_XOL_SLOT_BYTES slots, slot 0 the return
    trampoline's; a stepped hit holds its slot until the step ends, and one that finds none free waits
    (xol_get_insn_slot's wait_event). A stepped nanosleep holds its slot for the whole sleep: with as many
    threads as the lab's area has free slots none waits, with two more two do."""
    slots = get_xol_area(X86Process(kernel)).bitmap.count(False)
    sleep = 1.0  # seconds: a wide margin on a busy machine
    host = run_in_fresh_python(XOL_SLOTS, str(sleep), str(slots), str(slots + 2))
    assert host["shortest"] > 0.9 * sleep  # every call slept: the syscall did not fail
    assert host["waited"] == {str(slots): 0, str(slots + 2): 2}
