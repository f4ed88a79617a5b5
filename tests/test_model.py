"""The cost model checked independently of its own outputs: values worked out by hand from a stated price
list, the posterior against its closed form, invariants (monotonicity, scale, the scramble test) and the
evaluation protocol's figures recomputed from the table they summarise."""

import math
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from uprobe_lab import bench, cli, model
from uprobe_lab.model import fit as fitmod
from uprobe_lab.model import priors, profiles

MODEL_DOC = (Path(__file__).resolve().parents[1] / "docs" / "model.md").read_text()  # its stated figures

# A stated price list (ns), used wherever a value is worked out by hand below.
STATED = {"user_insn": 1.0, "exception": 200.0, "compat_exception": 150.0, "syscall": 100.0, "handler": 50.0,
          "xol_step": 300.0,
          "return_instance": 20.0, "uaccess": 30.0, "pin_map": 150.0, "futex_wake": 80.0}


def stated_profile(sigma=0.0, cov=None) -> model.Profile:
    n = len(model.PRICE_NAMES)
    mean = np.array([STATED[p] for p in model.PRICE_NAMES])
    return model.Profile("stated", "", "x86_64", mean, np.zeros((n, n)) if cov is None else cov, sigma,
                         pd.DataFrame(), model.Prior.uninformative())


@pytest.fixture(scope="module")
def repro():
    model.clear_cache()
    return model.reproduction()


# ---- hand-worked values -------------------------------------------------------------------------------

def test_uprobe_nop_by_hand():
    """A nop under an int3 probe (kernel/events/uprobes.c handle_swbp; arch/x86 emulates a nop): one #BP
    exception, one find_active_uprobe lookup, one consumer, the nop emulated (5 ns fixed), and the loop's
    5 user instructions (call, ret, and the producer loop's dec/jnz/... as bench.py counts them)."""
    ev = model.events_for("uprobe-nop", "x86_64", "6.11")
    assert (ev["exceptions"], ev["probe_lookups"], ev["consumers"], ev["emulated"]) == (1, 1, 1, 1)
    ns = 5 * 1.0 + 200 + 2 * 50 + 5
    assert ev["user_insns"] == 5
    assert stated_profile().predict("uprobe-nop", "6.11") == pytest.approx(1000 / ns)


def test_a_32_bit_tasks_traps_by_hand():
    """The host's 32-bit task benches: the emulator counts their traps as ``exceptions``, as for a 64-bit task,
    and the model renames them ``compat_exceptions`` and prices them as compat_exception (also when a caller
    asks for a 32-bit task by option). uprobe-nop-compat: one 32-bit trap, a lookup, a consumer, the nop emulated, 5
    user instructions. uretprobe-nop-compat returns through the int3 trampoline on every kernel: a second
    32-bit trap, a return instance pushed and popped, two copies (read and hijack the return address)
    and the trampoline's int3 as the sixth user instruction."""
    prof = stated_profile()
    assert prof.predict("uprobe-nop-compat", "6.18") == pytest.approx(1000 / (5 * 1.0 + 150 + 2 * 50 + 5))
    ret = model.events_for("uretprobe-nop-compat", "x86_64", "6.18")
    assert "exceptions" not in ret and ret["compat_exceptions"] == 2
    assert prof.predict("uretprobe-nop-compat", "6.18") == pytest.approx(
        1000 / (6 * 1.0 + 2 * 150 + 2 * 50 + 2 * 20 + 2 * 30 + 5))
    assert model.events_for("uprobe-nop", "x86_64", "6.18")["exceptions"] == 1
    asked = model.events_for("uprobe-nop", "x86_64", "6.18", compat_task=True)
    assert asked["compat_exceptions"] == 1 and "exceptions" not in asked
    assert model.events_for("uprobe-nop-compat", "x86_64", "6.18", compat_task=False)["exceptions"] == 1


def test_optimised_nop5_by_hand():
    """6.18's optimised nop5: no exception; one uprobe syscall; a lookup and a consumer; sys_uprobe's two
    copies of the saved registers (32 bytes read, 32 written back), priced per copy."""
    ev = model.events_for("uprobe-nop5", "x86_64", "6.18")
    assert ev.get("exceptions", 0) == 0 and ev["syscalls"] == 1
    assert (ev["uaccess_copies"], ev["uaccess_bytes"]) == (2, 64)
    ns = ev["user_insns"] * 1.0 + 100 + 2 * 50 + 2 * 30
    assert stated_profile().predict("uprobe-nop5", "6.18") == pytest.approx(1000 / ns)


def test_uretprobe_copies_by_hand():
    """arch/x86/kernel/uprobes.c: arch_uretprobe_hijack_return_addr reads the return address and writes the
    trampoline's (two 8-byte copies); 6.11's sys_uretprobe adds a read and a write-back of the 24 bytes of
    rax/rcx/r11 the trampoline pushed (two more). Priced per copy, the return path gains two copies."""
    e10, e11 = model.events_for("uretprobe-nop", "x86_64", "6.10"), model.events_for("uretprobe-nop", "x86_64", "6.11")
    assert (e10["uaccess_copies"], e10["uaccess_bytes"]) == (2, 16)
    assert (e11["uaccess_copies"], e11["uaccess_bytes"]) == (4, 64)
    t10 = 6 * 1.0 + 2 * 200 + 2 * 50 + 2 * 20 + 2 * 30 + 5
    t11 = 13 * 1.0 + 200 + 100 + 2 * 50 + 2 * 20 + 4 * 30 + 5
    assert (e10["user_insns"], e11["user_insns"]) == (6, 13)
    prof = stated_profile()
    assert prof.predict("uretprobe-nop", "6.10") == pytest.approx(1000 / t10)
    assert prof.predict("uretprobe-nop", "6.11") == pytest.approx(1000 / t11)


