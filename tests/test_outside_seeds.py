"""The tables posted outside the seeds (protocol rule 8): the CSV against the posted texts, and which rows
test a prediction, worked out from the kernel rules alone."""
import re
from pathlib import Path

import pytest

from uprobe_lab import model
from uprobe_lab.published import OUTSIDE_SEEDS, load_published

TEXTS = Path(__file__).parent / "data" / "outside_seeds"
# run_bench_uprobes.sh lines, with or without the "( 1 cpus)" and per-cpu columns bench prints on arm64
LINE = re.compile(r"^\s*(?:-->)?\s*(?P<bench>[a-z0-9-]+)\s*(?:\(\s*\d+ cpus\))?:\s*(?P<value>\d+\.\d+) ± "
                  r"(?P<pm>\d+\.\d+)M/s(?:\s+\(.*\))?$")
# each posted column heading -> the CSV's variant (the one before column of a table is "current")
HEADERS = {"current:": "current", "after the change:": "after",
           "xol (1 cpus)": "current", "emulation (1 cpus)": "after",
           "next-20240909(xol stp + xol nop)": "current",
           "next-20240909(sim stp + sim nop)": "sim stp + sim nop, next-20240909",
           "next-20241104 (xol stp + sim nop)": "xol stp + sim nop, next-20241104",
           "next-20241104 (sim stp + sim nop)": "sim stp + sim nop, next-20241104",
           "next-20241104 + xol stp": "xol stp + sim nop, next-20241104",
           "next-20221104 + initial patch": "initial patch, next-20241104",
           "next-20241104 + this patch": "sim stp + sim nop, next-20241104"}


def posted_rows(path: Path):
    variant = None
    for line in path.read_text(encoding="utf-8").splitlines():
        s = line.rstrip()
        if s in HEADERS:
            variant = HEADERS[s]
        elif m := LINE.match(s):
            yield variant, m["bench"], m["value"], m["pm"]


@pytest.fixture(scope="module")
def csv_rows():
    return load_published(OUTSIDE_SEEDS)


def test_every_posted_line_is_a_csv_row_and_nothing_else(csv_rows):
    for source, grp in csv_rows.groupby("source"):
        path = TEXTS / source
        assert path.is_file() and source in (TEXTS / "README.md").read_text(encoding="utf-8")
        want = list(posted_rows(path))
        got = [(r.variant, r.bench, f"{r.value:.3f}", f"{r.pm:.3f}") for r in grp.itertuples()]
        assert got == want and len(want) >= 12, source


def test_each_text_names_its_message():
    for path in TEXTS.glob("*.txt"):
        head = path.read_text(encoding="utf-8").splitlines()[:5]
        assert re.match(r"Message-ID: <[^>]+@[^>]+>$", head[0]), path.name
        assert any(line.startswith("Link: https://lore.kernel.org/") for line in head), path.name


def test_left_out_rows_are_the_bench_bug_and_never_evaluated(csv_rows):
    left = csv_rows[csv_rows["note"].fillna("").str.startswith("left out:")]
    assert sorted(zip(left["table"], left["bench"], left["note"].str[:30])) == [
        ("nop5-emulation", "uretprobe-nop5", "left out: a uprobe, not a uret")] * 2 + [
        ("stp-rerun", "uprobe-push", "left out: the 5 Nov column pos")] * 2 + [
        ("stp-rerun", "uretprobe-push", "left out: the 5 Nov column pos")] * 2
    rows = model.outside_rows()
    assert not ((rows["table"] == "nop5-emulation") & (rows["bench"] == "uretprobe-nop5")).any()
    assert len(rows) == len(csv_rows) - 6 and (rows["duplicate_of"] == "").all()
    # what the 8 Nov columns repeat is really there, once
    kept = rows.set_index(["variant", "bench"])["value"]
    assert kept[("xol stp + sim nop, next-20241104", "uprobe-push")] == 0.415
    assert kept[("sim stp + sim nop, next-20241104", "uretprobe-push")] == 0.702


def moved(arch: str) -> list[tuple]:
    rows = model.outside_rows()
    rows = rows[rows["arch"] == arch]
    return sorted((table, bench, kernel) for table, grp in rows.groupby("table")
                  for bench, _, kernel in model.profiles.moved_heldout(grp))


def test_the_x86_rows_that_test_a_prediction_are_the_nop5_rows_whose_path_changed():
    """By hand from the kernel rules (kernel.py): a nop5 is single-stepped on 6.11, emulated after its int3
    on 6.16, optimised into a call on 6.18; no other bench's instruction or return path differs between a
    table's two kernels (all are 6.11 or later: the uretprobe syscall on both sides). So the moved rows are
    uprobe-nop5 in every table and uretprobe-nop5 where it is kept."""
    assert moved("x86_64") == [("nop5-emulation", "uprobe-nop5", "6.16"), ("nop5-rfcv3", "uprobe-nop5", "6.18"),
                               ("nop5-rfcv3", "uretprobe-nop5", "6.18"), ("nop5-v3", "uprobe-nop5", "6.18"),
                               ("nop5-v3", "uretprobe-nop5", "6.18")]


def test_the_arm64_rows_that_test_a_prediction_are_those_whose_nop_or_stp_changed():
    """By hand: each table's before column steps both nop and stp (6.11, before ac4ad5c09b34); ret is
    simulated everywhere. A column that simulates the nop moves the -nop rows; one that simulates the stp
    (v1's copy_to_user or v2's pinned page) moves the -push rows; the -ret rows never move. The 8 Nov
    column has -push rows only."""
    nop = ["uprobe-nop", "uretprobe-nop"]
    push = ["uprobe-push", "uretprobe-push"]
    want = ([("nop-push-v1", b, "simulated-stp-uaccess") for b in nop + push]
            + [("stp-rerun", b, "simulated-stp") for b in nop + push] * 2
            + [("stp-rerun", b, "xol-stp") for b in nop]
            + [("stp-rerun", b, "simulated-stp-uaccess") for b in push])
    assert moved("arm64") == sorted(want)


def test_the_figures_the_model_doc_states_for_rule_8_are_what_the_evaluation_gives():
    """The module doc's rule-8 line, in order: all moved rows (count, median error, coverage, median and
    widest half-width), then the x86 ones (count, median, coverage, widest), then the arm64 ones."""
    line = model.__doc__.split("On the tables outside the seeds (rule 8), v5 as it stood:")[1].split("\n\n")[0]
    stated = [float(x) for x in re.findall(r"\d+(?:\.\d+)?", line.replace("x86", "").replace("arm64", ""))]
    out = model.outside_seeds_alone()
    got = []
    for part, full in ((out, True), (out[out["arch"] == "x86_64"], False), (out[out["arch"] == "arm64"], False)):
        h = model.headline(part)
        got += [h["moved_rows"], round(h["moved_median_abs_err_pct"], 1), round(100 * h["moved_coverage"])]
        got += [round(h["moved_median_half_width_pct"], 1)] if full else []
        got += [round(h["moved_max_half_width_pct"], 1)]
    assert stated == got
