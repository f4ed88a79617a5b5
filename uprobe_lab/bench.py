"""The kernel bench's trigger benchmarks, run on the emulator.

Names follow tools/testing/selftests/bpf/benchs/run_bench_uprobes.sh without the ``trig-``
prefix; 7.3's bench names the x86 ones ``uprobe-nop10``, ``uretprobe-nop10`` and ``usdt-nop10``, 6.18's
``uprobe-nop5`` and ``usdt-nop5``; the lab keeps all of them, plus ``*-pagecross`` variants whose
long nop straddles a page. A ``usdt-*`` bench attaches as libbpf does (uprobe_lab.usdt.attach_usdt,
with the kernel tree's own libbpf, as the kernel's bench links it). A kernel that refuses the probe
(6.18 and a nop10: its 0x2e prefix) gives a row that says so instead of events. Each bench is measured twice, because the two questions need different instruments:
events per hit come from a process that counts every user instruction (exact, slow), and
emulated hits/s from one that does not (fast). Like the kernel bench, both warm up first, so
the figures describe the steady state (after a 6.18 nop5 site has been optimised, for example).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

from .arches import make_process
from .contended import layout_note
from .kernel import get_kernel, refuse_uretprobe_before, release_rules
from .machine_scaling import scaling_note
from .process import MAX_INSNS
from .smp import MAX_CPUS, run_on_cpus
from .errors import LabError, is_int, shown
from .trace import EVENT_KINDS, per_hit
from .uprobes import CountingConsumer, UnprobeableInstruction, uprobe_register
from .usdt import USDT_SHAPES, attach_usdt, read_usdt_sites, site_bench

TARGETS = {
    "nop": "uprobe_target_nop", "push": "uprobe_target_push", "ret": "uprobe_target_ret",
    "nop5": "uprobe_target_nop5", "nop10": "uprobe_target_nop10",
    "nop5-pagecross": "uprobe_target_nop5_pagecross", "nop10-pagecross": "uprobe_target_nop10_pagecross",
}
X86_ONLY = {"nop5", "nop10", "nop5-pagecross", "nop10-pagecross"}
USDT_TARGETS = {  # x86-64 only, like the kernel bench's usdt benches
    "nop": "usdt_nop", "nop5": "usdt_nop5", "nop10": "usdt_nop10",
    "nop5-pagecross": "usdt_nop5_pagecross", "nop10-pagecross": "usdt_nop10_pagecross",
}


DEFAULT_ITERATIONS = 20_000  # emulated calls per bench: enough for steady-state counts
INSNS_PER_ITERATION = 1000  # a run's budget per loop iteration: the loop and a hit's kernel model take far fewer
MAX_EMULATED_ITERATIONS = MAX_INSNS // INSNS_PER_ITERATION

# Not the kernel bench's: syscall loops the price benches use to price one page pin (bench_names leaves them out).
PRICE_ONLY_BENCHES = {"futex-wake-private": "futex_wake_private", "futex-wake-shared": "futex_wake_shared"}
# Not the kernel bench's either: a probe in a 32-bit (compat) task, whose uretprobes return through an
# int3 on every kernel; the price benches measure the old return path with it on a new kernel.
COMPAT_BENCHES = {"uprobe-nop-compat": "uprobe", "uretprobe-nop-compat": "uretprobe"}


@dataclass(frozen=True)
class BenchSpec:
    name: str
    target: str  # symbol the producer loop calls
    probe: str | None  # None: no probe; "uprobe", "uretprobe" or "usdt"
    options: tuple = ()  # (name, value) pairs every process of this bench gets (compat_task)


def bench_spec(name: str, arch: str = "x86_64") -> BenchSpec:
    if not isinstance(name, str):
        raise LabError(f"the bench is named by a string such as 'uprobe-nop', got {shown(name)}")
    if name == "usermode-count":
        return BenchSpec(name, "uprobe_target_nop", None)
    if name == "syscall-count":
        return BenchSpec(name, "getpgid_syscall", None)
    if name in COMPAT_BENCHES:
        if arch != "x86_64":
            raise LabError(f"{name} is x86-64 only (a 32-bit task on an x86-64 kernel)")
        return BenchSpec(name, TARGETS["nop"], COMPAT_BENCHES[name], (("compat_task", True),))
    if name in PRICE_ONLY_BENCHES:
        if arch != "x86_64":
            raise LabError(f"{name} is x86-64 only (a price bench of the lab's x86-64 host)")
        return BenchSpec(name, PRICE_ONLY_BENCHES[name], None)
    kind, _, target = name.partition("-")
    if kind in ("uprobe", "uretprobe") and target in TARGETS:
        if target in X86_ONLY and arch != "x86_64":
            raise LabError(f"{name} is x86-64 only (the kernel bench builds it under #ifdef __x86_64__)")
        return BenchSpec(name, TARGETS[target], kind)
    if kind == "usdt" and target in USDT_TARGETS:
        if arch != "x86_64":
            raise LabError(f"{name} is x86-64 only (the kernel bench builds it under #ifdef __x86_64__)")
        return BenchSpec(name, USDT_TARGETS[target], kind)
    raise LabError(f"unknown bench {shown(name)}; known: {', '.join(bench_names(arch))}")


def bench_names(arch: str = "x86_64") -> list[str]:
    targets = [t for t in TARGETS if arch == "x86_64" or t not in X86_ONLY]
    names = ["usermode-count", "syscall-count"] + [f"{k}-{t}" for k in ("uprobe", "uretprobe") for t in targets]
    return names + ([f"usdt-{t}" for t in USDT_TARGETS] if arch == "x86_64" else [])


def bench_process(name: str, arch: str = "x86_64", kernel=None, count_insns: bool = False, **options):
    """A process ready to run bench ``name``: (process, its CountingConsumer or None when the bench has no
    probe, the address the producer loop calls). Raises UnprobeableInstruction if ``kernel`` refuses the probe."""
    spec = bench_spec(name, arch)
    proc = make_process(arch, kernel, count_insns=count_insns, **{**dict(spec.options), **options})
    consumer = None
    if spec.probe == "usdt":
        consumer = CountingConsumer()
        attach_usdt(proc, spec.target, consumer)
    elif spec.probe:
        consumer = CountingConsumer(ret=spec.probe == "uretprobe")
        uprobe_register(proc, spec.target, consumer)
    return proc, consumer, proc.program.resolve(spec.target)


def usdt_events(name: str, kernel=None) -> dict:
    """A usdt bench on one kernel: {offset, why, events} - where libbpf put the probe and a hit's events."""
    spec = bench_spec(name)
    if spec.probe != "usdt":
        raise LabError(f"{name} is not a usdt bench; usdt benches: {', '.join(n for n in bench_names() if n.startswith('usdt-'))}")
    proc = make_process("x86_64", kernel)
    _, offset, why = attach_usdt(proc, spec.target, CountingConsumer())
    return {"offset": offset, "why": why, "events": events_per_hit(name, "x86_64", kernel)}


