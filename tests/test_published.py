"""The published numbers: loader types, speedup arithmetic, bench formatting, and the CSV checked
line by line against the seed texts (a copy of the five lives in tests/data/seeds)."""
from __future__ import annotations

import math
import re
from importlib import resources
from pathlib import Path

import pandas as pd
import pytest
from bench_text import BENCH_LINE, QUOTE

from uprobe_lab.published import (
    COLUMNS,
    format_bench_line,
    load_published,
    seed_speedups,
)

SEEDS = Path(__file__).resolve().parent / "data" / "seeds"

S000 = "000_721b81d609a5b978.txt"
S001 = "001_a91640efe4f91e99.txt"
S002 = "002_092cc4b90f5a8685.txt"
S003 = "003_4679909cb9325581.txt"
S004 = "004_cbdec0ce398daa32.txt"

EXPECTED_COUNTS = {
    (S000, "intel"): 6,
    (S000, "amd"): 6,
    (S001, "kunpeng916-bench"): 12,
    (S001, "redis"): 6,
    (S001, "grep"): 3,
    (S002, "intel"): 14,
    (S002, "amd"): 14,
    (S003, "nop5-bench"): 20,
    (S004, "nop5-bench"): 20,
}


@pytest.fixture(scope="module")
def df() -> pd.DataFrame:
    return load_published()


@pytest.fixture(scope="module")
def raw() -> pd.DataFrame:
    """The CSV exactly as written, every cell a string."""
    ref = resources.files("uprobe_lab") / "data" / "published.csv"
    with ref.open("r", encoding="utf-8") as f:
        return pd.read_csv(f, dtype=str, keep_default_na=False)


def one(df: pd.DataFrame, **where) -> pd.Series:
    sel = df
    for k, v in where.items():
        sel = sel[sel[k] == v]
    assert len(sel) == 1, f"{where}: {len(sel)} rows"
    return sel.iloc[0]


# --- loader --------------------------------------------------------------------------------------

def test_columns_and_types(df):
    assert list(df.columns) == COLUMNS
    for col in COLUMNS:
        if col in ("value", "pm"):
            assert df[col].dtype == "float64", col
        else:
            assert isinstance(df[col].dtype, pd.StringDtype), col
    # kernel names must not be read as numbers ("6.10" is not 6.1)
    assert set(df["kernel"]) == {"6.10", "6.11", "6.18", "xol-stp", "simulated-stp", "simulated-stp-uaccess", "no-uprobe"}
    assert set(df["arch"]) == {"x86_64", "arm64"}
    assert set(df["unit"]) == {"M/s", "RPS", "s"}
    assert not df[["source", "table", "cpu", "arch", "variant", "kernel", "bench", "unit"]].isna().any().any()
    assert df["value"].notna().all() and (df["value"] > 0).all()


def test_row_counts_per_source_and_table(df):
    counts = df.groupby(["source", "table"]).size().to_dict()
    assert counts == EXPECTED_COUNTS
    assert len(df) == sum(EXPECTED_COUNTS.values()) == 101


def test_one_row_per_number(df):
    key = ["source", "table", "variant", "bench"]
    assert not df.duplicated(key).any()


def test_pm_present_exactly_for_bench_rows(df):
    mps = df["unit"] == "M/s"
    assert df.loc[mps, "pm"].notna().all()
    assert df.loc[~mps, "pm"].isna().all()


def test_variant_kernel_mapping(df):
    pairs = set(zip(df["source"].str[:3], df["variant"], df["kernel"]))
    assert pairs == {
        ("000", "current", "6.10"), ("000", "fix", "6.11"),
        ("002", "current", "6.10"), ("002", "fix", "6.11"),
        ("003", "current", "6.11"), ("003", "after", "6.18"),
        ("004", "current", "6.11"), ("004", "after", "6.18"),
        ("001", "xol-stp", "xol-stp"), ("001", "simulated-stp", "simulated-stp"),
        ("001", "no-uprobe", "no-uprobe"), ("001", "single-stepped-stp", "xol-stp"),
        ("001", "emulated-stp", "simulated-stp-uaccess"),
    }


