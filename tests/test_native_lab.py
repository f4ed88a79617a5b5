"""Native figures put to use: host vs emulator, the calibrated profile, the recorded example, the CLI.

Tests marked ``native`` need a host that can run uprobes (they skip with the reason otherwise); the rest
run anywhere, on the recorded 6.18 example.
"""
from __future__ import annotations

import contextlib
import glob
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pandas as pd
import pytest
from matplotlib.figure import Figure

from uprobe_lab import cli, model
from uprobe_lab.kernel import KERNELS, modelled_kernel
from uprobe_lab.model import fit as fitmod
from uprobe_lab.native import NativeUnavailable, calibrate, code, compare, example, host
from uprobe_lab.native import bench as native_bench
from uprobe_lab.views import native as views
from kernel_bytes import URETPROBE_TRAMPOLINE, UPROBE_TRAMPOLINE
from native_support import Uname, cpu_held_elsewhere, native, perf_fds, skip_or_fail
from notebook_runs import code_outputs, executed

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
TRAMP = UPROBE_TRAMPOLINE.hex()  # [uprobes-trampoline]
URET_TRAMP = URETPROBE_TRAMPOLINE.hex()  # [uprobes] slot 0


EXAMPLE = example.load_example()


# ------------------------------------------------------------------------------------------------
# the recorded example
# ------------------------------------------------------------------------------------------------
def test_recorded_example_is_labelled_and_complete():
    assert "6.18" in EXAMPLE["label"] and "x86-64" in EXAMPLE["label"] and "virtual machine" in EXAMPLE["label"]
    h = EXAMPLE["host"]
    assert h["kernel"].startswith("6.18") and h["arch"] == "x86_64" and h["virtualized"] is True
    assert [r["bench"] for r in EXAMPLE["benches"]] == list(native_bench.BENCH_NAMES)
    for r in EXAMPLE["benches"]:
        assert r["mode"] == "native" and r["kernel"] == h["kernel"]
        assert r["hits"] == r["iterations"] * r["repeats"] and r["mops"] > 0 and r["stddev"] >= 0
    assert set(EXAMPLE["snapshots"]) == set(compare.COMPARE_BENCHES)
    assert example.RECORDED_LABEL.startswith("recorded on a Linux 6.18 x86-64 virtual machine")


def test_host_description_keys():
    d = host.host_description()
    assert set(d) == {"kernel", "kernel_build", "machine", "arch", "cpu_model", "cpus", "virtualized"}
    assert d["kernel"] == os.uname().release


def test_recorded_path_by_env(monkeypatch):
    monkeypatch.setenv(example.ENV, "recorded")
    run = example.native_or_recorded(["uprobe-nop", "uprobe-nop5"])
    assert run.recorded and "UPROBE_LAB_NATIVE=recorded" in run.reason
    assert [r["bench"] for r in run.benches] == ["uprobe-nop", "uprobe-nop5"]
    assert run.banner().startswith("RECORDED EXAMPLE (recorded on a Linux 6.18 x86-64 virtual machine")


def test_recorded_run_is_labelled_by_its_own_recording(monkeypatch):
    """A re-recorded example on another machine is labelled with that machine, not the bundled one's."""
    monkeypatch.setenv(example.ENV, "recorded")
    other = dict(EXAMPLE, label="recorded on a Linux 6.19 arm64 laptop")
    monkeypatch.setattr(example, "load_example", lambda path=example.EXAMPLE_PATH: other)
    run = example.native_or_recorded()
    assert run.label == "recorded on a Linux 6.19 arm64 laptop, not measured on this machine"
    assert run.banner().startswith("RECORDED EXAMPLE (recorded on a Linux 6.19 arm64 laptop, not measured")


def test_recorded_path_when_native_unavailable(monkeypatch):
    monkeypatch.delenv(example.ENV, raising=False)

    def refuse(arch=None):
        raise NativeUnavailable("perf_event_open refused the uprobe (EPERM ...)")

    monkeypatch.setattr(example, "check_native_support", refuse)
    run = example.native_or_recorded()
    assert run.recorded and "EPERM" in run.reason and "Native runs are not possible here: perf_event_open" in run.banner()
    assert len(run.benches) == len(native_bench.BENCH_NAMES)


@pytest.mark.notebooks
@pytest.mark.xdist_group("notebooks")
def test_notebook_06_recorded_path():
    """What a reader without root sees: the notebook runs and says it shows a recording."""
    text = "".join(o.get("text", "") for o in code_outputs(executed("06_your_machine.ipynb", recorded=True)))
    assert "RECORDED EXAMPLE" in text and "UPROBE_LAB_NATIVE=recorded" in text
    assert "mov rax, 0x150" in text and "mov rax, 0x14f" in text


# ------------------------------------------------------------------------------------------------
# host vs emulator
# ------------------------------------------------------------------------------------------------
def test_emulator_trampolines_equal_the_recorded_host():
    for bench in compare.COMPARE_BENCHES:
        rec = EXAMPLE["snapshots"][bench]
        emu = compare.emulator_snapshot(bench)
        assert compare.trampoline_bytes(emu) == compare.trampoline_bytes(rec), bench
    assert compare.trampoline_bytes(EXAMPLE["snapshots"]["uprobe-nop5"]) == {"[uprobes-trampoline]": TRAMP}
    assert compare.trampoline_bytes(EXAMPLE["snapshots"]["uretprobe-nop"]) == {"[uprobes]": URET_TRAMP}


def test_compare_table_on_recorded_nop5():
    host_snap, emu, table = compare.side_by_side("uprobe-nop5", host=EXAMPLE["snapshots"]["uprobe-nop5"])
    rows = table.set_index("what")
    assert rows.loc["probe site", "host"] == rows.loc["probe site", "emulator"] == "call [uprobes-trampoline]+0x0"
    assert rows.loc["kernel", "same"] and rows.loc["hits counted", "same"] and rows.loc["nop5 optimised", "same"]
    assert rows.loc["[uprobes-trampoline] trampoline bytes", "same"]
    assert host_snap["site_bytes"].startswith("e8") and emu["site_bytes"].startswith("e8")


def test_compare_table_shows_the_lab_simplifications():
    _, _, table = compare.side_by_side("uretprobe-nop", host=EXAMPLE["snapshots"]["uretprobe-nop"])
    rows = table.set_index("what")
    assert rows.loc["probe site", "same"] and rows.loc["[uprobes] trampoline bytes", "same"]
    assert rows.loc["[uprobes] perms", "host"] == "--xp"  # execute-only special mapping
    assert "[uprobes-trampoline] perms" not in rows.index  # neither side has one for a uretprobe on nop


def test_compare_rejects_benches_without_a_probe():
    with pytest.raises(ValueError, match="no probe"):
        compare.emulator_snapshot("usermode-count")
    with pytest.raises(ValueError, match="unknown bench"):
        compare.emulator_snapshot("uprobe-bogus")


@native
def test_emulator_trampolines_equal_this_host_byte_for_byte():
    if modelled_kernel(os.uname().release) != "6.18":
        pytest.skip("the [uprobes-trampoline] and SLS int3 need Linux 6.18")
    for bench in compare.COMPARE_BENCHES + ("uretprobe-nop5",):
        live, emu, table = compare.side_by_side(bench, hits=50)
        assert live["hits"] == emu["hits"] == 50
        assert compare.trampoline_bytes(live) == compare.trampoline_bytes(emu), bench
        same = table.set_index("what")["same"]
        assert same["probe site"] and same["nop5 optimised"], bench
    assert compare.trampoline_bytes(live) == {"[uprobes-trampoline]": TRAMP, "[uprobes]": URET_TRAMP}


@native
def test_fresh_host_snapshot_leaves_this_process_alone():
    before = [m.name for m in host.special_mappings()]
    compare.host_bench_snapshot("uprobe-nop5", 10)
    assert [m.name for m in host.special_mappings()] == before


# ------------------------------------------------------------------------------------------------
# calibration
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("release,label", [("6.18.44-fc-v857", "6.18"), ("6.19.0", "6.18"), ("6.14.2-arch1", "6.11"),
                                           ("6.16", "6.16"), ("6.10.0-rc1", "6.10"), ("6.9.12", None),
                                           ("5.15.0-91-generic", None), ("7.0.1", "6.18"), ("garbage", None)])
def test_modelled_kernel(release, label):
    assert modelled_kernel(release) == label


def example_profile():
    return calibrate.calibrate(EXAMPLE["benches"])


