"""Views for the uretprobe chapter: a stepper through one probed return, and the trampoline chart.

The logic is plain functions returning data (``record_return_steps``, ``stack_slots``,
``trampoline_events``); the widget and the chart only draw it. Without a widget front end (a
headless run, a terminal) a ``ReturnStepper`` shows itself as text: the step's instruction, the
kernel events it caused, the registers and the stack slots around rsp.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..bench import events_table
from ..stepper import Step, where
from ..kernel import KERNELS
from ..errors import check_choice
from ..uprobes import CountingConsumer, uprobe_register
from ..x86.constants import EXIT_ADDR
from ..x86.uretprobe_programs import make_uretprobe_process
from .charts import events_per_hit_chart
from .redraw import shows_lab_errors
from .stepper import steplog_html

SHOWN_REGS = ("ax", "cx", "r11", "sp", "ip", "flags")


def stack_slots(proc, sp: int, tramp_sp: int | None, saved: dict[str, int], above: int = 2,
                below: int = 3) -> list[tuple[int, int, str]]:
    """Slots from rsp-8*below to rsp+8*above, each with what it holds.

    ``tramp_sp`` is rsp when the trampoline was entered: the three slots under it are the
    trampoline's saved rax, rcx and r11. ``saved`` holds the values pushed there, so a slot
    whose value changed (rax's, after sys_uretprobe) is shown as what it now holds.
    """
    tramp = proc.mm.xol_area.vaddr if proc.mm.xol_area else None
    rows = []
    for addr in range(sp - 8 * below, sp + 8 * (above + 1), 8):
        try:
            value = proc.read_u64(addr)
        except Exception:
            continue
        what = ""
        if tramp_sp is not None and saved and tramp_sp - 24 <= addr < tramp_sp:
            reg = {tramp_sp - 8: "ax", tramp_sp - 16: "cx", tramp_sp - 24: "r11"}[addr]
            if reg not in saved:
                pass  # not pushed (yet, or ever: the broken trampoline saves only rax)
            elif value == saved[reg]:
                what = {"ax": "saved rax", "cx": "saved rcx", "r11": "saved r11"}[reg]
            elif reg == "ax":
                what = f"real return address {where(proc, value)} (sys_uretprobe wrote it over saved rax)"
            else:
                what = f"{reg} slot, rewritten by sys_uretprobe"
        elif value == tramp:
            what = "return address hijacked: [uprobes] trampoline"
        elif value == EXIT_ADDR:
            what = "return address of the test harness"
        elif proc.program and proc.program.symbol_at(value):
            what = f"return address {where(proc, value)}"
        if addr < sp:
            what = (what + " " if what else "") + "(below rsp: free)"
        rows.append((addr, value, what))
    return rows


@dataclass
class ReturnStepper:
    """One call of ``stepper_caller`` -> probed ``stepper_target``, one instruction per step."""

    kernel: str = "6.11"
    saves_regs: bool = True
    steps: list[Step] = field(default_factory=list)
    index: int = 0

    def __post_init__(self):
        if not self.steps:
            self.steps = record_return_steps(self.kernel, self.saves_regs)
        self.index = first_step_at(self.steps, "[uprobes]")

    def text(self, i: int | None = None) -> str:
        return self.steps[self.index if i is None else i].describe(regs=True)

    def widget(self):
        """A kernel selector and a step slider over a copy of this stepper that the widget owns: a kernel it picks
        is recorded again on a new process, and the cells that read this stepper still see what they built."""
        import ipywidgets as w

        check_choice(self.kernel, list(KERNELS), "the stepper's kernel", "set .kernel to one of them")  # not a TraitError
        own = ReturnStepper(self.kernel, self.saves_regs, list(self.steps))
        own.index = self.index
        slider = w.IntSlider(value=own.index, min=0, max=len(own.steps) - 1, description="step")
        out = w.HTML()

        @shows_lab_errors(out)
        def show(change=None):
            own.index = slider.value
            out.value = steplog_html(own.text())

        def title_text():
            return f"<b>uretprobe return on {own.kernel}{broken_words(own.kernel, own.saves_regs)}</b>"

        title = w.HTML(title_text())
        picker = w.ToggleButtons(options=list(KERNELS), value=own.kernel, description="kernel")

        @shows_lab_errors(out)
        def pick(change):  # the same call on another kernel: int3 trampoline before 6.11, syscall from 6.11
            own.kernel, own.steps = change["new"], record_return_steps(change["new"], own.saves_regs)
            start = first_step_at(own.steps, "[uprobes]")
            slider.unobserve(show, names="value")
            slider.max, slider.value = len(own.steps) - 1, start
            slider.observe(show, names="value")
            title.value = title_text()
            show()

        slider.observe(show, names="value")
        picker.observe(pick, names="value")
        show()
        box = w.VBox([title, picker, slider, out])
        box.stepper, box.output = (lambda: own), out
        return box

    def _repr_mimebundle_(self, include=None, exclude=None):
        """A widget in a front end; the current step as text everywhere else."""
        bundle = {"text/plain": self.text()}
        try:
            data = self.widget()._repr_mimebundle_()
        except Exception:
            return bundle
        data = dict(data or {})
        data["text/plain"] = self.text()
        return data


def broken_words(kernel: str, saves_regs: bool) -> str:
    """What the broken teaching trampoline means on ``kernel``: only a syscall trampoline (6.11 on) can lose rcx/r11."""
    if saves_regs:
        return ""
    if KERNELS[kernel].uretprobe_syscall:
        return " (broken trampoline: no rcx/r11 saves)"
    return f" (the broken trampoline is a syscall one; {kernel} returns by int3, which loses no register)"


def first_step_at(steps: list[Step], prefix: str) -> int:
    return next((s.index for s in steps if s.where.startswith(prefix)), 0)


TRAMPOLINE_SAVES = {"rax": "ax", "rcx": "cx", "r11": "r11"}


def record_return_steps(kernel: str = "6.11", saves_regs: bool = True, max_steps: int = 64) -> list[Step]:
    """Run stepper_caller one instruction at a time with a return probe on stepper_target; each step
    annotated with the stack slots around sp (what each one holds) and what the step means."""
    proc = make_uretprobe_process(kernel, record=True, uretprobe_saves_regs=saves_regs)
    uprobe_register(proc, "stepper_target", CountingConsumer(ret=True))
    stepper = proc.stepper("stepper_caller", regs=SHOWN_REGS)
    seen = {"tramp_sp": None, "sp": proc.sp}  # sp on entering the trampoline; sp before the current step
    saved: dict[str, int] = {}

    def annotate(step: Step) -> None:
        in_tramp = step.where.startswith("[uprobes]")
        if in_tramp and seen["tramp_sp"] is None:
            seen["tramp_sp"] = seen["sp"]
        if in_tramp and step.text.startswith("push"):  # the value it pushed is at the new sp
            saved[TRAMPOLINE_SAVES[step.text.split()[1]]] = proc.read_u64(step.regs["sp"])
        step.stack = stack_slots(proc, step.regs["sp"], seen["tramp_sp"], saved)
        step.note = _explain(step, in_tramp, where(proc, step.next_ip), saves_regs)
        seen["sp"] = step.regs["sp"]

    return stepper.run_to_end(max_steps, annotate)


def _explain(step: Step, in_tramp: bool, to: str, saves_regs: bool) -> str:
    insn = step.text
    if step.has("exc_bp") and step.has("ri_pushed"):
        return "int3 at the probe: the kernel swaps the return address at [rsp] for the trampoline"
    if step.has("exc_bp") and in_tramp:
        return "int3 trampoline (before 6.11): a second exception; handle_trampoline restores ip and runs consumers"
    if insn == "ret" and not in_tramp and to.startswith("[uprobes]"):
        return "ret pops the hijacked address: the function 'returns' into the [uprobes] trampoline"
    if insn == "syscall" and in_tramp and saves_regs:
        return ("sys_uretprobe: restores r11/rcx/rax from the stack for the consumers, runs them, then "
                "writes r11/rcx back and the real return address into rax's slot; sysret")
    if insn == "syscall" and in_tramp:
        return ("broken trampoline: syscall put the next rip in rcx and rflags in r11, and nothing saved "
                "the program's values; the consumers and the caller see the clobbered ones")
    if insn == "ret" and in_tramp:
        return "ret pops the real return address from what was rax's slot"
    return ""


# --- events per hit: int3 vs syscall trampoline ---------------------------------------------------

TRAMPOLINE_EVENTS = ("exceptions", "syscalls", "iret", "sysret")


def trampoline_events(benches=("uretprobe-nop", "uretprobe-push", "uretprobe-ret"),
                      kernels=("6.10", "6.11")):
    """A DataFrame: events per hit of each bench on each kernel (measured on the emulator), kernels outer."""
    df = events_table(benches, kernels=kernels, kinds=(*TRAMPOLINE_EVENTS, "user_insns"))
    df = df.sort_values("kernel", key=lambda k: k.map(list(map(str, kernels)).index), kind="stable")
    return df[["kernel", "bench", *TRAMPOLINE_EVENTS, "user_insns"]].reset_index(drop=True)


def plot_trampoline_events(df=None, ax=None):
    """Grouped bars: exceptions / syscalls / iret / sysret per hit, one group per bench and kernel."""
    df = trampoline_events() if df is None else df
    rows = {f"{r.bench}\n{r.kernel}": {k: getattr(r, k) for k in TRAMPOLINE_EVENTS} for r in df.itertuples()}
    kinds = [f"{'syscall' if KERNELS[k].uretprobe_syscall else 'int3'} trampoline ({k})"
             for k in dict.fromkeys(map(str, df["kernel"]))]
    return events_per_hit_chart(rows, TRAMPOLINE_EVENTS, "uretprobe: " + " vs ".join(kinds), ax)