def test_speedup_between_kernels_by_hand():
    """The same stated prices: uretprobe-nop's 6.10 -> 6.11 speedup is t10 / t11 (611 / 578 ns, the times above);
    with no price uncertainty its log has the model's error on each time, sqrt(2) * 2%. A bench whose
    events do not change (uprobe-nop, 6.11 -> 6.18) has speedup exactly 1 and no error."""
    prof = stated_profile(sigma=0.02)
    speedup, log_sd = prof.change("uretprobe-nop", "6.10", "6.11")
    assert speedup == pytest.approx(611 / 578) and log_sd == pytest.approx(math.sqrt(2) * 0.02)
    assert prof.change("uprobe-nop", "6.11", "6.18") == (1.0, 0.0)


def test_speedup_interval_carries_the_prices_covariance_by_hand():
    """The speedup's log is log t10 - log t11, so its gradient in the prices is c10 / t10 - c11 / t11 (counts
    over time). uretprobe-nop (the counts above): handler 2 and 2, exception 2 and 1, t10 = 611, t11 = 578.
    With handler sd 10 ns, exception sd 20 ns and their covariance 50 ns^2, the variance of the log is
    g_h^2 100 + g_e^2 400 + 2 g_h g_e 50, plus the model's 2% on each time."""
    n = len(model.PRICE_NAMES)
    cov = np.zeros((n, n))
    h, e = model.PRICE_NAMES.index("handler"), model.PRICE_NAMES.index("exception")
    cov[h, h], cov[e, e], cov[h, e], cov[e, h] = 100.0, 400.0, 50.0, 50.0
    g_h, g_e = 2 / 578 - 2 / 611, 1 / 578 - 2 / 611
    var = g_h ** 2 * 100 + g_e ** 2 * 400 + 2 * g_h * g_e * 50 + 2 * 0.02 ** 2
    speedup, log_sd = stated_profile(sigma=0.02, cov=cov).change("uretprobe-nop", "6.10", "6.11")
    assert speedup == pytest.approx(611 / 578) and log_sd == pytest.approx(math.sqrt(var))


def test_breakdown_by_hand():
    """uretprobe-nop on 6.11 at the stated prices, kind by kind (the counts of test_uretprobe_copies_by_hand):
    13 user instructions, one exception, one syscall, two handler runs, two return instances, four copies,
    and the 5 ns of fixed-price events; the parts add up to the time the model predicts."""
    parts = model.breakdown(STATED, model.events_for("uretprobe-nop", "x86_64", "6.11"))
    assert parts == {"user_insn": 13.0, "exception": 200.0, "compat_exception": 0.0, "syscall": 100.0,
                     "handler": 100.0, "xol_step": 0.0,
                     "return_instance": 40.0, "uaccess": 120.0, "pin_map": 0.0, "futex_wake": 0.0, "fixed": 5.0}
    assert sum(parts.values()) == pytest.approx(1000 / stated_profile().predict("uretprobe-nop", "6.11"))


def test_redis_prediction_by_hand(monkeypatch):
    """Seed 001's Redis GET: n probe hits per request make the stepped run slower than no uprobe, so
    n = (1/46750.82 - 1/49149.71) s / t_xol; the simulated run costs 1/49149.71 s + n t_sim per request. At
    the stated prices and no price uncertainty, every draw is that figure and the interval has no width."""
    from uprobe_lab.model import applications
    n_prices = len(model.PRICE_NAMES)
    prof = model.Profile("stated", "", "arm64", np.array([STATED[p] for p in model.PRICE_NAMES]),
                         np.zeros((n_prices, n_prices)), 0.0, pd.DataFrame(), model.Prior.uninformative())
    monkeypatch.setattr(applications, "get_profile", lambda name: prof)
    # by hand at the stated prices: stepped, 11 user insns + 2 exceptions + lookup and consumer + 1 step;
    # simulated with v1's store (the Redis rows were measured with it), 10 insns + 1 exception + lookup and
    # consumer + the emulated-insn fixed 5 ns + one copy_to_user
    t_xol, t_sim = 1e-9 * (11 + 2 * 200 + 2 * 50 + 300), 1e-9 * (10 + 200 + 2 * 50 + 5 + 30)
    assert [1e-6 / prof.predict("uprobe-push", k) for k in ("xol-stp", "simulated-stp-uaccess")] == pytest.approx([t_xol, t_sim])
    n = (1 / 46750.82 - 1 / 49149.71) / t_xol
    rps = 1 / (1 / 49149.71 + n * t_sim)
    row = applications.app_predictions().set_index(["bench", "variant"]).loc[("redis-get", "emulated-stp")]
    assert row.predicted == pytest.approx(rps) and row.low == pytest.approx(rps) and row.high == pytest.approx(rps)
    assert row.role == "heldout" and row.error_pct == pytest.approx(100 * (rps / 48981.19 - 1))


def test_consumers_scale_the_handler_price():
    """k perf events on one site are k consumers: each adds one handler price."""
    prof = stated_profile()
    t = [1000 / prof.interval("uprobe-nop", "6.18", consumers=k)[0] for k in (1, 2, 4, 8)]
    assert np.diff(t) / np.diff([1, 2, 4, 8]) == pytest.approx([50.0, 50.0, 50.0])


def test_interval_by_hand():
    """t = 1000 ns, sd 100 ns: 80% interval t +- 1.2816 sd, inverted into M/s."""
    assert all(math.isnan(v) for v in model.mops_interval(-5.0, 1.0))  # no negative rates
    m, lo, hi = model.mops_interval(1000.0, 100.0)
    assert m == 1.0
    assert lo == pytest.approx(1000 / 1128.155, rel=1e-5) and hi == pytest.approx(1000 / 871.845, rel=1e-5)
    # with a price sd and no row noise: the interval of uprobe-nop is from handler's sd twice (lookup + consumer)
    n = len(model.PRICE_NAMES)
    cov = np.zeros((n, n))
    cov[model.PRICE_NAMES.index("handler")] [model.PRICE_NAMES.index("handler")] = 10.0 ** 2
    m, lo, hi = stated_profile(cov=cov).interval("uprobe-nop", "6.11")
    assert 1000 / lo == pytest.approx(310 + 1.2815516 * 20, rel=1e-6)


