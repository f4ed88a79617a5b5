"""Instruction analysis for arm64 uprobes: twin of arch/arm64/kernel/probes/decode-insn.c and
arch_uprobe_analyze_insn in arch/arm64/kernel/probes/uprobes.c.

``arm_probe_decode_insn``: ``nop`` is simulated, every steppable instruction is single-stepped out
of line, branches and adr/adrp are simulated, everything else is refused. The unmerged STP fp/lr
simulation (seed 001) comes in through ``arm_uprobe_decode_special_insn``, switched per process.

What the lab leaves out: AArch32 tasks (the kernel refuses them with -EOPNOTSUPP) and big-endian.
Capstone stands in for the kernel's listing of the word.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import LabError
from ..kernel import get_kernel
from ..program import disasm
from ..uprobes import UnprobeableInstruction
from . import asm, stp as stp_sim
from .constants import AARCH64_INSN_SIZE

EINVAL = 22  # arch_uprobe_analyze_insn()'s answer to INSN_REJECTED

AARCH64_INSN_SPCLREG_DAIF = 0xDA11
STP_MODES = ("xol", "simulate")


# --- arch/arm64/include/asm/insn.h: __AARCH64_INSN_FUNCS(name, mask, value) ----------------
INSN_FUNCS = {
    "adr": (0x9F000000, 0x10000000), "adrp": (0x9F000000, 0x90000000),
    "prfm_lit": (0xFF000000, 0xD8000000), "ldr_lit": (0xBF000000, 0x18000000),
    "ldrsw_lit": (0xFF000000, 0x98000000), "exclusive": (0x3F800000, 0x08000000),
    "mops": (0x3B200C00, 0x19000400),
    "b": (0xFC000000, 0x14000000), "bl": (0xFC000000, 0x94000000),
    "cbz": (0x7F000000, 0x34000000), "cbnz": (0x7F000000, 0x35000000),
    "tbz": (0x7F000000, 0x36000000), "tbnz": (0x7F000000, 0x37000000),
    "bcond": (0xFF000010, 0x54000000),
    "exception": (0xFF000000, 0xD4000000), "brk": (0xFFE0001F, 0xD4200000),
    "hint": (0xFFFFF01F, 0xD503201F),
    "br": (0xFFFFFC1F, 0xD61F0000), "br_auth": (0xFEFFF800, 0xD61F0800),
    "blr": (0xFFFFFC1F, 0xD63F0000), "blr_auth": (0xFEFFF800, 0xD63F0800),
    "ret": (0xFFFFFC1F, 0xD65F0000), "ret_auth": (0xFFFFFBFF, 0xD65F0BFF),
    "eret": (0xFFFFFFFF, 0xD69F03E0), "eret_auth": (0xFFFFFBFF, 0xD69F0BFF),
    "mrs": (0xFFF00000, 0xD5300000), "msr_imm": (0xFFF8F01F, 0xD500401F),
    "msr_reg": (0xFFF00000, 0xD5100000),
}


def insn_is(name: str, insn: int) -> bool:
    mask, value = INSN_FUNCS[name]
    return (insn & mask) == value


def aarch64_insn_is_nop(insn: int) -> bool:
    return insn == asm.NOP


def aarch64_insn_is_class_branch_sys(insn: int) -> bool:
    return (insn >> 25) & 0xE == 0xA  # encoding classes 0b1010 and 0b1011


def aarch64_insn_is_bcond(insn: int, kernel=None) -> bool:
    """insn.h's bcond: 2ccd8ff980b5 (7.1) widened its mask from 0xFF000010 to 0xFF000000, so FEAT_HBC's BC.cond
    (bit 4 set, e.g. 54000050 bc.eq) is a b.cond too; before, it was no branch at all to the decoder."""
    if kernel is None or kernel.arm64_simulate_bc_cond:
        return (insn & 0xFF000000) == 0x54000000
    return insn_is("bcond", insn)


def is_bc_cond(insn: int) -> bool:
    """FEAT_HBC's BC.cond: a b.cond word with bit 4 set."""
    return (insn & 0xFF000010) == 0x54000010


def aarch64_insn_is_branch(insn: int, kernel=None) -> bool:
    return aarch64_insn_is_bcond(insn, kernel) or any(
        insn_is(n, insn) for n in ("b", "bl", "cbz", "cbnz", "tbz", "tbnz", "ret", "ret_auth",
                                   "br", "br_auth", "blr", "blr_auth"))


