"""``./lab lecture CHAPTER``: serve a chapter's lecture copy as slides through Voila, and leave nothing behind.

The server owns its copy: ``notebooks/.lecture_pidNNN_<chapter>.ipynb``, named after the process that serves it,
so two lectures of one chapter never share (or delete) each other's copy. The copy goes and the server stops when
this process ends by Ctrl-C, a closed terminal (SIGHUP) or SIGTERM; if this process is killed outright, the
kernel sends Voila SIGTERM (a parent-death signal) and the next lecture removes the copy of the dead server - one
of its own pid namespace: a folder mounted into several containers holds theirs too, and their pids mean nothing here.

    python -m uprobe_lab.lecture CHAPTER [voila args]    (CHAPTER: 01, 03b, or a notebook's path)
"""
from __future__ import annotations

import ctypes
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from . import presenter
from .errors import LabError
from .interrupt import handling, stop_signals
from .native.host import ended_here, pid_namespace

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
CHAPTER = re.compile(r"(\d\d[a-z]?)_[A-Za-z0-9_]+\.ipynb")  # 03b_nop10_optimization.ipynb; not "-Copy1", not copies
COPY = re.compile(r"\.lecture_pid(\d+)_.+\.ipynb")
MARK = "uprobe_lab_lecture_copy"  # notebook metadata: the server's pid and pid namespace; only such files are removed
PR_SET_PDEATHSIG = 1
# A cell that has not finished after CELL_TIMEOUT_S is interrupted and the page shows what ran, ending in an error
# the slides name (paged.js, reportStoppedCell), instead of "Executing i of n" for ever; a page that hears nothing
# from the server a little longer says so on its spinner (static/loading.js). The slowest cell, chapter 06's price
# benches, takes 10 s on the idle 2-CPU VM and about twice that when it is busy (benchmarks/lecture_load.py --cells).
CELL_TIMEOUT_S = 40
STOPPED = ("It raised an error, or ran longer than the lecture allows a cell "
           f"({CELL_TIMEOUT_S} s). Reload the page to run the chapter again; if it stops here again, run the chapter "
           "in JupyterLab (./lab course) to see why.")
VOILA_ARGS = [
    "--template=paged", "--strip_sources=True",
    "--ContentsManager.allow_hidden=True",  # the copy is a dot-file
    "--Voila.ip=127.0.0.1",
    # Voila's own per-cell limit (nbclient's timeout): interrupted, not left running, so the kernel stays free for the
    # widgets the page did get; the reply nbclient makes up for it ends the run at that cell, with STOPPED as its text
    f"--VoilaExecutor.timeout={CELL_TIMEOUT_S}", "--VoilaExecutor.interrupt_on_timeout=True",
    "--VoilaExecutor.error_on_timeout=ename=CellTimeoutError",
    f"--VoilaExecutor.error_on_timeout=evalue=no reply in {CELL_TIMEOUT_S} s",
    f"--VoilaExecutor.cell_error_instruction={STOPPED}",
]


def chapters(folder: Path = NOTEBOOKS) -> dict[str, Path]:
    """The course's chapters by id ("01", "03b"), from the file names in ``folder``."""
    found = {}
    for path in sorted(folder.glob("*.ipynb")):
        m = CHAPTER.fullmatch(path.name)
        if m:
            found[m[1]] = path
    return found


