"""Differential fuzzer: a probe must not change what a program computes.

Random programs (``x86.randprog.fuzz_program``, ``arm64.randprog.fuzz_program``) run once without
probes and then once per probe site, per kernel configuration, with one probe: an entry probe on an
instruction ``arch_uprobe_analyze_insn`` accepts, or a return probe on a function. The final state
- every GPR, the arithmetic flags (x86) or NZCV (arm64), the stack above the final sp, the data
page (x86) or the top 4 KiB of the stack (arm64) - must equal the unprobed run's.

Each probe run is labelled with the mechanism that actually ran the hit: x86 ``emulate``, ``xol``,
``uretprobe-int3`` (6.10), ``uretprobe-syscall`` (6.11+), ``nop5-opt`` (6.18 call into the
trampoline), ``nop10-opt`` (dev-tree scheme); arm64 ``simulate``, ``xol``, ``stp-simulate``,
``stp-xol``, ``uretprobe``.

A divergence is classified ``red-zone`` when it is exactly the known 6.18 hazard: a nop5 site ran
optimised, and the unprobed program, with the four words the ``call`` and the trampoline push
(rax, r11, rcx, return address at sp-32..sp-1 of the site, all inside the 128-byte red zone)
written at every optimised hit, ends in the probed run's state bit for bit. Anything else is a
``BUG``, with a reproducer.
"""
from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field

from .arches import get_arch
from .errors import LabError
from .kernel import KERNELS, get_kernel
from .uprobes import CountingConsumer, UnprobeableInstruction, UprobeConsumer, uprobe_register
from .x86.optimize import UPROBE_SYSCALL_ARGS_SIZE  # the words a trampoline call leaves below sp



@dataclass(frozen=True)
class Config:
    """One way to run a probe hit: the architecture, a kernel, and process options."""

    arch: str
    label: str
    kernel: object = None
    options: tuple = ()

    def process(self):
        return get_arch(self.arch).process(self.kernel, **dict(self.options))


def x86_configs() -> list[Config]:
    from .x86.optimize import NOP10_DEV_TREE
    return [Config("x86_64", name, name) for name in KERNELS] + [Config("x86_64", NOP10_DEV_TREE.name, NOP10_DEV_TREE)]


def arm64_configs() -> list[Config]:
    return [Config("arm64", "stp=xol", None, (("stp", "xol"),)),
            Config("arm64", "stp=simulate/pin", None, (("stp", "simulate"), ("stp_store", "pin"))),
            Config("arm64", "stp=simulate/uaccess", None, (("stp", "simulate"), ("stp_store", "uaccess")))]


CONFIGS = {"x86_64": x86_configs, "arm64": arm64_configs}


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
    """Counts hits and keeps, per hit, the registers a trampoline call would push (x86)."""

    def __init__(self, proc, vaddr: int):
        self.proc, self.vaddr, self.hits, self.records = proc, vaddr, 0, []
        super().__init__(handler=self._hit, name="fuzz")

    def _hit(self, regs) -> int:
        self.hits += 1
        if self.proc.arch == "x86_64":
            from .x86.optimize import is_optimized
            self.records.append((is_optimized(self.proc, self.vaddr), regs.sp, regs.ax, regs.r11, regs.cx))
        return 0


# --- per architecture: program, run, state ----------------------------------------------------

def make_program(arch: str, seed: int, size: int | None = None):
    rng = random.Random(seed)
    if arch == "x86_64":
        from .x86.randprog import fuzz_program
        return fuzz_program(rng, **({"n": size} if size else {}))
    from .arm64.randprog import fuzz_program
    return fuzz_program(rng, **({"n": size} if size else {}))


ENTRY = {"x86_64": "fuzz_main", "arm64": "gen"}


def _load(config: Config, program):
    proc = config.process()
    proc.load(program, "/lab/fuzz")
    if config.arch == "x86_64":
        from .x86.randprog import FUZZ_DATA
        proc.map("/lab/fuzz-data", FUZZ_DATA, 0x1000, "rw-p")
    return proc


