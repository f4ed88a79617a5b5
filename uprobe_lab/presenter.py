"""The presenter switch: ``./lab lecture`` sets UPROBE_LAB_LECTURE=1 for the Voila server it starts, and the
notebooks ask ``lecture_mode()`` before printing what a widget is there to reveal step by step.

The lecture copy (``lecture_notebook``) is served one slide at a time by the "paged" Voila template in
``SLIDES_PATH`` (a Jupyter data directory: voila/templates/paged): a slide per section, presenter notes folded
away (N shows them, P opens them in a second window), the widgets live, nothing fetched from the network.

Headless runs (the test suite, ``jupyter nbconvert --execute``, the course site) and JupyterLab do not set it, so
they still print every walk: without a widget front end the printout is the only way to see it.
"""
from __future__ import annotations

import copy
import os
import re
import sys
from pathlib import Path

ENV = "UPROBE_LAB_LECTURE"
SLIDES_PATH = Path(__file__).with_name("slides")  # put on JUPYTER_PATH, it gives Voila the "paged" template
HEADING = re.compile(r"#{1,3}\s")  # a section's heading starts a slide


def lecture_mode() -> bool:
    """Whether the notebook is being presented (``./lab lecture``)."""
    return os.environ.get(ENV, "").strip().lower() not in ("", "0", "no", "false")


def unless_presenting(show):
    """``show()`` for a reader, nothing while presenting: a printout the presenter's widget reveals step by step."""
    return None if lecture_mode() else show()


def print_walk(*items) -> None:
    """Print a stepper's walk - steps (anything with ``describe()``), lists of them, or text - unless presenting."""
    if lecture_mode():
        return
    for item in items:
        for part in (item if isinstance(item, (list, tuple)) else [item]):
            print(part.describe() if hasattr(part, "describe") else part)


LECTURE_SKIP = "lecture-skip"  # a cell tag: left out of the lecture copy (a printout the audience need not read)
BULLET = r"\s*(?:[*-]|\d+\.)\s"  # a list item's marker
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`*(\[])")


def first_sentence(paragraph: str) -> str:
    """A paragraph's first sentence (the whole paragraph when it has one)."""
    return SENTENCE_END.split(" ".join(paragraph.split()), maxsplit=1)[0]


def slide_text(markdown: str) -> str:
    """What a slide shows of a markdown cell: headings as they are, a list's items and each paragraph cut to their
    first sentence, code and tables as they are; the whole text follows, folded, as the presenter's notes."""
    out, blocks = [], re.split(r"\n\s*\n", markdown.strip())
    for block in blocks:
        if block.startswith("#") and "\n" in block:  # a heading with its first paragraph under it
            heading, block = block.split("\n", 1)
            out.append(heading)
        lines = block.splitlines()
        if block.startswith(("#", "```", "|", "<", "!")):
            out.append(block)
        elif re.match(BULLET, lines[0]) and all(re.match(BULLET, line) or line.startswith("  ") for line in lines):
            items = re.split(rf"\n(?={BULLET})", block)
            out.append("\n".join(re.match(BULLET, item).group(0) + first_sentence(re.sub(f"^{BULLET}", "", item))
                                 for item in items))
        else:
            out.append(first_sentence(block))
    short = "\n\n".join(out)
    if short.split() == markdown.split():
        return markdown
    return f"{short}\n\n<details><summary>Presenter notes</summary>\n\n{markdown.strip()}\n\n</details>"


def sections(markdown: str) -> list[str]:
    """A text cell cut before each heading inside it (not inside a code block): a section that starts in the
    middle of a cell still gets a slide of its own."""
    parts, current, fenced = [], [], False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if not fenced and HEADING.match(line) and any(text.strip() for text in current):
            parts.append("\n".join(current).strip())
            current = []
        current.append(line)
    parts.append("\n".join(current).strip())
    return parts


def lecture_notebook(nb):
    """The copy of a chapter ``./lab lecture`` serves: no exercises, no cell tagged ``lecture-skip``, each text
    cell cut to its headings and first sentences with the whole text folded under it as presenter notes, and a
    new slide (``slideshow.slide_type``) at each heading (one section, one slide; a text cell is cut before a
    heading inside it) and at the first output after a diagram (the picture, then the live view)."""
    nb = copy.deepcopy(nb)
    kept = []
    for cell in nb.cells:
        tags = set(cell.get("metadata", {}).get("tags", []))
        if tags & {"exercises", LECTURE_SKIP}:
            continue
        pieces = sections(cell.source) if cell.cell_type == "markdown" else [cell.source]
        for i, piece in enumerate(pieces):
            part = copy.deepcopy(cell)
            if i:
                part["id"] = f"{cell.get('id', 'md')}-{i}"
            part.source = slide_text(piece) if cell.cell_type == "markdown" else piece
            starts = part.cell_type == "markdown" and HEADING.match(part.source)
            after_diagram = part.cell_type == "code" and kept and "![" in kept[-1].source  # the view gets a page
            part.setdefault("metadata", {})["slideshow"] = {"slide_type": "slide" if starts or after_diagram else "-"}
            kept.append(part)
    nb.cells = kept
    return nb


def main(argv: list[str] | None = None) -> int:
    """``python -m uprobe_lab.presenter NOTEBOOK OUT``: write the lecture copy of NOTEBOOK to OUT."""
    import nbformat

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m uprobe_lab.presenter NOTEBOOK OUT", file=sys.stderr)
        return 2
    nbformat.write(lecture_notebook(nbformat.read(args[0], as_version=4)), args[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
