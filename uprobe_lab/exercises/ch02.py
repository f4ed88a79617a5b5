"""Chapter 02: uretprobes, the int3 trampoline (6.10) and the uretprobe syscall (6.11)."""
from __future__ import annotations

from .. import LabError, disasm, events_per_hit
from ..bench import bench_names
from ..kernel import KERNELS
from ..trace import EVENT_KINDS
from ..x86.uretprobe_programs import check_registers_equal
from ..x86.uretprobe import uretprobe_trampoline
from .core import exercise
from . import judges as j


URETPROBE_BENCHES = tuple(b for b in bench_names("x86_64") if b.startswith("uretprobe-"))


def trampoline_insns(kernel: str = "6.11") -> list[str]:
    return [text for _, _, text in disasm(uretprobe_trampoline(KERNELS[kernel]))]


def _around_syscall(op: str, before: bool) -> set[str]:
    insns = trampoline_insns()
    cut = insns.index("syscall")
    part = insns[:cut] if before else insns[cut + 1:]
    return {j.register(t.split()[1]) for t in part if t.startswith(op + " ")}


def _syscall_number() -> int:
    insns = trampoline_insns()
    mov = insns[insns.index("syscall") - 1]  # "mov rax, 0x14f"
    return int(mov.split(",")[1], 0)


exercise(
    id="02.1", kind="predict", title="What the uretprobe syscall saves",
    question="Steady state of the kernel bench's `uretprobe-nop` (an entry probe on a nop plus a return probe). "
             "How many **exceptions** does one hit cost on 6.10, and on 6.11? Answer `{\"6.10\": ..., \"6.11\": ...}`.",
    hint="Count the traps: the entry int3 (the nop is emulated inside it), then the way back through the "
         "trampoline - an `int3` in 6.10, a `syscall` in 6.11. A syscall is not an exception.",
    solution="""import uprobe_lab as ul
answer = {k: ul.events_per_hit("uretprobe-nop", "x86_64", k)["exceptions"] for k in ("6.10", "6.11")}""",
    explanation="6.11 replaces the trampoline's int3 with the uretprobe syscall: one exception fewer per hit, "
                "and `sysret` instead of `iret` on the way out.",
    expected=lambda: {k: events_per_hit("uretprobe-nop", "x86_64", k).get("exceptions", 0) for k in ("6.10", "6.11")},
    judge=j.per_item(str, j.number(), lambda k, n: f"{n} exception{'s' if n != 1 else ''}"),
    why=lambda e: f"The emulator counts {e['6.10']} on 6.10 and {e['6.11']} on 6.11.",
)

exercise(
    id="02.2", kind="predict", title="What the trampoline pushes",
    question="Before its `syscall`, which registers does the 6.11 trampoline push? Answer a set of names, "
             "e.g. `{\"rax\", \"rdx\"}`.",
    hint="`syscall` itself overwrites two registers (the next rip goes to one, rflags to another), and the "
         "trampoline needs a third for the syscall number.",
    solution="""import uprobe_lab as ul
from uprobe_lab.kernel import KERNELS
from uprobe_lab.x86.uretprobe import uretprobe_trampoline
insns = [t for _, _, t in ul.disasm(uretprobe_trampoline(KERNELS["6.11"]))]
answer = {t.split()[1] for t in insns[:insns.index("syscall")] if t.startswith("push")}""",
    explanation="rax holds the syscall number, rcx gets the return rip and r11 gets rflags from `syscall`; "
                "the program must see its own values, so all three are saved first.",
    expected=lambda: _around_syscall("push", before=True),
    judge=j.same_set(j.register, "register(s)"),
    why=lambda e: f"The trampoline's bytes, disassembled, push {', '.join(sorted(e))}.",
)

exercise(
    id="02.3", kind="predict", title="Which bytes does the trampoline pop?",
    question="After `sys_uretprobe` returns, the trampoline pops some of what it pushed and ends with `ret`. "
             "Which registers does it pop? Answer a set. (And think: where does the `ret` go?)",
    hint="`sys_uretprobe` writes the *real* return address into one of the three saved slots, so that slot "
         "must be left on the stack for `ret`.",
    solution="""import uprobe_lab as ul
from uprobe_lab.kernel import KERNELS
from uprobe_lab.x86.uretprobe import uretprobe_trampoline
insns = [t for _, _, t in ul.disasm(uretprobe_trampoline(KERNELS["6.11"]))]
answer = {t.split()[1] for t in insns[insns.index("syscall") + 1:] if t.startswith("pop")}""",
    explanation="rax is restored by the syscall itself (its return value); rax's stack slot now holds the real "
                "return address, which `ret` pops into rip.",
    expected=lambda: _around_syscall("pop", before=False),
    judge=j.same_set(j.register, "register(s)"),
    why=lambda e: f"The trampoline pops {', '.join(sorted(e))}; the slot left over is rax's, where sys_uretprobe "
                  f"put the real return address for `ret`.",
)


def _clobbered() -> set[str]:
    broken = check_registers_equal("6.11", uretprobe_saves_regs=False)
    return {j.register(r) for r in broken if r != "seen_by_consumer"}


