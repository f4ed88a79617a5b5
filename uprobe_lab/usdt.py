"""USDT probes on x86-64: the nop a program leaves for a tracer, where libbpf probes it, what it costs.

A USDT site (``USDT(provider, name, args...)`` in libbpf/usdt's usdt.h, ``DTRACE_PROBE`` in
systemtap's sdt.h) is a nop in the code plus a note in ``.note.stapsdt`` (type 3, owner
"stapsdt") holding the nop's address, the link-time address of ``.stapsdt.base`` (to undo
prelink moves), the semaphore's address, the provider, the name and the argument specs. A tracer
reads the note and puts a uprobe on the nop. Three site shapes are in use on x86-64:

* ``nop``: ``90``. systemtap's sdt.h, and libbpf/usdt's usdt.h until 2026;
* ``nop,nop5``: ``90 0f 1f 44 00 00``. libbpf/usdt c9865d1 (2026-02-09), so that 6.18 could turn
  the nop5 into a call; reverted by b0144b0 (2026-05-06): "Currently kernel implementation of this
  optimization can corrupt red zone and corrupt application";
* ``nop,nop10``: ``90 66 2e 0f 1f 84 00 00 00 00 00``. libbpf/usdt 9018f82 (2026-07-02), for 7.3
  (and the 7.2.y stable kernels from 7.2.6), which optimises only this nop10, moving sp below the red zone first.

libbpf (tools/lib/bpf/usdt.c, collect_usdt_targets) probes the long nop at +1 only when its
feature probe says the kernel has the uprobe syscall and the bytes at the site are the combo it
knows (has_nop_combo); otherwise the 1-byte nop, which every kernel emulates after an int3. The
feature probe (tools/lib/bpf/features.c, probe_uprobe_syscall) calls syscall 336 from outside any
trampoline and expects one errno: ENXIO from the libbpf that knew nop,nop5 (6.18's sys_uprobe),
EPROTO from the libbpf of the 7.3 tree ("libbpf: Detect uprobe syscall with new error", 8cae54c5).
The errno is the version check: a nop10-aware libbpf on 6.18 sees ENXIO, keeps the probe on the
nop, and so never asks 6.18 for a probe on a nop10, which 6.18 refuses (the 0x2e prefix).
The 7.3 selftest (prog_tests/usdt.c, subtest_optimized_attach_cross_page) says libbpf also keeps
the probe on the nop when the nop10 crosses a page, which 7.3 cannot optimise (and, with the
optimisable path closed, refuses for its CS prefix).

What the lab leaves out: argument specs are shown, not parsed; semaphores are read, not
incremented; shared libraries are resolved by their segments only (no /proc/PID/maps lookup).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from elftools.elf.elffile import ELFFile

from .constants import PAGE_SIZE
from .errors import LabError
from .kernel import get_kernel
from .outputs import NotRegularFile, open_regular, output_file, record_file, replace_file
from .uprobes import uprobe_register
from .x86.asm import NOP10, X86_NOPS
from .x86.constants import ENOSYS, ENXIO, EPROTO  # the kernel's errno values, not the host's

ERRNO_NAMES = {ENOSYS: "ENOSYS", ENXIO: "ENXIO", EPROTO: "EPROTO"}

NOTE_SECTION, BASE_SECTION = ".note.stapsdt", ".stapsdt.base"
NOTE_OWNER, NOTE_TYPE = "stapsdt", 3


@dataclass(frozen=True)
class UsdtShape:
    name: str
    site: bytes  # the bytes the USDT macro emits
    header: str  # who emits it, and when

    @property
    def long_nop(self) -> bytes:
        """The nop after the 1-byte one, which a kernel may optimise (empty for a plain nop)."""
        return self.site[1:]


USDT_SHAPES = {
    "nop": UsdtShape("nop", b"\x90", "systemtap sdt.h; libbpf/usdt usdt.h before 2026-02-09"),
    "nop,nop5": UsdtShape("nop,nop5", b"\x90" + X86_NOPS[5],
                          "libbpf/usdt usdt.h c9865d1 (2026-02-09), reverted by b0144b0 (2026-05-06)"),
    "nop,nop10": UsdtShape("nop,nop10", b"\x90" + NOP10, "libbpf/usdt usdt.h 9018f82 (2026-07-02)"),
}


def site_shape(code: bytes) -> str:
    """The shape of the USDT site starting ``code``: the longest known shape it starts with, else 'other'."""
    for shape in sorted(USDT_SHAPES.values(), key=lambda s: -len(s.site)):
        if code.startswith(shape.site):
            return shape.name
    return "other"


def long_nop_crosses_page(site_addr: int, shape: str) -> bool:
    """Does the long nop (at site + 1) straddle a page boundary?"""
    n = len(USDT_SHAPES[shape].long_nop) if shape in USDT_SHAPES else 0
    return n > 0 and (site_addr + 1) % PAGE_SIZE + n > PAGE_SIZE


@dataclass(frozen=True)
class Libbpf:
    """What one libbpf looks for when it attaches to a USDT site."""

    name: str
    combo: bytes  # has_nop_combo() compares the site with these bytes
    uprobe_syscall_errno: int  # probe_uprobe_syscall() wants syscall 336 to fail with this errno
    pagecross_fallback: bool  # keeps the probe on the nop when the long nop crosses a page


LIBBPF_NOP5 = Libbpf("libbpf of the 6.18 tree (nop,nop5; ENXIO)", USDT_SHAPES["nop,nop5"].site, ENXIO, False)
LIBBPF_NOP10 = Libbpf("libbpf of the 7.3 tree (nop,nop10; EPROTO)", USDT_SHAPES["nop,nop10"].site, EPROTO, True)
LIBBPFS = (LIBBPF_NOP5, LIBBPF_NOP10)


def in_tree_libbpf(kernel) -> Libbpf:
    """The libbpf of a kernel's own tree, which its bench and selftests link: 7.3's knows nop10."""
    return LIBBPF_NOP10 if get_kernel(kernel).optimize_nop10 else LIBBPF_NOP5


def has_uprobe_syscall(ret: int, libbpf: Libbpf) -> bool:
    """probe_uprobe_syscall(): does syscall 336's return value (-errno) say "the kernel has it"?"""
    return ret == -libbpf.uprobe_syscall_errno


