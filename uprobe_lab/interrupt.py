"""Ctrl-C while the emulator runs: held until the kernel model has finished the hit it is in.

A KeyboardInterrupt raised inside a Unicorn hook would tear the kernel model apart mid-hit
(registers not written back, an XOL slot taken and never freed) or be lost in the ctypes callback
("Exception ignored"). So while a run is under way SIGINT only records itself and asks Unicorn to
stop (``uc.emu_stop()``, which takes effect when the hook that is running returns: a hit boundary);
the run then settles the process and raises KeyboardInterrupt in the caller.
"""
from __future__ import annotations

import contextlib
import signal
import threading
from typing import Callable, Iterator


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
