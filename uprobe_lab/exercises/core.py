"""The exercise registry and the checker; the chapters register their exercises in it."""
from __future__ import annotations

import html
import importlib
from dataclasses import dataclass
from typing import Any, Callable

from ..chapters import CHAPTERS as COURSE
from ..errors import LabError
from .judges import plain, shown

KINDS = ("predict", "break it", "open")


@dataclass
class Verdict:
    """What ``check`` says: right or not, and why."""

    exercise: str
    ok: bool
    message: str
    answered: bool = True

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        mark = "right" if self.ok else ("no answer yet" if not self.answered else "not yet")
        return f"Exercise {self.exercise}: {mark}. {self.message}"

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        colour = "#1a7f37" if self.ok else ("#9a6700" if not self.answered else "#cf222e")
        mark = "✔ right" if self.ok else ("… no answer yet" if not self.answered else "✘ not yet")
        body = html.escape(self.message).replace("\n", "<br>")
        return (f"<div class='uprobe-lab-verdict' style='border-left:4px solid {colour};padding:4px 10px'>"
                f"<b style='color:{colour}'>Exercise {self.exercise}: {mark}.</b> {body}</div>")


@dataclass
class Exercise:
    """One exercise. ``expected()`` computes the right answer with the lab; ``judge(answer, expected)``
    returns (ok, reason), the reason naming what is wrong in the learner's answer; ``why(expected)`` is
    the explanation shown with every verdict."""

    id: str
    title: str
    kind: str
    question: str  # markdown
    hint: str  # markdown
    solution: str  # python that sets ``answer``; shown as the worked solution, run by the tests
    expected: Callable[[], Any]
    judge: Callable[[Any, Any], tuple[bool, str]]
    why: Callable[[Any], str]
    explanation: str = ""  # markdown under the worked solution's code

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"exercise {self.id}: kind {self.kind!r} is not one of {KINDS}")


CHAPTERS = tuple(c.number for c in COURSE)
_REGISTRY: dict[str, Exercise] = {}
_MISSES: dict[str, int] = {}  # wrong answers so far, per exercise, in this Python session
TRIES_BEFORE_WHY = 3  # the explanation, which may name the answer, comes with the third wrong try


class Remembered:
    """An open task's lab function, as its ``expected()`` returns it: called by the judge with the learner's own
    case, it keeps that case and the lab's answer (``last``: (args, answer), None until asked), so that the
    verdict's ``why`` can name them."""

    def __init__(self, ask: Callable):
        self.ask, self.last = ask, None

    def __call__(self, *args):
        answer = self.ask(*args)
        self.last = (args, answer)
        return answer

    @staticmethod
    def why(before: str, describe: Callable) -> Callable:
        """An exercise's ``why``: ``describe(*case, answer)`` of the last case asked, ``before`` until there is one."""
        return lambda lab: before if lab.last is None else describe(*lab.last[0], lab.last[1])


def exercise(**fields) -> Exercise:
    ex = Exercise(**fields)
    if ex.id in _REGISTRY:
        raise ValueError(f"exercise {ex.id} is defined twice")
    _REGISTRY[ex.id] = ex
    return ex


def _load(number: str) -> None:
    """Import chapter ``number``'s module, which registers its exercises: only the chapter a notebook asks
    about, as the later chapters' import pandas and matplotlib (seconds a chapter-00 cell need not wait)."""
    if number in CHAPTERS:
        importlib.import_module(f"{__package__}.ch{number}")


def _order(ex_id: str) -> tuple[str, int]:
    number, _, n = ex_id.partition(".")
    return number, int(n)


def _registered() -> dict[str, Exercise]:
    """The exercises of the chapters loaded so far, by id, in chapter order."""
    return {ex_id: _REGISTRY[ex_id] for ex_id in sorted(_REGISTRY, key=_order)}


def all_exercises() -> dict[str, Exercise]:
    """Every chapter's exercises by id, in chapter order."""
    for number in CHAPTERS:
        _load(number)
    return _registered()


def get(ex_id: str) -> Exercise:
    if not isinstance(ex_id, str):
        raise LabError(f"name the exercise by its id, a string such as '01.1', got {shown(ex_id)}")
    ex_id = ex_id.strip()
    _load(ex_id.split(".")[0])
    if ex_id not in _REGISTRY:
        raise LabError(f"no exercise {shown(ex_id)}; the exercises are {', '.join(all_exercises())}")
    return _REGISTRY[ex_id]


def chapter(number: str) -> list[Exercise]:
    """The exercises of chapter ``number`` ("01"), in order."""
    _load(number)
    return [ex for ex_id, ex in _registered().items() if ex_id.split(".")[0] == number]


def check(ex_id: str, answer: Any) -> Verdict:
    """Right or not, and why: the lab computes the answer now and compares. Any value gets a verdict (a numpy or
    pandas value is read as its Python value); only an unknown exercise id raises."""
    ex = get(ex_id)
    try:
        answer = plain(answer)
    except Exception as err:  # a value no question asks for (an array of many values, a huge text)
        return _unreadable(ex, answer, err)
    if answer is None or answer is ... or (isinstance(answer, str) and not answer.strip()):
        return Verdict(ex.id, False, f"Replace None with your answer and run the cell again. Stuck? "
                                    f"hint({ex.id!r})", answered=False)
    expected = ex.expected()
    try:
        ok, reason = ex.judge(answer, expected)
        ok = bool(ok)
    except Exception as err:
        return _unreadable(ex, answer, err)
    if not ok:
        _MISSES[ex.id] = _MISSES.get(ex.id, 0) + 1
        if _MISSES[ex.id] < TRIES_BEFORE_WHY:  # the lab's answer stays back: what is wrong, and where to look
            return Verdict(ex.id, False, (reason + " " if reason else "") + f"Try again; hint({ex.id!r}) helps, and "
                           f"solution({ex.id!r}) shows the way.")
    return Verdict(ex.id, ok, (reason + " " if reason else "") + ex.why(expected))


def _unreadable(ex: Exercise, answer: Any, err: Exception) -> Verdict:
    """The verdict on an answer the checker cannot read: a LabError says which form it wants; anything else was
    raised by the answer's own methods (__eq__, __str__, ...) or by a form no judge foresaw."""
    if isinstance(err, LabError):
        return Verdict(ex.id, False, str(err).rstrip(".") + ".")
    return Verdict(ex.id, False, f"The checker cannot read {shown(answer)} ({type(err).__name__}): give the answer "
                                 f"in the form the question shows; hint({ex.id!r}) has an example.")


def hint(ex_id: str) -> str:
    return _Text(get(ex_id).hint)


def solution(ex_id: str) -> str:
    ex = get(ex_id)
    return _Text(ex.solution + ("\n\n" + ex.explanation if ex.explanation else ""))


class _Text(str):
    """A string that prints as itself in a notebook (no quotes, newlines kept)."""

    def __repr__(self) -> str:
        return str(self)