def test_posterior_matches_the_scalar_closed_form():
    """One price, one row: the posterior mean is the precision-weighted average of prior and data."""
    prior_mean, prior_sd = 100.0, 50.0
    n = len(model.PRICE_NAMES)
    mean = np.zeros(n)
    cov = np.eye(n)
    mean[0], cov[0, 0] = prior_mean, prior_sd ** 2
    x = np.zeros((1, n))
    x[0, 0] = 1.0
    m, c = fitmod.posterior(x, np.array([160.0]), np.array([30.0]), model.Prior(mean, cov, {}))
    w0, w1 = 1 / prior_sd ** 2, 1 / 30.0 ** 2
    assert m[0] == pytest.approx((w0 * 100 + w1 * 160) / (w0 + w1))
    assert c[0, 0] == pytest.approx(1 / (w0 + w1))


def test_fit_recovers_a_stated_price_list():
    """Rows made from STATED (times exactly priced) and a weak prior: the fit returns STATED for every price
    the rows identify, with intervals that contain the truth."""
    truth = stated_profile()
    rows = [(b, k, c) for b in ("usermode-count", "syscall-count", "uprobe-push", "uprobe-ret", "uretprobe-nop")
            for k in ("6.10", "6.11") for c in (1,)] + [("uprobe-nop", "6.18", c) for c in (1, 2, 4, 8)]
    rows += [("uprobe-nop5", "6.18", 1), ("futex-wake-private", "6.18", 0), ("futex-wake-shared", "6.18", 0),
             ("uprobe-nop-compat", "6.18", 1)]
    df = pd.DataFrame([{"bench": b, "kernel": k, "consumers": c, "mops": truth.interval(b, k, consumers=c)[0]}
                       for b, k, c in rows])
    n = len(model.PRICE_NAMES)
    prior = model.Prior(np.full(n, 100.0), np.eye(n) * 1000.0 ** 2, {})
    prof = model.fit_profile(df, "x86_64", prior)
    for p in model.PRICE_NAMES:
        assert prof.prices[p] == pytest.approx(STATED[p], rel=0.02, abs=0.05), p


def test_intervals_cover_about_80_percent_on_synthetic_data():
    """Rows from STATED with 3% noise: about 80% of fresh rows fall inside their 80% intervals."""
    rng = np.random.default_rng(1)
    truth = stated_profile()
    benches = ["uprobe-nop", "uprobe-push", "uprobe-ret", "uretprobe-nop", "uretprobe-ret", "syscall-count"]
    inside = []
    for _ in range(40):
        df = pd.DataFrame([{"bench": b, "kernel": "6.10", "rel_err": 0.0,
                            "mops": truth.predict(b, "6.10") * (1 + 0.03 * rng.standard_normal())} for b in benches])
        stated = np.array([STATED[p] for p in model.PRICE_NAMES])
        prior = model.Prior(stated, np.diag((0.5 * stated) ** 2), {})
        prof = model.fit_profile(df, "x86_64", prior)
        for b in ("uretprobe-nop", "uprobe-nop5"):
            _, lo, hi = prof.interval(b, "6.11")
            inside.append(lo <= truth.predict(b, "6.11") * (1 + 0.03 * rng.standard_normal()) <= hi)
    assert 0.6 <= np.mean(inside) <= 0.97


# ---- invariants ---------------------------------------------------------------------------------------

def test_a_dearer_price_never_makes_a_bench_faster():
    prof = model.get_profile("intel")
    for p in model.PRICE_NAMES:
        dearer = prof.with_prices(**{p: prof.prices[p] + 50})
        for b in bench.bench_names():
            for k in ("6.10", "6.11", "6.18"):
                if bench.refusal(b, "x86_64", k) is not None:
                    continue
                assert dearer.predict(b, k) <= prof.predict(b, k) + 1e-12, (p, b, k)


def test_counts_come_from_the_emulator(monkeypatch):
    prof = stated_profile()
    real = prof.predict("uprobe-nop", "6.11")
    original = bench.events_per_hit
    monkeypatch.setattr(bench, "events_per_hit",
                        lambda *a, **kw: {k: 2 * v for k, v in original(*a, **kw).items()})
    model.clear_cache()
    try:
        assert prof.predict("uprobe-nop", "6.11") == pytest.approx(real / 2)
    finally:
        monkeypatch.undo()
        model.clear_cache()


def test_scrambled_after_rows_change_no_profile(monkeypatch):
    """The scramble test: every after-row's value x3 leaves every profile's prices and covariance unchanged."""
    before = {n: (model.get_profile(n).mean.copy(), model.get_profile(n).cov.copy()) for n in model.PROFILES}
    original = profiles.load_published

    def scrambled():
        df = original()
        after = ~df["variant"].isin(model.BEFORE_VARIANTS)
        df.loc[after, "value"] = df.loc[after, "value"] * 3
        return df

    monkeypatch.setattr(profiles, "load_published", scrambled)
    profiles.clear_profiles()
    try:
        for n, (mean, cov) in before.items():
            assert model.get_profile(n).mean == pytest.approx(mean), n
            assert model.get_profile(n).cov == pytest.approx(cov), n
    finally:
        monkeypatch.undo()
        profiles.clear_profiles()


def test_no_after_row_enters_any_fit():
    for name in model.PROFILES:
        rows = model.profile_fit_rows(name)
        assert set(rows["variant"]) <= model.BEFORE_VARIANTS, name


# ---- the protocol -------------------------------------------------------------------------------------

def test_seed_004_counts_once(repro):
    dup = repro[repro["source"].str.startswith("004")]
    assert len(dup) == 20 and (dup["duplicate_of"] == "003 nop5-bench").all()
    assert (repro[~repro["source"].str.startswith("004")]["duplicate_of"] == "").all()


