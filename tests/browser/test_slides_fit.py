"""Every chapter's lecture slides fit a projector: ``./lab lecture``'s lecture copies served by Voila with the
"paged" template, paged through in Chromium with the template's own keys at 1280x720 (a common projector) and
1920x1080, and measured on screen:

* a slide is at most 1.5 screens tall (a stepper's slide after "Run to end" too: the lecturer presses it);
* nothing scrolls sideways, is cut off at its right edge or runs past the screen's;
* text is at least the minimum of its kind at 1280x720, and grows with the screen (the minimum times
  min(width / 1280, height / 720) at any other size): body text 22 px, tables and outputs 18 px, step logs 16 px,
  a chart's and a diagram's text 16 px as drawn (its font size times the factor its SVG is scaled by);
* listings (pre, code, step logs) are in a monospace font;
* a diagram's drawing ends on the screen and clear of the page bar, under its slide's heading and text.
* the page bar (the count and its buttons) is opaque: a slide scrolled under it does not show through.

One Voila server for all chapters; one chapter's page at a time (each starts a kernel). A failure names the
chapter, the slide, the screen size and the offending element. ``-s`` prints each chapter's figures.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from uprobe_lab import lecture, presenter
from uprobe_lab.views import diagrams

from browser_support import free_port, stop_server

pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("browser")]

REPO = Path(__file__).resolve().parents[2]
CHAPTERS = lecture.chapters()
DESIGN = (1280, 720)  # the minimums are set for this screen; any other grows them by its scale
SCREENS = [(1280, 720), (1920, 1080)]
MAX_SCREENS = 1.5
MINIMUM_PX = {"body text": 22, "table or output": 18, "step log": 16, "chart text": 16, "diagram text": 16}
DIAGRAM_NAMES = {alt: name for name, alt in diagrams.ALT.items()}  # a lecture inlines each, so its alt names it
LOAD_TIMEOUT_S = 300

# What one slide shows, measured: how tall it is (in screens), the smallest text of each kind on it, and what is
# wrong. Runs in the page; ``scale`` is the screen's size against DESIGN, ``minimum`` MINIMUM_PX.
MEASURE_JS = r"""async ([scale, minimum]) => {
  const box = document.getElementById('rendered_cells');
  const cells = Array.from(box.querySelectorAll('[cell-index]:not(.paged-off):not(.paged-skip)'));
  const problems = [], smallest = {};
  const seen = el => el.checkVisibility({checkVisibilityCSS: true}) && el.getClientRects().length > 0;
  const name = el => {
    const words = (el.textContent || el.getAttribute('alt') || '').trim().replace(/\s+/g, ' ').slice(0, 50);
    const cls = typeof el.className === 'string' && el.className ? '.' + el.className.trim().split(/\s+/).slice(0, 2).join('.') : '';
    return `<${el.tagName.toLowerCase()}${cls}> "${words}"`;
  };
  const small = {};  // kind: [how many are too small, the smallest of them]
  const diagrams = [];  // [alt text, where its drawing runs past the screen or under the page bar, or '']
  const bar = document.getElementById('paged-bar'), barBox = bar && bar.getBoundingClientRect();
  const note = (kind, px, el) => {
    px = Math.round(px * 10) / 10;
    if (!(kind in smallest) || px < smallest[kind]) smallest[kind] = px;
    if (px >= minimum[kind] * scale - 0.25) return;
    const [n, worst] = small[kind] || [0, null];
    small[kind] = [n + 1, worst && worst[0] <= px ? worst : [px, name(el)]];
  };
  // an SVG's text as drawn: its font size times how much the SVG (and the text's own transform) scales it
  const svgText = (svg, kind) => {
    for (const t of svg.querySelectorAll('text')) {
      if (!t.textContent.trim()) continue;
      const m = t.getScreenCTM();
      if (!m) continue;
      note(kind, parseFloat(getComputedStyle(t).fontSize) * Math.sqrt(Math.abs(m.a * m.d - m.b * m.c)), t);
    }
  };
  const shown = [];
  for (const cell of cells) for (const el of cell.querySelectorAll('*')) if (seen(el)) shown.push(el);
  for (const el of shown) {
    const inOutput = !!el.closest('.jp-OutputArea-output, .jupyter-widgets');
    if (el instanceof SVGElement) {
      if (el.tagName === 'svg' && !el.parentElement.closest('svg')) svgText(el, inOutput ? 'chart text' : 'diagram text');
      continue;
    }
    // the text an element holds itself (not its children's)
    const own = Array.from(el.childNodes).some(n => n.nodeType === 3 && n.textContent.trim());
    const cs = getComputedStyle(el);
    if (own && !['SCRIPT', 'STYLE'].includes(el.tagName)) {
      const px = parseFloat(cs.fontSize);
      if (el.closest('.uprobe-lab-steplog')) note('step log', px, el);
      else if (inOutput || el.closest('table, pre')) note('table or output', px, el);  // a listing too
      else note('body text', px, el);
    }
    if (el.matches('pre, code, kbd, samp, .uprobe-lab-steplog') && !/mono|courier|menlo|consolas/i.test(cs.fontFamily))
      problems.push(`listing in a proportional font (${cs.fontFamily}): ${name(el)}`);
    if (el.scrollWidth > el.clientWidth + 1 && el.clientWidth > 0) {
      if (['auto', 'scroll'].includes(cs.overflowX)) problems.push(`scrolls sideways (${el.scrollWidth} px in ${el.clientWidth}): ${name(el)}`);
      else if (['hidden', 'clip'].includes(cs.overflowX)) problems.push(`cut off at its right edge (${el.scrollWidth} px in ${el.clientWidth}): ${name(el)}`);
    }
    const r = el.getBoundingClientRect();
    const past = e => e && e.getBoundingClientRect().right > innerWidth + 1;
    if (r.width > 0 && past(el) && !past(el.parentElement)) problems.push(`runs past the screen's right edge (to ${Math.round(r.right)} px): ${name(el)}`);
    if (el.tagName === 'IMG') {
      const src = el.currentSrc || el.src;
      if (/^data:image\/svg|\.svg(\?|$)/.test(src)) {
        // draw the picture's SVG at the size the image has on screen, off screen, and read its text there
        const holder = document.createElement('div');
        holder.style.cssText = 'position:absolute;left:-20000px;top:0;';
        holder.innerHTML = await (await fetch(src)).text();
        const svg = holder.querySelector('svg');
        if (svg) {
          svg.setAttribute('width', el.clientWidth);
          svg.setAttribute('height', el.clientHeight);
          document.body.appendChild(holder);
          svgText(svg, inOutput ? 'chart text' : 'diagram text');
          holder.remove();
        }
      } else {
        problems.push(`a raster image, whose text cannot be measured (the lecture draws charts as SVG): ${name(el)}`);
      }
      if (!inOutput) {  // a diagram: its drawing is its box shrunk to the picture's shape (object-fit: contain)
        const s = Math.min(r.width / el.naturalWidth, r.height / el.naturalHeight);
        const bottom = r.top + (r.height + s * el.naturalHeight) / 2;
        const right = r.left + (r.width + s * el.naturalWidth) / 2;
        const to = `to ${Math.round(bottom)} px`;
        const where = bottom > innerHeight + 1 ? `runs past the screen's bottom (${to})`
          : barBox && bottom > barBox.top + 1 && right > barBox.left
            ? `runs under the page bar (${to}, the bar from ${Math.round(barBox.top)} px)` : '';
        diagrams.push([el.getAttribute('alt'), where]);
      }
    }
  }
  for (const [kind, [n, [px, what]]] of Object.entries(small))
    problems.push(`${kind} below ${Math.round(minimum[kind] * scale * 10) / 10} px: ${n} element(s), the smallest ` +
                  `${px} px: ${what}`);
  if (document.scrollingElement.scrollWidth > innerWidth + 1) problems.push('the page scrolls sideways');
  // a slide scrolled part way runs under the page bar: the bar must hide what is under it, not print over it
  const barStyle = bar && getComputedStyle(bar);
  if (bar && (barStyle.opacity !== '1' || !/^rgb\(/.test(barStyle.backgroundColor)))
    problems.push(`the page bar is see-through (opacity ${barStyle.opacity}, background ${barStyle.backgroundColor}): ` +
                  'the slide text under it shows through the page count');
  const top = box.getBoundingClientRect().top - box.scrollTop;
  const bottom = Math.max(0, ...cells.map(c => c.getBoundingClientRect().bottom - top));
  return {screens: Math.round(100 * bottom / innerHeight) / 100, smallest, problems, diagrams};
}"""

SLIDE_COUNT_JS = "() => document.getElementById('paged-count').textContent.split(' / ').map(Number)"


@pytest.fixture(scope="module")
def lectures(tmp_path_factory):
    """Voila serving notebooks/ with a lecture copy of every chapter in it, written as ./lab lecture writes one
    (named after this process: a crashed run's copies are removed by the next lecture); stopped, and the copies
    removed, at the end."""
    pytest.importorskip("voila", reason="voila is not installed (pip install -e '.[test]')")
    tmp = tmp_path_factory.mktemp("voila")
    copies = {}
    try:
        for chapter, path in CHAPTERS.items():
            copies[chapter] = lecture.write_copy(path, os.getpid())
        port = free_port()
        env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(tmp / "runtime"), JUPYTER_CONFIG_DIR=str(tmp / "config"),
                   PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
                   JUPYTER_PATH=str(presenter.SLIDES_PATH), **{presenter.ENV: "1"})
        log = open(tmp / "voila.log", "wb")
        proc = subprocess.Popen([sys.executable, "-m", "voila", "notebooks", "--template=paged",
                                 "--strip_sources=True", "--ContentsManager.allow_hidden=True", "--Voila.ip=127.0.0.1",
                                 f"--port={port}", "--Voila.port_retries=0", "--no-browser"],
                                cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 120
            while True:
                assert proc.poll() is None, (tmp / "voila.log").read_text()[-3000:]
                try:
                    with urllib.request.urlopen(base, timeout=2):
                        break
                except OSError:
                    assert time.monotonic() < deadline, (tmp / "voila.log").read_text()[-3000:]
                    time.sleep(0.3)
            yield {chapter: f"{base}/voila/render/{copy.name}" for chapter, copy in copies.items()}
        finally:
            stop_server(proc, log)
    finally:
        for copy in copies.values():
            copy.unlink(missing_ok=True)


def open_lecture(page, url):
    """Load a chapter's slides and wait until its widgets are drawn."""
    page.goto(url, timeout=LOAD_TIMEOUT_S * 1000)  # Voila sends the page as its cells run: loaded = all ran
    page.wait_for_function("() => (document.getElementById('paged-count') || {}).textContent", timeout=60_000)
    # widget views render after the page: wait until their number stops growing
    count, stable_since = -1, time.monotonic()
    while time.monotonic() - stable_since < 2:
        now = page.locator(".jupyter-widgets").count()
        if now != count:
            count, stable_since = now, time.monotonic()
        page.wait_for_timeout(250)


def go_to(page, n):
    """Slide n (1-based), by the template's keys: Home, then Right."""
    page.keyboard.press("Home")
    for _ in range(n - 1):
        page.keyboard.press("ArrowRight")
    page.wait_for_function("n => document.getElementById('paged-count').textContent.startsWith(n + ' /')", arg=n)
    page.wait_for_timeout(300)  # charts and widgets measure themselves after the resize event the turn sends


def measure_slide(page, scale):
    return page.evaluate(MEASURE_JS, [scale, MINIMUM_PX])


def run_steppers_to_end(page):
    """Press every "Run to end" on the slide and wait for each walk to end; returns how many were pressed."""
    buttons = page.locator("#rendered_cells [cell-index]:not(.paged-off) button.widget-button:not([disabled])",
                           has_text="Run to end")
    pressed = 0
    for i in range(buttons.count()):
        button = buttons.nth(i)
        if not button.is_visible():
            continue
        area = button.evaluate_handle("el => el.closest('.widget-vbox') || el.parentElement")
        before = area.evaluate("el => el.innerText")
        button.click()
        page.wait_for_function("([el, before]) => el.innerText !== before", arg=[area, before], timeout=30_000)
        pressed += 1
    if pressed:
        page.wait_for_timeout(300)
    return pressed


def measure_chapter(page, url, screens=SCREENS, shots=None):
    """Every slide of a chapter at each screen size: {screen: [(slide, what, figures)]} and the problems found.
    With ``shots`` (a path prefix), a screenshot of each slide at 1280x720 as a projector shows it, and after Run
    to end where a stepper is pressed."""
    open_lecture(page, url)
    figures, problems = {}, []
    for width, height in screens:
        page.set_viewport_size({"width": width, "height": height})
        scale = min(width / DESIGN[0], height / DESIGN[1])
        _, slides = page.evaluate(SLIDE_COUNT_JS)
        rows = figures[f"{width}x{height}"] = []
        for n in range(1, slides + 1):
            go_to(page, n)
            found = measure_slide(page, scale)
            rows.append((n, "", found))
            shoot = shots is not None and (width, height) == DESIGN
            if shoot:
                page.screenshot(path=f"{shots}-{n:02d}.png")
            if run_steppers_to_end(page):
                rows.append((n, " after Run to end", measure_slide(page, scale)))
                if shoot:
                    page.screenshot(path=f"{shots}-{n:02d}-run-to-end.png")
        for n, when, found in rows:
            where = f"slide {n}/{slides}{when} at {width}x{height}"
            if not found["smallest"]:
                problems.append(f"{where}: no text measured on it (an empty slide, or the page is not as this test "
                                "knows it)")
            if found["screens"] > MAX_SCREENS:
                problems.append(f"{where}: {found['screens']} screens tall (at most {MAX_SCREENS})")
            problems.extend(f"{where}: {p}" for p in found["problems"])
            problems.extend(f"{where}: diagram {DIAGRAM_NAMES.get(alt, alt)} {past}"
                            for alt, past in found["diagrams"] if past)
    return figures, problems


def summary(chapter, figures) -> str:
    """One line per screen size: the tallest slide and the smallest text of each kind."""
    lines = []
    for screen, rows in figures.items():
        tallest = max(rows, key=lambda row: row[2]["screens"])
        kinds = {}
        for _, _, found in rows:
            for kind, px in found["smallest"].items():
                kinds[kind] = min(px, kinds.get(kind, px))
        sizes = ", ".join(f"{kind} {kinds[kind]}" for kind in MINIMUM_PX if kind in kinds)
        lines.append(f"{chapter} {screen}: tallest slide {tallest[2]['screens']} screens (slide {tallest[0]}"
                     f"{tallest[1]}); smallest px: {sizes}")
    return "\n".join(lines)


@pytest.mark.parametrize("chapter", list(CHAPTERS))
def test_slides_fit_the_screen(chapter, lectures, browser, screenshot_dir):
    """Each slide of the chapter at 1280x720 and at 1920x1080: tall, wide and big enough (the module says how).
    Each slide's screenshot at 1280x720 goes to the screenshot directory (slides-CHAPTER-NN.png)."""
    context = browser.new_context(viewport={"width": DESIGN[0], "height": DESIGN[1]})
    page = context.new_page()
    try:
        figures, problems = measure_chapter(page, lectures[chapter], shots=screenshot_dir / f"slides-{chapter}")
        print("\n" + summary(chapter, figures))
        if presenter.DIAGRAM.search(CHAPTERS[chapter].read_text()):  # the pictures' text was found and measured
            assert all(any("diagram text" in found["smallest"] for _, _, found in rows) for rows in figures.values())
        assert not problems, f"chapter {chapter}'s slides:\n" + "\n".join(problems[:60]) + (
            f"\n... and {len(problems) - 60} more" if len(problems) > 60 else "")
    finally:
        context.close()
