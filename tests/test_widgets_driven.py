"""Every widget of every chapter, driven as a person drives it, headless (ipywidgets without a front end).

A chapter's code cells run in this process top to bottom, as Run All runs them (a cell's last expression is shown,
as Jupyter shows it; ``display`` collects what it is given). Then each widget the chapter showed is used: a stepper is
stepped to its end, Back, Reset, run to its end again, Reset, and the same for each kernel of its selector; a
slider over a walk or stages is moved to its end, back one, to its start and to its end again; every other selector,
slider, toggle and text box is set to each of its values. Each end state must be what the chapter says (finished,
with the events the chapter's text names), after each Reset Step must be enabled, and a second walk must be the same
as the first (a widget owns its process: nothing the later cells ran can change it).

What a widget redraws is read where it goes: an HTML widget's value, or the figure an Image widget shows (no widget
draws into an Output widget: uprobe_lab/views/redraw.py says why, and every chapter's widgets are checked for one).
"""
from __future__ import annotations

import ast
import contextlib
import html
import io
from pathlib import Path

import pytest

from uprobe_lab.native import example

ipywidgets = pytest.importorskip("ipywidgets")

pytestmark = pytest.mark.notebooks  # runs whole chapters: about a minute for all of them on this machine

NOTEBOOK_DIR = Path(__file__).resolve().parents[1] / "notebooks"
MAX_STEPS = 500  # no chapter's walk is longer than a few dozen steps; a walk that never ends fails here
PRESSES: dict[str, int] = {}  # chapter -> buttons pressed and values set


@pytest.fixture(scope="module", autouse=True)
def count_presses():
    """How many presses the tests made (shown with -s)."""
    yield
    print(f"\nwidget presses per chapter: {PRESSES}, {sum(PRESSES.values())} in all")


class Screen:
    """What ``display`` was given and what was printed, in order: a notebook's output area, without a front end."""

    def __init__(self):
        self.shown: list = []
        self.printed = io.StringIO()

    def display(self, *objs, **_):
        self.shown.extend(objs)

    @contextlib.contextmanager
    def watch(self):
        """What one press redraws: [displayed objects], printed text."""
        start, printed = len(self.shown), io.StringIO()
        seen = {"shown": [], "printed": ""}
        with contextlib.redirect_stdout(printed):
            yield seen
        seen["shown"], seen["printed"] = self.shown[start:], printed.getvalue()


def run_chapter(stem: str, monkeypatch) -> tuple[list, Screen]:
    """The chapter's code cells, run top to bottom; returns the widgets it showed, in order, and the screen."""
    import nbformat
    import IPython.display

    screen = Screen()
    monkeypatch.setattr(IPython.display, "display", screen.display)
    monkeypatch.setenv(example.ENV, "recorded")  # chapter 06 and 07 show their recordings: no native runs here
    monkeypatch.chdir(NOTEBOOK_DIR)  # where Jupyter runs a notebook
    path = next(NOTEBOOK_DIR.glob(f"{stem}_*.ipynb"))
    namespace = {"__name__": "__main__", "display": screen.display}
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type != "code":
            continue
        tree = ast.parse(cell.source)
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        with contextlib.redirect_stdout(screen.printed):
            exec(compile(tree, f"{path.name} cell {cell.get('id')}", "exec"), namespace)
            if last is not None:
                value = eval(compile(ast.Expression(last.value), path.name, "eval"), namespace)
                if value is not None:
                    screen.display(value)
    widgets = []
    for obj in screen.shown:
        if isinstance(obj, ipywidgets.Widget) and isinstance(obj, ipywidgets.Box):
            widgets.append(obj)
        elif callable(getattr(obj, "widget", None)) and hasattr(obj, "_repr_mimebundle_"):
            widgets.append(obj.widget())  # what Jupyter's display draws for it (uretprobe.ReturnStepper)
    for box in widgets:  # an Output widget can stall the lecture's loading (uprobe_lab/views/redraw.py)
        assert not controls(box, ipywidgets.Output), f"{stem}: a widget draws into an ipywidgets.Output"
        unguarded = [c.__qualname__ for c in lab_callbacks(box) if not getattr(c, "shows_lab_errors", False)]
        assert not unguarded, f"{stem}: callbacks that would show a LabError's traceback: {unguarded}"
    return widgets, screen


def controls(box, kind) -> list:
    """The widgets of ``kind`` inside ``box``, in the order they are drawn."""
    found = []
    for child in getattr(box, "children", ()):
        if isinstance(child, kind):
            found.append(child)
        found += controls(child, kind)
    return found


