"""The arm64 half of uprobes: twin of arch/arm64/kernel/probes/{uprobes,decode-insn,simulate-insn}.c.

Instruction analysis follows ``arm_probe_decode_insn``: ``nop`` is simulated, every steppable
instruction is single-stepped out of line (hardware step: a second exception, then
pc = vaddr + 4), branches and adr/adrp are simulated, everything else is refused. Return probes
hijack the link register (x30); the trampoline is a BRK in XOL slot 0 (arm64 has no uretprobe
syscall). The unmerged STP fp/lr simulation is in uprobe_lab.arm64.stp, switched per process
(``stp="simulate"``).

What the lab leaves out: AArch32 tasks (the kernel refuses them with -EOPNOTSUPP), big-endian,
GCS (newer kernels push/pop the guarded control stack in simulate_bl/ret), PAC keys, and
``arch_uprobe_xol_was_trapped``/``abort_xol`` (a fault inside the XOL step kills the process here).
The kernel's ESR-based dispatch is replaced by decoding the trapping instruction (Unicorn
reports no ESR).
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import uprobes as core
from ..constants import MASK64
from ..errors import LabError
from ..uprobes import UnprobeableInstruction
from . import asm, stp as stp_sim
from .constants import (AARCH64_INSN_SIZE, ENOSYS, MAX_UINSN_BYTES, TASK_SIZE,
                        UPROBE_XOL_SLOT_BYTES, __NR_getpgid)
from .stp import sign_extend

UPROBE_SWBP_INSN = asm.BRK64_OPCODE_UPROBES
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


def aarch64_insn_is_branch(insn: int) -> bool:
    return any(insn_is(n, insn) for n in ("b", "bl", "cbz", "cbnz", "tbz", "tbnz", "ret", "ret_auth",
                                          "br", "br_auth", "blr", "blr_auth", "bcond"))


def aarch64_insn_uses_literal(insn: int) -> bool:
    return any(insn_is(n, insn) for n in ("ldr_lit", "ldrsw_lit", "adr", "adrp", "prfm_lit"))


# AARCH64_INSN_HINT_{NOP, XPACLRI, PACIA_1716, PACIB_1716, PACIAZ, PACIASP, PACIBZ, PACIBSP, BTI*}
STEPPABLE_HINTS = {op << 5 for op in (0x00, 0x07, 0x08, 0x0A, 0x18, 0x19, 0x1A, 0x1B, 0x20, 0x22, 0x24, 0x26)}


def aarch64_insn_is_steppable_hint(insn: int) -> bool:
    return insn_is("hint", insn) and (insn & 0xFE0) in STEPPABLE_HINTS


def not_steppable_reason(insn: int) -> str:
    """'' if aarch64_insn_is_steppable(), else why not (the comments of decode-insn.c)."""
    if aarch64_insn_is_class_branch_sys(insn):
        if aarch64_insn_is_branch(insn):
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
    if insn_is("mops", insn):
        return "MOPS memory copy/set sequences cannot be stepped"
    return ""


# --- simulate-insn.c ----------------------------------------------------------------------

def get_x_reg(regs, n: int) -> int:
    return 0 if n == 31 else regs.get(f"x{n}")  # register 31 reads as xzr here


def set_x_reg(regs, n: int, value: int) -> None:
    if n != 31:
        regs.set(f"x{n}", value)


def condition_check(cond: int, nzcv: int) -> bool:
    """aarch64_insn_condition_check() over the N, Z, C, V flags (pstate bits 31..28)."""
    n, z, c, v = (nzcv >> 31) & 1, (nzcv >> 30) & 1, (nzcv >> 29) & 1, (nzcv >> 28) & 1
    base = cond >> 1
    result = [z == 1, c == 1, n == 1, v == 1, c == 1 and z == 0, n == v, n == v and z == 0, True][base]
    if cond & 1 and cond != 0xF:
        result = not result
    return result


def simulate_nop(proc, insn, addr, regs):
    regs.ip = regs.ip + 4  # arm64_skip_faulting_instruction()


def simulate_b_bl(proc, insn, addr, regs):
    disp = sign_extend((insn & 0x3FFFFFF) << 2, 27)
    if insn & (1 << 31):
        set_x_reg(regs, 30, addr + 4)
    regs.ip = (addr + disp) & MASK64


def simulate_b_cond(proc, insn, addr, regs):
    disp = 4
    if condition_check(insn & 0xF, regs.pstate):
        disp = sign_extend(((insn >> 5) & 0x7FFFF) << 2, 20)
    regs.ip = (addr + disp) & MASK64


def simulate_br_blr_ret(proc, insn, addr, regs):
    regs.ip = get_x_reg(regs, (insn >> 5) & 0x1F)  # pc first, in case of "blr lr"
    if ((insn >> 21) & 0x3) == 1:
        set_x_reg(regs, 30, addr + 4)


def simulate_cbz_cbnz(proc, insn, addr, regs):
    rt = insn & 0x1F
    value = get_x_reg(regs, rt) if insn & (1 << 31) else get_x_reg(regs, rt) & 0xFFFFFFFF
    taken = value != 0 if insn & (1 << 24) else value == 0
    disp = sign_extend(((insn >> 5) & 0x7FFFF) << 2, 20) if taken else 4
    regs.ip = (addr + disp) & MASK64


def simulate_tbz_tbnz(proc, insn, addr, regs):
    bit_pos = ((insn & (1 << 31)) >> 26) | ((insn >> 19) & 0x1F)
    bit = (get_x_reg(regs, insn & 0x1F) >> bit_pos) & 1
    taken = bit != 0 if insn & (1 << 24) else bit == 0
    disp = sign_extend(((insn >> 5) & 0x3FFF) << 2, 15) if taken else 4
    regs.ip = (addr + disp) & MASK64


def simulate_adr_adrp(proc, insn, addr, regs):
    imm = sign_extend(((insn >> 3) & 0x1FFFFC) | ((insn >> 29) & 0x3), 20)
    val = (imm << 12) + (addr & ~0xFFF) if insn & 0x80000000 else imm + addr
    set_x_reg(regs, insn & 0x1F, val & MASK64)
    regs.ip = regs.ip + 4


def simulate_stp_fp_lr_sp_64b(proc, insn, addr, regs):
    stp_sim.simulate_stp_fp_lr_sp_64b(proc, insn, addr, regs)


HANDLERS = {
    "simulate_nop": simulate_nop, "simulate_b_bl": simulate_b_bl, "simulate_b_cond": simulate_b_cond,
    "simulate_br_blr_ret": simulate_br_blr_ret, "simulate_cbz_cbnz": simulate_cbz_cbnz,
    "simulate_tbz_tbnz": simulate_tbz_tbnz, "simulate_adr_adrp": simulate_adr_adrp,
    "simulate_stp_fp_lr_sp_64b": simulate_stp_fp_lr_sp_64b,
}


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


def _text(word: int, vaddr: int = 0) -> str:
    from ..program import disasm

    d = disasm(asm.b(word), "arm64", vaddr)
    return d[0][2] if d else f".inst {word:#010x}"


def arm_probe_decode_insn(insn: int) -> tuple[str, str, str]:
    """(INSN_GOOD | INSN_GOOD_NO_SLOT | INSN_REJECTED, handler name, reason)."""
    if aarch64_insn_is_nop(insn):
        return "INSN_GOOD_NO_SLOT", "simulate_nop", "nop: simulated (pc += 4), faster than stepping it"
    why = not_steppable_reason(insn)
    if not why:
        return "INSN_GOOD", "", "single-stepped out of line: BRK, step in the XOL slot, step exception, pc = vaddr + 4"
    for names, handler, what in (
        (("bcond",), "simulate_b_cond", "b.cond: simulated (pstate flags decide)"),
        (("cbz", "cbnz"), "simulate_cbz_cbnz", "cbz/cbnz: simulated"),
        (("tbz", "tbnz"), "simulate_tbz_tbnz", "tbz/tbnz: simulated"),
        (("adr", "adrp"), "simulate_adr_adrp", "adr/adrp: simulated (pc-relative address computed in the kernel)"),
        (("b", "bl"), "simulate_b_bl", "b/bl: simulated (bl also sets x30)"),
        (("br", "blr", "ret"), "simulate_br_blr_ret", "br/blr/ret: simulated"),
    ):
        if any(insn_is(n, insn) for n in names):
            return "INSN_GOOD_NO_SLOT", handler, what
    return "INSN_REJECTED", "", f"cannot be stepped out of line ({why}) and is not simulated"


def arm_uprobe_decode_special_insn(insn: int, stp: str, mte: bool) -> str:
    """The seed's hook before arm_probe_decode_insn: the STP fp/lr simulation, only without MTE."""
    if stp == "simulate" and not mte and stp_sim.aarch64_insn_is_stp_fp_lr_sp_64b(insn):
        return "simulate_stp_fp_lr_sp_64b"
    return ""