def _args(seed: int) -> list[int]:
    rng = random.Random(~seed)
    return [rng.getrandbits(64) for _ in range(8)]


def _run(proc, seed: int, hook=None) -> dict:
    if hook is not None:
        hook(proc)
    args = _args(seed) if proc.arch == "arm64" else ()
    try:
        proc.call(ENTRY[proc.arch], *args, max_insns=200_000)
    except LabError as e:
        return {"error": str(e)}
    return final_state(proc)


def final_state(proc) -> dict:
    regs = proc.regs()
    if proc.arch == "x86_64":
        from .x86.constants import STACK_TOP
        from .x86.process import GPRS
        from .x86.randprog import FUZZ_DATA
        state = {name: regs.get(name) for name in GPRS}
        state["flags"] = regs.get("flags") & 0x8D5
        state["stack"] = (regs.sp, proc.read(regs.sp, STACK_TOP - regs.sp))
        state["data"] = (FUZZ_DATA, proc.read(FUZZ_DATA, 0x1000))
        return state
    from .arm64.constants import STACK_TOP
    state = regs.as_dict()
    state.pop("ip")
    state["stack"] = (STACK_TOP - 0x1000, proc.read(STACK_TOP - 0x1000, 0x1000))
    return state


def diff_states(expected: dict, got: dict, tramp: int | None = None) -> list[str]:
    """What differs; with ``tramp`` (arm64 return probes), lr and stack words holding the trampoline
    address are the kernel's documented trace (the LR hijack), not a difference."""
    out = []
    for key in expected.keys() | got.keys():
        a, b = expected.get(key), got.get(key)
        if key in ("stack", "data") and a is not None and b is not None:
            base, x = a
            _, y = b
            for off in range(0, min(len(x), len(y)), 8):
                wa, wb = x[off:off + 8], y[off:off + 8]
                if wa != wb and not (tramp is not None and int.from_bytes(wb, "little") == tramp):
                    out.append(f"{key} {base + off:#x}: {wa.hex()} -> {wb.hex()}")
        elif key == "x30" and tramp is not None and b == tramp:
            continue
        elif a != b:
            out.append(f"{key}: {a if not isinstance(a, int) else hex(a)} -> {b if not isinstance(b, int) else hex(b)}")
    return sorted(out)


def mechanism(proc, uprobe, consumer, ret: bool) -> str:
    if proc.arch == "x86_64":
        if ret:
            return "uretprobe-syscall" if proc.kernel.uretprobe_syscall else "uretprobe-int3"
        if any(r[0] for r in consumer.records):
            from .x86.decode import ARCH_UPROBE_FLAG_NOP10
            return "nop10-opt" if ARCH_UPROBE_FLAG_NOP10 in uprobe.auprobe.flags else "nop5-opt"
        return uprobe.auprobe.action
    if ret:
        return "uretprobe"
    from .arm64.stp import aarch64_insn_is_stp_fp_lr_sp_64b
    stp = "stp-" if aarch64_insn_is_stp_fp_lr_sp_64b(uprobe.auprobe.word) else ""
    return stp + uprobe.auprobe.action


def redzone_replay(config: Config, program, seed: int, vaddr: int, records: list) -> dict:
    """The unprobed program with the optimised call's pushes done by hand at each optimised hit."""
    from unicorn import UC_HOOK_CODE

    hits = iter(records)

    def on_site(uc, address, size, user_data):
        optimised, sp, ax, r11, cx = next(hits, (False, 0, 0, 0, 0))
        if optimised:
            words = (ax, r11, cx, vaddr + 5)  # lowest address first: the trampoline's pushes, then the call's
            uc.mem_write(sp - UPROBE_SYSCALL_ARGS_SIZE, b"".join(w.to_bytes(8, "little") for w in words))

    proc = _load(config, program)
    return _run(proc, seed, hook=lambda p: p.uc.hook_add(UC_HOOK_CODE, on_site, None, vaddr, vaddr))


