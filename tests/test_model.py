"""The cost model: predictions come from emulator counts times prices, fits never see an after-row,
and held-out rows are predicted within the acceptance bounds."""

import json

import pandas as pd
import pytest

from uprobe_lab import bench, cli, model


@pytest.fixture(scope="module")
def repro():
    model.clear_cache()
    return model.reproduction()


def test_changing_a_price_moves_a_prediction():
    prof = model.get_profile("intel")
    base = prof.predict("uretprobe-nop", "6.11")
    dearer = prof.with_prices(syscall=prof.prices["syscall"] + 100).predict("uretprobe-nop", "6.11")
    assert dearer < base
    # a price of a kind this bench never uses moves nothing
    assert prof.with_prices(xol_step=1e6).predict("uretprobe-nop", "6.11") == pytest.approx(base)


def test_counts_come_from_the_emulator(monkeypatch):
    prof = model.get_profile("intel")
    real = prof.predict("uprobe-nop", "6.11")
    calls = []
    original = bench.events_per_hit

    def doubled(name, arch="x86_64", kernel=None, **options):
        calls.append((name, arch, kernel))
        return {k: 2 * v for k, v in original(name, arch, kernel, **options).items()}

    monkeypatch.setattr(bench, "events_per_hit", doubled)
    model.clear_cache()
    try:
        assert model.predict_mops(prof.prices, "uprobe-nop", "x86_64", "6.11") == pytest.approx(real / 2)
        assert ("uprobe-nop", "x86_64", "6.11") in calls
    finally:
        monkeypatch.undo()
        model.clear_cache()


def test_no_after_row_enters_any_fit():
    published = model.bench_rows()
    after = published[published["role"] == model.ROLE_HELDOUT]
    assert set(after["variant"]) == {"fix", "after", "simulated-stp"}
    for name in model.PROFILES:
        rows = model.profile_fit_rows(name)
        assert set(rows["variant"]) <= model.BEFORE_VARIANTS, name
        assert not rows["variant"].isin(after["variant"]).any()


def test_fit_uses_only_the_rows_given(monkeypatch):
    """Refitting with every after-row's value scrambled leaves the profile's prices unchanged."""
    prices = dict(model.get_profile("amd").prices)
    original = model.load_published

    def scrambled():
        df = original()
        after = ~df["variant"].isin(model.BEFORE_VARIANTS)
        df.loc[after, "value"] = df.loc[after, "value"] * 3
        return df

    monkeypatch.setattr(model, "load_published", scrambled)
    model._profile.cache_clear()
    try:
        assert model.get_profile("amd").prices == pytest.approx(prices)
    finally:
        monkeypatch.undo()
        model._profile.cache_clear()


def test_reproduction_covers_every_mops_row(repro):
    published = model.load_published()
    assert len(repro) == int((published["unit"] == "M/s").sum())
    assert set(repro["role"]) == {model.ROLE_FIT, model.ROLE_HELDOUT, model.ROLE_HELDOUT_REF}
    assert repro["predicted_mops"].notna().all()
    ref = repro[repro["role"] == model.ROLE_HELDOUT_REF]
    assert set(zip(ref["cpu"], ref["bench"], ref["variant"])) == {
        ("Kunpeng916", "uprobe-push", "simulated-stp"), ("Kunpeng916", "uretprobe-push", "simulated-stp")}


@pytest.mark.parametrize("table", ["intel", "amd"])
def test_uretprobe_syscall_tables_heldout(repro, table):
    rows = repro[repro["source"].str[:3].isin(["000", "002"]) & (repro["table"] == table)]
    held = rows[rows["role"] == model.ROLE_HELDOUT]
    assert held["error_pct"].abs().median() <= 10
    moved = model.moved_rows(repro)
    moved = moved[moved["table"] == table]
    assert len(moved) == 6 and set(moved["bench"]) == {"uretprobe-nop", "uretprobe-push", "uretprobe-ret"}
    assert moved["error_pct"].abs().median() <= 10


