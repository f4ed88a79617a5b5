"""The rule table (uprobe_lab.kernel.RULES) is the one place a kernel rule is declared: the modelled versions,
the release mapping, the CLI and the calibration's kernels all follow from it."""
import json

import pytest

from uprobe_lab import cli, kernel
from uprobe_lab.kernel import KERNELS, RULES, Rule, kernel_for_release
from uprobe_lab.native import calibrate, example
from uprobe_lab.native.scheme import classify
from uprobe_lab.x86.constants import EPROTO


def test_the_modelled_versions_are_the_oldest_and_each_release_that_changed_a_hit():
    assert list(KERNELS) == ["6.10", "6.11", "6.16", "6.18", "7.2"]
    many_cpus = ["lockless_consumers", "lockless_lookup", "per_cpu_nhit", "perf_filter_nr_systemwide", "rcu_tasks_trace",
                 "ri_pool", "singlestep_without_siglock", "speculative_vma_lookup", "srcu_uprobe_lifetime",
                 "treelock_rwlock", "uretprobe_lease", "xol_no_slot_count"]
    assert sorted(KERNELS["6.18"].rules) == sorted(["arm64_refuse_ldr_literal", "arm64_reject_mops", "arm64_simulate_nop",
                                                    "emulate_all_nops", "ip_change_skips_insn", "optimize_nop5",
                                                    "trampoline_sls_int3", "uretprobe_syscall", *many_cpus])
    # of 2024-25's work on many CPUs, 6.10 and 6.11 have only the rwlock (0dc715295d41) and the filter's lockless
    # check (cdf355cc60e3), both merged for 6.10
    assert [r for r in many_cpus if r in KERNELS["6.11"].rules] == ["perf_filter_nr_systemwide", "treelock_rwlock"]
    # a modelled version reads a stable line as it ended: 6.11.y got both arm64 fixes (6.11.5, 6.11.11)
    assert KERNELS["6.11"].arm64_refuse_ldr_literal and KERNELS["6.11"].arm64_reject_mops
    assert not KERNELS["7.2"].optimize_nop5 and KERNELS["7.2"].optimize_nop10  # 7.2 moved it to the nop10


def test_a_rule_name_nobody_declared_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no rule 'optimise_nop5'"):
        KERNELS["6.18"].optimise_nop5


@pytest.fixture
def with_a_7_4_rule(monkeypatch):
    fake = Rule("fake_7_4_rule", "x86_64", (7, 4), "a rule for this test only", new_version=True)
    monkeypatch.setattr(kernel, "RULES", [*RULES, fake])
    kernel.rebuild()
    yield fake
    monkeypatch.undo()
    kernel.rebuild()


def test_a_new_rule_is_one_declaration_that_everything_picks_up(with_a_7_4_rule, capsys):
    assert list(KERNELS)[-1] == "7.4" and KERNELS["7.4"].fake_7_4_rule and not KERNELS["7.2"].fake_7_4_rule
    assert KERNELS["7.4"].optimize_nop10  # the rules before it carry on
    assert kernel_for_release("7.5.1").fake_7_4_rule and not kernel_for_release("7.3.4").fake_7_4_rule
    # the CLI: a modelled version of its own, and the row that answers for a later release
    assert cli.main(["bench", "uprobe-nop", "--kernel", "7.4", "--iterations", "10", "--json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)[0]["kernel"] == "7.4" and out.err == ""
    assert cli.kernel_row("7.5.1") == "7.4" and "the lab's 7.4 row answers" in capsys.readouterr().err
    # the scheme detector: a host of 7.2's nop10 scheme is read as the newest version with that scheme
    assert classify(-EPROTO, False, True, False)[0] == "7.4"
    # chapter 06's calibration predicts this machine's figures on every modelled version
    rows = example.load_example()["benches"]
    predicted = calibrate.predict_kernels(calibrate.calibrate(rows), rows)
    assert {"7.2", "7.4", "7.4 low", "7.4 high"} <= set(predicted.columns)


def test_the_rule_table_is_back_after_the_fake_rule():
    assert "7.4" not in KERNELS and not any(r.name == "fake_7_4_rule" for r in kernel.RULES)
    assert classify(-EPROTO, False, True, False)[0] == "7.2"
