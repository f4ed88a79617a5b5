"""The presenter switch: ./lab lecture hides the printed walks under the steppers; every other run prints them."""
import re
from pathlib import Path

import pytest

import uprobe_lab as ul
from notebook_runs import code_outputs, executed
from uprobe_lab import presenter

REPO = Path(__file__).resolve().parents[1]
WALK = re.compile(r"^step \d+: 0x", re.M)  # how Step.describe() starts a step


def _walk_text():
    proc = ul.new_process(kernel="6.18", record=True)
    ul.attach(proc, "uprobe_target_nop", ul.CountingConsumer())
    return proc.stepper("uprobe_target_nop").run_to_end()


def test_print_walk_prints_unless_presenting(monkeypatch, capsys):
    steps = _walk_text()
    monkeypatch.delenv(presenter.ENV, raising=False)
    assert not presenter.lecture_mode()
    presenter.print_walk(steps, "a note")
    out = capsys.readouterr().out
    assert len(WALK.findall(out)) == len(steps) and "a note" in out
    monkeypatch.setenv(presenter.ENV, "1")
    assert presenter.lecture_mode()
    presenter.print_walk(steps, "a note")
    assert capsys.readouterr().out == ""
    monkeypatch.setenv(presenter.ENV, "0")
    assert not presenter.lecture_mode()


def test_a_printout_is_shown_unless_presenting_and_not_even_made_then(monkeypatch):
    made = []
    show = lambda: made.append(1) or "the table"  # noqa: E731
    monkeypatch.delenv(presenter.ENV, raising=False)
    assert presenter.unless_presenting(show) == "the table" and made == [1]
    monkeypatch.setenv(presenter.ENV, "1")
    assert presenter.unless_presenting(show) is None and made == [1]


def test_no_learner_cell_carries_the_lecture_switch():
    """The lecture's plumbing lives in uprobe_lab.presenter: a learner's cell asks unless_presenting() or
    print_walk(), never lecture_mode() itself."""
    import nbformat
    from pathlib import Path
    for path in sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb")):
        cells = nbformat.read(path, as_version=4).cells
        assert not [c.id for c in cells if c.cell_type == "code" and "lecture_mode" in c.source], path.name


def _printed(outputs: list[dict]) -> str:
    return "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")


# a chapter run as ./lab lecture (lecture=True) or headless; the headless runs are test_notebooks.py's
in_a_chapter = pytest.mark.parametrize("lecture", [False, True], ids=["headless", "lecture"])


@pytest.mark.notebooks
@pytest.mark.xdist_group("notebooks")
@in_a_chapter
def test_chapter_01_prints_its_walks_only_outside_lecture_mode(lecture):
    printed = _printed(code_outputs(executed("01_breakpoint_uprobes.ipynb", lecture=lecture)))
    walks, finished = WALK.findall(printed), printed.count("(finished)")
    if lecture:
        assert walks == [] and finished == 0, printed
    else:  # the push walk and the ret walk, each to its end
        assert walks and finished == 2, printed


STAGE = re.compile(r"^stage \d+/\d+ ", re.M)  # how PatchRun.text() starts a patch stage


# per chapter: the stages it prints (03: two 6.18 stages; 03b: 7.3's undo, seven) and its one stage table
PATCH_CHAPTERS = {"03_nop5_optimization.ipynb": 2, "03b_nop10_optimization.ipynb": 7}


@pytest.mark.notebooks
@pytest.mark.xdist_group("notebooks")
@pytest.mark.parametrize("chapter", PATCH_CHAPTERS)
@in_a_chapter
def test_the_patch_chapters_show_their_stages_only_outside_lecture_mode(chapter, lecture):
    outputs = code_outputs(executed(chapter, lecture=lecture))
    printed = _printed(outputs)
    tables = sum("text/html" in o.get("data", {}) and "a CPU entering the site decodes" in o["data"]["text/html"] for o in outputs)
    if lecture:  # the stage widgets reveal them one by one
        assert STAGE.findall(printed) == [] and tables == 0, printed
    else:
        assert len(STAGE.findall(printed)) == PATCH_CHAPTERS[chapter] and tables == 1, printed


def test_the_lecture_copy_keeps_headings_first_sentences_and_folds_the_rest_as_notes():
    import nbformat.v4 as v4

    from uprobe_lab.presenter import lecture_notebook

    text = "## 2. One hit\nPress **Step**: each step runs one instruction. The kernel's work shows too.\n\n* One. Two.\n* Three"
    nb = v4.new_notebook(cells=[
        v4.new_markdown_cell(text), v4.new_code_cell("v.widget()"),
        v4.new_code_cell("print(raw)", metadata={"tags": ["lecture-skip"]}),
        v4.new_markdown_cell("### Exercise", metadata={"tags": ["exercises"]})])
    slides = lecture_notebook(nb)
    assert [c.cell_type for c in slides.cells] == ["markdown", "code"]  # no exercise, no skipped printout
    shown, notes = slides.cells[0].source.split("<details><summary>Presenter notes</summary>")
    assert shown.strip() == "## 2. One hit\n\nPress **Step**: each step runs one instruction.\n\n* One.\n* Three"
    assert text in notes and len(nb.cells) == 4  # the notes hold the whole text; the chapter itself is untouched


def test_a_slide_starts_at_each_section_at_a_diagram_and_the_view_after_it_and_where_tagged():
    import nbformat.v4 as v4

    from uprobe_lab.presenter import lecture_notebook

    nb = v4.new_notebook(cells=[
        v4.new_markdown_cell("# 01 · Title\nWhat this is."), v4.new_code_cell("import x"),
        v4.new_markdown_cell("## 1. A section\nText."), v4.new_code_cell("table()"),
        v4.new_markdown_cell("More text, no heading.\n\n![the hit path](diagrams/hit.svg)"),
        v4.new_code_cell("view.widget()"), v4.new_code_cell("chart()"),
        v4.new_markdown_cell("#### A small heading\nStays on its section's slide."),
        v4.new_code_cell("long_table()", metadata={"tags": ["lecture-slide"]}),  # cut where a section is too long
        v4.new_markdown_cell("The end of section 1.\n\n## 2. The next section\nIts text.\n\n```\n# a comment\n```")])
    slides = lecture_notebook(nb)
    kinds = [c.metadata["slideshow"]["slide_type"] for c in slides.cells]
    assert kinds == ["slide", "-", "slide", "-", "slide", "slide", "-", "-", "slide", "-", "slide"]
    assert slides.cells[-1].source.startswith("## 2. The next section") and "# a comment" in slides.cells[-1].source
    assert len({c.id for c in slides.cells}) == len(slides.cells)  # the cut cell's halves keep ids of their own


def test_lab_lecture_serves_the_lecture_copy_as_slides():
    script = (REPO / "lab").read_text()
    lecture = script.split("    lecture)")[1].split(";;")[0]
    assert "-m uprobe_lab.lecture" in lecture  # which serves with the "paged" template (tests/test_lecture.py)
    template = presenter.SLIDES_PATH / "voila" / "templates" / "paged"
    assert (template / "conf.json").is_file() and (template / "index.html.j2").is_file()
    assert "https://" not in (template / "index.html.j2").read_text() + (template / "static" / "paged.js").read_text()
