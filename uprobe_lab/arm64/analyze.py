"""What the kernel would do with a probe on an arm64 instruction word, for the CLI and notebooks."""
from __future__ import annotations

from ..errors import LabError, is_int, shown
from ..uprobes import UnprobeableInstruction
from . import asm, stp as stp_sim
from .decode import arch_uprobe_analyze_insn, word_text


def parse_word(text: str) -> int:
    """'a9bf7bfd' or '0xa9bf7bfd' (the word as a listing shows it), or the word as an int -> int."""
    if is_int(text) and 0 <= text < 1 << 32:
        return text
    cleaned = str(text).strip().lower().replace("_", "").replace(" ", "")
    cleaned = cleaned[2:] if cleaned.startswith("0x") else cleaned
    if len(cleaned) != 8 or any(c not in "0123456789abcdef" for c in cleaned):
        # a short word would be zero-extended into some other instruction: all 8 digits are asked for
        raise LabError(f"{shown(text)} is not an arm64 instruction word; write all 8 hex digits as a listing shows "
                       "them, e.g. a9bf7bfd for stp x29, x30, [sp, #-16]!")
    return int(cleaned, 16)


PROBE_VADDR = 0x400000  # where analyze places a word: a pc-relative operand reads as an address from there


def decode_fields(word: int, vaddr: int = PROBE_VADDR) -> dict:
    """Fields of the word that matter to uprobes (for the decode widget), its text as at ``vaddr``: the same
    spelling of a pc-relative literal as the verdict's reason."""
    f = stp_sim.pair_fields(word)
    out = {"word": f"{word:08x}", "bytes": asm.b(word).hex(" "), "text": word_text(word, vaddr)}
    if f.is_pair:
        out.update({"pair": ("ldp" if f.load else "stp") + " " + f.form, "opc": f.opc,
                    "size": "64-bit x" if f.opc == 2 else ("32-bit w" if f.opc == 0 else f"opc {f.opc}"),
                    "imm7": f.imm7, "offset": f.offset, "rt": f.rt, "rt2": f.rt2,
                    "rn": "sp" if f.rn == 31 else f"x{f.rn}"})
    why = stp_sim.why_not_stp_fp_lr(word)
    out["stp_fp_lr_pattern"] = not why
    out["not_pattern_because"] = why
    return out


def pc_relative(word: int) -> bool:
    """Whether the word's text names an address relative to its own (a literal load, adr, a branch): then the
    text holds only with the word at PROBE_VADDR, which is worth saying beside it."""
    return word_text(word, 0) != word_text(word, PROBE_VADDR)


def analyze_word(text: str, kernel=None, vaddr: int = PROBE_VADDR, stp: str | None = None, mte: bool = False,
                **_options) -> dict:
    """What the kernel would do with a probe on this word at ``vaddr``: action simulate, xol or reject."""
    word = parse_word(text)
    fields = decode_fields(word, vaddr)
    base = {"mnemonic": fields["text"].split(" ")[0], "op_str": fields["text"].partition(" ")[2],
            "length": 4, "word": fields["word"], "stp": stp or "xol",
            "stp_fp_lr_pattern": fields["stp_fp_lr_pattern"]}
    try:
        auprobe = arch_uprobe_analyze_insn(asm.b(word), vaddr, kernel, stp or "xol", mte)
    except UnprobeableInstruction as err:
        return {**base, "action": "reject", "handler": None, "reason": str(err)}
    # arm64 has no optimised uprobe: no hit ever rewrites the site
    return {**base, "action": auprobe.action, "handler": auprobe.handler or None,
            "reason": f"{auprobe.reason}; the same on every hit (arm64 never rewrites a probed site)"}

