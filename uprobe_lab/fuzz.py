"""Differential fuzzer: a probe must not change what a program computes.

Random programs run once without probes and then once per probe site, per kernel configuration,
with one probe: an entry probe on an instruction ``arch_uprobe_analyze_insn`` accepts, or a return
probe on a function. The final state (the target's ``final_state``: every GPR, the flags, the stack
the program owns, its data) must equal the unprobed run's.

This module knows no architecture: each one is a ``FuzzTarget`` (uprobe_lab.fuzz_target) in
``TARGETS`` - x86.fuzz_target and arm64.fuzz_target - which makes the programs, reads the state,
names the mechanism that ran each hit (x86 ``emulate``, ``xol``, ``uretprobe-int3`` (6.10),
``uretprobe-syscall`` (6.11+), ``nop5-opt``, ``nop10-opt``; arm64 ``simulate``, ``xol``,
``stp-simulate``, ``stp-xol``, ``uretprobe``) and classifies a divergence: a known hazard (x86's
6.18 ``red-zone``) or a ``BUG``, reported with a reproducer.
"""
from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field

from .arm64.fuzz_target import TARGET as ARM64_TARGET
from .errors import LabError
from .fuzz_target import Config, FuzzTarget
from .uprobes import CountingConsumer, UnprobeableInstruction, UprobeConsumer, uprobe_register
from .x86.fuzz_target import TARGET as X86_TARGET

TARGETS: dict[str, FuzzTarget] = {"x86_64": X86_TARGET, "arm64": ARM64_TARGET}

__all__ = ["Config", "Divergence", "FuzzResult", "TARGETS", "fuzz", "fuzz_program_once"]


@dataclass
class Divergence:
    kind: str  # "red-zone" or "BUG"
    arch: str
    seed: int
    config: str
    mechanism: str
    probe: str  # "entry@0x..." or "return@symbol"
    diff: list
    listing: str = ""

    def __str__(self) -> str:
        head = (f"[{self.kind}] {self.arch} seed {self.seed} {self.config} {self.probe} ({self.mechanism})\n  "
                + "\n  ".join(self.diff))
        return head + ("\n" + self.listing if self.listing else "")


@dataclass
class FuzzResult:
    programs: int = 0
    refused: int = 0  # sites arch_uprobe_analyze_insn refused (UnprobeableInstruction)
    not_hit: int = 0  # probes on code the program skipped
    mechanisms: Counter = field(default_factory=Counter)
    configs: Counter = field(default_factory=Counter)
    cases: list = field(default_factory=list)  # every Divergence (red-zone ones without a listing)

    @property
    def probe_runs(self) -> int:
        return sum(self.mechanisms.values())

    @property
    def divergences(self) -> Counter:
        return Counter(d.kind for d in self.cases)

    @property
    def bugs(self) -> list[Divergence]:
        return [d for d in self.cases if d.kind == "BUG"]

    def merge(self, other: "FuzzResult") -> "FuzzResult":
        self.programs += other.programs
        self.refused += other.refused
        self.not_hit += other.not_hit
        self.mechanisms.update(other.mechanisms)
        self.configs.update(other.configs)
        self.cases.extend(other.cases)
        return self

    def summary(self) -> str:
        mech = ", ".join(f"{k} {v}" for k, v in sorted(self.mechanisms.items()))
        conf = ", ".join(f"{k} {v}" for k, v in self.configs.items())
        div = ", ".join(f"{k} {v}" for k, v in sorted(self.divergences.items())) or "none"
        return (f"programs {self.programs} x mechanisms {len(self.mechanisms)}: {self.probe_runs} probe runs "
                f"({self.refused} sites refused, {self.not_hit} probes not hit)\n"
                f"  per mechanism: {mech}\n  per kernel/options: {conf}\n  divergences: {div}")


class RecordingConsumer(UprobeConsumer):
    """Counts hits and keeps, per hit, what the target's classify() may need (x86: the registers a
    trampoline call would push)."""

    def __init__(self, proc, vaddr: int, target: FuzzTarget):
        self.proc, self.vaddr, self.target, self.hits, self.records = proc, vaddr, target, 0, []
        super().__init__(handler=self._hit, name="fuzz")

    def _hit(self, regs) -> int:
        self.hits += 1
        record = self.target.record_hit(self.proc, self.vaddr, regs)
        if record is not None:
            self.records.append(record)
        return 0


def _load(target: FuzzTarget, config: Config, program):
    proc = config.process()
    target.load(proc, program)
    return proc


