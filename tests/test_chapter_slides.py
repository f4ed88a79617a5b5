"""What chapters 01-04 put on their slides (``./lab lecture``): tables shown as tables and not cut, each widget
on the slide that says how to work it, first sentences that carry the point, and outputs that read as words."""
import contextlib
import io
from pathlib import Path

import nbformat
import pytest

from uprobe_lab import presenter

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def _cell(chapter: str, cell_id: str) -> str:
    nb = nbformat.read(next(NOTEBOOKS.glob(f"{chapter}_*.ipynb")), as_version=4)
    return next(c.source for c in nb.cells if c.get("id") == cell_id)


def _slide_of(chapter: str, cell_id: str) -> str:
    """The shown text (notes left out) of the lecture slide that holds cell ``cell_id``."""
    copy = presenter.lecture_notebook(nbformat.read(next(NOTEBOOKS.glob(f"{chapter}_*.ipynb")), as_version=4))
    slides = []
    for cell in copy.cells:
        if not slides or cell.metadata["slideshow"]["slide_type"] == "slide":
            slides.append([])
        slides[-1].append(cell)
    slide = next(s for s in slides if any(c.get("id") == cell_id for c in s))
    return "\n".join(c.source.split(presenter.NOTES_OPEN)[0] for c in slide
                     if c.cell_type == "markdown" and c.metadata["slideshow"]["slide_type"] != "notes")


def test_a_table_is_displayed_not_printed():
    # print() turns a DataFrame into text that pandas splits into column blocks joined by a backslash
    assert "print(views.events_table" not in _cell("03", "9f9ce76a")
    assert "display(views.events_table" in _cell("03", "9f9ce76a")


@pytest.mark.parametrize("cell_id", ["811f63c4", "2f227b7b"])
def test_a_row_that_names_a_bug_or_a_reason_is_not_cut_to_50_characters(cell_id):
    assert 'pd.option_context("display.max_colwidth", None)' in _cell("04", cell_id)


def test_the_register_check_says_no_register_changed_instead_of_an_empty_dict():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        from uprobe_lab.x86.uretprobe_programs import check_registers_equal
        exec(_cell("02", "c8a0fa6a"), {"check_registers_equal": check_registers_equal})
    lines = out.getvalue().splitlines()
    assert len(lines) == 4 and all(line.endswith("no register changed") for line in lines)
    assert "{}" not in out.getvalue()


def test_the_first_sentence_says_what_6_11_changed():
    shown = presenter.slide_text(_cell("02", "af81504c")).split(presenter.NOTES_OPEN)[0]
    assert "Since 6.11 (ff474a78cef5) the trampoline enters the kernel with `syscall` instead of one `int3`" in shown


@pytest.mark.parametrize("chapter, widget, words", [
    ("01", "911c3580", "Press **Step**"),
    ("02", "3c3e9551", "Drag the **step** slider"),
])
def test_a_widget_shares_its_slide_with_the_words_that_say_how_to_work_it(chapter, widget, words):
    assert words in _slide_of(chapter, widget)


def test_the_stage_numbers_are_the_slider_s():
    assert "Of the slider's twelve stages (0–5 the rewrite the picture shows, 6–12 the undo), 2–3" in _cell("03", "a5b9a580")


@pytest.mark.parametrize("chapter, cell_id, words", [
    ("02", "goals-02", "000 of the texts the course is built from"),
    ("02", "822bd564", "seed 002 of the course's texts"),
    ("03", "42d93153", "The RFC v2 patch (seed 003 of the texts the course is built from)"),
    ("04", "goals-04", "001 of the texts the course is built from"),
    ("04", "c9b3f20f", "## 4. What the STP simulation series measured (seed 001)"),
])
def test_a_seed_number_comes_with_words_that_say_what_a_seed_is(chapter, cell_id, words):
    assert words in presenter.slide_text(_cell(chapter, cell_id)).split(presenter.NOTES_OPEN)[0]


def test_the_red_zone_slide_leads_with_one_line_so_its_diagram_fits_above_the_buttons():
    shown = presenter.slide_text(_cell("03b", "e388ab65")).split(presenter.NOTES_OPEN)[0]
    first = shown.split("\n\n")[1]
    assert first == "On 7.3 the optimised call writes below the red zone: the nop10 moves sp by −0x80 first."


def test_the_vex_table_is_one_table_on_one_slide():
    # cut in two, its last two rows were a slide of their own
    assert "bugs.drop(" in _cell("01", "fa7befac") and "head(7)" not in _cell("01", "fa7befac")
    assert "The last two rows are the ordinary cases" in _cell("01", "67a74c22")


def test_the_real_kernels_table_starts_a_slide_of_its_own():
    # six rows with four-line cells: under the heading and its sentence the last row fell under the buttons
    nb = nbformat.read(next(NOTEBOOKS.glob("03b_*.ipynb")), as_version=4)
    cell = next(c for c in nb.cells if c.get("id") == "72b16621")
    assert presenter.LECTURE_SLIDE in cell.metadata.get("tags", [])
    assert '.hide(axis="index")' in cell.source


@pytest.mark.parametrize("chapter, cell_id, words", [
    ("01", "654f936a", 'print("the process\'s maps: its code and stack, and the [uprobes] page'),
    ("03", "3481f8cf", 'print("after unregister: the nop5 is back; [uprobes-trampoline] stays'),
])
def test_a_printed_memory_map_says_what_to_look_at(chapter, cell_id, words):
    # a slide shows outputs, not code comments: the line that says why the maps are there is printed
    source = _cell(chapter, cell_id)
    assert words in source and source.index(words) < source.index(".maps())")


def test_the_sys_uprobe_refusal_prints_its_reason_on_a_line_of_its_own():
    # one line of 90 characters wrapped mid-word on a slide ("[uprobes-trampolin" / "e]")
    assert 'str(err).replace(": ", ":\\n        ", 1)' in _cell("03", "bb4a4418")


def test_the_usdt_tables_keep_a_site_s_bytes_on_one_line():
    assert 'unbroken(' in _cell("03", "2bbe0326") and '["bytes"]' in _cell("03", "2bbe0326")
    assert 'table.set_index("usdt").T' in _cell("03b", "27b16b52")  # four site columns, not twelve field columns