def test_moved_rows_are_the_ones_whose_events_change(repro):
    """Worked out from the seeds and the kernel changes: 000/002 move every uretprobe row (the uretprobe
    syscall, 3 per CPU and table: 12), 003 moves the two nop5 rows (the optimisation), 001 moves the two
    push rows (stp simulated); every other held-out row keeps its events (20 unique)."""
    mv = model.moved_rows(repro)
    assert len(mv) == 16
    assert set(mv[mv["source"].str[:3].isin(["000", "002"])]["bench"]) == {"uretprobe-nop", "uretprobe-push",
                                                                           "uretprobe-ret"}
    assert set(mv[mv["source"].str.startswith("003")]["bench"]) == {"uprobe-nop5", "uretprobe-nop5"}
    assert set(mv[mv["source"].str.startswith("001")]["bench"]) == {"uprobe-push", "uretprobe-push"}
    un = repro[(repro["role"] == model.ROLE_UNMOVED) & (repro["duplicate_of"] == "")]
    assert len(un) == 20


def test_headline_is_the_moved_rows_figures(repro):
    h = model.headline(repro)
    mv = model.moved_rows(repro)
    inside = [(r.low_mops <= r.published_mops <= r.high_mops) for r in mv.itertuples()]
    assert h["moved_rows"] == 16 and h["moved_coverage"] == pytest.approx(np.mean(inside))
    errs = sorted(abs(100 * (r.predicted_mops / r.published_mops - 1)) for r in mv.itertuples())
    assert h["moved_median_abs_err_pct"] == pytest.approx((errs[7] + errs[8]) / 2)
    assert h["moved_coverage_tail"] == pytest.approx(model.coverage_tail(16, sum(inside)))
    half = [100 * max(r.predicted_mops - r.low_mops, r.high_mops - r.predicted_mops) / r.predicted_mops
            for r in mv.itertuples()]
    assert h["moved_max_half_width_pct"] == pytest.approx(max(half))
    assert h["moved_median_half_width_pct"] == pytest.approx(float(np.median(half)))
    un = repro[(repro["role"] == model.ROLE_UNMOVED) & (repro["duplicate_of"] == "")]
    un_errs = sorted(abs(100 * (r.predicted_mops / r.published_mops - 1)) for r in un.itertuples())
    assert h["unmoved_rows"] == 20 and h["unmoved_median_abs_err_pct"] == pytest.approx((un_errs[9] + un_errs[10]) / 2)


def test_error_summary_counts_each_table_once(repro):
    """One line per non-duplicate table (seed 004 quotes 003: left out), its moved rows' count, how many lie
    inside their interval and the widest, recounted from the rows."""
    summary = model.error_summary(repro)
    assert "004" not in set(summary["source"]) and len(summary) == 6
    for line in summary.itertuples():
        rows = repro[(repro["source"].str[:3] == line.source) & (repro["table"] == line.table)]
        mv = rows[rows["role"] == model.ROLE_MOVED]
        assert line.moved_rows == len(mv) and line.moved_inside == int(
            ((mv["low_mops"] <= mv["published_mops"]) & (mv["published_mops"] <= mv["high_mops"])).sum())
        assert line.moved_max_half_width == pytest.approx(mv["half_width_pct"].max())
    assert summary["moved_rows"].sum() == 16


def _moved_predictions(evaluate, host_bench=None):
    """The moved rows' predictions, with every host recording's ``host_bench`` row made twice as fast."""
    hosts = profiles.recorded_hosts()
    if host_bench:
        hosts = tuple((rows.assign(mops=rows["mops"].where(rows["bench"] != host_bench, 2 * rows["mops"])), vm, label)
                      for rows, vm, label in hosts)
    profiles.clear_profiles()  # the per-CPU profiles are cached with the recordings they were fitted on
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(profiles, "recorded_hosts", lambda: hosts)
                mv = model.moved_rows(evaluate())
    finally:
        profiles.clear_profiles()
    return mv.set_index(["source", "table", "bench"])["predicted_mops"]


@pytest.mark.parametrize("evaluate", [model.reproduction, model.per_table_alone], ids=["per CPU", "alone"])
def test_a_host_row_on_a_held_out_path_cannot_move_that_paths_prediction(evaluate):
    """Protocol rule 2 as an invariant of the whole evaluation: the host's optimised uprobe-nop5 measures the
    path the nop5 table's moved rows take, the host's 6.18 uretprobe-nop the path of 000/002's fix rows; either
    can say anything without moving those predictions. The host's uprobe-nop, on no held-out path, moves
    them all (so the check can fail)."""
    base = _moved_predictions(evaluate)
    nop5 = base.index.get_level_values("source").str.startswith("003")
    uret = base.index.get_level_values("source").str[:3].isin(["000", "002"])
    assert nop5.sum() == 2 and uret.sum() == 12
    assert _moved_predictions(evaluate, "uprobe-nop5")[nop5].to_numpy() == pytest.approx(base[nop5].to_numpy(), rel=1e-9)
    assert _moved_predictions(evaluate, "uretprobe-nop")[uret].to_numpy() == pytest.approx(base[uret].to_numpy(), rel=1e-9)
    moved = _moved_predictions(evaluate, "uprobe-nop")
    assert (abs(moved[nop5 | uret] / base[nop5 | uret] - 1) > 1e-3).all()


def test_coverage_tail_by_hand():
    """Binomial(16, 0.8): P(16) = 0.8**16 = 0.028147, P(15) = 16 * 0.8**15 * 0.2 = 0.112590,
    P(14) = 120 * 0.8**14 * 0.04 = 0.211106, P(13) = 560 * 0.8**13 * 0.008 = 0.246291; so P(X <= 12) is 1 minus
    their sum, 0.401866. All inside is certain to be at most n; none inside of 2 at 80% is 0.2 * 0.2."""
    assert model.coverage_tail(16, 12) == pytest.approx(0.401866, abs=1e-6)
    assert model.coverage_tail(16, 16) == pytest.approx(1.0)
    assert model.coverage_tail(2, 0) == pytest.approx(0.04)
    assert model.coverage_tail(16, 11) < model.coverage_tail(16, 12) < model.coverage_tail(16, 13)


