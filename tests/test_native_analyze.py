"""test_x86_analyze.py's table of verdicts, asked of this host: each row's instruction under a real uprobe.

The table says, per kernel column, whether arch_uprobe_analyze_insn refuses an instruction, emulates
it, or has it single-stepped out of line. The host tells the three apart as the referee does
(uprobe_lab.verify.x86_host): perf_event_open fails for a refused probe, and a hit that single-steps
needs the [uprobes] XOL area, which an emulated hit never maps. The same reports then get the referee's
whole verdict against the lab's run of each row: whether the probe changed what the program computed,
and whether the site was optimised. All rows run in one HostPool (one forked child per instruction,
several at a time).
"""
from __future__ import annotations

import errno
import os
import tempfile

import pytest

from native_support import native
from test_x86_analyze import TABLE
from uprobe_lab.errors import LabError
from uprobe_lab.kernel import KERNELS, RULES, get_kernel
from uprobe_lab.native.code import find_exec_dir
from uprobe_lab.uprobes import ENOTSUPP
from uprobe_lab.verify import x86_gen as G
from uprobe_lab.verify.x86 import SKIP_SIGILL, host_action, host_rules, judge, lab_kernel_for
from uprobe_lab.verify.x86_host import HostPool
from uprobe_lab.x86.analyze import analyze_hex

pytestmark = [native, pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86-64 instructions"),
              pytest.mark.xdist_group("native-analyze")]  # one worker asks the host once for every row

COLUMN = {"6.10": 2, "6.11": 2, "6.16": 3, "6.18": 3}  # the lab kernels test_classification checks per column
FLAGS = 0x202  # IF and the always-one bit: the referee's plain start flags


@pytest.fixture(scope="module")
def kernel() -> str:
    try:
        kernel = lab_kernel_for(os.uname().release)
    except LabError as err:
        pytest.skip(str(err))
    rules = host_rules(os.uname().release)
    x86 = {r.name for r in RULES if r.arch == "x86_64"}  # what decides an x86 verdict (6.18.34's arm64 BC.cond does not)
    if kernel not in COLUMN or rules.rules & x86 != KERNELS[kernel].rules & x86:
        pytest.skip(f"the table has no column for this host's rules ({rules}; the table's are {', '.join(COLUMN)})")
    return kernel


@pytest.fixture(scope="module")
def host_reports(kernel) -> dict:
    # the harness's file is mapped PROT_EXEC: a directory where native code runs, as the referee takes
    with tempfile.TemporaryDirectory(prefix="uprobe_lab-analyze-", dir=find_exec_dir()) as workdir:
        pool = HostPool(workdir, opmask=False, parallel=8)
        return dict(pool.run((raw, bytes.fromhex(raw), FLAGS) for raw, *_ in TABLE))


@pytest.mark.parametrize("row", TABLE, ids=[r[0] for r in TABLE])
def test_the_host_refuses_emulates_or_steps_each_row_as_the_table_says(row, kernel, host_reports):
    raw, text = row[:2]
    report = host_reports[raw]
    assert "error" not in report, report["error"]
    action = host_action(report)
    assert action == row[COLUMN[kernel]], f"{raw} ({text}): host {action}, table {row[COLUMN[kernel]]} for {kernel}"
    if action == "reject":  # and for the reason the lab gives: the decoder's -ENOEXEC or the tables' -ENOTSUPP
        lab_reason = analyze_hex(raw, get_kernel(kernel))["reason"]
        assert report["attach_errno"] == (errno.ENOEXEC if "-ENOEXEC" in lab_reason else ENOTSUPP), lab_reason
    else:
        assert report["hits"] == 1


@pytest.mark.parametrize("row", TABLE, ids=[r[0] for r in TABLE])
def test_the_probe_changes_what_the_program_computes_where_the_lab_says(row, kernel, host_reports):
    """The referee's whole verdict for each row (verify.x86.judge): besides the action, whether the probed run
    ends otherwise than the unprobed one (registers, flags, vector state, memory, signal) and whether the
    site was optimised. Chapter 01's VEX rows are the point: emulated as branches, they change the result."""
    raw, text = row[:2]
    verdict = judge(G.Case("table", bytes.fromhex(raw), text, FLAGS), host_reports[raw], host_rules(os.uname().release))
    if verdict.status == SKIP_SIGILL:
        pytest.skip(f"{raw} ({text}): {verdict.status}")
    assert verdict.status == "agree", verdict.line()