def test_calibrated_profile_predicts_the_kernels():
    pred = calibrate.predict_kernels(example_profile(), EXAMPLE["benches"]).set_index("bench")
    kernels = ["6.10", "6.11", "6.16", "6.18", "7.3"]
    assert list(pred.columns) == ["measured_on", "measured_mops", "stddev"] + [
        c for k in kernels for c in (k, f"{k} low", f"{k} high", f"{k} change", f"{k} change low", f"{k} change high")]
    assert (pred["measured_on"] == "6.18").all()
    for k in kernels:  # every figure has an interval around it
        assert (pred[f"{k} low"] < pred[k]).all() and (pred[k] < pred[f"{k} high"]).all()
    # what each version changed, seen through this machine's prices
    assert pred.loc["uretprobe-nop", "6.11"] > pred.loc["uretprobe-nop", "6.10"]  # syscall instead of int3
    assert pred.loc["uprobe-nop5", "6.16"] > 5 * pred.loc["uprobe-nop5", "6.11"]  # emulated, not single-stepped
    assert pred.loc["uprobe-nop5", "6.18"] > pred.loc["uprobe-nop5", "6.16"]  # call + syscall, no int3
    assert pred.loc["uprobe-nop5-pagecross", "6.18"] == pred.loc["uprobe-nop5-pagecross", "6.16"]
    # 7.3 optimises only the nop10: its nop5 rows pay 6.16's int3 and emulation again, the rest are 6.18's
    for bench in pred.index:
        expected = "6.16" if "nop5" in bench else "6.18"
        assert pred.loc[bench, "7.3"] == pred.loc[bench, expected], bench
    # 6.16's int3-and-emulate nop5 is what the page-crossing nop5 still does on 6.18: measured here
    assert abs(pred.loc["uprobe-nop5", "6.16"] / pred.loc["uprobe-nop5-pagecross", "measured_mops"] - 1) < 0.1
    assert abs(pred.loc["uprobe-nop5", "6.18"] / pred.loc["uprobe-nop5", "measured_mops"] - 1) < 0.1


def test_benches_this_kernel_refuses_are_predicted_for_7_3():
    """A 6.18 host cannot probe the nop10; on 7.3 its optimised path is 6.18's nop5 one plus the `lea` below the
    red zone: one user instruction more per hit, so the two times differ by exactly the user_insn price."""
    prof = example_profile()
    table = calibrate.predict_benches(prof, ["uprobe-nop10", "uretprobe-nop10"], "7.3").set_index("bench")
    assert list(table.columns) == ["kernel", "mops", "low", "high"] and (table["kernel"] == "7.3").all()
    assert ((table["low"] < table["mops"]) & (table["mops"] < table["high"])).all()
    nop10_ns, nop5_ns = 1e3 / prof.predict("uprobe-nop10", "7.3"), 1e3 / prof.predict("uprobe-nop5", "6.18")
    assert nop10_ns - nop5_ns == pytest.approx(prof.prices["user_insn"], rel=1e-6)
    with pytest.raises(model.LabError, match="0x2e"):
        calibrate.predict_benches(prof, ["uprobe-nop10"], "6.18")


def test_cli_predict_plumbs_predict_from_measured(tmp_path):
    """``predict --measured CSV --to KERNEL`` writes what model.predict_from_measured gives for the same rows;
    each prediction is the bench's own figure times the model's time ratio between the kernels, worked here
    by hand from the fitted prices for uretprobe-nop (6.18 measured, 6.10 predicted)."""
    measured = calibrate.measured_frame(EXAMPLE["benches"])
    csv = tmp_path / "measured.csv"
    measured[["arch", "release", "bench", "mops"]].rename(columns={"release": "kernel"}).to_csv(csv, index=False)
    out = tmp_path / "pred.csv"
    assert cli.main(["predict", "--measured", str(csv), "--to", "6.10", "--out", str(out)]) == 0
    from_cli = pd.read_csv(out).set_index("bench")
    with pytest.warns(UserWarning):
        ours = model.predict_from_measured(pd.read_csv(csv, dtype={"kernel": str}), "6.10").set_index("bench")
    assert from_cli["predicted_mops"].to_numpy() == pytest.approx(ours["predicted_mops"].to_numpy(), rel=1e-4)
    assert (from_cli["low_80"] < from_cli["predicted_mops"]).all() and (from_cli["predicted_mops"] < from_cli["high_80"]).all()

    from uprobe_lab.bench import events_per_hit

    rows = measured.assign(rel_err=0.02)  # what predict assumes for a row without its error
    p = model.profiles.fit_with_carried_prior(rows, "x86_64", [], "m", "m").prices

    def ns(ev):  # the model's formula, priced by hand
        return (ev["user_insns"] * p["user_insn"] + ev["exceptions"] * p["exception"]
                + ev.get("syscalls", 0) * p["syscall"] + (ev["probe_lookups"] + ev["consumers"]) * p["handler"]
                + ev.get("xol_steps", 0) * p["xol_step"] + (ev["ri_pushed"] + ev["ri_popped"]) * p["return_instance"]
                + ev["uaccess_copies"] * p["uaccess"] + 5.0 * ev.get("emulated", 0))

    e18, e10 = events_per_hit("uretprobe-nop", "x86_64", "6.18"), events_per_hit("uretprobe-nop", "x86_64", "6.10")
    assert e10["exceptions"] == 2 and e18["exceptions"] == 1 and e18["syscalls"] == 1  # int3 vs syscall return
    m = measured.set_index("bench").loc["uretprobe-nop", "mops"]
    assert from_cli.loc["uretprobe-nop", "predicted_mops"] == pytest.approx(m * ns(e18) / ns(e10), rel=1e-4)


def test_profile_and_comparison():
    prof = calibrate.calibrate(EXAMPLE["benches"], cpu="vm")
    assert isinstance(prof, model.Profile) and prof.name == calibrate.PROFILE_NAME and prof.cpu == "vm"
    prices = calibrate.prices_table(prof)
    assert list(prices["price"]) == model.PRICE_NAMES and (prices["sd"] > 0).all()
    cmp = calibrate.native_vs_model(EXAMPLE["benches"], prof).set_index("bench")
    assert cmp.loc["uprobe-nop5", "published_mops"] == 4.016  # the nop5 series' 6.18 figure
    assert pd.isna(cmp.loc["uprobe-nop5-pagecross", "published_mops"])
    assert abs(cmp.loc["syscall-count", "model_error_pct"]) < 10
    assert (cmp["model_low"] < cmp["model_mops"]).all()


def test_noisy_rows_are_refused_or_dropped_by_name():
    rows = [dict(r) for r in EXAMPLE["benches"]]
    rows[2]["stddev"] = rows[2]["mops"]  # uprobe-nop: 100% / sqrt(5) = 45% relative error
    with pytest.raises(model.LabError, match="noisier than 5%: uprobe-nop x1"):
        calibrate.calibrate(rows)
    with pytest.warns(UserWarning, match="uprobe-nop x1"):
        prof = calibrate.calibrate(rows, drop_noisy=True)
    assert prof.dropped == ["uprobe-nop x1 (44.7%)"] and "uprobe-nop" not in set(prof.fit_rows["bench"])
    assert len(prof.measured) == len(rows) and "uprobe-nop" in set(prof.measured["bench"])  # kept for display


def test_a_machine_too_noisy_to_calibrate_falls_back_to_the_recording_and_says_why(monkeypatch):
    from uprobe_lab.native import price_benches
    rec = model.load_host_recording()
    noisy = [dict(r, rel_err=0.3) for r in rec["rows"]]  # every row 30%: nothing left to fit
    monkeypatch.setattr(price_benches, "price_rows_or_recorded", lambda budget_s: (noisy, price_benches.MEASURED_HERE))
    with pytest.warns(UserWarning):
        prof, source = price_benches.calibrated_or_recorded(cpu="busy box")
    assert source.startswith("RECORDED") and "noisier than 5%" in source and "measured now" in source
    assert prof.cpu == rec["host"]["cpu_model"] and "uprobe-nop" in set(prof.fit_rows["bench"])
    quiet = [dict(r) for r in rec["rows"]]
    monkeypatch.setattr(price_benches, "price_rows_or_recorded", lambda budget_s: (quiet, price_benches.MEASURED_HERE))
    with pytest.warns(UserWarning):
        prof, source = price_benches.calibrated_or_recorded(cpu="quiet box")
    assert source == "measured now on this machine" and prof.cpu == "quiet box"


def test_a_lecture_measures_the_price_benches_on_its_shorter_budget(monkeypatch):
    """./lab lecture has 20 s for chapter 06's load: the notebook's budget there, capped at LECTURE_BUDGET_S."""
    from uprobe_lab import presenter
    from uprobe_lab.native import price_benches
    asked = []
    rows = model.load_host_recording()["rows"]
    monkeypatch.setattr(price_benches, "price_rows_or_recorded",
                        lambda budget_s: asked.append(budget_s) or (rows, price_benches.MEASURED_HERE))
    for presenting in ("", "1"):
        monkeypatch.setenv(presenter.ENV, presenting)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            price_benches.calibrated_or_recorded(budget_s=0.6)
    assert asked == [0.6, price_benches.LECTURE_BUDGET_S] and price_benches.LECTURE_BUDGET_S < 0.6


def test_a_vm_calibration_says_its_dear_single_step_is_expected():
    """The recording is a VM's: its xol_step is far above what one event costs natively. Calibrated as a
    VM, the warning says that is expected and why; calibrated as bare metal, it does not."""
    rows = model.load_host_recording()["rows"]
    for virtualised in (True, False):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            prof = calibrate.calibrate(rows, drop_noisy=True, virtualised=virtualised)
        step = [w for w in prof.warnings if w.startswith("xol_step ")]
        assert len(step) == 1 and any(step[0] in str(w.message) for w in seen)
        assert ("hypervisor intercepts the single step's #DB" in step[0]) == virtualised


