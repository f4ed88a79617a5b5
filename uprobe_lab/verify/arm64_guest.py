"""The referee's guest: a static AArch64 /init written with the lab's encoders, and its initramfs.

No cross compiler: /init is a few hundred hand-encoded instructions making raw syscalls. It mounts
proc and sysfs, reads the ``uprobe`` PMU's type, and for every case, twice (unprobed, probed):
resets the shared page; forks; the child maps its case's page of the cases file (only that page,
as the lab does: a literal load or branch that leaves it faults on both sides), attaches the case's probes with
``perf_event_open`` (uprobe PMU, pid 0, the errno is kept), reads the probed word back, and jumps
to the case. The case's pad stores the registers into the shared record and branches to
``FINISH``, where the child looks for ``[uprobes]`` in /proc/self/maps and loads the XOL area's
first 16 bytes (left zero where the page is execute-only: a CPU with FEAT_PAN3). The parent waits,
adds the wait status and prints the record as one hex line (``R <hex>``) on the console. Then it
powers the machine off.
"""
from __future__ import annotations

import struct

from ..arm64 import asm
from ..program import Assembler
from . import arm64_enc as enc
from . import arm64_layout as L

INIT_BASE = 0x400000
DATA = 0x402000
TAB = 0x30000000
TAB_HEADER = 64
DESC_SIZE = 64
AT_FDCWD = -100  # include/uapi/linux/fcntl.h: openat relative to the working directory
SYS = {"mount": 40, "openat": 56, "read": 63, "write": 64, "sync": 81, "exit": 93,
       "reboot": 142, "sigaltstack": 132, "rt_sigaction": 134, "uname": 160, "clone": 220, "mmap": 222, "perf_event_open": 241, "wait4": 260}
SIGCHLD = 17
CAUGHT = (4, 5, 7, 11)  # SIGILL, SIGTRAP, SIGBUS, SIGSEGV: recorded with their pc, then FINISH
# SA_NODEFER: the handler never returns (it goes on to FINISH), so without it a second fault of the same signal
# there would find it blocked and the kernel would kill the child instead of running the handler again
SA_SIGINFO, SA_ONSTACK, SA_NODEFER = 0x4, 0x08000000, 0x40000000
UC_PC = 440  # offsetof(struct ucontext, uc_mcontext.pc) on arm64
MAP_PRIVATE_FIXED, MAP_SHARED_ANON_FIXED = 0x12, 0x31
PERF_ATTR_SIZE = 136

# /init's data page: strings, the perf_event_attr, the record template, buffers
STRINGS = {"proc": b"proc\0", "dproc": b"/proc\0", "sysfs": b"sysfs\0", "dsys": b"/sys\0",
           "type": b"/sys/bus/event_source/devices/uprobe/type\0", "tab": b"/cases.tab\0",
           "cases": b"/cases\0", "maps": b"/proc/self/maps\0",
           "hex": b"0123456789abcdef", "begin": b"\nUPROBE_LAB_REFEREE BEGIN\n", "end": b"UPROBE_LAB_REFEREE END\n"}


def _data_layout():
    off, where = 0, {}
    for name, s in STRINGS.items():
        where[name] = DATA + off
        off += (len(s) + 15) & ~15
    for name, size in (("attr", PERF_ATTR_SIZE), ("template", L.PAGE), ("status", 16), ("typebuf", 32),
                       ("uname", 400), ("sigaction", 32), ("altstack", 24), ("sigstack", 0x4000), ("line", 2 * L.REC_SIZE + 16), ("maps", 0x10000)):
        off = (off + 15) & ~15
        where[name] = DATA + off
        off += size
    return where, off


ADDR, DATA_SIZE = _data_layout()


class _Asm:
    """Assembler plus the little conveniences the guest needs (mov of a 64-bit value, syscalls)."""

    def __init__(self):
        self.a = Assembler("arm64", INIT_BASE)

    def __call__(self, *words):
        for w in words:
            self.a.emit(asm.b(w))

    def mov(self, rd, value):
        if value < 0:
            self(enc.movn(rd, ~value))
        else:
            self(*enc.mov_imm64(rd, value))

    def syscall(self, name, *args):
        for i, value in enumerate(args):
            if value is not None:
                self.mov(i, value)
        self.mov(8, SYS[name])
        self(asm.svc(0))

    def label(self, name):
        self.a.label(name)


