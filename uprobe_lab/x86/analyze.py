"""What the kernel would do with a probe on some x86-64 bytes, for the CLI and notebooks."""
from __future__ import annotations

from ..errors import LabError
from ..kernel import KernelVersion, get_kernel
from ..uprobes import UnprobeableInstruction
from .decode import X86_64_DISASM, arch_uprobe_analyze_insn, site_life


def analyze_hex(hexbytes: str, kernel: KernelVersion, vaddr: int = 0x400000, **_options) -> dict:
    """What the kernel would do with a probe on these bytes (memory order): for the CLI and notebooks.

    The reason is the whole verdict: the decision, any remark beside it (``ArchUprobe.note``), what the site's
    hits run over its life (``site_life``); for a refused instruction, the way out."""
    verdict, _ = _verdict(hexbytes, kernel, vaddr)
    return verdict


def _verdict(hexbytes, kernel: KernelVersion, vaddr: int) -> tuple[dict, str]:
    """``analyze_hex``'s verdict, and its reason in brief: the kernel's decision alone, with the site's life
    only where the site is rewritten after its first hit."""
    if isinstance(hexbytes, (bytes, bytearray)):
        hexbytes = hexbytes.hex()
    if not isinstance(hexbytes, str):
        raise LabError(f"give the instruction's bytes in memory order, as hex text ('0f1f440000') or bytes "
                       f"(b'\\x90'), got {hexbytes!r}")
    try:
        raw = bytes.fromhex(hexbytes.replace(" ", ""))
    except ValueError:
        raise LabError(f"{hexbytes!r} is not hex bytes; write them in memory order, e.g. 0f1f440000") from None
    if not raw:
        raise LabError("no bytes given; write an instruction in memory order, e.g. 0f1f440000")
    try:
        auprobe = arch_uprobe_analyze_insn(raw, vaddr, kernel)
    except UnprobeableInstruction as err:
        decoded = list(X86_64_DISASM.disasm(raw, vaddr, 1))
        first = decoded[0] if decoded else None
        if first is None:
            cut_short(raw, vaddr)
        return {"mnemonic": first.mnemonic if first else None, "op_str": first.op_str if first else None,
                "length": first.size if first else None, "action": "reject", "reason": str(err)}, err.why
    d = auprobe.decoded
    if d.length < len(raw):
        raise LabError(f"{raw.hex()} holds more than one instruction: the first is {d.length} bytes "
                            f"({d.mnemonic} {d.op_str}); pass one instruction")
    whole = "; ".join(part for part in (auprobe.reason, auprobe.note, site_life(auprobe, kernel)) if part)
    brief = "; ".join(part for part in (auprobe.reason, site_life(auprobe, kernel, brief=True)) if part)
    return {"mnemonic": d.mnemonic, "op_str": d.op_str, "length": d.length, "action": auprobe.action,
            "reason": whole}, brief


def cut_short(raw: bytes, vaddr: int) -> None:
    """A LabError if ``raw`` is the start of a longer instruction (the kernel would read the bytes after it
    from the page): a few fillers after it, and the first that makes one instruction of it is the example."""
    for filler in (0x00, 0xE1, 0xF1):  # modrm/sib bytes, and VEX payloads that decode
        whole = next(X86_64_DISASM.disasm(raw + bytes([filler]) * 15, vaddr, 1), None)
        if whole is not None and whole.size > len(raw):
            raise LabError(f"{raw.hex()} is only the start of an instruction (followed by "
                           f"{bytes(whole.bytes[len(raw):]).hex()} it is {whole.mnemonic} {whole.op_str}, "
                           f"{whole.size} bytes); give all of its bytes, e.g. {bytes(whole.bytes).hex()}")


def analyze_table(hexes, kernel=None):
    """``analyze_hex`` of several instructions as a pandas DataFrame, one row each with its reason in brief (the
    kernel's decision; ``analyze_hex`` gives the whole verdict, remarks and way out included).

    ``hexes`` are hex bytes in memory order (spaces allowed); ``kernel`` a version or its name (None:
    the default). The ``bytes`` column shows each instruction's bytes space-separated."""
    import pandas as pd

    version = get_kernel(kernel)
    rows = []
    for hexbytes in hexes:
        verdict, brief = _verdict(hexbytes, version, 0x400000)
        rows.append({"bytes": bytes.fromhex(hexbytes.replace(" ", "")).hex(" "), **verdict, "reason": brief})
    return pd.DataFrame(rows, columns=["bytes", "mnemonic", "op_str", "length", "action", "reason"])
