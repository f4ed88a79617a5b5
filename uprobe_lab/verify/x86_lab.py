"""The lab's side of the comparison: the same instruction, the same start state, the lab's emulator.

The harness image is mapped at the same addresses as on the host; Unicorn runs from SITE until the
common store routine (every landing pad jumps there), once without a probe and once with a lab
uprobe on SITE, for the modelled kernel. Registers, flags, xmm/ymm 0-15 and DATA are compared as
on the host. Unicorn (QEMU 5) does not decode EVEX; such a run ends at the instruction with an
invalid-instruction fault in both runs, which compares equal when the probe did not change where
and in which state it stopped.
"""
from __future__ import annotations

from unicorn import x86_const as X

from ..uprobes import CountingConsumer, UnprobeableInstruction, uprobe_register
from ..x86.process import X86Process
from . import x86_harness as H

LAB_REGS = {"rax": "ax", "rcx": "cx", "rdx": "dx", "rbx": "bx", "rsp": "sp", "rbp": "bp", "rsi": "si",
            "rdi": "di", **{f"r{i}": f"r{i}" for i in range(8, 16)}}
YMM = [getattr(X, f"UC_X86_REG_YMM{i}") for i in range(16)]
SITE_FILE = "/verify/site.bin"
MAX_INSNS = 100_000


def _process(case, kernel) -> X86Process:
    proc = X86Process(kernel)
    proc.map(SITE_FILE, H.CODE, H.CODE_SIZE, "r-xp", H.build_image(case.insn, opmask=False))
    proc.map("[data]", H.DATA, H.DATA_SIZE, "rw-p", H.data_image())
    proc.map("[ctrl]", H.CTRL, 0x1000, "rw-p")  # the pads store rax in OUT_REGS
    regs = proc.regs()
    for name, value in H.initial_gprs().items():
        regs.set(LAB_REGS[name], value)
    regs.flags = case.flags
    regs.ip = H.SITE
    regs.flush()
    for i, reg in enumerate(YMM):
        proc.uc.reg_write(reg, int.from_bytes(H.vector_pattern(i), "little"))
    return proc


def _state(proc, result, data: bytes) -> dict:
    regs = proc.regs()
    out = {name: regs.get(lab) for name, lab in LAB_REGS.items()}
    if result.stop == "until":
        out["rax"] = proc.read_u64(H.OUT_REGS + H.out_offset("rax"))
        out["rip"] = regs.ax & 0xFFFFFFFF  # the landing pad's address
    else:
        out["rip"] = result.ip
    out["eflags"] = regs.flags
    now = proc.read(H.DATA, H.DATA_SIZE)
    mem = {off: now[off : off + 256] for off in range(0, H.DATA_SIZE, 256) if now[off : off + 256] != data[off : off + 256]}
    ymm = tuple(proc.uc.reg_read(r) for r in YMM)
    signal = None if result.stop == "until" else (result.signal or "stopped")
    return {"regs": out, "ymm": ymm, "mem": mem, "signal": signal, "reason": result.reason}


def lab_runs(case, kernel) -> dict:
    """{"unprobed": state, "probed": state or None, "action", "reason", "hits", "xol_area", "trampoline"}."""
    data = H.data_image()
    plain = _process(case, kernel)
    report = {"unprobed": _state(plain, plain.run(H.SITE, H.COMMON, MAX_INSNS), data)}
    proc = _process(case, kernel)
    consumer = CountingConsumer()
    try:
        uprobe = uprobe_register(proc, H.SITE, consumer)
    except UnprobeableInstruction as err:
        report.update(action="reject", reason=str(err), probed=None, hits=0, xol_area=False, trampoline=False)
        return report
    result = proc.run(H.SITE, H.COMMON, MAX_INSNS)
    report["probed"] = _state(proc, result, data)
    report["action"] = uprobe.auprobe.action
    report["reason"] = uprobe.auprobe.reason
    report["hits"] = consumer.hits
    report["xol_area"] = proc.find_mapping("[uprobes]") is not None
    report["trampoline"] = proc.find_mapping("[uprobes-trampoline]") is not None
    return report