def test_the_single_step_prior_follows_where_the_rows_were_measured(monkeypatch):
    """Rows measured here are calibrated as this machine is (bare metal here, by the fake); rows from the
    bundled recording as the recording's machine was (a VM), so a VM's xol_step prior goes with them."""
    from uprobe_lab.native import price_benches
    rec = model.load_host_recording()
    assert rec["host"]["virtualized"] is True
    seen = []
    real = price_benches.calibrate
    monkeypatch.setattr(price_benches, "calibrate", lambda rows, **kw: seen.append(kw["virtualised"]) or real(rows, **kw))
    monkeypatch.setattr(price_benches, "host_description",
                        lambda: {"virtualized": False, "cpu_model": "a bare-metal CPU", "kernel": "6.18.0"})
    for source in (price_benches.MEASURED_HERE, "RECORDED (the bundled one; not measured here: no root)"):
        monkeypatch.setattr(price_benches, "price_rows_or_recorded", lambda budget_s: (rec["rows"], source))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            price_benches.calibrated_or_recorded()
    assert seen == [False, True]


def test_a_recording_of_the_machine_being_calibrated_stays_out_of_its_prior(monkeypatch):
    """Rows measured on a machine a bundled recording was made on would count twice, as prior and as data:
    that recording leaves the prior and the others stay; with no other recording there is no prior to give. A machine is its CPU model and kernel build, so an
    AMD VM on the kernel build of the second Intel recording (fc-v1045, as one was) leaves nothing out."""
    from uprobe_lab.native import price_benches
    rec = model.load_host_recording()
    labels = [label for *_, label in model.profiles.recorded_hosts()]
    mine = model.profiles.machine_label(rec["host"])
    assert mine == "Intel(R) Xeon(R) Processor, 6.18.44-fc-v669" and mine in labels
    seen = []
    real = price_benches.calibrate
    monkeypatch.setattr(price_benches, "calibrate", lambda rows, **kw: seen.append(real(rows, **kw)) or seen[-1])
    monkeypatch.setattr(price_benches, "price_rows_or_recorded",
                        lambda budget_s: (rec["rows"], price_benches.MEASURED_HERE))
    amd_on_v1045 = {"cpu_model": "AMD EPYC", "kernel": "6.18.44-fc-v1045", "virtualized": True}
    for host in (rec["host"], amd_on_v1045):
        monkeypatch.setattr(price_benches, "host_description", lambda host=host: host)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            price_benches.calibrated_or_recorded()
    here, other = seen
    assert here.recordings_left_out == [mine] and sorted(here.scales) == sorted(set(labels) - {mine})
    assert all(mine not in src for src in here.prior.source.values())
    assert other.recordings_left_out == [] and sorted(other.scales) == sorted(labels)
    only_mine = model.profiles.recorded_hosts()[:1]
    monkeypatch.setattr(model.profiles, "recorded_hosts", lambda: only_mine)
    with pytest.raises(model.LabError, match="every host recording is of Intel.*fc-v669, the machine being fitted"):
        model.profiles.fit_with_carried_prior(here.fit_rows, "x86_64", [], "this-machine", "x", machine=mine)


def test_a_price_only_a_dropped_row_pinned_stays_at_its_carried_prior():
    """Leaving usermode-count out as noisy leaves user_insn to the prior (the recordings', carried as a
    ratio), not to whatever the probe rows happen to say of it: the dropped row's own figure then lies inside
    the interval the calibration predicts for it."""
    rec = model.load_host_recording()
    rows = [dict(r, rel_err=0.3) if r["bench"] == "usermode-count" else dict(r) for r in rec["rows"]]
    with pytest.warns(UserWarning, match="usermode-count x1"):
        prof = calibrate.calibrate(rows, drop_noisy=True)
    i = model.PRICE_NAMES.index("user_insn")
    mean, sd = prof.prior.mean[i], prof.prior.sd()[i]
    assert mean > 0 and abs(prof.mean[i] - mean) < 2 * sd
    measured = next(r["mops"] for r in rec["rows"] if r["bench"] == "usermode-count")
    _, lo, hi = prof.interval("usermode-count", "6.18")
    assert lo <= measured <= hi


def test_a_virtual_machine_borrows_the_recordings_single_step_price_when_uprobe_ret_is_left_out():
    """uprobe-ret is the only row that pins xol_step. Left out as noisy on a virtual machine, the step takes the
    recordings' price (they are virtual machines too: their hypervisors intercept #DB as this one's does), with
    the spread of their disagreement: 6.3, 7.9 and 15.0 us on the three recording VMs, so wide once carried that
    the calibration still says the step is not pinned, and the dropped row's own figure lies inside its predicted
    interval. On bare metal that price is not carried at all: the step's prior is the uninformative one."""
    rec = model.load_host_recording()
    rows = [dict(r, rel_err=0.3) if r["bench"] == "uprobe-ret" else dict(r) for r in rec["rows"]]
    i = model.PRICE_NAMES.index("xol_step")
    with pytest.warns(UserWarning, match="uprobe-ret x1"):
        vm = calibrate.calibrate(rows, drop_noisy=True, virtualised=True)
    assert vm.prior.carried[i] and vm.prior.mean[i] > 5000
    assert all(label in vm.prior.source["xol_step"] for _, _, label in model.profiles.recorded_hosts())
    measured = next(r["mops"] for r in rec["rows"] if r["bench"] == "uprobe-ret")
    _, lo, hi = vm.interval("uprobe-ret", "6.18")
    assert lo <= measured <= hi
    with pytest.warns(UserWarning, match="not pinned by these rows.*xol_step"):
        metal = calibrate.calibrate(rows, drop_noisy=True, virtualised=False)
    assert "xol_step" in fitmod.unpinned(metal) and not metal.prior.carried[i]


def test_a_price_the_kept_rows_leave_to_the_prior_is_named_with_the_rows_left_out():
    """No row but uprobe-ret counts a single step, so with it left out the rows add nothing to xol_step: its
    sd stays its prior's, and the learner is told the price is the recorded machines', which rows were left
    out, and (on a VM) that the step is the hypervisor's. Calibrated as the AMD VM is, its own recording
    out of the prior, the two Intel VMs' steps agree closely enough to pin the prior (a wider one is named
    unpinned instead). With every row kept no price of the native table is left to the prior; on bare metal
    the step's prior is uninformative, so it is unpinned."""
    rec = model.load_host_recording()
    (amd,) = [label for *_, label in model.profiles.recorded_hosts() if label.startswith("AMD")]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kept = calibrate.calibrate(rec["rows"], drop_noisy=True, virtualised=True, machine=amd)
    assert not any("prior alone" in w for w in kept.warnings)
    rows = [dict(r, rel_err=0.3) if r["bench"] == "uprobe-ret" else dict(r) for r in rec["rows"]]
    with pytest.warns(UserWarning, match="set by the prior alone.*xol_step"):
        vm = calibrate.calibrate(rows, drop_noisy=True, virtualised=True, machine=amd)
    i = model.PRICE_NAMES.index("xol_step")
    assert vm.price_sd["xol_step"] == pytest.approx(vm.prior.sd()[i], rel=0.01)
    (note,) = [w for w in vm.warnings if "prior alone" in w]
    assert "left out as too noisy: uprobe-ret x1 (30.0%)" in note and "hypervisor's #DB intercept" in note
    table = calibrate.prices_table(vm).set_index("price")
    assert table.loc["xol_step", "warning"] == "prior alone"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        metal = calibrate.calibrate(rows, drop_noisy=True, virtualised=False, machine=amd)
    assert not any("prior alone" in w for w in metal.warnings) and "xol_step" in fitmod.unpinned(metal)
    bench_table = calibrate.calibrate(EXAMPLE["benches"])  # leaves prices no native bench counts to the prior
    assert {"pin_map", "futex_wake"} <= set(fitmod.prior_only(bench_table))
    assert "prior alone" not in set(calibrate.prices_table(bench_table)["warning"])  # as calibrate() warns of none


def test_a_run_s_speed_spread_widens_every_interval_by_its_share():
    """Var(t) gains 2 (level_sd * t)^2, worked out for uprobe-nop on 6.18: the level of the run that priced
    the machine and that of the run the figure is for, each with sd level_sd, independent."""
    rec = model.load_host_recording()
    rows = [dict(r, level_sd=0.1) for r in rec["rows"]]
    with pytest.warns(UserWarning):
        steady = calibrate.calibrate([dict(r, level_sd=0.0) for r in rec["rows"]], rel_tol=1.0)
        wobbly = calibrate.calibrate(rows, rel_tol=1.0)
    assert steady.level_sd == 0.0 and wobbly.level_sd == 0.1
    ev = model.events_for("uprobe-nop", "x86_64", "6.18")
    t0, sd0 = steady.hit_interval(ev)
    t1, sd1 = wobbly.hit_interval(ev)
    assert t1 == pytest.approx(t0) and sd1 ** 2 - sd0 ** 2 == pytest.approx(2 * (0.1 * t0) ** 2)


