"""Many uprobes in one go: a BPF ``uprobe_multi`` link (Linux 6.6+) through bpf(2) and ctypes.

Closing a perf uprobe costs the kernel a full tracepoint_synchronize_unregister() under a global
mutex, about 85 ms on a 6.18 host, one close at a time. A uprobe_multi link registers a batch of
probes (one file, many offsets) with one syscall and unregisters them all with one
uprobe_unregister_sync(), so the referee can ask about hundreds of instructions per teardown. The
probes are the same kernel uprobes (uprobe_register, handle_swbp, the arch code); only the
consumer differs: a two-instruction BPF program (``r0 = 0; exit``) instead of a perf counter.
"""
from __future__ import annotations

import ctypes
import os
import struct

from ..native.bpf import BPF_LINK_CREATE, BPF_PROG_LOAD, BPF_PROG_TYPE_KPROBE, bpf, insn

BPF_TRACE_UPROBE_MULTI = 48
PROG = insn(0xb7, dst=0, imm=0) + insn(0x95)  # r0 = 0; exit


def load_program() -> int:
    """The do-nothing uprobe_multi program; its fd."""
    insns = ctypes.create_string_buffer(PROG, len(PROG))
    license_ = ctypes.create_string_buffer(b"GPL")
    attr = struct.pack("<IIQQIIQII16sII", BPF_PROG_TYPE_KPROBE, len(PROG) // 8, ctypes.addressof(insns),
                       ctypes.addressof(license_), 0, 0, 0, 0, 0, b"uprobe_lab", 0, BPF_TRACE_UPROBE_MULTI)
    return bpf(BPF_PROG_LOAD, attr)


def attach(prog_fd: int, path: str, offsets: list[int]) -> int:
    """A link with one uprobe per offset of ``path``, in every process; close the fd to detach them all."""
    path_buf = ctypes.create_string_buffer(os.fsencode(path))
    offs = (ctypes.c_uint64 * len(offsets))(*offsets)
    attr = struct.pack("<IIIIQQQQIII", prog_fd, 0, BPF_TRACE_UPROBE_MULTI, 0, ctypes.addressof(path_buf),
                       ctypes.addressof(offs), 0, 0, len(offsets), 0, 0)
    return bpf(BPF_LINK_CREATE, attr)