def build_init() -> bytes:
    """The /init ELF."""
    g = _Asm()
    g.a.pad_to(INIT_BASE + 0x80, b"\0")
    g.label("_start")
    g.syscall("mount", ADDR["proc"], ADDR["dproc"], ADDR["proc"], 0, 0)
    g.syscall("mount", ADDR["sysfs"], ADDR["dsys"], ADDR["sysfs"], 0, 0)
    g.syscall("uname", ADDR["uname"])
    g.syscall("openat", AT_FDCWD, ADDR["type"], 0)
    g.syscall("read", None, ADDR["typebuf"], 16)
    g.mov(24, 0), g.mov(10, 10), g.mov(1, ADDR["typebuf"])
    g.label("parse_type")
    g(enc.ldrb_post(2, 1), enc.sub_w_imm(2, 2, ord("0")), enc.cmp_w_imm(2, 9))
    asm.bcond_to(g.a, "hi", "type_done")
    g(enc.madd(24, 24, 10, 2))
    asm.b_to(g.a, "parse_type")
    g.label("type_done")
    g.syscall("openat", AT_FDCWD, ADDR["tab"], 0)
    g(asm.mov_reg(4, 0))
    g.syscall("mmap", TAB, 0x100000, 1, MAP_PRIVATE_FIXED, None, 0)
    g.syscall("mmap", L.SHARED, 0x1000, 3, MAP_SHARED_ANON_FIXED, -1, 0)
    g.syscall("write", 1, ADDR["begin"], len(STRINGS["begin"]))
    g.syscall("write", 1, ADDR["uname"] + 130, 65)  # utsname.release
    g.mov(26, TAB), g(asm.ldr_imm(20, 26, 0)), g.mov(19, 0), g.mov(21, TAB + TAB_HEADER), g.mov(23, L.SHARED)
    g.label("case_loop")
    g(enc.cmp_reg(19, 20))
    asm.bcond_to(g.a, "hs", "all_done")
    g.mov(22, 0)
    g.label("mode_loop")
    g.mov(2, ADDR["template"]), g.mov(1, 0)
    g.label("copy")
    # the whole page, not just the record: a case's store beyond the record must not reach the next case
    g(enc.ldr_x_reg(3, 2, 1), enc.str_x_reg(3, 23, 1), asm.add_imm(1, 1, 8), asm.cmp_imm(1, L.PAGE - 8))
    asm.bcond_to(g.a, "ls", "copy")
    g.syscall("clone", SIGCHLD, 0, 0, 0, 0)
    asm.cbz_to(g.a, 0, "child")
    g(asm.mov_reg(25, 0))
    g.syscall("wait4", None, ADDR["status"], 0, 0)  # x0 still holds the pid
    g.mov(1, ADDR["status"]), g(enc.ldr_w(1, 1, 0), asm.str_imm(1, 23, L.REC["status"]))
    g(enc.lsl_imm(2, 22, 32), enc.orr_reg(1, 19, 2), asm.str_imm(1, 23, L.REC["tag"]))
    # hex line: "R " + 2 hex digits per record byte + "\n"
    g.mov(3, ADDR["line"]), g.mov(4, ord("R")), g(enc.strb_post(4, 3)), g.mov(4, ord(" ")), g(enc.strb_post(4, 3))
    g.mov(6, ADDR["hex"]), g.mov(1, 0)
    g.label("hex")
    g(enc.ldrb_reg(4, 23, 1), enc.lsr_imm(5, 4, 4), enc.ldrb_reg(5, 6, 5), enc.strb_post(5, 3),
      enc.and_0xf(5, 4), enc.ldrb_reg(5, 6, 5), enc.strb_post(5, 3), asm.add_imm(1, 1, 1),
      asm.cmp_imm(1, L.REC_SIZE))
    asm.bcond_to(g.a, "lo", "hex")
    g.mov(4, ord("\n")), g(enc.strb_post(4, 3))
    g.syscall("write", 1, ADDR["line"], 2 * L.REC_SIZE + 3)
    g(asm.add_imm(22, 22, 1), asm.cmp_imm(22, 2))
    asm.bcond_to(g.a, "lo", "mode_loop")
    g(asm.add_imm(19, 19, 1), asm.add_imm(21, 21, DESC_SIZE))
    asm.b_to(g.a, "case_loop")
    g.label("all_done")
    g.syscall("write", 1, ADDR["end"], len(STRINGS["end"]))
    g.syscall("sync")
    g.syscall("reboot", 0xFEE1DEAD, 672274793, 0x4321FEDC, 0)
    g.label("hang")
    asm.b_to(g.a, "hang")

    g.label("child")
    g.syscall("openat", AT_FDCWD, ADDR["cases"], 0)
    g(asm.mov_reg(4, 0), asm.ldr_imm(0, 21, 0), asm.ldr_imm(5, 21, 56))  # the case's address and file offset
    g.syscall("mmap", None, L.SLOT, 5, MAP_PRIVATE_FIXED, None, None)
    g.syscall("sigaltstack", ADDR["altstack"], 0)
    for sig in CAUGHT:
        g.syscall("rt_sigaction", sig, ADDR["sigaction"], 0, 8)
    asm.cbz_to(g.a, 22, "run")
    for k in range(2):
        g(asm.ldr_imm(1, 21, 8), asm.cmp_imm(1, k))
        asm.bcond_to(g.a, "ls", "probes_done")
        g.mov(7, ADDR["attr"])
        g(enc.str_w(24, 7, 0), asm.ldr_imm(2, 21, 24 + 16 * k), asm.str_imm(2, 7, 8),
          asm.ldr_imm(2, 21, 16 + 16 * k), asm.str_imm(2, 7, 64))
        g.syscall("perf_event_open", ADDR["attr"], 0, -1, -1, 0)
        g(asm.str_imm(0, 23, L.REC["attach0"] + 8 * k))
    g.label("probes_done")
    g(asm.ldr_imm(1, 21, 48), enc.ldr_w(2, 1, 0), asm.str_imm(2, 23, L.REC["seen"]))
    g.label("run")
    g(asm.ldr_imm(1, 21, 0), asm.br(1))

    g.a.pad_to(L.FINISH, b"\0")
    g.label("finish")  # the case's registers are gone: every address is loaded afresh
    g.syscall("openat", AT_FDCWD, ADDR["maps"], 0)
    g(asm.mov_reg(20, 0)), g.mov(21, ADDR["maps"]), g.mov(22, 0)
    g.label("read_maps")
    g(asm.mov_reg(0, 20), asm.add_reg(1, 21, 22))
    g.syscall("read", None, None, 4096)
    g(asm.cmp_imm(0, 0))
    asm.bcond_to(g.a, "le", "maps_read")
    g(asm.add_reg(22, 22, 0))
    asm.b_to(g.a, "read_maps")
    g.label("maps_read")
    g.mov(3, int.from_bytes(b"[upr", "little")), g.mov(1, 0), g(asm.subs_imm(22, 22, 4))
    g.label("scan")
    g(enc.cmp_reg(1, 22))
    asm.bcond_to(g.a, "gt", "exit")
    g(enc.ldr_w_reg(2, 21, 1), enc.cmp_w_reg(2, 3))
    asm.bcond_to(g.a, "eq", "line_start")
    g(asm.add_imm(1, 1, 1))
    asm.b_to(g.a, "scan")
    g.label("line_start")
    asm.cbz_to(g.a, 1, "parse_hex")
    g(enc.sub_imm(4, 1, 1), enc.ldrb_reg(2, 21, 4), enc.cmp_w_imm(2, ord("\n")))
    asm.bcond_to(g.a, "eq", "parse_hex")
    g(asm.mov_reg(1, 4))
    asm.b_to(g.a, "line_start")
    g.label("parse_hex")
    g.mov(5, 0)
    g.label("hex_digit")
    g(enc.ldrb_reg(2, 21, 1), asm.add_imm(1, 1, 1), enc.cmp_w_imm(2, ord("-")))
    asm.bcond_to(g.a, "eq", "xol_found")
    g(enc.sub_w_imm(2, 2, ord("0")), enc.cmp_w_imm(2, 9))
    asm.bcond_to(g.a, "ls", "digit")
    g(enc.sub_w_imm(2, 2, ord("a") - ord("0") - 10))
    g.label("digit")
    g(enc.lsl_imm(5, 5, 4), enc.orr_reg(5, 5, 2))
    asm.b_to(g.a, "hex_digit")
    g.label("xol_found")  # read the XOL page as the task can: a plain load (/proc/self/mem says EIO: no VM_MAYREAD)
    g.mov(23, L.SHARED), g(asm.str_imm(5, 23, L.REC["xol"]))
    g.label("xol_read")
    g(asm.ldp(1, 2, 5, 0, "offset"), asm.stp(1, 2, 23, L.REC["xol_bytes"], "offset"))
    g.label("exit")
    g.syscall("exit", 0)
    g.a.pad_to(L.SIGNAL_ENTRY, b"\0")
    g.label("signal_entry")  # x0 = the signal, x2 = its ucontext; a second signal (in FINISH) just exits
    # A fault on the XOL read is not the case's: on a CPU with FEAT_PAN3 (EPAN) arm64 maps a VM_EXEC-only vma such
    # as [uprobes] execute-only (5.13, 18107f8a2df6), so the task cannot load from it. Bytes stay zero, record whole.
    g(asm.ldr_imm(1, 2, UC_PC)), g.mov(3, g.a.labels["xol_read"]), g(enc.cmp_reg(1, 3))
    asm.bcond_to(g.a, "eq", "exit")
    g.mov(23, L.SHARED), g(asm.ldr_imm(3, 23, L.REC["sig"]))
    asm.cbz_to(g.a, 3, "first_signal")
    g.syscall("exit", 0)
    g.label("first_signal")
    g(asm.str_imm(0, 23, L.REC["sig"]), asm.ldr_imm(1, 2, UC_PC), asm.str_imm(1, 23, L.REC["sig_pc"]))
    g.mov(1, L.FINISH), g(asm.br(1))
    prog = g.a.link()
    return _elf(prog.code, _data_page())


