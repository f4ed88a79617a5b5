"""./lab lecture (uprobe_lab/lecture.py): the right chapter or a clear error, and a server that owns its copy and
leaves nothing behind however it stops."""
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from uprobe_lab import lecture, presenter
from uprobe_lab.errors import LabError

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def folder(tmp_path):
    for name in ("00_welcome.ipynb", "01_breakpoint_uprobes.ipynb", "03_nop5_optimization.ipynb",
                 "03b_nop10_optimization.ipynb", "07_many_cpus.ipynb", "01_breakpoint_uprobes-Copy1.ipynb",
                 ".lecture_pid1_01_breakpoint_uprobes.ipynb"):
        nbformat.write(nbformat.v4.new_notebook(), tmp_path / name)
    return tmp_path


@pytest.mark.parametrize("want, name", [
    ("01", "01_breakpoint_uprobes.ipynb"),        # a Jupyter "Duplicate" beside it is not a chapter
    ("03", "03_nop5_optimization.ipynb"),          # a whole number first: not 03b
    ("03b", "03b_nop10_optimization.ipynb"),
    ("07_many", "07_many_cpus.ipynb"),
])
def test_a_chapter_is_found_by_its_number(folder, want, name):
    assert lecture.find_chapter(want, folder).name == name


@pytest.mark.parametrize("want, words", [
    ("", "no chapter given"),
    ("  ", "no chapter given"),
    ("0", "could be 00_welcome, 01_breakpoint_uprobes"),  # not silently the first match
    ("9", "no chapter '9'"),
    ("README.md", "no chapter 'README.md'"),
    ("notes/x.ipynb", "no such notebook"),
])
def test_a_chapter_that_is_not_one_gets_a_clear_error(folder, want, words, monkeypatch):
    monkeypatch.chdir(folder)
    with pytest.raises(LabError, match=words):
        lecture.find_chapter(want, folder)


@pytest.mark.parametrize("want", ["sub", "sub/", "."])
def test_a_directory_given_as_the_chapter_is_named_as_one(folder, want, monkeypatch):
    (folder / "sub").mkdir()
    monkeypatch.chdir(folder)
    with pytest.raises(LabError, match=rf"^{want} is a directory; give a chapter \(00, 01, 03, 03b, 07\)"):
        lecture.find_chapter(want, folder)


