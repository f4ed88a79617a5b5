"""Every benchmark number published in the seed documents, as one tidy table.

The numbers come from the five seed texts (copied into ``tests/data/seeds``, see its README.md), one row per
number, each row attributed to the seed file it was read from:

* ``000_721b81d609a5b978.txt`` - commit message of "uprobe: Add uretprobe syscall to speed up return
  probe" (merged in 6.11): uretprobe-nop/push/ret, "current" vs "with the fix", on an Intel i7-1165G7
  and an AMD Ryzen 7 5700U.
* ``002_092cc4b90f5a8685.txt`` - v1 of the same patch with its review thread: the same two machines
  with base and uprobe-* rows as well. The thread quotes the table three more times, unchanged; it is
  recorded once. Its figures come from a different run than 000's (e.g. Intel current uretprobe-nop
  1.487 here, 1.498 in 000), so both are kept.
* ``003_4679909cb9325581.txt`` - RFCv2 12/18 "uprobes/x86: Add support to optimize uprobes": the
  nop5 table, "current" vs "after the change". No CPU is named.
* ``004_cbdec0ce398daa32.txt`` - Ingo Molnar's reply to the RFCv2 cover letter: quotes the 003 table
  (and, before it, the cover letter's run, whose numbers equal 003's "after" rows) and sums it up as
  "+169% and a +91%", which fits uprobe-nop5 and uretprobe-nop5, the rows marked ``-->``.
* ``001_a91640efe4f91e99.txt`` - "arm64: uprobes: Simulate STP for pushing fp/lr into user stack" on a
  Kunpeng916: Redis GET/SET requests per second and grep seconds (no uprobe / single-stepped STP /
  emulated STP), and the uprobe-*/uretprobe-* bench as "xol-stp" vs "simulated-stp". The mail names
  the machine once, above the Redis figures; the bench rows are taken to be from the same machine.
  Its bench lines also print a per-cpu rate, equal to the rate because they ran on 1 cpu.

Columns of :func:`load_published`:

``source``      seed file name
``table``       short id of the table inside that source (``intel``, ``amd``, ``nop5-bench``,
                ``kunpeng916-bench``, ``redis``, ``grep``)
``cpu``         the machine as the seed names it (``unspecified (x86-64)`` when it names none)
``arch``        ``x86_64`` or ``arm64``
``variant``     the column heading as the seed names it (``current``, ``fix`` for "with the fix",
                ``after`` for "after the change", ``xol-stp``, ``simulated-stp``, ``no-uprobe``,
                ``single-stepped-stp``, ``emulated-stp``)
``kernel``      the kernel behaviour the variant stands for: ``6.10`` / ``6.11`` for the uretprobe
                syscall (000, 002); ``6.11`` / ``6.18`` for the nop5 optimisation (003, 004: before
                it nop5 was single-stepped, as in 6.11-6.15); ``xol-stp`` / ``simulated-stp`` /
                ``no-uprobe`` for the arm64 patch (001), which was never merged; its Redis/grep
                "emulated-stp" rows ``simulated-stp-uaccess``, the patch's v1 store (one copy_to_user),
                which they were measured with: they were first posted on 21 Aug 2024 in the v1 thread
                (<f95fc55b-2f17-7333-2eae-52caae46f8b2@huawei.com>, copied to tests/data/seed_provenance),
                before v2's pinned page existed
``bench``       kernel bench name without ``trig-`` (``base``, ``usermode-count``, ``uprobe-nop5``...),
                or ``redis-get``, ``redis-set``, ``grep``
``value``       float, in ``unit`` (``M/s``, ``RPS`` or ``s``; for ``s`` lower is better)
``pm``          the ``±`` figure where the seed gives one, else NaN
``stated_speedup``  the speedup the seed itself prints for this row (``31%``, ``+169%``), else NA
``note``        where the seed's own arithmetic or spelling disagrees with its table, else NA; in
                ``outside_seeds.csv``, ``left out: <why>`` for a row the evaluation does not use

``outside_seeds.csv`` holds, in the same columns, the bench tables posted outside the seeds (their texts
and how each was chosen: ``tests/data/outside_seeds/README.md``); its ``source`` is the excerpt's file name.
"""
from __future__ import annotations