def lab_callbacks(box) -> list:
    """The lab's own callbacks on ``box`` and the widgets in it: buttons' clicks and observers (not ipywidgets' and
    traitlets' own, e.g. a Play's link to its slider)."""
    found = []
    for widget in [box, *controls(box, ipywidgets.Widget)]:
        handlers = [h for kinds in widget._trait_notifiers.values() for h in kinds.get("change", [])]
        if isinstance(widget, ipywidgets.Button):
            handlers += widget._click_handlers.callbacks
        found += [h for h in handlers if getattr(h, "__module__", "").startswith("uprobe_lab")]
    return found


def press(chapter: str, action) -> None:
    PRESSES[chapter] = PRESSES.get(chapter, 0) + 1
    action()


def set_value(chapter: str, control, value) -> None:
    press(chapter, lambda: setattr(control, "value", value))


# --- steppers (uprobe_lab.views.stepper.stepper_widget) --------------------------------------------------------

def drive_stepper(chapter, box, expect) -> int:
    """Step to the end, Back, Reset, Run to end, Reset; for each kernel of the selector. Returns the kernels."""
    buttons = {b.description: b for b in controls(box, ipywidgets.Button)}
    kernels = [box.picker.value] + [k for k in box.picker.options if k != box.picker.value] if box.picker else [None]
    for kernel in kernels:
        if kernel is not None and box.picker.value != kernel:
            set_value(chapter, box.picker, kernel)
        assert box.stepper() is not None, f"{chapter} {kernel}: {box.output.value}"
        first = step_to_end(chapter, box, buttons)
        assert "finished" in box.output.value and buttons["Step"].disabled and buttons["Run to end"].disabled
        expect(kernel, box.stepper())
        press(chapter, buttons["Back"].click)
        assert len(box.stepper().steps) == len(first) - 1 and not box.stepper().done
        assert not buttons["Step"].disabled and "finished" not in box.output.value
        press(chapter, buttons["Reset"].click)
        assert box.stepper().steps == [] and "(not started)" in box.output.value
        assert not buttons["Step"].disabled and not buttons["Run to end"].disabled and buttons["Back"].disabled
        press(chapter, buttons["Run to end"].click)
        assert [s.describe() for s in box.stepper().steps] == first, f"{chapter} {kernel}: the second walk differs"
        press(chapter, buttons["Reset"].click)
        assert not buttons["Step"].disabled and box.stepper().steps == []
    return len(kernels)


def step_to_end(chapter, box, buttons) -> list[str]:
    while not buttons["Step"].disabled:
        assert len(box.stepper().steps) < MAX_STEPS, f"{chapter}: no end after {MAX_STEPS} steps"
        press(chapter, buttons["Step"].click)
    return [s.describe() for s in box.stepper().steps]


def kinds(stepper) -> set[str]:
    return {e.kind for s in stepper.steps for e in s.events}


def finished(stepper) -> None:
    assert stepper.done and stepper.steps[-1].signal is None and stepper.proc.signal is None, stepper.steps[-1]


def push_emulated(kernel, stepper):  # section 2: the int3 traps, push %rbp is emulated in the kernel, no #DB
    finished(stepper)
    assert {"exc_bp", "emulated"} <= kinds(stepper) and "exc_db" not in kinds(stepper)


def ret_stepped(kernel, stepper):  # section 3: ret is single-stepped out of line: int3, then #DB
    finished(stepper)
    assert {"exc_bp", "exc_db", "xol_steps"} <= kinds(stepper)


def nop5_by_kernel(kernel, stepper):
    """Section 5's text, kernel by kernel: 6.10 and 6.11 step the nop out of line, 6.16 and 7.3 emulate it in the
    int3 trap, 6.18 has made the site a call into [uprobes-trampoline] that enters the
    kernel by syscall."""
    finished(stepper)
    first, seen = stepper.steps[0], kinds(stepper)
    if kernel in ("6.10", "6.11"):
        assert first.text == "int3" and {"exc_bp", "exc_db", "xol_steps"} <= seen
    elif kernel in ("6.16", "7.3"):
        assert first.text == "int3" and "emulated" in seen and "exc_db" not in seen
    else:
        assert kernel == "6.18" and first.text.startswith("call") and not {"exc_bp", "exc_db"} & seen
        assert any(s.text == "syscall" and s.where.startswith("[uprobes-trampoline]") for s in stepper.steps)


# --- sliders over a recorded walk or a list of stages -------------------------------------------------------------

