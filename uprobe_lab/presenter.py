"""The presenter switch: ``./lab lecture`` sets UPROBE_LAB_LECTURE=1 for the Voila server it starts, and the
notebooks ask ``lecture_mode()`` before printing what a widget is there to reveal step by step.

The lecture copy (``lecture_notebook``) is served one slide at a time by the "paged" Voila template in
``SLIDES_PATH`` (a Jupyter data directory: voila/templates/paged): a slide per section, presenter notes folded
away (N shows them, P opens them in a second window), the widgets live, nothing fetched from the network.

Headless runs (the test suite, ``jupyter nbconvert --execute``, the course site) and JupyterLab do not set it, so
they still print every walk: without a widget front end the printout is the only way to see it.
"""
from __future__ import annotations

import ast
import copy
import os
import re
import sys
from pathlib import Path

from .sentences import first_sentence, sentences

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
LECTURE_SLIDE = "lecture-slide"  # a cell tag: starts a slide in the lecture copy (a section too long for one screen)
DIAGRAM = re.compile(r"!\[[^\]]*\]\(diagrams/")  # a course diagram in a text cell
EXERCISES = "exercises"  # the tag of a chapter's exercise section (uprobe_lab.exercises.notebook writes it)
NOTES = "lecture_notes"  # a code cell's metadata: what the presenter clicks and says at its output (markdown)
EXERCISE_API = "uprobe_lab.exercises"  # a cell that imports from it or calls what it gave is the learner's to run
SHELL = {"sh", "bash", "console", "shell", "shell-session", "zsh"}  # fenced blocks a lecture leaves out
SHELL_MAGICS = ("%%sh", "%%bash", "%%script", "%%system")
BULLET = r"\s*(?:[*-]|\d+\.)\s"  # a list item's marker
FENCE = re.compile(r"^(`{3,}|~{3,})\s*([\w+-]*)")
IMAGE = re.compile(r"^\s*!\[[^\]]*\]\([^)]*\)\s*$")
NOTES_OPEN, NOTES_CLOSE = "<details><summary>Presenter notes</summary>", "</details>"


def blocks(markdown: str) -> list[str]:
    """A text's blocks: paragraphs, lists, tables and fenced code (kept whole, blank lines and all), a heading with
    what follows it up to the next blank line; a list that starts right under a paragraph's last line is a block
    of its own, as markdown reads it."""
    out, current, fence = [], [], None
    for line in markdown.strip().splitlines():
        mark = FENCE.match(line.strip())
        if fence is not None:
            current.append(line)
            fence = None if line.strip() == fence else fence
            continue
        if mark:
            fence = mark.group(1)
        if not line.strip():
            out.append(current)
            current = []
            continue
        if re.match(BULLET, line) and current and not re.match(BULLET, current[0]) \
                and not current[0].startswith(("#", "|", "<", "```", "~~~")):
            out.append(current)
            current = []
        current.append(line)
    out.append(current)
    return ["\n".join(block) for block in out if block]


def slide_text(markdown: str) -> str:
    """What a slide shows of a markdown cell: headings as they are, a list's items and each paragraph cut to their
    first sentence, code and tables as they are; the whole text (its pictures left out: the slide shows them)
    follows, folded, as the presenter's notes."""
    out = []
    for block in blocks(markdown):
        if block.startswith("#") and "\n" in block:  # a heading with its first paragraph under it
            heading, block = block.split("\n", 1)
            out.append(heading)
        if block.startswith(("#", "```", "~~~", "|", "<", "!")):
            out.append(block)
        elif re.match(BULLET, block):
            items = re.split(rf"\n(?={BULLET})", block)
            out.append("\n".join(re.match(BULLET, item).group(0) + first_sentence(re.sub(f"^{BULLET}", "", item))
                                 for item in items))
        else:
            out.append(first_sentence(block))
    notes = "\n".join(line for line in markdown.strip().splitlines() if not IMAGE.match(line)).strip()
    shown = "\n\n".join(out)
    return f"{shown}\n\n{NOTES_OPEN}\n\n{notes}\n\n{NOTES_CLOSE}" if notes else shown


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


def _code_tree(source: str):
    """A code cell's syntax tree, its IPython magics and shell escapes left out; None if it is not Python."""
    lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
    try:
        return ast.parse("\n".join(lines))
    except SyntaxError:
        return None


