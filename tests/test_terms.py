"""Every term a chapter uses is defined before its first use: in the chapter (in bold where it is first used) or
in docs/glossary.md, linked from that cell or an earlier one. Each chapter read alone must make sense, since a
lecture or a learner may start at any chapter."""
import re
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]
GLOSSARY = (REPO / "docs" / "glossary.md").read_text()
NOTEBOOKS = sorted((REPO / "notebooks").glob("[0-9][0-9]*_*.ipynb"))

# term -> (how a chapter writes it, the glossary entry that defines it)
TERMS = {
    "lease": (r"\blease\b", "lease"),
    "VMA": (r"\bVMAs?\b", "vma-and-the-mmap-lock"),
    "mmap_lock": (r"\bmmap_lock\b", "vma-and-the-mmap-lock"),
    "rwsem": (r"\brwsems?\b", "rwsem-and-rwlock"),
    "rwlock": (r"\brwlocks?\b", "rwsem-and-rwlock"),
    "seqcount": (r"\bseqcounts?\b", "seqcount"),
    "SRCU": (r"\bSRCU\b", "srcu-and-rcu-tasks-trace"),
    "RCU Tasks Trace": (r"\bRCU Tasks Trace\b", "srcu-and-rcu-tasks-trace"),
    "XOL": (r"\bXOL\b", "xol"),
    "red zone": (r"\bred zone\b", "red-zone"),
    "USDT": (r"\bUSDT\b", "usdt"),
    "return instance": (r"\breturn instances?\b", "return-instance"),
    "cache line": (r"\bcache lines?\b|\bline transfers?\b", "cache-line-and-line-transfer"),
    "uprobe PMU": (r"\buprobe PMU\b", "uprobe-pmu"),
    "#DB": (r"#DB\b", "bp-and-db"),
}


def slug(heading: str) -> str:
    """The anchor GitHub and MyST give a heading: lower case, punctuation but - and _ dropped, spaces as -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


ANCHORS = {slug(h) for h in re.findall(r"^## (.+)$", GLOSSARY, re.M)}


def first_uses(cells: list[str]) -> dict[str, tuple[int, re.Match]]:
    """term -> (index of the cell that first uses it, the match)."""
    out = {}
    for term, (pattern, _) in TERMS.items():
        for i, text in enumerate(cells):
            m = re.search(pattern, text)
            if m:
                out[term] = (i, m)
                break
    return out


def defined(term: str, cells: list[str], at: int, use: re.Match) -> bool:
    anchor = TERMS[term][1]
    linked = any(f"glossary.md#{anchor})" in text for text in cells[:at + 1])
    text = cells[at]
    bold = any(s <= use.start() and use.end() <= e for s, e in
               ((b.start(), b.end()) for b in re.finditer(r"\*\*[^*]+\*\*", text)))
    return linked or bold


def test_every_term_has_its_glossary_entry():
    assert {anchor for _, anchor in TERMS.values()} <= ANCHORS
    # letters, digits and hyphens only: GitHub keeps an underscore in an anchor, the course site's Sphinx does not
    assert all(re.fullmatch(r"[a-z0-9-]+", anchor) for _, anchor in TERMS.values())


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_a_chapter_defines_each_term_before_its_first_use(path):
    cells = [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown"]
    undefined = [f"{term} (cell {at}: ...{cells[at][max(0, m.start() - 40):m.end() + 20]!r}...)"
                 for term, (at, m) in first_uses(cells).items() if not defined(term, cells, at, m)]
    assert not undefined, "used before a glossary link or a bold definition: " + "; ".join(undefined)


@pytest.mark.parametrize("path", NOTEBOOKS + [REPO / "README.md", REPO / "docs" / "cheatsheet.md"],
                         ids=lambda p: p.stem)
def test_every_glossary_link_lands_on_an_entry(path):
    text = path.read_text()
    assert set(re.findall(r"glossary\.md#([\w-]+)", text)) <= ANCHORS


def test_the_rule_catches_a_term_used_before_its_link():
    cells = ["the lease is taken here", "[lease](../docs/glossary.md#lease)"]
    (at, use), = [first_uses(cells)["lease"]]
    assert at == 0 and not defined("lease", cells, at, use)
    assert defined("lease", ["a **lease** is ...", "the lease"], 0, re.search("lease", "a **lease** is ..."))


def _chapter_text(stem: str) -> str:
    """A chapter's own markdown, without its exercise section (whose hints must not be where the facts are)."""
    from uprobe_lab.exercises.notebook import is_exercise_cell
    nb = nbformat.read(REPO / "notebooks" / f"{stem}.ipynb", as_version=4)
    return " ".join(" ".join(c.source.split()) for c in nb.cells if c.cell_type == "markdown" and not is_exercise_cell(c))


@pytest.mark.parametrize("rule, words", [("uretprobe_lease", "lease"), ("speculative_vma_lookup", "speculatively")])
def test_chapter_07_dates_what_its_exercises_ask_about(rule, words):
    """07.1 counts a uretprobe hit on 6.12, the release before the lease; 07.2 asks for the first release whose
    uretprobe hit writes nothing shared (the lease and the speculative lookup both in). Each change stands in the
    chapter's text with its release and commit, as uprobe_lab.kernel.RULES dates it: "6.13 (dd1a7567784e) ...
    lease"."""
    from uprobe_lab.kernel import RULES
    found = next(r for r in RULES if r.name == rule)
    since = re.escape(".".join(map(str, found.since)))
    assert re.search(rf"{since}\W+\({found.commit}\)[^.]{{0,80}}\b{words}", _chapter_text("07_many_cpus")), rule