def drive_slider(chapter, slider, shown, expect_end, picker=None) -> int:
    """To the end one value at a time, Back one, to the start, to the end again; for each value of ``picker``."""
    for kernel in [picker.value] + [k for k in picker.options if k != picker.value] if picker else [None]:
        if kernel is not None and picker.value != kernel:
            set_value(chapter, picker, kernel)
        start = slider.value
        walk = slide(chapter, slider, shown)
        expect_end(kernel, shown())
        set_value(chapter, slider, slider.max - 1)  # Back
        assert shown() == walk[-2] != walk[-1]
        set_value(chapter, slider, slider.min)  # Reset
        assert not slider.disabled and slider.value == slider.min and shown() != walk[-1]
        assert slide(chapter, slider, shown)[-len(walk):] == walk, f"{chapter} {kernel}: the second walk differs"
        set_value(chapter, slider, start)
    return len(picker.options) if picker else 1


def slide(chapter, slider, shown) -> list[str]:
    texts = [shown()]
    while slider.value < slider.max:
        set_value(chapter, slider, slider.value + 1)
        texts.append(shown())
    return texts


# --- selectors, sliders and text boxes that redraw a figure or a table --------------------------------------------

def drive_selectors(chapter, box, screen, expect, texts=()) -> int:
    """Each control through each of its values (a float slider: its minimum and maximum; a text box: ``texts``) and
    back to where it was, the others left as they are; ``expect(control, value)`` checks each redraw, which goes
    into the widget's own values: nothing is displayed or printed into the cell's output."""
    selectors = (ipywidgets.ToggleButtons, ipywidgets.Dropdown, ipywidgets.SelectionSlider, ipywidgets.FloatSlider,
              ipywidgets.Text)
    found = controls(box, selectors)
    for control in found:
        start = control.value
        if isinstance(control, ipywidgets.FloatSlider):
            choices = [control.min, control.max]
        elif isinstance(control, ipywidgets.Text):
            choices = [t for t in texts if t != start]
        else:
            choices = [v for v in control.options if v != start]
        for value in choices + [start]:
            with screen.watch() as redrawn:
                set_value(chapter, control, value)
            assert redrawn == {"shown": [], "printed": ""}, f"{chapter}: {control.description}={value!r}: {redrawn}"
            expect(control, value)
    return len(found)


def figure_shown(box):
    """The figure the widget's chart shows (an HTML widget whose value is the figure drawn as an SVG image)."""
    (chart,) = [c for c in controls(box, ipywidgets.HTML) if getattr(c, "figure", None) is not None]
    assert "data:image/svg+xml;base64," in chart.value
    return chart.figure


# --- the chapters -------------------------------------------------------------------------------------------------

def test_chapter_01_steppers_after_the_chapter_ran(monkeypatch):
    """The push and ret steppers after cells 7 and 9 ran their printed walks (the issue: SIGSEGV at pc=0, then a
    dead Reset), and the nop5 stepper on every kernel of its selector."""
    widgets, _ = run_chapter("01", monkeypatch)
    assert len(widgets) == 3
    push, ret, nop5 = widgets
    assert drive_stepper("01", push, push_emulated) == drive_stepper("01", ret, ret_stepped) == 1
    assert drive_stepper("01", nop5, nop5_by_kernel) == 5 and set(nop5.picker.options) == {
        "6.10", "6.11", "6.16", "6.18", "7.3"}


def test_chapter_02_return_stepper_on_every_kernel(monkeypatch):
    """The probed return, stepped on each kernel: 6.10's int3 trampoline, the syscall trampoline from 6.11; the
    walk ends back in the caller with no signal."""
    widgets, _ = run_chapter("02", monkeypatch)
    (box,) = widgets
    title, picker, slider, out = box.children

    def ends(kernel, text):
        own = box.stepper()
        assert own.kernel == kernel and "(finished)" in text and own.steps[-1].signal is None
        tramp = [s.text for s in own.steps if s.where.startswith("[uprobes]")]
        assert ("int3" in tramp) == (kernel == "6.10") and ("syscall" in tramp) == (kernel != "6.10"), tramp
        assert kernel in title.value

    assert drive_slider("02", slider, lambda: out.value, ends, picker) == 5  # 6.10, 6.11, 6.16, 6.18, 7.3


@pytest.mark.parametrize("chapter, restored", [
    ("03", "0f 1f 44 00 00"),  # section 2: the unregister puts the nop5 back
    ("03b", "66 2e 0f 1f 84 e8"),  # 7.3's unoptimise restores bytes 0..4 only: the call's e8 stays at byte 5
])
def test_chapter_03_patch_stages_to_the_last(monkeypatch, chapter, restored):
    widgets, _ = run_chapter(chapter, monkeypatch)
    (box,) = widgets
    (slider,) = controls(box, ipywidgets.IntSlider)
    (play,) = controls(box, ipywidgets.Play)
    out = controls(box, ipywidgets.HTML)[-1]

    def ends(_, text):
        assert f"stage {slider.max}/{slider.max}" in text and f"every CPU (smp_text_poke_sync_each_cpu): {restored}" \
            in text, text

    drive_slider(chapter, slider, lambda: out.value, ends)
    set_value(chapter, play, 1)  # Play drives the slider
    assert slider.value == 1 and "stage 1/" in out.value


