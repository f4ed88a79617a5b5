"""Views for notebook 04 (arm64 STP): BRK install, a decode widget, events per hit, the seed's charts.

The charts are ``matplotlib.figure.Figure`` objects, like views.charts: nothing is left open in pyplot,
and a notebook cell shows one as its value or with ``display(fig)`` (the views package registers the
PNG formatter).

Every function works headless: widgets are optional, the tables and text are the lesson.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from ..arm64 import asm
from ..arm64.analyze import PROBE_VADDR, analyze_word, decode_fields, pc_relative
from ..arm64.constants import STACK_SIZE, STACK_TOP
from ..arm64.decode import STP_MODES
from ..arm64.process import Arm64Process
from ..constants import PAGE_SIZE
from ..arm64.programs import bench_program
from ..bench import events_table
from ..errors import check_choice
from ..program import Assembler, listing_lines
from ..text import wrap
from ..published import load_published, seed_speedups
from ..uprobes import CountingConsumer, uprobe_register
from .redraw import shows_lab_errors
from .stepper import steplog_html

SEED = "001_a91640efe4f91e99.txt"
EXAMPLE_WORDS = {
    "a9bf7bfd": "stp x29, x30, [sp, #-16]!  (the function-entry push)",
    "a8bf7bfd": "stp x29, x30, [sp], #-16   (post-index)",
    "a9017bfd": "stp x29, x30, [sp, #16]    (no writeback)",
    "29bf7bfd": "stp w29, w30, [sp, #-8]!   (w registers)",
    "a9bf53f3": "stp x19, x20, [sp, #-16]!  (other pair)",
    "d503201f": "nop",
    "d42000a0": "brk #5 (the uprobe breakpoint itself)",
}


def brk_install(symbol: str = "uprobe_target_push", stp: str = "xol") -> str:
    """The listing of ``symbol`` before and after a uprobe is registered on it."""
    proc = Arm64Process(stp=stp)
    proc.load(bench_program())
    proc.program.resolve(symbol)  # an unknown name: an error that lists the known ones
    before = _listing(proc, symbol)
    uprobe = uprobe_register(proc, symbol, CountingConsumer())
    after = _listing(proc, symbol)
    return f"before:\n{before}\n\nafter uprobe_register ({uprobe.auprobe.describe()}):\n{after}"


def _listing(proc, symbol: str) -> str:
    sym = proc.program.symbols[symbol]
    code = proc.read(sym.addr, sym.size)
    return "\n".join("  " + line for line in listing_lines(code, "arm64", sym.addr, words=True))


def decode_report(word: str, stp: str = "simulate") -> str:
    """Fields of an instruction word, whether it is the exact STP pattern, and what a probe does."""
    r = analyze_word(word, stp=stp)
    f = decode_fields(int(r["word"], 16))
    at = f"  (at {PROBE_VADDR:#x})" if pc_relative(int(f["word"], 16)) else ""
    lines = [f"{f['word']}  ({f['bytes']} in memory)  {f['text']}{at}"]
    if "pair" in f:
        reg = "w" if f["opc"] == 0 else "x"  # opc 0: 32-bit w registers; 1 (stgp, ldpsw) and 2: x
        lines.append(f"  {f['pair']}: size={f['size']} imm7={f['imm7']} (offset {f['offset']}) "
                     f"rt={reg}{f['rt']} rt2={reg}{f['rt2']} rn={f['rn']}")
    lines.append("  exact 'stp x29, x30, [sp, #imm]!': " + (
        "yes" if f["stp_fp_lr_pattern"] else f"no - {f['not_pattern_because']}"))
    lines.append(f"  with --stp {stp}: {r['action']} - {r['reason']}")
    return wrap("\n".join(lines))  # a reason is long: it wraps within the page


def decode_widget(stp: str = "simulate"):
    """Type a word, see its fields and the verdict (needs ipywidgets; returns the widget)."""
    import ipywidgets as w

    check_choice(stp, STP_MODES, "stp",
                 "xol: stepped out of line, as upstream does; simulate: emulated, as the unmerged STP patch does")
    text = w.Text(value="a9bf7bfd", description="word")
    mode = w.ToggleButtons(options=list(STP_MODES), value=stp, description="--stp")
    out = w.HTML()  # redrawn by value (views.redraw says why not an Output widget)

    @shows_lab_errors(out)  # a bad word is the learner's typo: its LabError shows in place of the report
    def show(_=None):
        out.value = steplog_html(decode_report(text.value, mode.value))  # a listing: monospace, sized for slides

    text.observe(show, "value")
    mode.observe(show, "value")
    show()
    return w.VBox([w.HBox([text, mode]), out])


# the kinds the STP variants differ in (every hit also runs one consumer; that column would only widen the table)
STP_KINDS = ["exceptions", "exc_brk", "exc_step", "eret", "emulated", "xol_steps", "pages_pinned", "uaccess_bytes"]


def stp_events(benches=("uprobe-nop", "uprobe-push", "uretprobe-push")) -> pd.DataFrame:
    """Events per hit: upstream XOL vs the seed's simulation (v2 pinned pages) vs v1 (uaccess)."""
    parts = []
    for label, options in (("xol-stp (upstream)", {"stp": "xol"}),
                           ("simulated-stp v2 (seed: pin pages)", {"stp": "simulate", "stp_store": "pin"}),
                           ("simulated-stp v1 (one copy_to_user)", {"stp": "simulate", "stp_store": "uaccess"})):
        df = events_table(benches, "arm64", kinds=STP_KINDS, **options)
        parts.append(df.drop(columns="kernel").assign(variant=label))
    return pd.concat(parts)[["variant", "bench", *STP_KINDS]].set_index(["bench", "variant"]).sort_index()


