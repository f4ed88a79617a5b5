"""Nothing a learner does leaves an emulated process broken: stopped runs, Ctrl-C, Reset, odd calls.

A run can stop with an out-of-line step pending (the int3 handled, the copy in an XOL slot, the trap
flag set). The kernel never leaves a task like that: a step cut short is aborted
(arch_uprobe_abort_xol in arch/x86/kernel/uprobes.c and arch/arm64/kernel/probes/uprobes.c: ip back
to the probed address, TF / MDSCR.SS cleared; handle_singlestep() frees the slot). The lab does the
same before the next call, so every count below is exact.
"""
from __future__ import annotations

import faulthandler
import gc
import os
import signal
import subprocess
import sys
import threading

import pytest

import uprobe_lab as ul
from uprobe_lab import bench, cli, interrupt, own_program
from uprobe_lab.process import MAX_INSNS
from uprobe_lab.stress import HANG_GUARD_S, ctrl_c_once_running, in_a_run
from uprobe_lab.x86.constants import X86_EFLAGS_TF

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


STEPPED = {"x86_64": "uprobe_target_ret", "arm64": "uprobe_target_push"}  # run out of line, not emulated


def probed(arch="x86_64", kernel="6.18", target=None, ret=False, **options):
    target = target or STEPPED[arch]
    proc = ul.new_process(arch, kernel, **options)
    consumer = ul.CountingConsumer(ret=ret)
    ul.attach(proc, target, consumer)
    return proc, consumer, proc.program.resolve(target)


def budget_leaving_a_step_pending(proc, target) -> int:
    """The smallest instruction budget after which a run of producer_loop stops inside an XOL step."""
    for budget in range(1, 64):
        result = proc.run(*proc.prepare_call("producer_loop", 3, target), max_insns=budget)
        if proc.utask.active_uprobe is not None:
            return budget
        assert result.stop == "count"
    raise AssertionError("no budget stops inside the step")


# --- 1. a stopped run ---------------------------------------------------------------------------

@pytest.mark.parametrize("arch", ["x86_64", "arm64"])
def test_a_call_stopped_by_its_budget_mid_step_leaves_the_process_usable(arch):
    proc, consumer, target = probed(arch)
    budget = budget_leaving_a_step_pending(proc, target)
    proc.abandon_run()
    with pytest.raises(ul.LabError, match=f"stopped after {budget} instructions"):
        proc.call("producer_loop", 3, target, max_insns=budget)
    utask, area = proc.utask, proc.mm.xol_area
    assert utask.active_uprobe is None and utask.xol_slot == -1 and area.bitmap[1:] == [False] * (len(area.bitmap) - 1)
    assert proc.pc == target  # arch_uprobe_abort_xol: back on the probed instruction
    if arch == "x86_64":
        assert not proc.regs().flags & X86_EFLAGS_TF
    else:
        assert not proc.single_step
    before = consumer.hits
    proc.call("producer_loop", 5, target)
    assert consumer.hits - before == 5 and proc.signal is None


@pytest.mark.parametrize("arch", ["x86_64", "arm64"])
def test_a_budget_stop_can_be_continued_where_it_stopped(arch):
    proc, consumer, target = probed(arch)
    start, until = proc.prepare_call("producer_loop", 3, target)
    result = proc.run(start, until, max_insns=budget_leaving_a_step_pending(probed(arch)[0], target))
    assert proc.utask.active_uprobe is not None
    assert proc.run(result.ip, until).ok and consumer.hits == 3


def test_notebook_01_ret_stepper_step_reset_run_to_end():
    proc = ul.new_process(kernel="6.18", record=True)
    consumer = ul.CountingConsumer()
    ul.attach(proc, "uprobe_target_ret", consumer)
    stepper = proc.stepper("uprobe_target_ret")
    stepper.step()  # the int3: the step out of line is now pending
    assert proc.utask.active_uprobe is not None
    steps = proc.stepper("uprobe_target_ret").run_to_end()  # Reset, then Run to end
    assert steps[-1].done and steps[-1].signal is None and proc.signal is None
    assert consumer.hits == 2  # the hit of the abandoned run, and the new one


# --- 2. Ctrl-C ----------------------------------------------------------------------------------

