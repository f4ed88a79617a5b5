"""The tables of docs/references.md, read by the tests that hold the lab's rules and the course's claims to them."""
from pathlib import Path

REFERENCES = Path(__file__).resolve().parents[1] / "docs" / "references.md"


def section_rows(heading: str, width: int, first: str, text: str | None = None) -> list[list[str]]:
    """The cells of each table row under ``## heading`` with ``width`` cells whose first cell starts with ``first``
    (a header or a separator row does not)."""
    text = REFERENCES.read_text() if text is None else text
    section = text.split(f"## {heading}", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == width and cells[0].startswith(first):
            rows.append(cells)
    return rows