def test_priors_leave_out_host_rows_a_held_out_row_tests():
    """nop5 machine: the host's optimised uprobe-nop5 measures the path 003's after rows test; Intel/AMD: the
    host's 6.18 uretprobe-nop is the uretprobe-syscall path of 000/002's fix rows; Kunpeng: none (arm64)."""
    assert model.get_profile("nop5").host_excluded == ["uprobe-nop5 x1"]
    assert model.get_profile("intel").host_excluded == ["uretprobe-nop x1"]
    assert model.get_profile("amd").host_excluded == ["uretprobe-nop x1"]
    assert model.get_profile("kunpeng").host_excluded == []
    # and no price of the nop5 machine's prior comes from a row it excludes: refitting each host recording
    # without that row gives the same prior
    parts, labels = [], []
    for host_rows, virt, label in profiles.recorded_hosts():
        keep = host_rows[~((host_rows["bench"] == "uprobe-nop5") & (host_rows["consumers"] == 1))]
        hp = priors.host_profile(keep.reset_index(drop=True), virtualised=virt)
        parts.append(priors.carried_prior(hp, model.profile_fit_rows("nop5-machine"), "x86_64")[0])
        labels.append(label)
    prior = priors.mixed_prior(parts, labels)
    assert prior.mean == pytest.approx(model.get_profile("nop5").prior.mean)


def test_three_host_recordings_from_three_machines():
    hosts = profiles.recorded_hosts()
    assert len(hosts) == 3 and len({label for _, _, label in hosts}) == 3
    assert set(model.get_profile("nop5").scales) == {label for _, _, label in hosts}
    # two share a CPU model, so the kernel build tells them apart
    assert sum(label.startswith("Intel(R) Xeon(R) Processor, ") for _, _, label in hosts) == 2


@pytest.mark.parametrize("host", range(3))
def test_host_handler_price_is_the_consumer_slope(host):
    """The consumer scan by hand: a straight line through (k, ns per hit) has the handler price as slope."""
    host_rows, virt, _ = profiles.recorded_hosts()[host]
    scan = host_rows[host_rows["bench"] == "uprobe-nop"].sort_values("consumers")
    slope = np.polyfit(scan["consumers"], 1000 / scan["mops"], 1)[0]
    hp = priors.host_profile(host_rows, virtualised=virt)
    assert hp.prices["handler"] == pytest.approx(slope, rel=0.25)


@pytest.mark.parametrize("host", range(3))
def test_host_pin_map_price_is_the_futex_pair_difference(host):
    """The page-pin pair by hand: a shared FUTEX_WAKE minus a private one is one get_user_pages_fast +
    put_page; the work both do has its own price, so the syscall price stays what getpgid's loop says."""
    host_rows, virt, _ = profiles.recorded_hosts()[host]
    ns = {b: 1000 / host_rows.loc[host_rows["bench"] == b, "mops"].iloc[0]
          for b in ("futex-wake-private", "futex-wake-shared", "syscall-count")}
    hp = priors.host_profile(host_rows, virtualised=virt)
    assert hp.prices["pin_map"] == pytest.approx(ns["futex-wake-shared"] - ns["futex-wake-private"], rel=0.1)
    assert hp.prices["syscall"] == pytest.approx(ns["syscall-count"], rel=0.05)  # the loop's few insns aside


def test_nop5_prior_exception_by_hand():
    """The nop5 machine's prior exception price from the three recordings by the stated rule: each host's fit
    (without its optimised nop5 row, rule 2) times its scale s, var s^2 var_host + (40% of that)^2; then the
    mixture: the mean of the three, var the mean of their vars plus the variance of their means."""
    fit_rows = model.profile_fit_rows("nop5-machine")
    e = model.PRICE_NAMES.index("exception")
    means, variances = [], []
    for host_rows, virt, _ in profiles.recorded_hosts():
        keep = host_rows[~((host_rows["bench"] == "uprobe-nop5") & (host_rows["consumers"] == 1))]
        hp = priors.host_profile(keep.reset_index(drop=True), virtualised=virt)
        s = priors.scale_to(hp, fit_rows, "x86_64")
        m = s * hp.mean[e]
        means.append(m)
        variances.append(s * s * hp.cov[e, e] + (0.4 * m) ** 2)
    assert len(means) == 3
    mean = sum(means) / 3
    var = sum(variances) / 3 + sum((m - mean) ** 2 for m in means) / 3
    prior = model.get_profile("nop5").prior
    assert prior.mean[e] == pytest.approx(mean) and prior.cov[e, e] == pytest.approx(var)


def test_each_recording_prices_the_return_path_the_uretprobe_tables_test_with_its_32_bit_rows():
    """Rule 2 leaves each recording's 6.18 uretprobe-nop out of the uretprobe tables' priors (it takes the 6.11
    return path their moved rows test); a 32-bit task's uretprobe, which returns through an int3, still pins
    return_instance, so every recording carries it itself. Without those rows it would be uncarried there."""
    prior = model.get_profile("intel").prior
    parts = prior.source["return_instance"].split("; ")
    assert len(parts) == 3 and not any("not carried" in p for p in parts)
    for host_rows, virt, label in profiles.recorded_hosts():
        assert {"uprobe-nop-compat", "uretprobe-nop-compat"} <= set(host_rows["bench"]), label
        no_compat = host_rows[~host_rows["bench"].str.endswith("-compat")].reset_index(drop=True)
        excluded = priors.host_rows_excluded(no_compat, [("uretprobe-nop", "x86_64", "6.11")])
        hp = priors.host_profile(no_compat, exclude=excluded, virtualised=virt)
        prior_without, _ = priors.carried_prior(hp, model.profile_fit_rows("intel-i7-1165g7"), "x86_64")
        assert not prior_without.carried[model.PRICE_NAMES.index("return_instance")], label


def _prior(mean: dict, sd: dict) -> model.Prior:
    """A prior over the priced kinds: the named means and sds, every other price uninformative."""
    p = model.Prior.uninformative("not carried")
    for k, v in mean.items():
        i = model.PRICE_NAMES.index(k)
        p.mean[i], p.cov[i, i], p.carried[i] = v, sd[k] ** 2, True
        p.source[k] = f"carried {v}"
    return p


