"""Probing a program of your own: find a function in an ELF file, what each kernel does with a probe on its first
instruction, what a hit costs, and what the overhead comes to at a given call rate.

A uprobe is placed by file and offset (``perf probe -x FILE FUNC`` and ``bpftrace -e 'uprobe:FILE:FUNC'`` look
the symbol up the same way): :func:`function_site` reads the symbol tables with pyelftools and turns the
symbol's address into the file offset the kernel is given. The kernel then decides by the instruction found
there (``arch_uprobe_analyze_insn``), which :func:`probe_verdicts` asks the lab for, per kernel.

What the lab leaves out: a hit's events are those of the kernel bench's target that takes the same path (an
emulated instruction costs what ``uprobe-nop`` costs, a stepped one what ``uprobe-ret`` costs, an optimised
long nop what 6.18's ``uprobe-nop5`` or 7.3's ``uprobe-nop10`` costs); what the instruction itself does
differently (a ``push`` stores 8 bytes to the stack) is not counted.
"""
from __future__ import annotations

import contextlib
import difflib
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import pandas as pd

from . import analyze
from .bench import events_per_hit
from .errors import LabError, is_int, shown
from .interrupt import handling, stop_signals
from .kernel import KERNELS, get_kernel
from .native.bpf import BpfCounter
from .native.errors import NativeUnavailable
from .native.example import native_reason
from .native.host import ended_here, parse_maps, pid_namespace
from .outputs import (Manifest, NotRegularFile, open_regular, output_file, record_file, refuse_place,
                      write_output)
from .native.perf import UprobeEvent, run_own_group
from .native.support import check_native_support
from .program import disassembler
from .x86.decode import can_optimize, insn_decode

MAX_CALLS = 10_000_000  # calls of measure_probe: a probed call costs microseconds, so this is minutes already
SAME_PATH = {"emulate": "uprobe-nop", "xol": "uprobe-ret"}  # the bench target whose hit takes the same path


FUNCTION_TYPES = ("STT_FUNC", "STT_LOOS")  # STT_LOOS: pyelftools' name for type 10, the GNU ABI's STT_GNU_IFUNC
VERSYM_HIDDEN = 0x8000  # .gnu.version: set on a version that is not the default (name@V, not name@@V)


@dataclass(frozen=True)
class FunctionSite:
    """Where a function starts: in memory (``vaddr``, as the ELF file says) and in the file (``file_offset``:
    what a uprobe is given), with the first bytes there.

    ``ifunc``: the symbol is an IFUNC (STT_GNU_IFUNC, ``i`` in ``nm``; glibc's ``strlen``, ``memcpy``): what
    stands at its address is the resolver, which the dynamic linker calls once to pick the implementation callers
    are bound to. A uprobe on the name (here, ``perf probe``, bpftrace) probes the resolver's entry: it is hit
    when a program binds the name, not on each call. ``version``: the symbol version (``GLIBC_2.14``), the
    default one (``memcpy@@GLIBC_2.14``) that a program linked now binds, not an old one kept for old programs."""
    path: str
    symbol: str
    vaddr: int
    file_offset: int
    size: int
    code: bytes
    ifunc: bool = False
    version: str = ""
    section: str = ""  # the section that holds the function (.text), with its address and its offset in the file
    section_addr: int = 0
    section_offset: int = 0

    def offset_formula(self) -> str:
        """How ``file_offset`` follows from the address: address - section address + section offset."""
        return (f"file offset = {self.vaddr:#x} - {self.section_addr:#x} ({self.section}'s address) + "
                f"{self.section_offset:#x} ({self.section}'s offset in the file) = {self.file_offset:#x}")

    def listing(self, n: int = 4) -> list[str]:
        """The first ``n`` instructions, as objdump shows them."""
        md = disassembler("x86_64")
        code = self.code[: self.size] if self.size else self.code  # the function's bytes, not what follows it
        return [f"{i.address:#x}: {i.bytes.hex(' '):<24} {i.mnemonic} {i.op_str}".rstrip()
                for _, i in zip(range(n), md.disasm(code, self.vaddr))]