def usdt_cost_table(path, kernels=("6.16", "6.18", "7.3")):
    """One row per USDT site of the ELF file ``path``: its shape and, per kernel, where that kernel's
    libbpf probes it (+0: the nop, +1: the long nop) and the exceptions and syscalls a hit costs.

    The cost is measured on the bench target of the same shape and page crossing: the cost of a hit
    depends on those bytes, not on the rest of the program.
    """
    import pandas as pd

    rows = []
    for site in read_usdt_sites(path):
        shown = len(USDT_SHAPES[site.shape].site) if site.shape in USDT_SHAPES else 1
        row = {"usdt": f"{site.provider}:{site.name}", "addr": hex(site.addr), "file offset": hex(site.file_offset),
               "bytes": site.code[:shown].hex(" "), "shape": site.shape, "crosses page": site.crosses_page}
        bench = site_bench(site.shape, site.crosses_page)
        for kernel in kernels:
            if bench is None:
                row[f"{kernel} probe"], row[f"{kernel} per hit"] = "-", "unknown site shape"
                continue
            info = usdt_events(bench, kernel)
            ev = info["events"]
            row[f"{kernel} probe"] = f"+{info['offset']}"
            row[f"{kernel} per hit"] = f"{ev.get('exceptions', 0):g} exc + {ev.get('syscalls', 0):g} sys"
        rows.append(row)
    return pd.DataFrame(rows)


