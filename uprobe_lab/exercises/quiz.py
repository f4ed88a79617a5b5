"""The end-of-course quiz: ten questions over chapters 01-07, each answer asked of the lab when it is checked.

    from uprobe_lab.exercises.quiz import quiz, check_quiz
    quiz()                                  # the questions
    check_quiz({"Q1": "b", "Q2": "a", ...})  # the score, and for each question right or not, and why
"""
from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Callable

from .. import analyze
from ..bench import bench_process, events_per_hit
from ..errors import LabError
from ..x86 import constants as x86
from ..views.many_cpus import shared_writes
from ..x86.uretprobe import uretprobe_syscall_args


@dataclass(frozen=True)
class Question:
    id: str
    chapter: str
    text: str
    choices: dict[str, str]  # letter -> what it says
    answer: Callable[[], str]  # the right letter, worked out by the lab now
    why: str  # shown once the question is answered, right or wrong


def _letter(choices: dict[str, str], text: str) -> str:
    return next(k for k, v in choices.items() if v == text)


def _after_first_hits(bench: str, kernel: str, symbol: str) -> bytes:
    proc, _, target = bench_process(bench, "x86_64", kernel)
    proc.call("producer_loop", 3, target)
    return proc.read(proc.program.resolve(symbol), 5)


def _q(id, chapter, text, choices, pick, why) -> Question:
    return Question(id, chapter, text, choices, lambda: _letter(choices, pick()), why)


C_EXC = {"a": "0", "b": "1", "c": "2", "d": "3"}
C_REGS = {"a": "rax, rcx, r11", "b": "rdi, rsi, rdx", "c": "rbp, rsp", "d": "none: the kernel restores them"}
C_NR = {"a": "335", "b": "336", "c": "462", "d": "467"}
C_NOP5 = {"a": "an int3 (cc) left in place", "b": "a call (e8) to [uprobes-trampoline]", "c": "a jmp (e9)",
          "d": "the original nop5"}
C_NOP10 = {"a": "lea -0x80(%rsp),%rsp", "b": "call", "c": "int3", "d": "push %rbp"}
C_ARM = {"a": "simulate", "b": "xol", "c": "reject"}
C_RELEASE = {"a": "6.10", "b": "6.12", "c": "6.13", "d": "6.14"}
C_SLOTS = {"a": "1", "b": "31", "c": "32", "d": "1023"}
C_RET = {"a": "2 exceptions on both", "b": "2 exceptions on 6.10, 1 exception + 1 syscall on 6.11",
         "c": "1 exception on both", "d": "1 exception + 1 syscall on both"}
C_CAP = {"a": "an emulated push", "b": "a stepped lea", "c": "both cost the same"}


def _regs() -> str:
    saved = {name if name.startswith("r") else "r" + name for name in uretprobe_syscall_args()}  # pt_regs: ax, cx
    return next(v for v in C_REGS.values() if set(v.split(", ")) == saved)


def _first_release_sharing_nothing() -> str:
    writes = shared_writes("uprobe-nop", list(C_RELEASE.values()))
    return next(k for k in C_RELEASE.values() if writes[k] == 0)


def _x86_slots() -> str:
    proc, _, target = bench_process("uprobe-ret", "x86_64", "6.18")
    proc.call("producer_loop", 1, target)
    return str(len(proc.mm.xol_area.bitmap) - 1)


