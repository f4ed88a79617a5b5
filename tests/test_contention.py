"""The many-CPU tables and the contention model (docs/model.md, "Many CPUs")."""
import numpy as np
import pandas as pd
import pytest

from uprobe_lab import LabError
from uprobe_lab.model import contention


def test_every_printed_row_is_consistent_and_every_config_is_the_lab_s_rules():
    t = contention.scaling_table()
    assert t["table"].nunique() == 16 and len(t) == 644
    printed = t.dropna(subset=["producers", "per_cpu_mops"])
    # the bench prints the total and total / N: a typo in either breaks this
    assert np.allclose(printed["total_mops"] / printed["producers"].astype(float), printed["per_cpu_mops"], atol=0.0015)
    for config in set(t["config"]) - {""}:
        assert contention.config_kernel(config).name == config
    assert t["source"].str.len().min() > 10 and (t["machine"] != "").sum() > 0


def test_a_config_is_a_release_plus_rules_that_exist():
    k = contention.config_kernel("6.13+speculative_vma_lookup")
    assert k.rcu_tasks_trace and k.speculative_vma_lookup and not k.ri_pool
    assert not contention.config_kernel("6.9").treelock_rwlock
    # a release is its mainline release: 6.12.77's backport of RCU Tasks Trace is no variant's, "6.12+..." names it
    assert not contention.config_kernel("6.12").rcu_tasks_trace and contention.config_kernel("6.12+rcu_tasks_trace").rcu_tasks_trace
    with pytest.raises(LabError, match="rule names"):
        contention.config_kernel("6.13+speculative_lookup")


def test_the_held_out_tables_are_never_fitted():
    assert set(contention.FIT_TABLES).isdisjoint(contention.HELD_OUT_TABLES)
    t = contention.scaling_table()
    fitted = t[t["table"].isin(contention.FIT_TABLES)]
    held = t[t["table"].isin(contention.HELD_OUT_TABLES)]
    # no held-out measurement reappears among the fitting rows (a repost would leak it)
    shared = fitted.merge(held, on=["bench", "producers", "total_mops"])
    assert shared.empty, shared


def _rows(n, t1_ns, s, m, cores=40):
    return pd.DataFrame({"producers": n, "T1_ns": t1_ns, "S": s, "M": m, "C": cores})


def test_without_a_shared_line_the_curve_is_the_cores_worth_of_single_cpu_hits():
    rows = _rows([1, 2, 40, 80], 300.0, 0.0, 0.0)
    x = contention.curve(200.0, 0.0, 0.25, rows)
    assert np.allclose(x, np.array([1, 2, 40, 40 + 0.25 * 40]) / 300.0 * 1e3)


def test_a_line_every_hit_moves_caps_the_total_at_one_transfer_at_a_time():
    rows = _rows([64], 300.0, 1.0, 1.0)
    assert contention.curve(500.0, 0.0, 1.0, rows)[0] == pytest.approx(1e3 / 500.0)  # 2 M/s, whatever N
    # a transfer that gets dearer with more CPUs asking makes the curve fall past its peak
    n = np.arange(1, 65)
    x = contention.curve(100.0, 0.05, 0.0, _rows(n, 300.0, 1.0, 1.0))
    assert 1 < n[np.argmax(x)] < 64 and x[-1] < x.max()


def test_the_fit_finds_the_parameters_that_made_a_curve():
    n = np.array([2, 4, 8, 16, 32, 48, 64, 80])
    rows = _rows(np.tile(n, 2), 300.0, np.r_[np.full(8, 0.5), np.zeros(8)], np.r_[np.full(8, 0.5), np.zeros(8)])
    tau0 = contention.TAU0_NS[30]
    rows["total_mops"] = contention.curve(tau0, 0.02, 0.3, rows)
    assert contention.fit(rows) == pytest.approx((tau0, 0.02, 0.3))


def test_v2s_machine_term_lowers_each_cpus_rate_and_a_measured_one_replaces_it():
    rows = _rows([1, 11, 80], 300.0, 0.0, 0.0)
    # no shared line: (cores' worth) / (1 + kappa (N - 1)) / T1; at 80 on 40 cores, 40 + 0.3 x 40 = 52 cores' worth
    x = contention.curve(200.0, 0.0, 0.3, rows, kappa=0.01)
    assert np.allclose(x, np.array([1, 11 / 1.1, 52 / 1.79]) / 300.0 * 1e3)
    rows["m"] = [np.nan, 0.5, np.nan]  # a no-probe loop measured at half its 1-CPU rate per CPU at 11
    x = contention.curve(200.0, 0.0, 0.3, rows, kappa=0.01)
    assert np.allclose(x, np.array([1, 11 * 0.5, 52 / 1.79]) / 300.0 * 1e3)


def test_the_v2_fit_finds_the_machine_term_that_made_a_curve():
    n = np.array([2, 4, 8, 16, 32, 48, 64, 80])
    rows = _rows(np.tile(n, 2), 300.0, np.r_[np.full(8, 0.5), np.zeros(8)], np.r_[np.full(8, 0.5), np.zeros(8)])
    tau0 = contention.TAU0_NS[30]
    rows["total_mops"] = contention.curve(tau0, 0.02, contention.ETA_SMT, rows, kappa=0.012)
    assert contention.fit(rows, version=2) == pytest.approx((tau0, 0.02, 0.3, 0.012))