@pytest.fixture
def hang_guard():
    """A Ctrl-C test whose Ctrl-C is ignored would run for ever: after HANG_GUARD_S the whole run is
    stopped with every thread's traceback instead."""
    faulthandler.dump_traceback_later(HANG_GUARD_S, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.mark.parametrize("arch", ["x86_64", "arm64"])
@pytest.mark.parametrize("name", ["uprobe-ret", "uretprobe-nop", "syscall-count", "usermode-count"])
def test_ctrl_c_stops_a_run_cleanly_and_the_next_call_is_exact(arch, name, hang_guard):
    if in_a_run():
        pytest.skip("needs Python's own SIGINT handler (something else replaced it)")
    spec = bench.bench_spec(name, arch)
    proc = ul.new_process(arch, "6.18", record=False)
    consumer = ul.CountingConsumer(ret=spec.probe == "uretprobe") if spec.probe else None
    if consumer:
        ul.attach(proc, spec.target, consumer)
    target = proc.program.resolve(spec.target)
    done = threading.Event()
    thread = ctrl_c_once_running(done)
    try:
        with pytest.raises(KeyboardInterrupt):
            proc.call("producer_loop", 10 ** 9, target, max_insns=MAX_INSNS)
    finally:
        done.set()
        thread.join()
    assert not in_a_run()  # Python's own handler is back
    assert proc.signal is None and proc.utask.active_uprobe is None and not proc.utask.return_instances
    before_hits, before_syscalls = (consumer.hits if consumer else 0), proc.trace.counts.get("syscalls", 0)
    proc.call("producer_loop", 40, target)
    if consumer:
        assert consumer.hits - before_hits == 40
    if name == "syscall-count":
        assert proc.trace.counts["syscalls"] - before_syscalls == 40


def test_a_collected_engine_is_closed_by_the_next_run_not_by_the_collector():
    """Unicorn's finalizer closes a collected engine inside a bare ``except:``, which swallows a Ctrl-C
    landing during the close (the interrupt stress test lost one every few thousand interrupts). The
    lab's weak reference calls only list.append (C: no Python code, so nothing to raise in), and the
    next process made or run closes the engine, holding Ctrl-C."""
    proc, _, _ = probed()
    assert not proc.uc._Uc__finalizer.alive  # Unicorn's own is off
    ref = next(r for r in interrupt._engines if r() is proc.uc)
    assert ref.__callback__ == interrupt._retired.append
    del proc
    gc.collect()
    assert ref() is None and ref in interrupt._retired and ref in interrupt._engines
    other, consumer, target = probed()
    other.call("producer_loop", 2, target)
    assert consumer.hits == 2 and ref not in interrupt._retired and ref not in interrupt._engines


BLOCKS = {"interrupt.handling": lambda: interrupt.handling(interrupt.stop_signals(), lambda signum, frame: None),
          "cli": lambda: cli.terminate_as_ctrl_c(),
          "own_program": lambda: own_program._ended_by_signal_as_by_ctrl_c()}


@pytest.mark.parametrize("block", BLOCKS)
def test_a_handler_set_outside_python_is_followed_by_the_default_not_the_block_s_own(block, monkeypatch):
    """signal.signal returns None for a handler set outside Python (by a program embedding it): that one cannot be
    put back, so after a block that set its own, the signal has its default action again."""
    expected = dict.fromkeys(interrupt.stop_signals(), signal.SIG_DFL)
    set_to = {}

    def outside(signum, handler):  # records, changes nothing, and says each previous handler was set outside Python
        set_to[signum] = handler

    monkeypatch.setattr(signal, "signal", outside)
    with BLOCKS[block]():
        assert set(set_to) == set(expected) and all(callable(h) for h in set_to.values())
    assert set_to == expected


# The CLI, with a line on stderr once the bench is under way (inside main()'s handling of Ctrl-C), so the
# SIGINT cannot land while Python is still importing and end in a traceback that is nobody's fault.
ANNOUNCED_CLI = """
import runpy, sys
from uprobe_lab import bench
run_bench = bench.run_bench
def announced(*args, **kwargs):
    print("bench started", file=sys.stderr, flush=True)
    return run_bench(*args, **kwargs)
bench.run_bench = announced
sys.argv = ["uprobe_lab", *sys.argv[1:]]
runpy.run_module("uprobe_lab", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("name", ["syscall-count", "uprobe-ret"])
def test_cli_exits_130_on_ctrl_c(name):
    child = subprocess.Popen([sys.executable, "-c", ANNOUNCED_CLI, "bench", name, "--iterations",
                              str(bench.MAX_EMULATED_ITERATIONS)],
                             env={**os.environ, "PYTHONPATH": REPO}, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    guard = threading.Timer(HANG_GUARD_S, child.kill)
    guard.start()
    try:
        started = child.stderr.readline()
        assert started == "bench started\n", started + child.stderr.read()
        child.send_signal(signal.SIGINT)
        _, err = child.communicate()
    finally:
        guard.cancel()
        child.kill()
        child.wait()
    assert child.returncode == 130, (name, err)
    assert err.strip().splitlines()[-1] == "interrupted" and "Traceback" not in err and "Exception ignored" not in err


# --- 5. nonsense refused -------------------------------------------------------------------------

def test_call_refuses_more_arguments_than_registers_and_values_past_64_bits():
    x86, arm = ul.new_process("x86_64"), ul.new_process("arm64")
    with pytest.raises(ul.LabError, match="at most 6 arguments"):
        x86.call("uprobe_target_nop", 1, 2, 3, 4, 5, 6, 7)
    with pytest.raises(ul.LabError, match="at most 8 arguments"):
        arm.call("uprobe_target_nop", *range(9))
    with pytest.raises(ul.LabError, match="argument 1 is 18446744073709551616"):
        x86.call("uprobe_target_nop", 0, 2 ** 64)
    assert x86.call("uprobe_target_nop", -1) is not None  # two's complement is fine


def test_attach_refuses_a_missing_consumer_and_the_same_one_twice():
    proc = ul.new_process()
    with pytest.raises(ul.LabError, match="needs a consumer, got None"):
        ul.attach(proc, "uprobe_target_nop", None)
    consumer = ul.CountingConsumer()
    ul.attach(proc, "uprobe_target_nop", consumer)
    with pytest.raises(ul.LabError, match="already attached"):
        ul.attach(proc, "uprobe_target_nop", consumer)
    proc.call("uprobe_target_nop")
    assert consumer.hits == 1


def test_detach_from_the_wrong_process_is_refused_and_the_probe_stays_removable():
    a, b = ul.new_process(), ul.new_process()
    consumer = ul.CountingConsumer()
    probe_a = ul.attach(a, "uprobe_target_nop", consumer)
    probe_b = ul.attach(b, "uprobe_target_nop", consumer)
    with pytest.raises(ul.LabError, match="not a probe of this process"):
        ul.detach(b, probe_a, consumer)
    ul.detach(a, probe_a, consumer)
    ul.detach(b, probe_b, consumer)
    assert not a.mm.probes and not b.mm.probes
    assert a.read(probe_a.vaddr, 1) == probe_a.insn[:1] and b.read(probe_b.vaddr, 1) == probe_b.insn[:1]


def test_run_benches_takes_one_name_as_a_string():
    (result,) = bench.run_benches("usermode-count", iterations=10)
    assert result["bench"] == "usermode-count"


def test_unknown_options_are_refused():
    with pytest.raises(ul.LabError, match=r"takes no option 'stp'.*count_insns"):
        ul.new_process("x86_64", stp="simulate")
    with pytest.raises(ul.LabError, match="takes no option 'stpp'"):
        ul.run_bench("uprobe-nop", "arm64", stpp="simulate", iterations=10)
    with pytest.raises(ul.LabError, match="takes no option 'stp'"):
        ul.analyze("90", "x86_64", stp="simulate")


@pytest.mark.parametrize("word", ["d503", "5", "0xd503201", "d503201f0"])
def test_arm64_words_need_all_eight_digits(word):
    with pytest.raises(ul.LabError, match="all 8 hex digits"):
        ul.analyze(word, "arm64")
    assert ul.analyze("d503201f", "arm64")["mnemonic"] == "nop"


# --- 6. stale state -------------------------------------------------------------------------------

def test_a_live_process_keeps_its_kernel():
    proc = ul.new_process(kernel="6.10")
    with pytest.raises(ul.LabError, match=r"fixed when it is made.*new_process\(kernel='6.11'\)"):
        proc.kernel = "6.11"
    proc.kernel = "6.10"  # the same kernel: nothing changes
    assert proc.kernel.name == "6.10"


@pytest.mark.parametrize("arch", ["x86_64", "arm64"])
def test_call_from_inside_a_consumer_is_refused_and_the_process_stays_usable(arch):
    proc = ul.new_process(arch)
    seen = []

    def nested(regs):
        seen.append(1)
        proc.call("uprobe_target_nop")
        return 0

    ul.attach(proc, "uprobe_target_push", ul.UprobeConsumer(handler=nested))
    counter = ul.CountingConsumer()
    ul.attach(proc, "uprobe_target_ret", counter)
    with pytest.raises(ul.LabError, match="cannot call\\(\\) or run\\(\\) the process it was called from"):
        proc.call("producer_loop", 5, proc.program.resolve("uprobe_target_push"))
    assert seen == [1]
    proc.call("producer_loop", 7, proc.program.resolve("uprobe_target_ret"))
    assert counter.hits == 7


def test_notebook_01_ret_widget_step_reset_run_to_end_then_back():
    """Chapter 01's ret stepper, pressed after the cell below it ran its printed walk: the widget's process is its
    own, so the walk under it cannot break it: no SIGSEGV at pc=0, and Reset leaves the buttons usable."""
    pytest.importorskip("ipywidgets")
    from uprobe_lab.views.stepper import probed_stepper, stepper_widget

    box = stepper_widget(lambda: probed_stepper("uprobe_target_ret", "6.18"), "a uprobe on ret")
    step_b, back_b, end_b, reset_b = next(c for c in box.children if hasattr(c, "children") and len(c.children) == 4).children
    assert [b.description for b in (step_b, back_b, end_b, reset_b)] == ["Step", "Back", "Run to end", "Reset"]
    box.step()
    printed = probed_stepper("uprobe_target_ret", "6.18")  # the cell's printed walk
    printed.run_to_end()
    end_b.click()
    stepper = box.stepper()
    consumer = stepper.proc.mm.probes[stepper.proc.program.resolve("uprobe_target_ret")].consumers[0]
    assert stepper.done and stepper.steps[-1].signal is None and stepper.proc is not printed.proc
    assert consumer.hits == 1 and stepper.steps[-1].text == "ret"
    reset_b.click()
    assert box.stepper().steps == [] and not step_b.disabled and box.stepper().proc is not stepper.proc
    end_b.click()
    back_b.click()  # the same run replayed one step shorter, on a new process
    assert not box.stepper().done and box.stepper().proc.signal is None
    end_b.click()
    assert box.stepper().done and box.stepper().steps[-1].signal is None


@pytest.mark.parametrize("arch", ["x86_64", "arm64"])
def test_a_refused_nested_call_leaves_the_outer_call_exact(arch):
    """The refusal comes before the nested call touches a register: a handler that swallows it does not
    cut the outer run short."""
    proc = ul.new_process(arch)
    refused = []

    def swallowing(regs):
        try:
            proc.call("uprobe_target_nop", 1, 2)
        except ul.LabError as err:
            refused.append(str(err))
        return 0

    ul.attach(proc, "uprobe_target_push", ul.UprobeConsumer(handler=swallowing))
    proc.call("producer_loop", 5, proc.program.resolve("uprobe_target_push"))
    assert len(refused) == 5 and "already running" in refused[0]
    with pytest.raises(ul.LabError, match="already running"):
        ul.attach(proc, "uprobe_target_ret", ul.UprobeConsumer(handler=lambda regs: proc.stepper("producer_loop")))
        proc.call("uprobe_target_ret")


def test_a_second_thread_is_refused_and_the_first_call_stays_exact():
    proc = ul.new_process()
    counter = ul.CountingConsumer()
    inside, release = threading.Event(), threading.Event()

    def slow(regs):
        inside.set()
        release.wait(10)  # hold the first thread inside its run while the second one tries
        return 0

    ul.attach(proc, "uprobe_target_nop", ul.UprobeConsumer(handler=slow))
    ul.attach(proc, "uprobe_target_nop", counter)
    first = threading.Thread(target=proc.call, args=("producer_loop", 50, proc.program.resolve("uprobe_target_nop")))
    first.start()
    assert inside.wait(10)
    with pytest.raises(ul.LabError, match="another thread is calling this process"):
        proc.call("uprobe_target_nop")
    with pytest.raises(ul.LabError, match="another thread is calling this process"):
        proc.stepper("uprobe_target_nop")
    release.set()
    first.join(10)
    assert not first.is_alive() and counter.hits == 50 and proc.signal is None


@pytest.mark.parametrize("budget", [0, 2**64, 10**9 + 1, 1.5, True])
def test_a_run_budget_outside_its_range_is_refused(budget):
    proc = ul.new_process()
    with pytest.raises(ul.LabError, match="max_insns must be an int from 1 to 1_000_000_000"):
        proc.call("uprobe_target_nop", max_insns=budget)
    assert proc.call("producer_loop", 3, proc.program.resolve("uprobe_target_nop")) is not None  # still usable


@pytest.mark.parametrize("iterations", [0, 2**54, 10**6 + 1, None, "5", True])
def test_an_emulated_bench_refuses_iterations_it_cannot_finish(iterations):
    with pytest.raises(ul.LabError, match="iterations must be an int from 1 to 1_000_000 on the emulator"):
        ul.run_bench("uprobe-nop", iterations=iterations)


def test_an_emulated_bench_is_named_by_a_string():
    with pytest.raises(ul.LabError, match="named by a string such as 'uprobe-nop', got None"):
        ul.run_bench(None)
