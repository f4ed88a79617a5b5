"""Native benches that isolate one event kind each: the prices the published tables cannot separate.

Every int3 hit in the seed tables has one exception, one probe lookup and one consumer run, so no published
row tells an exception's price from the handler work it comes with; on this host the split can be measured
(:func:`measure_price_rows`): 1-8 consumers on one site (the slope is a consumer, the intercept the trap),
an optimised nop5 beside a page-crossing one, push beside nop, a uretprobe beside a uprobe, a shared futex
wake beside a private one (the page pin), a stepped ret, and the 32-bit task's int3 return. Each interval is
levelled against a reference probe, so the machine's changing speed cancels. How and why, row by row, with
the figures: docs/performance.md, "How the price benches measure".
"""
from __future__ import annotations

import contextlib
import datetime
import json
import math
import statistics
import subprocess
import sys
import time
import warnings
from typing import Callable, Iterator, NamedTuple

from ..bench import COMPAT_BENCHES, bench_spec
from ..model import load_host_recording
from ..model.profiles import machine_label
from ..outputs import write_output
from ..presenter import lecture_mode
from ..process import LabError
from ..sites import calls_uprobe_trampoline
from .bench import pinned_to_one_cpu
from .bpf import BpfCounter
from .calibrate import REL_TOL as CALIBRATION_REL_TOL, calibrate
from .code import NativeCode
from .compat import CompatBench, compat_reason, run_compat
from .errors import NativeUnavailable
from .support import check_native_support
from .example import native_reason
from .host import host_description, kernel_release, parse_maps
from .perf import bench_trigger_event

CONSUMER_COUNTS = (1, 2, 4, 8)
# (bench, consumers) in measuring order: the consumer scan first, then one row per other event kind.
PRICE_CONFIGS = ([("uprobe-nop", k) for k in CONSUMER_COUNTS]
                 + [("usermode-count", 0), ("syscall-count", 0), ("uprobe-push", 1), ("uprobe-ret", 1), ("uprobe-nop5", 1),
                    ("uprobe-nop5-pagecross", 1), ("uretprobe-nop", 1), ("futex-wake-private", 0),
                    ("futex-wake-shared", 0), ("uprobe-nop-compat", 1), ("uretprobe-nop-compat", 1)])
COMPAT_RUN_NS = 10_000_000  # a 32-bit run's loop: long enough that its process start is rare
INTERVAL_NS = 2_000_000  # ~2 ms per timed interval
REL_TOL = 0.02
ROUNDS = 8
MAX_ROUNDS_FACTOR = 4  # a row gets at most this many times its rounds reaching rel_tol
# A `nop; ret` that no configuration probes (the bench's usdt_1 body: a USDT site that is one nop).
REFERENCE_TARGETS = {"x86_64": "usdt_nop"}
STATE_GAP = 1.15  # two speed states when their centres are this many times apart (the lab's VM: 1.27-1.39)
MIN_STATE_SHARE = 0.10  # ... and the slower state holds at least this share of the reference's intervals


def robust_sd(values: list[float]) -> float:
    """1.4826 * the median absolute deviation: the sd of a normal sample, unmoved by a few wild values
    (an interval whose thread clock stalled reads as a rate thousands of times too high)."""
    mid = statistics.median(values)
    return 1.4826 * statistics.median(abs(v - mid) for v in values)


def median_rel_err(rates: list[float]) -> float:
    """Relative standard error of the median of ``rates`` (large-sample: 1.2533 * sd / sqrt(n), the sd
    estimated robustly)."""
    if len(rates) < 2:
        return float("inf")
    return 1.2533 * robust_sd(rates) / len(rates) ** 0.5 / statistics.median(rates)


def row_rel_err(rates: list[float], round_medians: list[float]) -> float:
    """A row's relative error: the larger of its median's error over all intervals and the spread of the
    rounds' medians (sd / median / sqrt(rounds)), which catches load that changes over the run."""
    err = median_rel_err(rates)
    if len(round_medians) > 1:
        err = max(err, statistics.stdev(round_medians) / statistics.median(rates) / len(round_medians) ** 0.5)
    return err


