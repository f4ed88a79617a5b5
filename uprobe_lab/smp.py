"""Many CPUs, one mm: N threads of one process run a call each, one emulated CPU per thread.

What the kernel bench does with ``-p N``: N producer threads of one process, each pinned to a CPU of its
own, call the probed function in a loop. Here the threads share everything a process's threads share
(the mm with its uprobes and ``[uprobes]`` XOL page, the probe's consumers, the kernel model) and own what
a thread owns: its registers, its ``uprobe_task`` (return instances, the XOL slot it steps in) and its
stack. One Unicorn CPU runs them in turn, switching at instruction boundaries after a seeded random
number of instructions, so the interleaving is the same for the same seed; a hit's kernel path runs
whole, as with preemption disabled. A thread that finds every XOL slot taken sleeps on the area's wait
queue until a slot is freed (``xol_get_insn_slot``), as in the kernel.

What the lab leaves out: time. The threads do not run at once, so a spinlock never spins and a line never
waits; what the run gives is what a hit touches that other CPUs touch too (``Trace.lines``, per kernel:
uprobe_lab.contended) and how often a line moved from one CPU's cache to another's in this interleaving
(``line_transfers``): the counts a cost model of many CPUs prices.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from unicorn import UcError

from .errors import LabError, ProcessKilled, is_int, shown
from .interrupt import deliver, sigint_stops
from .process import DEFAULT_MAX_INSNS, MAX_INSNS, EmulatedProcess, check_max_insns

MAX_CPUS = 256  # the kernel bench's MAX_CPUS
THREAD_STACK_SIZE = 0x10000
MAX_SLICE = 400  # the most instructions a thread runs before the scheduler picks again: a few hits
SWITCH_ON_EXIT = 0.5  # how often a return to user mode switches threads


@dataclass
class Thread:
    """One producer thread: its CPU, what the scheduler switches (registers and per-task state), whether it sleeps."""
    cpu: int
    stack_top: int | None = None  # mapped by Scheduler.run; None: CPU 0 runs on the process's [stack]
    context: object = None  # Unicorn's saved registers
    task_state: dict = field(default_factory=dict)  # the process's TASK_STATE attributes while switched out
    done: bool = False
    resume: object = None  # sleeping in the kernel: what it does when woken (None: not asleep)
    woken: object = None  # woken, not yet run: what it does first when it runs


def thread_stack_top(proc: EmulatedProcess, cpu: int) -> int | None:
    """CPU 0 runs on the process's [stack]; each other thread gets a stack mapped below it, as pthread_create does."""
    main = proc.find_mapping("[stack]")
    if cpu == 0:
        return None
    name = f"[thread {cpu} stack]"
    start = main.start - cpu * (THREAD_STACK_SIZE + 0x1000)  # a guard page between two stacks
    if proc.find_mapping(name) is None:
        proc.map(name, start, THREAD_STACK_SIZE, "rw-p")
    return start + THREAD_STACK_SIZE


