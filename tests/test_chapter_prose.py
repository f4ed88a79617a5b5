"""Facts the chapters state in prose, checked against the kernel source history and the lab's recordings."""
import re
from pathlib import Path

import nbformat

from uprobe_lab.verify import x86_kernels

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def markdown(name):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    return [c.source for c in nb.cells if c.cell_type == "markdown"]


def test_dup_mmap_is_placed_in_mm_mmap_c():
    # "mm: move dup_mmap() to mm" (Lorenzo Stoakes, 6.16) moved it out of kernel/fork.c
    text = "\n".join(markdown("03b_nop10_optimization.ipynb"))
    assert "dup_mmap" in text and "kernel/fork.c" not in text and "mm/mmap.c" in text


def test_03b_says_once_that_7_2_y_took_the_nop10_from_7_2_6():
    cells = markdown("03b_nop10_optimization.ipynb")
    assert [i for i, c in enumerate(cells) if re.search(r"7\.2\.y[^.]*from 7\.2\.6", c)] == [0]


def test_03b_bolds_only_debian_releases_the_referee_recording_has():
    text = "\n".join(markdown("03b_nop10_optimization.ipynb"))
    recorded = {r["release"] for r in x86_kernels.load_recording()}
    bolded = re.findall(r"\*\*(\d+\.\d+\.\d+)[^*]*\*\*", text)
    assert bolded, "the referee paragraph names the release it ran"
    for release in bolded:
        assert any(str(r).startswith(release + "+") or str(r).startswith(release + "-") for r in recorded), release


# Phrases that tell how the project was written rather than what is true now (kernel history is fine).
NARRATION = re.compile(r"\bit used to\b|\bused to (?:end|get|be|have|give)\b|\bearlier (?:version|session)\b"
                       r"|\bin the (?:same )?session\b|\(issue \d+\)|\bhelper notes\b|\bas they now are\b"
                       r"|\bnow been looked at\b|\bcited here before\b|\bthe lab had wrong\b", re.I)
REPO = NOTEBOOKS.parent
PROSE_SUFFIXES = {".md", ".py", ".ipynb"}


def test_no_file_narrates_how_it_was_written():
    found = []
    for path in sorted(REPO.rglob("*")):
        parts = path.relative_to(REPO).parts
        if path.suffix not in PROSE_SUFFIXES or parts[0].startswith(".") or parts[:2] == ("tests", "data"):
            continue
        if path == Path(__file__):
            continue
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if NARRATION.search(line):
                found.append(f"{path.relative_to(REPO)}:{n}: {line.strip()[:100]}")
    assert not found, "\n".join(found)


def test_05_leaves_the_count_of_moved_rows_to_the_cell_that_computes_it():
    # model.headline_text prints the count from the reproduction; the prose would go stale with a number of its own
    text = "\n".join(markdown("05_reproducing_benchmarks.ipynb"))
    words = "one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|sixteen|" \
            "seventeen|eighteen|nineteen|twenty"
    assert not re.search(rf"\b(\d+|{words})( moved)? rows (are few|say little)", text, re.IGNORECASE)


def test_06_says_its_method_in_paragraphs_a_learner_reads_through():
    # the measurement, the fit's columns and the run-twice check; their details are docs/performance.md's
    blocks = [b for c in markdown("06_your_machine.ipynb") for b in re.split(r"\n\s*\n|\n(?=\* )", c)]
    assert max(len(b) for b in blocks) < 900, max(blocks, key=len)[:80]
    assert "How the price benches measure" in "\n".join(markdown("06_your_machine.ipynb"))


def test_00_names_attach_s_kernel_twin_in_a_sentence_not_a_help_dump():
    import uprobe_lab as ul
    nb = nbformat.read(NOTEBOOKS / "00_welcome.ipynb", as_version=4)
    assert not [c.source for c in nb.cells if c.cell_type == "code" and "help(" in c.source]
    assert "`ul.attach` is the kernel's `uprobe_register()`" in "\n".join(markdown("00_welcome.ipynb"))
    assert ul.attach.__name__ == "uprobe_register" and "Twin of uprobe_register()" in ul.attach.__doc__


def test_08_s_capstone_section_leaves_exercise_08_5_to_be_worked_out():
    # 08.5 asks which of the capstone's probes (a stepped entry on 6.18, USDT sites on 6.18 and 7.3) shares lines
    # on 64 CPUs: no sentence above the exercises may pair a 6.18 stepped instruction with a cost that grows with CPUs
    nb = nbformat.read(NOTEBOOKS / "08_your_program.ipynb", as_version=4)
    prose = [c.source for c in nb.cells if c.cell_type == "markdown" and "exercises" not in c.metadata.get("tags", [])]
    sentences = [s for text in prose for s in re.split(r"(?<=[.:])\s+(?=[A-Z*])", text)]
    told = [s for s in sentences if "6.18" in s and re.search(r"stepped|XOL", s) and re.search(r"CPUs", s)]
    assert not told, told
