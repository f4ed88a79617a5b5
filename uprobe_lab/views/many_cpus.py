"""Chapter 07's views: many CPUs hitting one probe, the shared state each kernel's hit touches, the published
scaling curves beside the contention model, and this machine's own curve.

Everything is computed by the library (uprobe_lab.smp, uprobe_lab.contended, uprobe_lab.model.contention,
uprobe_lab.native.many_cpus); this module only arranges and draws it. Figures are ``matplotlib.figure.Figure``
(headless, no pyplot state); the widget falls back to a figure and text without a front end.
"""
from __future__ import annotations

import json
import os
import platform
import textwrap
import warnings
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch, Patch

from .. import contended
from ..bench import bench_process, run_bench_on_cpus
from ..errors import LabError, check_choice
from ..kernel import release_rules
from ..model import contention
from ..native.example import native_reason
from ..native.host import host_description
from ..native.many_cpus import run_native_benches_on_cpus
from ..outputs import write_output
from ..smp import run_on_cpus
from ..text import wrap
from .redraw import figure_view, show_figure, shows_lab_errors

KERNELS = ("6.8", "6.10", "6.12", "6.13", "6.14", "6.18")  # each a step of the 2024-25 work, and before it
BENCHES = ("uprobe-nop", "uretprobe-nop", "uprobe-ret")
CPU_COUNTS = (1, 2, 4, 8, 16, 32, 64)
KIND_COLOR = {"spinlock": "#d7301f", "atomic": "#fc8d59", "write": "#fdae61", "read": "#fee08b", "per-cpu": "#91cf60",
              "per-task": "#1a9850", None: "#eeeeee"}
KIND_WORDS = {"spinlock": "spinlock: CPUs wait their turn", "atomic": "atomic write of a shared line",
              "write": "plain store to a shared line", "read": "read of a shared line",
              "per-cpu": "this CPU's own counter", "per-task": "this task's own field", None: "not touched"}
CPU_WAIT_S = 10  # how long the chapter waits for a CPU another lab bench holds before it shows the recording
SCALING_PATH = Path(__file__).resolve().parents[1] / "data" / "native_scaling_6.18.json"


def all_states() -> list[str]:
    """Every cache line (uprobe_lab.contended.Line's name) or per-CPU/per-task state some modelled kernel's hit
    touches, in hit-path order."""
    seen = {}
    for k in KERNELS + ("7.2",):
        a = contended.accesses(release_rules(k))
        for step in (a.find_active_uprobe_rcu, a.handler_chain, a.pre_ssout, a.xol_slot, a.handle_singlestep,
                     a.prepare_uretprobe, a.handle_uretprobe_chain):
            for (state, _), _ in step:
                seen.setdefault(state, None)
    return list(seen)


def boxes(kernel: str, touched=()) -> list[str]:
    """One state per box of :func:`lines_figure` on ``kernel``: every state of :func:`all_states`, a cache line
    that kernels lay out differently (struct xol_area's first line) once, with the fields ``kernel`` has on it
    (the version ``touched`` names, else the one the kernel's rules lay out)."""
    own = contended.xol_area_line(release_rules(kernel)).name
    out = {}
    for state in all_states():  # a line is named by its structure and offset; without an offset, by its fields
        line = state.partition(": ")[0]
        out.setdefault(line if " +" in line else state, []).append(state)
    picked = []
    for line, versions in out.items():
        seen = [s for s in versions if s in touched]
        picked.append(seen[0] if seen else own if line == own.partition(": ")[0] else versions[-1])
    return picked


def _bench_row(bench: str, arch: str, kernel: str, iterations: int, cpus: int) -> dict:
    """run_bench_on_cpus's row, or its refusal as a LabError (a uretprobe bench on a release before uretprobes,
    a probe the kernel refuses): a refused row has none of the counts the views read."""
    row = run_bench_on_cpus(bench, arch, kernel, iterations, cpus)
    if "refused" in row:
        raise LabError(row["refused"])
    return row


def exact_hits(benches=("uprobe-nop", "uprobe-ret"), kernels=("6.8", "6.18"), cpus=(1, 8, 64),
               iterations: int = 10, arch: str = "x86_64") -> pd.DataFrame:
    """Hits counted by the consumer against iterations x CPUs, per bench, kernel and CPU count."""
    rows = []
    for bench in benches:
        for kernel in kernels:
            for n in cpus:
                r = _bench_row(bench, arch, kernel, iterations, n)
                rows.append({"bench": bench, "kernel": kernel, "cpus": n, "hits": r["hits"],
                             "iterations x cpus": iterations * n, "xol_waits": r["xol_waits"]})
    return pd.DataFrame(rows)


