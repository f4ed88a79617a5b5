"""One referee case, run by the lab, and judged against the real kernel's run.

A run (kernel or lab) is the record the case's pad writes (x0-x30, sp, nzcv, v0, v1, the scratch
buffer, which pad it reached) plus what the harness saw: the attach result, the probed word read
back, the ``[uprobes]`` area and its first 16 bytes, and the signal (with its pc) if one came.

The two sides run on different CPU emulators (QEMU's ``-cpu max`` under the kernel, Unicorn's
``max`` under the lab), so their unprobed results are not compared with each other. What is
compared is what the probe did: the verdict (refused with errno / simulated / stepped out of line),
and the *effect*, every field where the probed run differs from the unprobed one, with values
inside the XOL page written relative to it. 100% agreement means both sides refuse, simulate or
step the same instructions, and a probe changes the same things (nothing, for a correct kernel)
in both.
"""
from __future__ import annotations

import signal
import struct
from dataclasses import dataclass, field

from unicorn import arm64_const as A

from ..arm64 import asm
from ..arm64.decode import EINVAL, is_bc_cond
from ..arm64.process import Arm64Process
from ..errors import LabError
from ..uprobes import CountingConsumer, UnprobeableInstruction, uprobe_register
from . import arm64_cases as C
from . import arm64_layout as L

PAGE = 0x1000
SIGNALS = {"SIGILL": 4, "SIGTRAP": 5, "SIGBUS": 7, "SIGSEGV": 11}


@dataclass
class Run:
    values: dict  # x0..x30, sp, nzcv, pad, v0, v1, scratch
    attach: int = 0  # 0, or -errno
    seen: int = 0  # the probed word as the task reads it after attach
    xol: int = 0  # start of [uprobes], 0 if none
    xol_bytes: bytes = b""
    sig: int = 0
    sig_pc: int = 0
    exit: str = ""  # how the child ended ('' = normally), kernel side only


def parse_record(hexline: str) -> tuple[int, int, Run]:
    """(case index, 0 unprobed / 1 probed, Run) from one ``R <hex>`` console line."""
    raw = bytes.fromhex(hexline)
    if len(raw) != L.REC_SIZE:
        raise LabError(f"a referee record has {len(raw)} bytes, expected {L.REC_SIZE}: the console mangled it")
    q = lambda name: struct.unpack_from("<Q", raw, L.REC[name])[0]
    tag, status = q("tag"), q("status")
    exit_ = "" if status == 0 else (f"exit {status >> 8}" if status & 0x7F == 0 else
                                   f"killed by {signal.Signals(status & 0x7F).name}")
    # All zero: the task could not load them (execute-only [uprobes]); a page it reads starts with slot 0's brk #5
    xol_bytes = raw[L.REC["xol_bytes"]: L.REC["xol_bytes"] + 16]
    run = Run(_values(raw), struct.unpack_from("<q", raw, L.REC["attach0"])[0], q("seen"), q("xol"),
              xol_bytes if q("xol") and any(xol_bytes) else b"", q("sig"), q("sig_pc"), exit_)
    return tag & 0xFFFFFFFF, tag >> 32, run


def _values(raw: bytes) -> dict:
    vals = {f"x{i}": struct.unpack_from("<Q", raw, 8 * i)[0] for i in range(31)}
    for name in ("sp", "nzcv", "pad"):
        vals[name] = struct.unpack_from("<Q", raw, L.REC[name])[0]
    vals["v0"] = raw[L.REC["v0"]: L.REC["v0"] + 16].hex()
    vals["v1"] = raw[L.REC["v1"]: L.REC["v1"] + 16].hex()
    vals["scratch"] = raw[L.REC["scratch"]: L.REC["scratch"] + L.SCRATCH_SIZE]
    return vals


# --- the lab's side ---------------------------------------------------------------------

class RefereeProcess(Arm64Process):
    """The lab's arm64 process on Unicorn's ``max`` CPU (LSE atomics, PAuth, BTI...), like QEMU's."""

    UC_CPU_MODEL = A.UC_CPU_ARM64_MAX


def lab_run(case: C.Case, index: int, kernel, probed: bool) -> Run:
    """Run one case in the emulator exactly as the guest does: same pages, same addresses."""
    proc = RefereeProcess(kernel)
    base = L.slot_base(index)
    proc.map("/cases", base, L.SLOT, "r-xp", L.slot_code(base, case.word, C.regs_for(case, base), case.nzcv))
    proc.map("[shared]", L.SHARED, PAGE, "rw-s", L.shared_page())
    run = Run({})
    if probed:
        target = base + (L.F if case.kind == "uretprobe" else L.P)
        try:
            uprobe_register(proc, target, CountingConsumer(ret=case.kind == "uretprobe"))
            run.seen = int.from_bytes(proc.read(target, 4), "little")
        except UnprobeableInstruction as err:
            run.attach = -(err.errno or EINVAL)
    result = proc.run(base, L.FINISH, max_insns=10_000)
    if result.stop == "signal":
        run.sig, run.sig_pc = SIGNALS.get(result.signal, -1), result.ip
    elif result.stop != "until":
        run.exit = result.reason
    run.values = _values(proc.read(L.SHARED, L.REC_SIZE).ljust(L.REC_SIZE, b"\0"))
    if (m := proc.find_mapping("[uprobes]")) is not None:
        run.xol, run.xol_bytes = m.start, proc.read(m.start, 16)
    return run