exercise(
    id="02.4", kind="break it", title="Take the saves out",
    question="Build the broken trampoline that does not save rcx and r11 "
             "(`check_registers_equal(\"6.11\", uretprobe_saves_regs=False)`). Before running it: which registers "
             "does the caller see changed? Answer a set.",
    hint="Which registers does the `syscall` instruction itself write?",
    solution="""from uprobe_lab.x86.uretprobe_programs import check_registers_equal
broken = check_registers_equal("6.11", uretprobe_saves_regs=False)
answer = {reg for reg in broken if reg != "seen_by_consumer"}""",
    explanation="`syscall` puts the next rip in rcx and rflags in r11; with nobody restoring them the caller "
                "(and the consumers) see the trampoline's values. This is why the merged trampoline saves them.",
    expected=_clobbered,
    judge=j.same_set(j.register, "register(s)"),
    why=lambda e: f"The lab's run of the broken trampoline changed {', '.join(sorted(e))}.",
)

exercise(
    id="02.5", kind="predict", title="The syscall number",
    question="Which syscall number does the merged trampoline load before `syscall`? Answer the number, in decimal "
             "or as a hex string such as `\"0x1\"`.",
    hint="Disassemble the trampoline (cell above, or `ul.disasm`) and read the `mov` into rax; it is printed in hex.",
    solution="""import uprobe_lab as ul
from uprobe_lab.kernel import KERNELS
from uprobe_lab.x86.uretprobe import uretprobe_trampoline
insns = [t for _, _, t in ul.disasm(uretprobe_trampoline(KERNELS["6.11"]))]
answer = int(insns[insns.index("syscall") - 1].split(",")[1], 0)""",
    explanation="The seed's v1 used 462; it moved before 6.11 was released (the history table above).",
    expected=_syscall_number,
    judge=j.number(),
    why=lambda e: f"The trampoline's bytes load {e} ({e:#x}) into rax.",
)


def bench_bill(kinds: tuple[str, ...], benches: tuple[str, ...], what: str):
    """The judge of an open task's answer (bench, kernel, {kind: count}) against the emulator's steady-state
    counts: the bench is one of ``benches`` (the ``what`` the question asks for), every kind in ``kinds`` is
    predicted (0 is a prediction), and every key is a kind of the trace's vocabulary."""
    def judge(answer, lab) -> tuple[bool, str]:
        if not isinstance(answer, (tuple, list)) or len(answer) != 3 or not isinstance(answer[2], dict):
            raise LabError(f"give (bench, kernel, {{kind: count}}), e.g. ({benches[0]!r}, '6.11', "
                           + "{" + ", ".join(f"{k!r}: ..." for k in kinds) + "})")
        bench, kernel, said = j.word(answer[0]), str(answer[1]), {j.word(k): v for k, v in answer[2].items()}
        if bench not in benches:
            raise LabError(f"{answer[0]!r} is not {what}; pick one of {', '.join(benches)}")
        if kernel not in KERNELS:
            raise LabError(f"kernel {answer[1]!r}: pick one of {', '.join(KERNELS)}")
        unknown = [k for k in said if k not in EVENT_KINDS]
        if unknown:
            raise j.not_known(unknown, EVENT_KINDS, "an event kind", "kinds")
        right = lab(bench, kernel)
        missing = [k for k in kinds if k not in said]
        wrong = [f"No prediction for {', '.join(missing)} (the question asks for {', '.join(kinds)}; 0 is a "
                 f"prediction)"] if missing else []
        # the direction only: the count itself is the answer, which the third wrong try gives
        wrong += [f"{k}: {j.as_number(v):g} is too {'high' if j.as_number(v) > right.get(k, 0) else 'low'}"
                  for k, v in said.items() if j.as_number(v) != right.get(k, 0)]
        if wrong:
            return False, "; ".join(wrong) + "."
        return True, f"Every kind you predicted matches ({bench} on {kernel}: {right})."
    return judge


def open_bench_task(kinds: tuple[str, ...], benches: tuple[str, ...], what: str) -> dict:
    """The checking half of an open "pick a bench and a kernel, predict its bill" exercise."""
    return dict(expected=lambda: (lambda bench, kernel: events_per_hit(bench, "x86_64", kernel)),
                judge=bench_bill(kinds, benches, what),
                why=lambda lab: "The emulator ran the bench to its steady state on that kernel.")


exercise(
    id="02.6", kind="open", title="Your own prediction",
    question="Pick a uretprobe bench (`uretprobe-push`, `uretprobe-ret`, ...) and a kernel, predict its "
             "exceptions, syscalls and xol_steps per hit, then check: "
             "`answer = (\"uretprobe-ret\", \"6.11\", {\"exceptions\": ..., \"syscalls\": ..., \"xol_steps\": ...})`.",
    hint="Add up the entry probe (what does the probed instruction cost?) and the return (int3 trampoline "
         "before 6.11, syscall from 6.11).",
    solution="""import uprobe_lab as ul
bill = ul.events_per_hit("uretprobe-ret", "x86_64", "6.11")
answer = ("uretprobe-ret", "6.11", {k: bill.get(k, 0) for k in ("exceptions", "syscalls", "xol_steps")})""",
    explanation="uretprobe-ret: the probed `ret` is stepped out of line (int3 + #DB), and the return comes back "
                "through the syscall trampoline.",
    **open_bench_task(("exceptions", "syscalls", "xol_steps"), URETPROBE_BENCHES, "a uretprobe bench"),
)
