"""The machine's own scaling: a ``-p N`` bench's per-CPU rate beside a loop with no probe and a plain syscall loop.

A bench's per-CPU rate falls as CPUs are added for two reasons: what its hits share (the kernel's part) and what
the machine shares whatever runs on it (two threads of one core, a clock that falls as more cores run, a
hypervisor's vCPUs on fewer real cores, other work). The kernel bench's own baselines measure the second:
trig-usermode-count calls the probe's target with no probe, trig-syscall-count calls getpgid
(tools/testing/selftests/bpf/benchs/bench_trigger.c); the lab's rows of the same names run them at the same N,
on the same CPUs, for intervals as long as the shortest bench's.

A row's scaling is its per-CPU rate at N CPUs over its rate on the first of them alone. A bench's scaling over a
baseline's says how much of its fall is its own: 1.00x, the machine's alone; 0.50x, it kept half what the
baseline kept. On one CPU there is no scaling, and a bench's per-CPU rate is compared with the baselines' rates.
"""
from __future__ import annotations

# the kernel bench's baselines, by the lab's bench names, and what the text calls them
BASELINES = {"usermode-count": "the no-probe loop", "syscall-count": "the syscall loop"}


def scaling(per_cpu_at_n: float, per_cpu_at_1: float) -> float:
    """Per-CPU rate at N over the rate on one CPU: 1.0 where each CPU keeps its one-CPU rate."""
    return per_cpu_at_n / per_cpu_at_1


def interval_seconds(row: dict) -> float:
    """How long one timed interval of a ``-p N`` row lasted: each producer makes ``iterations`` calls."""
    return row["iterations"] / (row["mops_per_cpu"] * 1e6)


def calls_lasting(seconds: float, per_cpu_mops: float) -> int:
    """Calls per producer that fill an interval of ``seconds`` at ``per_cpu_mops`` M calls/s (at least 1)."""
    return max(1, round(seconds * per_cpu_mops * 1e6))


def compare_with_baselines(rows: list[dict]) -> list[dict]:
    """``rows`` (one ``-p N`` run: benches and baseline rows) with each bench's ratios to the baselines added.

    A row measured on one CPU alone as well (``one_cpu``) gets ``scaling``; then a bench's ``baseline_ratios``
    are its scaling over each baseline's, and ``ratio_of`` is "scaling". On one CPU they are its per-CPU rate
    over each baseline's and ``ratio_of`` is "rate". A run at N > 1 without one-CPU rows compares nothing."""
    for row in rows:
        if "one_cpu" in row and row.get("mops_per_cpu"):
            row["scaling"] = scaling(row["mops_per_cpu"], row["one_cpu"]["mops_per_cpu"])
    measured = [r for r in rows if r.get("mops_per_cpu")]
    bases = {r["bench"]: r for r in measured if r["bench"] in BASELINES}
    for row in measured:
        if row["bench"] in BASELINES:
            continue
        if "scaling" in row:
            ratios = {b: row["scaling"] / base["scaling"] for b, base in bases.items() if "scaling" in base}
            ratio_of = "scaling"
        elif row["cpus"] == 1:
            ratios = {b: row["mops_per_cpu"] / base["mops_per_cpu"] for b, base in bases.items()}
            ratio_of = "rate"
        else:
            continue
        if ratios:
            row.update(baseline_ratios=ratios, ratio_of=ratio_of)
    return rows


def scaling_note(row: dict) -> str | None:
    """The line printed under a ``-p N`` row: its scaling and, for a bench, that scaling against each baseline's
    (on one CPU: its rate against theirs). None for a row that has neither."""
    ratios = row.get("baseline_ratios", {})
    if "scaling" in row:
        own = f"per CPU {row['scaling']:.2f}x its rate on CPU {row['one_cpu']['cpu']} alone " \
              f"({row['one_cpu']['mops_per_cpu']:.3f}M/s)"
        if row["bench"] in BASELINES:
            return f"  {BASELINES[row['bench']]}, a baseline: {own}"
        against = [f"{ratios[b]:.2f}x {BASELINES[b]}'s scaling" for b in BASELINES if b in ratios]
        return f"  {own}" + (f"; {' and '.join(against)}" if against else "")
    if ratios:  # one CPU: rates, not scaling
        against = [f"{ratios[b]:.3g}x {BASELINES[b]}'s rate" for b in BASELINES if b in ratios]
        return f"  per CPU {' and '.join(against)} (one CPU has no scaling to compare: -p 2 or more measures it)"
    if row.get("bench") in BASELINES and "mops_per_cpu" in row:
        return f"  {BASELINES[row['bench']]}, a baseline"
    return None
