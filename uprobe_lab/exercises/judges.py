"""How an answer is compared with what the lab computed, each saying what is wrong in words."""
from __future__ import annotations

import difflib
import itertools
import math
import sys
from typing import Any, Callable

from ..bench import events_per_hit
from ..errors import LabError, is_int, shown

# the lab's short names (pt_regs style) and 32-bit names -> the 64-bit names a learner reads in a listing
REGISTER_ALIASES = {"ax": "rax", "eax": "rax", "cx": "rcx", "ecx": "rcx", "dx": "rdx", "edx": "rdx", "bx": "rbx",
                    "sp": "rsp", "bp": "rbp", "si": "rsi", "di": "rdi", "ip": "rip", "flags": "rflags",
                    "eflags": "rflags"}


MAX_TEXT = 200  # characters: the longest answer is a few words or an instruction's hex bytes
MAX_ITEMS = 32  # entries of a list, set or dict: the largest answer has a handful
MAX_BITS = 1000  # an int beyond this is beyond a float, and beyond any count, offset or rate asked
MAX_DEPTH = 4  # containers in containers: the deepest answer is a dict in a dict in a tuple


def listed(items, limit: int = 6) -> str:
    """Items for a message, a short string as it is and anything else :func:`shown`: the first ``limit``, then
    how many more."""
    items = list(items)
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(i if isinstance(i, str) and len(i) <= 100 else shown(i) for i in items[:limit]) + more


def plain(answer: Any, depth: int = 0) -> Any:
    """The answer as the judges read it: a numpy or pandas scalar as its Python value, a one-element array or
    Series as that element (inside a tuple or dict a longer one as a list), pd.NA as None, a generator as a list,
    containers item by item. LabError for what no question asks: an array or Series of several values, a text or
    a container too long to be an answer, an int beyond any figure."""
    top, what = depth == 0, type(answer).__name__
    np, pd = sys.modules.get("numpy"), sys.modules.get("pandas")  # a value of theirs needs them imported
    if pd is not None:
        if answer is pd.NA or answer is pd.NaT:
            return None
        if isinstance(answer, (pd.Series, pd.Index)) or (
                isinstance(answer, pd.DataFrame) and (top or answer.size == 1)):  # 05.5's table stays one
            answer = answer.to_numpy()
    if np is not None:
        if isinstance(answer, np.generic):
            return plain(answer.item(), depth)
        if isinstance(answer, np.ndarray):
            if answer.size == 1:
                return plain(answer.reshape(-1)[0], depth)
            if top:
                what = "an array" if what == "ndarray" else f"a{'n' * (what[0] in 'AEIOU')} {what}"
                raise LabError(f"{what} of {answer.size} values: give one value, or the list, set or dict the "
                               "question asks for (.tolist() makes a list)")
            answer = answer.tolist()  # inside a tuple or dict: judged as the list it holds
    if isinstance(answer, (str, bytes, bytearray)):
        if len(answer) > MAX_TEXT:
            raise LabError(f"a text of {len(answer):,} characters: the answers here are short (a number, a word, "
                           "an instruction's hex bytes)")
        return answer
    if is_int(answer) and answer.bit_length() > MAX_BITS:
        raise LabError(f"{shown(answer)} is beyond any answer here: give a number such as 2, 31.4 or 0x14f")
    if depth < MAX_DEPTH and (isinstance(answer, (list, tuple, set, frozenset, dict)) or hasattr(answer, "__next__")):
        if hasattr(answer, "__next__"):  # a generator, read once; an endless one stops at the limit
            answer = list(itertools.islice(answer, MAX_ITEMS + 1))
            if len(answer) > MAX_ITEMS:
                raise LabError(f"an iterator of more than {MAX_ITEMS} items: the answers here have a handful")
        if len(answer) > MAX_ITEMS:
            raise LabError(f"a {type(answer).__name__} of {len(answer):,} items: the answers here have a handful")
        if isinstance(answer, dict):
            return {plain(k, depth + 1): plain(v, depth + 1) for k, v in answer.items()}
        kind = next(k for k in (list, tuple, set, frozenset) if isinstance(answer, k))  # a namedtuple: a tuple
        return kind(plain(a, depth + 1) for a in answer)
    return answer


