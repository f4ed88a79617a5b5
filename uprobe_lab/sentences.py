"""Where a sentence of the course's prose (markdown) ends: the lecture copy shows a paragraph's first sentence and
drops a sentence that points at a cell the lecture leaves out.

A sentence ends at ".", "!" or "?" (with any closing bracket, quote or emphasis mark after it) followed by white
space and a character that is not a lower-case letter: "6.10 made ...", "`int3` ...", "**Bold.** ..." all start
sentences. Not an end: a mark inside an inline code span, an abbreviation ("e.g.", "i.e.", "vs."), or a mark
followed by a lower-case word. A version number's own dots ("6.10.3") have no space after them.
"""
from __future__ import annotations

import re

ABBREVIATIONS = frozenset({"e.g.", "i.e.", "cf.", "vs.", "etc.", "approx.", "resp.", "incl.", "fig.", "no."})
END = re.compile(r"[.!?][)\]\"'*_]*\s+(?=[^\sa-z])")  # an end mark, what closes after it, the space to the next
CODE_SPAN = re.compile(r"`[^`]*`")
OPENERS = "([\"'*_"  # what may stand before an abbreviation: "(e.g."
RUN_IN = re.compile(r"(\*\*|__|\*|_)(?:(?!\1).)+[.!?]\1")  # a sentence all in bold or italics: a run-in heading


def _in_code(spans: list[tuple[int, int]], at: int) -> bool:
    return any(start < at < end for start, end in spans)


def _abbreviation(text: str, mark: int) -> bool:
    """Whether the word that ends with the mark at ``mark`` is an abbreviation."""
    words = text[:mark + 1].split()
    return bool(words) and words[-1].lstrip(OPENERS).lower() in ABBREVIATIONS


def sentences(paragraph: str) -> list[str]:
    """The sentences of a paragraph, its line breaks read as spaces."""
    text = " ".join(paragraph.split())
    spans = [m.span() for m in CODE_SPAN.finditer(text)]
    out, start = [], 0
    for m in END.finditer(text):
        if _in_code(spans, m.start()) or _abbreviation(text, m.start()):
            continue
        out.append(text[start:m.end()].strip())
        start = m.end()
    rest = text[start:].strip()
    return out + [rest] if rest else out


def first_sentence(paragraph: str) -> str:
    """A paragraph's first sentence (the whole paragraph when it has one); a paragraph that opens with a run-in
    heading ("**RIP-relative operands.** Compiled code ...") keeps the sentence after it too."""
    found = sentences(paragraph)
    if len(found) > 1 and RUN_IN.fullmatch(found[0]):
        return f"{found[0]} {found[1]}"
    return found[0] if found else ""
