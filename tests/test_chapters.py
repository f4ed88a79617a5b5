"""One list of chapters (uprobe_lab.chapters): the notebooks, the welcome chapter's table, the README's and the
exercises' chapters all follow it."""
import re
from pathlib import Path

import nbformat
import pytest

from uprobe_lab import chapters, exercises
from uprobe_lab.site import title_of

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "notebooks").glob("[0-9][0-9]*_*.ipynb"))  # the files the site's index is built from


def test_the_list_names_every_notebook_in_order_with_its_title_and_time():
    assert [p.stem for p in NOTEBOOKS] == [c.stem for c in chapters.CHAPTERS]
    for path, chapter in zip(NOTEBOOKS, chapters.CHAPTERS):
        nb = nbformat.read(path, as_version=4)
        assert title_of(nb) == chapter.title
        stated = re.search(r"\(about (\d+) minutes\)", "\n".join(c.source for c in nb.cells))
        assert stated and int(stated.group(1)) == chapter.minutes, path.name


def test_the_welcome_chapter_lists_every_chapter_from_the_list():
    nb = nbformat.read(NOTEBOOKS[0], as_version=4)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert chapters.welcome_table() in text, "run: python -m uprobe_lab.chapters"
    for path in NOTEBOOKS:  # each chapter linked by its file name
        assert f"]({path.name})" in chapters.welcome_table()


def test_the_readme_lists_every_chapter_and_their_total_time():
    readme = (REPO / "README.md").read_text()
    assert chapters.readme_table() in readme, "run: python -m uprobe_lab.chapters"
    minutes = sum(int(m) for m in re.findall(r"^\| `\w+` \| (\d+) min \|", readme, re.M))
    assert f"add up to {minutes} minutes" in readme and minutes == chapters.total_minutes()


def test_the_exercises_cover_the_listed_chapters():
    assert exercises.CHAPTERS == tuple(p.stem.split("_")[0] for p in NOTEBOOKS)


def test_a_table_is_replaced_in_place_and_a_text_without_one_is_named():
    text = "intro\n\n| chapter | idea |\n|---|---|\n| old | row |\n\nafter\n"
    assert chapters.with_table(text, "| chapter |\n|---|\n| new |") == "intro\n\n| chapter |\n|---|\n| new |\n\nafter\n"
    with pytest.raises(ValueError, match="no chapter table"):
        chapters.with_table("no table here", "| chapter |")