def open_elf_file(path) -> tuple[Path, object]:
    """``path`` opened for reading, refused with a LabError unless it is a regular file with contents: a FIFO
    would block the open until a writer comes (opened non-blocking, then looked at), a directory or a device is
    no program, and a /proc file such as /proc/self/mem reads as empty or not at all."""
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise LabError(f"give the path of an ELF executable or library as a str or Path, got {shown(path)}")
    path = Path(os.fsdecode(path))
    if "\0" in str(path):
        raise LabError(f"the path {shown(str(path))} holds a NUL byte, which no file name can: give the "
                       "path of an ELF executable or library")
    try:
        f = open_regular(path)
    except NotRegularFile as err:
        raise LabError(f"{shorten(str(path))} is {err.kind}: give the path of an ELF executable or library") from None
    except OSError as err:
        raise LabError(f"cannot open {shorten(str(path))}: {err.strerror}; give the path of an ELF executable or "
                       "library") from None
    if os.fstat(f.fileno()).st_size == 0:
        f.close()
        raise LabError(f"{shorten(str(path))} is an empty file (a /proc file reads as one): give the path of an ELF "
                       "executable or library")
    return path, f


def shorten(text: str, limit: int = 200) -> str:
    """A path or a parser's message for an error: cut to ``limit`` characters."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def file_offset(vaddr: int, section_addr: int, section_offset: int) -> int:
    """Where the byte at ``vaddr`` sits in the ELF file, in a section at ``section_addr`` and ``section_offset``."""
    return vaddr - section_addr + section_offset


def function_site(path: str | Path, symbol: str) -> FunctionSite:
    """Find ``symbol`` (a function) in the ELF file ``path`` as a program binds it: in its .symtab, or .dynsym
    where the file is stripped; of two versions the default one (``@@``) unless ``symbol`` names one
    (``memcpy@GLIBC_2.2.5``); an IFUNC too (see FunctionSite)."""
    from elftools.elf.elffile import ELFFile

    if not isinstance(symbol, str) or not symbol:
        raise LabError(f"name the function as a string, e.g. 'getpid', got {shown(symbol)}")
    path, f = open_elf_file(path)
    with f:
        try:
            elf = ELFFile(f)
        except Exception:  # ELFError, or what the parser meets in a file that only starts like one
            raise LabError(f"{path} is not an ELF file: give an executable or a shared library "
                           "(`file PATH` says what it is)") from None
        if elf["e_machine"] != "EM_X86_64":
            raise LabError(f"{path} is for {elf['e_machine']}: the lab probes x86-64 ELF files here "
                           "(arm64 words: uprobe_lab.analyze(word, arch='arm64'))")
        try:
            found, version, names = _function_symbol(elf, symbol)
            if found is not None:
                section = elf.get_section(found["st_shndx"])
                offset = file_offset(found["st_value"], section["sh_addr"], section["sh_offset"])
                f.seek(max(offset, 0))
                code = f.read(max(16, min(found["st_size"], 64)))
        except Exception as err:  # a file cut short or damaged: pyelftools raises what its parser met
            raise LabError(f"{path} is not an ELF file pyelftools can read to its end ({type(err).__name__}: "
                           f"{shorten(str(err), 100)}): is it cut short? (`readelf -a` says what is wrong)") from None
    if found is None:
        near = difflib.get_close_matches(symbol.partition("@")[0], names, n=5)  # without a version asked for
        raise LabError(f"no function {shown(symbol)} defined in {path}"
                       + (f"; the closest it defines: {', '.join(near)}" if near else "")
                       + f". List them all with `nm -D --defined-only {path}` (or `nm` for an unstripped file); "
                       "a function the program imports is probed in the library that defines it (`ldd` names it)")
    if offset < 0 or not code:
        raise LabError(f"{path} has no code for {symbol} where its symbol says (file offset {offset:#x}): is the "
                       "file cut short or damaged? (`readelf -a` says what is wrong)")
    return FunctionSite(str(path), found.name, found["st_value"], offset, found["st_size"], code,
                        ifunc=found["st_info"]["type"] != "STT_FUNC", version=version, section=section.name,
                        section_addr=section["sh_addr"], section_offset=section["sh_offset"])


def _function_symbol(elf, symbol: str):
    """(the symbol ``symbol`` defined as a function, its version, every function name) from the first table that
    has it; of several versions the default one, or the one named (``memcpy@GLIBC_2.2.5``, as ``nm -D`` writes it).
    (None, "", names) where none defines it."""
    symbol, _, wanted = symbol.partition("@")
    wanted = wanted.lstrip("@")
    names = set()
    for name in (".symtab", ".dynsym"):
        table = elf.get_section_by_name(name)
        if table is None:
            continue
        versions = elf.get_section_by_name(".gnu.version") if name == ".dynsym" else None
        found = []
        for i, sym in enumerate(table.iter_symbols()):
            if sym["st_info"]["type"] not in FUNCTION_TYPES or not isinstance(sym["st_shndx"], int):
                continue  # data, or not defined here (SHN_UNDEF: imported; SHN_ABS)
            names.add(sym.name)
            if sym.name == symbol:
                found.append((versions.get_symbol(i)["ndx"] if versions else 0, sym))
        found = [(ndx, sym) for ndx, sym in found if not wanted or _version_name(elf, ndx) == wanted]
        if found:
            ndx, sym = min(found, key=lambda v: isinstance(v[0], int) and v[0] & VERSYM_HIDDEN != 0)
            return sym, _version_name(elf, ndx), names
    return None, "", sorted(names)


def _version_name(elf, ndx) -> str:
    """The name of version index ``ndx`` (.gnu.version_d), "" where the symbol has none."""
    defined = elf.get_section_by_name(".gnu.version_d")
    if not isinstance(ndx, int) or defined is None:
        return ""
    version = defined.get_version(ndx & ~VERSYM_HIDDEN)
    return next(version[1]).name if version else ""


def hit_verdict(code: bytes, vaddr: int, kernel) -> dict:
    """What ``kernel`` does with a uprobe on the first instruction of ``code`` at ``vaddr`` (emulate, xol, optimise
    after its first hit, or reject at attach) and the exceptions and syscalls of a hit in the steady state."""
    if isinstance(code, str):  # hex text, as analyze() takes it
        try:
            code = bytes.fromhex(code)
        except ValueError:
            raise LabError(f"{shown(code)} is not hex bytes: give the instruction's bytes, "
                           "e.g. b'\\x55' or '55'") from None
    if not isinstance(code, (bytes, bytearray)) or not code:
        raise LabError(f"give the instruction's bytes, e.g. b'\\x55' or '55', got {shown(code)}")
    if not is_int(vaddr) or not 0 <= vaddr < 1 << 64:
        raise LabError(f"vaddr is the instruction's address, an int from 0 to 2**64 - 1, got {shown(vaddr)}")
    kernel = get_kernel(kernel)
    insn = insn_decode(bytes(code), vaddr)
    verdict = analyze(code[:insn.length].hex(), "x86_64", kernel, vaddr=vaddr)  # where it is decides some verdicts
    action, bench = verdict["action"], SAME_PATH.get(verdict["action"])
    if action != "reject" and can_optimize(insn, vaddr, kernel):
        action, bench = "optimise", "uprobe-nop10" if kernel.optimize_nop10 else "uprobe-nop5"  # by the rule
    ev = events_per_hit(bench, "x86_64", kernel) if bench else {}
    return {"kernel": kernel.name, "instruction": f"{verdict['mnemonic']} {verdict['op_str']}".strip(),
            "probe": action, "exceptions": ev.get("exceptions", 0), "syscalls": ev.get("syscalls", 0),
            "why": verdict["reason"]}


def probe_verdicts(site: FunctionSite, kernels=tuple(KERNELS)) -> pd.DataFrame:
    """:func:`hit_verdict` for the function's first instruction, one row per kernel."""
    return pd.DataFrame([hit_verdict(site.code, site.vaddr, k) for k in kernels])