def test_mixed_prior_by_hand():
    """Two recordings: exception 600 +- 60 and 400 +- 40, handler 50 +- 5 and 90 +- 9; syscall carried by the
    first alone (150 +- 15). Equal mixture: exception mean 500, var (60^2 + 40^2)/2 + 100^2 = 12600;
    handler 70, var (25 + 81)/2 + 20^2 = 453; no covariance between them (the parts have none, and the
    means' spread is taken per price); syscall 150 +- 15 (the second part takes the first's value, so no
    spread); every other price stays uninformative."""
    a = _prior({"exception": 600, "handler": 50, "syscall": 150}, {"exception": 60, "handler": 5, "syscall": 15})
    b = _prior({"exception": 400, "handler": 90}, {"exception": 40, "handler": 9})
    mix = priors.mixed_prior([a, b], ["A", "B"])
    e, h, s = (model.PRICE_NAMES.index(k) for k in ("exception", "handler", "syscall"))
    assert mix.mean[[e, h, s]] == pytest.approx([500, 70, 150])
    assert mix.cov[e, e] == pytest.approx(12600) and mix.cov[h, h] == pytest.approx(453)
    assert mix.cov[e, h] == pytest.approx(0) and mix.cov[s, s] == pytest.approx(225)
    assert mix.cov[s, e] == pytest.approx(0) and mix.cov[s, h] == pytest.approx(0)
    x = model.PRICE_NAMES.index("xol_step")
    assert not mix.carried[x] and mix.mean[x] == 0
    assert mix.source["exception"] == "A: carried 600; B: carried 400"
    assert priors.mixed_prior([a], ["A"]) is a


def test_implausible_names_only_prices_the_rows_count():
    prof = stated_profile()
    i = model.PRICE_NAMES.index("pin_map")
    prof.mean[i] = 1.0  # below its plausible 10 ns
    counted = np.ones(len(model.PRICE_NAMES), bool)
    assert [w.split()[0] for w in fitmod.implausible(prof, counted)] == ["pin_map"]
    counted[i] = False  # no row counts it: the value is its prior, not a fit
    assert fitmod.implausible(prof, counted) == []


def test_every_figure_has_an_interval(repro):
    assert (repro["high_mops"] > repro["predicted_mops"]).all() and (repro["low_mops"] < repro["predicted_mops"]).all()
    text = model.format_comparison(repro)
    model_sides = [line.split("|", 1)[1] for line in text.splitlines() if "M/s |" in line]
    assert len(model_sides) == len(repro) and not any("\u00b1 0.000" in side for side in model_sides)
    names = [b for b in bench.bench_names() if bench.refusal(b, "x86_64", "6.18") is None]
    for r in model.model_table(names, cpu="intel"):
        assert r["stddev"] > 0 and r["low"] < r["mops"] < r["high"]


# ---- predict's inputs ---------------------------------------------------------------------------------

def table_003():
    rows = model.bench_rows()
    t = rows[rows["source"].str.startswith("003") & (rows["role"] == "fit")]
    return t[["arch", "kernel", "bench", "value"]].rename(columns={"value": "mops"}).reset_index(drop=True)


def predict(measured, to):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.predict_from_measured(measured, to).set_index("bench")


def test_release_strings_map_to_the_modelled_kernel():
    assert model.modelled_kernel("6.14.2") == "6.11" and model.modelled_kernel("6.18.44-fc") == "6.18"
    m = table_003()
    a = predict(m, "6.18")
    b = predict(m.assign(kernel="6.14.2"), "6.19.1")
    assert a["predicted_mops"].to_numpy() == pytest.approx(b["predicted_mops"].to_numpy())
    # older than every modelled version: the oldest answers, as for bench --kernel 5.4
    assert predict(m, "5.4")["predicted_mops"].to_numpy() == pytest.approx(predict(m, "6.10")["predicted_mops"].to_numpy())
    with pytest.raises(model.LabError, match="no uprobes"):
        predict(m, "3.4")


def test_predict_to_a_release_before_uretprobes_names_the_rows_to_drop():
    m = table_003()
    ret = sorted(b for b in m["bench"].unique() if b.startswith("uretprobe"))
    assert ret
    with pytest.raises(model.LabError, match=rf"kernel 3\.9 has no uretprobes .* rows of {', '.join(ret)} cannot be "
                                             r"carried to it: drop them from the measured table, or predict a "
                                             r"release from 3\.10 on"):
        predict(m, "3.9")
    kept = m[~m["bench"].isin(ret)]
    assert predict(kept, "3.9")["predicted_mops"].to_numpy() == pytest.approx(
        predict(kept, "6.10")["predicted_mops"].to_numpy())  # 6.10's row answers for 3.9's uprobes


def test_a_7_2_release_before_the_nop10_backport_is_priced_as_6_18():
    assert model.kernel_setup("x86_64", "7.2.3") == ("6.18", {})
    assert model.kernel_setup("x86_64", "7.2.6") == ("7.3", {})  # the backport: it hits as 7.3
    assert model.kernel_setup("x86_64", "7.2.0-45-generic") == ("6.18", {})  # an ABI number: mainline 7.2


def test_missing_rows_are_named():
    m = table_003()
    with pytest.warns(UserWarning, match="no uprobe-nop row"):
        out = model.predict_from_measured(m[m["bench"] != "uprobe-nop"], "6.18")
    assert any("uprobe-nop" in w for w in out.attrs["warnings"])
    with pytest.raises(model.LabError, match="no probe row"):
        model.predict_from_measured(m[m["bench"].isin(["usermode-count", "syscall-count"])], "6.18")


@pytest.mark.parametrize("rate", [-1.5, 0.0, float("nan"), "fast"])
def test_a_rate_that_is_not_positive_is_refused_by_name(rate):
    m = table_003().astype({"mops": object})
    m.loc[m["bench"] == "uprobe-push", "mops"] = rate
    with pytest.raises(model.LabError, match="uprobe-push has mops .* a positive number"):
        model.predict_from_measured(m, "6.18")