class Scheduler:
    """Runs one call per thread on ``proc`` to its end; ``proc.scheduler`` while it runs (the kernel model asks
    it to put a thread to sleep: ``sleep``, ``wake_all``)."""

    def __init__(self, proc: EmulatedProcess, cpus: int, seed: int = 0, max_slice: int = MAX_SLICE,
                 switch_on_exit: float = SWITCH_ON_EXIT, progress=None):
        if not is_int(cpus) or not 1 <= cpus <= MAX_CPUS:
            raise LabError(f"cpus is an int from 1 to {MAX_CPUS} (the kernel bench's limit), got {cpus!r}")
        if not is_int(seed):
            raise LabError(f"the scheduler's seed is an int, got {seed!r}")
        self.proc = proc
        self.rng = random.Random(seed)
        self.max_slice = max_slice
        self.switch_on_exit = switch_on_exit
        self.threads = [Thread(cpu) for cpu in range(cpus)]
        self.current: Thread | None = None
        self.sleeps = 0  # how many times a thread went to sleep (XOL slots all taken)
        self.most_asleep = 0
        self.progress = progress  # called with no argument between two slices: a progress display looks

    # --- what the kernel model calls ---
    def sleep(self, resume) -> None:
        """Put the running thread to sleep in the kernel; ``resume()`` runs when it is woken (and may sleep again)."""
        self.current.resume = resume
        self.sleeps += 1
        self.most_asleep = max(self.most_asleep, sum(t.resume is not None for t in self.threads))
        self.proc.uc.emu_stop()

    def preempt(self) -> None:
        """On the way back to user mode: switch to another thread with probability ``switch_on_exit``. On a
        real machine the threads run at once, so a thread's kernel entries overlap the others'; here a switch
        on exit is what lets many threads be between a trap and its return at the same time (holding an XOL
        slot, for instance)."""
        if self.rng.random() < self.switch_on_exit:
            self.proc.uc.emu_stop()

    def wake_all(self) -> None:
        """wake_up(): every sleeper becomes runnable; each checks again when it runs."""
        for t in self.threads:
            if t.resume is not None:
                t.resume, t.woken = None, t.resume

    # --- switching ---
    def _switch_in(self, t: Thread) -> None:
        proc = self.proc
        if t.context is not None:  # None: a new thread starts from the registers as they are
            proc.uc.context_restore(t.context)
        for name, value in t.task_state.items():
            setattr(proc, name, value)
        self.current = t
        proc.cpu = t.cpu

    def _switch_out(self, t: Thread) -> None:
        proc = self.proc
        t.context = proc.uc.context_save()
        t.task_state = {name: getattr(proc, name) for name in proc.TASK_STATE}

    def run(self, target, *args: int, max_insns: int) -> None:
        """Each thread calls ``target(*args)``; returns when all have returned. A signal kills them all. The
        threads together run at most ``max_insns`` instructions."""
        proc = self.proc
        check_max_insns(max_insns)
        if proc.signal:
            raise ProcessKilled(f"the process already died of {proc.signal} ({proc.signal_reason}); make a new one")
        with proc.exclusive():
            if proc._unfinished:
                proc.abandon_run()
            until = None
            for t in self.threads:
                t.stack_top = thread_stack_top(proc, t.cpu)  # mapped holding the process: no other call maps
                t.task_state = {**{name: getattr(proc, name) for name in proc.TASK_STATE}, **proc.new_task_state()}
                self._switch_in(t)
                start, until = proc.prepare_call(target, *args, stack_top=t.stack_top)
                proc.reg_write(proc.PC, start)
                self._switch_out(t)
            proc.scheduler, proc.trace.track_lines = self, True
            try:
                self._run(until, max_insns)
            finally:
                proc.scheduler, proc.trace.track_lines = None, False
                proc.cpu = 0

    def _run(self, until: int, max_insns: int) -> None:
        proc, uc = self.proc, self.proc.uc
        left = max_insns
        proc._running = True
        try:
            with sigint_stops(uc.emu_stop) as interrupt:
                while not interrupt.pending:
                    if self.progress is not None:
                        self.progress()
                    runnable = [t for t in self.threads if not t.done and t.resume is None]
                    if not runnable:
                        if all(t.done for t in self.threads):
                            break
                        raise LabError("every thread sleeps in the kernel and none can wake them")
                    t = self.rng.choice(runnable)
                    self._switch_in(t)
                    woken = t.woken
                    if woken is not None:
                        t.woken = None
                        woken()  # back in the kernel where it slept
                        if t.resume is not None or proc.signal:
                            self._switch_out(t)
                            if proc.signal:
                                break
                            continue
                    count = min(left, self.rng.randint(1, self.max_slice))
                    try:
                        uc.emu_start(proc.pc, until, count=count)
                    except UcError as err:
                        proc.cpu_fault(err, f" (CPU {t.cpu})")
                    left -= count
                    if proc.pc == until:
                        t.done = True
                    self._switch_out(t)
                    if proc.signal:
                        break
                    if left <= 0:
                        raise LabError(f"the threads ran {max_insns:_} instructions without all returning; give "
                                       "a larger max_insns (an argument of call_on_cpus and run_on_cpus), or "
                                       "fewer iterations")
        finally:
            proc._running = False
            for t in self.threads:  # the scheduler's threads end with the run: nothing of theirs stays pending
                if not t.done and t.context is not None:
                    self._switch_in(t)
                    proc.abandon_run()  # a pending step aborted (slot freed, trap flag cleared), no return instances
                    self._switch_out(t)
            self._switch_in(self.threads[0])
        if interrupt.pending:
            deliver(interrupt)
        if proc.signal:
            raise ProcessKilled(f"the emulated process died of {proc.signal}: {proc.signal_reason}")


def run_on_cpus(proc: EmulatedProcess, cpus: int, target, *args: int, seed: int = 0,
                switch_on_exit: float = SWITCH_ON_EXIT, max_insns: int = MAX_INSNS, progress=None) -> Scheduler:
    """Call ``target(*args)`` on ``cpus`` threads of ``proc`` at once (interleaved by ``seed``); the Scheduler
    that ran them (its threads, how often a thread slept waiting for an XOL slot). ``progress()`` is called
    between two slices of the run."""
    scheduler = Scheduler(proc, cpus, seed, switch_on_exit=switch_on_exit, progress=progress)
    scheduler.run(target, *args, max_insns=max_insns)
    return scheduler


def call_on_cpus(proc: EmulatedProcess, target, *args: int, seed: int = 0,
                 max_insns: int = DEFAULT_MAX_INSNS) -> Scheduler:
    """Call ``target(*args)`` on each of the process's CPUs at once (``new_process(cpus=N)``): :func:`run_on_cpus`.
    ``max_insns`` bounds all the threads' instructions together, with the default budget of ``proc.call``."""
    if not isinstance(proc, EmulatedProcess):
        raise LabError(f"call_on_cpus() needs a process, got {shown(proc)}: make one with new_process(cpus=N)")
    return run_on_cpus(proc, proc.cpus, target, *args, seed=seed, max_insns=max_insns)