def _data_page() -> bytes:
    data = bytearray(DATA_SIZE)
    for name, s in STRINGS.items():
        off = ADDR[name] - DATA
        data[off: off + len(s)] = s
    attr = struct.pack("<IIQ", 0, PERF_ATTR_SIZE, 0) + bytes(40) + struct.pack("<QQ", ADDR["cases"], 0)
    data[ADDR["attr"] - DATA: ADDR["attr"] - DATA + len(attr)] = attr
    act = struct.pack("<QQQQ", L.SIGNAL_ENTRY, SA_SIGINFO | SA_ONSTACK | SA_NODEFER, 0, 0)
    data[ADDR["sigaction"] - DATA: ADDR["sigaction"] - DATA + len(act)] = act
    stack = struct.pack("<QiiQ", ADDR["sigstack"], 0, 0, 0x4000)
    data[ADDR["altstack"] - DATA: ADDR["altstack"] - DATA + len(stack)] = stack
    data[ADDR["template"] - DATA: ADDR["template"] - DATA + L.PAGE] = L.shared_page()
    return bytes(data)


def _elf(code: bytes, data: bytes) -> bytes:
    """A static ELF64 with one RWX PT_LOAD at INIT_BASE: code, then the data page at DATA."""
    if INIT_BASE + len(code) > DATA:
        raise ValueError("the guest's code runs into its data page")
    image = code + bytes(DATA - INIT_BASE - len(code))
    used = max(i + 1 for i, b in enumerate(data) if b) if any(data) else 0
    filesz = len(image) + used
    ehdr = struct.pack("<4sBBBBB7xHHIQQQIHHHHHH", b"\x7fELF", 2, 1, 1, 0, 0, 2, 183, 1,
                       INIT_BASE + 0x80, 64, 0, 0, 64, 56, 1, 0, 0, 0)
    phdr = struct.pack("<IIQQQQQQ", 1, 7, 0, INIT_BASE, INIT_BASE, filesz, len(image) + len(data), 0x1000)
    out = bytearray(image + data[:used])
    out[: len(ehdr) + len(phdr)] = ehdr + phdr
    return bytes(out)