def overhead(calls_per_s: float, ns_per_hit: float, cpus: int = 1) -> float:
    """The share of ``cpus`` CPUs a probe takes: calls per second x the time of a hit."""
    if calls_per_s < 0 or ns_per_hit < 0 or cpus < 1:
        raise LabError("calls per second and ns per hit are not negative, and there is at least one CPU")
    return calls_per_s * ns_per_hit * 1e-9 / cpus


def measure_probe(site: FunctionSite, call, calls: int = 200_000, repeats: int = 3) -> dict:
    """A real uprobe on ``site`` on this machine (perf's uprobe PMU, this process only, the kernel bench's BPF
    counter as its consumer) while ``call()`` runs ``calls`` times: the hits in this thread, those in the process's
    other threads while the probe was on (``other_threads``: a probe on a process fires in all its threads, and in
    a Jupyter kernel ZeroMQ's and asyncio's threads call getpid too), and the time per call without and with the
    probe (the best of ``repeats``). NativeUnavailable where native probes cannot run."""
    if not isinstance(site, FunctionSite):
        raise LabError(f"measure_probe needs the site to probe, got {shown(site)}: function_site(path, name) finds it")
    if not callable(call):
        raise LabError(f"call is the function that calls the probed one, e.g. os.getpid, got {shown(call)}")
    if not (is_int(calls) and is_int(repeats) and 1 <= calls <= MAX_CALLS and 1 <= repeats <= 100):
        raise LabError(f"calls is an int from 1 to {MAX_CALLS:,} and repeats one from 1 to 100, got "
                       f"calls={shown(calls)}, repeats={shown(repeats)}")
    check_native_support(None)

    def per_call() -> float:
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter_ns()
            for _ in range(calls):
                call()
            best = min(best, (time.perf_counter_ns() - t0) / calls)
        return best

    without = per_call()
    with BpfCounter(thread=threading.get_native_id()) as counter, UprobeEvent(site.path, site.file_offset) as event:
        counter.attach(event.fd)
        with_probe = per_call()
        hits, other_threads = counter.counts()
    return {"calls": calls * repeats, "hits": hits, "other_threads": other_threads,
            "ns_per_call_without": round(without, 1),
            "ns_per_call_with": round(with_probe, 1), "ns_per_hit": round(with_probe - without, 1)}