def describe_syscall_result(ret: int) -> str:
    if ret >= 0:
        return f"{ret}"
    return f"-{ERRNO_NAMES.get(-ret, str(-ret))}"


def usdt_probe_offset(code: bytes, site_addr: int, syscall_ret: int, libbpf: Libbpf) -> tuple[int, str]:
    """Where libbpf puts the uprobe for the site at ``site_addr`` holding ``code``: (0 or 1, why)."""
    if not code.startswith(libbpf.combo):
        return 0, f"not the {site_shape(libbpf.combo)} combo this libbpf knows: probe the nop"
    if not has_uprobe_syscall(syscall_ret, libbpf):
        return 0, (f"syscall 336 gave {describe_syscall_result(syscall_ret)}, not "
                   f"-{ERRNO_NAMES[libbpf.uprobe_syscall_errno]}: no uprobe syscall for this libbpf, probe the nop")
    shape = site_shape(libbpf.combo)
    if libbpf.pagecross_fallback and long_nop_crosses_page(site_addr, shape):
        return 0, "the long nop crosses a page, which the kernel cannot optimise: probe the nop"
    return 1, f"{shape} combo and the uprobe syscall: probe the long nop at +1"


def emulated_syscall_336(proc) -> int:
    """Run the program's ``uprobe_syscall_probe`` (syscall 336 from ordinary text) in an emulated process:
    -errno or >= 0, as the modelled kernel answers it (native.scheme.uprobe_syscall_result asks the host)."""
    ret = proc.call("uprobe_syscall_probe")
    return ret - (1 << 64) if ret >= 1 << 63 else ret


def attach_usdt(proc, symbol: str, consumer, libbpf: Libbpf | None = None):
    """libbpf's USDT attach in an emulated process: feature probe, site check, uprobe at +0 or +1.

    Returns (uprobe, offset, why). The feature probe runs the program's ``uprobe_syscall_probe``
    (syscall 336 from ordinary text), so the answer is whatever the modelled kernel returns.
    """
    libbpf = libbpf or in_tree_libbpf(proc.kernel)
    ret = emulated_syscall_336(proc)
    site = proc.program.resolve(symbol)
    offset, why = usdt_probe_offset(proc.read(site, len(libbpf.combo)), site, ret, libbpf)
    return uprobe_register(proc, symbol, consumer, offset), offset, why