def find_chapter(want: str, folder: Path = NOTEBOOKS) -> Path:
    """The notebook ``want`` names: a path to a notebook, a chapter id ("03" is 03, not 03b) or a unique prefix of
    a chapter's file name."""
    known = chapters(folder)
    listing = ", ".join(known)
    if not want.strip():
        raise LabError(f"no chapter given; give one of {listing}, e.g. ./lab lecture 01")
    path = Path(want)
    if path.is_file():  # whatever it holds: read_notebook says if it is not a notebook
        return path
    if path.is_dir():
        raise LabError(f"{want} is a directory; give a chapter ({listing}) or a notebook's path, e.g. ./lab lecture 01")
    if path.suffix == ".ipynb" or os.sep in want:
        raise LabError(f"{want}: no such notebook; give a chapter ({listing}) or a notebook's path")
    if want in known:
        return known[want]
    matches = [p for p in known.values() if p.name.startswith(want)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise LabError(f"'{want}' could be {', '.join(p.stem for p in matches)}; give the chapter's number, "
                       "e.g. ./lab lecture 01")
    raise LabError(f"no chapter '{want}'; give one of {listing}, or a notebook's path")


def read_notebook(path: Path):
    """The notebook at ``path``, or a LabError saying why it is not one."""
    import nbformat

    try:
        return nbformat.read(path, as_version=4)
    except (OSError, UnicodeDecodeError) as err:
        raise LabError(f"{path}: cannot read it ({err}); give a chapter such as 01, or a notebook's path") from None
    except Exception as err:  # nbformat's NotJSONError, a JSON or schema error: the file is not a notebook
        raise LabError(f"{path} is not a Jupyter notebook ({type(err).__name__}); give a chapter such as 01, "
                       "or a .ipynb file") from None


def remove_stale_copies(folder: Path) -> list[Path]:
    """Remove the lecture copies in ``folder`` whose server is gone; returns them. A file is removed only when its
    name and its metadata both say it is a lecture copy and its server, a process of this pid namespace, is not
    running; one that cannot be removed (a folder the user cannot write) is left, and the lecture goes on to say why
    it cannot start there."""
    removed = []
    for path in folder.glob(".lecture_pid*_*.ipynb"):
        m = COPY.fullmatch(path.name)
        if not m:
            continue
        try:
            marked = json.loads(path.read_text()).get("metadata", {}).get(MARK)
        except (OSError, ValueError, AttributeError):
            continue
        if (isinstance(marked, dict) and marked.get("pid") == int(m[1])
                and ended_here(marked.get("pid_namespace"), int(m[1]))):
            try:
                path.unlink(missing_ok=True)
            except OSError:
                continue
            removed.append(path)
    return removed


def write_copy(chapter: Path, pid: int) -> Path:
    """Write the lecture copy beside ``chapter`` (so its links and diagrams resolve); refuses to overwrite."""
    import nbformat

    nb = presenter.lecture_notebook(read_notebook(chapter))
    nb.metadata[MARK] = {"pid": pid, "pid_namespace": pid_namespace()}
    copy = chapter.parent / f".lecture_pid{pid}_{chapter.name}"
    try:
        with open(copy, "x") as f:  # "x": a file of that name is never overwritten
            nbformat.write(nb, f)
    except OSError as err:
        raise LabError(f"cannot write the lecture's copy of {chapter.name} into {chapter.parent} ({err.strerror}); "
                       "it goes beside the chapter, so its links and diagrams resolve. Copy the folder somewhere you "
                       f"can write and present it from there, e.g. cp -r {chapter.parent} /tmp/course && "
                       f"./lab lecture /tmp/course/{chapter.name}") from None
    return copy


def check_voila_args(args: list[str]):
    """Catch the arguments Voila would answer with a traceback."""
    for i, arg in enumerate(args):
        if arg.startswith("--port"):
            value = arg.split("=", 1)[1] if "=" in arg else (args[i + 1] if i + 1 < len(args) else "")
            if not value.isdigit() or not 0 < int(value) < 65536:
                raise LabError(f"--port {value!r} is not a port; give a number from 1 to 65535, e.g. --port=8866")


def _die_with_parent():  # runs in the child before exec: SIGTERM when the lecture process dies, even by SIGKILL
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def serve(want: str, voila_args: list[str]) -> int:
    chapter = find_chapter(want)
    check_voila_args(voila_args)
    for stale in remove_stale_copies(chapter.parent):
        print(f"lab: removed {stale.name}, left by a lecture that was killed", file=sys.stderr)
    copy = write_copy(chapter, os.getpid())
    server = None

    def stop(signum, _frame):
        raise KeyboardInterrupt  # unwinds to the finally below, which stops the server and removes the copy

    # SIGINT even if ignored (a script may have started us so); SIGHUP not under nohup, and Voila inherits that
    with handling((signal.SIGINT, *stop_signals()), stop):
        try:
            env = dict(os.environ, **{presenter.ENV: "1"})
            env["JUPYTER_PATH"] = os.pathsep.join(filter(None, [str(presenter.SLIDES_PATH), env.get("JUPYTER_PATH")]))
            voila = Path(sys.executable).with_name("voila")
            server = subprocess.Popen(
                [str(voila) if voila.exists() else "voila", str(copy), *VOILA_ARGS, *voila_args],
                env=env, preexec_fn=_die_with_parent)
            return server.wait()
        except KeyboardInterrupt:
            return 130
        finally:
            if server is not None:
                stop_server(server)
            copy.unlink(missing_ok=True)


def stop_server(server: subprocess.Popen, timeout_s: float = 10) -> None:
    """Stop a server this process started, politely, then by force if it has not stopped in ``timeout_s``."""
    if server.poll() is not None:
        return
    server.terminate()
    try:
        server.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    usage = (f"usage: ./lab lecture CHAPTER [voila args]   (CHAPTER: {', '.join(chapters())}, or a notebook's "
             "path)")
    if argv[:1] in (["-h"], ["--help"]):
        print(f"{usage}\n\nServes the chapter as slides (Voila): short text, outputs and widgets; no code, exercises "
              "or printed walks.\nThe arguments after CHAPTER go to Voila, e.g. --port=8866 --no-browser.")
        return 0
    if not argv:
        print(usage, file=sys.stderr)
        return 2
    try:
        return serve(argv[0], argv[1:])
    except LabError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