@contextlib.contextmanager
def _ended_by_signal_as_by_ctrl_c():
    """SIGTERM and SIGHUP (``kill``, a closed terminal) raise KeyboardInterrupt inside, as Ctrl-C does, so the
    ``finally`` that deletes a system-wide perf probe runs; on the way out the process then gets the signal it was
    sent. Handlers can be set only in the main thread; elsewhere nothing changes."""
    received = []

    def interrupt(signum, _frame):
        received.append(signum)
        raise KeyboardInterrupt(signal.Signals(signum).name)

    try:
        with handling(stop_signals(), interrupt):
            yield
    finally:
        if received:
            os.kill(os.getpid(), received[0])


def _uprobe_events() -> str:
    """The kernel's list of uprobe events (tracefs), or "" where it cannot be read."""
    for events in ("/sys/kernel/tracing/uprobe_events", "/sys/kernel/debug/tracing/uprobe_events"):
        try:
            return Path(events).read_text()
        except OSError:
            continue
    return ""


def _delete_stale_lab_events(perf: str) -> None:
    """Delete the probes a run killed outright (SIGKILL) left behind: perf_probe_count's events are named
    lab_<symbol>_<pid namespace>_<pid>, and one of this pid namespace whose pid no longer runs is nobody's. The
    events are system-wide: one of another namespace (a container's) is left, its pid cannot be looked up here."""
    text = _uprobe_events()
    for group, event, namespace, pid in re.findall(r"^[pr]:(\w+)/(lab_\w+_([0-9a-f]+)_(\d+))\s", text, re.M):
        if ended_here(namespace, int(pid)):
            subprocess.run([perf, "probe", "-q", "-d", f"{group}:{event}"], capture_output=True)


