"""Ctrl-C while the emulator runs: held until the kernel model has finished the hit it is in.

A KeyboardInterrupt raised inside a Unicorn hook would tear the kernel model apart mid-hit
(registers not written back, an XOL slot taken and never freed) or be lost in the ctypes callback
("Exception ignored"). So while a run is under way SIGINT only records itself and asks Unicorn to
stop (``uc.emu_stop()``, which takes effect when the hook that is running returns: a hit boundary);
the run then settles the process and raises KeyboardInterrupt in the caller.

Unicorn's binding closes a garbage engine from a finalizer that wraps uc_close in a bare ``except:``,
so a Ctrl-C that arrives while the garbage collector closes one is swallowed without a word.
``retire_on_collect`` replaces that finalizer with a weak reference whose callback is a C function
(``list.append``: no Python code runs during collection, so no Ctrl-C can be raised and lost there),
and ``close_retired`` closes the queued engines when a process is made or run, holding Ctrl-C.

``stop_deferred`` holds Ctrl-C and the stop signals across a step that makes something and notes it as made
(a kernel probe and its fd, a temp file), so no stop falls between the two. ``stop_signals`` names the signals
that stop a command as Ctrl-C does (less any started ignored, as under nohup), and ``handling`` sets a handler
for them around a command and puts the previous ones back.
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading
import weakref
from typing import Callable, Iterator

from unicorn import Uc

from .unicorn_c import close_engine, detach_finalizer


def stop_signals() -> list[signal.Signals]:
    """SIGTERM and SIGHUP, the signals that stop a command as Ctrl-C does - less any this process was started
    ignoring: under ``nohup`` SIGHUP is ignored, and a closed terminal must not stop the run then."""
    return [sig for sig in (signal.SIGTERM, signal.SIGHUP) if signal.getsignal(sig) is not signal.SIG_IGN]


@contextlib.contextmanager
def handling(signals, handler) -> Iterator[None]:
    """``handler`` for each of ``signals`` inside the block, the previous handlers put back after it. A previous
    handler set outside Python (``signal.signal`` returns None for it) cannot be put back: it becomes SIG_DFL, not
    ``handler`` left in place. Handlers can be set only on the main thread; elsewhere the block runs unchanged."""
    previous = {}
    try:
        if threading.current_thread() is threading.main_thread():
            for sig in signals:
                previous[sig] = signal.signal(sig, handler)
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, signal.SIG_DFL if old is None else old)


@contextlib.contextmanager
def stop_deferred() -> Iterator[None]:
    """Hold Ctrl-C and the stop signals while the block runs; one that lands inside it is acted on as the block ends.

    Around a step that makes something and stores its handle (or releases it): a kernel probe, mapping or
    directory, or a temp file that only the code which made it may remove, so a KeyboardInterrupt cannot fall
    between the two and leave behind what no clean-up will ever see. The handlers are swapped rather than the
    signals masked: the kernel hands a process-directed SIGINT to any thread that does not block it (tqdm's
    monitor thread, say), and Python runs the handler in the main thread whichever thread took it. Off the main
    thread, or for a signal ignored or left to the OS, this does nothing. Nested uses hand a held signal on to
    the enclosing one. A child forked inside the block, which never leaves it, holds nothing: its signals go to
    the handlers in place before the block, as they would in a child forked outside it.
    """
    held, raised = [], []
    owner, holding = os.getpid(), [True]

    def hold(signum, frame):
        if holding and os.getpid() == owner:
            held.append((signum, frame))
        else:  # a forked child, or a hold left in place by an interrupted restore: act as if never swapped
            previous[signum](signum, frame)

    def set_each(handlers):  # every handler set even if one raises: signal.signal runs pending handlers first
        todo = list(handlers.items())
        while todo:
            try:
                while todo:
                    signal.signal(*todo[0])
                    del todo[0]
            except KeyboardInterrupt as err:
                raised.append(err)

    previous = {}
    try:
        while True:  # an interrupt on the way in is held too: the block (a close(), say) still runs
            try:
                if threading.current_thread() is threading.main_thread():
                    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, *stop_signals())}
                break
            except KeyboardInterrupt as err:
                raised.append(err)
        previous = {sig: handler for sig, handler in previous.items() if callable(handler)}
        set_each({sig: hold for sig in previous})
        yield
    finally:
        # SIGINT last: the CLI's SIGTERM handler calls the SIGINT one, which holds until then
        set_each({sig: previous[sig] for sig in sorted(previous, key=lambda sig: sig == signal.SIGINT)})
        holding.clear()
        if raised:
            raise raised[0]
        if held:
            signum, frame = held[0]
            previous[signum](signum, frame)  # Python's SIGINT handler raises KeyboardInterrupt; the CLI's SIGTERM too

_engines: dict = {}  # weak reference to a live engine -> its handle
_retired: list = []  # weak references whose engine was collected, closed by close_retired


class Interrupt:
    """What ``sigint_stops`` yields: ``pending`` is True once a SIGINT arrived; ``previous`` is the
    handler that was in place (what ``deliver`` hands the interrupt on to)."""

    pending = False
    previous = None


@contextlib.contextmanager
def sigint_stops(stop: Callable[[], None]) -> Iterator[Interrupt]:
    """Inside the block SIGINT sets ``pending`` and calls ``stop()`` instead of raising; after it, the
    caller decides (and re-raises with ``deliver``). Off the main thread, or when SIGINT is ignored or
    left to the OS, the block runs unchanged and ``pending`` stays False."""
    state = Interrupt()
    if threading.current_thread() is threading.main_thread():
        state.previous = signal.getsignal(signal.SIGINT)
    previous = state.previous

    def on_sigint(signum, frame):
        state.pending = True
        stop()

    if callable(previous):
        signal.signal(signal.SIGINT, on_sigint)
    try:
        yield state
    finally:
        if callable(previous):
            signal.signal(signal.SIGINT, previous)


def deliver(state: Interrupt) -> None:
    """Act on a held SIGINT as the handler in place before the run would have (Python's raises
    KeyboardInterrupt)."""
    if callable(state.previous):
        state.previous(signal.SIGINT, None)
    raise KeyboardInterrupt


def retire_on_collect(uc: Uc) -> None:
    """When ``uc`` is collected, queue its handle for ``close_retired`` instead of closing it there."""
    handle = detach_finalizer(uc)
    if handle is None:
        return  # another binding: its own finalizer stays in place
    _engines[weakref.ref(uc, _retired.append)] = handle


def close_retired() -> None:
    """Close the engines collected since the last call, holding a Ctrl-C until they are closed."""
    if not _retired:
        return
    with sigint_stops(lambda: None) as held:
        while _retired:
            close_engine(_engines.pop(_retired.pop()))
    if held.pending:
        deliver(held)
