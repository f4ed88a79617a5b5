"""A step-through widget over uprobe_lab.stepper.Stepper: the current instruction, registers,
the stack and the kernel events of each step."""
from __future__ import annotations

import html

from ..stepper import Stepper


def _regs_html(regs: dict[str, int]) -> str:
    cells = "".join(f"<tr><td><b>{n}</b></td><td><code>{v:#018x}</code></td></tr>" for n, v in regs.items())
    return f"<table>{cells}</table>"


def render_state(stepper: Stepper, stack_words: int = 4) -> str:
    """HTML for the stepper's state: the steps so far, then registers and stack."""
    lines = "\n".join(html.escape(s.describe()) for s in stepper.steps) or "(not started)"
    nxt = "finished" if stepper.done else f"next: {stepper.pc:#x} {html.escape(stepper.current_text())}"
    regs = stepper.steps[-1].regs if stepper.steps else {}
    stack = ""
    if stepper.proc.signal is None:
        rows = "".join(f"<tr><td><code>{a:#x}</code></td><td><code>{v:#018x}</code></td></tr>"
                       for a, v in stepper.stack(stack_words))
        stack = f"<b>stack (sp upward)</b><table>{rows}</table>"
    return (f"<pre style='font-size:12px'>{lines}</pre><p><b>{nxt}</b></p>"
            f"<div style='display:flex;gap:2em'><div>{_regs_html(regs)}</div><div>{stack}</div></div>")


def replay(make_stepper, steps: int) -> Stepper:
    """A fresh stepper advanced ``steps`` steps. The emulation is deterministic, so this is how the widget goes
    back one step: the same run again, one step shorter."""
    stepper = make_stepper()
    while len(stepper.steps) < steps and not stepper.done:
        stepper.step()
    return stepper


def stepper_widget(make_stepper, title: str = "", kernels=None, kernel: str | None = None):
    """Step / Back / Run to end / Reset buttons over a stepper; ``make_stepper()`` builds a fresh one.

    With ``kernels`` (e.g. ``("6.11", "6.16", "6.18")``), ``make_stepper(kernel)`` builds one for a kernel and a
    selector above the buttons switches between them, starting again from the first step."""
    import ipywidgets as w

    picker = w.ToggleButtons(options=list(kernels), value=kernel or list(kernels)[-1], description="kernel") \
        if kernels else None

    def fresh():
        return make_stepper(picker.value) if picker else make_stepper()

    state = {"stepper": fresh()}
    out = w.HTML(render_state(state["stepper"]))
    step_b, back_b = w.Button(description="Step"), w.Button(description="Back")
    end_b, reset_b = w.Button(description="Run to end"), w.Button(description="Reset")

    def refresh():
        out.value = render_state(state["stepper"])
        step_b.disabled = end_b.disabled = state["stepper"].done
        back_b.disabled = not state["stepper"].steps

    def on_step(_):
        if not state["stepper"].done:
            state["stepper"].step()
        refresh()

    def on_back(_):
        state["stepper"] = replay(fresh, len(state["stepper"].steps) - 1)
        refresh()

    def on_end(_):
        state["stepper"].run_to_end()
        refresh()

    def on_reset(_=None):
        state["stepper"] = fresh()
        refresh()

    step_b.on_click(on_step)
    back_b.on_click(on_back)
    end_b.on_click(on_end)
    reset_b.on_click(on_reset)
    if picker:
        picker.observe(on_reset, names="value")
    refresh()
    head = w.HTML(f"<h4>{html.escape(title)}</h4>") if title else w.HTML()
    box = w.VBox([head] + ([picker] if picker else []) + [w.HBox([step_b, back_b, end_b, reset_b]), out])
    box.stepper = lambda: state["stepper"]
    box.step = lambda: on_step(None)
    box.back = lambda: on_back(None)
    box.picker = picker
    return box


def warm_stepper(target: str, kernel: str, arch: str = "x86_64") -> Stepper:
    """A stepper over the *second* call of ``target`` with a counting probe on its first instruction: the steady
    state a benchmark measures (by then 6.18 has rewritten a probed nop5 into a call)."""
    from ..arches import make_process
    from ..uprobes import CountingConsumer, uprobe_register

    proc = make_process(arch, kernel, record=True)
    uprobe_register(proc, target, CountingConsumer())
    proc.call(target)
    return proc.stepper(target)
