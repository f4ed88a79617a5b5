"""Chapter 00: the bill of one hit."""
from __future__ import annotations

from .. import CountingConsumer, LabError, attach, new_process
from .core import Remembered, exercise
from . import judges as j

KERNEL = "6.18"


def one_call(target: str, consumers: int = 1, kernel: str = KERNEL) -> dict:
    """The trace counts of one call of ``target`` with ``consumers`` counting consumers on its first byte."""
    proc = new_process(kernel=kernel)
    for _ in range(consumers):
        attach(proc, target, CountingConsumer())
    proc.call(target)
    return dict(proc.trace.counts)


# the chapter's five lines show the ret's bill; 00.1 asks about two instructions it has not shown
BILL_TARGETS = ("uprobe_target_nop", "uprobe_target_push")

exercise(
    id="00.1", kind="predict", title="nop or push: how many exceptions?",
    question="The five lines showed the bill of a probed `ret`. Before you run anything: one call of "
             "`uprobe_target_nop` (`nop`) and one of `uprobe_target_push` (`push %rbp`, which writes to the "
             "stack), each with a counting probe on its first instruction (kernel 6.18). How many **exceptions** "
             "does each call cost? Answer whole numbers (exact) in a dict, e.g. "
             "`{\"uprobe_target_nop\": 3, \"uprobe_target_push\": 3}`.",
    hint="An exception is a trap into the kernel. The int3 is always one. Can the kernel finish the probed "
         "instruction inside that trap, or must it let the CPU run it and trap again afterwards, as for the `ret`?",
    solution="""import uprobe_lab as ul
answer = {}
for target in ("uprobe_target_nop", "uprobe_target_push"):
    proc = ul.new_process(kernel="6.18")
    ul.attach(proc, target, ul.CountingConsumer())
    proc.call(target)
    answer[target] = proc.trace.counts["exceptions"]""",
    explanation="Both are emulated inside the int3 trap, one exception each: the `nop` needs nothing done, and "
                "for `push %rbp` the kernel stores rbp on the user stack itself and moves rsp. Only what the kernel "
                "cannot emulate, like the `ret`, is stepped out of line and pays the second exception (#DB). "
                "Chapter 01 shows both paths, step by step.",
    expected=lambda: {t: one_call(t)["exceptions"] for t in BILL_TARGETS},
    judge=j.per_item(str, j.number(),
                     lambda t, n: "is that instruction finished inside the int3 trap, or run by the CPU and "
                                  "trapped again?"),
    why=lambda e: (f"The lab counts {e['uprobe_target_nop']} for the nop and {e['uprobe_target_push']} for the "
                   "push: the int3, the instruction emulated inside it, back."),
)

exercise(
    id="00.2", kind="predict", title="Two consumers on one probe",
    question="Attach **two** `CountingConsumer`s to `uprobe_target_nop` and call it once. How many times do "
             "consumers run, and how many int3 traps (`exc_bp`) happen? Answer a tuple `(consumers, exc_bp)`.",
    hint="The kernel keeps one breakpoint per probed address, however many consumers share it; "
         "`handler_chain()` walks the consumer list.",
    solution="""import uprobe_lab as ul
proc = ul.new_process(kernel="6.18")
ul.attach(proc, "uprobe_target_nop", ul.CountingConsumer())
ul.attach(proc, "uprobe_target_nop", ul.CountingConsumer())
proc.call("uprobe_target_nop")
answer = (proc.trace.counts["consumers"], proc.trace.counts["exc_bp"])""",
    explanation="One int3, one trap, one `handler_chain()` that calls both consumers.",
    expected=lambda: (lambda c: (c["consumers"], c["exc_bp"]))(one_call("uprobe_target_nop", consumers=2)),
    judge=lambda a, e: _pair(a, e, ("consumer runs", "int3 traps"), PAIR_CLUES),
    why=lambda e: f"The lab counts {e[0]} consumer runs from {e[1]} trap: consumers share the one breakpoint.",
)


# why each count of 00.2 is what it is, without the count: the kernel's rule for that part of the hit
PAIR_CLUES = {"consumer runs": "handler_chain() walks every consumer of the probe it found - how many are on "
                               "its list?",
              "int3 traps": "the kernel writes one int3 per probed address, however many consumers share it - "
                            "how many times does the CPU reach it in one call?"}


def _pair(answer, expected, names, clues) -> tuple[bool, str]:
    if not isinstance(answer, (tuple, list)) or len(answer) != len(expected):
        raise LabError(f"{j.shown(answer)}: give a tuple of {len(expected)} numbers ({', '.join(names)})")
    wrong = [f"{n}: not {a} - {clues[n]}" for n, a, e in zip(names, answer, expected) if j.as_number(a) != e]
    text = "; ".join(wrong)
    return (not wrong), text + ("." if wrong and not text.endswith("?") else "")


def _own_bill(answer, lab) -> tuple[bool, str]:
    if not isinstance(answer, (tuple, list)) or len(answer) != 2 or not isinstance(answer[1], dict):
        raise LabError("give (symbol, counts), e.g. ('getpgid_syscall', {'exceptions': ..., ...})")
    target, counts = answer
    right = lab(target)
    # what is wrong, not the lab's counts: the learner runs the call to see them (the third wrong try shows them)
    missing = [k for k in right if k not in counts]
    parts = [f"no count for {', '.join(missing)}, which the call has"] if missing else []
    parts += [f"{k}: {j.number()(v, right[k])[1].rstrip('.')}" for k, v in counts.items()
              if k in right and j.as_number(v) != right[k]]
    # a 0 for a kind the call does not have is true: the trace just leaves it out
    parts += [f"{k} does not happen in this call" for k, v in counts.items()
              if k not in right and j.as_number(v) != 0]
    if not parts:
        return True, f"Your bill for {target} matches the lab's: {right}."
    text = "; ".join(parts)
    return False, text[0].upper() + text[1:] + "."


def _checked_call(target: str) -> dict:
    proc = new_process(kernel=KERNEL)
    if not isinstance(target, str) or target not in proc.program.symbols:
        raise LabError(f"no symbol {j.shown(target)} in the bench program; pick one of "
                       f"{', '.join(proc.program.symbols)}")
    return one_call(target)


exercise(
    id="00.3", kind="open", title="Your own bill",
    question="Pick any function of the bench program (`proc.program` lists them), probe its first instruction, "
             "call it once and write down its bill: `answer = (\"symbol\", {kind: count, ...})` with every kind "
             "`proc.trace.counts` shows. Predict it first, then run it and correct yourself.",
    hint="Start from the five lines at the top of this notebook; change the symbol. `dict(proc.trace.counts)` "
         "is the bill.",
    solution="""import uprobe_lab as ul
proc = ul.new_process(kernel="6.18")
ul.attach(proc, "getpgid_syscall", ul.CountingConsumer())
proc.call("getpgid_syscall")
answer = ("getpgid_syscall", dict(proc.trace.counts))""",
    explanation="`getpgid_syscall` starts with `mov eax, 0x79`, which the kernel neither emulates nor refuses: "
                "it is stepped out of line like the `ret` (int3, then #DB), and the function's own `syscall` "
                "adds `syscalls` and `sysret` to the bill.",
    expected=lambda: Remembered(_checked_call),
    judge=_own_bill,
    why=Remembered.why("The lab runs the same call with one counting consumer on kernel 6.18.",
                       lambda target, bill: f"The lab ran it with one counting consumer on 6.18: {target} costs "
                                            f"{bill}."),
)
