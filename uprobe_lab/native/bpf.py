"""A BPF consumer for a perf uprobe: the kind of consumer the published benchmarks attach.

The selftest bench (tools/testing/selftests/bpf/benchs/bench_trigger.c) attaches
``bench_trigger_uprobe`` with ``bpf_program__attach_uprobe``: a perf uprobe event with a BPF program
on it. On a hit, kernel/trace/trace_uprobe.c ``__uprobe_perf_func`` runs the program and, when it
returns 0, stops there (no perf sample is written). The program here does what the bench's does,
one atomic add to a counter in an array map, so a consumer run on this host costs what it costs
in the published rows, not the much dearer perf sample a bare perf event writes.

Through bpf(2) and ctypes; the ten instructions (eleven 8-byte slots: ld_imm64 takes two) are
hand-encoded, and tests check them with Capstone's eBPF disassembler. Lab leaves out: libbpf, BTF, the bench's per-CPU counter slots.
"""
from __future__ import annotations

import ctypes
import errno
import os
import struct

from .errors import bpf_refused
from .libc import libc

BPF_MAP_CREATE, BPF_MAP_LOOKUP_ELEM, BPF_PROG_LOAD, BPF_LINK_CREATE = 0, 1, 5, 28
BPF_MAP_TYPE_ARRAY = 2
BPF_PROG_TYPE_KPROBE = 2
BPF_PSEUDO_MAP_FD = 1
BPF_FUNC_map_lookup_elem = 1
BPF_FUNC_get_smp_processor_id = 8
BPF_FUNC_get_current_pid_tgid = 14
PER_CPU_SLOTS = 256  # bench_trigger.c's MAX_CPUS
SLOT_BYTES = 64  # a cache line per slot, as the bench pads its counters
NR_BPF = {"x86_64": 321, "aarch64": 280}
ATTR_SIZE = 128
PERF_EVENT_IOC_SET_BPF = 0x40042408  # _IOW('$', 8, __u32)


def bpf(cmd: int, attr: bytes) -> int:
    """The raw bpf(2) call with a zero-padded attr; its result, or OSError with the kernel's errno."""
    buf = ctypes.create_string_buffer(attr.ljust(ATTR_SIZE, b"\0"), ATTR_SIZE)
    ret = libc().syscall(ctypes.c_long(NR_BPF[os.uname().machine]), ctypes.c_long(cmd), buf,
                         ctypes.c_ulong(ATTR_SIZE))
    if ret < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"bpf({cmd}): {os.strerror(e)}")
    return ret


def insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    """One eBPF instruction: opcode, dst/src nibbles, 16-bit offset, 32-bit immediate."""
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


def counter_program(map_fd: int, add_reg: int | None = None, per_cpu: bool = False, thread: int | None = None) -> bytes:
    """``key = 0; v = bpf_map_lookup_elem(map, &key); if (v) __sync_fetch_and_add(v, 1); return 0;``

    With ``add_reg`` (a byte offset into struct pt_regs, the program's context) the program adds that
    register of the hit instead of 1: a uretprobe's return value, say, to tell which calls were seen.
    With ``per_cpu`` the key is ``bpf_get_smp_processor_id() & (PER_CPU_SLOTS - 1)``: each CPU adds to a
    slot of its own, as bench_trigger.c's ``hits[cpu & CPU_MASK]`` does, so many CPUs share no counter line.
    With ``thread`` (a thread id, gettid) the key is 0 for that thread's hits and 1 for every other thread's: a
    perf uprobe event opened for this process fires in each of its threads (the kernel filters uprobe events by
    mm), and a caller timing one thread tells its hits from the rest."""
    if per_cpu and thread is not None:
        raise ValueError("a counter keys its slots by CPU or by thread, not both")
    save_ctx = [insn(0xbf, dst=6, src=1)] if add_reg is not None else []  # r6 = ctx, kept across the call
    value = (insn(0x79, dst=1, src=6, off=add_reg) if add_reg is not None  # r1 = *(u64 *)(r6 + add_reg)
             else insn(0xb7, dst=1, imm=1))  # r1 = 1
    key = [insn(0x85, imm=BPF_FUNC_get_smp_processor_id),  # call bpf_get_smp_processor_id
           insn(0x57, dst=0, imm=PER_CPU_SLOTS - 1),  # r0 &= PER_CPU_SLOTS - 1
           insn(0x63, dst=10, src=0, off=-4)] if per_cpu else [  # *(u32 *)(r10 - 4) = r0
           insn(0x85, imm=BPF_FUNC_get_current_pid_tgid),  # r0 = tgid << 32 | thread id
           insn(0x67, dst=0, imm=32),  # r0 <<= 32
           insn(0x77, dst=0, imm=32),  # r0 >>= 32: the thread id
           insn(0xb7, dst=1, imm=1),  # r1 = 1
           insn(0x55, dst=0, off=1, imm=thread),  # if r0 != thread goto +1
           insn(0xb7, dst=1, imm=0),  # r1 = 0
           insn(0x63, dst=10, src=1, off=-4)] if thread is not None else [  # *(u32 *)(r10 - 4) = r1
           insn(0x62, dst=10, off=-4, imm=0)]  # *(u32 *)(r10 - 4) = 0
    return b"".join(save_ctx + key + [
        insn(0xbf, dst=2, src=10),  # r2 = r10
        insn(0x07, dst=2, imm=-4),  # r2 += -4
        insn(0x18, dst=1, src=BPF_PSEUDO_MAP_FD, imm=map_fd), insn(0),  # r1 = map (ld_imm64)
        insn(0x85, imm=BPF_FUNC_map_lookup_elem),  # call bpf_map_lookup_elem
        insn(0x15, dst=0, off=2),  # if r0 == 0 goto +2
        value,
        insn(0xdb, dst=0, src=1),  # lock *(u64 *)(r0 + 0) += r1
        insn(0xb7, dst=0, imm=0),  # r0 = 0: no perf sample
        insn(0x95),  # exit
    ])


