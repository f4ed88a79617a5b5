"""The lab's side of the comparison: the same instruction, the same start state, the lab's emulator.

The harness image is mapped at the same addresses as on the host; Unicorn runs from SITE until the
common store routine (every landing pad jumps there), once without a probe and once with a lab
uprobe on SITE, for the modelled kernel. Registers, flags, xmm/ymm 0-15 and DATA are compared as
on the host.

Unicorn (QEMU 5) is the lab's CPU, and for some instructions it is not the host's CPU: it does not
decode EVEX or newer VEX forms, leaves stale data in the upper lanes of VEX.128 results, and
addresses a RIP-relative ``shld/shrd ..., imm8`` one byte off. When Unicorn's unprobed run ends in a
different state from the host's, the instruction's own effect is taken from the host: wherever the
lab's run executes it (at SITE, or its copy in an XOL slot), a code hook applies the host's
unprobed effect (registers, flags, memory, and the host's extended state before or after) and moves on, taking
the single-step trap if TF is set. Everything around it - analysis, emulation, the XOL step, fixups,
the rewrite - is still the lab's model. That needs a host run in which the instruction fell through.

Unicorn also lets a branch to a non-canonical address complete; the instruction at SITE is watched
(X86Process.watch_insn), so such a branch raises #GP on itself, as on the host's Intel CPU, in the
unprobed run as in the probed one's out-of-line step (which needs no watching).
"""
from __future__ import annotations

from unicorn import UC_HOOK_CODE
from unicorn import x86_const as X

from ..uprobes import CountingConsumer, UnprobeableInstruction, uprobe_register
from ..x86 import traps
from ..x86.constants import X86_EFLAGS_TF
from ..x86.process import X86Process
from . import x86_harness as H

LAB_REGS = {"rax": "ax", "rcx": "cx", "rdx": "dx", "rbx": "bx", "rsp": "sp", "rbp": "bp", "rsi": "si",
            "rdi": "di", **{f"r{i}": f"r{i}" for i in range(8, 16)}}
YMM = [getattr(X, f"UC_X86_REG_YMM{i}") for i in range(16)]
SITE_FILE = "/verify/site.bin"
MAX_INSNS = 100_000
ARITH_FLAGS = 0x8D5
XSAVE_XMM, XSAVE_YMM_HI = 160, 576


def host_vectors(xsave: bytes) -> tuple:
    """ymm0-15 as integers, from a host XSAVE area (legacy xmm region + YMM_Hi128)."""
    return tuple(int.from_bytes(xsave[XSAVE_XMM + 16 * i : XSAVE_XMM + 16 * i + 16]
                                + xsave[XSAVE_YMM_HI + 16 * i : XSAVE_YMM_HI + 16 * i + 16], "little")
                 for i in range(16))


def same_as_host(state: dict, host_run: dict) -> bool:
    """Did Unicorn's unprobed run end where and as the host's did?"""
    hr = host_run["regs"]
    if (state["signal"] is None) != (host_run["signal"] is None):
        return False
    if any(state["regs"][r] != hr[r] for r in H.GPRS + ["rip"]):
        return False
    if (state["regs"]["eflags"] ^ hr["eflags"]) & ARITH_FLAGS:
        return False
    return state["mem"] == host_run["mem"] and state["ymm"] == host_vectors(host_run["xsave"])


