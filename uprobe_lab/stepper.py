"""Step an emulated process one user instruction at a time and see what the kernel did.

This is the one step model behind every stepping view (uprobe_lab.views.stepper's widget, the
uretprobe chapter's ReturnStepper): every step runs exactly one user-mode instruction; if that
instruction traps or makes a syscall, the kernel model runs inside the step and its events
appear in the step's ``events``. A view may annotate a step with the stack slots it shows and a
note that explains it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .errors import LabError
from .program import disasm
from .text import wrap
from .trace import Event


@dataclass
class Step:
    """One user instruction and what the kernel did because of it: the one step model every view uses."""

    index: int
    ip: int  # the instruction executed in this step
    text: str  # its disassembly ("mnemonic op_str")
    where: str  # symbol+offset, or mapping+offset ("[uprobes]+0x0"), or "unmapped"
    next_ip: int
    regs: dict[str, int]
    events: list[Event] = field(default_factory=list)
    done: bool = False
    signal: str | None = None
    stack: list[tuple[int, int, str]] = field(default_factory=list)  # (address, value, what), set by a view
    note: str = ""  # what this step means, set by a view

    def has(self, kind: str) -> bool:
        """Whether the kernel emitted an event of ``kind`` in this step."""
        return any(e.kind == kind for e in self.events)

    def describe(self, regs: bool = False) -> str:
        """The step as text: instruction, note, kernel events, registers if asked, stack."""
        lines = [f"step {self.index}: {self.ip:#x} {self.text:<28} [{self.where}]"]
        if self.note:
            lines.append(f"    {self.note}")
        lines += [f"    kernel: {e.kind}{' x' + str(e.n) if e.n != 1 else ''}{' - ' + e.note if e.note else ''}"
                  for e in self.events]
        if regs:
            lines.append("    " + "  ".join(f"{n}={v:#x}" for n, v in self.regs.items()))
        if self.stack:
            lines.append("    stack (sp first):")
            sp = self.regs.get("sp")
            lines += [f"    {'sp->' if addr == sp else '    '} {addr:#x}: {value:#018x}  {what}"
                      for addr, value, what in self.stack]
        if self.signal:
            lines.append(f"    -> {self.signal}")
        elif self.done:
            lines.append("    (finished)")
        return wrap("\n".join(lines))  # a long note wraps under itself, so the walk fits the page


def where(proc, addr: int) -> str:
    """An address as a reader wants it: symbol+offset in the program, else mapping+offset."""
    hit = proc.program.symbol_at(addr) if proc.program else None
    if hit:
        return f"{hit[0]}+{hit[1]:#x}" if hit[1] else hit[0]
    mapping = proc.mapping_at(addr)
    return f"{mapping.name}+{addr - mapping.start:#x}" if mapping else "unmapped"


class Stepper:
    """Runs ``proc`` from ``start`` to ``until`` one instruction per ``step()``.

    The process must record its trace (``record=True``) so each step can show its kernel events. A stepper goes on
    only from where its own last step left the process: once another call, run or stepper has moved it, ``step()``
    refuses (a widget gives each walk a process of its own: uprobe_lab.views.stepper).
    """

    def __init__(self, proc, start: int, until: int, regs: tuple[str, ...] = ("ip", "sp", "ax", "cx", "r11")):
        if not proc.trace.record:
            raise LabError("make the process with record=True so the stepper can show kernel events")
        self.proc = proc
        self.until = until
        self.pc = start
        self.reg_names = regs
        self.steps: list[Step] = []
        self._runs = proc.runs  # the process's run count after our own last step: another call changes it

    @property
    def done(self) -> bool:
        return self.pc == self.until or self.proc.signal is not None

    def current_text(self) -> str:
        try:
            raw = self.proc.read(self.pc, 16)
        except LabError:
            return "(unmapped)"
        decoded = disasm(raw, self.proc.arch, self.pc)
        return decoded[0][2] if decoded else "(bad)"

    def step(self) -> Step:
        if self.done:
            raise LabError("the run is finished; make a new stepper to go again")
        if self.proc.runs != self._runs:
            raise LabError("another call ran this stepper's process since its last step, so its registers and stack "
                           "are that call's now; make a new stepper (proc.stepper(...); a widget: Reset), or give the "
                           "other call a process of its own")
        first_event = len(self.proc.trace.events)
        ip, text, at = self.pc, self.current_text(), where(self.proc, self.pc)
        result = self.proc.run(self.pc, self.until, max_insns=1)
        self.pc = result.ip
        self._runs = self.proc.runs
        regs = self.proc.regs()
        snapshot = {name: regs.get(name) for name in self.reg_names}
        step = Step(len(self.steps), ip, text, at, self.pc, snapshot,
                    [e for e in self.proc.trace.events[first_event:] if e.kind != "user_insns"],
                    self.done, result.signal)
        self.steps.append(step)
        return step

    def run_to_end(self, limit: int = 10_000, annotate=None) -> list[Step]:
        """Step until the run ends (or ``limit`` steps); ``annotate(step)`` may add a view's stack and note."""
        steps = []
        while not self.done and len(steps) < limit:
            steps.append(self.step())
            if annotate is not None:
                annotate(steps[-1])
        return steps

    def stack(self, words: int = 6, sp: int | None = None) -> list[tuple[int, int]]:
        """(address, value) of the top ``words`` stack slots."""
        sp = self.proc.regs().get("sp") if sp is None else sp
        return [(sp + 8 * i, self.proc.read_u64(sp + 8 * i)) for i in range(words)]
