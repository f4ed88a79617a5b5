"""A step-through widget over uprobe_lab.stepper.Stepper: the current instruction, registers,
the stack and the kernel events of each step.

The widget owns its process: it builds a new stepper, on a new process, for every Reset, Back and kernel pick,
so whatever another cell does to a process of its own cannot reach the walk the widget shows."""
from __future__ import annotations

import html

from ..arches import make_process
from ..errors import LabError, check_choice
from ..stepper import Stepper
from ..uprobes import CountingConsumer, uprobe_register
from .redraw import lab_error_html, shows_lab_errors


STEPLOG_CLASS = "uprobe-lab-steplog"  # the step log's class: the slides restyle it by this name
# A div, not a pre: JupyterLab's own rule for pre (13 px) would outweigh the class. :where() gives the rule no
# weight, so any stylesheet that names the class (the slides') wins over it.
STEPLOG_STYLE = (f"<style>:where(.{STEPLOG_CLASS}) {{white-space: pre; font-family: monospace; font-size: 16px; "
                 "line-height: 1.35; margin: 0.5em 0}</style>")


def steplog_html(text: str) -> str:
    """A step log (the walk as text) as HTML, in the class the slides style."""
    return f"{STEPLOG_STYLE}<div class='{STEPLOG_CLASS}'>{html.escape(text)}</div>"


def _regs_html(regs: dict[str, int]) -> str:
    cells = "".join(f"<tr><td><b>{n}</b></td><td><code>{v:#018x}</code></td></tr>" for n, v in regs.items())
    return f"<table>{cells}</table>"


def render_state(stepper: Stepper, stack_words: int = 4) -> str:
    """HTML for the stepper's state: the steps so far, then registers and stack."""
    lines = "\n".join(s.describe() for s in stepper.steps) or "(not started)"
    nxt = "finished" if stepper.done else f"next: {stepper.pc:#x} {html.escape(stepper.current_text())}"
    regs = stepper.steps[-1].regs if stepper.steps else {}
    stack = ""
    if stepper.proc.signal is None:
        rows = "".join(f"<tr><td><code>{a:#x}</code></td><td><code>{v:#018x}</code></td></tr>"
                       for a, v in stepper.stack(stack_words))
        stack = f"<b>stack (sp upward)</b><table>{rows}</table>"
    # the walk beside the registers and the stack, not above them: a walk run to its end stays on one slide
    return (f"<div style='display:flex;flex-wrap:wrap;gap:0 2em;align-items:flex-start'>"
            f"<div>{steplog_html(lines)}<p><b>{nxt}</b></p></div>"
            f"<div style='display:flex;gap:0 2em'><div>{_regs_html(regs)}</div><div>{stack}</div></div></div>")


def replay(make_stepper, steps: int) -> Stepper:
    """A fresh stepper advanced ``steps`` steps. The emulation is deterministic, so this is how the widget goes
    back one step: the same run again, one step shorter."""
    stepper = make_stepper()
    while len(stepper.steps) < steps and not stepper.done:
        stepper.step()
    return stepper


def _problem_html(err: Exception, picker) -> str:
    """The reason a walk cannot be shown, and the way out, in place of the walk."""
    way_out = "press Reset to start again on a new process; if the same error comes back, " + (
        f"pick another kernel above (kernel {picker.value} cannot run this walk)" if picker
        else "fix the probe or the program and build the widget again")
    return f"{lab_error_html(err)}<p>{html.escape('cannot step this walk: ' + way_out)}</p>"


