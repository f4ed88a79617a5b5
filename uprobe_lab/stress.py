"""Stress checks: Ctrl-C at random moments and Reset at every step must leave every emulated process exact.

:func:`interrupt_stress` interrupts emulated runs of every bench on every kernel on both architectures from
another thread (alternately ``_thread.interrupt_main``, which reaches Python's SIGINT handler as a real
Ctrl-C would, and a real SIGINT sent to the main thread with pthread_kill), each process again and again;
after each interrupt the same process must run the next call with an exact hit count.
:func:`reset_stress` Resets a stepper the notebooks show after every possible number of steps and runs it
to the end. A check that fails raises AssertionError.

tests/test_stress_stops.py runs both briefly, benchmarks/stress_stops.py at length; the latter and
tests/test_stopped_runs.py send Ctrl-C into a run with :func:`ctrl_c_once_running`.
"""
from __future__ import annotations

import _thread
import random
import signal
import threading
import time

from .arches import ARCHES, make_process
from .bench import bench_names, bench_process
from .errors import LabError
from .kernel import KERNELS
from .process import MAX_INSNS
from .uprobes import CountingConsumer, UnprobeableInstruction, uprobe_register
from .x86.uretprobe_programs import make_uretprobe_process

NEXT_CALL = 25  # iterations of the call that follows each interrupt
HANG_GUARD_S = 120  # only a Ctrl-C that is never acted on gets near this; it is no speed goal
LOST_AFTER_S = 10  # a run stops within one RUN_SLICE of a Ctrl-C (~2 s); far past that, it was lost


def check(ok: bool, what) -> None:
    """Raise AssertionError(``what``) unless ``ok`` (unlike ``assert``, kept under ``python -O``)."""
    if not ok:
        raise AssertionError(what)


# --- Ctrl-C at random moments ----------------------------------------------------------------------

def in_a_run() -> bool:
    """A run is under way: the emulator has put its own SIGINT handler in place of Python's."""
    return signal.getsignal(signal.SIGINT) is not signal.default_int_handler


def ctrl_c_once_running(done: threading.Event, sent: list | None = None) -> threading.Thread:
    """Ctrl-C (``_thread.interrupt_main``) as soon as a run is under way, so it lands inside the run and
    not before it; nothing is sent if ``done`` is set first, or if no run starts within HANG_GUARD_S.
    ``sent`` gets the perf_counter() of the moment it was sent, for timing how soon the run stops."""
    def wait_then_interrupt():
        deadline = time.monotonic() + HANG_GUARD_S
        while not in_a_run() and not done.is_set() and time.monotonic() < deadline:
            time.sleep(0.001)
        if in_a_run() and not done.is_set():
            if sent is not None:
                sent.append(time.perf_counter())
            _thread.interrupt_main()

    thread = threading.Thread(target=wait_then_interrupt, daemon=True)
    thread.start()
    return thread


class StressedBench:
    """One (arch, kernel, bench) process, kept across interrupts."""

    def __init__(self, arch: str, kernel: str, name: str):
        self.label = f"{arch} {kernel} {name}"
        self.proc, self.consumer, self.target = bench_process(name, arch, kernel)
        self.syscalls = name == "syscall-count"

    def interrupted_run(self, delay: float, real_signal: bool) -> bool:
        """A run that would take hours, stopped by Ctrl-C after ``delay`` seconds: True once it was.

        A Ctrl-C not acted on within LOST_AFTER_S is sent again until the run stops, and the check
        fails, naming the bench: a lost Ctrl-C fails the stress run instead of hanging it."""
        main = threading.main_thread().ident
        send = (lambda: signal.pthread_kill(main, signal.SIGINT)) if real_signal else _thread.interrupt_main
        ended, lost = threading.Event(), threading.Event()

        def interrupt():
            time.sleep(delay)
            send()
            while not ended.wait(0.5 if lost.is_set() else LOST_AFTER_S):
                lost.set()
                send()

        timer = threading.Thread(target=interrupt, daemon=True)
        try:
            timer.start()
            self.proc.call("producer_loop", 10 ** 12, self.target, max_insns=MAX_INSNS)  # ended by Ctrl-C
        except KeyboardInterrupt:
            pass
        else:
            raise AssertionError(f"{self.label}: the run ended without the interrupt")
        finally:
            ended.set()
            timer.join()
        check(not lost.is_set(), f"{self.label}: a Ctrl-C sent {delay * 1e3:.1f} ms into the call "
                        f"({'SIGINT' if real_signal else 'interrupt_main'}) was not acted on within {LOST_AFTER_S} s")
        return True

    def check_next_call(self) -> None:
        proc = self.proc
        check(proc.signal is None, (self.label, proc.signal, proc.signal_reason))
        check(proc.utask.active_uprobe is None and not proc.utask.return_instances, self.label)
        hits, syscalls = (self.consumer.hits if self.consumer else 0), proc.trace.counts.get("syscalls", 0)
        proc.call("producer_loop", NEXT_CALL, self.target)
        if self.consumer:
            check(self.consumer.hits - hits == NEXT_CALL, self.label)
        if self.syscalls:
            check(proc.trace.counts["syscalls"] - syscalls == NEXT_CALL, self.label)
        area = proc.mm.xol_area
        check(area is None or not any(area.bitmap[1:]), f"{self.label}: an XOL slot leaked")


