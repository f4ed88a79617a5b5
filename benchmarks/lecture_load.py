"""Load each chapter's lecture N times in a row, as a lecturer's browser does, and say how long each load took.

    python benchmarks/lecture_load.py [CHAPTER ...] [--loads 10] [--stall-s 90] [--chromium /usr/bin/chromium]

For each chapter: start ``./lab lecture CHAPTER``'s server (``python -m uprobe_lab.lecture``, the same process
and arguments), then load its page N times in headless Chromium (Playwright, as tests/browser does), one after
the other, each in a fresh browser context. A load ends when Voila has rendered every cell (its "Executing i of n"
spinner is gone) and every widget the kernel sent is drawn; a load that has not ended after ``--stall-s`` seconds
is a stall (the spinner's text then is printed). Each page is closed as a lecturer's tab would be, so Voila
shuts its kernel down before the next load.

Prints, per chapter: loads, stalls, min / median / max seconds, and the machine's load (``/proc/loadavg``)
before and after: the machine is shared, so say under what load the figures were taken. Figures, not
assertions (tests/browser/test_lecture_loading.py checks the stall error).

With ``--cells``, where a load's time goes instead: the lecture copy run headless as Voila runs it (nbclient,
``./lab lecture``'s environment), the kernel's start and each chapter's slowest cells.
"""
from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from uprobe_lab import presenter  # noqa: E402
from uprobe_lab.lecture import chapters, read_notebook  # noqa: E402

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]
# every cell rendered (Voila removes its spinner), and a view drawn for every widget the kernel sent
LOADED_JS = """() => {
  if (document.getElementById('loading') || !document.getElementById('rendered_cells')) return false;
  const sent = Array.from(document.querySelectorAll('script[type="application/vnd.voila.cell-output+json"]'))
    .filter(s => s.textContent.includes('application/vnd.jupyter.widget-view+json')).length;
  return document.querySelectorAll('#rendered_cells .jp-OutputArea-output > .jupyter-widgets').length >= sent;
}"""


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_lecture(chapter: str, port: int, log) -> subprocess.Popen:
    """``./lab lecture CHAPTER`` on ``port``, without opening a browser; returns once it answers."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.Popen([sys.executable, "-m", "uprobe_lab.lecture", chapter, f"--port={port}",
                             "--Voila.port_retries=0", "--no-browser"],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"./lab lecture {chapter} exited ({proc.returncode}); see {log.name}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status", timeout=2):
                return proc
        except OSError as err:
            if getattr(err, "code", None):  # an HTTP answer: the server is up
                return proc
            if time.monotonic() > deadline:
                raise SystemExit(f"./lab lecture {chapter} did not answer in 60 s; see {log.name}") from None
            time.sleep(0.2)


def stop_lecture(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)  # as Ctrl-C or a closed terminal: the lecture removes its copy
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def load_once(browser, url: str, stall_s: float) -> tuple[float | None, str]:
    """Seconds until the page is loaded, or None and the spinner's text after ``stall_s``."""
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    page = context.new_page()
    try:
        t0 = time.monotonic()
        page.goto(url, wait_until="commit", timeout=stall_s * 1000)
        try:
            page.wait_for_function(LOADED_JS, timeout=max(stall_s - (time.monotonic() - t0), 1) * 1000, polling=100)
        except Exception:  # Playwright's TimeoutError: a stall
            spinner = page.evaluate("() => (document.getElementById('loading_text') || {}).textContent || ''")
            return None, re.sub(r"\s+", " ", spinner).strip()
        return time.monotonic() - t0, ""
    finally:
        page.close(run_before_unload=True)  # Voila's page asks its server to shut the kernel down on unload
        context.close()