def slower_state(refs: list[float]) -> float | None:
    """The reference rate below which an interval caught the machine in the slower of two speed states, or
    None when the run showed one state.

    Two means on the log rates (Lloyd's iteration from the 10% and 90% quantiles); two states when their
    centres are at least :data:`STATE_GAP` apart and the slower holds at least :data:`MIN_STATE_SHARE` of
    the intervals. One state spread out normally splits into halves whose centres are 1.6 sd apart, so a
    machine whose reference moves by a few percent is read as one."""
    x = sorted(math.log(r) for r in refs if r > 0)
    if len(x) < 10:
        return None
    lo, hi = x[len(x) // 10], x[9 * len(x) // 10]
    for _ in range(100):
        thr = (lo + hi) / 2
        below, above = [v for v in x if v < thr], [v for v in x if v >= thr]
        if not below or not above:
            return None
        centres = statistics.fmean(below), statistics.fmean(above)
        if centres == (lo, hi):
            break
        lo, hi = centres
    if hi - lo < math.log(STATE_GAP) or len(below) < MIN_STATE_SHARE * len(x):
        return None
    return math.exp((lo + hi) / 2)


def _kept(rates: list[float], refs: list[float], threshold: float | None) -> list[tuple[float, float]]:
    """The (rate, reference) pairs of a round whose interval the machine spent in its slower state: the
    reference intervals on both sides of it (the previous pair's and its own) are below ``threshold``. Its
    own reference alone would also keep an interval run fast and followed by a slow reference, whose
    ratio reads 1.3 times too high, while dropping the opposite case: a bias, not just noise."""
    if threshold is None:
        return list(zip(rates, refs, strict=True))
    return [(x, ref) for i, (x, ref) in enumerate(zip(rates, refs, strict=True))
            if i > 0 and refs[i - 1] < threshold and ref < threshold]


def reference_levels(round_refs: dict, threshold: float | None = None) -> tuple[float, list[float]]:
    """(the reference's typical rate over the run, the level of every configuration's every round against it).

    ``round_refs`` maps each configuration to its rounds' reference rates; with a ``threshold``
    (:func:`slower_state`) only the intervals below it count. The typical rate is the mean of the
    reference's round medians (a mean, not a median: where both states are kept, they make the medians
    bimodal, and a median would jump from one to the other with the share of rounds each got); a round's
    level is its median over that rate."""
    meds = [statistics.median(kept) for rounds in round_refs.values() for r in rounds
            if (kept := [ref for ref in r if threshold is None or ref < threshold])]
    scale = statistics.fmean(meds)
    return scale, [m / scale for m in meds]


def level_rows(round_rates: dict, round_refs: dict, scale: float, threshold: float | None = None) -> dict:
    """Per configuration: (``scale`` times the median of its intervals' rates over the reference interval
    timed next to each, that median's rel_err). The machine's state cancels out of each ratio, as far as
    the path slows with the reference's; with a ``threshold`` only the intervals the machine spent in its
    slower state count (:func:`_kept`). A configuration with fewer than two such intervals keeps them all,
    with an infinite error: a calibration leaves it out as too noisy."""
    out = {}
    for cfg, rounds in round_rates.items():
        pairs = [_kept(r, refs, threshold) for r, refs in zip(rounds, round_refs[cfg], strict=True)]
        ratios = [[x / ref for x, ref in p] for p in pairs if p]
        flat = [x for r in ratios for x in r]
        if len(flat) < 2:
            flat = [x / ref for r, refs in zip(rounds, round_refs[cfg]) for x, ref in _kept(r, refs, None)]
            out[cfg] = (scale * statistics.median(flat), math.inf)
            continue
        out[cfg] = (scale * statistics.median(flat), row_rel_err(flat, [statistics.median(r) for r in ratios]))
    return out


def _interval_calls(nc: NativeCode, addr: int) -> int:
    """Calls per timed interval: enough for about INTERVAL_NS (one timed probe run of 200 calls)."""
    t0 = time.thread_time_ns()
    nc.run(addr, 200)
    per_call = max((time.thread_time_ns() - t0) / 200, 1.0)
    return max(50, int(INTERVAL_NS / per_call))


def _timed_rate(nc: NativeCode, addr: int, calls: int) -> float:
    """The rate (M calls/s) of ``calls`` calls on this thread's CPU clock: user and kernel time spent running
    this thread, the probe's trap and handler included, not the time other processes ran."""
    t0 = time.thread_time_ns()
    nc.run(addr, calls)
    return calls * 1e3 / max(time.thread_time_ns() - t0, 1)


def _time_intervals(nc: NativeCode, addr: int, calls: int, n: int, reference: Callable[[], float],
                    state: dict) -> None:
    """Time ``n`` intervals, each followed by one of the reference; append both rates to the state's last round."""
    for _ in range(n):
        state["rounds"][-1].append(_timed_rate(nc, addr, calls))
        state["refs"][-1].append(reference())


def reference_target(arch: str) -> str:
    """The function the reference probes on ``arch``; LabError where the price benches have none."""
    if arch not in REFERENCE_TARGETS:
        raise LabError(f"the price benches are x86-64 only (their reference and nop5 rows), not {arch}")
    return REFERENCE_TARGETS[arch]


@contextlib.contextmanager
def reference_probe(nc: NativeCode):
    """Attach the reference (one uprobe and BPF consumer on :func:`reference_target`) for the block; yield a
    function that times one interval of it and returns its rate (M calls/s). On the way out, its consumer
    must have run on every timed call, as a configuration's must (:func:`_round`)."""
    target = reference_target(nc.arch)
    addr = nc.addr(target)
    with BpfCounter() as counter, bench_trigger_event(nc.path, nc.offset(target)) as event:
        counter.attach(event.fd)
        nc.run(addr, 2000)
        calls = _interval_calls(nc, addr)
        before, timed = counter.count(), [0]

        def one_interval() -> float:
            timed[0] += calls
            return _timed_rate(nc, addr, calls)

        yield one_interval
        if counter.count() - before < timed[0]:
            raise RuntimeError(f"the reference's BPF consumer counted {counter.count() - before} runs, "
                               f"fewer than its {timed[0]} timed calls")


def _new_round(state: dict) -> None:
    state.setdefault("rounds", []).append([])
    state.setdefault("refs", []).append([])


class Rig(NamedTuple):
    """One configuration's code and probes, attached for the whole run (:func:`attached_config`)."""

    nc: NativeCode
    addr: int
    counter: BpfCounter | None


@contextlib.contextmanager
def attached_config(arch: str, bench: str, consumers: int, state: dict) -> Iterator[Rig]:
    """Attach ``consumers`` events (one BPF consumer each) for one configuration for the whole block, on a
    copy of the bench code of its own: configurations probing the same function (the consumer scan,
    uprobe-nop and uretprobe-nop) then add nothing to each other's hits. Warms it up (the first hit on a
    nop5 is where 6.18 optimises it) and sizes its intervals.

    Attaching once, not in every round, is for time: closing a perf uprobe event waits for the kernel to
    unregister it (about 0.1 s each on the lab's VM, one close after another), which per-round attaching
    paid for every consumer of every round. Probes are detached on every way out of the block."""
    spec = bench_spec(bench, arch)
    with contextlib.ExitStack() as stack:
        nc = stack.enter_context(NativeCode(arch))
        addr = nc.addr(spec.target)
        counter = stack.enter_context(BpfCounter()) if spec.probe else None
        for _ in range(consumers if spec.probe else 0):
            event = stack.enter_context(bench_trigger_event(nc.path, nc.offset(spec.target),
                                                            retprobe=spec.probe == "uretprobe"))
            counter.attach(event.fd)
        nc.run(addr, 2000)
        if spec.probe:
            state["optimized"] = calls_uprobe_trampoline(nc.read(spec.target), addr, parse_maps())
        state["calls"] = _interval_calls(nc, addr)
        yield Rig(nc, addr, counter)


def _round(rig: Rig, bench: str, consumers: int, budget_s: float, state: dict,
           reference: Callable[[], float]) -> None:
    """One round of one configuration: warm up, time at least two intervals (each followed by the
    reference's), then more until the round's share of the budget is spent; every consumer must have
    run on every timed call."""
    nc, addr, counter = rig
    nc.run(addr, 2000)  # the other configurations ran since: caches and predictors back on this one
    calls = state["calls"]
    before = counter.count() if counter else 0
    deadline = time.monotonic() + budget_s
    _new_round(state)
    _time_intervals(nc, addr, calls, 2, reference, state)  # a round's median needs at least two
    while time.monotonic() < deadline:  # the whole budget: a round's median steadies, not just its error bar
        _time_intervals(nc, addr, calls, 3, reference, state)
    timed = len(state["rounds"][-1])
    if counter and counter.count() - before < timed * calls * consumers:
        raise RuntimeError(f"{bench} x{consumers}: the BPF consumers counted {counter.count() - before} runs, "
                           f"fewer than {timed * calls * consumers}")


@contextlib.contextmanager
def attached_compat(bench: str, consumers: int, state: dict) -> Iterator[CompatBench]:
    """A 32-bit task's bench (:mod:`.compat`) for the whole block: its run sized from a short probed run
    (a program of its own: the call count is built into the program), then its program and ``consumers``
    probes set up once (:class:`.compat.CompatBench`)."""
    probe = COMPAT_BENCHES[bench]
    first = run_compat(2000, "target", probe)
    state["calls"] = max(1000, int(COMPAT_RUN_NS * first.calls / max(first.loop_ns, 1)))
    with CompatBench(state["calls"], "target", probe, consumers=consumers) as compat_bench:
        yield compat_bench


def _compat_round(compat_bench: CompatBench, bench: str, budget_s: float, state: dict,
                  reference: Callable[[], float]) -> None:
    """One round of a 32-bit task's bench: whole runs of the i386 program, each timed on its own thread CPU
    clock, with its probe's hits checked and followed by a reference interval, until the round's share is
    spent."""
    calls = state["calls"]
    deadline = time.monotonic() + budget_s
    _new_round(state)
    while len(state["rounds"][-1]) < 2 or time.monotonic() < deadline:
        run = compat_bench.run()
        if run.hits < calls * compat_bench.consumers:
            raise RuntimeError(f"{bench} x{compat_bench.consumers}: the BPF consumers counted {run.hits} runs, "
                               f"fewer than {calls * compat_bench.consumers}")
        state["rounds"][-1].append(run.mops)
        state["refs"][-1].append(reference())


@contextlib.contextmanager
def attached_run(arch: str, configs, states: dict) -> Iterator[tuple[Callable[[], float], dict]]:
    """For the block: this thread pinned to one CPU, the reference attached (:func:`reference_probe`) and
    every configuration set up once (:func:`attached_config`, :func:`attached_compat`); yields (the
    reference's one-interval function, {configuration: what its rounds run on}). All detached on the way out."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(pinned_to_one_cpu())
        reference = stack.enter_context(reference_probe(stack.enter_context(NativeCode(arch))))
        rigs = {cfg: stack.enter_context(attached_compat(*cfg, states[cfg]) if cfg[0] in COMPAT_BENCHES
                                         else attached_config(arch, *cfg, states[cfg])) for cfg in configs}
        yield reference, rigs


def measure_price_rows(configs=PRICE_CONFIGS, rel_tol: float = REL_TOL, budget_s: float = 6.0,
                       progress: Callable[[str], object] | None = None, rounds: int = ROUNDS) -> list[dict]:
    """Measure each (bench, consumers) configuration here; one row each.

    Rows: bench, consumers, arch, kernel (``uname -r``), mops (the reference's typical rate times the
    median of the intervals' rates over the reference's next to them, ``ratio``: :func:`level_rows`), rel_err (of
    that median), intervals, calls_per_interval, reached (rel_err <= rel_tol), optimized, level_sd (the
    sd of the reference's round medians over its typical rate, one per configuration and round: how much the
    whole machine's speed moved over the run, which the rows no longer show and a calibration adds back to
    its predicted figures), rounds (how many were run).
    ``budget_s`` is the time per configuration, its reference intervals included, spread over ``rounds``
    interleaved rounds; while some row's error is above ``rel_tol``, further rounds of the same length
    run for the rows still above it, up to ``MAX_ROUNDS_FACTOR * rounds`` in all (a row's ``rounds`` says
    how many it got). Probes are always detached.
    """
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    arch = check_native_support()
    if any(b in COMPAT_BENCHES for b, _ in configs):
        why = compat_reason()
        if why:  # the other rows still calibrate this machine; only the int3 return path goes unmeasured
            warnings.warn(f"left out {', '.join(b for b, _ in configs if b in COMPAT_BENCHES)}: {why}", stacklevel=2)
            configs = [c for c in configs if c[0] not in COMPAT_BENCHES]
    if not configs:
        raise LabError("no configuration left to measure")
    ref_target = reference_target(arch)
    clash = [b for b, _ in configs if bench_spec(b, arch).target == ref_target]
    if clash:
        raise LabError(f"{', '.join(clash)} probe the reference's own function {ref_target}")
    states = {cfg: {} for cfg in configs}
    cap = MAX_ROUNDS_FACTOR * rounds  # each row's own: one that later rounds' levelling pushes back above still gets rounds
    with attached_run(arch, configs, states) as (reference, rigs):
        pending = list(configs)
        while pending:
            for cfg in pending:
                if cfg[0] in COMPAT_BENCHES:
                    _compat_round(rigs[cfg], cfg[0], budget_s / rounds, states[cfg], reference)
                else:
                    _round(rigs[cfg], *cfg, budget_s / rounds, states[cfg], reference)
                if progress:
                    progress(f"{cfg[0]} x{cfg[1]} round {len(states[cfg]['rounds'])}")
            if min(len(st["rounds"]) for st in states.values()) >= rounds:
                round_refs = {cfg: st["refs"] for cfg, st in states.items()}
                all_refs = [x for cfg_rounds in round_refs.values() for r in cfg_rounds for x in r]
                threshold = slower_state(all_refs)
                scale, _ = reference_levels(round_refs, threshold)
                levelled = level_rows({cfg: st["rounds"] for cfg, st in states.items()}, round_refs, scale, threshold)
                levels = reference_levels(round_refs)[1]  # the machine's whole movement, both states
                pending = [cfg for cfg in configs if levelled[cfg][1] > rel_tol and len(states[cfg]["rounds"]) < cap]
    level_sd = statistics.stdev(levels) if len(levels) > 1 else 0.0
    states_seen = {"machine_states": 1, "state_share": 1.0, "fast_over_slow": None}
    if threshold is not None:
        slow = [x for x in all_refs if x < threshold]
        fast = [x for x in all_refs if x >= threshold]
        states_seen = {"machine_states": 2, "state_share": len(slow) / len(all_refs),
                       "fast_over_slow": statistics.median(fast) / statistics.median(slow)}
    out = []
    for cfg, st in states.items():
        mops, err = levelled[cfg]
        out.append({"bench": cfg[0], "consumers": cfg[1], "arch": arch, "kernel": kernel_release(),
                    "mops": mops, "ratio": mops / scale, "rel_err": err, "intervals": sum(map(len, st["rounds"])),
                    "calls_per_interval": st["calls"], "reached": err <= rel_tol,
                    "optimized": st.get("optimized"), "level_sd": level_sd, "rounds": len(st["rounds"]),
                    **states_seen})
    return out


def record_host_prices(path, budget_s: float = 6.0, label: str = "", rounds: int = ROUNDS) -> dict:
    """Measure the price rows here and write them, with the host's description, to ``path`` (JSON)."""
    rows = measure_price_rows(budget_s=budget_s, rounds=rounds)
    data = {"label": label or f"measured on {host_description()['kernel']}",
            "recorded": datetime.date.today().isoformat(), "host": host_description(),
            "command": f"uprobe_lab.native.price_benches.record_host_prices(path, budget_s={budget_s}, rounds={rounds})",
            "rows": rows}
    write_output(path, json.dumps(data, indent=1) + "\n", "path", "prices.json", recording="host_prices_*.json")
    return data


MEASURED_HERE = "measured now on this machine"  # price_rows_or_recorded's source when the rows were measured here
# ./lab lecture's budget per configuration: chapter 06's 0.6 s gives rows with 0.1-1% errors on the lab's VM, far
# inside what a calibration asks (calibrate.REL_TOL, and a noisier row still gets more rounds); half of it saves 4-5 s
# of the chapter's lecture load, which must stay under 20 s (benchmarks/lecture_load.py)
LECTURE_BUDGET_S = 0.3


def price_rows_or_recorded(budget_s: float = 1.5) -> tuple[list[dict], str]:
    """(price-bench rows, where from): measured here when native runs are possible, else the recording.
    Rows aim at the error a calibration accepts (``calibrate.REL_TOL``; :func:`measure_price_rows`).

    The measurement runs in a child process (``python -m uprobe_lab.native.price_benches``), so its CPU
    pinning, perf fds and probe hits stay out of the caller (a notebook kernel with its own threads)."""
    reason = native_reason()
    if reason is None:
        proc = subprocess.run([sys.executable, "-m", "uprobe_lab.native.price_benches", "--budget", str(budget_s),
                               "--rel-tol", str(CALIBRATION_REL_TOL)], capture_output=True, text=True)
        if proc.returncode == 0:
            return json.loads(proc.stdout), MEASURED_HERE
        reason = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit status {proc.returncode}"
    rec = load_host_recording()
    return rec["rows"], f"RECORDED ({rec['label']}; not measured here: {reason})"


def calibrated_or_recorded(cpu: str = "this machine", budget_s: float = 0.6) -> tuple:
    """(profile, where its rows came from): :func:`price_rows_or_recorded` calibrated with the noisy rows
    left out by name (:func:`.calibrate.calibrate`). When what is left cannot be calibrated (every row
    too noisy, or no probe row), the reason is said and the bundled recording is calibrated instead,
    labelled RECORDED, so a notebook goes on. While presenting (``./lab lecture``), at most LECTURE_BUDGET_S a
    configuration."""
    if lecture_mode():
        budget_s = min(budget_s, LECTURE_BUDGET_S)
    rows, source = price_rows_or_recorded(budget_s=budget_s)
    rec = load_host_recording()
    recorded_vm = bool(rec["host"].get("virtualized"))
    try:
        here = host_description() if source == MEASURED_HERE else rec["host"]
        return calibrate(rows, cpu=cpu, drop_noisy=True, virtualised=bool(here["virtualized"]),
                         machine=machine_label(here)), source
    except LabError as err:
        profile = calibrate(rec["rows"], cpu=rec["host"]["cpu_model"], drop_noisy=True, virtualised=recorded_vm,
                            machine=machine_label(rec["host"]))
        return profile, f"RECORDED ({rec['label']}): the rows {source} could not be calibrated: {err}"


def main(argv: list[str] | None = None) -> int:
    """Print the price rows measured here as JSON (what price_rows_or_recorded runs in a child)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m uprobe_lab.native.price_benches")
    parser.add_argument("--budget", type=float, default=6.0, help="seconds per configuration")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="interleaved rounds the budget is spread over")
    parser.add_argument("--rel-tol", type=float, default=REL_TOL,
                        help=f"relative error each row should reach (rows short of it get more rounds, up to "
                             f"{MAX_ROUNDS_FACTOR} times as many)")
    parser.add_argument("--configs", help="bench:consumers,... to measure (default: every price configuration)")
    args = parser.parse_args(argv)
    configs = PRICE_CONFIGS
    if args.configs:
        configs = []
        for item in args.configs.split(","):
            bench, _, consumers = item.partition(":")
            if not consumers.isdigit():
                parser.error(f"--configs takes bench:consumers items (uprobe-nop:1,syscall-count:0), got {item!r}")
            configs.append((bench, int(consumers)))
    try:
        rows = measure_price_rows(configs, budget_s=args.budget, rel_tol=args.rel_tol, rounds=args.rounds)
    except NativeUnavailable as err:
        print(err, file=sys.stderr)
        return 2
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