def events_per_hit(name: str, arch: str = "x86_64", kernel=None, **options) -> dict[str, float]:
    """Steady-state events of one hit: the difference between a 16- and an 8-iteration run, / 8."""
    proc, _, target = bench_process(name, arch, kernel, True, **options)
    proc.call("producer_loop", 4, target)  # warm-up: first hits may patch text or map pages
    before = proc.trace.counts
    proc.call("producer_loop", 8, target)
    middle = proc.trace.counts
    proc.call("producer_loop", 16, target)
    after = proc.trace.counts
    steady = {k: (after[k] - middle[k]) - (middle[k] - before[k]) for k in set(after) | set(middle)}
    return per_hit({k: v for k, v in steady.items() if v}, 8)


def events_table(benches, arch: str = "x86_64", kernels=(None,), kinds=None, **options):
    """Steady-state events per hit as a pandas DataFrame: one row per (bench, kernel), benches outer.

    Columns are ``bench``, ``kernel`` (the version's name; None is the default kernel) and one per
    event kind: ``kinds`` in that order, or with ``kinds=None`` every kind some row counted, in the
    trace vocabulary's order. A kind a hit did not count is 0. ``options`` go to every process
    (arm64 ``stp``/``stp_store``, for instance)."""
    import pandas as pd

    counted = [(bench, get_kernel(kernel).name, events_per_hit(bench, arch, kernel, **options))
               for bench in benches for kernel in kernels]
    if kinds is None:
        kinds = [k for k in EVENT_KINDS if any(k in ev for _, _, ev in counted)]
    rows = [{"bench": bench, "kernel": kernel, **{k: ev.get(k, 0) for k in kinds}} for bench, kernel, ev in counted]
    return pd.DataFrame(rows, columns=["bench", "kernel", *kinds])


def run_bench(name: str, arch: str = "x86_64", kernel=None, iterations: int = DEFAULT_ITERATIONS, **options) -> dict:
    """One bench on the emulator: {bench, arch, mode, kernel, iterations, hits, events_per_hit, hits_per_s}."""
    if not isinstance(name, str):
        raise LabError(f"the bench is named by a string such as 'uprobe-nop', got {name!r}")
    if not is_int(iterations) or not 1 <= iterations <= MAX_EMULATED_ITERATIONS:
        raise LabError(f"iterations must be an int from 1 to {MAX_EMULATED_ITERATIONS:_} on the emulator (a million "
                       f"calls take it from under a second to about 50 s), got {iterations!r}; for more, measure natively (--mode native)")
    kernel = get_kernel(kernel)
    try:
        events = events_per_hit(name, arch, kernel, **options)
    except UnprobeableInstruction as err:
        return refused_row(name, arch, "emulated", kernel.name, str(err))
    proc, consumer, target = bench_process(name, arch, kernel, **options)
    proc.call("producer_loop", 16, target)  # warm-up
    start_hits = consumer.hits if consumer else 0
    t0 = time.perf_counter()
    proc.call("producer_loop", iterations, target, max_insns=iterations * INSNS_PER_ITERATION)
    elapsed = time.perf_counter() - t0
    hits = consumer.hits - start_hits if consumer else iterations
    result = {"bench": name, "arch": arch, "mode": "emulated", "kernel": kernel.name,
              "iterations": iterations, "hits": hits, "events_per_hit": events,
              "hits_per_s": round(hits / elapsed, 1)}
    result.update({k: v for k, v in options.items() if isinstance(v, (str, int, float, bool))})
    return result