def test_each_interval_is_levelled_by_the_reference_timed_next_to_it():
    """A's machine slows to 0.75 in the second interval of round 1 and all of round 2, and the reference
    with it: every ratio is 2, so A's row is steady. D steps to 3.75 in round 2 on its own: its ratios are
    3, 3.75, 3 by round. The reference's round medians are 0.875, 0.75, 1 (A) and 1, 1, 1 (D): mean
    5.625 / 6 = 0.9375, the typical rate the ratios are scaled by; the levels are those medians over it."""
    from uprobe_lab.native import price_benches as pb
    rounds = {"A": [[2, 1.5], [1.5, 1.5], [2, 2]], "D": [[3, 3], [3.75, 3.75], [3, 3]]}
    refs = {"A": [[1, 0.75], [0.75, 0.75], [1, 1]], "D": [[1, 1], [1, 1], [1, 1]]}
    scale, levels = pb.reference_levels(refs)
    assert scale == pytest.approx(0.9375)
    assert levels == pytest.approx([0.875 / 0.9375, 0.8, 1 / 0.9375] + [1 / 0.9375] * 3)
    rows = pb.level_rows(rounds, refs, scale)
    assert rows["A"] == pytest.approx((1.875, 0.0))
    mops, err = rows["D"]  # median ratio 3 (MAD 0); the round medians' sd 0.4330 / 3 / sqrt(3)
    assert mops == pytest.approx(2.8125) and err == pytest.approx(0.4330127 / 3 / 3 ** 0.5)


def test_two_speed_states_are_told_apart_from_one_spread_out():
    """30 reference intervals at 1.0 and 20 at 1.32: Lloyd's iteration starts on the two values themselves
    (the 10% and 90% quantiles), so the split is midway in log, sqrt(1.32). One state spread by +-3% is one
    state; a slower state in 4 of 50 intervals (8%) is too rare to keep, and 9 intervals too few to judge."""
    from uprobe_lab.native import price_benches as pb
    assert pb.slower_state([1.0] * 30 + [1.32] * 20) == pytest.approx(1.32 ** 0.5)
    assert pb.slower_state([0.97 + 0.06 * i / 49 for i in range(50)]) is None
    assert pb.slower_state([1.0] * 4 + [1.32] * 46) is None
    assert pb.slower_state([1.0] * 5 + [1.32] * 4) is None


def test_only_intervals_the_machine_spent_in_its_slower_state_level_a_row_when_there_are_two():
    """The reference is slower below 1.15. B's rounds: the first interval has no reference before it; the
    second ran fast (its reference 1.3); the third, 3.3 against a slow 1.0, started after a fast reference
    and reads 3.3 where B runs at 3 in the slower state (3 / 1.0); the fourth sits between two slow
    references. So one ratio of 3 per round: B is 3 times the slower state's reference level, 1.0, error 0.
    C never met the slower state: its figure stays, with an infinite error, which a calibration refuses."""
    from uprobe_lab.native import price_benches as pb
    rounds = {"B": [[3, 3.3, 3.3, 3], [3, 3.3, 3.3, 3]], "C": [[2.6, 2.6]]}
    refs = {"B": [[1.0, 1.3, 1.0, 1.0], [1.0, 1.3, 1.0, 1.0]], "C": [[1.3, 1.3]]}
    scale, levels = pb.reference_levels(refs, threshold=1.15)
    assert scale == 1.0 and levels == [1.0, 1.0]  # C's round has no slower interval: no level
    rows = pb.level_rows(rounds, refs, scale, threshold=1.15)
    assert rows["B"] == pytest.approx((3.0, 0.0))
    assert rows["C"] == (2.0, math.inf)
    # both states kept: ratios 3, 2.538, 3.3, 3 per round, median 3; the scale is the mean round median,
    # (1.0 + 1.0 + 1.3) / 3 of the three rounds' (1.0, 1.0, 1.3)
    scale_all, _ = pb.reference_levels(refs)
    assert scale_all == pytest.approx(1.1)
    assert pb.level_rows(rounds, refs, scale_all)["B"][0] == pytest.approx(3.3)


def test_the_calibration_names_the_rows_its_model_error_comes_from():
    """The recording fits within a few percent. Make its uprobe-push row 1.4 times as fast (a hit 29% shorter
    than its events say, where the other rows pin every price it pays) and that row leads the misfits, as
    faster; the model's own error, which every interval carries, grows, and the note
    says both."""
    rows = model.load_host_recording()["rows"]
    with pytest.warns(UserWarning):
        fits = calibrate.calibrate(rows, rel_tol=1.0)
    assert max(abs(r) for _, r in fitmod.misfits(fits)) < 0.05
    off = [dict(r, mops=1.4 * r["mops"]) if r["bench"] == "uprobe-push" else r for r in rows]
    with pytest.warns(UserWarning):
        misfit = calibrate.calibrate(off, rel_tol=1.0)
    (label, resid), *rest = fitmod.misfits(misfit)
    assert label == "uprobe-push x1" and resid < -0.15 and all(abs(r) < abs(resid) for _, r in rest)
    assert misfit.sigma_model > 2 * fits.sigma_model
    assert f"{100 * misfit.sigma_model:.1f}%" in misfit.fit_note
    assert f"uprobe-push x1 {100 * abs(resid):.1f}% faster" in misfit.fit_note


def test_the_speed_note_compares_the_native_tables_run_with_the_price_benches():
    rec = model.load_host_recording()["rows"]
    with pytest.warns(UserWarning):
        prof = calibrate.calibrate(rec, rel_tol=1.0)
    price_nop = next(r["mops"] for r in rec if r["bench"] == "uprobe-nop" and r["consumers"] == 1)
    table = example.load_example()["benches"]  # another machine's run, 30% faster on uprobe-nop
    note = calibrate.run_speed_note(table, prof)
    assert "ran at another speed than the price benches" in note and "30% faster" in note
    same = [dict(r, mops=price_nop * 1.005) if r["bench"] == "uprobe-nop" else r for r in table]
    assert calibrate.run_speed_note(same, prof).startswith("the native table ran at the price benches' speed")
    slow = [dict(r, mops=price_nop * 0.6) if r["bench"] == "uprobe-nop" else r for r in table]
    assert "40% slower" in calibrate.run_speed_note(slow, prof)
    assert "unknown" in calibrate.run_speed_note([r for r in table if r["bench"] != "uprobe-nop"], prof)
    noisy = [dict(r, mops=price_nop * 0.8, stddev=price_nop * 0.4) if r["bench"] == "uprobe-nop" else r for r in table]
    assert "too noisy to tell" in calibrate.run_speed_note(noisy, prof) and "(-20%)" in calibrate.run_speed_note(noisy, prof)


def test_the_calibration_says_which_speed_state_its_figures_are():
    two = [{"machine_states": 2, "state_share": 0.6, "fast_over_slow": 1.32}]
    assert "two speeds, 1.32 times apart" in calibrate.machine_state_note(two) and "(60% of" in calibrate.machine_state_note(two)
    assert "one speed" in calibrate.machine_state_note([{"machine_states": 1, "state_share": 1.0, "fast_over_slow": None}])
    rec = model.load_host_recording()["rows"]  # recorded before the rows said
    with pytest.warns(UserWarning):
        assert "do not say" in calibrate.calibrate(rec, rel_tol=1.0).state_note
    # a row that met the slower state fewer than twice has no error to give: the refusal says why
    unmet = [dict(r, rel_err=math.inf) if r["bench"] == "uprobe-nop-compat" else r for r in rec]
    with pytest.raises(model.LabError, match=r"uprobe-nop-compat x1 \(no error: fewer than two intervals in the "
                                             r"machine's slower state\)"):
        calibrate.calibrate(unmet, rel_tol=1.0)


def test_a_wild_interval_does_not_blow_up_a_row_s_error():
    """One interval whose thread clock stalled reads as a huge rate; the sd behind the median's error is
    1.4826 * MAD: ten rates of 0.99, one of 1.0, nine of 1.01 and one of 1e6 have median 1.0 and MAD 0.01."""
    from uprobe_lab.native import price_benches as pb
    rates = [0.99] * 10 + [1.0] + [1.01] * 9 + [1e6]
    assert pb.median_rel_err(rates) == pytest.approx(1.2533 * 1.4826 * 0.01 / 21 ** 0.5, rel=1e-3)


def test_implausible_price_is_flagged():
    """The bundled host recording is from a VM whose hypervisor intercepts #DB: xol_step far above the
    plausible range, and said so."""
    rec = model.load_host_recording()
    with pytest.warns(UserWarning, match="xol_step fitted at"):
        prof = calibrate.calibrate(rec["rows"], rel_tol=1.0)
    assert any(w.startswith("xol_step") for w in prof.warnings)
    assert calibrate.prices_table(prof).set_index("price").loc["xol_step", "warning"] == "outside plausible range"


def test_interval_share_is_the_gap_over_the_side_it_crosses():
    """Worked by hand on 1.0 with interval 0.9..1.2: 1.1 uses 0.1 of the upper side's 0.2, 0.95 uses 0.05 of
    the lower side's 0.1, 0.8 twice that side; an interval of no width holds only its own figure."""
    share = calibrate.interval_share
    assert share(1.1, 1.0, 0.9, 1.2) == pytest.approx(0.5) and share(0.95, 1.0, 0.9, 1.2) == pytest.approx(0.5)
    assert share(0.8, 1.0, 0.9, 1.2) == pytest.approx(2.0)
    assert share(1.0, 1.0, 1.0, 1.0) == 0.0 and share(1.1, 1.0, 1.0, 1.0) == float("inf")


