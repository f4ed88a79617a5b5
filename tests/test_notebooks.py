"""Every notebook runs top to bottom headless, as a learner's 'Run All' would, and what it prints fits the page."""
import re
from html.parser import HTMLParser

import pytest

from notebook_runs import NOTEBOOKS, executed

pytestmark = [pytest.mark.notebooks, pytest.mark.xdist_group("notebooks")]

PAGE_COLUMNS = 110  # what JupyterLab shows beside its file browser: the lab wraps at 100 (uprobe_lab.text), with a margin
RICH = {"text/html", "text/markdown", "image/png", "image/svg+xml", "application/vnd.jupyter.widget-view+json"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path):
    nb = executed(path.name)  # a cell's error fails the test with that error
    assert all(c.get("execution_count") for c in nb.cells if c.cell_type == "code" and c.source.strip())


def _printed(nb):
    """The plain text a chapter prints: stdout, and the text of outputs that have no richer form (stderr is
    Python's: a warning's path and line, a progress bar)."""
    for cell in nb.cells:
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            if out.get("output_type") == "stream" and out.get("name") == "stderr":
                continue
            if out.get("output_type") == "stream":
                text = out["text"]
            elif RICH.isdisjoint(out.get("data", {})):
                text = out.get("data", {}).get("text/plain", "")
            else:
                continue
            yield "".join(text) if isinstance(text, list) else text


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_what_a_notebook_prints_fits_the_page_and_is_no_raw_dict(path):
    texts = list(_printed(executed(path.name)))
    wide = [line for text in texts for line in text.splitlines() if len(line) > PAGE_COLUMNS]
    raw = [text[:90] for text in texts if re.search(r"\{'[\w.-]+': ", text)]  # a dict's repr: a table reads better
    assert not wide, f"{len(wide)} line(s) wider than {PAGE_COLUMNS} columns, e.g. {wide[0]!r}"
    assert not raw, f"raw dicts printed: {raw}"


TABLE_COLUMNS = 125  # a table's narrowest layout (each column as wide as its longest word), in characters


class _Tables(HTMLParser):
    """The cells' text of each <table> in an HTML output, row by row."""

    def __init__(self):
        super().__init__()
        self.tables, self._cell = [], None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self.tables[-1].append([])
        elif tag in ("td", "th") and self.tables and self.tables[-1]:
            self._cell = []
            self.tables[-1][-1].append(self._cell)

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self._cell = None


def _narrowest(table) -> int:
    """The width of a table whose cells wrap at every space: its columns' longest words, plus a margin each."""
    widths = {}
    for row in table:
        for i, cell in enumerate(row):
            widths[i] = max(widths.get(i, 0), max((len(w) for w in "".join(cell).split()), default=0))
    return sum(widths.values()) + 2 * len(widths)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_a_notebook_s_tables_fit_the_page(path):
    parser = _Tables()
    for cell in executed(path.name).cells:
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            html = out.get("data", {}).get("text/html", "")
            parser.feed("".join(html) if isinstance(html, list) else html)
    wide = [_narrowest(t) for t in parser.tables if _narrowest(t) > TABLE_COLUMNS]
    assert not wide, f"{len(wide)} table(s) wider than {TABLE_COLUMNS} columns even wrapped: {wide}"


# outputs that are prose (sentences, a list of them): Markdown, which the page and the slides render as text; as
# printed monospace a long paragraph reads as a listing and its `code` marks show as backticks
PROSE_CELLS = {"07_many_cpus.ipynb": ["07-model-misses", "07-native-text"]}


@pytest.mark.parametrize("name", sorted(PROSE_CELLS))
def test_prose_a_chapter_writes_is_markdown(name):
    cells = {c.get("id"): c for c in executed(name).cells}
    for cid in PROSE_CELLS[name]:
        outputs = cells[cid].get("outputs", [])
        assert outputs and all("text/markdown" in o.get("data", {}) for o in outputs), cid