# --- reading USDT notes from an ELF file -------------------------------------------------------------

@dataclass(frozen=True)
class UsdtSite:
    provider: str
    name: str
    args: str
    addr: int  # the site's virtual address (prelink-corrected)
    file_offset: int  # where a uprobe names it
    semaphore: int
    code: bytes  # the bytes at the site (up to 11)

    @property
    def shape(self) -> str:
        return site_shape(self.code)

    @property
    def crosses_page(self) -> bool:
        return long_nop_crosses_page(self.addr, self.shape)


def _parse_note_desc(desc: bytes) -> tuple[int, int, int, str, str, str]:
    pc, base, sema = struct.unpack_from("<QQQ", desc)
    strings = desc[24:].split(b"\0")
    if len(strings) < 3:
        raise LabError("a .note.stapsdt note is cut short: expected provider, name and args strings")
    provider, name, args = (s.decode("utf-8", "replace") for s in strings[:3])
    return pc, base, sema, provider, name, args


def read_usdt_sites(path) -> list[UsdtSite]:
    """Every USDT site of an x86-64 ELF file (executable or shared library), in note order."""
    try:
        f = open_regular(path)  # a FIFO would block the open until a writer came
    except NotRegularFile as err:
        raise LabError(f"{path} is {err.kind}, not a regular file; give the path of an ELF binary") from None
    except OSError as err:
        raise LabError(f"cannot open {path}: {err.strerror}; give the path of an ELF binary") from None
    with f:
        try:
            elf = ELFFile(f)
        except Exception as err:  # pyelftools raises its own ELFError and struct errors
            raise LabError(f"{path} is not an ELF file ({err})") from None
        if elf.get_machine_arch() != "x64":
            raise LabError(f"{path} is {elf.get_machine_arch()}, not x86-64: the lab models x86-64 USDT sites")
        notes = elf.get_section_by_name(NOTE_SECTION)
        if notes is None:
            return []
        base_sec = elf.get_section_by_name(BASE_SECTION)
        base_addr = base_sec["sh_addr"] if base_sec is not None else 0
        loads = [s for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"]
        sites = []
        for note in notes.iter_notes():
            if note["n_name"] != NOTE_OWNER or note["n_type"] not in (NOTE_TYPE, "NT_GNU_BUILD_ID", "NT_PRPSINFO"):
                continue  # pyelftools names type 3 after the GNU or core note that shares the number
            pc, base, sema, provider, name, args = _parse_note_desc(bytes(note["n_descdata"]))
            if base_addr and base:
                pc += base_addr - base  # undo prelink, as libbpf does
            seg = next((s for s in loads if s["p_vaddr"] <= pc < s["p_vaddr"] + s["p_filesz"]), None)
            if seg is None or not seg["p_flags"] & 1:  # PF_X
                raise LabError(f"USDT {provider}:{name} at {pc:#x} is not in an executable segment of {path}")
            off = pc - seg["p_vaddr"] + seg["p_offset"]
            f.seek(off)
            code = f.read(min(11, seg["p_offset"] + seg["p_filesz"] - off))
            sites.append(UsdtSite(provider, name, args, pc, off, sema, code))
        return sites


def site_bench(shape: str, crosses_page: bool) -> str | None:
    """The lab's bench whose target has this site shape (and page crossing), or None."""
    names = {"nop": "usdt-nop", "nop,nop5": "usdt-nop5", "nop,nop10": "usdt-nop10"}
    if shape not in names:
        return None
    return names[shape] + ("-pagecross" if crosses_page else "")


# --- a tiny ELF with USDT notes, written from bytes -------------------------------------------------

DEMO_TEXT = 0x401000
DEMO_SITES = (  # (name, address, shape): the last one's nop10 crosses the page at 0x402000
    ("nop", 0x401000, "nop"), ("nop5", 0x401010, "nop,nop5"), ("nop10", 0x401020, "nop,nop10"),
    ("nop10_pagecross", 0x401FFC, "nop,nop10"))
DEMO_PROVIDER = "uprobe_lab"


def _note(pc: int, base: int, provider: str, name: str, args: str) -> bytes:
    owner = NOTE_OWNER.encode() + b"\0"
    desc = struct.pack("<QQQ", pc, base, 0) + b"\0".join(s.encode() for s in (provider, name, args)) + b"\0"
    pad = lambda b: b + b"\0" * (-len(b) % 4)
    # descsz excludes the padding: usdt.h puts its end label before the .balign ("994: .balign 4")
    return struct.pack("<III", len(owner), len(desc), NOTE_TYPE) + pad(owner) + pad(desc)


def demo_elf_bytes() -> bytes:
    """An x86-64 ET_EXEC with four USDT sites (one per shape, and a nop10 crossing a page) and their notes.

    Written from bytes (ELF header, one R+X PT_LOAD, section headers), so tests need no compiler.
    Each site is followed by ``ret``; the rest of .text is int3.
    """
    text = bytearray(b"\xcc" * 0x2000)
    for _, addr, shape in DEMO_SITES:
        code = USDT_SHAPES[shape].site + b"\xc3"
        text[addr - DEMO_TEXT: addr - DEMO_TEXT + len(code)] = code
    base_addr = DEMO_TEXT + len(text)  # .stapsdt.base: one byte right after .text
    notes = b"".join(_note(addr, base_addr, DEMO_PROVIDER, name, "-4@%edi 8@%rsi")
                     for name, addr, _ in DEMO_SITES)
    shstrtab = b"\0.text\0.stapsdt.base\0.note.stapsdt\0.shstrtab\0"
    name_at = lambda s: shstrtab.index(s.encode() + b"\0")
    text_off = 0x1000
    base_off = text_off + len(text)
    notes_off = base_off + 8  # notes start 8-aligned
    str_off = notes_off + len(notes)
    sh_off = (str_off + len(shstrtab) + 7) & ~7
    shdr = lambda name, typ, flags, addr, off, size, align: struct.pack(
        "<IIQQQQIIQQ", name, typ, flags, addr, off, size, 0, 0, align, 0)
    sections = [b"\0" * 64,
                shdr(name_at(".text"), 1, 6, DEMO_TEXT, text_off, len(text), 16),  # PROGBITS, ALLOC|EXEC
                shdr(name_at(".stapsdt.base"), 1, 2, base_addr, base_off, 1, 1),  # PROGBITS, ALLOC
                shdr(name_at(".note.stapsdt"), 7, 0, 0, notes_off, len(notes), 4),  # NOTE
                shdr(name_at(".shstrtab"), 3, 0, 0, str_off, len(shstrtab), 1)]  # STRTAB
    ehdr = struct.pack("<16sHHIQQQIHHHHHH", b"\x7fELF\x02\x01\x01" + b"\0" * 9, 2, 62, 1, DEMO_TEXT, 64, sh_off,
                       0, 64, 56, 1, 64, len(sections), len(sections) - 1)
    phdr = struct.pack("<IIQQQQQQ", 1, 5, 0, DEMO_TEXT - text_off, DEMO_TEXT - text_off, base_off + 1,
                       base_off + 1, 0x1000)  # PT_LOAD, R+X, headers through .stapsdt.base
    out = bytearray(ehdr + phdr)
    out += b"\0" * (text_off - len(out)) + text + b"\0" * 8 + notes + shstrtab
    out += b"\0" * (sh_off - len(out)) + b"".join(sections)
    return bytes(out)


def write_demo_elf(path) -> str:
    """Write :func:`demo_elf_bytes` to ``path`` and return the path: a new file, or one the lab wrote there before
    (outputs.output_file's rule), so a mistyped path never overwrites a file of the user's."""
    out = output_file(path, "write_demo_elf's path", "usdt_demo")
    try:
        replace_file(out, demo_elf_bytes())
    except OSError as err:
        raise LabError(f"write_demo_elf {path}: cannot write it ({err.strerror}); give a path you can write") from None
    record_file(out)
    return str(out)