def run_bench_on_cpus(name: str, arch: str = "x86_64", kernel=None, iterations: int = 2_000, cpus: int = 2,
                      seed: int = 0, progress=None, **options) -> dict:
    """The kernel bench's ``-p N`` on the emulator: ``cpus`` producer threads of one process each call the bench's
    target ``iterations`` times, interleaved by ``seed`` (uprobe_lab.smp). ``kernel``: a modelled version or any
    release, with that release's own rules (6.13's locks, for instance). Per hit: the events, the shared kernel
    state touched (``shared_per_hit``, 'state (kind)' -> accesses: uprobe_lab.contended) and the cache lines
    that moved between CPUs (``line_transfers_per_hit``); ``xol_waits``: how often a thread slept for an XOL slot.
    ``progress(calls)``: told the calls counted so far, a few times a second (benches with a probe: its hits).
    A release older than 6.8 is counted on 6.8's structures, and its row's ``note`` says so
    (uprobe_lab.contended.layout_note)."""
    if not isinstance(name, str):
        raise LabError(f"the bench is named by a string such as 'uprobe-nop', got {name!r}")
    if not is_int(cpus) or not 1 <= cpus <= MAX_CPUS:
        raise LabError(f"cpus (-p) is an int from 1 to {MAX_CPUS} (the kernel bench's limit), got {cpus!r}")
    if not is_int(iterations) or not 1 <= iterations * cpus <= MAX_EMULATED_ITERATIONS:
        most = MAX_EMULATED_ITERATIONS // cpus
        usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        native = (", or measure natively (--mode native)" if usable >= cpus else
                  f" (this machine has too few CPUs to measure -p {cpus} natively)")
        raise LabError(f"iterations x cpus is at most {MAX_EMULATED_ITERATIONS:_} on the emulator (its instruction "
                       f"budget), got {iterations!r} x {cpus}: give at most {most:_} iterations (--iterations {most})"
                       f" for -p {cpus}{native}")
    missing = (refuse_uretprobe_before(kernel, name) if isinstance(kernel, str)
               and bench_spec(name, arch).probe == "uretprobe" else None)
    kernel = release_rules(kernel)
    if missing:
        return refused_row(name, arch, "emulated", kernel.name, missing)
    try:
        proc, consumer, target = bench_process(name, arch, kernel, **options)
    except UnprobeableInstruction as err:
        return refused_row(name, arch, "emulated", kernel.name, str(err))
    proc.call("producer_loop", 16, target)  # warm-up on CPU 0: sites patched, [uprobes] mapped
    start_hits = consumer.hits if consumer else 0
    proc.trace.clear()
    t0 = time.perf_counter()
    scheduler = run_on_cpus(proc, cpus, "producer_loop", iterations, target, seed=seed,
                            max_insns=min(MAX_INSNS, iterations * cpus * INSNS_PER_ITERATION),
                            progress=_hits_told(progress, consumer, start_hits))
    elapsed = time.perf_counter() - t0
    hits = consumer.hits - start_hits if consumer else iterations * cpus
    counts = proc.trace.counts
    note = layout_note(kernel.name)
    return {"bench": name, "arch": arch, "mode": "emulated", "kernel": kernel.name, "cpus": cpus, "seed": seed,
            **({"note": note} if note else {}),
            "iterations": iterations, "hits": hits, "events_per_hit": per_hit(counts, hits),
            "shared_per_hit": {f"{line} ({kind})": round(n / hits, 3) for (line, kind), n in proc.trace.lines.items()},
            "line_transfers_per_hit": round(counts.get("line_transfers", 0) / hits, 3),
            "transfers_per_hit": {line: n / hits for line, n in proc.trace.transfers.items()},
            "xol_waits": counts.get("xol_waits", 0), "most_asleep": scheduler.most_asleep,
            "hits_per_s": round(hits / elapsed, 1)}


def _hits_told(progress, consumer, start_hits: int, every_s: float = 0.2):
    """A scheduler's progress hook that tells ``progress`` the consumer's hits every ``every_s``; None without
    either (a bench without a probe has nothing counting its calls)."""
    if progress is None or consumer is None:
        return None
    last = time.monotonic()

    def tick():
        nonlocal last
        if time.monotonic() - last >= every_s:
            last = time.monotonic()
            progress(consumer.hits - start_hits)
    return tick