def arch_uprobe_analyze_insn(raw: bytes, vaddr: int, kernel=None, stp: str = "xol", mte: bool = False) -> ArchUprobe:
    """Decide, as arch/arm64/kernel/probes/uprobes.c does, how a probe on this word runs."""
    if stp not in STP_MODES:
        raise LabError(f"stp must be one of {', '.join(STP_MODES)}, got {stp!r}")
    if vaddr % AARCH64_INSN_SIZE:
        raise UnprobeableInstruction(f"{vaddr:#x} is not 4-byte aligned: arm64 uprobes need an aligned "
                                     "instruction address (-EINVAL)")
    if len(raw) < 4:
        raise UnprobeableInstruction(f"{bytes(raw).hex()} is shorter than one arm64 instruction (4 bytes)")
    insn = int.from_bytes(raw[:4], "little")
    text = _text(insn, vaddr)
    if handler := arm_uprobe_decode_special_insn(insn, stp, mte):
        return ArchUprobe(raw[:4], raw[:4], insn, vaddr, True, handler,
                          "stp x29, x30, [sp, #imm]!: simulated in the BRK handler (unmerged patch, seed 001)", text)
    status, handler, reason = arm_probe_decode_insn(insn)
    if status == "INSN_REJECTED":
        raise UnprobeableInstruction(f"{text} ({insn:08x}): {reason}; uprobes refuse it (-EINVAL), "
                                     "probe a neighbouring instruction")
    if stp == "simulate" and mte and stp_sim.aarch64_insn_is_stp_fp_lr_sp_64b(insn):
        reason += " (the STP simulation is off: the system supports MTE)"
    return ArchUprobe(raw[:4], raw[:4], insn, vaddr, status == "INSN_GOOD_NO_SLOT", handler, reason, text)


