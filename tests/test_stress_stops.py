"""Stress: Ctrl-C at random moments and Reset at every step leave every process exact.

200 interrupts from another thread (alternately ``_thread.interrupt_main``, which reaches Python's
SIGINT handler as a real Ctrl-C would, and a real SIGINT sent to the main thread with pthread_kill) hit emulated runs of every bench on every kernel on both architectures, each
process interrupted again and again; after each one the same process must run the next call with an
exact hit count. Then every stepper the notebooks show is Reset after every possible number of steps
and run to the end. A longer run of the same: benchmarks/stress_stops.py.
"""
from __future__ import annotations

import _thread
import random
import signal
import threading
import time

import pytest

import uprobe_lab as ul
from uprobe_lab import bench
from uprobe_lab.kernel import KERNELS
from uprobe_lab.x86.uretprobe_programs import make_uretprobe_process

ARCHES = ("x86_64", "arm64")
NEXT_CALL = 25  # iterations of the call that follows each interrupt


class Bench:
    """One (arch, kernel, bench) process, kept across interrupts."""

    def __init__(self, arch: str, kernel: str, name: str):
        self.label = f"{arch} {kernel} {name}"
        spec = bench.bench_spec(name, arch)
        self.proc = ul.new_process(arch, kernel)
        self.consumer = ul.CountingConsumer(ret=spec.probe == "uretprobe") if spec.probe else None
        if self.consumer:
            ul.attach(self.proc, spec.target, self.consumer)
        self.target = self.proc.program.resolve(spec.target)
        self.syscalls = name == "syscall-count"

    def interrupted_run(self, delay: float, real_signal: bool) -> bool:
        """A run that would take hours, stopped by Ctrl-C after ``delay`` seconds: True once it was."""
        main = threading.main_thread().ident
        send = (lambda: signal.pthread_kill(main, signal.SIGINT)) if real_signal else _thread.interrupt_main
        timer = threading.Thread(target=lambda: (time.sleep(delay), send()))
        try:
            timer.start()
            self.proc.call("producer_loop", 10 ** 12, self.target, max_insns=1 << 62)
        except KeyboardInterrupt:
            return True
        else:
            raise AssertionError(f"{self.label}: the run ended without the interrupt")
        finally:
            timer.join()

    def check_next_call(self) -> None:
        proc = self.proc
        assert proc.signal is None, (self.label, proc.signal, proc.signal_reason)
        assert proc.utask.active_uprobe is None and not proc.utask.return_instances, self.label
        hits, syscalls = (self.consumer.hits if self.consumer else 0), proc.trace.counts.get("syscalls", 0)
        proc.call("producer_loop", NEXT_CALL, self.target)
        if self.consumer:
            assert self.consumer.hits - hits == NEXT_CALL, self.label
        if self.syscalls:
            assert proc.trace.counts["syscalls"] - syscalls == NEXT_CALL, self.label
        area = proc.mm.xol_area
        assert area is None or not any(area.bitmap[1:]), f"{self.label}: an XOL slot leaked"


def interrupt_stress(trials: int, max_delay: float, seed: int = 15) -> dict:
    """``trials`` interrupts, cycling over every (arch, kernel, bench) whose probe the kernel accepts."""
    rng = random.Random(seed)
    combos = [(a, k, n) for a in ARCHES for k in KERNELS for n in bench.bench_names(a)]
    benches, refused = {}, set()
    i = stopped = 0
    while i < trials:
        key = combos[i % len(combos)]
        if key in refused:
            combos.remove(key)
            continue
        if key not in benches:
            try:
                benches[key] = Bench(*key)
            except ul.UnprobeableInstruction:  # e.g. a nop10 before 7.3: the bench row says "refused"
                refused.add(key)
                continue
        stopped += benches[key].interrupted_run(rng.uniform(0, max_delay), real_signal=i % 2 == 1)
        benches[key].check_next_call()
        i += 1
    return {"interrupts": stopped, "combinations": len(combos), "processes": len(benches), "refused": refused}


