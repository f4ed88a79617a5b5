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


def test_the_per_hit_range_is_the_fitted_x86_profiles():
    """The checklist's "X to Y us per hit (one exception ...)": the cheapest and dearest uprobe-nop hit (one int3,
    emulated) that chapter 05's fitted x86 profiles price, to 0.05 us; a stepped hit (uprobe-ret) "two to three
    times that" on each."""
    from uprobe_lab.model import PROFILES, get_profile, profile_names
    text = " ".join(SHEET.split())
    low, high = map(float, re.search(r"([\d.]+) to ([\d.]+) us per hit \(one exception", text).groups())
    x86 = [get_profile(n) for n in profile_names() if PROFILES[n][1] == "x86_64"]
    nop = [p.hit_interval(events_per_hit("uprobe-nop", "x86_64", "6.18"))[0] / 1000 for p in x86]
    ret = [p.hit_interval(events_per_hit("uprobe-ret", "x86_64", "6.18"))[0] / 1000 for p in x86]
    assert abs(min(nop) - low) <= 0.05 and abs(max(nop) - high) <= 0.05
    assert "stepped instruction costs two to three times that" in text
    assert all(2 <= round(r / n) <= 3 for r, n in zip(ret, nop))


def test_the_shared_writes_it_names_are_the_models_per_release():
    """"up to 6.11 every hit wrote ... the tree lock, mmap_lock, the one line of the probe's reference and its
    consumers' rwsem" (a lock and an unlock each: 2 + 2 + 4) "the trace event's hit count" (tu->nhit++: 1), 9 in
    all; "on 6.12 and 6.13 it still writes mmap_lock" (2; nhit is per-CPU from 6.12); "From 6.14 ... nothing"."""
    from uprobe_lab.views.many_cpus import shared_writes
    text = " ".join(SHEET.split())  # the sentences as read, across the page's line breaks
    last_all = re.search(r"up to (\d\.\d+) every hit wrote lines all CPUs share", text).group(1)
    still = re.search(r"on (\d\.\d+) and (\d\.\d+) it still writes mmap_lock", text).groups()
    free = re.search(r"From (\d\.\d+) a hit on an emulated instruction shares nothing", text).group(1)
    writes = shared_writes("uprobe-nop", [last_all, *still, free])
    assert writes[last_all] == 9 and all(writes[r] == 2 for r in still) and writes[free] == 0


def test_an_exception_costs_what_the_fitted_x86_profiles_say_in_syscalls():
    """"*exc* ... as dear as two and a half to four and a half syscalls": the exception/syscall price ratio of each
    fitted x86 profile, rounded to the half, spans exactly that range."""
    from uprobe_lab.model import PROFILES, get_profile, profile_names
    words = {"two and a half": 2.5, "three": 3.0, "three and a half": 3.5, "four": 4.0, "four and a half": 4.5,
             "five": 5.0}
    text = " ".join(SHEET.split())
    low, high = re.search(r"as dear as ([a-z ]+?) to ([a-z ]+?) syscalls", text).groups()
    ratios = [p.prices["exception"] / p.prices["syscall"]
              for p in (get_profile(n) for n in profile_names() if PROFILES[n][1] == "x86_64")]
    assert round(min(ratios) * 2) / 2 == words[low] and round(max(ratios) * 2) / 2 == words[high]