# --- breakpoints in text ------------------------------------------------------------------

def set_swbp(proc, auprobe: ArchUprobe, vaddr: int) -> None:
    proc.write(vaddr, asm.b(UPROBE_SWBP_INSN))
    proc.trace.emit("text_patches", ip=vaddr, note="brk #0x5")


def set_orig_insn(proc, auprobe: ArchUprobe, vaddr: int) -> None:
    proc.write(vaddr, auprobe.insn)
    proc.trace.emit("text_patches", ip=vaddr, note="original instruction")


def is_swbp_at(proc, vaddr: int) -> bool:
    return proc.read(vaddr, 4) == asm.b(UPROBE_SWBP_INSN)


def uprobe_get_swbp_addr(regs) -> int:
    """arm64 overrides the weak default: a BRK exception leaves pc on the BRK itself."""
    return regs.ip


def arch_uprobe_optimize(proc, auprobe, vaddr: int) -> None:
    """No optimisation on arm64."""


def arch_uprobe_skip_sstep(proc, auprobe: ArchUprobe, regs) -> bool:
    if not auprobe.simulate:
        return False
    HANDLERS[auprobe.handler](proc, auprobe.word, regs.ip, regs)
    return True


def arch_uprobe_pre_xol(proc, auprobe: ArchUprobe, regs) -> None:
    """pc = the XOL slot, and user_enable_single_step()."""
    regs.ip = proc.utask.xol_vaddr
    proc.single_step = True


