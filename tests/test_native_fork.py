"""The host kernel as referee for fork: what a child of a probed process inherits (uprobe_lab.native.fork).

The host's answers (its own perf uprobe, a real fork) are set beside the emulator's for the kernel the
host behaves like; every answer must agree. On this project's 6.18 host that includes the child's death:
its copy of the optimised nop5 calls a trampoline page the fork did not copy (VM_DONTCOPY).
"""
import os

import pytest

from native_support import native
from uprobe_lab.kernel import kernel_for_release
from uprobe_lab.native.fork import FORK_SITES, compare_fork, emulated_fork_report, host_fork_report
from uprobe_lab.native.scheme import detect_scheme


pytestmark = pytest.mark.xdist_group("native-fork")  # one worker asks the host once


@pytest.fixture(scope="module")
def host_answers():
    return host_fork_report()


@native
def test_host_and_emulator_agree_on_what_a_forked_child_inherits(host_answers):
    assert set(host_answers) == set(FORK_SITES)
    lab = emulated_fork_report(kernel_for_release(os.uname().release))
    rows = compare_fork(host_answers, lab)
    assert len(rows) >= 10
    assert rows["same"].all(), "\n" + rows[~rows["same"]].to_string()


@native
def test_host_child_at_the_optimised_site(host_answers):
    scheme = detect_scheme().behaves_like
    if scheme not in ("6.18", "7.3"):  # classify names the newest version of a scheme: 7.3 for the nop10
        pytest.skip(f"this host optimises no site (it behaves like {scheme})")
    site = "uprobe_target_nop5" if scheme == "6.18" else "uprobe_target_nop10"
    got = host_answers[site]
    assert got["parent site"].endswith("call [uprobes-trampoline]")
    if scheme == "6.18":  # create_uprobe_trampoline() maps it VM_DONTCOPY
        assert (got["child"], got["child hits"], got["child maps"]) == ("SIGSEGV", 0, "none")
        assert got["child site"] == "call into an unmapped page"
    else:  # d9a48e77f6fe copies it
        assert (got["child"], got["child hits"], got["child maps"]) == ("exit 0", 2, "[uprobes-trampoline]")