import math
import re
from importlib import resources

import pandas as pd

COLUMNS = [
    "source", "table", "cpu", "arch", "variant", "kernel", "bench",
    "value", "unit", "pm", "stated_speedup", "note",
]
TEXT_COLUMNS = [c for c in COLUMNS if c not in ("value", "pm")]

# (before, after) variant pairs that a seed compares; the after row carries the stated speedup.
VARIANT_PAIRS = [
    ("current", "fix"),
    ("current", "after"),
    ("xol-stp", "simulated-stp"),
    ("single-stepped-stp", "emulated-stp"),
]
SPEEDUP_COLUMNS = [
    "source", "table", "cpu", "arch", "bench", "unit", "before_variant", "after_variant",
    "before_kernel", "after_kernel", "before", "after", "ratio", "speedup_pct",
    "stated_speedup", "stated_pct", "agreement", "discrepancy",
]
# Units where a smaller number is the better one.
LOWER_IS_BETTER_UNITS = {"s"}


SEED_TABLES = "published.csv"
# bench tables posted outside the seeds (tests/data/outside_seeds), for protocol rule 8 of uprobe_lab.model
OUTSIDE_SEEDS = "outside_seeds.csv"


# Seed tables whose before/after columns are no release's figures: an unmerged patch set measured on its own
# base, charted at the releases whose rules its columns stand for
UNRELEASED = {"003": ("RFCv2", "Feb 2025"), "004": ("RFCv2", "Feb 2025")}


def cpu_words(cpu: str) -> str:
    """A seed's CPU as a sentence says it ("unspecified (x86-64)" is the nop5 series' unnamed machine)."""
    return "an unnamed x86-64 machine" if cpu.startswith("unspecified") else (cpu or "unknown CPU")


def figure_words(source: str, kernels) -> str:
    """How a chart names a table's figures charted at ``kernels``: "published", or for an unmerged patch set's
    table what it measured and the rules it stands for ("RFCv2 before/after (Feb 2025), standing for 6.11 / 6.18
    rules"; at one kernel "RFCv2 (Feb 2025), standing for 6.18 rules")."""
    what = UNRELEASED.get(source_label(source))
    if what is None:
        return "published"
    kernels = list(dict.fromkeys(map(str, kernels)))
    columns = " before/after" if len(kernels) == 2 else ""
    return f"{what[0]}{columns} ({what[1]}), standing for {' / '.join(kernels)} rules"


def source_label(source: str) -> str:
    """How tables name their source: a seed by its number ("003"), a text outside the seeds by its file stem."""
    return source[:3] if source[:3].isdigit() else source.rsplit(".", 1)[0]


def load_published(name: str = SEED_TABLES) -> pd.DataFrame:
    """The published numbers, one row per number, in the order the seeds print them (``name``
    :data:`OUTSIDE_SEEDS`: the tables posted outside the seeds, in the same columns).

    Text columns are pandas ``string`` (so ``kernel`` stays ``"6.10"``, not 6.1); ``value`` and ``pm``
    are float64 with NaN where the seed gives no ``±``; empty ``stated_speedup``/``note`` are NA.
    """
    ref = resources.files("uprobe_lab") / "data" / name
    with ref.open("r", encoding="utf-8") as f:
        df = pd.read_csv(f, dtype=str, keep_default_na=False)
    if list(df.columns) != COLUMNS:
        raise ValueError(f"{name} columns are {list(df.columns)}, expected {COLUMNS}")
    for col in TEXT_COLUMNS:
        df[col] = df[col].astype("string")
    for col in ("stated_speedup", "note"):
        df[col] = df[col].mask(df[col] == "", pd.NA)
    df["value"] = df["value"].astype("float64")
    df["pm"] = df["pm"].replace("", "nan").astype("float64")
    return df


def _parse_pct(text) -> tuple[float, int] | None:
    """'31%' -> (31.0, 0); '+29.3%' -> (29.3, 1); NA -> None."""
    if text is None or text is pd.NA or (isinstance(text, float) and math.isnan(text)):
        return None
    m = re.fullmatch(r"\s*\+?(\d+(?:\.(\d+))?)\s*%\s*", str(text))
    if not m:
        raise ValueError(f"cannot read a percentage from {text!r}")
    return float(m.group(1)), len(m.group(2) or "")