def test_known_values(df):
    r = one(df, source=S002, table="intel", variant="current", bench="uprobe-nop")
    assert (r["value"], r["pm"], r["cpu"], r["arch"]) == (3.016, 0.0, "Intel i7-1165G7", "x86_64")
    r = one(df, source=S002, table="amd", variant="fix", bench="base")
    assert (r["value"], r["pm"], r["cpu"]) == (5.119, 0.002, "AMD Ryzen 7 5700U")
    r = one(df, source=S000, table="intel", variant="fix", bench="uretprobe-push")
    assert (r["value"], r["pm"], r["stated_speedup"]) == (1.910, 0.0, "31%")
    r = one(df, source=S003, table="nop5-bench", variant="current", bench="usermode-count")
    assert (r["value"], r["pm"], r["cpu"]) == (818.836, 2.842, "unspecified (x86-64)")
    r = one(df, source=S004, table="nop5-bench", variant="after", bench="uprobe-nop5")
    assert (r["value"], r["stated_speedup"]) == (4.016, "+169%")
    r = one(df, source=S001, table="kunpeng916-bench", variant="simulated-stp", bench="uprobe-push")
    assert (r["value"], r["pm"], r["arch"], r["cpu"]) == (1.128, 0.002, "arm64", "Kunpeng916")
    r = one(df, source=S001, table="redis", variant="single-stepped-stp", bench="redis-get")
    assert (r["value"], r["unit"]) == (46750.82, "RPS") and math.isnan(r["pm"])
    r = one(df, source=S001, table="grep", variant="single-stepped-stp", bench="grep")
    assert (r["value"], r["unit"]) == (15.314, "s")


def test_003_and_004_share_the_table(df):
    cols = ["variant", "bench", "value", "pm"]
    a = df[df["source"] == S003][cols].reset_index(drop=True)
    b = df[df["source"] == S004][cols].reset_index(drop=True)
    pd.testing.assert_frame_equal(a, b)


def test_csv_is_package_data():
    assert (resources.files("uprobe_lab") / "data" / "published.csv").is_file()
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    if pyproject.is_file():
        text = pyproject.read_text()
        assert 'uprobe_lab = ["data/*.csv"' in text and '"data/*.json"' in text  # native_example_6.18.json too


# --- speedups ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sp(df) -> pd.DataFrame:
    return seed_speedups(df)


def sp_row(sp, source, table, bench):
    return one(sp, source=source, table=table, bench=bench)


def test_speedup_values_by_hand(sp):
    r = sp_row(sp, S000, "intel", "uretprobe-push")
    assert r["ratio"] == pytest.approx(1.910 / 1.448)
    assert r["speedup_pct"] == pytest.approx(31.906, abs=1e-3)
    assert (r["before_kernel"], r["after_kernel"]) == ("6.10", "6.11")
    r = sp_row(sp, S002, "amd", "uretprobe-ret")
    assert r["ratio"] == pytest.approx(0.581 / 0.539)
    assert r["speedup_pct"] == pytest.approx(7.792, abs=1e-3)
    r = sp_row(sp, S001, "kunpeng916-bench", "uprobe-push")
    assert r["ratio"] == pytest.approx(1.128 / 0.868)
    assert round(r["speedup_pct"], 1) == 30.0
    r = sp_row(sp, S003, "nop5-bench", "uprobe-nop5")
    assert r["ratio"] == pytest.approx(4.016 / 1.492)
    assert (r["before_variant"], r["after_variant"]) == ("current", "after")
    # grep is a time: ratio stays after/before, the speedup is before/after - 1
    r = sp_row(sp, S001, "grep", "grep")
    assert r["ratio"] == pytest.approx(2.216 / 15.314)
    assert r["speedup_pct"] == pytest.approx(100 * (15.314 / 2.216 - 1))
    assert (r["before_variant"], r["after_variant"]) == ("single-stepped-stp", "emulated-stp")


