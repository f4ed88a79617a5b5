"""Build the course as a static web site: every chapter executed, with its outputs and charts, plus the glossary,
the references and the performance notes. ``./lab site`` runs it; the result is ``build/site/_build/html``.

The tool is Jupyter Book 1.x (Sphinx + MyST-NB). The notebooks are executed here, with nbclient, so a chapter
that fails stops the build with its error; Jupyter Book then only renders (``execute_notebooks: "off"``).
On the way, bare 12-digit commit hashes in the prose become links to the commit.

    python -m uprobe_lab.site [--out DIR] [--no-execute]
"""
from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import copy
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from .cli import terminate_as_ctrl_c
from .interrupt import handling, stop_signals
from .errors import LabError
from .outputs import OutputDir

REPO = Path(__file__).resolve().parents[1]
DOCS = ("cheatsheet.md", "glossary.md", "references.md", "performance.md", "model.md")
COMMIT_URL = "https://git.kernel.org/torvalds/c/{}"
# A 12-hex-digit token (the kernel's abbreviated commit id) with a digit and a letter, not already in a link.
COMMIT = re.compile(r"(?<![\w\[/])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])([0-9a-f]{12})(?![\w\]])")

CONFIG = """\
title: "uprobe_lab: how Linux uprobes work"
author: the uprobe_lab authors
copyright: "GPL-2.0-only"
only_build_toc_files: true
execute:
  execute_notebooks: "off"
parse:
  myst_heading_anchors: 3
  myst_enable_extensions: [colon_fence, dollarmath, linkify]
html:
  use_repository_button: false
  home_page_in_navbar: true
launch_buttons:
  notebook_interface: jupyterlab
sphinx:
  config:
    nb_merge_streams: true
    suppress_warnings: ["mystnb.unknown_mime_type"]
"""


def link_commits(markdown: str) -> str:
    """Bare commit hashes -> links, outside code spans and code blocks."""
    parts = re.split(r"(```.*?```|`[^`]*`)", markdown, flags=re.S)
    return "".join(p if i % 2 else COMMIT.sub(lambda m: f"[{m[1]}]({COMMIT_URL.format(m[1])})", p)
                   for i, p in enumerate(parts))


class _LoopWithoutSignals(asyncio.SelectorEventLoop):
    """An event loop on which nbclient installs no signal handlers of its own (it skips them on a RuntimeError):
    its handlers shut the kernel down but leave the run to go on, or to fail with an error of that clean-up."""

    def add_signal_handler(self, sig, callback, *args):
        raise RuntimeError("the site answers signals itself")


async def _settled(client, tasks):
    await asyncio.gather(*tasks, return_exceptions=True)
    if client.km is not None and client.km.has_kernel:  # cancelled as the kernel started, before nbclient's clean-up
        with contextlib.suppress(Exception):
            await client.km.shutdown_kernel(now=True)


def _execute_interruptibly(client):
    """``client.execute()``, where Ctrl-C (unless ignored), SIGTERM and SIGHUP cancel the run: nbclient shuts the
    kernel down on the way out, then KeyboardInterrupt is raised. Signal handlers only on the main thread."""
    loop = _LoopWithoutSignals()
    task = loop.create_task(client.async_execute(stderr=subprocess.DEVNULL))  # a cell's error is in its outputs
    heard = []

    def cancel(signum, frame):
        heard.append(signum)
        loop.call_soon_threadsafe(task.cancel)

    signals = stop_signals() + ([signal.SIGINT] if callable(signal.getsignal(signal.SIGINT)) else [])
    try:
        with handling(signals, cancel):
            loop.run_until_complete(task)
    except BaseException:
        if heard:  # a cancelled run, or an error of the clean-up it went through
            raise KeyboardInterrupt from None
        raise
    finally:
        left = asyncio.all_tasks(loop)  # nbclient's kernel poll, say: cancelled, so none is destroyed pending
        for t in left:
            t.cancel()
        loop.run_until_complete(_settled(client, left))
        loop.close()
        # nbclient's own exit hook, for a kernel still up: it is down by now (a private name: absent, nothing to do)
        cleanup = getattr(client, "_cleanup_kernel", None)
        if cleanup is not None:
            atexit.unregister(cleanup)
    if heard:  # the signal came as the run ended
        raise KeyboardInterrupt


def execute_notebook(path: Path, timeout: int = 600):
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", store_widget_state=True,
                            resources={"metadata": {"path": str(path.parent)}})
    _execute_interruptibly(client)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    if errors:
        raise LabError(f"{path.name} failed while building the site: {errors[0].ename}: {errors[0].evalue}")
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = link_commits(cell.source)
    return nb


def title_of(nb) -> str:
    first = next((c.source for c in nb.cells if c.cell_type == "markdown"), "")
    return first.splitlines()[0].lstrip("# ").strip() if first else "untitled"