def as_number(answer: Any) -> float:
    """A number from an int, a float or a string: "31.4", "31.4%", "2x", or an integer in Python's
    notation ("0x14f", as a disassembler prints an immediate). NaN and infinity are refused: no count or rate
    is either."""
    if isinstance(answer, bool):
        raise LabError(f"{answer!r} is a truth value; the answer is a number")
    text = str(answer).strip()
    try:
        got = float(text.rstrip("%x"))
    except ValueError:
        try:
            got = float(int(text, 0))
        except ValueError:
            raise LabError(f"{shown(answer)} is not a number; give one, e.g. 2, 31.4 or 0x14f") from None
        except OverflowError:  # an integer literal beyond a float
            got = math.inf
    if math.isnan(got):
        raise LabError(f"{shown(answer)} is not a number (NaN); give one, e.g. 2, 31.4 or 0x14f")
    if math.isinf(got):
        raise LabError(f"{shown(answer)} is beyond any answer here: give a number such as 2, 31.4 or 0x14f")
    return got


def not_known(names, known, what: str, plural: str) -> LabError:
    """The error for answer keys outside ``known``: each with the nearest known name, then every known one."""
    known = list(known)
    parts = []
    for name in names:
        near = difflib.get_close_matches(name, known, n=1) if isinstance(name, str) else []
        parts.append(shown(name) + (f" (did you mean {near[0]!r}?)" if near else ""))
    return LabError(f"{listed(parts)}: not {what}; the {plural} are {', '.join(known)}")


def word(text: Any) -> str:
    """Lower case, no surrounding space or quotes, inner spaces kept single."""
    return " ".join(str(text).strip().strip("'\"").lower().split())


# One spelling for every checker of what a kernel does with a probe: the lab's word, and the words a learner (or
# the kernel's source: can_optimize, "refuse") may write for it
SPELLINGS = {
    "optimise": ("optimize", "optimised", "optimized", "optimises", "optimizes", "optimisation", "optimization"),
    "emulate": ("emulated", "emulates", "emulation"),
    "simulate": ("simulated", "simulates", "simulation"),
    "xol": ("step", "stepped", "steps", "single step", "single stepped", "singlestep", "out of line",
            "stepped out of line", "single stepped out of line"),
    "reject": ("rejected", "rejects", "refuse", "refused", "refuses", "refusal"),
}
_SPELT = {spelling: lab for lab, spellings in SPELLINGS.items() for spelling in spellings}


def spelling(text: Any) -> str:
    """The lab's word for ``text`` (see SPELLINGS: 'optimized' and 'Optimised' are 'optimise', 'single-stepped'
    is 'xol', 'refused' is 'reject'); any other text its :func:`word`."""
    w = word(text)
    return _SPELT.get(w.replace("-", " ").replace("_", " "), w)


SIGNALS = {"sigill": 4, "sigtrap": 5, "sigbus": 7, "sigkill": 9, "sigsegv": 11}


def signal_name(text: Any) -> str:
    """One spelling of a signal for every checker: 'SIGSEGV', 'segv', 'sigsegv' and 11 are all 'sigsegv';
    anything else (an exit status) is its :func:`word`."""
    if isinstance(text, int) and not isinstance(text, bool):
        return next((name for name, number in SIGNALS.items() if number == text), str(text))
    w = word(text)
    return w if w in SIGNALS else ("sig" + w if "sig" + w in SIGNALS else w)


def register(name: Any) -> str:
    n = word(name).lstrip("%")
    return REGISTER_ALIASES.get(n, n)


LOWEST_LOAD_ADDRESS = 0x400000  # where x86-64's non-PIE programs start; a process's mappings lie at or above it


def number(tolerance: float = 0.0, unit: str = "", offset_from: str = "",
           because: Callable[[float], str] | None = None) -> Callable[[Any, float], tuple[bool, str]]:
    """Equal within ``tolerance`` (absolute); the reason says too high or too low, then ``because(answer)``:
    what the wrong number stands for, or where to look (never the right number). The question states the
    tolerance in :func:`tolerance_words` (a test holds every numeric question to it). For an offset from
    ``offset_from`` (e.g. "the site"), an answer as large as an address is named as one."""
    def judge(answer, expected):
        got = as_number(answer)
        if abs(got - expected) <= tolerance + 1e-9:
            return True, ""
        if offset_from and got >= LOWEST_LOAD_ADDRESS > expected:
            return False, (f"{int(got):#x} is an address, not an offset: give the offset from {offset_from} "
                           "(subtract its address).")
        said = f"{got:g}{unit} is too {'high' if got > expected else 'low'}"
        return False, said + (f": {because(got)}" if because else ".")
    judge.tolerance = tolerance
    return judge


