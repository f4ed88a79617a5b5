"""Step an emulated process one user instruction at a time and see what the kernel did.

This is the logic behind the stepping widgets (uprobe_lab.views.stepper): every step runs
exactly one user-mode instruction; if that instruction traps or makes a syscall, the kernel
model runs inside the step and its events appear in the step's ``events``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .errors import LabError
from .program import disasm
from .trace import Event


@dataclass
class Step:
    index: int
    ip: int  # the instruction executed in this step
    text: str  # its disassembly ("mnemonic op_str")
    where: str  # mapping name (and symbol) it ran in
    next_ip: int
    regs: dict[str, int]
    events: list[Event] = field(default_factory=list)
    done: bool = False
    signal: str | None = None

    def describe(self) -> str:
        head = f"step {self.index}: {self.ip:#x} {self.text:<28} [{self.where}]"
        kernel = "".join(f"\n    kernel: {e.kind}{' x' + str(e.n) if e.n != 1 else ''}"
                         f"{' - ' + e.note if e.note else ''}" for e in self.events)
        tail = f"\n    -> {self.signal}" if self.signal else ("\n    (finished)" if self.done else "")
        return head + kernel + tail


class Stepper:
    """Runs ``proc`` from ``start`` to ``until`` one instruction per ``step()``.

    The process must record its trace (``record=True``) so each step can show its kernel events.
    """

    def __init__(self, proc, start: int, until: int, regs: tuple[str, ...] = ("ip", "sp", "ax", "cx", "r11")):
        if not proc.trace.record:
            raise LabError("make the process with record=True so the stepper can show kernel events")
        self.proc = proc
        self.until = until
        self.pc = start
        self.reg_names = regs
        self.steps: list[Step] = []

    @property
    def done(self) -> bool:
        return self.pc == self.until or self.proc.signal is not None

    def _where(self, addr: int) -> str:
        mapping = self.proc.mapping_at(addr)
        name = mapping.name if mapping else "unmapped"
        program = self.proc.program
        sym = program.symbol_at(addr) if program else None
        return f"{name} {sym[0]}+{sym[1]:#x}" if sym else name

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
        first_event = len(self.proc.trace.events)
        ip, text, where = self.pc, self.current_text(), self._where(self.pc)
        result = self.proc.run(self.pc, self.until, max_insns=1)
        self.pc = result.ip
        regs = self.proc.regs()
        snapshot = {name: regs.get(name) for name in self.reg_names}
        step = Step(len(self.steps), ip, text, where, self.pc, snapshot,
                    [e for e in self.proc.trace.events[first_event:] if e.kind != "user_insns"],
                    self.done, result.signal)
        self.steps.append(step)
        return step

    def run_to_end(self, limit: int = 10_000) -> list[Step]:
        steps = []
        while not self.done and len(steps) < limit:
            steps.append(self.step())
        return steps

    def stack(self, words: int = 6, sp: int | None = None) -> list[tuple[int, int]]:
        """(address, value) of the top ``words`` stack slots."""
        sp = self.proc.regs().get("sp") if sp is None else sp
        return [(sp + 8 * i, self.proc.read_u64(sp + 8 * i)) for i in range(words)]