def published_stp() -> pd.DataFrame:
    """The seed's numbers: bench (M/s), Redis GET/SET (RPS) and grep (s), per variant."""
    df = load_published()
    return df[df["source"] == SEED][["table", "variant", "kernel", "bench", "value", "unit"]].reset_index(drop=True)


STP_COLUMNS = {"no-uprobe": "no probe", "xol-stp": "stp stepped",
               "simulated-stp": "stp simulated", "simulated-stp-uaccess": "stp simulated"}


def published_stp_table() -> pd.DataFrame:
    """The seed's numbers one row per bench, a column per kernel: no probe, the STP stepped, the STP simulated (v2,
    pinned pages, in the bench table; v1, one copy_to_user, in the Redis and grep rows). The same figures as
    :func:`published_stp`, short enough for one slide."""
    df = published_stp().assign(column=lambda d: d["kernel"].map(STP_COLUMNS))
    wide = df.pivot_table(index=["table", "bench", "unit"], columns="column", values="value", sort=False)
    wide = wide.reindex(columns=[c for c in dict.fromkeys(STP_COLUMNS.values()) if c in wide.columns])
    wide.columns.name = None
    return wide.reset_index().astype(object).where(wide.reset_index().notna(), "")  # the bench has no no-probe row


def plot_published_stp() -> Figure:
    """Bar charts of the seed's Redis GET/SET and grep numbers: no uprobe, stepped STP, simulated STP (the
    patch's v1 store, which these figures were measured with: published.py)."""
    df = published_stp()
    order = ["no-uprobe", "single-stepped-stp", "emulated-stp"]
    fig = Figure(figsize=(11, 2.6), layout="constrained")  # under the bench chart on one 720 px slide
    axes = fig.subplots(1, 3)
    for ax, bench, better in zip(axes, ["redis-get", "redis-set", "grep"], ["higher", "higher", "lower"]):
        part = df[df["bench"] == bench].set_index("variant").reindex(order)
        ax.bar(["no\nuprobe", "stepped\nstp", "simulated\nstp (v1)"], part["value"],
               color=["grey", "tab:red", "tab:green"])
        ax.set_title(f"{bench} ({part['unit'].iloc[0]}, {better} is better)")
    fig.suptitle("The STP series (seed 001) on Kunpeng916: probe on every function entry's stp x29, x30")
    return fig


