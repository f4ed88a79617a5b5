"""v2 on a many-CPU table it has never seen: read from `bench --mode native -p N --json` runs, predicted with the
fitted machines' parameters and the machine's own no-probe curve, scored (uprobe_lab.model.unseen)."""
import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from uprobe_lab import LabError
from uprobe_lab.model import unseen

REPO = Path(__file__).resolve().parents[1]


def run(bench, cpus, mops, one_cpu, kernel="6.18.44-test"):
    """One row as bench --mode native -p N --json prints it (the fields the model reads)."""
    row = {"bench": bench, "arch": "x86_64", "mode": "native", "kernel": kernel, "cpus": cpus, "mops": mops,
           "mops_per_cpu": mops / cpus}
    if cpus > 1:
        row["one_cpu"] = {"cpu": 0, "mops_per_cpu": one_cpu}
    return row


RUNS = [run("uprobe-nop", 2, 6.0, 3.2), run("usermode-count", 2, 190.0, 100.0), run("syscall-count", 2, 10.0, 5.0),
        run("uprobe-nop", 4, 10.0, 3.0), run("usermode-count", 4, 320.0, 100.0), run("syscall-count", 4, 18.0, 5.0),
        run("uprobe-nop", 8, 12.0, 2.0), run("usermode-count", 8, 560.0, 100.0)]


def test_the_runs_become_one_curve_and_the_machine_s_own_scaling():
    table, m = unseen.table_from_bench_runs(RUNS)
    # worked out by hand: T1 is the median of the runs' own 1-CPU rates (3.2, 3.0, 2.0); m(N) = 95, 80, 70 / 100
    assert table[["bench", "producers", "total_mops"]].values.tolist() == [
        ["uprobe-nop", 1, 3.0], ["uprobe-nop", 2, 6.0], ["uprobe-nop", 4, 10.0], ["uprobe-nop", 8, 12.0]]
    assert set(table["config"]) == {"6.18"} and m == {1: 1.0, 2: 0.95, 4: 0.8, 8: 0.7}


def test_a_refused_bench_is_left_out_and_a_backport_names_the_config():
    refused = {"bench": "uprobe-nop10", "arch": "x86_64", "mode": "native", "kernel": "6.18.44-test",
               "refused": "refused by this kernel (6.18.44-test) at attach: ..."}
    table, _ = unseen.table_from_bench_runs(RUNS + [refused])
    assert set(table["bench"]) == {"uprobe-nop"}
    # 6.12.80 has 6.12.77's backport of RCU Tasks Trace (87195a1ee332), which mainline 6.12 has not
    table, _ = unseen.table_from_bench_runs([dict(r, kernel="6.12.80") for r in RUNS])
    assert set(table["config"]) == {"6.12+rcu_tasks_trace"}


def test_every_row_is_scored_against_its_own_prediction():
    first = unseen.score_unseen(RUNS, 4)
    rows = first["rows"]
    assert list(rows["producers"]) == [2, 4, 8] and (rows["low"] < rows["model_mops"]).all()
    assert (rows["model_mops"] < rows["high"]).all()
    # measured twice what the model says: every error is -50%, and outside an interval at most x1.75 wide above
    doubled = copy.deepcopy(RUNS)
    model = dict(zip(rows["producers"], rows["model_mops"]))
    for r in doubled:
        if r["bench"] == "uprobe-nop":
            r["mops"] = 2 * model[r["cpus"]]
    second = unseen.score_unseen(doubled, 4)
    assert second["rows"]["model_mops"].tolist() == pytest.approx(rows["model_mops"].tolist())  # T1 and m unchanged
    assert second["rows"]["error"].tolist() == pytest.approx([-0.5, -0.5, -0.5])
    assert second["median_abs_error"] == pytest.approx(0.5) and second["inside_80"] == 0.0


@pytest.mark.parametrize("runs, cores, message", [
    (RUNS + [run("uprobe-nop", 8, 12.0, 3.0, kernel="7.3.4")], 4, "one kernel's"),
    ([{k: v for k, v in RUNS[0].items() if k != "one_cpu"}], 4, "no one_cpu run"),
    ([r for r in RUNS if not (r["bench"] == "usermode-count" and r["cpus"] == 4)], 4, "no usermode-count row at -p 4"),
    ([r for r in RUNS if r["bench"] != "uprobe-nop"], 4, "no bench measured on 2 or more CPUs"),
    (RUNS, 0, "physical core count"),
    ([{k: v for k, v in RUNS[0].items() if k != "mops"}], 4, "a row without bench, cpus, mops"),
    ({"bench": "uprobe-nop"}, 4, "a list of rows"),
])
def test_what_is_no_unseen_table_is_refused_with_the_way_out(runs, cores, message):
    with pytest.raises(LabError, match=message):
        unseen.score_unseen(runs, cores)


