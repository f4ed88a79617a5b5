"""The tables posted outside the seeds (protocol rule 8): the CSV against the posted texts, and which rows
test a prediction, worked out from the kernel rules alone."""
import re
from pathlib import Path

import pytest

from uprobe_lab import model
from uprobe_lab.published import OUTSIDE_SEEDS, load_published

TEXTS = Path(__file__).parent / "data" / "outside_seeds"
LINE = re.compile(r"^\s*(?:-->)?\s*(?P<bench>[a-z0-9-]+)\s*:\s*(?P<value>\d+\.\d+) ± (?P<pm>\d+\.\d+)M/s$")
HEADERS = {"current:": "current", "after the change:": "after"}


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
        assert got == want and len(want) >= 16, source


def test_each_text_names_its_message():
    for path in TEXTS.glob("*.txt"):
        head = path.read_text(encoding="utf-8").splitlines()[:5]
        assert re.match(r"Message-ID: <[^>]+@[^>]+>$", head[0]), path.name
        assert any(line.startswith("Link: https://lore.kernel.org/") for line in head), path.name


def test_left_out_rows_are_the_bench_bug_and_never_evaluated(csv_rows):
    left = csv_rows[csv_rows["note"].fillna("").str.startswith("left out:")]
    assert sorted(zip(left["table"], left["variant"], left["bench"])) == [
        ("nop5-emulation", "after", "uretprobe-nop5"), ("nop5-emulation", "current", "uretprobe-nop5")]
    rows = model.outside_rows()
    assert not ((rows["table"] == "nop5-emulation") & (rows["bench"] == "uretprobe-nop5")).any()
    assert len(rows) == len(csv_rows) - 2 and (rows["duplicate_of"] == "").all()


def test_the_rows_that_test_a_prediction_are_the_nop5_rows_whose_path_changed():
    """By hand from the kernel rules (kernel.py): a nop5 is single-stepped on 6.11, emulated after its int3
    on 6.16, optimised into a call on 6.18; no other bench's instruction or return path differs between a
    table's two kernels (all are 6.11 or later: the uretprobe syscall on both sides). So the moved rows are
    uprobe-nop5 in every table and uretprobe-nop5 where it is kept."""
    rows = model.outside_rows()
    moved = sorted((table, bench) for table, grp in rows.groupby("table")
                   for bench, _, _ in model.profiles.moved_heldout(grp))
    assert moved == [("nop5-emulation", "uprobe-nop5"), ("nop5-rfcv3", "uprobe-nop5"), ("nop5-rfcv3", "uretprobe-nop5"),
                     ("nop5-v3", "uprobe-nop5"), ("nop5-v3", "uretprobe-nop5")]
