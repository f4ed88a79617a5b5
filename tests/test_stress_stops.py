"""Stress: Ctrl-C at random moments and Reset at every step leave every process exact (uprobe_lab.stress).

200 interrupts over the emulated processes of every bench on every kernel on both architectures, each
followed by a call whose hit count must be exact; then every stepper the notebooks show, Reset after
every possible number of steps and run to the end. A longer run of the same: benchmarks/stress_stops.py.
"""
from __future__ import annotations

import _thread
import types

import pytest

from uprobe_lab import bench, stress
from uprobe_lab.kernel import KERNELS
from uprobe_lab.stress import ARCHES, interrupt_stress, notebook_steppers, reset_stress


@pytest.mark.slow
def test_interrupts_at_random_moments_leave_every_process_exact():
    counts = interrupt_stress(200, 0.02)
    every = sum(len(bench.bench_names(a)) for a in ARCHES) * len(KERNELS)
    # worked out by hand: a nop10 probe is refused at attach before the nop10 scheme (its 0x2e prefix), and on
    # 7.3 too when the nop10 crosses a page; every other bench of both arches attaches on every kernel
    nop10 = ("uprobe-nop10", "uretprobe-nop10")
    expected = {("x86_64", k, n + cross) for k in KERNELS for n in nop10 for cross in ("", "-pagecross")
                if k != "7.3" or cross}
    assert counts["refused"] == expected
    assert counts["combinations"] + len(counts["refused"]) == every
    assert counts["interrupts"] == 200 and counts["processes"] == min(200, counts["combinations"])


def test_a_lost_ctrl_c_fails_the_stress_run_instead_of_hanging_it(monkeypatch):
    sent = []

    def first_one_lost():
        sent.append(1)
        if len(sent) > 1:
            _thread.interrupt_main()

    monkeypatch.setattr(stress, "_thread", types.SimpleNamespace(interrupt_main=first_one_lost))
    monkeypatch.setattr(stress, "LOST_AFTER_S", 0.2)
    stressed = stress.StressedBench("x86_64", "6.18", "uprobe-nop")
    with pytest.raises(AssertionError, match="x86_64 6.18 uprobe-nop: a Ctrl-C sent 0.0 ms .* not acted on"):
        stressed.interrupted_run(0.0, real_signal=False)
    assert len(sent) == 2
    stressed.check_next_call()  # the second one stopped it cleanly


@pytest.mark.parametrize("name, make, target", list(notebook_steppers()), ids=lambda v: v if isinstance(v, str) else "")
def test_reset_after_every_step_then_run_to_end(name, make, target):
    assert reset_stress(name, make, target) >= 3  # at least the trap and the step after it, plus k = 0


def test_a_stress_run_where_sigint_is_ignored_is_refused_instead_of_hanging(monkeypatch):
    """With SIGINT ignored (a background job of a shell without job control) no Ctrl-C can stop a run:
    the stress run says so and the way out before it starts one."""
    import signal

    from uprobe_lab.errors import LabError

    monkeypatch.setattr(stress.signal, "getsignal", lambda signum: signal.SIG_IGN)
    with pytest.raises(LabError, match="SIGINT is not Python's own.*default_int_handler"):
        interrupt_stress(1, 0.01)
