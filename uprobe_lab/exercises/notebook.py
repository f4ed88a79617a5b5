"""Write each chapter's exercises as the last section of its notebook.

The section is generated from the library (question, folded hint, folded worked solution, an answer cell that
calls ``check``), so the notebook and the checker cannot drift apart; tests/test_exercises.py compares them.
Its cells carry the tag ``exercises`` and are replaced as a block, leaving every other cell untouched:

    python -m uprobe_lab.exercises.notebook notebooks/*.ipynb
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

from .core import Exercise, chapter

TAG = "exercises"
INTRO = """## Exercises

Predict first, then run. Write your answer in place of `None` and run the cell: `check` asks the lab for the right
answer (nothing is stored) and says whether yours is right; a wrong try says what is wrong, and the lab's own
answer comes with the third. Hints and worked solutions are folded - click to open them - or call
`hint("{first}")` / `solution("{first}")`. Kinds: *predict* (say it before you run it),
*break it* (change something and see what fails), *open* (your own choice, checked by the lab)."""


def chapter_of(path: str | Path) -> str:
    m = re.match(r"(\d\d[a-z]?)_", Path(path).name)
    if not m:
        raise ValueError(f"{path}: a chapter notebook's name starts with its number, e.g. 01_...")
    return m.group(1)


def _cell_id(ex_id: str, part: str) -> str:
    return f"ex-{ex_id.replace('.', '-')}-{part}"


def exercise_markdown(ex: Exercise) -> str:
    explanation = f"\n\n{ex.explanation}" if ex.explanation else ""
    return (f"### Exercise {ex.id} · {ex.title} *({ex.kind})*\n\n{ex.question}\n\n"
            f"<details><summary>Hint</summary>\n\n{ex.hint}\n\n</details>\n\n"
            f"<details><summary>Worked solution</summary>\n\n```python\n{ex.solution}\n```{explanation}\n\n"
            f"</details>")


def section_cells(number: str) -> list:
    """The notebook cells of chapter ``number``'s exercise section."""
    import nbformat.v4 as v4

    exercises = chapter(number)
    if not exercises:
        return []
    meta = {"tags": [TAG]}
    cells = [v4.new_markdown_cell(INTRO.format(first=exercises[0].id), id=f"ex-{number}-intro", metadata=meta),
             v4.new_code_cell("from uprobe_lab.exercises import check, hint, solution", id=f"ex-{number}-import",
                              metadata=meta)]
    for ex in exercises:
        cells.append(v4.new_markdown_cell(exercise_markdown(ex), id=_cell_id(ex.id, "md"), metadata=meta))
        cells.append(v4.new_code_cell(f"answer = None  # your answer\ncheck(\"{ex.id}\", answer)",
                                      id=_cell_id(ex.id, "answer"), metadata=meta))
    return cells


def is_exercise_cell(cell) -> bool:
    return TAG in cell.get("metadata", {}).get("tags", [])


def write(path: str | Path) -> None:
    """Replace the notebook's exercise section (or append one) with the library's."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    nb.cells = [c for c in nb.cells if not is_exercise_cell(c)] + section_cells(chapter_of(path))
    nbformat.write(nb, path)


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        write(arg)