def perf_probe_count(site: FunctionSite, command: list[str], timeout_s: float = 120) -> dict:
    """``perf probe`` on ``site``, ``perf stat`` counting its event while ``command`` runs (for at most ``timeout_s``:
    then perf and every process of the command are killed), and the probe deleted again (also on an error or
    Ctrl-C, SIGTERM or SIGHUP; a run killed outright leaves its probe to the next run to delete): {count,
    commands}, or {reason} where perf cannot do it here."""

    perf = shutil.which("perf")
    if perf is None:
        return {"reason": "perf is not installed (Debian: apt install linux-perf)"}
    with _ended_by_signal_as_by_ctrl_c():
        _delete_stale_lab_events(perf)
        return _perf_probe_count(perf, site, command, timeout_s)


def _perf_probe_count(perf: str, site: FunctionSite, command: list[str], timeout_s: float) -> dict:
    # perf takes a C identifier (ASCII: a byte each) as the event's name, shorter than MAX_EVENT_NAME_LEN (64, kernel/trace/trace_probe.h):
    # 46 + 8 hex digits + 7 (pids < 2**22) + 2 = 63. The pid namespace and pid keep two runs at once (tests, two
    # notebooks, two containers) apart: perf's probe events are system-wide, and one's delete would take the other's
    event = re.sub(r"\W", "_", f"lab_{site.symbol}", flags=re.ASCII)[:46] + f"_{pid_namespace()}_{os.getpid()}"
    add = [perf, "probe", "-x", site.path, "--add", f"{event}={site.symbol}"]
    # until perf names it, the event in any group (an interrupted add may have made it) - unless it was there
    # before: then the add is refused and the event is someone else's to keep
    name = None if re.search(rf"^[pr]:\w+/{event}\s", _uprobe_events(), re.M) else f"*:{event}"
    try:
        added = subprocess.run(add, capture_output=True, text=True)
        found = re.search(rf"(probe_\w+:{event})\b", added.stdout + added.stderr)
        if added.returncode != 0 or found is None:
            said = [line.strip() for line in (added.stderr or added.stdout).splitlines() if line.strip()]
            why = said[0] if said else f"exit status {added.returncode}"  # perf's first line names the problem
            if os.geteuid() != 0:
                why += " (perf probe needs root)"
            return {"reason": f"perf probe refused {event}={site.symbol} in {site.path}: {why}"}
        name = found.group(1)
        stat = [perf, "stat", "-x,", "-e", name, "--", *command]
        try:
            out = run_own_group(stat, timeout_s)
        except subprocess.TimeoutExpired:
            return {"reason": f"{' '.join(command)} ran longer than {timeout_s:g} s under perf stat; it was stopped"}
    finally:
        if name is not None:
            subprocess.run([perf, "probe", "-q", "-d", name], capture_output=True)
    line = next((ln for ln in out.stderr.splitlines() if name in ln), "")
    count = int(line.split(",")[0]) if line.split(",")[0].isdigit() else None
    return {"count": count, "commands": [" ".join(add[1:]), " ".join(stat[1:3] + ["-e", name, "--", "..."]),
                                         f"probe -d {name}"]}