class HostEffect:
    """A code hook that runs the instruction as the host did: its unprobed effect, applied in place."""

    def __init__(self, proc, case, host_run: dict):
        self.proc, self.length, self.run = proc, len(case.insn), host_run
        self.applied = 0
        proc.uc.hook_add(UC_HOOK_CODE, self._on_code)

    def _here(self, address: int) -> bool:
        proc = self.proc
        if address == H.SITE:
            return proc.read(H.SITE, 1)[0] != 0xCC  # not while the int3 is there
        utask = proc.utask
        return utask.active_uprobe is not None and address == utask.xol_vaddr

    def _on_code(self, uc, address, size, user_data):
        if not self._here(address):
            return
        proc = self.proc
        regs = proc.regs()
        tf = regs.flags & X86_EFLAGS_TF
        for name, value in self.run["regs"].items():
            if name in LAB_REGS:
                regs.set(LAB_REGS[name], value)
        regs.flags = (self.run["regs"]["eflags"] & ~X86_EFLAGS_TF) | tf
        regs.ip = address + self.length
        regs.flush()
        for off, chunk in self.run["mem"].items():
            proc.write(H.DATA + off, chunk)
        self.applied += 1
        if tf:
            traps.exc_debug(proc)  # the step trap the instruction would have raised


def _process(case, kernel) -> X86Process:
    proc = X86Process(kernel)
    proc.map(SITE_FILE, H.CODE, H.CODE_SIZE, "r-xp", H.build_image(case.insn, opmask=False))
    proc.map("[data]", H.DATA, H.DATA_SIZE, "rw-p", H.data_image())
    proc.map("[ctrl]", H.CTRL, 0x1000, "rw-p")  # the pads store rax in OUT_REGS
    proc.watch_insn(H.SITE)  # a branch from SITE to a non-canonical address faults on it, as on the host
    regs = proc.regs()
    for name, value in H.initial_gprs().items():
        regs.set(LAB_REGS[name], value)
    regs.flags = case.flags
    regs.ip = H.SITE
    regs.flush()
    for i, reg in enumerate(YMM):
        proc.uc.reg_write(reg, int.from_bytes(H.vector_pattern(i), "little"))
    return proc


def _state(proc, result, data: bytes, effect: HostEffect | None = None) -> dict:
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
    # with the host's effect, extended state is the host's: after the instruction if it ran, before if not
    if effect:
        ymm = effect.run["xsave"] if effect.applied else effect.run["xsave_before"]
    else:
        ymm = tuple(proc.uc.reg_read(r) for r in YMM)
    signal = None if result.stop == "until" else (result.signal or "stopped")
    return {"regs": out, "ymm": ymm, "mem": mem, "signal": signal, "reason": result.reason}


def lab_runs(case, kernel, host_plain: dict | None = None) -> dict:
    """{"unprobed": state, "probed": state or None, "action", "reason", "hits", "xol_area", "trampoline",
    "host_effect": whether the instruction's effect was taken from ``host_plain`` (see the module doc)}."""
    data = H.data_image()
    plain = _process(case, kernel)
    unprobed = _state(plain, plain.run(H.SITE, H.COMMON, MAX_INSNS), data)
    use_host = (host_plain is not None and not same_as_host(unprobed, host_plain)
                and host_plain["signal"] is None and host_plain["regs"]["rip"] == H.SITE + len(case.insn))
    if use_host:
        plain = _process(case, kernel)
        effect = HostEffect(plain, case, host_plain)
        unprobed = _state(plain, plain.run(H.SITE, H.COMMON, MAX_INSNS), data, effect)
    report = {"unprobed": unprobed, "host_effect": use_host}
    proc = _process(case, kernel)
    consumer = CountingConsumer()
    try:
        uprobe = uprobe_register(proc, H.SITE, consumer)
    except UnprobeableInstruction as err:
        report.update(action="reject", reason=str(err), probed=None, hits=0, xol_area=False, trampoline=False)
        return report
    effect = HostEffect(proc, case, host_plain) if use_host else None
    result = proc.run(H.SITE, H.COMMON, MAX_INSNS)
    report["probed"] = _state(proc, result, data, effect)
    report["action"] = uprobe.auprobe.action
    report["reason"] = uprobe.auprobe.reason
    report["hits"] = consumer.hits
    report["xol_area"] = proc.find_mapping("[uprobes]") is not None
    report["trampoline"] = proc.find_mapping("[uprobes-trampoline]") is not None
    return report