def arch_uprobe_post_xol(proc, auprobe: ArchUprobe, regs) -> int:
    """pc = vaddr + 4, and user_disable_single_step()."""
    regs.ip = proc.utask.vaddr + 4
    proc.single_step = False
    return 0


# --- return probes ------------------------------------------------------------------------

def arch_uretprobe_hijack_return_addr(proc, trampoline_vaddr: int, regs) -> int:
    """Swap the link register for the trampoline; no stack access at all."""
    orig = regs.get("x30")
    regs.set("x30", trampoline_vaddr)
    return orig


def arch_uretprobe_is_alive(ri, ctx: int, regs) -> bool:
    """RP_CHECK_CHAIN_CALL: sp <= stack (a plain B to a retprobed label); otherwise sp < stack."""
    if ctx == core.RP_CHECK_CHAIN_CALL:
        return regs.sp <= ri.stack
    return regs.sp < ri.stack


def arch_uretprobe_trampoline(proc) -> bytes:
    """Slot 0 of the XOL area: the weak default, one UPROBE_SWBP_INSN."""
    return asm.b(UPROBE_SWBP_INSN)


# --- kernel entries -----------------------------------------------------------------------

def exc_brk(proc) -> None:
    """BRK from EL0: uprobe_brk_handler() claims BRK #5 if this mm has uprobes; else SIGTRAP."""
    proc.trace.emit("exceptions")
    regs = proc.kernel_entry()
    pc = regs.ip
    proc.trace.emit("exc_brk", ip=pc)
    word = int.from_bytes(proc.read(pc, 4), "little")
    if word != UPROBE_SWBP_INSN:
        proc.force_sig("SIGTRAP", f"brk #{(word >> 5) & 0xFFFF:#x} at {pc:#x} (not the uprobe BRK)")
        return
    if not core.uprobe_pre_sstep_notifier(proc):
        proc.force_sig("SIGTRAP", f"brk #0x5 at {pc:#x} and no uprobes in this process")
        return
    core.handle_swbp(proc, regs)  # uprobe_notify_resume(), on the way back to user mode
    regs.flush()  # the registers the kernel set are in place even when a signal follows
    if not proc.signal:
        proc.trace.emit("eret", ip=regs.ip)


def exc_step(proc) -> None:
    """Hardware single-step exception: uprobe_single_step_handler() -> handle_singlestep()."""
    proc.trace.emit("exceptions")
    regs = proc.kernel_entry()
    proc.trace.emit("exc_step", ip=regs.ip)
    if not core.uprobe_post_sstep_notifier(proc):
        proc.force_sig("SIGTRAP", f"single-step exception at {regs.ip:#x}")
        return
    core.handle_singlestep(proc, regs)
    regs.flush()
    if not proc.signal:
        proc.trace.emit("eret", ip=regs.ip)


def el0_svc(proc) -> None:
    """svc #0: the syscall number in x8; only getpgid is served (returns 1)."""
    regs = proc.kernel_entry()
    nr = regs.get("x8")
    proc.trace.emit("syscalls", ip=regs.ip, note=lambda: f"nr {nr}")
    regs.set("x0", 1 if nr == __NR_getpgid else -ENOSYS & MASK64)
    regs.flush()
    proc.trace.emit("eret", ip=regs.ip)