# --- judging ------------------------------------------------------------------------------

def verdict(case: C.Case, probed: Run) -> str:
    if probed.attach < 0:
        return f"refused (errno {-probed.attach})"
    if case.kind == "uretprobe":
        return "uretprobe" if probed.xol else "uretprobe without [uprobes]"
    return "stepped" if probed.xol else "simulated"


def _norm(value, xol: int):
    if isinstance(value, int) and xol and xol <= value < xol + PAGE:
        return f"[uprobes]+{value - xol:#x}"
    if isinstance(value, bytes):
        return value.hex()
    return value


def effect(unprobed: Run, probed: Run, base: int) -> dict:
    """Every field the probe changed, with the probed value (XOL-page addresses made relative)."""
    out = {}
    for name, value in probed.values.items():
        if unprobed.values.get(name) != value:
            out[name] = _norm(value, probed.xol)
    if (unprobed.sig, unprobed.exit) != (probed.sig, probed.exit):
        out["signal"] = (probed.sig, probed.exit)
    if probed.sig and unprobed.sig_pc != probed.sig_pc:
        out["signal pc"] = _norm(probed.sig_pc, probed.xol) if probed.xol else probed.sig_pc - base
    return out


@dataclass
class Judged:
    index: int
    case: C.Case
    kernel_verdict: str
    lab_verdict: str
    kernel_effect: dict
    lab_effect: dict
    notes: list = field(default_factory=list)

    @property
    def cpu_differs(self) -> bool:
        """QEMU's CPU and Unicorn's ran the unprobed word differently (a feature one of them lacks, such as
        FEAT_HBC's bc.cond on QEMU before 8.2): the probe's effect cannot be compared, only the verdict."""
        return any(n.startswith("cpu:") for n in self.notes)

    @property
    def agree(self) -> bool:
        same_effect = self.cpu_differs or self.kernel_effect == self.lab_effect
        return self.kernel_verdict == self.lab_verdict and same_effect and not [
            n for n in self.notes if n.startswith("DISAGREE")]

    @property
    def kernel_bug(self) -> str:
        """Why a probe changed what the program computed on the real kernel ('' if it did not)."""
        if self.case.kind == "uretprobe" or not self.kernel_effect:
            return ""
        return known_bug(self.case.word) or "a probe changed the result (no known explanation)"


def is_fp_ldr_literal(word: int) -> bool:
    """LDR (literal, SIMD&FP): s, d or q. decode-insn.c's literal check covers only the general-register forms."""
    return (word & 0x3F000000) == 0x1C000000 and word >> 30 != 3


def known_bug(word: int) -> str:
    if is_fp_ldr_literal(word):
        return ("SIMD/FP ldr (literal) is not in aarch64_insn_uses_literal(): it is stepped from the XOL slot "
                "and loads from the slot's neighbourhood, not from its literal")
    if is_bc_cond(word):
        return ("FEAT_HBC's bc.cond is no branch to the decoder before 2ccd8ff980b5: it is stepped from the XOL slot, "
                "where the step ends with pc = probed address + 4, so a taken bc.cond falls through")
    return ""


XOL_UNREAD = "XOL bytes unread: the task cannot load from [uprobes] (execute-only on a CPU with FEAT_PAN3)"


def judge(index: int, case: C.Case, k_un: Run, k_pr: Run, l_un: Run, l_pr: Run) -> Judged:
    base = L.slot_base(index)
    j = Judged(index, case, verdict(case, k_pr), verdict(case, l_pr), effect(k_un, k_pr, base), effect(l_un, l_pr, base))
    if k_pr.attach >= 0:
        if k_pr.seen != asm.BRK64_OPCODE_UPROBES:
            j.notes.append(f"DISAGREE: the task read {k_pr.seen:08x} at the probe, not brk #5")
        if l_pr.seen != k_pr.seen and l_pr.attach >= 0:
            j.notes.append(f"DISAGREE: probed word {k_pr.seen:08x} (kernel) vs {l_pr.seen:08x} (lab)")
        if k_pr.xol and not k_pr.xol_bytes:
            j.notes.append(XOL_UNREAD)
        elif k_pr.xol and l_pr.xol and k_pr.xol_bytes != l_pr.xol_bytes:
            j.notes.append(f"DISAGREE: XOL bytes {k_pr.xol_bytes.hex()} (kernel) vs {l_pr.xol_bytes.hex()} (lab)")
    if (k_un.sig, k_un.exit) != (l_un.sig, l_un.exit):
        j.notes.append(f"cpu: unprobed run ends with signal {k_un.sig} under QEMU, {l_un.sig} under Unicorn")
    return j