def test_two_runs_agreement_table():
    rec = model.load_host_recording()
    prof = calibrate.calibrate(rec["rows"], rel_tol=1.0)
    pred = calibrate.predict_kernels(prof, rec["rows"])
    same = calibrate.runs_agree(pred, pred)
    assert same["a_in_b"].all() and same["b_in_a"].all()
    off = pred.assign(**{k: pred[k] * 2 for k in KERNELS})
    assert not calibrate.runs_agree(pred, off)["b_in_a"].any()  # doubled figures: outside the intervals
    # a run that found the whole machine 30% faster: every figure moves, no speedup does
    faster = pred.assign(**{c: pred[c] * 1.3 for k in KERNELS for c in (k, f"{k} low", f"{k} high")})
    assert not calibrate.runs_agree(pred, faster)["a_in_b"].any()
    same_change = calibrate.runs_agree(pred, faster, change=True)
    assert same_change["a_in_b"].all() and same_change["b_in_a"].all()
    assert (same["a_share"] == 0).all() and (same_change["a_share"] == 0).all()  # no gap uses no interval
    # measured on 6.18: back on 6.10, without the uretprobe syscall, uretprobe-nop slows down, inside an
    # interval that excludes no change; 6.11 returns as 6.18 does
    ch = pred.set_index("bench").loc["uretprobe-nop"]
    assert ch["6.10 change high"] < 1.0 and ch["6.11 change"] == 1.0


def test_rows_from_two_architectures_are_refused():
    row = dict(EXAMPLE["benches"][2], arch="arm64")
    with pytest.raises(model.LabError, match="one architecture"):
        calibrate.calibrate(EXAMPLE["benches"] + [row])


def test_a_kernel_older_than_every_modelled_version_is_measured_under_the_oldest():
    """Ubuntu 22.04's 5.15 follows 6.10's per-hit rules (the int3 return trampoline, the stepped nop5)."""
    row = dict(EXAMPLE["benches"][2], kernel="5.15.0-91-generic")
    frame = calibrate.measured_frame([row])
    assert (frame["kernel"].tolist(), frame["release"].tolist()) == (["6.10"], ["5.15.0-91-generic"])
    with pytest.raises(model.LabError, match="'darwin' is not a kernel release"):
        calibrate.measured_frame([dict(row, kernel="darwin")])


def test_views():
    cmp = calibrate.native_vs_model(EXAMPLE["benches"], example_profile())
    fig = views.native_chart(cmp)
    assert isinstance(fig, Figure) and len(fig.axes[0].containers) >= 3
    fig.draw_without_rendering()  # the legend's long labels go below the bars, not beside them where they squeeze the plot
    assert fig.axes[0].get_window_extent().width > 0.8 * fig.bbox.width
    assert fig.legends[0].get_window_extent().y1 < fig.axes[0].get_window_extent().y0
    pred = calibrate.predict_kernels(example_profile(), EXAMPLE["benches"])
    assert isinstance(views.predictions_chart(pred), Figure)
    text = views.trampoline_listing(EXAMPLE["snapshots"]["uprobe-nop5"])
    assert "call" in text and "mov rax, 0x150" in text and "[uprobes-trampoline]" in text
    assert "[uprobes]" in views.maps_lines(EXAMPLE["snapshots"]["uretprobe-nop"])
    assert list(views.results_table(EXAMPLE["benches"]).columns[:4]) == ["bench", "mops", "stddev", "hits"]
    assert "kernel" not in views.results_table(EXAMPLE["benches"]).columns  # one kernel: the banner names it
    table = compare.compare(EXAMPLE["snapshots"]["uprobe-nop5"], EXAMPLE["snapshots"]["uprobe-nop5"])
    html = views.comparison_style(table).to_html()
    assert table.set_index("what").loc["probe site bytes", "same"] is None and ">None<" not in html
    assert f">{views.NOT_COMPARED}<" in html
    two = [dict(EXAMPLE["benches"][0], kernel="6.11.0"), *EXAMPLE["benches"][1:]]
    assert list(views.results_table(two)["kernel"])[:2] == ["6.11.0", EXAMPLE["benches"][1]["kernel"]]


# ------------------------------------------------------------------------------------------------
# the CLI
# ------------------------------------------------------------------------------------------------
def test_cli_not_linux_exits_2(monkeypatch, capsys):
    monkeypatch.setattr(os, "uname", lambda: Uname("Darwin", "h", "23.0", "#1", "arm64"))
    assert cli.main(["bench", "--mode", "native", "uprobe-nop"]) == 2
    err = capsys.readouterr().err
    assert "native benchmarks are not possible here" in err and "needs Linux" in err and "Traceback" not in err


def test_cli_permission_error_exits_2(monkeypatch, capsys):
    def refuse(*a, **k):
        from uprobe_lab.native.errors import permission_denied
        raise permission_denied(OSError(1, "Operation not permitted"))

    monkeypatch.setattr(native_bench, "check_native_support", refuse)
    assert cli.main(["bench", "--mode", "native"]) == 2
    assert "CAP_SYS_ADMIN" in capsys.readouterr().err


def _cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "uprobe_lab", "bench", "--mode", "native", *args],
                          capture_output=True, text=True, env=ENV, timeout=120, **kw)