def shared_per_hit(bench: str = "uprobe-nop", kernels=KERNELS) -> pd.DataFrame:
    """Accesses per hit to each cache line (rows, 'structure +offset: fields'), per kernel (columns): '2 atomic',
    '1 read', '' (untouched); several accesses of one line are one line, as '4 atomic' or '1 read, 2 atomic'."""
    table = {}
    for k in kernels:
        row = _bench_row(bench, "x86_64", k, iterations=5, cpus=1)["shared_per_hit"]
        cells = {}
        for key, v in row.items():
            line, kind = key.rsplit(" (", 1)
            cells.setdefault(line, []).append(f"{v:g} {kind[:-1]}")
        table[k] = {line: ", ".join(sorted(parts, key=lambda p: p.endswith("read")))
                    for line, parts in cells.items()}
    frame = pd.DataFrame(table).reindex([s for s in all_states() if any(s in t for t in table.values())])
    return frame.fillna("").rename_axis(f"{bench}: per hit")


def _written(bench: str, kernel: str) -> dict[str, float]:
    """One hit's writes to shared lines on ``kernel``: 'line (kind)' -> accesses per hit."""
    row = _bench_row(bench, "x86_64", kernel, iterations=5, cpus=1)["shared_per_hit"]
    return {key: v for key, v in row.items() if key.endswith(tuple(f"({w})" for w in contended.WRITES))}


def shared_writes(bench: str = "uprobe-nop", kernels=KERNELS) -> dict[str, float]:
    """Writes per hit to lines other CPUs also touch (spinlock, atomic and plain-store accesses), per kernel. A
    release older than 6.8 is counted on 6.8's structures: a UserWarning says so (contended.layout_note)."""
    for note in filter(None, map(contended.layout_note, kernels)):
        warnings.warn(note, stacklevel=2)
    return {k: sum(_written(bench, k).values()) for k in kernels}