def test_chapter_04_decode_widget_every_word_both_modes(monkeypatch):
    """Only the exact 'stp x29, x30, [sp, #-16]!' is simulated with --stp simulate (the seed's patch), a nop is
    simulated either way, the brk is refused, the other stp forms are stepped out of line; a typo is shown."""
    widgets, screen = run_chapter("04", monkeypatch)
    (box,) = widgets
    (mode,) = controls(box, ipywidgets.ToggleButtons)
    # From the kernel's arch/arm64/kernel/probes/decode-insn.c (a nop is simulated, a brk rejected) and the seed's
    # patch (only the exact pre-index stp of x29, x30 on sp is simulated): every other word is stepped out of line.
    verdicts = {"a9bf7bfd": {"xol": "xol", "simulate": "simulate"},
                "d503201f": {"xol": "simulate", "simulate": "simulate"},
                "d42000a0": {"xol": "reject", "simulate": "reject"}}

    report = controls(box, ipywidgets.HTML)[-1]

    def check(control, value):
        word = value if isinstance(control, ipywidgets.Text) else controls(box, ipywidgets.Text)[0].value
        printed = html.unescape(report.value)
        if word == "not-a-word":
            assert "error: 'not-a-word' is not an arm64 instruction word" in printed, printed
        else:
            action = verdicts.get(word, {"xol": "xol", "simulate": "xol"})[mode.value]
            assert f"with --stp {mode.value}: {action} " in printed, printed

    from uprobe_lab.views.arm64 import EXAMPLE_WORDS
    words = [*EXAMPLE_WORDS, "not-a-word"]
    for value in ("simulate", "xol"):
        with screen.watch():
            set_value("04", mode, value)
        assert drive_selectors("04", box, screen, check, words) == 2


def test_chapter_05_breakdown_and_price_sliders(monkeypatch):
    widgets, screen = run_chapter("05", monkeypatch)
    breakdown, sliders = widgets
    (cpu,) = controls(breakdown, ipywidgets.Dropdown)

    def profile_shown(control, value):
        from uprobe_lab.views.model import breakdown_for
        bars = [p.get_height() for p in figure_shown(breakdown).axes[0].patches]
        assert bars == [p.get_height() for p in breakdown_for(value).axes[0].patches], value
        assert f"CPU profile {value}" in breakdown._repr_mimebundle_()["text/plain"]

    assert drive_selectors("05", breakdown, screen, profile_shown) == 1 and len(cpu.options) >= 2
    totals = {}

    def bars(control, value):  # a dearer event can only lower the model's M/s
        fig = figure_shown(sliders)
        totals[control.description, value] = sum(p.get_height() for p in fig.axes[0].patches)

    assert drive_selectors("05", sliders, screen, bars) == 5
    for price in ("exception", "syscall", "handler", "xol_step", "return_instance"):
        slider = next(s for s in controls(sliders, ipywidgets.FloatSlider) if s.description == price)
        assert totals[price, slider.max] < totals[price, slider.min], price


def test_chapter_06_kernel_picker(monkeypatch):
    widgets, screen = run_chapter("06", monkeypatch)
    (box,) = widgets

    table_view = controls(box, ipywidgets.HTML)[-1]

    def table(control, value):
        shown = table_view.value.replace("<wbr>", "")  # what the reader sees: a column may break after "_"
        assert f"predicted_on_{value}" in shown and "<tbody>\n    <tr>" in shown, value

    assert drive_selectors("06", box, screen, table) == 1


def test_chapter_07_lines_widget_every_kernel_bench_and_cpu_count(monkeypatch):
    widgets, screen = run_chapter("07", monkeypatch)
    (box,) = widgets
    kernel, bench, cpus = controls(box, (ipywidgets.ToggleButtons, ipywidgets.SelectionSlider))

    def drawn(control, value):
        fig = figure_shown(box)
        n = cpus.value
        assert fig.axes[0].get_title().startswith(f"{bench.value} on {kernel.value}, {n} CPU{'s' if n > 1 else ''}:")

    assert drive_selectors("07", box, screen, drawn) == 3


@pytest.mark.parametrize("chapter", ["00", "08"])
def test_the_other_chapters_show_no_widget_left_undriven(monkeypatch, chapter):
    """Every chapter is covered: the two not driven above show no widget (one added there needs a test here)."""
    widgets, screen = run_chapter(chapter, monkeypatch)
    assert widgets == [] and screen.shown, chapter
