"""Exercises for every chapter, checked by the lab itself.

A learner writes an answer in a cell and calls ``check("03.2", answer)``. The checker asks the lab for the
right answer each time (the emulator, the kernel model, the seed tables): nothing here stores an answer
string, so a change in the lab's model of the kernel changes what counts as right. A wrong answer gets the
reason, in the kernel's terms; ``hint(id)`` and ``solution(id)`` give the rest.

Each chapter's exercises live in ``chNN.py``, imported when a chapter's exercise is first asked for; ``uprobe_lab.exercises.notebook`` writes them as the last
section of the chapter's notebook (hints and worked solutions collapsed).
"""
from ..errors import LabError
from .core import CHAPTERS, Exercise, Verdict, all_exercises, chapter, check, get, hint, solution

__all__ = ["check", "hint", "solution", "chapter", "get", "all_exercises", "CHAPTERS", "Verdict", "Exercise", "LabError"]