def _agreement(computed: float, stated: float, decimals: int) -> str:
    """How a stated percentage relates to the one computed from the table.

    'rounded' - the computed value rounds (half up) to the stated one;
    'truncated' - it only matches when the digits after the stated precision are dropped;
    'differs' - neither.
    """
    scale = 10 ** decimals
    target = round(stated * scale)
    scaled = computed * scale
    if math.floor(scaled + 0.5) == target:
        return "rounded"
    if math.floor(scaled + 1e-9) == target:
        return "truncated"
    return "differs"


def seed_speedups(df: pd.DataFrame | None = None) -> pd.DataFrame:
    """Before -> after change for every (source, table, bench) a seed compares, next to what it states.

    ``ratio`` is after/before. ``speedup_pct`` is the gain in the better direction:
    ``100 * (after/before - 1)`` for rates (M/s, RPS) and ``100 * (before/after - 1)`` for times (s).
    ``stated_pct`` is the seed's own figure (NaN where it states none); ``agreement`` says whether the
    computed figure rounds to it (``rounded``), only matches when truncated (``truncated``), or
    neither (``differs``); ``discrepancy`` is True for the last two.
    """
    if df is None:
        df = load_published()
    out = []
    keys = ["source", "table", "bench"]
    for (source, table, bench), grp in df.groupby(keys, sort=False):
        by_variant = {v: row for v, row in zip(grp["variant"], grp.itertuples(index=False))}
        for before_v, after_v in VARIANT_PAIRS:
            if before_v not in by_variant or after_v not in by_variant:
                continue
            b, a = by_variant[before_v], by_variant[after_v]
            if b.unit != a.unit:
                raise ValueError(f"{source} {table} {bench}: unit {b.unit!r} vs {a.unit!r}")
            ratio = a.value / b.value
            gain = (1 / ratio if b.unit in LOWER_IS_BETTER_UNITS else ratio) - 1
            speedup_pct = 100 * gain
            parsed = _parse_pct(a.stated_speedup)
            if parsed is None:
                stated_pct, agreement = math.nan, pd.NA
            else:
                stated_pct, decimals = parsed
                agreement = _agreement(speedup_pct, stated_pct, decimals)
            out.append({
                "source": source, "table": table, "cpu": a.cpu, "arch": a.arch, "bench": bench,
                "unit": a.unit,
                "before_variant": before_v, "after_variant": after_v,
                "before_kernel": b.kernel, "after_kernel": a.kernel,
                "before": b.value, "after": a.value,
                "ratio": ratio, "speedup_pct": speedup_pct,
                "stated_speedup": a.stated_speedup, "stated_pct": stated_pct,
                "agreement": agreement,
                "discrepancy": parsed is not None and agreement != "rounded",
            })
    res = pd.DataFrame(out, columns=SPEEDUP_COLUMNS)
    for col in ("source", "table", "cpu", "arch", "bench", "unit", "before_variant",
                "after_variant", "before_kernel", "after_kernel", "stated_speedup", "agreement"):
        res[col] = res[col].astype("string")
    for col in ("before", "after", "ratio", "speedup_pct", "stated_pct"):
        res[col] = res[col].astype("float64")
    res["discrepancy"] = res["discrepancy"].astype(bool)
    return res


def format_bench_line(bench: str, value: float, pm: float | None = None, unit: str = "M/s") -> str:
    """One line as run_bench_uprobes.sh prints it: ``printf "%-15s: %s"`` around bench's
    ``"%8.3lf \u00b1 %5.3lfM/s"`` summary. Non-bench figures (RPS, seconds) keep the seed's digits."""
    if unit == "M/s" and pm is not None and not (isinstance(pm, float) and math.isnan(pm)):
        return "%-15s: %8.3f \u00b1 %5.3fM/s" % (bench, value, pm)
    if unit == "M/s":
        return "%-15s: %8.3fM/s" % (bench, value)
    return "%-15s: %8s %s" % (bench, repr(float(value)), unit)