def interrupt_stress(trials: int, max_delay: float, seed: int = 15) -> dict:
    """``trials`` interrupts, cycling over every (arch, kernel, bench) whose probe the kernel accepts."""
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        raise LabError("SIGINT is not Python's own here (ignored, as a shell without job control starts a "
                       "background job, or replaced), so no Ctrl-C could stop a run and the stress run would "
                       "never end: run it in the foreground, or call "
                       "signal.signal(signal.SIGINT, signal.default_int_handler) first")
    rng = random.Random(seed)
    combos = [(a, k, n) for a in ARCHES for k in KERNELS for n in bench_names(a)]
    benches, refused = {}, set()
    i = stopped = 0
    while i < trials:
        key = combos[i % len(combos)]
        if key in refused:
            combos.remove(key)
            continue
        if key not in benches:
            try:
                benches[key] = StressedBench(*key)
            except UnprobeableInstruction:  # e.g. a nop10 before 7.3 or 7.2.6: the bench row says "refused"
                refused.add(key)
                continue
        stopped += benches[key].interrupted_run(rng.uniform(0, max_delay), real_signal=i % 2 == 1)
        benches[key].check_next_call()
        i += 1
    return {"interrupts": stopped, "combinations": len(combos), "processes": len(benches), "refused": refused}


# --- Reset at every step --------------------------------------------------------------------------

def notebook_steppers():
    """(name, make process with its consumer, target to step) for each stepper the notebooks show,
    and the same on the other kernels and on arm64."""
    def probed(arch, kernel, target, warm=False, **options):
        def make():
            proc = make_process(arch, kernel, record=True, **options)
            consumer = CountingConsumer()
            uprobe_register(proc, target, consumer)
            if warm:  # views.stepper.probed_stepper(warm=True): the steady state, after a first call
                proc.call(target)
                consumer.hits = 0
            return proc, consumer
        return make

    def returning(kernel, saves_regs):
        def make():
            proc = make_uretprobe_process(kernel, record=True, uretprobe_saves_regs=saves_regs)
            consumer = CountingConsumer(ret=True)
            uprobe_register(proc, "stepper_target", consumer)
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
    check(full[-1].done and full[-1].signal is None and consumer.hits == 1, name)
    result = proc.regs().as_dict()
    for k in range(len(full) + 1):
        stepper = proc.stepper(target)
        for _ in range(k):
            if not stepper.done:
                stepper.step()
        hits = consumer.hits
        steps = proc.stepper(target).run_to_end()  # Reset, then Run to end
        check(steps[-1].done and steps[-1].signal is None and proc.signal is None, (name, k))
        check(consumer.hits == hits + 1, (name, k))
        check(len(steps) == len(full), (name, k))
        regs = proc.regs().as_dict()
        check({r: regs[r] for r in ("sp", "ip")} == {r: result[r] for r in ("sp", "ip")}, (name, k))
    return len(full) + 1