@native
def test_cli_json_rows():
    out = _cli("uprobe-nop", "uretprobe-nop5", "--iterations", "3000", "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [r["bench"] for r in rows] == ["uprobe-nop", "uretprobe-nop5"]
    for r in rows:
        assert r["hits"] == 3000 * native_bench.DEFAULT_REPEATS == r["iterations"] * r["repeats"]
        assert r["mops"] > 0 and r["stddev"] >= 0 and r["kernel"] == os.uname().release
    assert "it/s" not in out.stderr  # no bar with --json


@native
def test_cli_table_has_a_progress_bar():
    out = _cli("uprobe-ret", "uretprobe-ret", "--iterations", "4000")
    assert out.returncode == 0, out.stderr
    assert "uprobe-ret" in out.stdout and "M/s" in out.stdout
    assert "native" in out.stderr and "/10" in out.stderr  # 2 benches x 5 repeats


@native
def test_cli_unknown_bench_exits_2():
    out = _cli("uprobe-bogus")
    assert out.returncode == 2 and "uprobe-bogus" in out.stderr and "Traceback" not in out.stderr


@native
def test_cli_without_cap_sys_admin_exits_2():
    import shutil

    if not shutil.which("setpriv"):
        skip_or_fail("needs setpriv (util-linux) to take CAP_SYS_ADMIN away")
    out = subprocess.run(["setpriv", "--bounding-set", "-sys_admin", sys.executable, "-m", "uprobe_lab", "bench",
                          "--mode", "native", "uprobe-nop"], capture_output=True, text=True, env=ENV, timeout=60)
    assert out.returncode == 2 and "CAP_SYS_ADMIN" in out.stderr and "Traceback" not in out.stderr


@native
def test_cli_interrupted_releases_everything(private_scratch):
    scratch = lambda: set(glob.glob(os.path.join(code.find_exec_dir(), "uprobe_lab-native-*")))  # noqa: E731
    before = scratch()
    proc = subprocess.Popen([sys.executable, "-m", "uprobe_lab", "bench", "--mode", "native", "uprobe-ret",
                             "--iterations", "2000000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**ENV, code.ENV_DIR: str(private_scratch)})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # wait until the bench file is mapped and probed
        try:
            with open(f"/proc/{proc.pid}/maps") as f:
                if "bench_targets.bin" in f.read() and any(
                        os.readlink(f"/proc/{proc.pid}/fd/{fd}") == "anon_inode:[perf_event]"
                        for fd in os.listdir(f"/proc/{proc.pid}/fd")):
                    break
        except OSError:
            pass
        time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail("the native run never attached its probe")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in err and "Traceback" not in err
    assert scratch() == before


def test_kernel_change_table_and_picker(monkeypatch):
    import pandas as pd

    from uprobe_lab.native.calibrate import kernel_change
    from uprobe_lab.errors import LabError
    from uprobe_lab.views.native import kernel_picker

    pred = pd.DataFrame({"bench": ["uprobe-nop5"], "measured_on": ["6.18"], "measured_mops": [5.0], "stddev": [0.1],
                         "6.11": [1.5], "6.18": [5.0]})
    table = kernel_change(pred, "6.11")
    assert table["predicted_on_6.11"].tolist() == [1.5] and table["change_pct"].tolist() == [-70.0]
    with pytest.raises(LabError, match="no prediction for kernel '6.10'"):
        kernel_change(pred, "6.10")
    # measured on a kernel the table does not predict (7.2): the change comes from the model's own speedup
    on_72 = pred.assign(measured_on="7.2", **{"6.11 change": [0.3]})
    assert kernel_change(on_72, "6.11")["change_pct"].tolist() == [-70.0]  # 100 * (0.3 - 1)
    # the picker calls views.native's kernel_change: spy on it there
    shown = []
    monkeypatch.setattr(views, "kernel_change",
                        lambda p, k: shown.append(k) or kernel_change(p, k))
    picker, _ = kernel_picker(pred).children
    assert list(picker.options) == ["6.11", "6.18"]
    assert shown == ["6.11"]  # drawn once for the first kernel
    picker.value = "6.18"  # redraws through kernel_change; the browser test checks what a learner sees
    assert shown == ["6.11", "6.18"], "choosing a kernel did not redraw its table"
    precise = pred.assign(**{"6.11": [1.4845521]})  # shown to three decimals, not pandas' six
    assert ">1.485<" in kernel_picker(precise).children[1].value and "1.4845" not in kernel_picker(precise).children[1].value


# ------------------------------------------------------------------------------------------------
# the price benches (this host)
# ------------------------------------------------------------------------------------------------
@pytest.mark.slow
@native
def test_price_benches_measure_each_event_kind_here():
    """A short run on this host: every configuration has its rate, an error and its interval count; more
    consumers on one site cost more per hit; 6.18 optimises the nop5 and not its page-crossing twin."""
    from uprobe_lab.native import price_benches

    before = perf_fds()
    # 1 vs 8 consumers: about twice the time per hit, far beyond the drift of a busy VM's speed between rounds
    configs = [("uprobe-nop", 1), ("uprobe-nop", 8), ("uprobe-nop5", 1), ("uprobe-nop5-pagecross", 1)]
    rows = {(r["bench"], r["consumers"]): r for r in price_benches.measure_price_rows(configs, budget_s=0.4)}
    for r in rows.values():
        assert r["mops"] > 0 and r["rel_err"] > 0 and r["intervals"] >= 2 * price_benches.ROUNDS
        assert r["machine_states"] in (1, 2) and 0 < r["state_share"] <= 1
        assert (r["fast_over_slow"] is None) == (r["machine_states"] == 1)
    assert rows[("uprobe-nop", 8)]["mops"] < rows[("uprobe-nop", 1)]["mops"]
    if modelled_kernel(os.uname().release) == "6.18":
        assert rows[("uprobe-nop5", 1)]["optimized"] is True
        assert rows[("uprobe-nop5-pagecross", 1)]["optimized"] is False
    assert perf_fds() == before  # every probe detached


def test_native_runs_pin_to_the_first_allowed_cpu_as_the_bench_does_and_restore_the_mask(monkeypatch, tmp_path):
    """bench.c's next_cpu() gives its one producer CPU 0 when no list is given: the lowest CPU the process may
    use, whichever it is running on; the old mask comes back after the block, even when it raises."""
    monkeypatch.setenv(native_bench.CPU_LOCK_DIR_ENV, str(tmp_path))
    masks = [{2, 5, 7}]
    monkeypatch.setattr(native_bench.os, "sched_getaffinity", lambda pid: set(masks[-1]))
    monkeypatch.setattr(native_bench.os, "sched_setaffinity", lambda pid, cpus: masks.append(set(cpus)))
    with pytest.raises(RuntimeError), native_bench.pinned_to_one_cpu():
        assert masks[-1] == {2}
        raise RuntimeError
    assert masks == [{2, 5, 7}, {2}, {2, 5, 7}]


def test_a_second_bench_takes_the_next_free_cpu_and_warns_when_none_is_left(monkeypatch, tmp_path):
    """Two producers pinned to one CPU would each measure about half their rate: a CPU another lab bench
    holds is skipped, and with every allowed CPU held the run says so."""
    monkeypatch.setenv(native_bench.CPU_LOCK_DIR_ENV, str(tmp_path))
    masks = [{0, 1}]
    monkeypatch.setattr(native_bench.os, "sched_getaffinity", lambda pid: set(masks[0]))
    monkeypatch.setattr(native_bench.os, "sched_setaffinity", lambda pid, cpus: masks.append(set(cpus)))
    with native_bench.pinned_to_one_cpu():  # another bench, on CPU 0
        with native_bench.pinned_to_one_cpu():
            assert masks[-1] == {1}
            with pytest.warns(RuntimeWarning, match=r"every CPU this process may use \(0, 1\) runs another lab bench: "
                              rf"this one shares CPU 0 with pid {os.getpid()} "):
                with native_bench.pinned_to_one_cpu():
                    assert masks[-1] == {0}
    with native_bench.pinned_to_one_cpu():  # all released: CPU 0 again
        assert masks[-1] == {0}


def test_a_private_lock_directory_keeps_a_bench_clear_of_the_machine_s_others(monkeypatch, tmp_path):
    """A test (or a CI job) gives the locks a directory of its own: what another bench holds in the shared one
    does not touch it."""
    shared, mine = tmp_path / "shared", tmp_path / "mine"
    monkeypatch.setenv(native_bench.CPU_LOCK_DIR_ENV, str(shared))
    assert native_bench.cpu_lock_dir() == shared
    with cpu_held_elsewhere(0, shared):
        with native_bench.cpu_lock(0) as free:
            assert not free
        monkeypatch.setenv(native_bench.CPU_LOCK_DIR_ENV, str(mine))
        with native_bench.cpu_lock(0) as free:
            assert free
    monkeypatch.delenv(native_bench.CPU_LOCK_DIR_ENV)
    assert native_bench.cpu_lock_dir() == native_bench.CPU_LOCK_DIR


LOCK_AS_NOBODY = """
import sys
from uprobe_lab.native.bench import cpu_lock
with cpu_lock(0) as mine:
    print("held" if mine else "taken")
"""


def test_another_user_s_lock_directory_is_shared_read_only_not_a_traceback(tmp_path):
    """A bench run by one user made the shared lock directory (0755) and its files (0644): another user's bench
    (here nobody, with setpriv) takes the lock read-only, which flock allows, instead of dying on EACCES."""
    import shutil
    import tempfile

    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to run a bench as another user")
    shared = Path(tempfile.mkdtemp(prefix="uprobe_lab-locks-"))  # not under tmp_path: nobody must reach it
    try:
        shared.chmod(0o755)
        (shared / "cpu0.lock").write_text("1\n")
        (shared / "cpu0.lock").chmod(0o644)
        repo = str(Path(__file__).resolve().parents[1])
        env = {**os.environ, native_bench.CPU_LOCK_DIR_ENV: str(shared), "PYTHONPATH": repo, "HOME": str(shared)}
        run = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable,
                              "-c", LOCK_AS_NOBODY], capture_output=True, text=True, env=env, cwd="/", timeout=60)
        assert (run.returncode, run.stdout, run.stderr) == (0, "held\n", "")
        assert (shared / "cpu0.lock").read_text() == "1\n"  # another user's file, not written
        with cpu_held_elsewhere(0, shared):  # and the read-only lock still keeps two benches apart
            run = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable,
                                  "-c", LOCK_AS_NOBODY], capture_output=True, text=True, env=env, cwd="/", timeout=60)
            assert run.stdout == "taken\n", run.stderr
    finally:
        shutil.rmtree(shared)