def aarch64_insn_uses_literal(insn: int) -> bool:
    return any(insn_is(n, insn) for n in ("ldr_lit", "ldrsw_lit", "adr", "adrp", "prfm_lit"))


# AARCH64_INSN_HINT_{NOP, XPACLRI, PACIA_1716, PACIB_1716, PACIAZ, PACIASP, PACIBZ, PACIBSP, BTI*}
STEPPABLE_HINTS = {op << 5 for op in (0x00, 0x07, 0x08, 0x0A, 0x18, 0x19, 0x1A, 0x1B, 0x20, 0x22, 0x24, 0x26)}


def aarch64_insn_is_steppable_hint(insn: int) -> bool:
    return insn_is("hint", insn) and (insn & 0xFE0) in STEPPABLE_HINTS


def not_steppable_reason(insn: int, kernel=None) -> str:
    """'' if aarch64_insn_is_steppable(), else why not (the comments of decode-insn.c)."""
    if aarch64_insn_is_class_branch_sys(insn):
        if aarch64_insn_is_branch(insn, kernel):
            return "a branch writes pc, which would be relative to the XOL slot"
        if insn_is("msr_imm", insn) or insn_is("msr_reg", insn):
            return "MSR can do any number of nasty things during a single-step"
        if insn_is("exception", insn):
            return "exception-generating instructions (svc, hvc, smc, brk, hlt...) are not safe to step"
        if insn_is("eret", insn) or insn_is("eret_auth", insn):
            return "eret is not steppable"
        if insn_is("mrs", insn):
            # The kernel's comment says DAIF is the one exception *allowed*, but its code returns
            # "steppable" for every register except DAIF - and a patch to flip it was refused: while
            # stepping all DAIF bits are set, so reading DAIF would return the stepping mask. Code wins.
            if ((insn & 0x1FFFE0) >> 5) == AARCH64_INSN_SPCLREG_DAIF:
                return "MRS of DAIF would read the interrupt mask the single-step sets, not the program's"
            return ""
        if insn_is("hint", insn) and not aarch64_insn_is_steppable_hint(insn):
            return "this HINT is not in the steppable whitelist"
        return ""
    if aarch64_insn_uses_literal(insn):
        return "it loads a pc-relative literal, which would be relative to the XOL slot"
    if insn_is("exclusive", insn):
        return "exclusive load/store pairs cannot complete across a single-step exception"
    if insn_is("mops", insn) and (kernel is None or kernel.arm64_reject_mops):
        return "MOPS memory copy/set sequences cannot be stepped"
    return ""



# --- decode-insn.c / uprobes.c: analysis ---------------------------------------------------

@dataclass
class ArchUprobe:
    """struct arch_uprobe: the word, its XOL copy, ``simulate`` and the simulation handler."""

    insn: bytes
    ixol: bytes
    word: int
    vaddr: int
    simulate: bool
    handler: str  # simulate_* name, "" when stepped out of line
    reason: str
    text: str

    @property
    def action(self) -> str:
        return "simulate" if self.simulate else "xol"

    def describe(self) -> str:
        return f"{self.text} [{self.action}]"



def word_text(word: int, vaddr: int = 0) -> str:
    """One instruction word as Capstone disassembles it at ``vaddr``, or ``.inst 0x...`` where it cannot."""
    d = disasm(asm.b(word), "arm64", vaddr)
    return d[0][2] if d else f".inst {word:#010x}"