def test_model_is_not_a_no_change_model(repro):
    """On the moved rows the model predicts a real speedup, close to the published one."""
    moved = model.moved_rows(repro)
    moved = moved[moved["source"].str[:3].isin(["000", "002"])]
    fit = repro[repro["role"] == model.ROLE_FIT].set_index(["source", "table", "bench"])["predicted_mops"]
    for r in moved.itertuples(index=False):
        modelled = 100 * (r.predicted_mops / fit[(r.source, r.table, r.bench)] - 1)
        assert modelled > 0.5 * r.moved_pct, (r.source, r.table, r.bench, modelled, r.moved_pct)


def test_nop5_table_heldout(repro):
    rows = repro[repro["source"].str[:3].isin(["003", "004"])]
    assert rows[rows["role"] == model.ROLE_HELDOUT]["error_pct"].abs().median() <= 10
    # the after-rows are predicted from the 6.18 path: uprobe-nop5 enters through sys_uprobe, no int3
    nop5 = bench.events_per_hit("uprobe-nop5", "x86_64", "6.18")
    assert nop5.get("exceptions", 0) == 0 and nop5["syscalls"] == 1
    moved = model.moved_rows(repro)
    moved = moved[moved["source"].str[:3].isin(["003", "004"])]
    assert moved["error_pct"].abs().median() <= 10


def test_arm64_rows(repro):
    rows = repro[repro["arch"] == "arm64"]
    # (a) the plain held-out rows (no pinned page: every non-push bench) are predicted from the seed alone
    plain = rows[rows["role"] == model.ROLE_HELDOUT]
    assert set(plain["bench"]) == {"uprobe-nop", "uprobe-ret", "uretprobe-nop", "uretprobe-ret"}
    assert (plain["error_pct"].abs() <= 10).all()
    # (b) the push rows pin a page, priced by a later Kunpeng916 run of the same patch: within 10% with it
    ref = rows[rows["role"] == model.ROLE_HELDOUT_REF].set_index("bench")
    assert set(ref.index) == {"uprobe-push", "uretprobe-push"}
    assert (ref["error_pct"].abs() <= 10).all()
    assert ref["error_pct"].round(1).to_dict() == {"uprobe-push": 4.6, "uretprobe-push": 3.0}
    # every arm64 row the patch moved is one of them: no moved arm64 row is a plain held-out prediction
    moved = model.moved_rows(repro)
    moved = moved[moved["arch"] == "arm64"]
    assert set(moved["bench"]) == {"uprobe-push", "uretprobe-push"}
    assert (moved["role"] == model.ROLE_HELDOUT_REF).all()


def test_arm64_push_rows_depend_on_the_reference(repro, monkeypatch):
    """(c) Fitted without REFERENCE_DIFFERENCES, the push rows are predicted worse, outside 10%."""
    dep = model.reference_dependence(repro).set_index("bench")
    assert dep["error_pct_no_ref"].round(1).to_dict() == {"uprobe-push": -15.8, "uretprobe-push": -10.6}
    assert (dep["error_pct_no_ref"].abs() > dep["error_pct"].abs()).all()
    assert (dep["error_pct_no_ref"].abs() > 10).all()
    summary = model.error_summary(repro).set_index("table").loc["kunpeng916-bench"]
    assert (summary["heldout_rows"], summary["heldout_ref_rows"], summary["moved_rows"]) == (4, 2, 0)
    assert round(summary["heldout_ref_median_abs_err"], 1) == 3.8
    assert round(summary["heldout_ref_median_abs_err_no_ref"], 1) == 13.2
    # the same with the reference rows removed from the module: the push rows become plain held-out rows
    monkeypatch.setattr(model, "REFERENCE_DIFFERENCES", [])
    model.clear_cache()
    try:
        bare = model.reproduction()
        push = bare[(bare["arch"] == "arm64") & (bare["variant"] == "simulated-stp")
                    & bare["bench"].str.endswith("push")].set_index("bench")
        assert (push["role"] == model.ROLE_HELDOUT).all()
        assert push["error_pct"].to_dict() == pytest.approx(dep["error_pct_no_ref"].to_dict())
    finally:
        monkeypatch.undo()
        model.clear_cache()


