"""The rule table (uprobe_lab.kernel.RULES) is the one place a kernel rule is declared: the modelled versions,
the release mapping, the CLI and the calibration's kernels all follow from it."""
import json
import re
from pathlib import Path

import pytest

import reference_tables
from reference_tables import section_rows
from uprobe_lab import cli, kernel
from uprobe_lab.kernel import KERNELS, RULES, Rule, kernel_for_release, modelled_kernel, row_for_release
from uprobe_lab.native import calibrate, example
from uprobe_lab.native.scheme import classify
from uprobe_lab.x86.constants import EPROTO


def test_the_modelled_versions_are_the_oldest_and_each_release_that_changed_a_hit():
    # each a mainline release; the 7.2.y line's nop10 backport (7.2.6) makes no row: its releases answer with 7.3's
    assert list(KERNELS) == ["6.10", "6.11", "6.16", "6.18", "7.3"]
    many_cpus = ["lockless_consumers", "lockless_lookup", "per_cpu_nhit", "perf_filter_nr_systemwide", "rcu_tasks_trace",
                 "ri_pool", "singlestep_without_siglock", "speculative_vma_lookup", "srcu_uprobe_lifetime",
                 "treelock_rwlock", "uretprobe_lease", "xol_no_slot_count"]
    # mainline 6.18: without BC.cond (6.18.34 took it)
    assert sorted(KERNELS["6.18"].rules) == sorted(["arm64_refuse_ldr_literal", "arm64_reject_mops", "arm64_simulate_nop",
                                                    "emulate_all_nops", "ip_change_skips_insn",
                                                    "optimize_nop5", "trampoline_sls_int3", "uretprobe_syscall",
                                                    *many_cpus])
    # of 2024-25's work on many CPUs, 6.10 and 6.11 have only the rwlock (0dc715295d41) and the filter's lockless
    # check (cdf355cc60e3), both merged for 6.10
    assert [r for r in many_cpus if r in KERNELS["6.11"].rules] == ["perf_filter_nr_systemwide", "treelock_rwlock"]
    # a modelled version is mainline: 6.11.y got both arm64 fixes later (6.11.5, 6.11.11), mainline 6.11 has neither
    assert not KERNELS["6.11"].arm64_refuse_ldr_literal and not KERNELS["6.11"].arm64_reject_mops
    assert kernel_for_release("6.11.11").arm64_refuse_ldr_literal and kernel_for_release("6.11.11").arm64_reject_mops
    # the nop10 series moved the optimisation from the nop5 to the nop10
    assert not KERNELS["7.3"].optimize_nop5 and KERNELS["7.3"].optimize_nop10 and KERNELS["7.3"].uretprobes_srcu_fast


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
    assert list(KERNELS)[-1] == "7.4" and KERNELS["7.4"].fake_7_4_rule and not KERNELS["7.3"].fake_7_4_rule
    assert KERNELS["7.4"].optimize_nop10  # the rules before it carry on
    assert kernel_for_release("7.5.1").fake_7_4_rule and not kernel_for_release("7.3.4").fake_7_4_rule
    # the CLI: a modelled version of its own, and the row that answers for a later release
    assert cli.main(["bench", "uprobe-nop", "--kernel", "7.4", "--iterations", "10", "--json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)[0]["kernel"] == "7.4" and out.err == ""
    assert cli.kernel_row("7.5.1") == "7.4" and "the lab's 7.4 row answers" in capsys.readouterr().err
    # the scheme detector: a host of the nop10 scheme is read as the newest version with that scheme
    assert classify(-EPROTO, False, True, False)[0] == "7.4"
    # chapter 06's calibration predicts this machine's figures on every modelled version
    rows = example.load_example()["benches"]
    predicted = calibrate.predict_kernels(calibrate.calibrate(rows), rows)
    assert {"7.3", "7.4", "7.4 low", "7.4 high"} <= set(predicted.columns)


def test_the_rule_table_is_back_after_the_fake_rule():
    assert "7.4" not in KERNELS and not any(r.name == "fake_7_4_rule" for r in kernel.RULES)
    assert classify(-EPROTO, False, True, False)[0] == "7.3"


# --- each rule against its row of docs/references.md ("Rule sources") ---

REFERENCES = reference_tables.REFERENCES


def _release(text: str) -> tuple[int, int]:
    major, minor = text.split(".")
    return int(major), int(minor)


def _sublevels(text: str) -> dict[tuple[int, int], int]:
    found = {}
    for major, minor, sub in re.findall(r"(\d+)\.(\d+)\.(\d+)", text):
        found[(int(major), int(minor))] = int(sub)
    return found


def rule_sources() -> dict[str, dict]:
    """The rows of the table under "## Rule sources": rule -> commit, since, until, backports, removed, source."""
    rows = {}
    for name, commit, mainline, stable, source in section_rows("Rule sources", 5, "`"):
        since, _, until = mainline.partition(", until ")
        gone = [part for part in stable.split(",") if "gone from" in part]
        kept = [part for part in stable.split(",") if "gone from" not in part]
        rows[name.strip("`")] = {"commit": commit, "since": _release(since), "until": _release(until) if until else None,
                                 "backports": _sublevels(",".join(kept)), "removed": _sublevels(",".join(gone)),
                                 "source": source}
    return rows


def test_every_rule_has_its_row_of_sources_and_they_agree():
    rows = rule_sources()
    assert sorted(rows) == sorted(r.name for r in RULES), "a rule without a row of sources, or a row without a rule"
    for rule in RULES:
        row = rows[rule.name]
        assert re.fullmatch(r"[0-9a-f]{12}", rule.commit), f"{rule.name}: a mainline commit id, 12 hex digits"
        assert (row["commit"], row["since"], row["until"]) == (rule.commit, rule.since, rule.until), rule.name
        assert (row["backports"], row["removed"]) == (rule.backports, rule.removed), rule.name
        assert len(row["source"]) > 20, f"{rule.name}: no source cited"


def test_the_table_reader_sees_a_disagreement(monkeypatch, tmp_path):
    """The check above can fail: a row that names another stable sublevel is caught."""
    doc = REFERENCES.read_text().replace("| 6.12.77 |", "| 6.12.78 |")
    fake = tmp_path / "references.md"
    fake.write_text(doc)
    monkeypatch.setattr(reference_tables, "REFERENCES", fake)
    with pytest.raises(AssertionError, match="rcu_tasks_trace"):
        test_every_rule_has_its_row_of_sources_and_they_agree()


# Releases as the notices say (docs/references.md, "Rule sources"), worked out from them, not from kernel.py:
# the nop10 series reached mainline in the 7.3 merge window and 7.2.y by 7.2.6 (Debian's 7.2.6-1, whose changelog
# names no Debian patch); RCU Tasks Trace for uprobes is patch 098/265 of 6.12.77-rc1; BC.cond is 7.1 and patches
# of 6.6.142-rc1, 6.12.92-rc1, 6.18.34-rc1 and 7.0.11-rc1.
@pytest.mark.parametrize("release, version, nop5, nop10", [
    ("7.2.0", None, True, False),  # mainline 7.2: the 6.18 scheme
    ("7.2.13+deb14-amd64", None, False, True),
    ("7.2.6+deb13-amd64", None, False, True),
    ("7.3.4", None, False, True),
    ("7.1.13+deb13-amd64", None, True, False),
    ("6.18.15+deb13-amd64", None, True, False),
])
def test_kernel_for_release_places_the_nop10_series_where_the_notices_do(release, version, nop5, nop10):
    k = kernel_for_release(release, version)
    assert (k.optimize_nop5, k.optimize_nop10, k.copy_uprobe_trampolines_on_fork) == (nop5, nop10, nop10)


# The modelled row that answers for a release is the one it hits like (same sources as above): mainline 7.2 and
# 7.2.y before 7.2.6 hit as 6.18; a release of unknown sublevel (an ABI number) is its mainline release.
@pytest.mark.parametrize("release, row", [
    ("7.2", "6.18"), ("7.2.0", "6.18"), ("7.2.5", "6.18"), ("7.2.0-45-generic", "6.18"),
    ("7.2.6", "7.3"), ("7.2.13+deb14-amd64", "7.3"),  # the backport: they hit as mainline 7.3
    ("7.3.4", "7.3"), ("7.1.13+deb13-amd64", "6.18"), ("6.12.117+deb13-amd64", "6.11"),
])
def test_a_release_answers_with_the_row_it_hits_like(release, row):
    assert row_for_release(release)[0] == row
    assert modelled_kernel(release) == row


def test_a_release_without_a_sublevel_names_the_sublevels_that_answer_otherwise():
    abi = row_for_release("7.2.0-45-generic")[1]  # Ubuntu's form: an ABI number where the sublevel would be
    assert "no sublevel (an ABI number), so read as mainline" in abi and "--kernel 7.2.6" in abi
    assert "\n" not in row_for_release("7.2.0")[1]  # 7.2.0 is mainline by its own name: nothing more to say


def test_the_api_points_a_release_to_its_row():
    with pytest.raises(kernel.LabError, match=r"for release 7.2.13 give its row, 7.3"):
        kernel.get_kernel("7.2.13")


def test_a_release_before_an_arch_s_uprobes_has_no_row_on_it():
    """4.9 has uprobes on x86-64 (6.10's row answers) and none on arm64 (4.10): the refusal names the arch, and as
    the library's it names no command-line flag."""
    assert row_for_release("4.9", "x86_64")[0] == "6.10"
    with pytest.raises(kernel.LabError) as refused:
        row_for_release("4.9", "arm64")
    assert str(refused.value).startswith("kernel 4.9 has no uprobes on arm64") and "e.g. 4.10," in str(refused.value)
    assert "--" not in str(refused.value)
    with pytest.raises(kernel.LabError, match="kernel 3.4 has no uprobes at all"):
        row_for_release("3.4")


def test_a_7_2_release_says_why_its_row_answers():
    assert "7.3 row answers" in row_for_release("7.2.6")[1] and "optimize_nop10 at 7.2.6" in row_for_release("7.2.6")[1]
    bare = row_for_release("7.2")[1]  # mainline 7.2, and the sublevel to give for the backport
    assert "6.18 row answers" in bare and "7.2.6 took optimize_nop10" in bare and "--kernel 7.2.6" in bare


def test_kernel_for_release_has_rcu_tasks_trace_from_6_12_77():
    assert not kernel_for_release("6.12.76").rcu_tasks_trace
    assert kernel_for_release("6.12.77").rcu_tasks_trace
    assert kernel_for_release("6.12.117+deb13-amd64").rcu_tasks_trace  # Debian's trixie kernel
    assert not kernel_for_release("6.12.0-foo").rcu_tasks_trace  # a 6.12 of unknown sublevel: mainline 6.12's rules


@pytest.mark.parametrize("release, has", [("6.6.141", False), ("6.6.142", True), ("6.12.91", False), ("6.12.92", True),
                                          ("6.18.15+deb13-arm64", False), ("6.18.34", True), ("7.0.10", False),
                                          ("7.0.11", True), ("7.1.0", True), ("7.3.4+deb13-arm64", True),
                                          ("6.16.12", False)])
def test_kernel_for_release_simulates_bc_cond_from_the_release_that_took_it(release, has):
    assert kernel_for_release(release).arm64_simulate_bc_cond is has


def test_every_kernel_version_property_is_read_by_the_package():
    # a property only a test reads is dead code
    import re
    from pathlib import Path

    import uprobe_lab
    from uprobe_lab.kernel import KernelVersion
    texts = [p.read_text() for p in Path(uprobe_lab.__file__).parent.rglob("*.py")]
    props = [name for name, attr in vars(KernelVersion).items() if isinstance(attr, property)]
    assert [name for name in props if not any(re.search(rf"\.{name}\b", t) for t in texts)] == []