QUESTIONS = [
    _q("Q1", "01", "A uprobe on `ret` on 6.18: how many exceptions does one hit cost?", C_EXC,
       lambda: f"{events_per_hit('uprobe-ret', 'x86_64', '6.18')['exceptions']:g}",
       "ret is stepped out of line: the int3's #BP, then the single-step's #DB."),
    _q("Q2", "02", "Which registers does the uretprobe syscall trampoline save before its `syscall`?", C_REGS, _regs,
       "syscall itself writes rcx (the return address) and r11 (the flags), and rax carries the syscall number."),
    _q("Q3", "02", "The number of the uretprobe syscall on x86-64 in the merged kernel:", C_NR,
       lambda: str(x86.__NR_uretprobe), "Posted as 462, wired up as 463, moved to 467, merged for 6.11 as 335."),
    _q("Q4", "03", "On 6.18, what do a probed nop5's first bytes become once it has been hit?", C_NOP5,
       lambda: {0xE8: C_NOP5["b"], 0xCC: C_NOP5["a"], 0xE9: C_NOP5["c"]}.get(
           _after_first_hits("uprobe-nop5", "6.18", "uprobe_target_nop5")[0], C_NOP5["d"]),
       "6.18 patches it, behind an int3, into a call to the trampoline that enters the kernel by sys_uprobe."),
    _q("Q5", "03b", "On 7.2, what does an optimised nop10 begin with?", C_NOP10,
       lambda: C_NOP10["a"] if _after_first_hits("uprobe-nop10", "7.2", "uprobe_target_nop10")[:5]
       == bytes.fromhex("488d642480") else C_NOP10["b"],
       "It steps below the 128-byte red zone first, so the call's return address cannot clobber it."),
    _q("Q6", "04", "On an upstream arm64 kernel, a probe on `stp x29, x30, [sp, #-16]!` is...", C_ARM,
       lambda: analyze("a9bf7bfd", arch="arm64")["action"],
       "Stepped out of line: the STP simulation was posted, reviewed, and never merged."),
    _q("Q7", "07", "From which release does a `uprobe-nop` hit write no cache line that other CPUs write?",
       C_RELEASE, _first_release_sharing_nothing,
       "6.14's speculative VMA lookup removed mmap_lock, the last shared write after 6.12-6.13's work."),
    _q("Q8", "07", "How many threads of one x86-64 process can be stepping out of line at once?", C_SLOTS, _x86_slots,
       "One page of 128-byte slots is 32, and slot 0 holds the return trampoline."),
    _q("Q9", "02", "A uretprobe on a function that is only a nop, on 6.10 and on 6.11:", C_RET,
       lambda: C_RET["b"] if (events_per_hit("uretprobe-nop", "x86_64", "6.10").get("exceptions"),
                              events_per_hit("uretprobe-nop", "x86_64", "6.11").get("syscalls")) == (2, 1)
       else C_RET["a"],
       "6.11 returns through the uretprobe syscall instead of the trampoline's int3."),
    _q("Q10", "08", "Which function entry is cheaper to probe on 6.18: `push %rbp` or `lea rax, [rdi + rdi*2 + 1]`?",
       C_CAP, lambda: C_CAP["a"] if analyze("55", "x86_64", "6.18")["action"] == "emulate"
       and analyze("488d447f01", "x86_64", "6.18")["action"] == "xol" else C_CAP["c"],
       "The push is emulated in the kernel (one exception); the lea is stepped out of line (two)."),
]


class QuizText(str):
    def __repr__(self) -> str:
        return str(self)

    def _repr_markdown_(self) -> str:
        return str(self)


def quiz() -> QuizText:
    """The questions, as markdown."""
    parts = []
    for q in QUESTIONS:
        choices = "\n".join(f"   - **{k}**: {v}" for k, v in q.choices.items())
        parts.append(f"{q.id[1:]}. {q.text} (chapter {q.chapter})\n{choices}")
    return QuizText("\n".join(parts))


@dataclass
class QuizResult:
    score: int
    lines: list[str]

    def __str__(self) -> str:
        return f"{self.score} of {len(QUESTIONS)} right.\n" + "\n".join(self.lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        return "<br>".join(html.escape(line) for line in str(self).splitlines())


def _question_id(key) -> str:
    """"Q3", "q3", 3 and "3" are all question Q3."""
    text = str(key).strip().upper()
    return text if text.startswith("Q") else "Q" + text


def check_quiz(answers: dict) -> QuizResult:
    """Score ``answers`` ({"Q1": "b", ...}; letters, any case). An unanswered question scores nothing."""
    if not isinstance(answers, dict):
        raise LabError('answer the quiz with a dict of letters: {"Q1": "b", "Q2": "a", ...}')
    known = {q.id for q in QUESTIONS}
    unknown = [k for k in answers if _question_id(k) not in known]
    if unknown:
        raise LabError(f"no question {', '.join(map(str, unknown))}: the questions are Q1 to Q{len(QUESTIONS)}")
    given = {_question_id(k): str(v).strip().lower() for k, v in answers.items()}
    score, lines = 0, []
    for q in QUESTIONS:
        got = given.get(q.id)
        if got is None:
            lines.append(f"{q.id}: not answered")
            continue
        if got not in q.choices:
            lines.append(f"{q.id}: {got!r} is not one of {', '.join(q.choices)}")
            continue
        right = got == q.answer()
        score += right
        lines.append(f"{q.id}: {'right' if right else 'not yet'}. {q.why}" if right else
                     f"{q.id}: not yet (see chapter {q.chapter}).")
    return QuizResult(score, lines)
