"""The contention model: a many-CPU throughput curve from the shared cache lines the emulator counts.

docs/model.md ("Many CPUs", and "Many CPUs, version 2") gives the design and the protocol; in short, at N
producers one per CPU::

    X(N) = min( c(N) m(N) / (T1 + sum_l t_l(N) tau(N)),  1 / max_l t_l(N) tau(N) )

with T1 the variant's own single-CPU time, t_l(N) line l's transfers per hit in the emulator's interleaving
of N threads (uprobe_lab.smp over uprobe_lab.contended's lines, never fitted), tau(N) = tau0 (1 + gamma (N - 1))
one transfer's time, c(N) = min(N, C) + eta max(0, N - C) the cores' worth of N CPUs on a machine of C cores and
m(N) = 1 / (1 + kappa (N - 1)) the machine's own per-CPU scaling. Version 1 fits tau0, gamma and eta (kappa = 0);
version 2 fits tau0, gamma and kappa, with eta the hardware maker's figure. Parameters are fitted per machine on
the fitting tables; the held-out tables are predicted and scored.
"""
from __future__ import annotations

import functools
import json
from importlib import resources
from pathlib import Path

import numpy as np

from .. import bench as _bench
from ..errors import LabError
from ..kernel import RULES, KernelVersion, kernel_of, major_minor
from ..outputs import write_output

MACHINE_CORES = {"xeon-gold-6138-80": 40, "qemu-kvm-32": 32}  # physical cores, from the maker (the guest: its vCPUs)
FIT_TABLES = ("haslam-lock-compare-2024-04", "haslam-rwlock-v2-2024-04", "andrii-lockless-tree-commit-2024-09",
              "andrii-rcu-tasks-trace-commit-2024-09")
HELD_OUT_TABLES = ("andrii-speculative-vma-rfcv3-2024-08", "andrii-srcu-uretprobe-commit-2024-10",
                   "andrii-speculative-vma-commit-2024-11", "andrii-reuse-ri-commit-2024-12")
ITERATIONS = 40  # per emulated thread: the transfers per hit settle well before
TAU0_NS = np.geomspace(1, 2000, 60)
GAMMA = np.arange(0, 0.2 + 1e-9, 0.005)
ETA = np.arange(0, 1 + 1e-9, 0.05)
KAPPA = np.arange(0, 0.03 + 1e-9, 0.001)
ETA_SMT = 0.3  # v2: what a second hardware thread adds, Intel's "up to 30%" (docs/model.md, version 2)
V1_RECORDED = {"median_abs_error": 0.198, "inside_80": 102 / 129, "peaks": (2, 8)}  # docs/model.md, v1's run
CURVE = ["table", "variant", "bench"]
# The emulated runs the fitting and held-out tables need, kept (record_transfers): some 200 many-CPU runs, seconds
# that chapter 07 and the tests would spend on every run. tests/test_contention.py checks each against a fresh run.
TRANSFERS_PATH = Path(__file__).resolve().parents[1] / "data" / "contention_transfers.json"


def scaling_table():
    """Every transcribed many-CPU table (uprobe_lab/data/scaling.csv), one row per printed number."""
    import pandas as pd

    with resources.files("uprobe_lab.data").joinpath("scaling.csv").open() as f:
        table = pd.read_csv(f, dtype={"config": str, "machine": str})
    table[["config", "machine"]] = table[["config", "machine"]].fillna("")
    table["producers"] = table["producers"].astype("Int64")
    return table


def config_kernel(config: str) -> KernelVersion:
    """A variant's kernel: '6.13+speculative_vma_lookup' -> 6.13's rules plus the named ones."""
    base, *extra = config.split("+")
    release = major_minor(base)
    unknown = [name for name in extra if name not in {r.name for r in RULES}]
    if release is None or unknown:
        raise LabError(f"config {config!r}: a release and rule names of uprobe_lab.kernel.RULES, e.g. 6.13+ri_pool")
    kernel = kernel_of(config, release)  # the release as mainline: a variant names any later rule itself
    return KernelVersion(config, kernel.rules | frozenset(extra))


@functools.lru_cache(maxsize=None)
def transfers(bench: str, config: str, cpus: int) -> dict[str, float]:
    """Line transfers per hit, per kernel state, with ``cpus`` emulated threads under the variant's rules: the
    recorded run where there is one (:func:`recorded_transfers`), else emulated now."""
    if cpus == 1:
        return {}
    recorded = recorded_transfers().get((bench, config, cpus))
    return emulated_transfers(bench, config, cpus) if recorded is None else recorded


def emulated_transfers(bench: str, config: str, cpus: int) -> dict[str, float]:
    """:func:`transfers`, emulated now."""
    return _bench.run_bench_on_cpus(bench, "x86_64", config_kernel(config), ITERATIONS, cpus)["transfers_per_hit"]