def run_benches(names=None, arch: str = "x86_64", kernel=None, iterations: int = DEFAULT_ITERATIONS, progress=None,
                **options) -> list[dict]:
    names = [names] if isinstance(names, str) else list(names or bench_names(arch))
    results = []
    for name in names:
        results.append(run_bench(name, arch, kernel, iterations, **options))
        if progress:
            progress(name)
    return results


def refused_row(name: str, arch: str, mode: str, kernel: str, reason: str) -> dict:
    """The row of a bench whose probe the kernel refuses at attach time."""
    return {"bench": name, "arch": arch, "mode": mode, "kernel": kernel,
            "refused": f"refused by this kernel ({kernel}) at attach: {reason}"}


def refusal(name: str, arch: str = "x86_64", kernel=None, release: str | None = None) -> str | None:
    """Why ``kernel`` refuses the probe of bench ``name`` at attach time, or None if it accepts it. ``release``: the
    release ``kernel`` (its modelled row) answers for, which refuses a uretprobe bench if it predates uretprobes."""
    probe = bench_spec(name, arch).probe
    if probe is None:
        return None
    missing = refuse_uretprobe_before(release, name) if release and probe == "uretprobe" else None
    if missing:
        return missing
    try:
        bench_process(name, arch, kernel)
    except UnprobeableInstruction as err:
        return str(err)
    return None


# a model row's "published" (cli.model_rows): whether its figure has a published twin to check it by
PUBLISHED_LABEL = {"other cpus": "  (prediction: published only for another CPU)",
                   "none": "  (prediction only: nothing published)"}


def format_table(results: list[dict]) -> str:
    """A table like the kernel's run_bench_uprobes.sh, plus the events each hit cost."""
    lines = []
    for r in results:
        if r.get("refused"):
            lines.append(f"{r['bench']:<25}: {r['refused']}")
        elif r.get("mode") == "emulated" and "cpus" in r:
            shared = sum(v for k, v in r["shared_per_hit"].items() if k.endswith(("(atomic)", "(spinlock)", "(write)")))
            waits = f" xol_waits={r['xol_waits']}" if r["xol_waits"] else ""
            lines.append(f"{r['bench'] + ' (' + format(r['cpus'], '2') + ' cpus)':<25}: {r['hits']} hits exact "
                         f"[{r['arch']} {r['kernel']}] shared writes/hit={shared:g} line transfers/hit="
                         f"{r['line_transfers_per_hit']:g}{waits}")
        elif r.get("mode") == "emulated":
            ev = r["events_per_hit"]
            kinds = ("exceptions", "syscalls", "sysret", "iret", "eret", "emulated", "xol_steps", "consumers")
            brief = " ".join(f"{k}={ev[k]}" for k in kinds if ev.get(k))
            lines.append(f"{r['bench']:<25}: {r['hits_per_s'] / 1e6:8.3f}M/s emulated  [{r['arch']} {r['kernel']}] {brief}")
        elif r.get("mode") == "model":
            label = PUBLISHED_LABEL.get(r.get("published"), "")
            span = f" (80%: {r['low']:.3f}..{r['high']:.3f})" if "low" in r else ""
            lines.append(f"{r['bench']:<25}: {r['mops']:8.3f}M/s model{span}  [{r['arch']} {r['kernel']}, cpu {r['cpu']}, "
                         f"{r['ns_per_hit']} ns per hit]{label}")
        elif "cpus" in r:  # the kernel bench's -p line, and under it the machine's own scaling where measured
            lines.append(f"{r['bench'] + ' (' + format(r['cpus'], '2') + ' cpus)':<25}: {r['mops']:8.3f} ± "
                         f"{r['stddev']:5.3f}M/s  ({r['mops_per_cpu']:7.3f}M/s/cpu)  [{r['mode']}, {r['hits']} hits]")
            lines += filter(None, [scaling_note(r)])
        else:
            lines.append(f"{r['bench']:<25}: {r['mops']:8.3f} ± {r.get('stddev', 0.0):5.3f}M/s  [{r['mode']}]")
    return "\n".join(lines)
