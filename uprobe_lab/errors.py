"""Errors a learner can act on: each message names the problem and the way out."""
import sys


class LabError(Exception):
    """A problem with what the learner asked for; the message says what and how to fix it."""


class ProcessKilled(LabError):
    """The emulated process got a fatal signal (as the kernel would deliver it)."""


class SymbolNotFound(LabError, KeyError):
    """A symbol the program does not have (a KeyError too, for code that looks names up)."""

    def __str__(self) -> str:  # KeyError would print the message in quotes
        return str(self.args[0])


def is_int(value) -> bool:
    """An int as an argument means one: True and False are ints to Python, not counts or addresses."""
    return isinstance(value, int) and not isinstance(value, bool)


def shown(value, limit: int = 60) -> str:
    """``repr(value)`` for a message: at most about ``limit`` characters, and never an error of its own (a huge
    int, a string of a million characters, an object whose repr raises)."""
    if is_int(value) and value.bit_length() > 3 * limit:
        return f"an int of {value.bit_length():,} bits"
    try:
        text = " ".join(repr(value).split())  # one line: a Series' repr has several
    except Exception:
        return f"an object ({type(value).__name__}) that cannot be printed"
    return text if len(text) <= limit else f"{text[:limit - 15]}... ({len(text):,} characters)"


def check_choice(value, choices, name: str, way_out: str = "") -> None:
    """Refuse ``value`` unless it equals one of ``choices``, naming them all and ``way_out`` (a widget given a
    value its buttons lack raises a TraitError, a dict a KeyError)."""
    try:
        known = not isinstance(value, bool) and value in choices  # True == 1, but True is no CPU count
    except Exception:  # an array's == is no truth value; a learner's own __eq__ may raise
        known = False
    if not known:
        raise LabError(f"{name} must be one of {', '.join(map(str, choices))}, got {shown(value)}"
                       + (f"; {way_out}" if way_out else ""))


def show_briefly_in_ipython() -> None:
    """In an IPython kernel (a notebook), show a LabError as the command line does: its message alone, which says
    what is wrong and the way out, not under a page of the lab's own frames. ``%tb`` still prints the whole
    traceback; any other exception (a bug) keeps IPython's full one. Outside IPython this does nothing."""
    ipython = sys.modules.get("IPython")  # imported by a kernel, never by the lab: no IPython, no notebook
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is not None and hasattr(shell, "set_custom_exc"):
        shell.set_custom_exc((LabError,), _brief_traceback)


def _brief_traceback(shell, etype, value, tb, tb_offset=None) -> list[str]:
    sys.last_type, sys.last_value, sys.last_traceback = etype, value, tb  # what %tb reads
    if sys.version_info >= (3, 12):
        sys.last_exc = value
    lines = [f"{etype.__name__}: {value}", "(%tb prints where it was raised)"]
    shell._showtraceback(etype, value, lines)  # a kernel sends it as the cell's error, as for any exception
    return lines
