"""The lecture copy (uprobe_lab.presenter.lecture_notebook): what it leaves out, where it cuts a paragraph, and
the presenter notes every slide carries."""
import re
from pathlib import Path

import nbformat
import nbformat.v4 as v4
import pytest

from uprobe_lab import presenter
from uprobe_lab.sentences import first_sentence, sentences

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
SHELL_BLOCK = re.compile(r"^\s*(`{3,}|~{3,})\s*(sh|bash|console|shell|shell-session|zsh)\b", re.M | re.I)
EXERCISE_CODE = re.compile(r"uprobe_lab\.exercises|\b(check|hint|solution|check_quiz|quiz)\(")
EXERCISE_REFERENCE = re.compile(r"\bexercises?\s+\d\d[a-z]?\.\d", re.I)
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


@pytest.mark.parametrize("paragraph, first", [
    ("6.10 made the tree lock an rwlock. 6.12 removed it.", "6.10 made the tree lock an rwlock."),
    ("Until 6.16 a nop5 was stepped like\n`ret`. 6.16 (610f6e14c29d) emulates it.",
     "Until 6.16 a nop5 was stepped like `ret`."),
    ("`int3` traps into the kernel. `int3` again.", "`int3` traps into the kernel."),
    ("It traps. 64 CPUs share it.", "It traps."),  # a sentence that starts with a digit
    ("A tool (e.g. `perf probe`) attaches it. Then it runs.", "A tool (e.g. `perf probe`) attaches it."),
    ("Point it at a binary, e.g. Redis. Then count.", "Point it at a binary, e.g. Redis."),
    ("A fast path, i.e. One without a trap, is rare. Next.", "A fast path, i.e. One without a trap, is rare."),
    ("The 7.2.y stable kernels took it by 7.2.6. Mainline 7.2 did not.", "The 7.2.y stable kernels took it by 7.2.6."),
    ("Fixed in 6.10.3 and 6.11, not in 6.10. the next one", "Fixed in 6.10.3 and 6.11, not in 6.10. the next one"),
    ("Is it safe? Yes, on 7.2.", "Is it safe?"),
    ("(An aside first.) Then the point.", "(An aside first.)"),
    ("Run `a. B` here. Then more.", "Run `a. B` here."),  # a dot inside code ends nothing
    ("**RIP-relative operands.** Compiled code uses `rip`. More.", "**RIP-relative operands.** Compiled code uses `rip`."),
    ("One sentence only", "One sentence only"),
])
def test_a_first_sentence_is_cut_where_the_sentence_ends(paragraph, first):
    assert first_sentence(paragraph) == first


def test_a_paragraph_reads_as_its_sentences_again():
    text = "6.10 made it an rwlock. `int3` traps (e.g. on 7.2.6). Is it safe? 64 CPUs say no."
    assert sentences(text) == ["6.10 made it an rwlock.", "`int3` traps (e.g. on 7.2.6).", "Is it safe?",
                               "64 CPUs say no."]
    assert " ".join(sentences(text)) == text


def test_a_slide_shows_first_sentences_and_folds_the_whole_text_without_its_pictures():
    text = ("## 5. The rules changed: nop5\nUntil 6.16 the kernel emulated only `0x90`. 6.16 emulates every nop.\n\n"
            "What they show:\n* **x86:** one. Two.\n* **arm64:** three. Four.\n\n![a diagram](diagrams/x.svg)")
    shown, notes = presenter.slide_text(text).split(presenter.NOTES_OPEN)
    assert shown.strip() == ("## 5. The rules changed: nop5\n\nUntil 6.16 the kernel emulated only `0x90`.\n\n"
                             "What they show:\n\n* **x86:** one.\n* **arm64:** three.\n\n![a diagram](diagrams/x.svg)")
    assert "6.16 emulates every nop." in notes and "Two." in notes and "![" not in notes
    whole = presenter.slide_text("## Recap\n\n* Short.")  # nothing to cut: the notes repeat it for the presenter
    assert whole.split(presenter.NOTES_OPEN)[0].strip() == "## Recap\n\n* Short."
    assert "* Short." in whole.split(presenter.NOTES_OPEN)[1]