def test_speedup_rows_cover_every_compared_pair(sp):
    assert len(sp) == 49  # 6 + 6 (000), 6 + 2 + 1 (001), 7 + 7 (002), 10 (003), 10 (004)
    assert sp["ratio"].notna().all()


def test_stated_speedups_and_discrepancies(sp):
    stated = sp[sp["stated_speedup"].notna()]
    got = {(r.source, r.table, r.bench): (r.stated_speedup, r.agreement) for r in stated.itertuples()}
    assert got == {
        (S000, "intel", "uretprobe-nop"): ("31%", "rounded"),
        (S000, "intel", "uretprobe-push"): ("31%", "truncated"),  # +31.9%
        (S000, "intel", "uretprobe-ret"): ("14%", "rounded"),
        (S000, "amd", "uretprobe-nop"): ("10%", "truncated"),  # +10.5%
        (S000, "amd", "uretprobe-push"): ("10%", "rounded"),  # +9.9%
        (S000, "amd", "uretprobe-ret"): ("7%", "rounded"),
        (S002, "intel", "uretprobe-nop"): ("32%", "rounded"),
        (S002, "intel", "uretprobe-push"): ("30%", "truncated"),  # +30.8%
        (S002, "intel", "uretprobe-ret"): ("14%", "rounded"),
        (S002, "amd", "uretprobe-nop"): ("11%", "rounded"),
        (S002, "amd", "uretprobe-push"): ("10%", "rounded"),
        (S002, "amd", "uretprobe-ret"): ("7%", "truncated"),  # +7.8%
        (S001, "kunpeng916-bench", "uprobe-push"): ("29.3%", "differs"),  # +30.0%
        (S001, "kunpeng916-bench", "uretprobe-push"): ("15.9%", "rounded"),
        (S004, "nop5-bench", "uprobe-nop5"): ("+169%", "rounded"),  # +169.2%
        (S004, "nop5-bench", "uretprobe-nop5"): ("+91%", "truncated"),  # +91.5%
    }
    assert stated["stated_pct"].tolist() == [31, 31, 14, 10, 10, 7, 29.3, 15.9, 32, 30, 14, 11, 10, 7, 169, 91]
    flagged = set(map(tuple, sp.loc[sp["discrepancy"], ["source", "bench"]].values.tolist()))
    assert flagged == {
        (S000, "uretprobe-push"), (S000, "uretprobe-nop"), (S002, "uretprobe-push"),
        (S002, "uretprobe-ret"), (S001, "uprobe-push"), (S004, "uretprobe-nop5"),
    }


def test_every_discrepancy_has_a_note(df, sp):
    for r in sp[sp["discrepancy"]].itertuples():
        row = one(df, source=r.source, table=r.table, variant=r.after_variant, bench=r.bench)
        assert pd.notna(row["note"]) and r.stated_speedup.lstrip("+") in row["note"]


# --- formatting ----------------------------------------------------------------------------------

def lines(rows: pd.DataFrame) -> list[str]:
    return [format_bench_line(r.bench, r.value, r.pm, r.unit) for r in rows.itertuples(index=False)]


def test_format_known_row(df):
    row = df[(df["source"] == S002) & (df["table"] == "intel") & (df["variant"] == "current")
             & (df["bench"] == "uprobe-nop")]
    assert lines(row) == ["uprobe-nop     :    3.016 ± 0.000M/s"]


