"""Probing a program of your own: find a function in an ELF file, what each kernel does with a probe on its first
instruction, what a hit costs, and what the overhead comes to at a given call rate.

A uprobe is placed by file and offset (``perf probe -x FILE FUNC`` and ``bpftrace -e 'uprobe:FILE:FUNC'`` look
the symbol up the same way): :func:`function_site` reads the symbol tables with pyelftools and turns the
symbol's address into the file offset the kernel is given. The kernel then decides by the instruction found
there (``arch_uprobe_analyze_insn``), which :func:`probe_verdicts` asks the lab for, per kernel.

What the lab leaves out: a hit's events are those of the kernel bench's target that takes the same path (an
emulated instruction costs what ``uprobe-nop`` costs, a stepped one what ``uprobe-ret`` costs, an optimised
long nop what 6.18's ``uprobe-nop5`` or 7.2's ``uprobe-nop10`` costs); what the instruction itself does
differently (a ``push`` stores 8 bytes to the stack) is not counted.
"""
from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import pandas as pd

from . import analyze
from .bench import events_per_hit
from .errors import LabError
from .kernel import KERNELS, get_kernel
from .native.bpf import BpfCounter
from .native.example import native_reason
from .native.host import parse_maps
from .outputs import output_file, record_file, write_output
from .native.perf import UprobeEvent
from .native.support import check_native_support
from .program import disassembler
from .x86.decode import can_optimize, insn_decode

SAME_PATH = {"emulate": "uprobe-nop", "xol": "uprobe-ret"}  # the bench target whose hit takes the same path


@dataclass(frozen=True)
class FunctionSite:
    """Where a function starts: in memory (``vaddr``, as the ELF file says) and in the file (``file_offset``:
    what a uprobe is given), with the first bytes there."""
    path: str
    symbol: str
    vaddr: int
    file_offset: int
    size: int
    code: bytes
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


def file_offset(vaddr: int, section_addr: int, section_offset: int) -> int:
    """Where the byte at ``vaddr`` sits in the ELF file, in a section at ``section_addr`` and ``section_offset``."""
    return vaddr - section_addr + section_offset


def function_site(path: str | Path, symbol: str) -> FunctionSite:
    """Find ``symbol`` (a function) in the ELF file ``path``: its .symtab, or .dynsym where the file is stripped."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    path = Path(path)
    try:
        f = path.open("rb")
    except OSError as err:
        raise LabError(f"cannot open {path}: {err.strerror}; give the path of an ELF executable or library") from None
    with f:
        try:
            elf = ELFFile(f)
        except ELFError:
            raise LabError(f"{path} is not an ELF file: give an executable or a shared library "
                           "(`file PATH` says what it is)") from None
        if elf["e_machine"] != "EM_X86_64":
            raise LabError(f"{path} is for {elf['e_machine']}: the lab probes x86-64 ELF files here "
                           "(arm64 words: uprobe_lab.analyze(word, arch='arm64'))")
        found = None
        for name in (".symtab", ".dynsym"):
            table = elf.get_section_by_name(name)
            if table is None:
                continue
            for sym in table.get_symbol_by_name(symbol) or []:
                if sym["st_info"]["type"] == "STT_FUNC" and sym["st_shndx"] != "SHN_UNDEF":
                    found = sym
                    break
            if found:
                break
        if found is None:
            raise LabError(f"no function {symbol!r} defined in {path}: list what it has with "
                           f"`nm -D --defined-only {path}` (or `nm` for an unstripped file); a function the "
                           "program imports is probed in the library that defines it (`ldd` names it)")
        section = elf.get_section(found["st_shndx"])
        offset = file_offset(found["st_value"], section["sh_addr"], section["sh_offset"])
        f.seek(offset)
        code = f.read(max(16, min(found["st_size"], 64)))
    return FunctionSite(str(path), symbol, found["st_value"], offset, found["st_size"], code, section.name,
                        section["sh_addr"], section["sh_offset"])


def hit_verdict(code: bytes, vaddr: int, kernel) -> dict:
    """What ``kernel`` does with a uprobe on the first instruction of ``code`` at ``vaddr`` (emulate, xol, optimise
    after its first hit, or reject at attach) and the exceptions and syscalls of a hit in the steady state."""
    kernel = get_kernel(kernel)
    insn = insn_decode(code, vaddr)
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
    counter as its consumer) while ``call()`` runs ``calls`` times: the hits counted, and the time per call
    without and with the probe (the best of ``repeats``). NativeUnavailable where native probes cannot run."""


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
    with BpfCounter() as counter, UprobeEvent(site.path, site.file_offset) as event:
        counter.attach(event.fd)
        with_probe = per_call()
        hits = counter.count()
    return {"calls": calls * repeats, "hits": hits, "ns_per_call_without": round(without, 1),
            "ns_per_call_with": round(with_probe, 1), "ns_per_hit": round(with_probe - without, 1)}


def perf_probe_count(site: FunctionSite, command: list[str]) -> dict:
    """``perf probe`` on ``site``, ``perf stat`` counting its event while ``command`` runs, and the probe deleted
    again (also on an error or Ctrl-C): {count, commands}, or {reason} where perf cannot do it here."""

    perf = shutil.which("perf")
    if perf is None:
        return {"reason": "perf is not installed (Debian: apt install linux-perf)"}
    event = f"lab_{site.symbol}"[:60]
    add = [perf, "probe", "-x", site.path, "--add", f"{event}={site.symbol}"]
    added = subprocess.run(add, capture_output=True, text=True)
    name = re.search(rf"(probe_\w+:{event})\b", added.stdout + added.stderr)
    if added.returncode != 0 or name is None:
        said = (added.stderr or added.stdout).strip().splitlines()
        return {"reason": f"perf probe refused: {said[-1] if said else added.returncode} (it needs root and tracefs)"}
    name = name.group(1)
    try:
        stat = [perf, "stat", "-x,", "-e", name, "--", *command]
        out = subprocess.run(stat, capture_output=True, text=True, timeout=120)
        line = next((ln for ln in out.stderr.splitlines() if name in ln), "")
        count = int(line.split(",")[0]) if line.split(",")[0].isdigit() else None
    finally:
        subprocess.run([perf, "probe", "-q", "-d", name], capture_output=True)
    return {"count": count, "commands": [" ".join(add[1:]), " ".join(stat[1:3] + ["-e", name, "--", "..."]),
                                         f"probe -d {name}"]}


def build_example(directory: str | Path, pie: bool = True) -> Path:
    """Compile the course's example C program (uprobe_lab/data/tick.c) into ``directory``; its path. LabError
    without a C compiler, naming the package that brings one. ``pie=False`` links it at a fixed address
    (``-no-pie``, 0x400000 on x86-64), where a function's address is no longer its offset in the file; that
    build is named ``tick-no-pie``."""

    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        raise LabError("no C compiler here (Debian/Ubuntu: apt install gcc; Fedora: dnf install gcc): the chapter "
                       "goes on with a library every program loads instead")
    source = resources.files("uprobe_lab.data").joinpath("tick.c")
    name = "tick" if pie else "tick-no-pie"
    out = output_file(Path(directory) / name, "directory", "a new directory")  # never over a program of yours
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
        getpid = measure_probe(function_site(loaded_library("libc.so"), "getpid"), os.getpid, calls=50_000)
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
    write_output(path, json.dumps(data, indent=1) + "\n", "path", "own_program.json")
    return data
