"""A program image: bytes at a load address, with symbols, a listing, and a tiny label assembler.

Both architectures use it; the instruction encoders live in uprobe_lab.x86.asm and
uprobe_lab.arm64.asm. Every encoding is checked against Capstone in tests/.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import capstone

from .errors import LabError, SymbolNotFound, shown

CAPSTONE_MODES = {
    "x86_64": (capstone.CS_ARCH_X86, capstone.CS_MODE_64),
    "arm64": (capstone.CS_ARCH_ARM64, capstone.CS_MODE_ARM),
}


def disassembler(arch: str, detail: bool = False) -> capstone.Cs:
    try:
        cs_arch, cs_mode = CAPSTONE_MODES[arch]
    except KeyError:
        raise ValueError(f"unknown architecture {arch!r}: use one of {', '.join(CAPSTONE_MODES)}") from None
    md = capstone.Cs(cs_arch, cs_mode)
    md.detail = detail
    return md


def disasm(code: bytes, arch: str = "x86_64", address: int = 0) -> list[tuple[int, bytes, str]]:
    """(address, bytes, 'mnemonic op_str') for each instruction Capstone decodes in ``code``."""
    return [
        (insn.address, bytes(insn.bytes), f"{insn.mnemonic} {insn.op_str}".strip())
        for insn in disassembler(arch).disasm(code, address)
    ]


def format_listing(rows, words: bool = False) -> list[str]:
    """The lab's one listing line, ``addr:  bytes  mnemonic op_str``, for (address, bytes, text) rows.

    ``words=True`` shows each 4-byte instruction as its word (how arm64 listings print it)."""
    def shown(raw: bytes) -> str:
        return f"{int.from_bytes(raw, 'little'):08x}" if words and len(raw) == 4 else raw.hex(" ")

    return [f"{addr:x}:  {shown(raw):<30} {text}" for addr, raw, text in rows]


def listing_lines(code: bytes, arch: str = "x86_64", address: int = 0, words: bool = False) -> list[str]:
    """``format_listing`` of what Capstone decodes in ``code``."""
    return format_listing(disasm(code, arch, address), words)


def listing(code: bytes, arch: str = "x86_64", address: int = 0, count: int | None = None) -> str:
    """What Capstone decodes in ``code`` (the first ``count`` instructions), one indented line each."""
    return "\n".join("  " + line for line in format_listing(disasm(code, arch, address)[:count]))


@dataclass(frozen=True)
class Symbol:
    name: str
    addr: int
    size: int


@dataclass
class Program:
    arch: str
    base: int
    code: bytes
    symbols: dict[str, Symbol] = field(default_factory=dict)

    @property
    def end(self) -> int:
        return self.base + len(self.code)

    def resolve(self, name: str, offset: int = 0) -> int:
        """Address of ``name`` + ``offset``; a clear error for unknown names or offsets past the symbol."""
        try:
            sym = self.symbols[name]
        except (KeyError, TypeError):  # TypeError: a list or dict is no name
            known = ", ".join(sorted(self.symbols))
            raise SymbolNotFound(f"no symbol {shown(name)} in this program; known symbols: {known}") from None
        if not 0 <= offset < max(sym.size, 1):
            raise ValueError(f"offset {offset} is outside {name} (size {sym.size})")
        return sym.addr + offset

    def symbol_at(self, addr: int) -> tuple[str, int] | None:
        """(name, offset) of the symbol containing ``addr``."""
        for sym in self.symbols.values():
            if sym.addr <= addr < sym.addr + max(sym.size, 1):
                return sym.name, addr - sym.addr
        return None

    def instructions(self, name: str | None = None) -> list[tuple[int, bytes, str]]:
        """Capstone listing of one symbol, or of every symbol in address order."""
        syms = [self.symbols[name]] if name else sorted(self.symbols.values(), key=lambda s: s.addr)
        out = []
        for sym in syms:
            start = sym.addr - self.base
            out += disasm(self.code[start : start + sym.size], self.arch, sym.addr)
        return out

    def instruction_starts(self, name: str) -> list[int]:
        return [addr for addr, _, _ in self.instructions(name)]

    def listing(self, name: str | None = None) -> str:
        lines = []
        syms = [self.symbols[name]] if name else sorted(self.symbols.values(), key=lambda s: s.addr)
        for sym in syms:
            lines.append(f"{sym.addr:016x} <{sym.name}>:")
            lines += ["  " + line for line in format_listing(self.instructions(sym.name))]
        return "\n".join(lines)

    def __repr__(self) -> str:
        names = ", ".join(sorted(self.symbols, key=lambda n: self.symbols[n].addr))
        return f"<Program {self.arch} {self.base:#x}-{self.end:#x}: {names}>"


class Assembler:
    """Collects bytes and labels; fixups patch relative branches once every label is known.

    An encoder for one architecture appends instructions with ``emit`` and registers a fixup
    ``(position, label, patch)`` where ``patch(buf, insn_offset, insn_addr, target)`` writes the field.
    """

    def __init__(self, arch: str, base: int):
        self.arch = arch
        self.base = base
        self.buf = bytearray()
        self.labels: dict[str, int] = {}
        self.fixups: list[tuple[int, str, Callable[[bytearray, int, int, int], None]]] = []
        self._sym_starts: list[tuple[str, int]] = []

    @property
    def here(self) -> int:
        return self.base + len(self.buf)

    def emit(self, raw: bytes) -> None:
        self.buf += raw

    def label(self, name: str) -> None:
        if name in self.labels:
            raise ValueError(f"label {name!r} defined twice")
        self.labels[name] = self.here

    def function(self, name: str) -> None:
        """Start a symbol; its size runs to the next symbol (or the end)."""
        self.label(name)
        self._sym_starts.append((name, self.here))

    def _close_symbol(self) -> None:
        if self._sym_starts and self._sym_starts[-1][0]:
            self._sym_starts.append(("", self.here))

    def align(self, boundary: int, fill: bytes) -> None:
        self._close_symbol()
        while self.here % boundary:
            self.buf += fill[: min(len(fill), boundary - self.here % boundary)]

    def pad_to(self, addr: int, fill: bytes) -> None:
        if addr < self.here:
            raise ValueError(f"cannot pad backwards to {addr:#x} from {self.here:#x}")
        self._close_symbol()
        n = addr - self.here  # in one piece: a page of one-byte fill, added a byte at a time, took 0.1 s a program
        self.buf += (fill * -(-n // len(fill)))[:n]

    def end_function(self) -> None:
        """Close the last symbol here, so padding after it is not counted in its size."""
        self._close_symbol()

    def fixup(self, label: str, patch: Callable[[bytearray, int, int, int], None], insn_len: int) -> None:
        """Register ``patch(buf, insn_offset, insn_addr, target)`` for the instruction just emitted."""
        start = len(self.buf) - insn_len
        self.fixups.append((start, label, patch))

    def link(self) -> Program:
        for start, label, patch in self.fixups:
            if label not in self.labels:
                raise KeyError(f"undefined label {label!r}")
            patch(self.buf, start, self.base + start, self.labels[label])
        symbols = {}
        bounds = self._sym_starts + [("", self.here)]
        for (name, addr), (_, nxt) in zip(bounds, bounds[1:]):
            if name:
                symbols[name] = Symbol(name, addr, nxt - addr)
        return Program(self.arch, self.base, bytes(self.buf), symbols)


def resolve_probe_address(proc, target, offset: int = 0) -> tuple[int, str]:
    """A symbol (+offset) or an absolute address -> (vaddr, 'symbol+off'); it must start an instruction."""
    program = proc.program
    if isinstance(target, str):
        if program is None:
            raise LabError("no program is loaded, so symbols cannot be resolved")
        vaddr = program.resolve(target, offset)
    else:
        vaddr = int(target) + offset
    label = ""
    if program is not None and (hit := program.symbol_at(vaddr)):
        name, off = hit
        label = f"{name}+{off:#x}" if off else name
        starts = program.instruction_starts(name)
        if vaddr not in starts:
            nearest = max((s for s in starts if s < vaddr), default=None)
            hint = f"; the instruction starts at {nearest:#x}" if nearest is not None else ""
            raise LabError(f"{vaddr:#x} ({label}) is inside an instruction, not at its start{hint}")
    elif proc.mapping_at(vaddr) is None or "x" not in proc.mapping_at(vaddr).perms:
        raise LabError(f"{vaddr:#x} is not in an executable mapping of the process")
    return vaddr, label
