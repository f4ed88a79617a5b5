"""docs/cheatsheet.md's table is what the emulator counts, and its instruction claims are what the analyser says."""
import re
from pathlib import Path

import pytest

from uprobe_lab.bench import events_per_hit, refusal
from uprobe_lab import analyze

SHEET = (Path(__file__).resolve().parents[1] / "docs" / "cheatsheet.md").read_text()


def _table():
    lines = SHEET.split("## Kernel entries per hit, x86-64")[1].strip().splitlines()
    kernels = [c.strip() for c in lines[0].strip("|").split("|")][1:]
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        bench = re.search(r"\(`([a-z0-9-]+)`\)", cells[0]).group(1)
        yield from ((bench, k, cell) for k, cell in zip(kernels, cells[1:]))


def _words(bench, kernel):
    if refusal(bench, "x86_64", kernel):
        return "refused"
    ev = events_per_hit(bench, "x86_64", kernel)
    parts = [f"{ev[k]:g} {w}" for k, w in (("exceptions", "exc"), ("syscalls", "sys")) if ev.get(k)]
    return " + ".join(parts)


@pytest.mark.parametrize("bench, kernel, cell", list(_table()))
def test_the_sheet_s_counts_are_the_emulator_s(bench, kernel, cell):
    assert cell == _words(bench, kernel)


@pytest.mark.parametrize("insn, action", [("55", "emulate"), ("f30f1efa", "xol"), ("4889e5", "xol")])
def test_the_entry_instructions_it_names_run_as_it_says(insn, action):
    assert analyze(insn, "x86_64", "6.18")["action"] == action
