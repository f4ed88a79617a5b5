"""The BPF consumer the native benches attach: its hand-encoded program, and that it runs on every hit."""
from __future__ import annotations

import contextlib
import threading

import capstone
import pytest

from uprobe_lab.bench import bench_spec
from uprobe_lab.native import NativeUnavailable
from uprobe_lab.native.bpf import BpfCounter, counter_program, insn
from uprobe_lab.native.code import NativeCode
from uprobe_lab.native.perf import UprobeEvent, bench_trigger_event
from native_support import native, require_bpf


def test_counter_program_disassembles_as_written():
    md = capstone.Cs(capstone.CS_ARCH_BPF, capstone.CS_MODE_BPF_EXTENDED)
    text = [f"{i.mnemonic} {i.op_str}".strip() for i in md.disasm(counter_program(7), 0)]
    assert text == ["stw [r10+0xfffc], 0x0", "mov64 r2, r10", "add64 r2, 0xfffffffc", "lddw r1, 0x7",
                    "call 0x1", "jeq r0, 0x0, +0x2", "mov64 r1, 0x1", "xadddw [r0], r1", "mov64 r0, 0x0", "exit"]
    # the map load names its fd through the pseudo source register, which Capstone does not print
    assert counter_program(7)[3 * 8 + 1] == (1 << 4) | 1
    # adding a register of the hit instead: the context saved in r6 first, then read where 1 was loaded
    summed = [f"{i.mnemonic} {i.op_str}".strip() for i in md.disasm(counter_program(7, add_reg=0x50), 0)]
    assert summed == ["mov64 r6, r1"] + text[:6] + ["ldxdw r1, [r6+0x50]"] + text[7:]


def test_a_counter_by_thread_keys_this_threads_hits_0_and_the_others_1():
    md = capstone.Cs(capstone.CS_ARCH_BPF, capstone.CS_MODE_BPF_EXTENDED)
    text = [f"{i.mnemonic} {i.op_str}".strip() for i in md.disasm(counter_program(7, thread=4242), 0)]
    plain = [f"{i.mnemonic} {i.op_str}".strip() for i in md.disasm(counter_program(7), 0)]
    assert text == ["call 0xe", "lsh64 r0, 0x20", "rsh64 r0, 0x20", "mov64 r1, 0x1", f"jne r0, {4242:#x}, +0x1",
                    "mov64 r1, 0x0", "stxw [r10+0xfffc], r1"] + plain[1:]  # then the plain counter's lookup and add
    with pytest.raises(ValueError, match="by CPU or by thread"):
        counter_program(7, per_cpu=True, thread=4242)


@native
def test_a_counter_by_thread_tells_this_threads_hits_from_another_threads():
    """A perf uprobe event of this process fires in each of its threads; the counter made for this thread counts
    its hits in slot 0 and another thread's in slot 1, exactly."""
    require_bpf()
    with BpfCounter(thread=threading.get_native_id()) as counter, NativeCode() as nc:
        spec = bench_spec("uprobe-nop", nc.arch)
        with UprobeEvent(nc.path, nc.offset(spec.target)) as event:
            counter.attach(event.fd)
            nc.run(nc.addr(spec.target), 300)
            other = threading.Thread(target=nc.run, args=(nc.addr(spec.target), 200))
            other.start()
            other.join()
        assert counter.counts() == [300, 200] and counter.count() == 500


def test_insn_packs_fields_little_endian():
    assert insn(0x07, dst=2, imm=-4) == bytes([0x07, 0x02, 0, 0]) + (-4).to_bytes(4, "little", signed=True)
    assert insn(0x15, dst=0, off=2) == bytes([0x15, 0x00, 0x02, 0x00, 0, 0, 0, 0])


@native
@pytest.mark.parametrize("consumers", [1, 3])
@pytest.mark.parametrize("every_task", [False, True], ids=["one task", "every task"])
def test_each_bpf_consumer_runs_on_every_hit(consumers, every_task):
    """n perf uprobe events on one site, each with the program: the shared counter gains n per call, and
    the perf events themselves count nothing (the program returns 0, so no perf sample is written). The
    same for events of this task and for the benches' events of every task on one CPU.
    Skipped only where bpf(2) itself refuses this process: a program the kernel rejects is a failure."""
    require_bpf()
    open_event = bench_trigger_event if every_task else UprobeEvent
    with BpfCounter() as counter, NativeCode() as nc, contextlib.ExitStack() as stack:
        spec = bench_spec("uprobe-nop", nc.arch)
        events = [stack.enter_context(open_event(nc.path, nc.offset(spec.target))) for _ in range(consumers)]
        for e in events:
            counter.attach(e.fd)
        nc.run(nc.addr(spec.target), 500)
        assert counter.count() == 500 * consumers
        assert [e.count() for e in events] == [0] * consumers
    assert counter.map_fd == counter.prog_fd == -1


def test_refusal_names_the_way_out(monkeypatch):
    import errno

    from uprobe_lab.native import bpf as bpf_mod

    def refuse(cmd, attr):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(bpf_mod, "bpf", refuse)
    with pytest.raises(NativeUnavailable, match="CAP_BPF.*root.*emulator"):
        BpfCounter()