def test_format_matches_seed_layout(df):
    sel = df[(df["source"] == S002) & (df["table"] == "amd") & (df["variant"] == "current")]
    assert lines(sel) == [
        "base           :    5.105 ± 0.003M/s",
        "uprobe-nop     :    1.552 ± 0.002M/s",
        "uprobe-push    :    1.408 ± 0.003M/s",
        "uprobe-ret     :    0.827 ± 0.001M/s",
        "uretprobe-nop  :    0.779 ± 0.001M/s",
        "uretprobe-push :    0.750 ± 0.001M/s",
        "uretprobe-ret  :    0.539 ± 0.001M/s",
    ]
    sel = df[(df["source"] == S003) & (df["variant"] == "current") & df["bench"].isin(["usermode-count", "uretprobe-nop5"])]
    assert lines(sel) == [
        "usermode-count :  818.836 ± 2.842M/s",
        "uretprobe-nop5 :    1.052 ± 0.000M/s",
    ]


def test_format_other_units(df):
    sel = df[(df["source"] == S001) & (df["table"] == "grep")]
    assert lines(sel) == ["grep           :    2.165 s", "grep           :   15.314 s", "grep           :    2.216 s"]
    assert format_bench_line("redis-get", 49149.71, float("nan"), "RPS") == "redis-get      : 49149.71 RPS"


# --- against the seed texts ----------------------------------------------------------------------

VARIANT_HEADERS = {
    "current:": "current", "with the fix:": "fix", "after the change:": "after",
    "xol-stp": "xol-stp", "simulated-stp": "simulated-stp",
}
OTHER_SECTIONS = {"Redis GET": "redis-get", "Redis SET": "redis-set", "Grep": "grep"}
OTHER_LINE = re.compile(r"^(?P<label>[A-Za-z -]+): (?P<value>\d+\.\d+) ?(?P<unit>RPS|s)$")


def other_variant(label: str) -> str:
    label = label.lower()
    if label == "no uprobe":
        return "no-uprobe"
    if label == "single-stepped stp":
        return "single-stepped-stp"
    if label in ("emulated stp", "emualted stp"):  # the seed misspells it once
        return "emulated-stp"
    raise AssertionError(f"unknown label {label!r}")


def parse_seed(text: str):
    """Walk a seed, tracking the CPU and column headings; yield every number line it holds."""
    table = variant = section = None
    for lineno, line in enumerate(text.splitlines(), 1):
        s = QUOTE.sub("", line).rstrip()
        if s.startswith("On Intel"):
            table, variant = "intel", None
        elif s.startswith("On Amd"):
            table, variant = "amd", None
        elif s in VARIANT_HEADERS:
            variant = VARIANT_HEADERS[s]
        elif s.split(" (")[0] in OTHER_SECTIONS:  # "Redis GET (higher is better)"
            section = OTHER_SECTIONS[s.split(" (")[0]]
        elif m := BENCH_LINE.match(s):
            yield dict(lineno=lineno, kind="bench", table=table, variant=variant, **m.groupdict())
        elif m := OTHER_LINE.match(s):
            yield dict(lineno=lineno, kind="other", table=section.split("-")[0], variant=other_variant(m["label"]),
                       bench=section, value=m["value"], pm="", speedup=None, unit=m["unit"])


def seed_text(name: str) -> str:
    return (SEEDS / name).read_text(encoding="utf-8")


def test_seed_readme_lists_every_source(df):
    readme = (SEEDS / "README.md").read_text(encoding="utf-8")
    for source in df["source"].unique():
        assert (SEEDS / source).is_file()
        assert source in readme


def test_every_value_string_is_in_its_source(raw):
    for r in raw.itertuples():
        text = seed_text(r.source)
        assert r.value in text, (r.source, r.bench, r.value)
        if r.pm:
            assert f"{r.value} ± {r.pm}M/s" in text, (r.source, r.bench, r.value, r.pm)
        if r.stated_speedup:
            assert r.stated_speedup in text, (r.source, r.bench, r.stated_speedup)


def test_parser_misses_no_number_line():
    for source in (S000, S001, S002, S003, S004):
        text = seed_text(source)
        parsed = {p["lineno"] for p in parse_seed(text)}
        for lineno, line in enumerate(text.splitlines(), 1):
            s = QUOTE.sub("", line).rstrip()
            if "±" in s or s.endswith("RPS") or re.search(r": \d+\.\d+s$", s):
                assert lineno in parsed, (source, lineno, line)


