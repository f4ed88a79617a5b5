"""A lecture loads or says why, in Chromium: ``python -m uprobe_lab.lecture`` (``./lab lecture``'s own server and
settings) serving a chapter.

A stalled load says so within a minute, instead of "Executing i of n" for ever: a tiny chapter of the test's own
(tmp_path) with a cell that never finishes, which Voila's per-cell limit interrupts (the page names the slide that
stopped and the way out, and the kernel still answers the widget above it), and one whose server stops answering
mid-run (SIGSTOP), which the page's own watchdog reports on its spinner. And chapter 07's boxes, drawn into an
Image widget's value (uprobe_lab/views/redraw.py says why not an Output widget), redraw when a toggle is pressed.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from browser_support import free_port, stop_server

from uprobe_lab import lecture

pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("browser")]

REPO = Path(__file__).resolve().parents[2]
BUTTON = """import ipywidgets as w
said, press = w.HTML("not pressed"), w.Button(description="Press")
press.on_click(lambda _: setattr(said, "value", "pressed"))
w.VBox([press, said])"""


def chapter(tmp_path: Path, stall: str) -> Path:
    """A chapter of three slides: a button, then a section whose cell runs ``stall``, then one after it."""
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                           "language": "python"}})
    nb.cells = [nbformat.v4.new_markdown_cell("# 98 · A chapter that stalls\n\nA button first."),
                nbformat.v4.new_code_cell(BUTTON),
                nbformat.v4.new_markdown_cell("## 2. The cell that stalls\n\nIt does not finish."),
                nbformat.v4.new_code_cell(stall),
                nbformat.v4.new_markdown_cell("## 3. After it\n\nNever reached.")]
    path = tmp_path / "98_stalls.ipynb"
    nbformat.write(nb, path)
    return path


def serve(path: Path, tmp_path: Path):
    """``./lab lecture PATH`` on a free port; (lecture process, its log, url) once the server answers."""
    port = free_port()
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"), JUPYTER_CONFIG_DIR=str(tmp_path / "config"),
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    log = open(tmp_path / "lecture.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "uprobe_lab.lecture", str(path), f"--port={port}",
                             "--Voila.port_retries=0", "--no-browser"], cwd=REPO, env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while b"is running at" not in (tmp_path / "lecture.log").read_bytes():
        assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "lecture.log").read_text()
        time.sleep(0.2)
    return proc, log, f"http://127.0.0.1:{port}/"


def test_a_cell_that_never_finishes_is_named_within_a_minute(browser, tmp_path):
    proc, log, url = serve(chapter(tmp_path, "import threading\nthreading.Event().wait()  # never set"), tmp_path)
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    try:
        t0 = time.monotonic()
        page.goto(url, wait_until="commit")
        stopped = page.locator("#paged-stopped")
        stopped.wait_for(timeout=60_000)
        took = time.monotonic() - t0
        text = stopped.inner_text()
        # the slide and its section, Voila's limit that ended it, and the way out
        assert 'slide 2 of 2 ("2. The cell that stalls")' in text, text
        assert f"ran longer than the lecture allows a cell ({lecture.CELL_TIMEOUT_S} s)" in text, text
        assert "Reload the page" in text and "./lab course" in text and "executing cell [" not in text, text
        assert lecture.CELL_TIMEOUT_S <= took <= 60, took
        page.locator("#loading").wait_for(state="detached", timeout=10_000)  # Voila shows the slides
        # the stalled cell was interrupted, not left running: the kernel still answers the widget before it
        stopped.click()  # goes to the stalled slide
        assert page.locator("#paged-count").inner_text() == "2 / 2"
        page.keyboard.press("Home")
        page.locator("button.widget-button", has_text="Press").click()
        page.locator(".widget-html-content", has_text=re.compile("^pressed$")).wait_for(timeout=10_000)
    finally:
        page.close()
        stop_server(proc, log)
    assert not list(tmp_path.glob(".lecture_pid*")), "the lecture copy was left behind"


def test_a_server_that_stops_answering_is_reported_on_the_spinner(browser, tmp_path):
    """The server stopped (SIGSTOP) while a slow cell runs: no cell comes, and after the watchdog's time the spinner
    names the cell it waited for and what to do."""
    proc, log, url = serve(chapter(tmp_path, "import time\ntime.sleep(15)"), tmp_path)
    voila = int(subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()[0])
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    try:
        page.goto(url, wait_until="commit")
        text = page.locator("#loading_text")
        text.filter(has_text="Executing 3 of").wait_for(timeout=60_000)  # the button's cell came; cell 4 sleeps
        os.kill(voila, signal.SIGSTOP)
        t0 = time.monotonic()
        page.locator("#loading_text.paged-stalled").wait_for(timeout=75_000)
        took, said = time.monotonic() - t0, text.inner_text()
        waited = int(re.search(r"nothing came from the server for (\d+) s", said)[1])
        assert lecture.CELL_TIMEOUT_S < waited - 2 <= took <= 60, (took, said)
        assert 'cell 4 of 5 (in "2. The cell that stalls")' in said and "./lab course" in said, said
    finally:
        os.kill(voila, signal.SIGCONT)
        page.close()
        stop_server(proc, log)


def test_chapter_07s_toggles_redraw_its_boxes_on_the_slide(browser, tmp_path):
    """The lecture of chapter 07 loads; on the boxes' slide each kernel toggle pressed redraws the figure (an Image
    widget's new PNG), within a generous bound (benchmarks/lecture_load.py and the printed times are the figures)."""
    chapter_07 = tmp_path / "07_many_cpus.ipynb"  # served from here: a lecture started in notebooks/ removes the
    shutil.copy(REPO / "notebooks" / chapter_07.name, chapter_07)  # dead lectures' copies test_lecture.py looks for
    proc, log, url = serve(chapter_07, tmp_path)
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    try:
        page.goto(url, wait_until="commit")
        page.locator("#loading").wait_for(state="detached", timeout=120_000)
        toggles = page.locator(".widget-toggle-buttons", has_text="6.10").first
        toggles.wait_for(state="attached", timeout=60_000)
        for _ in range(int(page.locator("#paged-count").inner_text().split(" / ")[1])):  # on to the boxes' slide
            if toggles.is_visible():
                break
            page.keyboard.press("ArrowRight")
        box = toggles.locator("xpath=ancestor::div[contains(@class, 'widget-vbox')][1]")
        assert not page.locator(".widget-output").count(), "an Output widget on the page"
        took = []
        for kernel in ("6.18", "6.8", "6.10"):
            before = box.locator("img").get_attribute("src")
            t0 = time.monotonic()
            toggles.locator("button", has_text=re.compile(f"^{re.escape(kernel)}$")).click()
            # the redraw replaces the chart's HTML, and with it the <img>: look for the picture again each time
            page.wait_for_function("([box, before]) => (box.querySelector('img') || {}).src !== before",
                                   arg=[box.element_handle(), before], timeout=10_000)
            took.append(time.monotonic() - t0)
        print(f"\n07: a kernel toggle redraws the boxes in {', '.join(f'{t:.2f}' for t in took)} s")
        assert max(took) < 5, took
    finally:
        page.close()
        stop_server(proc, log)