def test_a_machine_without_fitting_rows_takes_the_fitted_machines_geometric_mean():
    params = {"a": (100.0, 0.0, 0.3, 0.0), "b": (400.0, 0.21, 0.3, 0.02)}
    # sqrt(100 x 400) = 200; sqrt(1 x 1.21) - 1 = 0.1; sqrt(1 x 1.02) - 1 = 0.00995
    assert contention.unseen_machine_params(params) == pytest.approx((200.0, 0.1, 0.3, 0.00995), rel=1e-3)


@pytest.mark.slow
@pytest.mark.parametrize("version", [1, 2])
def test_the_protocol_scores_every_held_out_row_once(version):
    result = contention.evaluate(version)
    held = result["held_out"]
    assert set(held["table"]) == set(contention.HELD_OUT_TABLES)
    assert (held["producers"] >= 2).all() and not held.duplicated(["table", "variant", "bench", "producers"]).any()
    assert (held["low"] < held["model_mops"]).all() and (held["model_mops"] < held["high"]).all()
    assert len(result["peaks"]) == held.groupby(["table", "variant", "bench"]).ngroups


def test_an_unseen_machines_table_is_predicted_with_its_own_no_probe_curve():
    t = contention.scaling_table()
    # a Xeon table as if it came from a 16-core machine of its own: its rows, its 1-CPU rows as T1
    table = t[(t["table"] == "andrii-reuse-ri-commit-2024-12") & t["producers"].isin([1, 2, 16])].copy()
    table["machine"] = "sixteen-core"
    flat = contention.predict_unseen(table, 16, {1: 10.0, 2: 10.0, 16: 10.0})
    slower = contention.predict_unseen(table, 16, {1: 10.0, 2: 10.0, 16: 8.0})
    assert set(flat["producers"]) == {2, 16} and (flat["C"] == 16).all()
    at16 = flat["producers"] == 16
    # a machine whose own loop keeps 80% of its per-CPU rate at 16 gives at most 80% of the flat machine's total
    # there (less only where the curve is line-bound, which m does not touch); at 2 CPUs, the same
    assert (slower.loc[at16, "model_mops"] <= flat.loc[at16, "model_mops"] + 1e-9).all()
    assert (slower.loc[at16, "model_mops"] >= 0.8 * flat.loc[at16, "model_mops"] - 1e-9).all()
    assert np.allclose(slower.loc[~at16, "model_mops"], flat.loc[~at16, "model_mops"])
    with pytest.raises(LabError, match="1-CPU rate"):
        contention.predict_unseen(table, 16, {16: 8.0})


def test_the_kept_transfers_are_every_run_the_tables_need_as_the_emulator_gives_it_now():
    """contention_transfers.json (record_transfers) saves chapter 07 and these tests some 200 many-CPU emulations: it
    must hold every run the fitting and held-out tables need, each equal to a fresh emulation."""
    kept = contention.recorded_transfers()
    assert sorted(kept) == contention.needed_runs()
    stale = [key for key in kept if kept[key] != contention.emulated_transfers(*key)]
    assert not stale, (f"{len(stale)} of {len(kept)} kept runs differ from the emulator now (first: {stale[0]}): make "
                       "them again with python -c 'from uprobe_lab.model.contention import record_transfers; "
                       "record_transfers()'")


def test_a_release_before_6_8_is_counted_on_6_8_s_structures_and_every_path_says_so(capsys):
    """Chapter 07's exercise takes releases from 6.8 on because the layouts (uprobe_lab.contended) start there; the
    CLI, run_bench_on_cpus and shared_writes count an older release as 6.8 and say so, in the same words."""
    from uprobe_lab import cli
    from uprobe_lab.bench import run_bench_on_cpus
    from uprobe_lab.contended import layout_note
    from uprobe_lab.views.many_cpus import shared_writes

    said = ("kernel 5.15: older than 6.8, the oldest release whose structures the lab lays out "
            "(uprobe_lab.contended): its shared lines and writes per hit are 6.8's locking")
    assert cli.main(["bench", "-p", "2", "--iterations", "5", "--kernel", "5.15", "uprobe-ret"]) == 0
    assert said in capsys.readouterr().err
    assert cli.main(["bench", "-p", "2", "--iterations", "5", "--kernel", "6.8", "uprobe-ret"]) == 0
    assert "older than 6.8" not in capsys.readouterr().err
    assert run_bench_on_cpus("uprobe-ret", kernel="5.15", iterations=2)["note"].startswith(said)
    assert "note" not in run_bench_on_cpus("uprobe-ret", kernel="6.8", iterations=2)
    with pytest.warns(UserWarning, match="kernel 5.15: older than 6.8"):
        writes = shared_writes("uprobe-ret", ["5.15", "6.8"])
    assert writes["5.15"] == writes["6.8"]  # the same structures, and neither has a contention rule
    assert layout_note("6.8") is None and layout_note("6.10") is None and layout_note("banana") is None