@pytest.mark.parametrize("source", [S000, S001, S002, S003, S004])
def test_csv_equals_the_seed_tables(raw, source):
    """Every number line of the seed is a CSV row of that source (quoted copies collapse into one),
    and every CSV row is such a line, under the same CPU heading and column heading."""
    rows = raw[raw["source"] == source]
    parsed = list(parse_seed(seed_text(source)))
    assert parsed, source

    def csv_key(r):
        table = r.table if r.table in ("intel", "amd", "redis", "grep") else None
        return (table, r.variant, r.bench, r.value, r.pm)

    csv_keys = {csv_key(r) for r in rows.itertuples()}
    assert len(csv_keys) == len(rows)
    seed_keys = {(p["table"], p["variant"], p["bench"], p["value"], p["pm"]) for p in parsed if p["variant"]}
    assert seed_keys == csv_keys

    # lines under no column heading (004 quotes the cover letter's run before the 003 table)
    loose = {(p["bench"], p["value"], p["pm"]) for p in parsed if not p["variant"]}
    assert loose <= {(r.bench, r.value, r.pm) for r in rows.itertuples()}
    if source == S004:
        after = rows[rows["variant"] == "after"]
        assert loose == {(r.bench, r.value, r.pm) for r in after.itertuples()}
    else:
        assert not loose

    # units
    for p in parsed:
        if p["kind"] == "other":
            r = rows[(rows["bench"] == p["bench"]) & (rows["variant"] == p["variant"])]
            assert r["unit"].tolist() == [p["unit"]]


@pytest.mark.parametrize("source", [S000, S002])
def test_speedups_printed_next_to_rows(raw, source):
    rows = raw[raw["source"] == source]
    seen = {}
    for p in parse_seed(seed_text(source)):
        if p["speedup"]:
            seen[(p["table"], p["variant"], p["bench"])] = p["speedup"]
    assert seen
    got = {(r.table, r.variant, r.bench): r.stated_speedup for r in rows.itertuples() if r.stated_speedup}
    assert got == seen


def test_prose_speedups():
    t001 = seed_text(S001)
    assert "uprobe-push throughput by 29.3% (from 0.868M/s/cpu to 1.1238M/s/cpu)" in " ".join(t001.split())
    assert "uretprobe-push by 15.9% (from 0.616M/s/cpu to 0.714M/s/cpu)" in " ".join(t001.split())
    assert "That's a +169% and a +91% speedup" in seed_text(S004)
    # no speedup is printed in 003
    assert "%" not in seed_text(S003).split("Signed-off-by")[0]


def test_seed_001s_application_figures_were_first_posted_with_v1s_store(df):
    """Seed 001's Redis/grep figures are all in the 21 Aug 2024 message of the v1 thread, which quotes v1's
    one copy_to_user store; so their "emulated" rows stand for that store (kernel simulated-stp-uaccess)."""
    text = (Path(__file__).parent / "data" / "seed_provenance" / "001_redis_grep_first_posted_2024-08-21.txt"
            ).read_text(encoding="utf-8")
    apps = df[df["source"].str.startswith("001") & (df["unit"] != "M/s")]
    assert len(apps) == 9
    for r in apps.itertuples():
        assert f"{r.value:.2f} RPS" in text if r.unit == "RPS" else f"{r.value:.3f}s" in text, (r.bench, r.value)
    assert "copy_to_user((void __user *)new_sp, buf, sizeof(buf))" in text
    assert set(apps[apps["variant"] == "emulated-stp"]["kernel"]) == {"simulated-stp-uaccess"}


def test_source_label_names_seeds_by_number_and_other_texts_by_stem():
    from uprobe_lab.published import source_label

    assert source_label("003_4679909cb9325581.txt") == "003"
    assert source_label("x86_nop5_v3_2025-06.txt") == "x86_nop5_v3_2025-06"
