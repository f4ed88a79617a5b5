"""./lab site: the course builds as a web site, every chapter with its outputs and charts, no broken links."""
import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from notebook_runs import executed
from uprobe_lab import site

REPO = Path(__file__).resolve().parents[1]
CHAPTERS = sorted(p.stem for p in (REPO / "notebooks").glob("[0-9][0-9]*_*.ipynb"))


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links, self.ids = [], set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        for key in ("href", "src"):
            if attrs.get(key):
                self.links.append(attrs[key])


def _parse(path: Path) -> _Links:
    p = _Links()
    p.feed(path.read_text(errors="replace"))
    return p


@pytest.fixture(scope="module")
def html(tmp_path_factory):
    pytest.importorskip("jupyter_book", reason="jupyter-book is not installed (pip install -e '.[site]')")
    # the chapters as test_notebooks.py ran them (on this host, chapter 06 measures it), not run again
    return site.build(tmp_path_factory.mktemp("site") / "book", run=lambda path: executed(path.name))


@pytest.mark.site
@pytest.mark.xdist_group("notebooks")
def test_every_chapter_and_reference_page_is_built(html):
    for stem in CHAPTERS:
        assert (html / "notebooks" / f"{stem}.html").exists(), stem
    for page in ("docs/cheatsheet.html", "docs/glossary.html", "docs/references.html", "index.html"):
        assert (html / page).exists(), page


@pytest.mark.site
@pytest.mark.xdist_group("notebooks")
def test_chapters_carry_their_outputs_and_charts(html):
    import nbformat

    for stem in CHAPTERS:
        page = (html / "notebooks" / f"{stem}.html").read_text()
        nb = nbformat.read(REPO / "notebooks" / f"{stem}.ipynb", as_version=4)
        code_cells = sum(c.cell_type == "code" for c in nb.cells)
        assert page.count("cell_output") >= code_cells // 2, f"{stem}: outputs missing"
        assert "Exercise" in page and "<details" in page, f"{stem}: the exercises are missing"
    charts = {stem: len(re.findall(r"<img[^>]+_images/[^\"]+\.png", (html / "notebooks" / f"{stem}.html").read_text()))
              for stem in CHAPTERS}
    # the chapters whose notebooks draw matplotlib charts (worked out from their cells)
    for stem in ("01_breakpoint_uprobes", "02_uretprobes", "04_arm64_stp", "05_reproducing_benchmarks"):
        assert charts[stem] >= 1, f"{stem}: no chart on the page"
    def diagrams_on(page):  # Sphinx writes alt before src
        return [tag for tag in re.findall(r"<img[^>]+>", page) if re.search(r"src=\"[^\"]+\.svg\"", tag)
                and re.search(r"alt=\"[^\"]{40,}\"", tag)]
    diagrams = {stem: diagrams_on((html / "notebooks" / f"{stem}.html").read_text()) for stem in CHAPTERS}
    for stem in ("01_breakpoint_uprobes", "02_uretprobes", "03_nop5_optimization", "03b_nop10_optimization",
                 "04_arm64_stp"):
        assert diagrams[stem], f"{stem}: no diagram with its alt text on the page"


def test_the_staged_book_carries_the_diagrams_the_chapters_link(tmp_path):
    site.stage(tmp_path / "book", execute=False)
    for path in (REPO / "notebooks").glob("[0-9][0-9]*_*.ipynb"):
        for name in re.findall(r"\]\((diagrams/[\w.-]+\.svg)\)", path.read_text()):
            assert (tmp_path / "book" / "notebooks" / name).is_file(), f"{path.name} -> {name}"


@pytest.mark.site
@pytest.mark.xdist_group("notebooks")
def test_no_broken_internal_links(html):
    broken = []
    # the theme's own templates under _static are Jinja sources, not pages
    pages = {p: _parse(p) for p in html.rglob("*.html") if "_static" not in p.relative_to(html).parts}
    for page, parsed in pages.items():
        for link in parsed.links:
            url = urlsplit(link)
            if url.scheme or link.startswith(("#", "//", "mailto:", "data:", "javascript:")):
                continue
            target = (page.parent / unquote(url.path)).resolve() if url.path else page
            if not target.exists():
                broken.append(f"{page.relative_to(html)} -> {link}")
            elif url.fragment and target.suffix == ".html" and target in pages and url.fragment not in pages[target].ids:
                broken.append(f"{page.relative_to(html)} -> {link} (no such anchor)")
    assert not broken, "\n".join(broken)