def build_example(directory: str | Path, pie: bool = True) -> Path:
    """Compile the course's example C program (uprobe_lab/data/tick.c) into ``directory``; its path. LabError
    without a C compiler, naming the package that brings one. ``pie=False`` links it at a fixed address
    (``-no-pie``, 0x400000 on x86-64), where a function's address is no longer its offset in the file; that
    build is named ``tick-no-pie``."""
    way_out = "a new directory, e.g. build_example(tempfile.mkdtemp())"
    if not isinstance(directory, (str, os.PathLike)):
        raise LabError(f"build_example's directory is {shown(directory)}, not a path; give {way_out}")
    # Judged as --out is: not the working directory (a notebook's is the checkout's notebooks/), the checkout,
    # the package, home or /; another directory is guarded by its manifest below
    refuse_place(directory, "build_example's directory", "build_example(tempfile.mkdtemp())")
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        raise LabError("no C compiler here (Debian/Ubuntu: apt install gcc; Fedora: dnf install gcc): the chapter "
                       "goes on with a library every program loads instead")
    source = resources.files("uprobe_lab.data").joinpath("tick.c")
    name = "tick" if pie else "tick-no-pie"
    out = Path(directory) / name
    if out.is_dir() or ((out.exists() or out.is_symlink()) and not Manifest(out.parent).is_ours(name)):
        raise LabError(f"build_example: {out} already exists and the lab did not write it; nothing was changed. "
                       f"Give {way_out}")  # never over a program of yours
    output_file(out, "build_example's directory", "tempfile.mkdtemp()")  # writable, no planted manifest link
    with resources.as_file(source) as src:
        done = subprocess.run([cc, "-O2", *([] if pie else ["-no-pie"]), "-o", str(out), str(src)],
                              capture_output=True, text=True)
    if done.returncode != 0:
        raise LabError(f"{cc} could not build the example: {done.stderr.strip()[-300:]}")
    record_file(out)
    return out


RECORDING = Path(__file__).resolve().parent / "data" / "own_program_6.18.json"


def loaded_library(prefix: str) -> Path:
    """The file of a library this Python has mapped whose name starts with ``prefix`` ("libc.so", "libpython")."""

    try:
        names = {m.name for m in parse_maps() if m.name.startswith("/")}
    except OSError:
        raise LabError("no /proc/self/maps here: finding a loaded library needs Linux") from None
    found = sorted(n for n in names if Path(n).name.startswith(prefix))
    if not found:
        raise LabError(f"this Python has no library {prefix}* mapped; give the path yourself")
    return Path(found[0])


def interpreter_file() -> Path:
    """The file that holds this Python's interpreter: its libpython where it is a shared library, else the
    executable (a Python linked statically)."""
    try:
        return loaded_library("libpython")
    except LabError:
        return Path(os.path.realpath(sys.executable))


def measured_or_recorded(tick: Path | None = None) -> dict:
    """The chapter's native part: a probe on libc's getpid timed while Python calls it, and ``perf probe`` counting
    the example program's tick() (when ``tick`` is given and perf can run); the recording where native probes
    cannot run here. {recorded, reason, host, getpid, perf}."""


    reason = native_reason()
    if reason is None:
        try:
            getpid = measure_probe(function_site(loaded_library("libc.so"), "getpid"), os.getpid, calls=50_000)
        except NativeUnavailable as err:  # refused past the trial open: the BPF consumer, say
            reason = str(err)
        else:
            perf = (perf_probe_count(function_site(tick, "tick"), [str(tick), "100000"]) if tick
                    else {"reason": "no example program (no C compiler)"})
            return {"recorded": False, "reason": None, "host": platform.release(), "getpid": getpid, "perf": perf}
    return {"recorded": True, "reason": reason, **json.loads(RECORDING.read_text())}


def record_own_program(tick: Path, path: str | Path = RECORDING) -> dict:
    """Measure :func:`measured_or_recorded` here and keep it as the recording other machines show."""

    run = measured_or_recorded(tick)
    if run["recorded"]:
        raise LabError(f"cannot record: {run['reason']}")
    data = {"host": f"{run['host']}, {len(os.sched_getaffinity(0))} CPUs (a virtual machine)",
            "command": "uprobe_lab.own_program.record_own_program(build_example(dir))",
            "getpid": run["getpid"], "perf": run["perf"]}
    data["perf"]["commands"] = [c.replace(str(tick), "./tick") for c in data["perf"].get("commands", [])]
    write_output(path, json.dumps(data, indent=1) + "\n", "path", "own_program.json", recording=RECORDING.name)
    return data
