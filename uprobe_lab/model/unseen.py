"""A many-CPU table the contention model has never seen, predicted and scored as docs/model.md's version 2 says.

The table comes as the JSON that ``bench --mode native -p N --json`` prints, one run per N (the files of several
runs, or their rows in one list): each bench's row at N gives the total M/s, its ``one_cpu`` run the 1-CPU rate
(T1), and the no-probe loop's row (``usermode-count``) the machine's own per-CPU scaling m(N). Nothing is fitted
on it: the fitted machines' tau0 and gamma (:func:`.contention.predict_unseen`), eta = 0.3, C = the machine's
cores, and v2's 80% interval (leave one fitting table out), all fixed before the table is read.

The kernel bench's own output is read too (:func:`runs_from_bench_text`): its summaries (``./bench -p 16
trig-uprobe-nop``) or the ``(N cpus)`` lines the 2024 tables print (``uprobe-nop (16 cpus): 12.3 ± 0.1M/s
(0.77M/s/cpu)``, as the lab's bench does). They do not say the kernel, so its release is given beside them, and a
1-CPU run of each bench gives its T1.
"""
from __future__ import annotations

import re
import statistics

import numpy as np

from ..errors import LabError
from ..kernel import RULES, kernel_for_release, kernel_of, major_minor, version_name
from ..machine_scaling import BASELINES
from . import contention

TABLE = "unseen"
BENCH_LINE = re.compile(r"^\s*(?P<bench>[A-Za-z][\w-]*)\s*\(\s*(?P<cpus>\d+)\s+cpus\)\s*:\s*(?P<mops>\d+(?:\.\d+)?)"
                        r"\s*±\s*\d+(?:\.\d+)?\s*M/s\s*\(\s*(?P<per_cpu>\d+(?:\.\d+)?)\s*M/s/cpu\)")
# the bench's own output: "Setting up benchmark 'trig-uprobe-nop'..." and, after its iterations, the summary
SETTING_UP = re.compile(r"^Setting up benchmark '(?:trig-)?(?P<bench>[\w-]+)'")
SUMMARY = re.compile(r"^Summary: hits\s*(?P<mops>\d+(?:\.\d+)?)\s*±\s*\d+(?:\.\d+)?\s*M/s\s*"
                     r"\(\s*(?P<per_cpu>\d+(?:\.\d+)?)\s*M/prod\)")


def bench_lines(text: str) -> list[dict]:
    """Each bench line of ``text`` as {bench, cpus, mops, per_cpu}: the ``(N cpus)`` lines, and the bench's own
    summaries under the benchmark they set up (N is hits over hits per producer, which the summary prints)."""
    lines, bench = [], None
    for line in text.splitlines():
        if m := BENCH_LINE.match(line):  # a table's line: a summary after it is not the set-up's
            lines.append(m.groupdict())
            bench = None
        elif m := SETTING_UP.match(line):
            bench = m["bench"]
        elif (m := SUMMARY.match(line)) and bench is not None and float(m["per_cpu"]) > 0:
            lines.append({"bench": bench, "cpus": round(float(m["mops"]) / float(m["per_cpu"])), **m.groupdict()})
            bench = None
    return lines


def runs_from_bench_text(text: str, kernel: str) -> list[dict]:
    """The bench lines of ``text`` (:func:`bench_lines`) -> rows as ``bench --mode native -p N --json`` prints them
    (the fields :func:`table_from_bench_runs` reads), each N-CPU row with its bench's 1-CPU rate (the median of its
    1-CPU lines) as ``one_cpu``. Other lines (the bench's iterations, headings) are skipped."""
    if major_minor(str(kernel)) is None:
        raise LabError(f"the kernel bench's lines do not say the kernel, and {kernel!r} is no release: give the "
                       "machine's `uname -r` (e.g. 6.18.44)")
    lines = bench_lines(text)
    if not lines:
        raise LabError("no line of the form `uprobe-nop (16 cpus): 12.3 ± 0.1M/s (0.77M/s/cpu)` and no bench summary "
                       "(`Summary: hits ...` after `Setting up benchmark 'trig-uprobe-nop'`): an unseen table in text "
                       "is the kernel bench's -p N output (or the JSON bench --mode native -p N --json prints)")
    one_cpu = {}
    for line in lines:
        if int(line["cpus"]) == 1:
            one_cpu.setdefault(line["bench"], []).append(float(line["per_cpu"]))
    runs = []
    for line in lines:
        bench, cpus = line["bench"], int(line["cpus"])
        row = {"bench": bench, "mode": "native", "kernel": str(kernel), "cpus": cpus, "mops": float(line["mops"]),
               "mops_per_cpu": float(line["per_cpu"])}
        if cpus > 1 and bench in one_cpu:
            row["one_cpu"] = {"mops_per_cpu": statistics.median(one_cpu[bench])}
        runs.append(row)
    return runs