def test_a_link_planted_in_the_lock_directory_is_not_followed_to_truncate_its_target(monkeypatch, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("not the lab's\n")
    locks = tmp_path / "locks"
    locks.mkdir()
    (locks / "cpu0.lock").symlink_to(victim)
    monkeypatch.setenv(native_bench.CPU_LOCK_DIR_ENV, str(locks))
    with pytest.warns(RuntimeWarning, match=rf"bench locks in {locks} cannot be taken .*may share a CPU"):
        with native_bench.cpu_lock(0) as mine:
            assert mine
    assert victim.read_text() == "not the lab's\n"


def test_a_lock_directory_that_cannot_be_made_warns_with_the_way_out_and_the_bench_runs(monkeypatch, tmp_path):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv(native_bench.CPU_LOCK_DIR_ENV, str(tmp_path / "file" / "locks"))
    with pytest.warns(RuntimeWarning, match=f"set {native_bench.CPU_LOCK_DIR_ENV} to a directory of your own"):
        with native_bench.cpu_lock(0) as mine:
            assert mine


def test_a_cpu_another_bench_holds_is_waited_for_saying_who_how_long_and_how_to_stop(monkeypatch, tmp_path, capsys):
    from uprobe_lab.native.many_cpus import held_cpu

    monkeypatch.setenv(native_bench.CPU_LOCK_DIR_ENV, str(tmp_path))
    with cpu_held_elsewhere(3, tmp_path) as pid:
        t0 = time.monotonic()
        with pytest.raises(cli.LabError, match=rf"CPU 3 ran another lab bench \(pid {pid} \(.*-c.*\)\) for the 1 s"):
            with held_cpu(3, wait_s=1):
                pass
        assert time.monotonic() - t0 < 3
    said = capsys.readouterr().err.splitlines()
    assert len(said) == 1, said  # said once, not once per look
    assert said[0].startswith(f"waiting for CPU 3: pid {pid} (") and "up to 1 s more" in said[0]
    assert "Ctrl-C to stop" in said[0]


@pytest.mark.parametrize("row, noisy", [
    # the run: native -p 2 --iterations 1000 printed 25.637 ± 35.670 M/s
    ({"bench": "uprobe-nop", "cpus": 2, "iterations": 1000, "repeats": 5, "mops": 25.637, "stddev": 35.670}, True),
    ({"bench": "uprobe-nop", "iterations": 100_000, "repeats": 5, "mops": 3.0, "stddev": 1.6}, True),
    ({"bench": "uprobe-nop", "iterations": 100_000, "repeats": 5, "mops": 3.0, "stddev": 1.4}, False),
    ({"bench": "uprobe-nop", "iterations": 100_000, "repeats": 1, "mops": 3.0, "stddev": 0.0}, False),
    ({"bench": "uprobe-nop10", "refused": "refused by this kernel"}, False),
])
def test_a_row_whose_intervals_disagree_is_called_too_short_to_trust(row, noisy):
    note = native_bench.spread_note(row)
    assert (note is not None) == noisy
    if noisy:
        assert f"{row['repeats']} intervals of {row['iterations']:_} calls" in note
        assert f"raise --iterations (say to {10 * row['iterations']:_})" in note


def test_the_cli_warns_of_a_noisy_row_after_its_table(monkeypatch, capsys):
    from uprobe_lab.native import many_cpus

    row = {"bench": "uprobe-nop", "arch": "x86_64", "mode": "native", "kernel": "6.18", "cpus": 2, "iterations": 1000,
           "repeats": 5, "hits": 10_000, "mops": 25.637, "mops_per_cpu": 12.8185, "stddev": 35.670}
    monkeypatch.setattr(many_cpus, "run_native_benches_on_cpus", lambda *a, **k: [row])
    assert cli.main(["bench", "uprobe-nop", "--mode", "native", "-p", "2", "--iterations", "1000"]) == 0
    out, err = capsys.readouterr()
    assert "25.637 ± 35.670M/s" in out
    assert err.strip() == f"warning: {native_bench.spread_note(row)}"


def test_the_one_cpu_sharing_warning_is_one_plain_line(monkeypatch, tmp_path, capsys):
    """Every CPU held by another bench: the run goes on, and the CLI says so in one line, not Python's two."""
    import uprobe_lab.native as native_pkg

    monkeypatch.setenv(native_bench.CPU_LOCK_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(native_bench.os, "sched_getaffinity", lambda pid: {0})
    monkeypatch.setattr(native_bench.os, "sched_setaffinity", lambda pid, cpus: None)

    def bench(*args, **kwargs):
        with native_bench.pinned_to_one_cpu():
            return []
    monkeypatch.setattr(native_pkg, "run_native_benches", bench)
    with cpu_held_elsewhere(0, tmp_path) as pid:
        assert cli.main(["bench", "uprobe-nop", "--mode", "native"]) == 0
    err = capsys.readouterr().err
    assert err.startswith(f"warning: every CPU this process may use (0) runs another lab bench: this one shares "
                          f"CPU 0 with pid {pid} (")
    assert err.count("\n") == 1 and "RuntimeWarning" not in err and "warnings.warn" not in err


def _price_benches_without_probes(monkeypatch):
    """The price benches' module with nothing attached or pinned and a reference that always reads 1: a test
    gives its own ``_round``."""
    from uprobe_lab.native import price_benches as pb

    monkeypatch.setattr(pb, "check_native_support", lambda: "x86_64")
    monkeypatch.setattr(pb, "pinned_to_one_cpu", contextlib.nullcontext)
    monkeypatch.setattr(pb, "NativeCode", lambda arch: contextlib.nullcontext())
    monkeypatch.setattr(pb, "attached_config", lambda arch, bench, consumers, state: contextlib.nullcontext())
    monkeypatch.setattr(pb, "reference_probe", lambda nc: contextlib.nullcontext(lambda: 1.0))
    return pb


@pytest.mark.parametrize("noisy, rounds_run", [(False, [8, 8, 8]), (True, [32, 8, 8])])
def test_price_benches_run_more_rounds_until_every_row_reaches_its_error(monkeypatch, noisy, rounds_run):
    """Rows that reach rel_tol in the first 8 rounds stop there. A row whose intervals alternate 0.5 and 1.5
    (median 1, robust sd 0.74: error 1.2533 * 0.74 / sqrt(64) = 12% after 32 rounds of two) never reaches
    2%: it alone gets more rounds, up to four times as many, and says it did not reach its error; the rows
    that reached theirs are not timed again."""
    pb = _price_benches_without_probes(monkeypatch)

    def fake_round(nc, bench, consumers, budget_s, state, reference):
        rates = [0.5, 1.5] if noisy and bench == "uprobe-nop" else [1.0, 1.0]
        state.setdefault("rounds", []).append(rates)
        state.setdefault("refs", []).append([reference(), reference()])
        state["calls"] = 1

    monkeypatch.setattr(pb, "_round", fake_round)
    configs = [("uprobe-nop", 1), ("syscall-count", 0), ("usermode-count", 0)]
    rows = pb.measure_price_rows(configs, budget_s=0.01, rel_tol=0.02)
    assert [r["rounds"] for r in rows] == rounds_run
    assert [r["reached"] for r in rows] == [not noisy, True, True]
    assert [r["intervals"] for r in rows] == [2 * n for n in rounds_run]


def test_a_row_pushed_back_above_its_error_gets_rounds_again_up_to_its_own_limit(monkeypatch):
    """The rows are levelled again after every round, so a row that reached its error can be pushed back above
    it by the reference intervals of later rounds (the fake levelling does so to B once A, which never reaches
    its error, has 30 rounds). B then gets rounds again, alone once A stops at 4 x 8, until it too has 32."""
    pb = _price_benches_without_probes(monkeypatch)

    def fake_round(nc, bench, consumers, budget_s, state, reference):
        state.setdefault("rounds", []).append([1.0, 1.0])
        state.setdefault("refs", []).append([1.0, 1.0])
        state["calls"] = 1

    a, b, c = ("uprobe-nop", 1), ("syscall-count", 0), ("usermode-count", 0)

    def fake_levelling(round_rates, round_refs, scale, threshold=None):
        b_err = 0.5 if len(round_rates[a]) >= 30 else 0.0
        return {a: (1.0, 0.5), b: (1.0, b_err), c: (1.0, 0.0)}

    monkeypatch.setattr(pb, "_round", fake_round)
    monkeypatch.setattr(pb, "level_rows", fake_levelling)
    rows = pb.measure_price_rows([a, b, c], budget_s=0.01, rel_tol=0.02)
    assert [r["rounds"] for r in rows] == [32, 32, 8]
    assert [r["reached"] for r in rows] == [False, False, True]


class _FakeCode:
    """A NativeCode stand-in: its own file per copy, every call counted."""

    made: list = []

    def __init__(self, arch):
        self.path, self.runs = f"/copy{len(self.made)}", 0
        self.made.append(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.closed = True

    def addr(self, name):
        return 0x1000

    def offset(self, name):
        return 0x10

    def run(self, addr, n):
        self.runs += n

    def read(self, name):
        return b"\x90"


@pytest.mark.parametrize("stop", [None, KeyboardInterrupt])
def test_price_benches_attach_each_configuration_once_on_its_own_copy_and_always_detach(monkeypatch, stop):
    """Three rounds of uprobe-nop x1, uprobe-nop x2 and uretprobe-nop x1 open 1 + 2 + 1 events, once, not once a
    round; each configuration probes its own copy of the code (uprobe-nop and uretprobe-nop share a function),
    and the reference has one more. Every event is closed at the end, and also when Ctrl-C stops a round."""
    from uprobe_lab.native import price_benches as pb

    events = []

    class FakeEvent:
        def __init__(self, path, offset, retprobe=False):
            self.path, self.retprobe, self.fd, self.open = path, retprobe, len(events), True
            events.append(self)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.open = False

    class FakeCounter:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

        def attach(self, fd):
            pass

        def count(self):  # every call sees many more runs than the last: the check in _round passes
            self.runs = getattr(self, "runs", 0) + 10**6
            return self.runs

    _FakeCode.made = []
    monkeypatch.setattr(pb, "check_native_support", lambda: "x86_64")
    monkeypatch.setattr(pb, "pinned_to_one_cpu", contextlib.nullcontext)
    monkeypatch.setattr(pb, "NativeCode", _FakeCode)
    monkeypatch.setattr(pb, "bench_trigger_event", FakeEvent)
    monkeypatch.setattr(pb, "BpfCounter", FakeCounter)
    monkeypatch.setattr(pb, "reference_probe", lambda nc: contextlib.nullcontext(lambda: 1.0))
    monkeypatch.setattr(pb, "calls_uprobe_trampoline", lambda code, addr, maps: False)
    monkeypatch.setattr(pb, "parse_maps", lambda: [])
    monkeypatch.setattr(pb, "_interval_calls", lambda nc, addr: 7)
    monkeypatch.setattr(pb, "_time_intervals", lambda nc, addr, calls, n, reference, state: (
        state["rounds"][-1].extend([1.0] * n), state["refs"][-1].extend([1.0] * n)))
    rounds_run = []

    def on_round(*args):
        rounds_run.append(args[1:3])
        if stop and len(rounds_run) == 5:
            raise stop
        return real_round(*args)

    real_round = pb._round
    monkeypatch.setattr(pb, "_round", on_round)
    configs = [("uprobe-nop", 1), ("uprobe-nop", 2), ("uretprobe-nop", 1)]
    with pytest.raises(stop) if stop else contextlib.nullcontext():
        pb.measure_price_rows(configs, budget_s=0.0, rounds=3, rel_tol=1.0)
    assert len(rounds_run) == (5 if stop else 9)
    assert [(e.path, e.retprobe) for e in events] == [("/copy1", False), ("/copy2", False), ("/copy2", False),
                                                      ("/copy3", True)]  # /copy0 is the reference's
    assert not any(e.open for e in events) and all(c.closed for c in _FakeCode.made)


def test_price_benches_command_measures_the_configurations_and_rounds_it_is_given(monkeypatch, capsys):
    """``python -m uprobe_lab.native.price_benches --configs ... --rounds ...`` (benchmarks/price_processes.py
    runs it in fresh processes): the named configurations, in order, with that many rounds; rows as JSON."""
    from uprobe_lab.native import price_benches as pb

    seen = {}

    def fake_measure(configs, budget_s, rel_tol, rounds):
        seen.update(configs=configs, budget_s=budget_s, rel_tol=rel_tol, rounds=rounds)
        return [{"bench": b, "consumers": c} for b, c in configs]

    monkeypatch.setattr(pb, "measure_price_rows", fake_measure)
    assert pb.main(["--configs", "uprobe-nop:8,syscall-count:0", "--rounds", "3", "--budget", "0.5"]) == 0
    assert seen == {"configs": [("uprobe-nop", 8), ("syscall-count", 0)], "budget_s": 0.5, "rel_tol": pb.REL_TOL,
                    "rounds": 3}
    assert json.loads(capsys.readouterr().out) == [{"bench": "uprobe-nop", "consumers": 8},
                                                   {"bench": "syscall-count", "consumers": 0}]
    assert pb.main([]) == 0 and seen["configs"] == pb.PRICE_CONFIGS and seen["rounds"] == pb.ROUNDS
    with pytest.raises(SystemExit):
        pb.main(["--configs", "uprobe-nop"])
    assert "takes bench:consumers items" in capsys.readouterr().err


def test_price_rows_ratio_is_over_the_reference_whatever_the_machine_s_level(monkeypatch):
    """Rounds alternate between the machine at one speed (configuration 1 M/s, reference 2 M/s) and at twice
    it (2 and 4): every interval's ratio is 0.5, so the row's ratio is 0.5 with no error. Two states, half the
    reference's intervals each, 4 / 2 = 2 apart: its mops is that ratio times the reference's typical rate in
    the slower state, 2: 1.0 M/s (with both states kept it would be the mean round median's, (2 + 4) / 2 = 3)."""
    from uprobe_lab.native import price_benches as pb

    monkeypatch.setattr(pb, "check_native_support", lambda: "x86_64")
    monkeypatch.setattr(pb, "pinned_to_one_cpu", contextlib.nullcontext)
    monkeypatch.setattr(pb, "NativeCode", lambda arch: contextlib.nullcontext())
    monkeypatch.setattr(pb, "attached_config", lambda arch, bench, consumers, state: contextlib.nullcontext())
    monkeypatch.setattr(pb, "reference_probe", lambda nc: contextlib.nullcontext(None))

    def fake_round(nc, bench, consumers, budget_s, state, reference):
        speed = 1 + len(state.get("rounds", [])) % 2
        state.setdefault("rounds", []).append([speed, speed])
        state.setdefault("refs", []).append([2 * speed, 2 * speed])
        state["calls"] = 1

    monkeypatch.setattr(pb, "_round", fake_round)
    (row,) = pb.measure_price_rows([("uprobe-nop", 1)], budget_s=0.01)
    assert row["ratio"] == pytest.approx(0.5) and row["mops"] == pytest.approx(1.0)
    assert row["rel_err"] == 0 and row["rounds"] == pb.ROUNDS
    assert (row["machine_states"], row["state_share"], row["fast_over_slow"]) == (2, 0.5, 2.0)
    assert row["level_sd"] == pytest.approx(statistics.stdev([2 / 3, 4 / 3] * (pb.ROUNDS // 2)))  # both states


def test_price_benches_refuse_a_configuration_on_the_reference_s_own_function(monkeypatch):
    """usdt-nop's target is usdt_nop, where the reference probe sits: one site with two consumers, each
    hit would run both programs, in the configuration's intervals and the reference's, so the run is refused
    before anything is attached."""
    from uprobe_lab.native import price_benches as pb

    monkeypatch.setattr(pb, "check_native_support", lambda: "x86_64")
    monkeypatch.setattr(pb, "NativeCode", lambda arch: pytest.fail("attached before refusing"))
    with pytest.raises(model.LabError, match="usdt-nop probe the reference's own function usdt_nop"):
        pb.measure_price_rows([("uprobe-nop", 1), ("usdt-nop", 1)], budget_s=0.01)


def test_price_benches_refuse_no_rounds_and_no_configurations(monkeypatch):
    from uprobe_lab.native import price_benches as pb

    monkeypatch.setattr(pb, "check_native_support", lambda: "x86_64")
    monkeypatch.setattr(pb, "compat_reason", lambda: "no IA32 emulation")
    with pytest.raises(ValueError, match="rounds must be >= 1, got 0"):
        pb.measure_price_rows([("uprobe-nop", 1)], rounds=0)
    with pytest.warns(UserWarning), pytest.raises(model.LabError, match="no configuration left"):
        pb.measure_price_rows([("uretprobe-nop-compat", 1)])


def test_a_reference_whose_consumer_missed_hits_fails_the_run(monkeypatch):
    """The reference's BPF counter is read on the way out: a program that ran on none of the 2 x 50 timed
    calls (a probe that stopped firing) is an error, not a silent rescaling of every row by a bare call."""
    from uprobe_lab.native import price_benches as pb

    class Silent:  # a counter and an event that attach, and count nothing
        fd = -1
        def __enter__(self):
            return self
        def __exit__(self, *exc):
            return False
        def attach(self, fd):
            pass
        def count(self):
            return 0

    class Code:
        arch, path = "x86_64", "/nonexistent"
        def addr(self, name):
            return 0
        def offset(self, name):
            return 0
        def run(self, addr, n):
            pass

    monkeypatch.setattr(pb, "BpfCounter", Silent)
    monkeypatch.setattr(pb, "bench_trigger_event", lambda path, offset: Silent())
    monkeypatch.setattr(pb, "_interval_calls", lambda nc, addr: 50)
    with pytest.raises(RuntimeError, match="reference's BPF consumer counted 0 runs, fewer than its 100"):
        with pb.reference_probe(Code()) as reference:
            reference()
            reference()


def test_the_native_table_counts_no_page_pin_and_no_futex_wake():
    """Worked out from the benches: every x86 bench traps, steps, returns or copies, none pins a page or
    wakes a futex, so an unpinned pin_map or futex_wake is no reason to warn about this table."""
    assert calibrate.native_table_prices("x86_64") == {"user_insn", "exception", "syscall", "handler", "xol_step",
                                                       "return_instance", "uaccess"}
    assert "pin_map" not in calibrate.native_table_prices("arm64")  # the STP patch was never merged


def test_bench_events_are_opened_as_the_kernel_bench_opens_its_own():
    """bench_trigger.c attaches with pid -1 (every task), which libbpf opens on one CPU: the lab's bench
    events are the same kind, made inside the benches' pinning on the one CPU it leaves, and are not opened
    until used."""
    from uprobe_lab.native import perf
    from uprobe_lab.native.bench import pinned_to_one_cpu
    with pinned_to_one_cpu():
        ev = perf.bench_trigger_event("/bench", 0x40, retprobe=True)
        assert {ev.cpu} == os.sched_getaffinity(0)
    assert (ev.path, ev.offset, ev.retprobe, ev.pid, ev.fd) == ("/bench", 0x40, True, -1, None)


def test_a_32_bit_configuration_s_consumer_count_reaches_its_bench(monkeypatch):
    """("uprobe-nop-compat", 4) is the 32-bit side of a consumer scan: attached_run sets its bench up with
    four consumers, as (bench, 4) sets up four events for a 64-bit configuration."""
    from uprobe_lab.native import price_benches as pb
    seen = []
    monkeypatch.setattr(pb, "pinned_to_one_cpu", contextlib.nullcontext)
    monkeypatch.setattr(pb, "NativeCode", _FakeCode)
    monkeypatch.setattr(pb, "reference_probe", lambda nc: contextlib.nullcontext(lambda: 1.0))
    monkeypatch.setattr(pb, "attached_compat", lambda bench, consumers, state: (
        seen.append((bench, consumers)), contextlib.nullcontext("bench"))[1])
    configs = [("uprobe-nop-compat", 1), ("uprobe-nop-compat", 4)]
    with pb.attached_run("x86_64", configs, {cfg: {} for cfg in configs}) as (_, rigs):
        assert rigs == {cfg: "bench" for cfg in configs}
    assert seen == configs