def tolerance_words(tolerance: float) -> str:
    """How a question states the tolerance its judge applies: "exact", or "±0.15"."""
    return "exact" if tolerance == 0 else f"±{tolerance:g}"


def choice(options: tuple[str, ...], normalise: Callable[[Any], str] = spelling,
           because: Callable[[str], str] | None = None) -> Callable[[Any, str], tuple[bool, str]]:
    """One of ``options``, however SPELLINGS lets the learner write it; a wrong one is named, then
    ``because(got)``: why that choice is wrong (never the right one)."""
    def judge(answer, expected):
        got = normalise(answer)
        if got not in options:
            raise LabError(f"{shown(answer)} is not one of the choices: {', '.join(options)}")
        if got == expected:
            return True, ""
        return False, f"Not {got}" + (f": {because(got)}" if because else ".")
    return judge


def truth(answer: Any) -> bool:
    if isinstance(answer, bool):
        return answer
    w = word(answer)
    if w in ("yes", "true", "y"):
        return True
    if w in ("no", "false", "n"):
        return False
    raise LabError(f"{shown(answer)}: answer True or False")


def same_set(normalise: Callable[[Any], str] = word, what: str = "") -> Callable[[Any, set], tuple[bool, str]]:
    """The same members; the reason names the missing and the extra ones."""
    def judge(answer, expected):
        if isinstance(answer, (str, bytes)) or not hasattr(answer, "__iter__"):
            raise LabError(f"{shown(answer)}: give a set or list, e.g. {{'a', 'b'}}")
        got = {normalise(a) for a in answer}
        missing, extra = sorted(expected - got), sorted(got - expected)
        if not missing and not extra:
            return True, ""
        parts = []
        if missing:
            parts.append(f"Missing {len(missing)} {what}".rstrip())
        if extra:
            parts.append(f"should not be there: {listed(extra)}")
        text = "; ".join(parts)
        return False, text[0].upper() + text[1:] + "."
    return judge


def per_item(normalise_key: Callable[[Any], Any], judge_value: Callable[[Any, Any], tuple[bool, str]],
             explain: Callable[[Any, Any], str] | None = None) -> Callable[[Any, dict], tuple[bool, str]]:
    """A mapping judged item by item: every key of the expected mapping must be answered; each wrong item is
    named with ``explain(key, expected_value)`` - the kernel's reason for that one item."""
    def judge(answer, expected):
        if not isinstance(answer, dict):
            raise LabError("give a dict, one entry per item: {" + ", ".join(f"{k!r}: ..." for k in expected) + "}")
        got = {normalise_key(k): v for k, v in answer.items()}
        unanswered = [k for k in expected if k not in got]
        unasked = [k for k in got if k not in expected]
        if unanswered or unasked:  # an answer of the wrong shape: said, and not counted as a try
            said = [f"no answer for {listed(unanswered)}"] if unanswered else []
            said += [f"not asked: {listed(unasked)} (the question asks for "
                     f"{', '.join(map(str, expected))})"] if unasked else []
            text = "; ".join(said)
            raise LabError(text[0].upper() + text[1:])
        wrong = []
        for key, want in expected.items():
            ok, _ = judge_value(got[key], want)
            if not ok:
                wrong.append(f"{key}: {explain(key, want) if explain else 'not ' + str(got[key])}")
        if not wrong:
            return True, ""
        text = f"{len(wrong)} of {len(expected)} wrong - " + "; ".join(wrong)
        return False, text if text.endswith("?") else text + "."
    if hasattr(judge_value, "tolerance"):
        judge.tolerance = judge_value.tolerance
    return judge


def value(normalise: Callable[[Any], Any] = word) -> Callable[[Any, Any], tuple[bool, str]]:
    def judge(answer, expected):
        return (normalise(answer) == normalise(expected)), ""
    return judge


def bill(bench: str, kernel: str, kinds) -> dict[str, float]:
    """The emulator's steady-state count of each of ``kinds`` for one x86-64 hit of ``bench`` on ``kernel``, 0 for
    a kind the hit does not have: the expected answer of the exercises that ask a bill."""
    counts = events_per_hit(bench, "x86_64", kernel)
    return {kind: counts.get(kind, 0) for kind in kinds}