@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_help_prints_the_usage_and_serves_nothing(flag, capsys, monkeypatch):
    monkeypatch.setattr(lecture, "serve", lambda *a: pytest.fail("served a lecture for --help"))
    assert lecture.main([flag]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: ./lab lecture CHAPTER [voila args]") and "03b" in out and "--port=" in out


@pytest.mark.parametrize("content", ["# not a notebook\n", "", "{\"cells\": 3}"])
def test_a_file_that_is_not_a_notebook_is_named_as_such(tmp_path, content):
    path = tmp_path / "x.ipynb"
    path.write_text(content)
    with pytest.raises(LabError, match="is not a Jupyter notebook"):
        lecture.read_notebook(path)


def test_a_file_given_as_the_chapter_is_read_as_a_notebook_or_refused(capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    assert lecture.main(["README.md"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: README.md is not a Jupyter notebook") and "Traceback" not in err
    assert not list((REPO / "notebooks").glob(f".lecture_pid{os.getpid()}_*"))


@pytest.mark.parametrize("args", [["--port=-5"], ["--port", "x"], ["--port=70000"], ["--port"]])
def test_a_port_that_is_not_one_is_refused_before_voila_starts(args):
    with pytest.raises(LabError, match="is not a port"):
        lecture.check_voila_args(args)


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", ""])
    child.wait()
    return child.pid


def test_only_marked_copies_of_dead_servers_are_removed(tmp_path):
    dead = _dead_pid()
    stale = lecture.write_copy(_chapter(tmp_path), dead)
    live = lecture.write_copy(_chapter(tmp_path), os.getpid())
    unmarked = tmp_path / f".lecture_pid{dead}_mine.ipynb"  # named like a copy, but the lab did not write it
    nbformat.write(nbformat.v4.new_notebook(), unmarked)
    assert lecture.remove_stale_copies(tmp_path) == [stale]
    assert not stale.exists() and live.exists() and unmarked.exists()


def test_a_stale_copy_that_cannot_be_removed_is_left_and_the_others_go(tmp_path, monkeypatch):
    """In a folder the user cannot write, a dead lecture's copy stays; the start goes on to its one-line refusal."""
    stuck = lecture.write_copy(_chapter(tmp_path), _dead_pid())
    other = lecture.write_copy(_chapter(tmp_path), _dead_pid())
    unlink = Path.unlink

    def refused(path, missing_ok=False):
        if path == stuck:
            raise PermissionError(13, "Permission denied", str(path))
        unlink(path, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", refused)
    assert lecture.remove_stale_copies(tmp_path) == [other]
    assert stuck.exists() and not other.exists()


def test_a_dead_server_s_copy_is_removed_only_in_its_own_pid_namespace(tmp_path):
    """A course folder mounted into two containers: a pid free here may be the other's live lecture."""
    from uprobe_lab.native.host import pid_namespace

    dead = _dead_pid()
    here = lecture.write_copy(_chapter(tmp_path), dead)
    assert json.loads(here.read_text())["metadata"][lecture.MARK] == {"pid": dead, "pid_namespace": pid_namespace()}
    theirs = tmp_path / f".lecture_pid{dead}_02_theirs.ipynb"
    nb = nbformat.read(here, as_version=4)
    nb.metadata[lecture.MARK] = {"pid": dead, "pid_namespace": format(int(pid_namespace(), 16) ^ 1, "x")}
    nbformat.write(nb, theirs)
    assert lecture.remove_stale_copies(tmp_path) == [here]
    assert theirs.exists()


def test_a_copy_is_never_written_over_a_file(tmp_path):
    chapter = _chapter(tmp_path)
    lecture.write_copy(chapter, 4242)
    with pytest.raises(LabError, match="cannot write the lecture's copy .*File exists"):
        lecture.write_copy(chapter, 4242)


def test_a_chapter_in_a_folder_the_user_cannot_write_is_one_line_with_the_way_out():
    import shutil

    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv, to run as nobody beside the checkout's notebooks")
    done = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-m",
                           "uprobe_lab.lecture", "01"], capture_output=True, text=True, cwd="/", timeout=60)
    folder = REPO / "notebooks"
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith("error: cannot write the lecture's copy of 01_breakpoint_uprobes.ipynb into "
                                  f"{folder} (Permission denied)")
    assert f"cp -r {folder} /tmp/course && ./lab lecture /tmp/course/01_breakpoint_uprobes.ipynb" in done.stderr


NOHUP_LECTURE = """
import os, signal, sys
from uprobe_lab import lecture

class Voila:  # the server: its SIGHUP disposition is the one the lecture has as it starts it
    def __init__(self, args, **kwargs):
        print("voila ignores SIGHUP:", signal.getsignal(signal.SIGHUP) is signal.SIG_IGN, flush=True)
    def wait(self):
        os.kill(os.getpid(), signal.SIGHUP)  # the terminal closed: nohup's lecture goes on
        print("went on", flush=True)
        return 0
    def poll(self):
        return 0

lecture.subprocess.Popen = Voila
sys.exit(lecture.serve(sys.argv[1], []))
"""


def test_a_lecture_started_under_nohup_outlives_its_terminal_and_so_does_voila(tmp_path):
    chapter = _chapter(tmp_path)
    done = subprocess.run([sys.executable, "-c", NOHUP_LECTURE, str(chapter)], capture_output=True, text=True,
                          timeout=60, preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    assert (done.returncode, done.stdout) == (0, "voila ignores SIGHUP: True\nwent on\n"), done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [chapter.name]  # its copy removed on the way out


def _chapter(folder: Path) -> Path:
    path = folder / "01_breakpoint_uprobes.ipynb"
    if not path.exists():
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# One\n\nFirst. Second.")])
        nbformat.write(nb, path)
    return path


# --- the server, end to end -------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


# One worker runs every test that starts a lecture: each start removes the copies of dead lectures, so a start on
# another worker could remove the killed lecture's copy before the test looks for it.
LECTURE_SERVERS = pytest.mark.xdist_group("lecture-servers")


def _start(port: int):
    proc = subprocess.Popen([sys.executable, "-m", "uprobe_lab.lecture", "01", "--no-browser", f"--port={port}"],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    copy = REPO / "notebooks" / f".lecture_pid{proc.pid}_01_breakpoint_uprobes.ipynb"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("the lecture server did not listen within 60 s")
    return proc, copy, _children(proc.pid)


def _gone(pids, within=15) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not [p for p in pids if Path(f"/proc/{p}").exists() and "zombie" not in _state(p)]:
            return True
        time.sleep(0.2)
    return False


def _state(pid) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split("\n")[0].lower()
    except (OSError, IndexError):
        return "zombie"


@pytest.mark.slow
@LECTURE_SERVERS
def test_two_lectures_of_one_chapter_side_by_side_and_each_stop_cleans_only_its_own():
    first, copy1, voila1 = _start(_free_port())
    second, copy2 = None, None
    try:
        assert copy1.exists() and json.loads(copy1.read_text())["metadata"][lecture.MARK]["pid"] == first.pid
        assert voila1 and f"{presenter.ENV}=1".encode() in Path(f"/proc/{voila1[0]}/environ").read_bytes()
        assert str(presenter.SLIDES_PATH).encode() in Path(f"/proc/{voila1[0]}/environ").read_bytes()  # JUPYTER_PATH
        assert all(a.encode() in Path(f"/proc/{voila1[0]}/cmdline").read_bytes() for a in lecture.VOILA_ARGS)
        second, copy2, voila2 = _start(_free_port())
        assert copy2 != copy1 and copy2.exists()
        second.send_signal(signal.SIGHUP)  # a closed terminal
        assert second.wait(timeout=30) != 0
        assert not copy2.exists() and _gone(voila2)
        assert copy1.exists() and first.poll() is None  # the first lecture still serves its copy
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGINT)  # Ctrl-C
                proc.wait(timeout=30)
    assert not copy1.exists() and _gone(voila1)


@pytest.mark.slow
@LECTURE_SERVERS
def test_a_killed_lecture_takes_its_server_along_and_the_next_one_removes_its_copy():
    proc, copy, voila = _start(_free_port())
    proc.kill()  # SIGKILL: no handler runs
    proc.wait()
    assert _gone(voila), "Voila outlived the lecture that started it"
    assert copy.exists()  # nobody could remove it yet
    nxt, copy2, voila2 = _start(_free_port())
    try:
        assert not copy.exists()
    finally:
        nxt.terminate()
        nxt.wait(timeout=30)
    assert not copy2.exists() and _gone(voila2)


def test_a_stalled_load_is_ended_by_the_server_before_the_pages_watchdog_and_within_a_minute():
    """Voila's own per-cell limit (lecture.CELL_TIMEOUT_S, interrupting the cell) names the cell that stalled; the
    page's watchdog (loading.js) is for a server that says nothing at all, so it waits longer, and both speak within
    a minute. tests/browser/test_lecture_loading.py shows each in Chromium."""
    import re

    loading_js = presenter.SLIDES_PATH / "voila" / "templates" / "paged" / "static" / "loading.js"
    watchdog_s = int(re.search(r"var STALL_S = (\d+);", loading_js.read_text())[1])
    assert lecture.CELL_TIMEOUT_S < watchdog_s <= 60
    assert f"--VoilaExecutor.timeout={lecture.CELL_TIMEOUT_S}" in lecture.VOILA_ARGS
    assert "--VoilaExecutor.interrupt_on_timeout=True" in lecture.VOILA_ARGS
