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


def stepper_widget(make_stepper, title: str = ""):
    """Step / run-to-end / reset buttons over a stepper; ``make_stepper()`` builds a fresh one."""
    import ipywidgets as w

    state = {"stepper": make_stepper()}
    out = w.HTML(render_state(state["stepper"]))
    step_b, end_b, reset_b = w.Button(description="Step"), w.Button(description="Run to end"), w.Button(description="Reset")

    def refresh():
        out.value = render_state(state["stepper"])
        step_b.disabled = end_b.disabled = state["stepper"].done

    def on_step(_):
        if not state["stepper"].done:
            state["stepper"].step()
        refresh()

    def on_end(_):
        state["stepper"].run_to_end()
        refresh()

    def on_reset(_):
        state["stepper"] = make_stepper()
        refresh()

    step_b.on_click(on_step)
    end_b.on_click(on_end)
    reset_b.on_click(on_reset)
    box = w.VBox([w.HTML(f"<h4>{html.escape(title)}</h4>") if title else w.HTML(), w.HBox([step_b, end_b, reset_b]), out])
    box.stepper = lambda: state["stepper"]
    box.step = lambda: on_step(None)
    return box