def test_a_rate_no_cpu_runs_is_refused_not_inverted():
    m = table_003()
    m.loc[m["bench"] == "uprobe-push", "mops"] = 1e308  # once: LinAlgError, a singular matrix
    with pytest.raises(model.LabError, match="uprobe-push has mops 1e\\+308.* at most 100000"):
        model.predict_from_measured(m, "6.18")


def test_repeats_of_one_measurement_are_its_mean_and_conflicts_are_refused():
    """Rows of one bench on one kernel are repeats: fitted and carried as their mean (3.0 and 3.06 predict
    as 3.03 does), with their spread as the error where it exceeds the rows' own; a bench measured on two
    kernels is predicted from both. Rows a factor beyond CONFLICT_RATIO apart are refused."""
    m = table_003()
    nop = m[m["bench"] == "uprobe-nop"].iloc[0]
    mean = predict(m.assign(mops=np.where(m["bench"] == "uprobe-nop", 3.03, m["mops"])), "6.18")
    pair = pd.concat([m.assign(mops=np.where(m["bench"] == "uprobe-nop", 3.0, m["mops"])),
                      nop.to_frame().T.assign(mops=3.06)], ignore_index=True)
    got = predict(pair, "6.18")
    assert len(got) == len(m)
    assert got.loc["uprobe-nop", "predicted_mops"] == pytest.approx(mean.loc["uprobe-nop", "predicted_mops"], rel=1e-3)
    combined = model.text.repeats_combined(pair.assign(rel_err=0.001))
    row = combined[combined["bench"] == "uprobe-nop"].iloc[0]
    assert row["mops"] == pytest.approx(3.03) and row["rel_err"] == pytest.approx(np.std([3.0, 3.06], ddof=1) / 3.03 / 2 ** 0.5)
    # the same bench measured on 6.11 and (as the model carries it) 6.18: one figure, from both
    both = pd.concat([m, nop.to_frame().T.assign(kernel="6.18", mops=float(predict(m, "6.18").loc["uprobe-nop", "predicted_mops"]))],
                     ignore_index=True)
    assert predict(both, "6.18").loc["uprobe-nop", "predicted_mops"] == pytest.approx(
        predict(m, "6.18").loc["uprobe-nop", "predicted_mops"], rel=1e-6)
    with pytest.raises(model.LabError, match=r"uprobe-nop on 6.11 disagree: 0.001 and 3.056"):
        predict(pd.concat([m, nop.to_frame().T.assign(mops=0.001)], ignore_index=True), "6.18")
    with pytest.raises(model.LabError, match=r"uprobe-nop disagree: carried to 6.18"):
        predict(pd.concat([m, nop.to_frame().T.assign(kernel="6.18", mops=1.0)], ignore_index=True), "6.18")


def test_the_fit_holds_no_matrix_as_wide_as_its_rows():
    """5000 rows fitted in a few MB: the effective number of parameters is summed row by row (an n x n
    matrix of them would be 200 MB)."""
    import tracemalloc

    rows = pd.concat([table_003()] * 500, ignore_index=True)
    small = fitmod.fit_profile(table_003(), "x86_64", fitmod.Prior.uninformative())
    tracemalloc.start()
    try:
        prof = fitmod.fit_profile(rows, "x86_64", fitmod.Prior.uninformative())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20e6
    assert prof.mean == pytest.approx(small.mean, rel=1e-3)  # repeats: the same prices, the prior weighing less


def test_a_slower_bench_is_predicted_slower_and_an_unchanged_path_keeps_its_figure():
    """Each bench's prediction moves with its own input (the same sign, about the same factor); a bench
    whose events do not change between the kernels keeps its measured figure whatever the others do; a
    uniformly slower machine is predicted uniformly slower."""
    m = table_003()
    base = predict(m, "6.18")
    for b in m["bench"]:
        slower = m.assign(mops=np.where(m["bench"] == b, m["mops"] / 1.2, m["mops"]))
        p = predict(slower, "6.18")
        assert p.loc[b, "predicted_mops"] < base.loc[b, "predicted_mops"], b
        for other in m["bench"]:
            if model.events_for(other, "x86_64", "6.11") == model.events_for(other, "x86_64", "6.18") and other != b:
                assert p.loc[other, "predicted_mops"] == pytest.approx(m.set_index("bench").loc[other, "mops"])
    uniform = predict(m.assign(mops=m["mops"] / 1.2), "6.18")
    assert uniform["predicted_mops"].to_numpy() == pytest.approx(base["predicted_mops"].to_numpy() / 1.2, rel=1e-3)


def test_a_slower_shared_path_never_speeds_up_a_prediction():
    """Bench a's input 20% slower, bench b predicted on 6.18. When a's whole path is part of b's 6.18 path and b
    sheds none of it (syscall-count inside the optimised nop5's), b's prediction must not get faster (beyond
    0.5%, a quarter of the 2% row floor) and gets slower when a's path is at least a tenth of b's time. When b
    sheds part of a's path the sign is not fixed: a dearer int3 (uprobe-nop slower, its nop5 row unchanged) means
    a bigger saving when 6.18 drops the int3, so uprobe-nop5 is rightly predicted faster."""
    m = table_003()
    base = predict(m, "6.18")
    counts = {b: model.price_counts(model.events_for(b, "x86_64", "6.11")) for b in m["bench"]}
    after = {b: model.price_counts(model.events_for(b, "x86_64", "6.18")) for b in m["bench"]}
    prof = model.profiles.fit_with_carried_prior(m.assign(rel_err=0.02), "x86_64", [], "m", "m")
    checked = 0
    for a in m["bench"]:
        p = predict(m.assign(mops=np.where(m["bench"] == a, m["mops"] / 1.2, m["mops"])), "6.18")
        for b in m["bench"]:
            shed = np.clip(counts[b] - after[b], 0, None)
            if a == b or not (after[b] != counts[b]).any():
                continue
            if (counts[a] <= after[b]).all() and not (counts[a][shed > 0]).any():
                change = p.loc[b, "predicted_mops"] / base.loc[b, "predicted_mops"] - 1
                assert change < 0.005, (a, b, change)
                if counts[a] @ prof.mean > 0.1 * (after[b] @ prof.mean):
                    assert change < 0, (a, b, change)
                    checked += 1
    assert checked >= 2  # syscall-count -> uprobe-nop5 and uretprobe-nop5
    dearer_int3 = predict(m.assign(mops=np.where(m["bench"] == "uprobe-nop", m["mops"] / 1.2, m["mops"])), "6.18")
    assert dearer_int3.loc["uprobe-nop5", "predicted_mops"] > base.loc["uprobe-nop5", "predicted_mops"]