class Arm64ArchOps:
    """``proc.arch_ops`` for one process: this module's hooks, with the process's STP/MTE setting."""

    def __init__(self, stp: str = "xol", mte: bool = False):
        if stp not in STP_MODES:
            raise LabError(f"stp must be one of {', '.join(STP_MODES)}, got {stp!r}")
        self.stp, self.mte = stp, mte

    def arch_uprobe_analyze_insn(self, raw: bytes, vaddr: int, kernel=None) -> ArchUprobe:
        return arch_uprobe_analyze_insn(raw, vaddr, kernel, self.stp, self.mte)


# The other hooks are this module's own functions and constants, bound once: the core looks them
# up on every hit, where a __getattr__ fallback would pay for a failed lookup each time.
for _name in ("MAX_UINSN_BYTES", "UPROBE_XOL_SLOT_BYTES", "TASK_SIZE", "set_swbp", "set_orig_insn", "is_swbp_at",
              "uprobe_get_swbp_addr", "arch_uprobe_optimize", "arch_uprobe_skip_sstep", "arch_uprobe_pre_xol",
              "arch_uprobe_post_xol", "arch_uretprobe_hijack_return_addr", "arch_uretprobe_is_alive",
              "arch_uretprobe_trampoline"):
    _value = globals()[_name]
    setattr(Arm64ArchOps, _name, staticmethod(_value) if callable(_value) else _value)


# --- the CLI's and the notebook's view -----------------------------------------------------

def parse_word(text: str) -> int:
    """'a9bf7bfd' or '0xa9bf7bfd' (the word as a listing shows it) -> int."""
    cleaned = str(text).strip().lower().replace("_", "").replace(" ", "")
    cleaned = cleaned[2:] if cleaned.startswith("0x") else cleaned
    if not cleaned or len(cleaned) > 8 or any(c not in "0123456789abcdef" for c in cleaned):
        raise LabError(f"{text!r} is not an arm64 instruction word; write it as a listing shows it, "
                       "e.g. a9bf7bfd for stp x29, x30, [sp, #-16]!")
    return int(cleaned, 16)


def decode_fields(word: int) -> dict:
    """Fields of the word that matter to uprobes (for the decode widget)."""
    f = stp_sim.pair_fields(word)
    out = {"word": f"{word:08x}", "bytes": asm.b(word).hex(" "), "text": _text(word)}
    if f.is_pair:
        out.update({"pair": ("ldp" if f.load else "stp") + " " + f.form, "opc": f.opc,
                    "size": "64-bit x" if f.opc == 2 else ("32-bit w" if f.opc == 0 else f"opc {f.opc}"),
                    "imm7": f.imm7, "offset": f.offset, "rt": f.rt, "rt2": f.rt2,
                    "rn": "sp" if f.rn == 31 else f"x{f.rn}"})
    why = stp_sim.why_not_stp_fp_lr(word)
    out["stp_fp_lr_pattern"] = not why
    out["not_pattern_because"] = why
    return out


def analyze_hex(text: str, kernel=None, vaddr: int = 0x400000, stp: str | None = None, mte: bool = False,
                **_options) -> dict:
    """What the kernel would do with a probe on this word: action simulate, xol or reject."""
    word = parse_word(text)
    fields = decode_fields(word)
    base = {"mnemonic": fields["text"].split(" ")[0], "op_str": fields["text"].partition(" ")[2],
            "length": 4, "word": fields["word"], "stp": stp or "xol",
            "stp_fp_lr_pattern": fields["stp_fp_lr_pattern"]}
    try:
        auprobe = arch_uprobe_analyze_insn(asm.b(word), vaddr, kernel, stp or "xol", mte)
    except UnprobeableInstruction as err:
        return {**base, "action": "reject", "handler": None, "reason": str(err)}
    return {**base, "action": auprobe.action, "handler": auprobe.handler or None, "reason": auprobe.reason}