def table_from_bench_runs(runs: list[dict], machine: str = "unseen"):
    """``bench --mode native -p N --json`` rows -> (a table in scaling.csv's columns, with a 1-CPU row per bench,
    and the no-probe loop's per-CPU rate at each N over its rate at 1, {1: 1.0, N: m(N)})."""
    import pandas as pd

    if not isinstance(runs, list) or not all(isinstance(r, dict) for r in runs):
        raise LabError("an unseen table is a list of rows as `bench --mode native -p N --json` prints them")
    runs = [r for r in runs if "refused" not in r]  # a bench the kernel refused at attach has no figure
    lacking = next((r for r in runs if not {"bench", "cpus", "mops", "mops_per_cpu"} <= r.keys()), None)
    if lacking is not None:
        raise LabError(f"a row without bench, cpus, mops and mops_per_cpu ({sorted(lacking)}): an unseen table is "
                       "the rows `bench --mode native -p N --json` prints")
    kernels = {r.get("kernel") for r in runs}
    if len(kernels) != 1 or any(r.get("mode") != "native" for r in runs):
        raise LabError(f"an unseen table is one kernel's native -p N runs; these rows have kernels {sorted(map(str, kernels))}"
                       " and modes " + ", ".join(sorted({str(r.get('mode')) for r in runs})))
    release = str(kernels.pop())
    line = major_minor(release)
    if line is None:
        raise LabError("the rows' kernel is no release (expected uname -r, e.g. 6.18.44)")
    # the config: the release as mainline plus the core rules its stable line took by its sublevel (6.12.80:
    # 6.12+rcu_tasks_trace), as scaling.csv names a variant
    backported = sorted(r.name for r in RULES if r.arch == "core" and r.name in kernel_for_release(release).rules
                        and r.name not in kernel_of("", line).rules)
    config = "+".join([version_name(line), *backported])
    rows, one_cpu, machine_scaling = [], {}, {1: 1.0}
    for r in runs:
        n, bench = int(r["cpus"]), r["bench"]
        if n > 1 and "one_cpu" not in r:
            raise LabError(f"{bench} at -p {n} has no one_cpu run: the model needs each curve's 1-CPU rate "
                           "(bench --mode native -p N measures it with the N-CPU run; in the kernel bench's lines, "
                           "its ( 1 cpus) line)")
        if bench == "usermode-count" and n > 1:
            machine_scaling[n] = r["mops_per_cpu"] / r["one_cpu"]["mops_per_cpu"]
        if bench in BASELINES:
            continue
        one_cpu.setdefault(bench, []).append(r["mops"] if n == 1 else r["one_cpu"]["mops_per_cpu"])
        if n > 1:
            rows.append({"bench": bench, "producers": n, "total_mops": float(r["mops"])})
    if not rows:
        raise LabError("the rows have no bench measured on 2 or more CPUs: run bench --mode native -p N with N >= 2")
    # each -p N run measured its own 1-CPU rate: the curve's T1 is their median
    rows += [{"bench": b, "producers": 1, "total_mops": statistics.median(v)} for b, v in one_cpu.items()]
    table = pd.DataFrame(rows).assign(table=TABLE, machine=machine, variant="", config=config)
    return table.sort_values(["bench", "producers"], ignore_index=True), machine_scaling


def score_unseen(runs: list[dict], cores: int) -> dict:
    """Predict the table of ``runs`` (:func:`table_from_bench_runs`) on a machine of ``cores`` physical cores, each
    row with v2's 80% interval, and score it as the protocol does: median |error| and the share inside."""
    if not isinstance(cores, int) or cores < 1:
        raise LabError(f"cores is the machine's physical core count, e.g. 16, got {cores!r}")
    table, machine_scaling = table_from_bench_runs(runs)
    with_m = sorted(n for n in set(table["producers"]) if n > 1 and n not in machine_scaling)
    if with_m:
        raise LabError(f"no usermode-count row at -p {', '.join(map(str, with_m))}: v2 takes m(N) from the machine's "
                       "own no-probe loop (bench --mode native -p N runs it beside the benches)")
    rows = contention.predict_unseen(table, cores, machine_scaling)
    low, high = contention.loto_interval(2)
    rows["low"], rows["high"] = rows["model_mops"] / np.exp(high), rows["model_mops"] / np.exp(low)
    rows["error"] = rows["model_mops"] / rows["total_mops"] - 1
    inside = (rows["total_mops"] >= rows["low"]) & (rows["total_mops"] <= rows["high"])
    return {"rows": rows, "median_abs_error": float(rows["error"].abs().median()), "inside_80": float(inside.mean()),
            "interval_log": (low, high), "machine_scaling": machine_scaling}