def intro(chapters: list[tuple[str, str]]) -> str:
    rows = "\n".join(f"| [{title}](notebooks/{stem}.ipynb) |" for stem, title in chapters)
    return f"""# uprobe_lab

A course on how Linux **uprobes** work - breakpoint uprobes, return probes and their trampolines, the x86 nop5
optimisation, arm64, many CPUs hitting one probe - and why each optimisation in the kernel's history pays off. Each chapter below was executed
when this site was built; run them yourself with `./lab course` (see the README), or present one with
`./lab lecture 01`.

| chapter |
|---|
{rows}

What a probe costs and which to use, on one page: the [cheat sheet](docs/cheatsheet.md). Terms: the
[glossary](docs/glossary.md). Sources: the [references](docs/references.md).
"""


WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
WIDGET_NOTE = ("<p class='uprobe-lab-widget'><em>An interactive widget stands here: it runs in JupyterLab "
               "(<code>./lab course</code>) or on Binder. On this page, the outputs around it show what it "
               "draws.</em></p>")


def static_widgets(nb):
    """A copy of ``nb`` for a page with no kernel: each widget output becomes a note saying where it runs, and the
    saved widget state goes, so the page neither shows a blank box nor loads a widget manager from a CDN."""
    nb = copy.deepcopy(nb)
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            if WIDGET_MIME in out.get("data", {}):
                out["data"] = {"text/html": WIDGET_NOTE, "text/plain": "(an interactive widget)"}
    return nb


def stage(src: Path, execute: bool = True, run=execute_notebook) -> list[str]:
    """Write the book's sources into ``src``; returns the chapter stems in order. ``run`` executes one
    chapter (a path) into a notebook with its outputs: the tests pass runs they already have.

    ``src`` is new, empty, or holds only an earlier build's files (outputs.OutputDir refuses anything else)."""
    target = OutputDir(src, "--out", "build/site")
    target.replace_all()
    try:
        return _stage(target.path, execute, run, target.new)
    finally:
        target.commit()  # what _stage wrote, by name: a file the user saves here meanwhile stays theirs


def _stage(src: Path, execute: bool, run, wrote: set[str]) -> list[str]:
    """The book's sources written into ``src``, each path (relative to it) added to ``wrote`` as it is written."""
    import nbformat

    def written(path: Path) -> Path:
        wrote.add(path.relative_to(src).as_posix())
        return path

    (src / "notebooks").mkdir(exist_ok=True)  # an empty directory of the user's may stand there: kept
    (src / "docs").mkdir(exist_ok=True)
    chapters = []
    for path in sorted((REPO / "notebooks").glob("[0-9][0-9]*_*.ipynb")):
        t0 = time.monotonic()
        nb = run(path) if execute else nbformat.read(path, as_version=4)
        nbformat.write(static_widgets(nb), written(src / "notebooks" / path.name))
        chapters.append((path.stem, title_of(nb)))
        print(f"site: {path.name} {'executed' if execute else 'copied'} in {time.monotonic() - t0:.1f} s", flush=True)
    if (REPO / "notebooks" / "diagrams").is_dir():  # the chapters' SVG diagrams, linked as diagrams/NAME.svg
        shutil.copytree(REPO / "notebooks" / "diagrams", src / "notebooks" / "diagrams", dirs_exist_ok=True)
        for copied in (REPO / "notebooks" / "diagrams").rglob("*"):
            if copied.is_file():
                written(src / "notebooks" / "diagrams" / copied.relative_to(REPO / "notebooks" / "diagrams"))
    docs = [d for d in DOCS if (REPO / "docs" / d).exists()]
    for name in docs:
        written(src / "docs" / name).write_text(link_commits((REPO / "docs" / name).read_text()))
    written(src / "intro.md").write_text(intro(chapters))
    written(src / "_config.yml").write_text(CONFIG)
    toc = ["format: jb-book", "root: intro", "parts:", "  - caption: Chapters", "    chapters:"]
    toc += [f"      - file: notebooks/{stem}" for stem, _ in chapters]
    toc += ["  - caption: Reference", "    chapters:"] + [f"      - file: docs/{Path(d).stem}" for d in docs]
    written(src / "_toc.yml").write_text("\n".join(toc) + "\n")
    return [stem for stem, _ in chapters]


def build(out: Path = REPO / "build" / "site", execute: bool = True, run=execute_notebook) -> Path:
    """Stage and build; returns the directory holding index.html."""
    t0 = time.monotonic()
    stage(out, execute, run)
    out = Path(out).resolve()
    book = Path(sys.executable).with_name("jupyter-book")
    cmd = [str(book) if book.exists() else "jupyter-book", "build", str(out), "--all"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True)
    finally:
        OutputDir(out, "--out", "build/site").commit(under="_build")  # jupyter-book writes only there
    if done.returncode != 0:
        raise LabError(f"jupyter-book failed:\n{(done.stdout + done.stderr)[-4000:]}")
    html = out / "_build" / "html"
    print(f"site: built in {time.monotonic() - t0:.0f} s -> {html / 'index.html'}")
    return html


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m uprobe_lab.site", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(REPO / "build" / "site"))
    ap.add_argument("--no-execute", action="store_true", help="render the notebooks as committed (no outputs)")
    args = ap.parse_args(argv)
    try:
        with terminate_as_ctrl_c():  # kill or a closed terminal: the manifest still records what was written
            build(args.out, execute=not args.no_execute)
    except LabError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