def test_interrupts_at_random_moments_leave_every_process_exact():
    counts = interrupt_stress(200, 0.02)
    every = sum(len(bench.bench_names(a)) for a in ARCHES) * len(KERNELS)
    # worked out by hand: a nop10 probe is refused at attach before 7.3 (its 0x2e prefix), and on 7.3 too
    # when the nop10 crosses a page; every other bench of both arches attaches on every kernel
    nop10 = ("uprobe-nop10", "uretprobe-nop10")
    expected = {("x86_64", k, n + cross) for k in KERNELS for n in nop10 for cross in ("", "-pagecross")
                if k != "7.3" or cross}
    assert counts["refused"] == expected
    assert counts["combinations"] + len(counts["refused"]) == every
    assert counts["interrupts"] == 200 and counts["processes"] == min(200, counts["combinations"])


# --- Reset at every step --------------------------------------------------------------------------

def notebook_steppers():
    """(name, make process with its consumer, target to step) for each stepper the notebooks show,
    and the same on the other kernels and on arm64."""
    def probed(arch, kernel, target, warm=False, **options):
        def make():
            proc = ul.new_process(arch, kernel, record=True, **options)
            consumer = ul.CountingConsumer()
            ul.attach(proc, target, consumer)
            if warm:  # views.stepper.warm_stepper: the steady state, after a first call
                proc.call(target)
                consumer.hits = 0
            return proc, consumer
        return make

    def returning(kernel, saves_regs):
        def make():
            proc = make_uretprobe_process(kernel, record=True, uretprobe_saves_regs=saves_regs)
            consumer = ul.CountingConsumer(ret=True)
            ul.attach(proc, "stepper_target", consumer)
            return proc, consumer
        return make

    yield "01 push %rbp 6.18", probed("x86_64", "6.18", "uprobe_target_push"), "uprobe_target_push"
    yield "01 ret 6.18", probed("x86_64", "6.18", "uprobe_target_ret"), "uprobe_target_ret"
    yield "01 ret 6.10", probed("x86_64", "6.10", "uprobe_target_ret"), "uprobe_target_ret"
    for kernel in KERNELS:  # chapter 01's kernel selector over a warm nop5, chapter 02's over the trampolines
        yield f"01 nop5 warm {kernel}", probed("x86_64", kernel, "uprobe_target_nop5", warm=True), "uprobe_target_nop5"
        yield f"02 uretprobe {kernel}", returning(kernel, True), "stepper_caller"
    yield "02 uretprobe 6.11 broken trampoline", returning("6.11", False), "stepper_caller"
    yield "arm64 stp xol", probed("arm64", "6.18", "uprobe_target_push"), "uprobe_target_push"
    yield "arm64 stp simulated", probed("arm64", "6.18", "uprobe_target_push", stp="simulate"), "uprobe_target_push"


def reset_stress(name, make, target) -> int:
    """Reset after 0, 1, ... every step of a full run, then run to the end; returns the resets made."""
    proc, consumer = make()
    full = proc.stepper(target).run_to_end()
    assert full[-1].done and full[-1].signal is None and consumer.hits == 1
    result = proc.regs().as_dict()
    for k in range(len(full) + 1):
        stepper = proc.stepper(target)
        for _ in range(k):
            if not stepper.done:
                stepper.step()
        hits = consumer.hits
        steps = proc.stepper(target).run_to_end()  # Reset, then Run to end
        assert steps[-1].done and steps[-1].signal is None and proc.signal is None, (name, k)
        assert consumer.hits == hits + 1, (name, k)
        assert len(steps) == len(full), (name, k)
        regs = proc.regs().as_dict()
        assert {r: regs[r] for r in ("sp", "ip")} == {r: result[r] for r in ("sp", "ip")}, (name, k)
    return len(full) + 1


@pytest.mark.parametrize("name, make, target", list(notebook_steppers()), ids=lambda v: v if isinstance(v, str) else "")
def test_reset_after_every_step_then_run_to_end(name, make, target):
    assert reset_stress(name, make, target) >= 3  # at least the trap and the step after it, plus k = 0