def exercise_api(nb) -> set[str]:
    """The names the notebook's code imports from uprobe_lab.exercises (check, hint, quiz, check_quiz, ...)."""
    names = set()
    for cell in nb.cells:
        tree = _code_tree(cell.source) if cell.cell_type == "code" else None
        for node in ast.walk(tree) if tree else ():
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(EXERCISE_API):
                names |= {alias.asname or alias.name for alias in node.names}
            elif isinstance(node, ast.Import):
                names |= {alias.asname or alias.name.split(".")[0] for alias in node.names
                          if alias.name.startswith(EXERCISE_API)}
    return names


def _runs_exercises(cell, api: set[str]) -> bool:
    """Whether a code cell is the learner's exercise or quiz: it imports from uprobe_lab.exercises or uses a name
    imported from there."""
    tree = _code_tree(cell.source)
    if tree is None:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(EXERCISE_API):
            return True
        if isinstance(node, ast.Name) and node.id in api:
            return True
    return False


def _checked_ids(cell, api: set[str]) -> set[str]:
    """The exercise ids a code cell checks: the first argument of its calls to the exercise API, check("08.2", a)."""
    tree = _code_tree(cell.source)
    return {node.args[0].value for node in (ast.walk(tree) if tree else ())
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in api
            and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)}


def _left_out(cell, api: set[str]) -> bool:
    tags = set(cell.get("metadata", {}).get("tags", []))
    if tags & {EXERCISES, LECTURE_SKIP}:
        return True
    return cell.cell_type == "code" and (cell.source.lstrip().startswith(SHELL_MAGICS) or _runs_exercises(cell, api))


def without_shell_blocks(markdown: str) -> str:
    """The text without its fenced shell blocks (```bash, ```console, ...), nor the sentence ending in ":" that
    introduces each: what the lecturer would type, not what the room reads."""
    kept, block, lines = [], None, markdown.splitlines()
    for line in lines:
        fence = FENCE.match(line.strip())
        if block is None and fence and fence.group(2).lower() in SHELL:
            block = fence.group(1)
            _drop_introduction(kept)
            continue
        if block is not None:
            if line.strip() == block:
                block = None
            continue
        kept.append(line)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip()


def _drop_introduction(kept: list[str]) -> None:
    """Remove the last sentence of the paragraph at the end of ``kept`` when it ends in ":" (it introduces what
    follows), and the paragraph with it if nothing else is left of it."""
    while kept and not kept[-1].strip():
        kept.pop()
    start = len(kept)
    while start and kept[start - 1].strip():
        start -= 1
    paragraph = "\n".join(kept[start:])
    if not paragraph.rstrip().endswith(":") or paragraph.lstrip().startswith(("#", "|", "```", "<")):
        return
    rest = sentences(paragraph)[:-1]
    kept[start:] = [" ".join(rest)] if rest else []


def without_references(markdown: str, names: list[str]) -> str:
    """The text without what points at a cell the lecture left out: a parenthesis that names one goes, else the
    sentence (of a paragraph or a list item) that does. ``names`` are regular expressions, one per left-out cell."""
    if not names:
        return markdown
    refers = re.compile("|".join(f"(?:{name})" for name in names), re.I)

    def clean(text: str) -> str:
        text = re.sub(r"\s*\([^()]*\)", lambda m: "" if refers.search(m.group(0)) else m.group(0), text)
        return " ".join(s for s in sentences(text) if not refers.search(s))

    kept = []
    for block in blocks(markdown):
        heading = ""
        if block.startswith("#"):
            heading, _, block = block.partition("\n")
        if refers.search(block) and not block.lstrip().startswith(("|", "```", "~~~", "<", "!")):
            items = re.split(rf"\n(?={BULLET})", block) if re.match(BULLET, block) else [block]
            marks = [(re.match(BULLET, item) or re.match("", item)).group(0) for item in items]
            block = "\n".join(mark + text for mark, text in
                              ((mark, clean(item[len(mark):])) for mark, item in zip(marks, items)) if text)
        kept.append("\n".join(part for part in (heading, block) if part))
    return "\n\n".join(block for block in kept if block)


def _reference_patterns(ids: set[str], numbers: set[str]) -> list[str]:
    """What names a left-out exercise ("exercise 08.2", "exercises 08.1, 08.2 and 08.5") or section ("section 5")."""
    exercise = [rf"\bexercises?\s+(?:[\d.]+[a-z]?(?:,\s*|\s+and\s+))*{re.escape(i)}\b" for i in sorted(ids)]
    return exercise + [rf"\bsection\s+{re.escape(n)}\b" for n in sorted(numbers)]