@functools.lru_cache(maxsize=1)
def recorded_transfers() -> dict[tuple[str, str, int], dict[str, float]]:
    """The kept runs (TRANSFERS_PATH) by (bench, config, cpus); none if the file is missing or was made with other
    ITERATIONS."""
    try:
        data = json.loads(TRANSFERS_PATH.read_text())
    except FileNotFoundError:
        return {}
    if data["iterations"] != ITERATIONS:
        return {}
    return {(r["bench"], r["config"], r["cpus"]): r["transfers_per_hit"] for r in data["runs"]}


def needed_runs(tables=FIT_TABLES + HELD_OUT_TABLES) -> list[tuple[str, str, int]]:
    """The (bench, config, cpus) runs :func:`model_rows` emulates for ``tables``."""
    t = _usable_rows(tables, scaling_table())
    return sorted({(b, c, int(n)) for b, c, n in zip(t["bench"], t["config"], t["producers"])})


def record_transfers(path: str | Path = TRANSFERS_PATH) -> dict:
    """Emulate every run the fitting and held-out tables need and keep them at ``path`` (after a change to the
    emulator or the kernels' rules that moves them: tests/test_contention.py says when)."""
    runs = [{"bench": b, "config": c, "cpus": n, "transfers_per_hit": emulated_transfers(b, c, n)}
            for b, c, n in needed_runs()]
    data = {"command": "uprobe_lab.model.contention.record_transfers()", "iterations": ITERATIONS, "runs": runs}
    write_output(path, json.dumps(data, indent=1) + "\n", "path", "contention_transfers.json",
                 recording=TRANSFERS_PATH.name)
    recorded_transfers.cache_clear()
    transfers.cache_clear()
    loto_interval.cache_clear()
    return data


def _usable_rows(tables, t):
    """The rows of ``tables`` in ``t`` the model can use (a modelled config, N >= 2, a 1-CPU row), with T1_ns."""
    t = t[t["table"].isin(tables) & (t["config"] != "") & t["producers"].notna()].copy()
    one = t[t["producers"] == 1].set_index(CURVE)["total_mops"]
    t = t[t["producers"] >= 2].copy()
    t["T1_ns"] = [1e3 / one[key] if key in one.index else np.nan for key in zip(*(t[c] for c in CURVE))]
    return t[t["T1_ns"].notna()].copy()


def model_rows(tables, t=None, cores: dict[str, int] | None = None):
    """The rows of ``tables`` (of ``t``, by default scaling.csv) the model can use, with their inputs: T1_ns (the
    variant's 1-CPU time), S (all lines' transfers per hit), M (the busiest line's) and C (the machine's cores:
    MACHINE_CORES, or ``cores``). Rows with N >= 2 only."""
    t = _usable_rows(tables, scaling_table() if t is None else t)
    per_line = [transfers(b, c, int(n)) for b, c, n in zip(t["bench"], t["config"], t["producers"])]
    t["S"] = [sum(d.values()) for d in per_line]
    t["M"] = [max(d.values(), default=0.0) for d in per_line]
    t["C"] = t["machine"].map({**MACHINE_CORES, **(cores or {})})
    return t.reset_index(drop=True)


def curve(tau0, gamma, eta, rows, kappa=0.0) -> np.ndarray:
    """X(N) in M/s for each row (the parameters may be arrays that broadcast against the rows). A row's measured
    machine scaling (column ``m``: its no-probe per-CPU rate at N over that at 1) replaces the kappa term."""
    n, c_max = rows["producers"].to_numpy(float), rows["C"].to_numpy(float)
    tau = tau0 * (1 + gamma * (n - 1))
    machine = 1 / (1 + kappa * (n - 1))
    if "m" in rows:
        measured = rows["m"].to_numpy(float)
        machine = np.where(np.isnan(measured), machine, measured)
    cores = (np.minimum(n, c_max) + eta * np.maximum(0, n - c_max)) * machine
    latency = cores / (rows["T1_ns"].to_numpy() + rows["S"].to_numpy() * tau)
    with np.errstate(divide="ignore"):
        line = 1 / (rows["M"].to_numpy() * tau)
    return np.minimum(latency, line) * 1e3


def fit(rows, version: int = 1) -> tuple:
    """The parameters minimising the squared log error over ``rows``, on the protocol's grid: version 1
    (tau0, gamma, eta); version 2 (tau0, gamma, eta = ETA_SMT, kappa)."""
    observed = np.log(rows["total_mops"].to_numpy())
    third = ETA if version == 1 else KAPPA
    best, best_err = None, np.inf
    for tau0 in TAU0_NS:  # one tau0 at a time keeps the grid (gamma x third x rows) small
        g, x = np.meshgrid(GAMMA, third, indexing="ij")
        g, x = g[..., None], x[..., None]
        pred = curve(tau0, g, x, rows) if version == 1 else curve(tau0, g, ETA_SMT, rows, kappa=x)
        err = ((np.log(pred) - observed) ** 2).sum(axis=-1)
        i = np.unravel_index(np.argmin(err), err.shape)
        if err[i] < best_err:
            best_err = err[i]
            best = (float(tau0), float(GAMMA[i[0]]), float(third[i[1]]))
            if version != 1:
                best = (best[0], best[1], ETA_SMT, best[2])
    return best