def classify(config: Config, program, seed: int, vaddr: int | None, consumer, got: dict) -> str:
    kernel = get_kernel(config.kernel) if config.arch == "x86_64" else None
    if kernel is None or vaddr is None or not kernel.optimize_nop5 or kernel.nop10_redzone:
        return "BUG"
    optimised = [r for r in consumer.records if r[0]]
    if not optimised or "error" in got:
        return "BUG"
    # the pushed words lie within the 128 bytes below the site's sp by construction; the replay checks
    # that those words, and nothing else, explain the whole difference
    return "red-zone" if redzone_replay(config, program, seed, vaddr, consumer.records) == got else "BUG"


# --- the driver -----------------------------------------------------------------------------

def fuzz_program_once(arch: str, seed: int, configs=None, sites: int | None = None, size: int | None = None,
                      rng: random.Random | None = None, program=None) -> FuzzResult:
    """One program: every config, up to ``sites`` entry probes (all when None) and a return probe per function.

    ``program`` replaces the generated one (it must have the generated programs' entry symbol).
    """
    program = program or make_program(arch, seed, size)
    rng = rng or random.Random(seed)
    result = FuzzResult(programs=1)
    insns = [(addr, raw) for name in program.symbols for addr, raw, _ in program.instructions(name)]
    # sites the kernel treats specially (nop5: optimised on 6.18; nop10: dev-tree only) are always probed
    special = [addr for addr, raw in insns if len(raw) in (5, 10) and raw[:2] in (b"\x0f\x1f", b"\x66\x2e")]
    addrs = [addr for addr, _ in insns if addr not in special]
    for config in configs or CONFIGS[arch]():
        expected = _run(_load(config, program), seed)
        if "error" in expected:
            raise LabError(f"seed {seed}: the unprobed program failed on {config.label}: {expected['error']}")
        chosen = special + (addrs if sites is None or sites >= len(addrs) else rng.sample(addrs, sites))
        probes = [("entry", a) for a in chosen] + [("return", name) for name in program.symbols]
        for kind, where in probes:
            proc = _load(config, program)
            ret = kind == "return"
            if ret:
                consumer = CountingConsumer(ret=True)
            else:
                consumer = RecordingConsumer(proc, where)
            try:
                uprobe = uprobe_register(proc, where, consumer)
            except UnprobeableInstruction:
                result.refused += 1
                continue
            got = _run(proc, seed)
            if consumer.hits == 0 and "error" not in got:
                result.not_hit += 1
                continue
            mech = mechanism(proc, uprobe, consumer, ret)
            result.mechanisms[f"{arch}/{mech}"] += 1
            result.configs[f"{arch}/{config.label}"] += 1
            tramp = proc.mm.xol_area.vaddr if ret and arch == "arm64" and proc.mm.xol_area else None
            diff = diff_states(expected, got, tramp)
            if not diff:
                continue
            kind_ = classify(config, program, seed, None if ret else where, consumer, got)
            probe = f"return@{where}" if ret else f"entry@{where:#x}"
            listing = program.listing() if kind_ == "BUG" else ""
            result.cases.append(Divergence(kind_, arch, seed, config.label, mech, probe, diff, listing))
    return result


def fuzz(arch: str = "all", programs: int = 8, seed: int = 0, sites: int | None = 6, size: int | None = None,
         progress=None) -> FuzzResult:
    """Fuzz ``programs`` programs per architecture ("x86_64", "arm64" or "all"); program i uses seed+i."""
    arches = list(CONFIGS) if arch == "all" else [arch]
    for a in arches:
        if a not in CONFIGS:
            raise LabError(f"unknown architecture {a!r}: the fuzzer knows {', '.join(CONFIGS)}")
    result = FuzzResult()
    for a in arches:
        for i in range(programs):
            result.merge(fuzz_program_once(a, seed + i, sites=sites, size=size))
            if progress is not None:
                progress(1)
    return result