def _chapter_with_all_a_lecture_leaves_out():
    return v4.new_notebook(cells=[
        v4.new_markdown_cell("# 09 · A chapter\nIt probes things."),
        v4.new_code_cell("import uprobe_lab as ul"),
        v4.new_markdown_cell("## 1. Measure\nA hit costs about 10 us (the figure exercise 09.1's solution uses). "
                             "It is stepped.\n\nPut it together: a service calls it often. Exercises 09.2 and 09.3 "
                             "below ask it in steps.\n\nTo ask your own kernel:\n\n```bash\npython -m uprobe_lab "
                             "verify\n```\n\nThe kernel answers the same."),
        v4.new_code_cell("run = measure()", metadata={presenter.NOTES: "Say: **this** is the hit's cost."}),
        v4.new_code_cell("for line in run.commands:\n    print('perf', line)", metadata={"tags": ["lecture-skip"]}),
        v4.new_markdown_cell("## 2. The quiz\nTen questions, checked by the lab."),
        v4.new_code_cell("from uprobe_lab.exercises.quiz import check_quiz, quiz\n\nquiz()"),
        v4.new_code_cell("answers = {}\ncheck_quiz(answers)"),
        v4.new_code_cell("%%bash\nperf probe -x ./tick tick"),
        v4.new_markdown_cell("## Recap\n* It probes.\n* Section 2 quizzes you."),
        v4.new_markdown_cell("## Exercises\nPredict first.", metadata={"tags": ["exercises"]}),
        v4.new_code_cell("from uprobe_lab.exercises import check, hint, solution", metadata={"tags": ["exercises"]}),
        *[v4.new_code_cell(f'answer = None\ncheck("09.{n}", answer)', metadata={"tags": ["exercises"]})
          for n in (1, 2, 3)],
    ])


def test_the_lecture_copy_leaves_out_exercises_the_quiz_shell_blocks_and_what_points_at_them():
    nb = _chapter_with_all_a_lecture_leaves_out()
    copy = presenter.lecture_notebook(nb)
    text = "\n".join(c.source for c in copy.cells)
    assert [c.source for c in copy.cells if c.cell_type == "code"] == ["import uprobe_lab as ul", "run = measure()"]
    assert "quiz" not in text.lower() and "Exercise" not in text and "exercise" not in text  # the section went too
    assert "```" not in text and "python -m uprobe_lab verify" not in text and "To ask your own kernel" not in text
    assert "Section 2" not in text  # the recap's pointer at the quiz's section
    measure = next(c.source for c in copy.cells if c.source.startswith("## 1. Measure"))
    assert measure.split(presenter.NOTES_OPEN)[0].strip() == (
        "## 1. Measure\n\nA hit costs about 10 us.\n\nPut it together: a service calls it often.\n\n"
        "The kernel answers the same.")
    assert "It is stepped." in measure and len(nb.cells) == 15  # the notes hold the rest; the chapter is untouched


def test_a_code_cells_notes_follow_it_as_the_presenters_and_every_slide_has_notes():
    copy = presenter.lecture_notebook(_chapter_with_all_a_lecture_leaves_out())
    at = next(i for i, c in enumerate(copy.cells) if c.source == "run = measure()")
    notes = copy.cells[at + 1]
    assert notes.cell_type == "markdown" and notes.source == "Say: **this** is the hit's cost."
    assert notes.metadata["slideshow"]["slide_type"] == "notes"  # the template hides it from the room
    assert all(_notes_of(slide) for slide in _slides(copy))


def _slides(nb) -> list[list]:
    slides = []
    for cell in nb.cells:
        if not slides or cell.metadata["slideshow"]["slide_type"] == "slide":
            slides.append([])
        slides[-1].append(cell)
    return slides


def _notes_of(slide) -> str:
    """What the presenter window shows for a slide: its text cells' folded notes and its notes cells."""
    notes = []
    for cell in slide:
        if cell.metadata["slideshow"]["slide_type"] == "notes":
            notes.append(cell.source)
        elif cell.cell_type == "markdown" and presenter.NOTES_OPEN in cell.source:
            notes.append(cell.source.split(presenter.NOTES_OPEN)[1].split(presenter.NOTES_CLOSE)[0])
    return "\n".join(n.strip() for n in notes if n.strip())


