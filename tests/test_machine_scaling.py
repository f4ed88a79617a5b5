"""The machine's own scaling beside a -p N bench: the ratio arithmetic, worked out by hand, and how it is printed."""
import json

import pytest

from uprobe_lab import cli
from uprobe_lab.bench import format_table
from uprobe_lab.native import bench as native_bench
from uprobe_lab.machine_scaling import (calls_lasting, compare_with_baselines, interval_seconds, scaling,
                                               scaling_note)
from uprobe_lab.native.many_cpus import runs_planned


def _row(bench, cpus, per_cpu, one_cpu=None, **more):
    row = {"bench": bench, "arch": "x86_64", "mode": "native", "kernel": "6.18.44", "cpus": cpus, "iterations": 200_000,
           "repeats": 5, "hits": cpus * 200_000 * 5, "mops": cpus * per_cpu, "mops_per_cpu": per_cpu, "stddev": 0.01,
           **more}
    if one_cpu is not None:
        row["one_cpu"] = {"cpu": 0, "mops_per_cpu": one_cpu, "stddev": 0.01}
    return row


def _two_cpus():
    # uprobe-nop: 2.0 M/s alone, 1.5 per CPU at 2: keeps 1.5 / 2.0 = 0.75 of its rate
    # the no-probe loop: 800 -> 720 keeps 0.9; the syscall loop: 10 -> 8 keeps 0.8
    return [_row("uprobe-nop", 2, 1.5, 2.0), _row("usermode-count", 2, 720.0, 800.0),
            _row("syscall-count", 2, 8.0, 10.0)]


def test_scaling_is_the_per_cpu_rate_at_n_over_the_rate_on_one_cpu():
    assert scaling(1.5, 2.0) == 0.75
    assert scaling(3.0, 3.0) == 1.0


def test_at_two_cpus_a_bench_s_scaling_is_set_against_each_baseline_s():
    nop, loop, syscall = compare_with_baselines(_two_cpus())
    assert (nop["scaling"], loop["scaling"], syscall["scaling"]) == pytest.approx((0.75, 0.9, 0.8))
    # 0.75 / 0.9 = 0.8333: the probe keeps 5/6 of what the machine keeps without one; 0.75 / 0.8 = 0.9375
    assert nop["baseline_ratios"] == pytest.approx({"usermode-count": 0.8333333, "syscall-count": 0.9375})
    assert nop["ratio_of"] == "scaling"
    assert "baseline_ratios" not in loop and "baseline_ratios" not in syscall


def test_on_one_cpu_the_rates_themselves_are_compared():
    rows = compare_with_baselines([_row("uprobe-nop", 1, 2.0), _row("usermode-count", 1, 800.0),
                                   _row("syscall-count", 1, 10.0)])
    # 2.0 / 800 = 0.0025 of the no-probe loop's rate; 2.0 / 10 = 0.2 of the syscall loop's
    assert rows[0]["baseline_ratios"] == pytest.approx({"usermode-count": 0.0025, "syscall-count": 0.2})
    assert rows[0]["ratio_of"] == "rate" and "scaling" not in rows[0]


def test_without_one_cpu_rows_a_many_cpu_run_compares_nothing_and_a_refused_row_is_left_alone():
    refused = {"bench": "uprobe-nop10", "arch": "x86_64", "mode": "native", "kernel": "6.18.44", "refused": "ENOTSUPP"}
    rows = compare_with_baselines([_row("uprobe-nop", 2, 1.5), _row("usermode-count", 2, 720.0), dict(refused)])
    assert all("baseline_ratios" not in r and "scaling" not in r for r in rows)
    assert rows[2] == refused


def test_a_bench_whose_baselines_lack_one_cpu_rows_is_compared_with_those_that_have_them():
    rows = _two_cpus()
    del rows[2]["one_cpu"]
    assert compare_with_baselines(rows)[0]["baseline_ratios"] == pytest.approx({"usermode-count": 0.8333333})