def test_commit_hashes_become_links_but_bytes_in_code_do_not():
    text = "merged as ff474a78cef5; bytes `662e0f1f840000` and 0123456789ab0 stay"
    linked = site.link_commits(text)
    assert "[ff474a78cef5](https://git.kernel.org/torvalds/c/ff474a78cef5)" in linked
    assert "`662e0f1f840000`" in linked and "0123456789ab0 stay" in linked
    assert site.link_commits(linked) == linked  # already a link: left alone


@pytest.mark.site
@pytest.mark.xdist_group("notebooks")
def test_no_page_shows_a_blank_widget_or_loads_a_widget_manager(html):
    noted = 0
    for stem in CHAPTERS:
        page = (html / "notebooks" / f"{stem}.html").read_text()
        assert "widget-view+json" not in page and "html-manager" not in page, stem
        noted += page.count("uprobe-lab-widget")
    assert noted >= 5  # the steppers of 01-03, the decode widget of 04, chapter 07's boxes, ...


def test_a_widget_output_becomes_a_note_and_the_rest_is_kept():
    import nbformat.v4 as v4

    nb = v4.new_notebook(cells=[v4.new_code_cell("w", outputs=[
        v4.new_output("display_data", data={site.WIDGET_MIME: {"model_id": "x"}, "text/plain": "VBox()"}),
        v4.new_output("stream", text="printed\n")])], metadata={"widgets": {"state": {}}})
    page = site.static_widgets(nb)
    assert "widgets" not in page.metadata and page.cells[0].outputs[1].text == "printed\n"
    assert page.cells[0].outputs[0]["data"]["text/html"] == site.WIDGET_NOTE
    assert site.WIDGET_MIME in nb.cells[0].outputs[0]["data"]  # the run itself is left as it was


SLEEPER = """import sys
from pathlib import Path
import nbformat
from uprobe_lab import site
site.REPO = Path(sys.argv[1])  # a course of one chapter, whose cell says it runs and sleeps, and one page
(site.REPO / "notebooks").mkdir(parents=True)
(site.REPO / "docs").mkdir()
(site.REPO / "docs" / "cheatsheet.md").write_text("# Cheat sheet")
cell = f"open({str(site.REPO / 'running')!r}, 'w').close(); import time; time.sleep(60)"
nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Sleeps"), nbformat.v4.new_code_cell(cell)])
nbformat.write(nb, site.REPO / "notebooks" / "01_sleeps.ipynb")
sys.exit(site.main(sys.argv[2:]))
"""


def _signalled(args, sig, ready, tmp_path):
    """Run the site with ``args``; once the path ``ready`` is there, send ``sig``; its exit code, stderr, and how
    long it took to stop."""
    import signal
    import subprocess
    import sys
    import time

    proc = subprocess.Popen([sys.executable, "-c", SLEEPER, str(tmp_path / "course"), *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 60
    while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    t0 = time.monotonic()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err, time.monotonic() - t0


@pytest.mark.slow
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP", "SIGINT"])
def test_a_signal_while_a_chapter_runs_stops_the_site_with_one_line(sig, tmp_path):
    import signal

    running = tmp_path / "course" / "running"
    code, err, took = _signalled(["--out", str(tmp_path / "book")], getattr(signal, sig), running, tmp_path)
    assert running.exists()  # the cell was running
    assert code == 130 and [ln for ln in err.splitlines() if "IPKernelApp" not in ln] == ["interrupted"], err
    assert took < 20
    site.stage(tmp_path / "book", execute=False)  # what the run wrote is the lab's: a rerun replaces it


@pytest.mark.slow
def test_a_signal_while_jupyter_book_runs_leaves_a_site_the_next_build_replaces(tmp_path):
    import signal

    pytest.importorskip("jupyter_book", reason="jupyter-book is not installed (pip install -e '.[site]')")
    code, err, _ = _signalled(["--out", str(tmp_path / "book"), "--no-execute"], signal.SIGTERM,
                              tmp_path / "book" / "_build", tmp_path)
    assert code == 130 and err.strip().splitlines() == ["interrupted"], err
    assert (tmp_path / "book" / "_build").is_dir()  # jupyter-book had begun: its files are in the manifest
    site.stage(tmp_path / "book", execute=False)


def test_a_run_ends_cleanly_with_an_nbclient_that_keeps_no_exit_hook():
    """nbclient's exit hook is a private attribute: a version without it runs the chapter all the same."""
    class Client:
        km = None

        async def async_execute(self, stderr=None):
            return "ran"

    site._execute_interruptibly(Client())  # no AttributeError on the way out