def test_no_chapter_s_lecture_copy_shows_what_a_lecture_leaves_out():
    """Every chapter: no exercise, quiz or shell block in the copy, notes folded included, and no sentence that
    points at an exercise; the chapters do hold them all, so each check has something to find."""
    found = {"exercise cells": 0, "quiz cells": 0, "shell blocks": 0, "references": 0}
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        found["exercise cells"] += sum("exercises" in c.metadata.get("tags", []) for c in nb.cells)
        found["quiz cells"] += sum(c.cell_type == "code" and "check_quiz" in c.source for c in nb.cells)
        found["shell blocks"] += sum(len(SHELL_BLOCK.findall(c.source)) for c in nb.cells if c.cell_type == "markdown")
        found["references"] += sum(len(EXERCISE_REFERENCE.findall(c.source)) for c in nb.cells
                                   if c.cell_type == "markdown" and "exercises" not in c.metadata.get("tags", []))
        copy = presenter.lecture_notebook(nb)
        for cell in copy.cells:
            where = f"{path.name} {cell.get('id')}"
            assert not {"exercises", presenter.LECTURE_SKIP} & set(cell.metadata.get("tags", [])), where
            if cell.cell_type == "code":
                assert not EXERCISE_CODE.search(cell.source), where
            else:
                assert not SHELL_BLOCK.search(cell.source), where
                assert not EXERCISE_REFERENCE.search(cell.source), where
                assert not re.search(r"^#+\s+(\d+\.\s+)?(The quiz|Exercises?\b)", cell.source, re.M), where
    assert all(found.values()), found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_slide_of_every_chapter_has_presenter_notes(path):
    slides = _slides(presenter.lecture_notebook(nbformat.read(path, as_version=4)))
    prose = [re.sub(r"^#.*$", "", _notes_of(slide), flags=re.M).strip() for slide in slides]  # a heading is no note
    bare = [i + 1 for i, text in enumerate(prose) if not text]
    assert not bare, f"{path.name}: slides {bare} have no presenter notes (a code cell's metadata " \
                     f"{presenter.NOTES!r} gives them)"


def _controls(state: dict, model_id: str) -> set[str]:
    """The labels a presenter can name for a widget: its buttons', sliders' and pickers' descriptions, options."""
    model = state.get(model_id, {})
    found, fields = set(), model.get("state", {})
    if model.get("model_name") == "PlayModel":
        found.add("play")
    for name in ("description", "placeholder"):
        if fields.get(name):
            found.add(fields[name].strip().lower())
    found |= {str(o).lower() for o in fields.get("_options_labels", [])}
    for child in fields.get("children", []):
        found |= _controls(state, child.removeprefix("IPY_MODEL_"))
    return {label for label in found if len(label) > 2 and re.search(r"\w", label)}  # not "8", not an HTML's "\u200b"


@pytest.mark.notebooks
@pytest.mark.xdist_group("notebooks")
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_each_widget_s_presenter_notes_say_what_to_click(path):
    """Run headless, each cell that shows a widget carries notes (its ``lecture_notes``) that name one of the
    widget's controls (a progress bar has none to name); no output the lecture keeps is the quiz's verdict."""
    from notebook_runs import executed

    nb = executed(path.name)
    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    kept = {c.get("id") for c in presenter.lecture_notebook(nbformat.read(path, as_version=4)).cells}
    for cell in (c for c in nb.cells if c.cell_type == "code"):
        views = [o["data"][WIDGET_VIEW]["model_id"] for o in cell.get("outputs", []) if WIDGET_VIEW in o.get("data", {})]
        if cell.get("id") in kept:
            printed = "".join(str(o.get("text", "")) + str(o.get("data", {})) for o in cell.get("outputs", []))
            assert not re.search(r"\d+ of \d+ right", printed), f"{path.name} {cell.get('id')}: the quiz's verdict"
        if not views:
            continue
        notes = cell.metadata.get(presenter.NOTES, "").lower()
        controls = set().union(*(_controls(state, v) for v in views))
        assert notes, f"{path.name} {cell.get('id')}: a widget without {presenter.NOTES!r}"
        assert not controls or any(label in notes for label in controls), \
            f"{path.name} {cell.get('id')}: the notes name none of its controls {sorted(controls)}"