def _run(target: FuzzTarget, proc, seed: int, hook=None) -> dict:
    if hook is not None:
        hook(proc)
    try:
        proc.call(target.entry, *target.args(seed), max_insns=200_000)
    except LabError as e:
        return {"error": str(e)}
    return target.final_state(proc)


def diff_states(expected: dict, got: dict, trace: int | None = None, trace_registers=()) -> list[str]:
    """What differs; a stack word or one of ``trace_registers`` holding ``trace`` (the value a return
    probe leaves by design, arm64's trampoline address in lr) is not a difference."""
    out = []
    for key in expected.keys() | got.keys():
        a, b = expected.get(key), got.get(key)
        if key in ("stack", "data") and a is not None and b is not None:
            base, x = a
            _, y = b
            for off in range(0, min(len(x), len(y)), 8):
                wa, wb = x[off:off + 8], y[off:off + 8]
                if wa != wb and not (trace is not None and int.from_bytes(wb, "little") == trace):
                    out.append(f"{key} {base + off:#x}: {wa.hex()} -> {wb.hex()}")
        elif trace is not None and b == trace and key in trace_registers:
            continue
        elif a != b:
            out.append(f"{key}: {a if not isinstance(a, int) else hex(a)} -> {b if not isinstance(b, int) else hex(b)}")
    return sorted(out)


# --- the driver -----------------------------------------------------------------------------

def fuzz_program_once(arch: str, seed: int, configs=None, sites: int | None = None, size: int | None = None,
                      rng: random.Random | None = None, program=None) -> FuzzResult:
    """One program: every config, up to ``sites`` entry probes (all when None) and a return probe per function.

    ``program`` replaces the generated one (it must have the generated programs' entry symbol).
    """
    target = get_target(arch)
    program = program or target.program(random.Random(seed), size)
    rng = rng or random.Random(seed)
    result = FuzzResult(programs=1)
    insns = [(addr, raw) for name in program.symbols for addr, raw, _ in program.instructions(name)]
    special = target.special_sites(insns)
    addrs = [addr for addr, _ in insns if addr not in special]
    for config in configs or target.configs():
        expected = _run(target, _load(target, config, program), seed)
        if "error" in expected:
            raise LabError(f"seed {seed}: the unprobed program failed on {config.label}: {expected['error']}")
        chosen = special + (addrs if sites is None or sites >= len(addrs) else rng.sample(addrs, sites))
        probes = [("entry", a) for a in chosen] + [("return", name) for name in program.symbols]
        for kind, where in probes:
            proc = _load(target, config, program)
            ret = kind == "return"
            consumer = CountingConsumer(ret=True) if ret else RecordingConsumer(proc, where, target)
            try:
                uprobe = uprobe_register(proc, where, consumer)
            except UnprobeableInstruction:
                result.refused += 1
                continue
            got = _run(target, proc, seed)
            if consumer.hits == 0 and "error" not in got:
                result.not_hit += 1
                continue
            records = [] if ret else consumer.records
            mech = target.mechanism(proc, uprobe, records, ret)
            result.mechanisms[f"{arch}/{mech}"] += 1
            result.configs[f"{arch}/{config.label}"] += 1
            diff = diff_states(expected, got, target.return_trace(proc) if ret else None, target.trace_registers)
            if not diff:
                continue

            def replay(hook, config=config):
                return _run(target, _load(target, config, program), seed, hook)
            kind_ = target.classify(config, None if ret else where, records, got, replay)
            probe = f"return@{where}" if ret else f"entry@{where:#x}"
            listing = program.listing() if kind_ == "BUG" else ""
            result.cases.append(Divergence(kind_, arch, seed, config.label, mech, probe, diff, listing))
    return result


def get_target(arch: str) -> FuzzTarget:
    try:
        return TARGETS[arch]
    except KeyError:
        raise LabError(f"unknown architecture {arch!r}: the fuzzer knows {', '.join(TARGETS)}") from None


def fuzz(arch: str = "all", programs: int = 8, seed: int = 0, sites: int | None = 6, size: int | None = None,
         progress=None) -> FuzzResult:
    """Fuzz ``programs`` programs per architecture ("x86_64", "arm64" or "all"); program i uses seed+i.

    ``sites`` and ``size`` go to :func:`fuzz_program_once`. ``progress``, if given, is called after each
    program with the result so far."""
    arches = list(TARGETS) if arch == "all" else [get_target(arch).arch]
    result = FuzzResult()
    for a in arches:
        for i in range(programs):
            result.merge(fuzz_program_once(a, seed + i, sites=sites, size=size))
            if progress is not None:
                progress(result)
    return result