def build_tab(cases, probe_offsets) -> bytes:
    """cases.tab: [n, cases file size] then per case: entry, n probes, (offset, retprobe) x2, probed addr,
    the file offset of its page."""
    head = struct.pack("<QQ", len(cases), len(cases) * L.SLOT).ljust(TAB_HEADER, b"\0")
    rows = []
    for i, probes in enumerate(probe_offsets):
        base = L.slot_base(i)
        (o0, r0), (o1, r1) = (list(probes) + [(0, 0)] * 2)[:2]
        rows.append(struct.pack("<QQQQQQQQ", base, len(probes), o0, r0, o1, r1, L.CODE + o0, base - L.CODE))
    return head + b"".join(rows)


def cpio_newc(files: dict[str, bytes], dirs=("dev", "proc", "sys")) -> bytes:
    """An initramfs: directories, /dev/console (char 5:1) and the files, in the kernel's newc format."""
    out = bytearray()
    ino = [100]

    def entry(name: str, mode: int, data: bytes = b"", rdev=(0, 0)):
        ino[0] += 1
        hdr = "070701" + "".join(f"{v:08x}" for v in (ino[0], mode, 0, 0, 1, 0, len(data), 0, 0, rdev[0], rdev[1],
                                                       len(name) + 1, 0))
        out.extend(hdr.encode() + name.encode() + b"\0")
        out.extend(b"\0" * (-len(out) % 4))
        out.extend(data)
        out.extend(b"\0" * (-len(out) % 4))

    for d in dirs:
        entry(d, 0o40755)
    entry("dev/console", 0o20600, rdev=(5, 1))
    for name, data in files.items():
        entry(name, 0o100755, data)
    entry("TRAILER!!!", 0)
    return bytes(out)