def unseen_machine_params(params: dict) -> tuple:
    """v2's parameters for a machine with no fitting rows: tau0 and gamma the geometric mean of the fitted
    machines' (gamma + 1, so a zero counts), eta ETA_SMT and kappa likewise; a measured m(N) overrides kappa."""
    values = np.array(list(params.values()))
    tau0 = float(np.exp(np.log(values[:, 0]).mean()))
    gamma, kappa = (float(np.exp(np.log1p(values[:, i]).mean()) - 1) for i in (1, 3))
    return tau0, gamma, ETA_SMT, kappa


def predict_unseen(table, cores: int, no_probe_per_cpu: dict[int, float] | None = None):
    """v2 on a table of a machine with no fitting rows (scaling.csv's columns: table, machine, variant, config,
    bench, producers, total_mops; each curve with its 1-CPU row): the fitted machines' parameters
    (:func:`unseen_machine_params`), C = ``cores`` and, where given, m(N) from the machine's own no-probe loop
    (``no_probe_per_cpu``: N -> M/s per CPU, with N = 1). Returns its rows with N >= 2 and ``model_mops``."""
    if no_probe_per_cpu is not None and 1 not in no_probe_per_cpu:
        raise LabError("no_probe_per_cpu needs the 1-CPU rate (key 1): m(N) is the rate at N over the rate at 1")
    fitting = model_rows(FIT_TABLES)
    params = unseen_machine_params({m: fit(r, 2) for m, r in fitting.groupby("machine")})
    rows = model_rows(table["table"].unique(), table, {machine: cores for machine in table["machine"].unique()})
    if no_probe_per_cpu is not None:
        rows["m"] = rows["producers"].map(lambda n: no_probe_per_cpu.get(int(n), np.nan) / no_probe_per_cpu[1])
    rows["model_mops"] = predict(params, rows)
    return rows


def predict(params: tuple, rows) -> np.ndarray:
    tau0, gamma, eta, *kappa = params
    return curve(tau0, gamma, eta, rows, *kappa)


@functools.lru_cache(maxsize=None)
def loto_interval(version: int) -> tuple[float, float]:
    """The 80% interval of log(model / measured): the 10th and 90th percentiles over the fitting rows, each
    predicted with the parameters fitted without its own table (leave one table out)."""
    fitting = model_rows(FIT_TABLES)
    loto = []
    for (machine, table), rows in fitting.groupby(["machine", "table"]):
        others = fitting[(fitting["machine"] == machine) & (fitting["table"] != table)]
        if len(others):
            loto.extend(np.log(predict(fit(others, version), rows) / rows["total_mops"].to_numpy()))
    low, high = np.percentile(loto, [10, 90])
    return float(low), float(high)


def evaluate(version: int = 1) -> dict:
    """The protocol of docs/model.md (version 1, or version 2's section): fit per machine, predict the held-out
    rows with 80% intervals, score."""
    fitting = model_rows(FIT_TABLES)
    params = {m: fit(r, version) for m, r in fitting.groupby("machine")}
    low, high = loto_interval(version)
    held = model_rows(HELD_OUT_TABLES)
    for rows in (held, fitting):
        rows["model_mops"] = np.nan
        for machine, part in rows.groupby("machine"):
            rows.loc[part.index, "model_mops"] = predict(params[machine], part)
        rows["low"], rows["high"] = rows["model_mops"] / np.exp(high), rows["model_mops"] / np.exp(low)
    held["error"] = held["model_mops"] / held["total_mops"] - 1
    inside = (held["total_mops"] >= held["low"]) & (held["total_mops"] <= held["high"])
    peaks = []
    for key, c in held.groupby(CURVE):
        grid = sorted(c["producers"])
        published, modelled = c.loc[c["total_mops"].idxmax(), "producers"], c.loc[c["model_mops"].idxmax(), "producers"]
        peaks.append({"curve": key, "published_peak": int(published), "model_peak": int(modelled),
                      "within_one_step": abs(grid.index(published) - grid.index(modelled)) <= 1})
    return {"version": version, "params": params, "interval_log": (float(low), float(high)), "held_out": held, "fitted": fitting,
            "median_abs_error": float(held["error"].abs().median()), "inside_80": float(inside.mean()),
            "peaks": peaks, "fitting_rows": len(fitting), "held_out_rows": len(held)}