def arm_probe_decode_insn(insn: int, kernel=None) -> tuple[str, str, str]:
    """(INSN_GOOD | INSN_GOOD_NO_SLOT | INSN_REJECTED, handler name, reason), by ``kernel``'s rules."""
    if aarch64_insn_is_nop(insn) and (kernel is None or kernel.arm64_simulate_nop):
        return "INSN_GOOD_NO_SLOT", "simulate_nop", "nop: simulated (pc += 4), faster than stepping it (6.13)"
    why = not_steppable_reason(insn, kernel)
    if not why:
        stepped = "single-stepped out of line: BRK, step in the XOL slot, step exception, pc = vaddr + 4"
        if is_bc_cond(insn):  # only a kernel without 2ccd8ff980b5 gets here with it
            stepped += ("; this kernel's decoder does not see FEAT_HBC's BC.cond as a branch, and the step's end "
                        "sets pc = vaddr + 4 whatever the step did, so a taken bc.cond falls through: the branch is "
                        "lost (simulated like b.cond from 7.1, 2ccd8ff980b5)")
        return "INSN_GOOD", "", stepped
    old_ldr_literal = kernel is not None and not kernel.arm64_refuse_ldr_literal
    bc_cond = is_bc_cond(insn)
    for matches, handler, what in (
        (old_ldr_literal and insn_is("ldr_lit", insn), "simulate_ldr_literal",
         "ldr (literal): simulated with a kernel load from the user address (before CVE-2024-50099's fix)"),
        (old_ldr_literal and insn_is("ldrsw_lit", insn), "simulate_ldrsw_literal",
         "ldrsw (literal): simulated with a kernel load from the user address (before CVE-2024-50099's fix)"),
        (aarch64_insn_is_bcond(insn, kernel), "simulate_b_cond",
         "bc.cond (FEAT_HBC): simulated like b.cond, pstate flags decide (7.1, 2ccd8ff980b5)" if bc_cond
         else "b.cond: simulated (pstate flags decide)"),
        (insn_is("cbz", insn) or insn_is("cbnz", insn), "simulate_cbz_cbnz", "cbz/cbnz: simulated"),
        (insn_is("tbz", insn) or insn_is("tbnz", insn), "simulate_tbz_tbnz", "tbz/tbnz: simulated"),
        (insn_is("adr", insn) or insn_is("adrp", insn), "simulate_adr_adrp",
         "adr/adrp: simulated (pc-relative address computed in the kernel)"),
        (insn_is("b", insn) or insn_is("bl", insn), "simulate_b_bl", "b/bl: simulated (bl also sets x30)"),
        (any(insn_is(n, insn) for n in ("br", "blr", "ret")), "simulate_br_blr_ret", "br/blr/ret: simulated"),
    ):
        if matches:
            return "INSN_GOOD_NO_SLOT", handler, what
    return "INSN_REJECTED", "", f"cannot be stepped out of line ({why}) and is not simulated"


def arm_uprobe_decode_special_insn(insn: int, stp: str, mte: bool) -> str:
    """The seed's hook before arm_probe_decode_insn: the STP fp/lr simulation, only without MTE (``mte`` is
    False for v1, which had no MTE check)."""
    if stp == "simulate" and not mte and stp_sim.aarch64_insn_is_stp_fp_lr_sp_64b(insn):
        return "simulate_stp_fp_lr_sp_64b"
    return ""


def arch_uprobe_analyze_insn(raw: bytes, vaddr: int, kernel=None, stp: str = "xol", mte: bool = False) -> ArchUprobe:
    """Decide, as arch/arm64/kernel/probes/uprobes.c does, how a probe on this word runs."""
    if stp not in STP_MODES:
        raise LabError(f"stp must be one of {', '.join(STP_MODES)}, got {stp!r}")
    if vaddr % AARCH64_INSN_SIZE:
        raise UnprobeableInstruction(f"{vaddr:#x} is not 4-byte aligned: arm64 uprobes need an aligned "
                                     "instruction address (-EINVAL)", errno=EINVAL)
    if len(raw) < 4:
        raise UnprobeableInstruction(f"{bytes(raw).hex()} is shorter than one arm64 instruction (4 bytes)")
    insn = int.from_bytes(raw[:4], "little")
    text = word_text(insn, vaddr)
    if handler := arm_uprobe_decode_special_insn(insn, stp, mte):
        return ArchUprobe(raw[:4], raw[:4], insn, vaddr, True, handler,
                          "stp x29, x30, [sp, #imm]!: simulated in the BRK handler (unmerged patch, seed 001)", text)
    status, handler, reason = arm_probe_decode_insn(insn, get_kernel(kernel))
    if status == "INSN_REJECTED":
        raise UnprobeableInstruction(f"{text} ({insn:08x}): {reason}; uprobes refuse it (-EINVAL), "
                                     "probe a neighbouring instruction", errno=EINVAL)
    if stp == "simulate" and mte and stp_sim.aarch64_insn_is_stp_fp_lr_sp_64b(insn):
        reason += " (the STP simulation is off: the system supports MTE)"
    return ArchUprobe(raw[:4], raw[:4], insn, vaddr, status == "INSN_GOOD_NO_SLOT", handler, reason, text)