def lines_figure(bench: str = "uprobe-nop", kernel: str = "6.10", cpus: int = 8) -> Figure:
    """Each cache line a box, lit by what one hit does to it on ``kernel``; under it, how often the line moved to
    another CPU per hit with ``cpus`` threads."""
    r = _bench_row(bench, "x86_64", kernel, iterations=20, cpus=cpus)
    touched = {}  # line -> {kind: accesses per hit}
    for key, v in r["shared_per_hit"].items():
        line, kind = key.rsplit(" (", 1)
        touched.setdefault(line, {})[kind[:-1]] = v
    states = boxes(kernel, touched)
    cols = 4
    rows = -(-len(states) // cols)
    # 12 in wide and every word at 12 pt: a slide shows it at its drawn size, under the widget's controls
    fig = Figure(figsize=(12, 0.9 * rows + 1.05), layout="constrained")
    ax = fig.add_subplot()
    ax.set_xlim(0, cols)
    ax.set_ylim(0, rows)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.axis("off")
    for i, state in enumerate(states):
        x, y = i % cols, rows - 1 - i // cols
        kinds = sorted(touched.get(state, {}).items(), key=lambda kv: list(KIND_COLOR).index(kv[0]))
        kind = kinds[0][0] if kinds else None  # the box takes its strongest access's colour: a write over a read
        ax.add_patch(FancyBboxPatch((x + 0.02, y + 0.05), 0.96, 0.9, boxstyle="round,pad=0.01",
                                    facecolor=KIND_COLOR[kind], edgecolor="#555555"))
        moved = r["transfers_per_hit"].get(state, 0.0)
        detail = ", ".join(f"{n:g}x {k}" for k, n in kinds) or "-"
        if kind in ("spinlock", "atomic", "write", "read") and cpus > 1:
            detail += f", moves {moved:.2f}/hit"
        structure, _, fields = state.partition(": ")
        structure, _, paren = structure.partition(" (")  # "(per-CPU counters)" goes with the fields
        fields = ", ".join(filter(None, [fields, paren.rstrip(")")]))
        lines = textwrap.wrap(fields, 30) + textwrap.wrap(detail, 30)  # 30 characters of 12 pt fill a box
        ax.text(x + 0.5, y + 0.5 + 0.11 * len(lines), structure, ha="center", va="center", fontsize=12,
                fontweight="bold")
        ax.text(x + 0.5, y + 0.5 - 0.11, "\n".join(lines), ha="center", va="center", fontsize=12, linespacing=1.15)
    ax.legend(handles=[Patch(facecolor=c, edgecolor="#555555") for c in KIND_COLOR.values()],
              labels=list(KIND_WORDS.values()), loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=4, fontsize=12,
              frameon=False, handlelength=1.2, columnspacing=1.2)
    ax.set_title(f"{bench} on {kernel}, {cpus} CPU{'s' if cpus > 1 else ''}: "
                 f"{r['line_transfers_per_hit']:.2f} line transfers per hit", fontsize=13)
    return fig


def lines_widget(bench: str = "uprobe-nop", kernel: str = "6.10", cpus: int = 8):
    """The boxes of :func:`lines_figure` with a kernel selector, a bench selector and a CPU slider; each change
    redraws the figure into an Image widget (views.redraw says why not an Output widget)."""
    import ipywidgets as w

    other = "lines_figure(bench, kernel, cpus) draws any other the lab models"
    check_choice(kernel, KERNELS, "the widget's kernel", other)
    check_choice(bench, BENCHES, "the widget's bench", other)
    check_choice(cpus, CPU_COUNTS, "the widget's CPU count", other)
    k = w.ToggleButtons(options=list(KERNELS), value=kernel, description="kernel")
    b = w.ToggleButtons(options=list(BENCHES), value=bench, description="bench")
    n = w.SelectionSlider(options=list(CPU_COUNTS), value=cpus, description="CPUs")
    view = figure_view()

    @shows_lab_errors(view)
    def show(change=None):
        show_figure(view, lines_figure(b.value, k.value, n.value))

    for control in (k, b, n):
        control.observe(show, names="value")
    show()
    return w.VBox([k, w.HBox([b, n]), view])  # two rows of controls: they and the boxes fit one screen


def transfers_curve(bench: str = "uprobe-nop", kernels=("6.10", "6.13", "6.14"), cpus=(1, 2, 4, 8, 16, 32, 64),
                    iterations: int = 10) -> pd.DataFrame:
    """Line transfers per hit against the number of CPUs, per kernel (the emulator's interleaving, seed 0)."""
    return pd.DataFrame({k: [_bench_row(bench, "x86_64", k, iterations, n)["line_transfers_per_hit"]
                             for n in cpus] for k in kernels}, index=pd.Index(cpus, name="CPUs"))


def transfers_chart(curves: pd.DataFrame, bench: str = "uprobe-nop") -> Figure:
    fig = Figure(figsize=(7, 4), layout="constrained")
    ax = fig.add_subplot()
    for kernel in curves:
        ax.plot(curves.index, curves[kernel], marker="o", label=kernel)
    ax.set_xscale("log", base=2)
    ax.set_xticks(curves.index, [str(n) for n in curves.index])
    ax.set_xlabel("CPUs hitting the probe")
    ax.set_ylabel("shared lines moved per hit")
    ax.set_title(f"{bench}: cache lines that change CPU on every hit")
    ax.legend(title="kernel", fontsize=10)
    return fig


def xol_slots(cpus: int = 64, seed: int = 3, arch: str = "x86_64") -> dict:
    """``cpus`` threads stepping out of line at once (x86-64: ``uprobe-ret``; arm64: ``uprobe-push``), each switched
    out on every return to user mode: the hits, and how often a thread found every XOL slot taken and slept."""
    proc, consumer, target = bench_process("uprobe-ret" if arch == "x86_64" else "uprobe-push", arch, "6.18")
    sched = run_on_cpus(proc, cpus, "producer_loop", 20, target, seed=seed, switch_on_exit=1.0)
    return {"threads": cpus, "hits": consumer.hits, "slept for a slot": sched.sleeps,
            "most asleep at once": sched.most_asleep}


def xol_slots_table(threads=(8, 64)) -> pd.DataFrame:
    """:func:`xol_slots` on x86-64 for each thread count, one row each."""
    return pd.DataFrame([xol_slots(n) for n in threads]).set_index("threads")


def scaling_chart(result: dict, table: str) -> Figure:
    """One published table: each variant's total M/s against N (points) and, where the contention model covers it
    (a fitting or a held-out table of docs/model.md), the model's curve and its 80% band; the title says which."""
    t = contention.scaling_table()
    t = t[(t["table"] == table) & t["producers"].notna()]
    modelled = pd.concat([result["held_out"], result["fitted"]])
    curves = list(dict.fromkeys(zip(t["variant"], t["bench"])))
    fig = Figure(figsize=(11.5, 4.2), layout="constrained")  # a slide's width, the legend beside the curves
    ax = fig.add_subplot()
    colors = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860"]
    for (variant, bench), color in zip(curves, colors):
        pub = t[(t["variant"] == variant) & (t["bench"] == bench)].sort_values("producers")
        label = f"{bench}, {variant.split(' (')[0].split(' [')[0]}"
        ax.plot(pub["producers"].astype(int), pub["total_mops"], "o", color=color, ms=4, label=f"{label} (published)")
        m = modelled[(modelled["table"] == table) & (modelled["variant"] == variant) & (modelled["bench"] == bench)]
        if len(m):
            m = m.sort_values("producers")
            ax.plot(m["producers"], m["model_mops"], "-", color=color, label=f"{label} (model)")
            ax.fill_between(m["producers"].astype(float), m["low"], m["high"], color=color, alpha=0.15)
    ax.set_xlabel("producers (CPUs)")
    ax.set_ylabel("total M hits/s")
    role = ("held out: predicted" if table in contention.HELD_OUT_TABLES else
            "fitted" if table in contention.FIT_TABLES else "not modelled (docs/model.md says why)")
    machine = t["machine"].iloc[0] or "machine not stated"
    ax.set_title(f"{table} ({machine})\nmodel: {role}", fontsize=12)
    ax.legend(fontsize=12, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    ax.set_ylim(bottom=0)
    return fig


def protocol_summary(result: dict) -> pd.DataFrame:
    peaks = sum(p["within_one_step"] for p in result["peaks"])
    return pd.DataFrame([
        {"score": "median |error|", "goal": "<= 15%", "result": f"{result['median_abs_error']:.1%}"},
        {"score": "inside the 80% interval", "goal": ">= 80%", "result": f"{result['inside_80']:.1%}"},
        {"score": "peak within one step", "goal": f"{len(result['peaks'])} of {len(result['peaks'])}",
         "result": f"{peaks} of {len(result['peaks'])}"},
    ]).set_index("score")


def native_scaling(benches=("uprobe-nop", "uretprobe-nop", "uprobe-ret"), iterations: int = 50_000,
                   repeats: int = 3, recorded: bool = False) -> dict:
    """This machine's -p 1..N curve (N: its CPUs, at most 8), or the bundled recording where native runs cannot
    happen here (the reason says why) or ``recorded`` asks for it. {recorded, reason, host, rows}."""
    reason = "the recording was asked for" if recorded else native_reason()
    if reason is None:
        n = min(len(os.sched_getaffinity(0)), 8)
        rows = []
        try:
            for p in range(1, n + 1):  # a CPU another lab bench holds is not waited for long: a chapter must go on
                rows += run_native_benches_on_cpus(list(benches), p, iterations, repeats, lock_wait_s=CPU_WAIT_S,
                                                   baselines=True)  # the machine's own curve, without a probe
            return {"recorded": False, "reason": None, "host": platform.release(), "rows": rows}
        except LabError as err:
            reason = str(err)
    recording = json.loads(SCALING_PATH.read_text())
    return {"recorded": True, "reason": reason, "host": recording["host"], "rows": recording["rows"]}


def record_native_scaling(path: str | Path = SCALING_PATH, iterations: int = 200_000, repeats: int = 5) -> dict:
    """Measure :func:`native_scaling` here and keep it as the recording other machines show: with longer and more
    intervals than the chapter's own run, since a recording stands for the machine."""
    run = native_scaling(iterations=iterations, repeats=repeats)
    if run["recorded"]:
        raise LabError(f"cannot record: {run['reason']}")
    data = {"host": f"{platform.release()}, {len(os.sched_getaffinity(0))} CPUs (a virtual machine)",
            "command": f"uprobe_lab.views.many_cpus.record_native_scaling(iterations={iterations}, "
                       f"repeats={repeats})", "rows": run["rows"]}
    write_output(path, json.dumps(data, indent=1) + "\n", "path", "scaling.json", recording=SCALING_PATH.name)
    return data


def _per_cpu(rows: pd.DataFrame) -> pd.DataFrame:
    """M/s per CPU at each number of CPUs, one column per bench in the order they ran (the probes, then the
    baselines without one)."""
    return rows.pivot_table(index="cpus", columns="bench", values="mops_per_cpu")[list(dict.fromkeys(rows["bench"]))]


def native_scaling_table(run: dict) -> pd.DataFrame:
    return _per_cpu(pd.DataFrame(run["rows"])).round(3).rename_axis(index="CPUs", columns="M/s per CPU")


def native_scaling_chart(run: dict) -> Figure:
    rows = pd.DataFrame(run["rows"])
    fig = Figure(figsize=(7, 4), layout="constrained")
    ax = fig.add_subplot()
    for bench, grp in rows.groupby("bench", sort=False):
        ax.plot(grp["cpus"], grp["mops_per_cpu"] / grp["mops_per_cpu"].iloc[0], marker="o", label=bench)
    ax.axhline(1.0, color="#999999", lw=0.8)
    ax.set_xticks(sorted(rows["cpus"].unique()))
    ax.set_xlabel("producers, one per CPU")
    ax.set_ylabel("M/s per CPU, against 1 CPU")
    ax.set_ylim(0, 1.3)
    where = "recorded" if run["recorded"] else "measured now"
    ax.set_title(f"this machine ({where}: {run['host']})", fontsize=10)
    ax.legend(fontsize=10)
    return fig


# --- the chapter's words, written from the numbers -----------------------------------------------------------

# the rows `bench --mode native -p N` may carry beside the probes: the machine's own scaling without any probe
BASELINE_WORDS = {"usermode-count": "the loop with no probe", "syscall-count": "a plain syscall"}
KEPT_SPREAD = 0.10  # per-CPU shares closer than this are one: the spread of repeated -p runs on a shared machine


def _share(kept: float) -> str:
    return f"{kept:.0%} of its one-CPU rate"


def native_scaling_text(run: dict) -> str:
    """What the table of :func:`native_scaling_table` shows, on whatever machine it was measured: each bench's
    per-CPU rate at the most CPUs against one, whether the machine itself drops as far without a probe (the
    baseline rows, when the run has them), what the host kernel's hit shares, and why a stepped hit costs more.
    Wrapped for printing."""
    rows = pd.DataFrame(run["rows"])
    per_cpu = _per_cpu(rows)
    one, top = per_cpu.index.min(), per_cpu.index.max()
    if one == top:
        return f"This run has {one} CPU(s) only: there is no curve to read."  # short: no wrap
    kept = per_cpu.loc[top] / per_cpu.loc[one]
    probes = [b for b in per_cpu.columns if b not in BASELINE_WORDS]
    baselines = [b for b in BASELINE_WORDS if b in per_cpu.columns]
    out = [f"At {top} CPUs against {one}, per CPU: " + "; ".join(
        f"{b} keeps {_share(kept[b])} ({per_cpu.loc[one, b]:.3g} -> {per_cpu.loc[top, b]:.3g} M/s)"
        for b in probes + baselines) + "."]
    falling = [b for b in probes if kept[b] < 1 - KEPT_SPREAD]
    if not falling:
        out.append(f"Each probe keeps its one-CPU rate within {KEPT_SPREAD:.0%}: nothing its hits share slows "
                   f"them at {top} CPUs.")
    elif baselines:
        floor = min(kept[b] for b in baselines)
        machine = [b for b in falling if kept[b] >= floor - KEPT_SPREAD]
        probe = [b for b in falling if b not in machine]
        without = " and ".join(f"{BASELINE_WORDS[b]} {_share(kept[b])}" for b in baselines)
        if machine:
            out.append(f"Without any probe the machine drops as far ({without}), so the fall of "
                       f"{_listed(machine)} is the machine's own (CPUs shared with other work, two threads of "
                       "one core, a hypervisor), not the kernel's.")
        if probe:
            out.append(f"{_listed(probe)} {_fall(probe)} further than the machine without a probe ({without}): "
                       "that part is what the hits share.")
    else:
        out.append(f"{_listed(falling)} {_fall(falling)}. This run has no rows without a probe, so it cannot tell the "
                   "machine's own drop (CPUs shared with other work, two threads of one core, a hypervisor) from "
                   "the kernel's." + _host_shares(rows, falling))
    out.append(_stepped_cost(per_cpu.loc[one], run))
    return wrap(" ".join(s for s in out if s))


def _fall(benches: list) -> str:
    return "falls" if len(benches) == 1 else "fall"


def _host_shares(rows: pd.DataFrame, benches: list[str]) -> str:
    """What the measured kernel's hit on ``benches`` writes that other CPUs write, by the lab's rules for it."""
    release = str(rows["kernel"].iloc[0]) if "kernel" in rows else ""
    try:
        writes = {b: shared_writes(b, [release])[release] for b in benches}
    except LabError:  # a release the lab cannot read: no claim about it
        return ""
    quiet = [b for b, n in writes.items() if n == 0]
    loud = [b for b in benches if b not in quiet]
    out = ""
    if quiet:
        out += (f" By the lab's rules for {release} a {' or '.join(quiet)} hit writes nothing another CPU writes "
                f"(section 2), so {'its' if len(quiet) == 1 else 'their'} fall is the machine's, not the kernel's.")
    if loud:
        out += (f" A {' or '.join(loud)} hit on {release} still writes shared lines ("
                + ", ".join(f"{b}: {writes[b]:g} writes" for b in loud) + "), so part of "
                + ("its" if len(loud) == 1 else "their") + " fall may be the kernel's.")
    return out


def _listed(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _stepped_cost(one_cpu: pd.Series, run: dict) -> str:
    """Why uprobe-ret's hit costs so much more than uprobe-nop's on one CPU."""
    if not {"uprobe-ret", "uprobe-nop"} <= set(one_cpu.index):
        return ""
    ret_us, nop_us = 1 / one_cpu["uprobe-ret"], 1 / one_cpu["uprobe-nop"]
    virtual = "virtual machine" in run["host"] if run["recorded"] else host_description()["virtualized"]
    return (f"On one CPU a uprobe-ret hit costs {ret_us:.1f} us, {ret_us / nop_us:.0f} times uprobe-nop's "
            f"{nop_us:.2f} us: its `ret` cannot be emulated, so every hit takes an XOL slot, runs the copy and "
            "traps a second time (the step's #DB)"
            + (", and on this virtual machine the hypervisor intercepts that #DB, which costs far more than the "
               "trap itself on a CPU running natively." if virtual else "."))


MISS = 0.15  # the protocol's goal for the median error (docs/model.md): a larger error is a miss


def model_misses(result: dict) -> str:
    """Every way the contention model misses the held-out tables, written from ``result`` (``contention.evaluate()``):
    each curve whose error passes MISS somewhere, too high and too low, with its worst point and the points
    outside the model's 80% band."""
    held = result["held_out"]
    found = {"high": [], "low": []}
    for (table, variant, bench), c in held.groupby(["table", "variant", "bench"], sort=False):
        c = c.sort_values("producers")
        for way, worst in (("high", c["error"].idxmax()), ("low", c["error"].idxmin())):
            w = c.loc[worst]
            if (w["error"] > MISS) if way == "high" else (w["error"] < -MISS):
                side = c[c["total_mops"] < c["low"]] if way == "high" else c[c["total_mops"] > c["high"]]
                band = (f"; outside its 80% band at {', '.join(map(str, side['producers']))} CPUs"
                        if len(side) else "")
                last = c.iloc[-1]  # the most CPUs, where a reader looks first
                also = (f"; at {last['producers']} CPUs, {last['model_mops']:.1f} against {last['total_mops']:.1f}"
                        if last.name != worst and abs(last["error"]) > MISS and (last["error"] > 0) == (way == "high")
                        else "")
                found[way].append((abs(w["error"]), f"{bench}, {variant} ({table}): at {w['producers']} CPUs the "
                                   f"model reaches {w['model_mops']:.1f} M/s against a published "
                                   f"{w['total_mops']:.1f} ({w['error']:+.0%}{also}){band}"))
    groups = []  # apart by a blank line: rendered as Markdown, a line right after a list item would join it
    for way, words in (("high", "Too high"), ("low", "Too low")):
        misses = [text for _, text in sorted(found[way], reverse=True)]
        groups.append([f"{words} by more than {MISS:.0%} on {len(misses)} of {held.groupby(['table', 'variant']).ngroups} "
                       "held-out curves" + (":" if misses else "."), *(f"- {m}" for m in misses)])
    return wrap("\n\n".join("\n".join(lines) for lines in groups))