def _notes_cell(cell):
    """The presenter's notes a code cell carries (metadata ``lecture_notes``) as a notes cell after it."""
    import nbformat.v4 as v4

    notes = cell.get("metadata", {}).get(NOTES)
    if not notes:
        return None
    return v4.new_markdown_cell(notes.strip(), id=f"{cell.get('id', 'code')}-notes",
                                metadata={"slideshow": {"slide_type": "notes"}})


def lecture_notebook(nb):
    """The copy of a chapter ``./lab lecture`` serves.

    Left out: the exercises and every code cell that runs the exercise or quiz API (with a section that had no
    other code), cells tagged ``lecture-skip``, shell blocks, and sentences that point at what was left out.
    Each text cell is cut to its headings and first sentences, its whole text folded under it as presenter notes;
    a code cell's ``lecture_notes`` follow it as a notes cell. A new slide (``slideshow.slide_type``) starts where
    ``starts_slide`` says: at each heading (one section, one slide; a text cell is cut before a heading inside it),
    at a diagram and at the first output after it, and at a cell tagged lecture-slide."""
    nb = copy.deepcopy(nb)
    api = exercise_api(nb)
    pieces = []  # (cell, left out, runs the exercises), a text cell cut into its sections
    for cell in nb.cells:
        left_out = _left_out(cell, api)
        for i, piece in enumerate(sections(cell.source) if cell.cell_type == "markdown" else [cell.source]):
            part = copy.deepcopy(cell)
            if i:
                part["id"] = f"{cell.get('id', 'md')}-{i}"
                tags = part.get("metadata", {}).get("tags", [])
                tags[:] = [tag for tag in tags if tag != LECTURE_SLIDE]  # the cut is where the cell begins
            part.source = piece
            pieces.append((part, left_out, left_out and cell.cell_type == "code" and _runs_exercises(cell, api)))
    checked = set().union(*(_checked_ids(cell, api) for cell, _, _ in pieces if cell.cell_type == "code"))
    kept, gone_sections = _without_exercise_sections(pieces)
    references = _reference_patterns(checked, gone_sections)
    slides = []
    for cell in kept:
        if cell.cell_type == "markdown":
            cell.source = without_references(without_shell_blocks(cell.source), references)
            if not cell.source:
                continue
            cell.source = slide_text(cell.source)
        starts = starts_slide(cell, slides[-1] if slides else None)
        cell.setdefault("metadata", {})["slideshow"] = {"slide_type": "slide" if starts else "-"}
        slides.append(cell)
        notes = _notes_cell(cell) if cell.cell_type == "code" else None
        if notes is not None:
            slides.append(notes)
    nb.cells = slides
    return nb


def starts_slide(cell, previous) -> bool:
    """Whether a cell of the lecture copy starts a slide: a section's heading; a diagram (the slides draw it as tall
    as the screen: the text before it stays on the slide before); the first output after a diagram (the picture,
    then the live view); a cell tagged lecture-slide (where a section too long for one screen is cut)."""
    if LECTURE_SLIDE in cell.get("metadata", {}).get("tags", []):
        return True
    if cell.cell_type == "markdown":
        return bool(HEADING.match(cell.source) or DIAGRAM.search(cell.source))
    return bool(previous is not None and previous.cell_type == "markdown" and DIAGRAM.search(previous.source))


def _without_exercise_sections(pieces) -> tuple[list, set[str]]:
    """The cells kept, and the numbers of the sections left out whole: a section whose code runs the exercise or
    quiz API and keeps no other cell goes with it (its text introduces them)."""
    groups = []
    for piece in pieces:
        cell = piece[0]
        if not groups or (cell.cell_type == "markdown" and HEADING.match(cell.source)):
            groups.append([])
        groups[-1].append(piece)
    kept, gone = [], set()
    for group in groups:
        code = [(left_out, exercise) for cell, left_out, exercise in group if cell.cell_type == "code"]
        if any(exercise for _, exercise in code) and all(left_out for left_out, _ in code):
            number = re.match(r"#{1,3}\s+(\d+)\.", group[0][0].source)
            gone |= {number.group(1)} if number else set()
            continue
        kept += [cell for cell, left_out, _ in group if not left_out]
    return kept, gone


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