class BpfCounter:
    """An array map with one u64 and a kprobe-type program that adds 1 to it (or, with ``add_reg``, a
    register of each hit: see counter_program); both closed by close(). ``per_cpu``: a cache-line slot per
    CPU instead; ``thread``: a slot for that thread's hits and one for the other threads'; count() sums the
    slots, counts() gives each."""

    def __init__(self, add_reg: int | None = None, per_cpu: bool = False, thread: int | None = None):
        self.map_fd = self.prog_fd = -1
        self.slots, self.slot_bytes = (PER_CPU_SLOTS, SLOT_BYTES) if per_cpu else (1 if thread is None else 2, 8)
        try:
            self.map_fd = bpf(BPF_MAP_CREATE, struct.pack("<IIIII", BPF_MAP_TYPE_ARRAY, 4, self.slot_bytes,
                                                          self.slots, 0))
            prog = counter_program(self.map_fd, add_reg, per_cpu, thread)
            insns = ctypes.create_string_buffer(prog, len(prog))
            license_ = ctypes.create_string_buffer(b"GPL")
            self.prog_fd = bpf(BPF_PROG_LOAD, struct.pack("<IIQQ", BPF_PROG_TYPE_KPROBE, len(prog) // 8,
                                                          ctypes.addressof(insns), ctypes.addressof(license_)))
        except OSError as err:
            self.close()
            if err.errno in (errno.EPERM, errno.EACCES, errno.ENOSYS, errno.EINVAL):
                raise bpf_refused(err) from None
            raise

    def attach(self, perf_fd: int) -> None:
        """Run the program on every hit of the perf uprobe event ``perf_fd``."""
        import fcntl  # POSIX only: the package still imports elsewhere, to say why it cannot run

        fcntl.ioctl(perf_fd, PERF_EVENT_IOC_SET_BPF, self.prog_fd)

    def count(self) -> int:
        return sum(self.counts())

    def counts(self) -> list[int]:
        """Each slot's count: [this thread's, the other threads'] for a counter made with ``thread``."""
        key, value = ctypes.c_uint32(0), ctypes.create_string_buffer(self.slot_bytes)
        found = []
        for slot in range(self.slots):
            key.value = slot
            bpf(BPF_MAP_LOOKUP_ELEM, struct.pack("<IIQQ", self.map_fd, 0, ctypes.addressof(key),
                                                 ctypes.addressof(value)))
            found.append(int.from_bytes(value.raw[:8], "little"))
        return found

    def close(self) -> None:
        for fd in (self.prog_fd, self.map_fd):
            if fd >= 0:
                os.close(fd)
        self.prog_fd = self.map_fd = -1

    def __enter__(self) -> "BpfCounter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