def bench_chapter(browser, chapter: str, loads: int, stall_s: float, logdir: Path) -> dict:
    port = free_port()
    with open(logdir / f"lecture_{chapter}.log", "wb") as log:
        proc = start_lecture(chapter, port, log)
        times, stalls = [], []
        try:
            for i in range(loads):
                seconds, spinner = load_once(browser, f"http://127.0.0.1:{port}/", stall_s)
                if seconds is None:
                    stalls.append(spinner)
                    print(f"  {chapter} load {i + 1}: STALL after {stall_s:g} s at '{spinner}'", flush=True)
                else:
                    times.append(seconds)
                    print(f"  {chapter} load {i + 1}: {seconds:.1f} s (load average {loadavg()})", flush=True)
        finally:
            stop_lecture(proc)
    return {"chapter": chapter, "loads": loads, "stalls": len(stalls), "times": times}


def cell_times(chapter: str, path: Path, shown: int = 5) -> None:
    """Run the chapter's lecture copy as Voila does and print the kernel's start and its slowest cells."""
    from nbclient import NotebookClient

    nb = presenter.lecture_notebook(read_notebook(path))
    os.environ[presenter.ENV] = "1"
    client = NotebookClient(nb, kernel_name="python3", record_timing=True,
                            resources={"metadata": {"path": str(path.parent)}})
    t0 = time.monotonic()
    with client.setup_kernel():
        started = time.monotonic() - t0
        cells = []
        for i, cell in enumerate(nb.cells):
            t = time.monotonic()
            client.execute_cell(cell, i)
            if cell.cell_type == "code":
                cells.append((time.monotonic() - t, i, cell.source.splitlines()[0][:70]))
    total = time.monotonic() - t0
    print(f"{chapter}: {total:.1f} s: kernel start {started:.1f} s, {len(cells)} code cells "
          f"{sum(c[0] for c in cells):.1f} s (load average {loadavg()})")
    for seconds, i, first in sorted(cells, reverse=True)[:shown]:
        print(f"  {seconds:5.1f} s  cell {i:2d}  {first}")


def main(argv: list[str] | None = None) -> int:
    known = chapters()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("chapters", nargs="*", default=list(known),
                    help=f"chapters to load (default: all of {', '.join(known)})")
    ap.add_argument("--loads", type=int, default=10, help="loads per chapter, one after the other (default 10)")
    ap.add_argument("--stall-s", type=float, default=90.0,
                    help="a load not done after this many seconds is a stall (default 90)")
    ap.add_argument("--chromium", default=os.environ.get("UPROBE_LAB_CHROMIUM", "/usr/bin/chromium"))
    ap.add_argument("--cells", action="store_true", help="no browser: where each chapter's time goes, cell by cell")
    args = ap.parse_args(argv)
    unknown = [c for c in args.chapters if c not in known]
    if unknown:
        ap.error(f"no chapter {', '.join(unknown)}; known: {', '.join(known)}")
    if args.cells:
        for chapter in args.chapters:
            cell_times(chapter, known[chapter])
        return 0
    from playwright.sync_api import sync_playwright

    print(f"{os.cpu_count()} CPUs; load average before: {loadavg()}", flush=True)
    results = []
    with tempfile.TemporaryDirectory(prefix="lecture_load_") as tmp, sync_playwright() as p:
        os.environ["JUPYTER_RUNTIME_DIR"] = str(Path(tmp) / "runtime")  # the servers' connection files go with tmp
        browser = p.chromium.launch(executable_path=args.chromium, headless=True, args=CHROMIUM_ARGS)
        try:
            for chapter in args.chapters:
                results.append(bench_chapter(browser, chapter, args.loads, args.stall_s, Path(tmp)))
        finally:
            browser.close()
    print(f"\nload average after: {loadavg()}")
    print(f"{'chapter':8} {'loads':>5} {'stalls':>6} {'min s':>6} {'median s':>8} {'max s':>6}")
    for r in results:
        t = r["times"]
        figures = (f"{min(t):6.1f} {statistics.median(t):8.1f} {max(t):6.1f}" if t else f"{'-':>6} {'-':>8} {'-':>6}")
        print(f"{r['chapter']:8} {r['loads']:5d} {r['stalls']:6d} {figures}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