def test_the_benchmark_script_prints_the_rows_and_the_goals(tmp_path):
    path = tmp_path / "p2-p4.json"
    path.write_text(json.dumps(RUNS))
    out = subprocess.run([sys.executable, "benchmarks/contention_model.py", "--unseen", str(path), "--cores", "4"],
                         cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert "uprobe-nop" in out and "goal <= 10%" in out and "m(N)" in out and "2: 0.950" in out
    missing = subprocess.run([sys.executable, "benchmarks/contention_model.py", "--unseen", str(tmp_path / "none.json"),
                              "--cores", "4"], cwd=REPO, capture_output=True, text=True)
    assert missing.returncode != 0 and "none.json" in missing.stderr and "Traceback" not in missing.stderr


# RUNS as the kernel bench prints them (stddevs made up: the model reads none), with its set-up chatter around
BENCH_TEXT = """Setting up benchmark 'trig-uprobe-nop'...
uprobe-nop      ( 1 cpus):    3.200 ± 0.010M/s  (  3.200M/s/cpu)
uprobe-nop      ( 1 cpus):    3.000 ± 0.010M/s  (  3.000M/s/cpu)
uprobe-nop      ( 1 cpus):    2.000 ± 0.010M/s  (  2.000M/s/cpu)
uprobe-nop      ( 2 cpus):    6.000 ± 0.020M/s  (  3.000M/s/cpu)
uprobe-nop      ( 4 cpus):   10.000 ± 0.030M/s  (  2.500M/s/cpu)
uprobe-nop      ( 8 cpus):   12.000 ± 0.040M/s  (  1.500M/s/cpu)
usermode-count  ( 1 cpus):  100.000 ± 0.500M/s  (100.000M/s/cpu)
usermode-count  ( 2 cpus):  190.000 ± 0.500M/s  ( 95.000M/s/cpu)
usermode-count  ( 4 cpus):  320.000 ± 0.500M/s  ( 80.000M/s/cpu)
usermode-count  ( 8 cpus):  560.000 ± 0.500M/s  ( 70.000M/s/cpu)
Summary: hits    3.200 ± 0.010M/s (  3.200M/prod)
"""


def test_the_kernel_bench_s_lines_make_the_same_table_as_its_json():
    table, m = unseen.table_from_bench_runs(unseen.runs_from_bench_text(BENCH_TEXT, "6.18.44-test"))
    # the same numbers as RUNS: T1 = median(3.2, 3.0, 2.0) = 3.0, m(N) = 95, 80, 70 / 100
    assert table[["bench", "producers", "total_mops"]].values.tolist() == [
        ["uprobe-nop", 1, 3.0], ["uprobe-nop", 2, 6.0], ["uprobe-nop", 4, 10.0], ["uprobe-nop", 8, 12.0]]
    assert set(table["config"]) == {"6.18"} and m == {1: 1.0, 2: 0.95, 4: 0.8, 8: 0.7}


def test_the_lab_s_own_text_lines_read_as_the_kernel_bench_s():
    from uprobe_lab.bench import format_table
    rows = [dict(run("uprobe-nop", 2, 6.0, 3.0), stddev=0.02, hits=600), dict(run("uprobe-nop", 1, 3.0, 3.0),
                                                                              stddev=0.01, hits=300)]
    runs = unseen.runs_from_bench_text(format_table(rows), "6.18.44")
    assert [(r["bench"], r["cpus"], r["mops"], r["mops_per_cpu"]) for r in runs] == [
        ("uprobe-nop", 2, 6.0, 3.0), ("uprobe-nop", 1, 3.0, 3.0)]
    assert runs[0]["one_cpu"] == {"mops_per_cpu": 3.0}


@pytest.mark.parametrize("text, kernel, message", [
    (BENCH_TEXT, "banana", "no release"),
    ("Summary: hits 3.2 ± 0.01M/s (3.2M/prod)\n", "6.18.44", "no line of the form"),
    ("uprobe-nop ( 2 cpus): 6.000 ± 0.020M/s ( 3.000M/s/cpu)\n", "6.18.44", r"its \( 1 cpus\) line"),
])
def test_text_that_is_no_unseen_table_is_refused_with_the_way_out(text, kernel, message):
    with pytest.raises(LabError, match=message):
        unseen.table_from_bench_runs(unseen.runs_from_bench_text(text, kernel))


def test_the_benchmark_script_reads_the_kernel_bench_s_text_with_its_kernel(tmp_path):
    path = tmp_path / "bench.txt"
    path.write_text(BENCH_TEXT)
    command = [sys.executable, "benchmarks/contention_model.py", "--unseen", str(path), "--cores", "4"]
    out = subprocess.run(command + ["--kernel", "6.18.44"], cwd=REPO, capture_output=True, text=True, check=True)
    assert "uprobe-nop" in out.stdout and "2: 0.950" in out.stdout and "4: 0.800" in out.stdout
    no_kernel = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    assert no_kernel.returncode != 0 and "--kernel" in no_kernel.stderr and "Traceback" not in no_kernel.stderr


def test_the_kernel_bench_s_own_summaries_are_read_with_n_from_hits_per_producer():
    # ./bench -p N trig-... as it prints, cut short; N = hits / hits per producer (6.000 / 3.000 = 2)
    raw = "\n".join(f"Setting up benchmark 'trig-{bench}'...\nBenchmark 'trig-{bench}' started.\n"
                    f"Iter   0 ( 12.345us): hits {mops:8.3f}M/s ({mops / n:7.3f}M/prod)\n"
                    f"Summary: hits {mops:8.3f} \u00b1 0.010M/s ({mops / n:7.3f}M/prod), drops    0.000 \u00b1 0.000M/s, "
                    f"total operations {mops:8.3f} \u00b1 0.010M/s"
                    for bench, n, mops in [("uprobe-nop", 1, 3.0), ("uprobe-nop", 2, 6.0), ("uprobe-nop", 16, 40.0),
                                           ("usermode-count", 1, 100.0), ("usermode-count", 2, 190.0),
                                           ("usermode-count", 16, 1280.0)])
    table, m = unseen.table_from_bench_runs(unseen.runs_from_bench_text(raw, "6.18.44"))
    assert table[["bench", "producers", "total_mops"]].values.tolist() == [
        ["uprobe-nop", 1, 3.0], ["uprobe-nop", 2, 6.0], ["uprobe-nop", 16, 40.0]]
    assert m == {1: 1.0, 2: 0.95, 16: 0.8}