def plot_published_bench() -> Figure:
    """The seed's bench table: xol-stp vs simulated-stp, M/s per bench."""
    df = published_stp()
    bench = df[df["table"] == "kunpeng916-bench"].pivot(index="bench", columns="kernel", values="value")
    fig = Figure(figsize=(11.5, 2.9), layout="constrained")
    ax = fig.add_subplot()
    variants = ["xol-stp", "simulated-stp"]
    x = np.arange(len(bench))
    width = 0.5 / len(variants)
    for i, variant in enumerate(variants):
        ax.bar(x + (i - (len(variants) - 1) / 2) * width, bench[variant], width, label=variant)
    ax.set_xticks(x, bench.index)  # level: at 12 pt slanted names would overlap
    ax.set_xlabel("bench")
    ax.set_ylabel("M hits/s (higher is better)")
    ax.set_title("The STP series' bench (seed 001, Kunpeng916): only the *-push benches start with the STP")
    # the variants are two ways of handling the STP on the same kernel, not two kernels
    ax.legend(title="the probed STP is", fontsize=10, title_fontsize=10, loc="upper left",
              bbox_to_anchor=(1.01, 1), frameon=False)
    return fig


__all__ = ["brk_install", "decode_report", "decode_widget", "stp_events", "published_stp",
           "plot_published_stp", "plot_published_bench", "stp_once", "EXAMPLE_WORDS", "asm"]


def stp_gains() -> pd.DataFrame:
    """Seed 001's gains, computed from its own table beside the figure its text states; ``agreement`` says how
    the stated figure relates to the table's (published.seed_speedups: rounded, truncated or differs), with the
    table's figure to three decimals, so that a stated figure that matches once rounded is not read as exact."""
    d = seed_speedups()
    d = d[d["source"].str.startswith("001")].reset_index(drop=True)
    agreement = [f"{'differs from' if a == 'differs' else a + ' from'} {pct:.3f}%" if isinstance(a, str) else pd.NA
                 for a, pct in zip(d["agreement"].astype(object), d["speedup_pct"])]
    d = d[["bench", "unit", "before", "after", "speedup_pct", "stated_speedup"]]
    # the seeds state one decimal at most
    return d.assign(speedup_pct=d["speedup_pct"].round(1), agreement=pd.array(agreement, dtype="string"))


STP_SP = STACK_TOP - PAGE_SIZE  # a page-aligned sp one page below the stack's top
STACK_BOTTOM = STACK_TOP - STACK_SIZE  # the stack mapping's lowest address
FP, LR = 0x1111, 0x2222  # what the probed function's x29 and x30 hold: the pair the stp stores


def stp_once(offset: int = -16, stp: str = "simulate", store: str = "pin", sp: int = STP_SP,
             guard: str | None = None) -> dict:
    """Probe ``stp x29, x30, [sp, #offset]!`` and run it once from ``sp``: the signal (None if none), sp and pc
    after, whether fp and lr were stored at the new sp, and the pages the seed's v2 store pinned.

    ``store`` picks the seed's v2 (``"pin"``) or v1 (``"uaccess"``); ``guard`` maps a page with those
    permissions right below the stack (``"---p"``: a PROT_NONE guard page), for an ``sp`` at STACK_BOTTOM.
    The seed (v2) checks the alignment of the *new* sp and sends SIGSEGV, yet still moves sp and pc; v1 checks
    no alignment, and on a store that faults sends SIGSEGV and leaves sp and pc where they were. With
    ``stp="xol"`` the copy runs in Unicorn, which checks no sp alignment, and completes - as it would on
    hardware: the Arm ARM's STP checks the base sp before adding the offset, so only the next access
    through a misaligned sp would fault."""
    a = Assembler("arm64", 0x400000)
    a.function("f")
    asm.emit(a, asm.stp(29, 30, 31, offset), asm.RET)
    a.end_function()
    proc = Arm64Process(stp=stp, stp_store=store)
    proc.load(a.link())
    if guard:
        proc.map("guard", STACK_BOTTOM - PAGE_SIZE, PAGE_SIZE, guard)
    uprobe_register(proc, "f", CountingConsumer())
    regs = proc.regs()
    regs.sp = sp
    regs.set("x29", FP)
    regs.set("x30", LR)
    regs.flush()
    result = proc.run(0x400000, 0x400004, max_insns=10)
    pair = FP.to_bytes(8, "little") + LR.to_bytes(8, "little")
    return {"stp": stp, "store": store, "signal": result.signal, "reason": result.reason, "sp_before": hex(sp),
            "sp_after": hex(proc.sp), "pc_after": hex(proc.pc), "stored": proc.read(proc.sp, 16) == pair,
            "pages_pinned": proc.trace.counts.get("pages_pinned", 0)}