def test_the_line_under_each_row_says_its_scaling_and_the_baselines():
    nop, loop, syscall = compare_with_baselines(_two_cpus())
    assert scaling_note(nop) == ("  per CPU 0.75x its rate on CPU 0 alone (2.000M/s); 0.83x the no-probe loop's "
                                 "scaling and 0.94x the syscall loop's scaling")
    assert scaling_note(loop) == "  the no-probe loop, a baseline: per CPU 0.90x its rate on CPU 0 alone (800.000M/s)"
    assert scaling_note(syscall).startswith("  the syscall loop, a baseline: per CPU 0.80x")
    one = compare_with_baselines([_row("uprobe-nop", 1, 2.0), _row("usermode-count", 1, 800.0),
                                  _row("syscall-count", 1, 10.0)])
    assert scaling_note(one[0]) == ("  per CPU 0.0025x the no-probe loop's rate and 0.2x the syscall loop's rate (one "
                                    "CPU has no scaling to compare: -p 2 or more measures it)")
    assert scaling_note(one[1]) == "  the no-probe loop, a baseline"
    assert scaling_note(_row("uprobe-nop", 2, 1.5)) is None


def test_the_table_prints_the_line_under_its_row():
    rows = compare_with_baselines(_two_cpus())
    text = format_table(rows).splitlines()
    assert text[0].startswith("uprobe-nop ( 2 cpus)") and text[1] == scaling_note(rows[0])
    assert text[2].startswith("usermode-count ( 2 cpus)") and text[3].startswith("  the no-probe loop, a baseline")
    assert len(text) == 6


def test_a_baseline_interval_is_filled_at_its_own_rate():
    # 200_000 calls at 2.0 M/s per CPU take 0.1 s; at 720 M/s the no-probe loop makes 72_000_000 calls in that time
    assert interval_seconds(_row("uprobe-nop", 2, 2.0)) == pytest.approx(0.1)
    assert calls_lasting(0.1, 720.0) == 72_000_000
    assert calls_lasting(1e-12, 1.0) == 1


@pytest.mark.parametrize("names, cpus, runs", [
    (None, 2, (3 + 2) * 2),  # the three default benches and the two baselines, each at 2 CPUs and on one
    (["uprobe-nop"], 1, 3),  # on one CPU nothing runs twice
    (["uprobe-nop", "usermode-count"], 2, 3 * 2),  # a baseline named is one of the benches, not run again
])
def test_the_progress_total_counts_every_run(names, cpus, runs):
    assert runs_planned(names, cpus, baselines=True, one_cpu=True) == runs
    assert runs_planned(names, cpus) == len(names or "abc")


def test_a_noisy_baseline_is_lengthened_through_the_benches_iterations():
    row = _row("usermode-count", 2, 700.0, lasts_as_long_as="uprobe-nop", stddev=900.0)
    note = native_bench.spread_note(row)
    assert "raise --iterations, and its intervals, as long as uprobe-nop's, grow with it" in note
    assert "say to" not in note


def test_the_cli_asks_for_the_baselines_and_prints_them_in_text_and_json(monkeypatch, capsys):
    from uprobe_lab.native import many_cpus

    asked = {}

    def run(names, cpus, iterations, repeats, progress, **flags):
        asked.update(flags, cpus=cpus)
        return compare_with_baselines(_two_cpus())
    monkeypatch.setattr(many_cpus, "run_native_benches_on_cpus", run)
    assert cli.main(["bench", "uprobe-nop", "--mode", "native", "-p", "2"]) == 0
    assert asked == {"baselines": True, "one_cpu": True, "cpus": 2}
    assert "0.83x the no-probe loop's scaling and 0.94x the syscall loop's scaling" in capsys.readouterr().out
    assert cli.main(["bench", "uprobe-nop", "--mode", "native", "-p", "2", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["bench"] for r in rows] == ["uprobe-nop", "usermode-count", "syscall-count"]
    assert rows[0]["baseline_ratios"] == pytest.approx({"usermode-count": 0.8333333, "syscall-count": 0.9375})