def test_model_table_for_bench_cli(capsys):
    table = model.model_table(["uprobe-nop", "uretprobe-nop"], arch="x86_64", kernel="6.11", cpu="amd")
    assert [r["bench"] for r in table] == ["uprobe-nop", "uretprobe-nop"]
    assert all(r["mode"] == "model" and r["stddev"] == 0 and r["mops"] > 0 for r in table)
    assert cli.main(["bench", "--mode", "model", "--cpu", "intel", "--kernel", "6.10", "uprobe-ret"]) == 0
    assert "uprobe-ret" in capsys.readouterr().out


def test_predict_cli(tmp_path):
    measured = tmp_path / "mine.csv"
    pd.DataFrame({
        "arch": ["x86_64"] * 5, "kernel": ["6.10"] * 5,
        "bench": ["syscall-count", "uprobe-nop", "uprobe-ret", "uretprobe-nop", "uretprobe-ret"],
        "mops": [15.9, 3.0, 1.1, 1.49, 0.82],
    }).to_csv(measured, index=False)
    out = tmp_path / "pred.csv"
    assert cli.main(["predict", "--measured", str(measured), "--to", "6.11", "--out", str(out)]) == 0
    pred = pd.read_csv(out)
    assert list(pred.columns) == ["bench", "predicted_mops"]
    by = pred.set_index("bench")["predicted_mops"]
    # the uretprobe syscall speeds the return up (1.49 -> 2.020); uprobe-* barely move
    assert by.to_dict() == {"syscall-count": 15.892, "uprobe-nop": 2.983, "uprobe-ret": 1.107,
                            "uretprobe-nop": 2.020, "uretprobe-ret": 0.941}


def test_reproduce_cli(tmp_path, capsys):
    assert cli.main(["reproduce", "--out", str(tmp_path)]) == 0
    csv = pd.read_csv(tmp_path / "reproduction.csv")
    assert list(csv.columns) == ["source", "cpu", "arch", "bench", "variant", "published_mops",
                                 "predicted_mops", "error_pct", "role"]
    pngs = {p.name for p in tmp_path.glob("*.png")}
    assert {"000_intel.png", "002_amd.png", "003_nop5-bench.png", "004_nop5-bench.png",
            "001_kunpeng916-bench.png", "cost_breakdown.png"} <= pngs
    out = capsys.readouterr().out
    assert "uretprobe-nop  :    1.969 \u00b1 0.001M/s" in out


def test_predict_cli_missing_measured_file(tmp_path, capsys):
    missing = tmp_path / "nowhere.csv"
    assert cli.main(["predict", "--measured", str(missing), "--to", "6.11"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --measured {missing}: no such file") and "arch, kernel, bench, mops" in err
    assert "Traceback" not in err


def test_app_predictions():
    apps = model.app_predictions().set_index(["bench", "variant"])
    # the rows n is fitted on carry no prediction
    fit = apps[apps["role"] == model.ROLE_FIT]
    assert set(fit.index.get_level_values("variant")) == {"no-uprobe", "single-stepped-stp"}
    assert fit["predicted"].isna().all() and fit["error_pct"].isna().all()
    get, put = apps.loc[("redis-get", "emulated-stp")], apps.loc[("redis-set", "emulated-stp")]
    assert get["role"] == put["role"] == model.ROLE_HELDOUT
    assert round(get["predicted"], 1) == 47344.6 and round(get["error_pct"], 1) == -3.3
    assert round(put["predicted"], 1) == 46333.2 and round(put["error_pct"], 1) == -4.7


def test_app_grep_is_out_of_scope():
    grep = model.app_predictions().set_index(["bench", "variant"]).loc[("grep", "emulated-stp")]
    assert grep["role"] == model.ROLE_OUT_OF_SCOPE
    assert round(grep["predicted"], 3) == 11.935 and grep["error_pct"] > 400
    assert "258x" in grep["note"] and "1.35x" in grep["note"]
    assert "out of scope" in model.APP_MODEL


def test_bench_cli_model_mode_passes_stp(capsys):
    def push(stp):
        assert cli.main(["bench", "--mode", "model", "--arch", "arm64", "--stp", stp, "--json", "uprobe-push"]) == 0
        return json.loads(capsys.readouterr().out)[0]

    simulated, xol = push("simulate"), push("xol")
    assert simulated["events_per_hit"] != xol["events_per_hit"]
    assert simulated["mops"] > xol["mops"]  # simulating the stp saves the single-step
