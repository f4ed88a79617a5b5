"""The consumer scan two ways, to see where a probe hit's price moves: the trap or the consumer?

    python benchmarks/consumer_scans.py [--runs 2] [--only events|tasks]

Each comparison attaches 1, 2, 4 and 8 perf uprobe events (one BPF consumer each) on one uprobe-nop site,
times both sides interleaved on one pinned CPU and fits ns per hit = intercept + slope x consumers for each
side: the slope is a consumer run, the intercept the trap, the uprobe lookup and the loop.

* ``events``: events of this task alone (pid 0) against events of every task (pid -1, bound to a CPU, as
  bench_trigger.c's libbpf attach opens them). For the first, every hit runs ``uprobe_perf_filter``
  (kernel/trace/trace_uprobe.c) under the filter's rwlock, per consumer; the second sets
  ``nr_systemwide``, which that function checks first, without the lock. Timed directly, 5 intervals a
  configuration a round.
* ``tasks``: a 64-bit task (``uprobe-nop``) against a 32-bit one (``uprobe-nop-compat``), by the price
  benches' levelled rows (:func:`uprobe_lab.native.price_benches.measure_price_rows`). The emulator gives both
  the same events; their difference in the intercept is what the model's ``compat_exception`` carries
  (docs/model.md, v9).

Figures, not assertions. Needs root on x86-64 Linux (``tasks``: with 32-bit programs allowed).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from uprobe_lab.bench import bench_spec  # noqa: E402
from uprobe_lab.native import price_benches  # noqa: E402
from uprobe_lab.native.bench import pinned_to_one_cpu  # noqa: E402
from uprobe_lab.native.bpf import BpfCounter  # noqa: E402
from uprobe_lab.native.code import NativeCode  # noqa: E402
from uprobe_lab.native.compat import compat_reason  # noqa: E402
from uprobe_lab.native.perf import UprobeEvent  # noqa: E402
from uprobe_lab.native.support import check_native_support  # noqa: E402

CONSUMERS = (1, 2, 4, 8)
EVENT_FORMS = {"one task (pid 0)": 0, "every task (pid -1)": -1}
TASKS = {"64-bit task": "uprobe-nop", "32-bit task": "uprobe-nop-compat"}


def line_fit(ns_per_hit: list[float]) -> tuple[float, float]:
    """(intercept, slope) of ns per hit against CONSUMERS, by least squares."""
    k = np.array(CONSUMERS, float)
    intercept, slope = np.linalg.lstsq(np.vstack([np.ones_like(k), k]).T, np.array(ns_per_hit), rcond=None)[0]
    return float(intercept), float(slope)


def event_forms(rounds: int = 20) -> dict:
    """{form: ns per hit by consumer count}: both event forms, each configuration on its own copy of the code."""
    arch = check_native_support()
    spec = bench_spec("uprobe-nop", arch)
    rates: dict = {}
    with pinned_to_one_cpu(), contextlib.ExitStack() as stack:
        cpu = min(os.sched_getaffinity(0))
        rigs = {}
        for form, pid in EVENT_FORMS.items():
            for k in CONSUMERS:
                nc = stack.enter_context(NativeCode(arch))
                counter = stack.enter_context(BpfCounter())
                for _ in range(k):
                    counter.attach(stack.enter_context(UprobeEvent(nc.path, nc.offset(spec.target), pid=pid,
                                                                   cpu=cpu if pid == -1 else -1)).fd)
                addr = nc.addr(spec.target)
                nc.run(addr, 2000)
                rigs[form, k] = (nc, addr, price_benches._interval_calls(nc, addr), counter)
        for _ in range(rounds):
            for key, (nc, addr, calls, counter) in rigs.items():
                nc.run(addr, 500)
                before = counter.count()
                rates.setdefault(key, []).extend(price_benches._timed_rate(nc, addr, calls) for _ in range(5))
                if counter.count() - before < 5 * calls * key[1]:
                    raise RuntimeError(f"{key}: the BPF consumers missed hits")
    return {form: [1000.0 / statistics.median(rates[form, k]) for k in CONSUMERS] for form in EVENT_FORMS}


def tasks(budget_s: float = 2.0) -> dict:
    """{task: ns per hit by consumer count}: the price benches' rows of both tasks' scans."""
    why = compat_reason()
    if why:
        raise SystemExit(f"no 32-bit task to compare with: {why}")
    rows = price_benches.measure_price_rows(configs=[(b, k) for k in CONSUMERS for b in TASKS.values()],
                                            budget_s=budget_s)
    mops = {(r["bench"], r["consumers"]): r["mops"] for r in rows}
    return {task: [1000.0 / mops[bench, k] for k in CONSUMERS] for task, bench in TASKS.items()}


def report(run: int, scans: dict) -> None:
    """Each side's times and fit, then the second side's intercept and slope against the first's."""
    fits = {}
    for side, t in scans.items():
        fits[side] = line_fit(t)
        print(f"run {run}, {side:20s}: ns per hit {' '.join(f'{x:6.0f}' for x in t)}; "
              f"intercept {fits[side][0]:5.0f} ns, slope {fits[side][1]:5.1f} ns per consumer")
    (a, (ia, sa)), (b, (ib, sb)) = fits.items()
    print(f"run {run}: {b} against {a}: intercept {ib - ia:+.0f} ns ({100 * (ib / ia - 1):+.0f}%), "
          f"slope {sb - sa:+.1f} ns ({100 * (sb / sa - 1):+.0f}%)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--only", choices=("events", "tasks"))
    args = parser.parse_args()
    print(f"kernel {os.uname().release}; consumer scan {CONSUMERS}")
    for name, scan in (("events", event_forms), ("tasks", tasks)):
        if args.only in (None, name):
            for run in range(1, args.runs + 1):
                report(run, scan())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