def stepper_widget(make_stepper, title: str = "", kernels=None, kernel: str | None = None):
    """Step / Back / Run to end / Reset buttons over a stepper; ``make_stepper()`` builds a fresh one, on a
    process of its own (``lambda: probed_stepper("uprobe_target_push", "6.18")``). The widget calls it again for
    every Reset and Back, so a walk that ended in a signal or a LabError is gone after Reset, and a cell that runs
    some other process cannot break the walk; a ``make_stepper`` that hands out one shared process
    (``lambda: proc.stepper(...)``) is refused when the widget is built.

    With ``kernels`` (e.g. ``("6.11", "6.16", "6.18")``), ``make_stepper(kernel)`` builds one for a kernel and a
    selector above the buttons switches between them, starting again from the first step.

    A kernel that refuses the probe (a LabError from ``make_stepper`` or a step, e.g. nop10 before 7.3) shows
    why in place of the walk, with the buttons off, until another kernel is picked."""
    import ipywidgets as w

    if kernel is not None and not kernels:
        raise LabError(f"kernel={kernel!r} picks the first of the widget's kernels: give kernels too, e.g. "
                       f"kernels=('6.11', '6.18'), or drop kernel and build the stepper on it in make_stepper")
    if kernels and kernel is not None:  # a value the buttons lack would be ipywidgets' TraitError
        check_choice(kernel, list(kernels), "the widget's kernel",
                     "give one of its kernels, or leave kernel out to start on the last")
    picker = w.ToggleButtons(options=list(kernels), value=kernel or list(kernels)[-1], description="kernel") \
        if kernels else None

    def fresh():
        return make_stepper(picker.value) if picker else make_stepper()

    state = {"stepper": None, "problem": None}
    out = w.HTML()
    step_b, back_b = w.Button(description="Step"), w.Button(description="Back")
    end_b, reset_b = w.Button(description="Run to end"), w.Button(description="Reset")

    def guarded(action):
        """Run ``action``; a LabError leaves no walk (a half-shown one would be another kernel's or stale)."""
        try:
            action()
        except LabError as err:
            state["stepper"], state["problem"] = None, err
        else:
            state["problem"] = None

    def refresh():
        stepper = state["stepper"]
        if stepper is None:
            out.value = _problem_html(state["problem"], picker)
            step_b.disabled = end_b.disabled = back_b.disabled = True
            return
        out.value = render_state(stepper)
        step_b.disabled = end_b.disabled = stepper.done
        back_b.disabled = not stepper.steps

    @shows_lab_errors(out)
    def on_step(_):
        if state["stepper"] is not None and not state["stepper"].done:
            guarded(state["stepper"].step)
        refresh()

    @shows_lab_errors(out)
    def on_back(_):
        if state["stepper"] is not None:
            steps = max(len(state["stepper"].steps) - 1, 0)
            guarded(lambda: state.update(stepper=replay(fresh, steps)))
        refresh()

    @shows_lab_errors(out)
    def on_end(_):
        if state["stepper"] is not None:
            guarded(state["stepper"].run_to_end)
        refresh()

    @shows_lab_errors(out)
    def on_reset(_=None):
        guarded(lambda: state.update(stepper=fresh()))
        refresh()

    step_b.on_click(on_step)
    back_b.on_click(on_back)
    end_b.on_click(on_end)
    reset_b.on_click(on_reset)
    if picker:
        picker.observe(on_reset, names="value")
    on_reset()
    if state["stepper"] is not None:  # built twice, so a shared process is refused now, not after a cell broke it
        first = state["stepper"].proc
        on_reset()
        if state["stepper"] is not None and state["stepper"].proc is first:
            raise LabError("make_stepper() gave the widget the same process twice: another cell running that "
                           "process would break the walk; build a new process in it each time, e.g. "
                           "lambda: probed_stepper('uprobe_target_push', '6.18')")
    head = w.HTML(f"<h4>{html.escape(title)}</h4>") if title else w.HTML()
    box = w.VBox([head] + ([picker] if picker else []) + [w.HBox([step_b, back_b, end_b, reset_b]), out])
    box.stepper = lambda: state["stepper"]
    box.step = lambda: on_step(None)
    box.back = lambda: on_back(None)
    box.picker = picker
    box.output = out
    return box


def probed_stepper(target: str, kernel: str = "6.18", warm: bool = False, arch: str = "x86_64") -> Stepper:
    """A stepper over a call of ``target`` in a new process with a counting probe on its first instruction: what a
    widget's ``make_stepper`` calls, so each Reset gets a process of its own. ``warm``: the *second* call, the
    steady state a benchmark measures (by then 6.18 has rewritten a probed nop5 into a call)."""

    proc = make_process(arch, kernel, record=True)
    uprobe_register(proc, target, CountingConsumer())
    if warm:
        proc.call(target)
    return proc.stepper(target)