@pytest.mark.slow
def test_cli_reproduce_reports_the_headline(tmp_path, capsys):
    assert cli.main(["reproduce", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "headline, one profile per CPU: 16 moved rows" in out
    assert "each seed table fitted on its own current rows: 16 moved rows" in out
    assert "headline, tables outside the seeds: 21 moved rows" in out
    assert "inside their 80% intervals" in out and (tmp_path / "reproduction.csv").exists()
    assert len(pd.read_csv(tmp_path / "reproduction_outside_seeds.csv")) == len(model.outside_rows())
    # every many-CPU table drawn, and the contention model's rows with their role
    assert len(list(tmp_path.glob("scaling_*.png"))) == 16
    assert set(pd.read_csv(tmp_path / "scaling_model.csv")["role"]) == {"fitted", "held out"}
    assert "many CPUs: contention model median |error|" in out


def test_model_rows_say_whether_this_cpu_has_a_published_figure():
    """Seed 003 publishes uprobe-nop5 on 6.18 for its unnamed machine only: for that profile the row is
    published, for the Intel i7 a prediction that names where it was published; nop10 (7.3) is published nowhere."""
    basis = lambda cpu, kernel, name: cli.model_rows([name], "x86_64", kernel, cpu, {})[0]["basis"]
    assert "published figures exist for this CPU" in basis("nop5", "6.18", "uprobe-nop5")
    other = basis("intel", "6.18", "uprobe-nop5")
    assert other == ("prediction for the Intel i7-1165G7: on this kernel the bench is published only for an unnamed "
                     "x86-64 machine")
    assert basis("intel", "6.11", "uretprobe-nop").startswith("priced from the published figures' fit")
    assert basis("intel", "7.3", "uprobe-nop10").startswith("prediction: no throughput has been published")
    rows = [cli.model_rows([n], "x86_64", k, cpu, {})[0]
            for cpu, k, n in [("nop5", "6.18", "uprobe-nop5"), ("intel", "6.18", "uprobe-nop5"), ("intel", "7.3", "uprobe-nop10")]]
    assert [r["published"] for r in rows] == ["this cpu", "other cpus", "none"]
    lines = bench.format_table(rows).splitlines()
    assert "prediction" not in lines[0]
    assert lines[1].endswith("(prediction: published only for another CPU)")
    assert lines[2].endswith("(prediction only: nothing published)")


def test_the_figures_the_model_doc_states_are_what_the_evaluation_gives(repro):
    """docs/model.md's current-version line is a claim about the code: its figures, in order, are the
    per-CPU headline (median error, coverage, median and widest half-width), the each-table-alone one
    (median, coverage, widest), then the unmoved rows' (median, coverage)."""
    import re

    line = MODEL_DOC.split("The current one, v9:")[1].split(" (v8's")[0].replace("80% intervals", "intervals")
    stated = [float(x) for x in re.findall(r"\d+(?:\.\d+)?", line)]
    h, a = model.headline(repro), model.headline(model.per_table_alone())
    got = [round(h["moved_median_abs_err_pct"], 1), round(100 * h["moved_coverage"]),
           round(h["moved_median_half_width_pct"], 1), round(h["moved_max_half_width_pct"], 1),
           round(a["moved_median_abs_err_pct"], 1), round(100 * a["moved_coverage"]), round(a["moved_max_half_width_pct"], 1),
           round(h["unmoved_median_abs_err_pct"], 1), round(100 * h["unmoved_coverage"])]
    assert stated == got


def test_every_recordings_host_fit_leaves_each_row_within_2_percent():
    """The reason for v9, asked of the bundled rows: with a 32-bit task's trap priced apart, each recording's
    own fit leaves every row within 2%. Priced as a 64-bit trap, the AMD EPYC recording's two 32-bit rows
    sit 19% and 10% below the fit (its 32-bit trap is a third cheaper), so this fails."""
    for host_rows, virt, label in profiles.recorded_hosts():
        worst = fitmod.misfits(priors.host_profile(host_rows, virtualised=virt))[0]
        assert abs(worst[1]) < 0.02, (label, worst)


def test_a_table_of_many_releases_is_priced_once_per_modelled_version(monkeypatch):
    """2_000 releases of the 6.11..6.15 lines (6.11 answers for each: the newest modelled version not newer) and
    three benches: the fit asks the emulator's counts once per bench, not once per row."""
    from uprobe_lab.model import prices

    rows = pd.DataFrame([{"bench": b, "kernel": f"6.{11 + i % 5}.{i}", "mops": m}
                         for i in range(2_000) for b, m in (("uprobe-nop", 3.0), ("syscall-count", 20.0),
                                                            ("usermode-count", 500.0))])
    asked = []
    real = prices.events_for
    monkeypatch.setattr(prices, "events_for", lambda *a, **k: asked.append(a) or real(*a, **k))
    x, y, err = fitmod.design(rows, "x86_64")
    assert len(asked) == 3 and {a[2] for a in asked} == {"6.11"}
    assert x.shape == (6_000, len(prices.PRICE_NAMES)) and (err == 0).all()
    # each row as design took it one at a time: its counts over its time per hit
    one = rows.iloc[[4]]
    ev = real(one["bench"].iloc[0], "x86_64", one["kernel"].iloc[0])
    assert x[4] == pytest.approx(prices.price_counts(ev) / (1000 / one["mops"].iloc[0]))
