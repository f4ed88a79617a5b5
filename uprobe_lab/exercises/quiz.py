"""The end-of-course quiz: ten questions over chapters 01-08, each about a case no chapter prints (the chapters it
draws on named with it), each answer asked of the lab when it is checked.

    from uprobe_lab.exercises.quiz import quiz, check_quiz
    quiz()                                  # the questions
    check_quiz({"Q1": "b", "Q2": "a", ...})  # the score, and for each question right or not, and why
"""
from __future__ import annotations

import html
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Callable

from .. import analyze
from ..arches import make_process
from ..bench import events_per_hit
from ..errors import LabError, is_int
from ..kernel import release_rules
from ..model import get_profile
from ..native.fork import emulated_fork_report
from ..own_program import file_offset, hit_verdict
from ..views.many_cpus import shared_writes
from ..x86 import constants as x86, optimize
from ..x86.asm import X86_NOPS
from ..x86.redzone_programs import check_transparency
from .judges import listed, plain, shown, word


@dataclass(frozen=True)
class Question:
    id: str
    chapter: str
    text: str
    choices: dict[str, str]  # letter -> what it says
    answer: Callable[[], str]  # the right letter, worked out by the lab now
    why: str  # shown once the question is answered, right or wrong


def _letter(choices: dict[str, str], text: str) -> str:
    letter = next((k for k, v in choices.items() if v == text), None)
    if letter is None:  # the lab's answer changed under the question: the question must change with it
        raise LabError(f"the lab now answers {text!r}, which is none of the question's choices")
    return letter


def _q(id, chapter, text, choices, pick, why) -> Question:
    return Question(id, chapter, text, choices, lambda: _letter(choices, pick()), why)


NOP10 = bytes.fromhex("662e0f1f840000000000")
PAGE_END = 0x401000  # a page boundary: a site at PAGE_END - length ends on the page's last byte

C_ACTION = {"a": "emulated", "b": "stepped out of line", "c": "refused at attach", "d": "optimised after its first hit"}
ACTION_WORD = {"emulate": C_ACTION["a"], "xol": C_ACTION["b"], "reject": C_ACTION["c"], "optimise": C_ACTION["d"]}
C_WORDS = {"a": "0", "b": "1", "c": "4", "d": "16"}
C_BILL = {"a": "1 syscall, no exception", "b": "1 exception", "c": "2 exceptions", "d": "nothing: the probe is refused"}
C_ERRNO = {"a": "-ENXIO", "b": "-EPROTO", "c": "SIGILL", "d": "0"}
C_CHILD = {"a": "exits normally, its hits counted", "b": "exits normally, its hits not counted",
           "c": "dies of SIGSEGV", "d": "dies of SIGILL"}
C_ARM = {"a": "1 exception", "b": "2 exceptions", "c": "nothing: the probe is refused"}
C_DEARER = {"a": "the uprobe on ret", "b": "the uretprobe on nop", "c": "they cost the same"}
C_EXC = {"a": "0", "b": "1", "c": "2", "d": "3"}
C_WRITES = {"a": "0", "b": "5", "c": "6", "d": "8"}
C_OFFSET = {"a": "0x401136", "b": "0x1136", "c": "0x40096", "d": "0x1040"}


def _bill_words(verdict: dict) -> str:
    if verdict["probe"] == "reject":
        return C_BILL["d"]
    if verdict["exceptions"] == 0 and verdict["syscalls"] == 1:
        return C_BILL["a"]
    return {1: C_BILL["b"], 2: C_BILL["c"]}.get(verdict["exceptions"], f"{verdict['exceptions']} exceptions")


def _sys_uprobe_from_own_code(release: str) -> str:
    """What syscall 336 returns to a caller outside any trampoline, under ``release``'s rules."""
    proc = make_process("x86_64", release_rules(release))
    regs = SimpleNamespace(ip=proc.program.resolve("producer_loop"))  # the program's own code
    return {-x86.ENXIO: "-ENXIO", -x86.EPROTO: "-EPROTO"}.get(optimize.sys_uprobe(proc, regs), "0")


def _forked_child(release: str) -> str:
    child = emulated_fork_report(release_rules(release))["uprobe_target_nop5"]
    if child["child"].startswith("exit 0"):
        return C_CHILD["a"] if child["child hits"] else C_CHILD["b"]
    return C_CHILD["c"] if child["child"] == "SIGSEGV" else C_CHILD["d"]


def _dearer_on_the_i7() -> str:
    profile = get_profile("intel-i7-1165g7")
    ret, uret = (profile.hit_interval(events_per_hit(b, "x86_64", "6.18"))[0] for b in ("uprobe-ret", "uretprobe-nop"))
    return C_DEARER["a"] if ret > uret else C_DEARER["b"] if uret > ret else C_DEARER["c"]


# Each question is about a case no chapter prints (another instruction, kernel, site or count): it asks for what
# the chapters it names teach, applied. A test holds the chapters' printed output to that.
QUESTIONS = [
    _q("Q1", "01, 03b", "On 7.3, a probe on `pause` (`f3 90`) is...", C_ACTION,
       lambda: ACTION_WORD[hit_verdict(bytes.fromhex("f390"), 0x401000, "7.3")["probe"]],
       "7.3's insn_is_nop() (8a5c6cbfe4a3, since 6.19) takes no PAUSE for a nop, and 0x90 is no longer a case of the "
       "branch switch: it is stepped. 6.18 still emulated it as prefix* + 0x90."),
    _q("Q2", "03", "How many of the red zone's sixteen 8-byte words below rsp does one optimised nop5 hit on 6.18 "
       "overwrite?", C_WORDS,
       lambda: str(len(check_transparency("redzone_leaf_nop5", "6.18").redzone_changed)),
       "The call's return address at rsp-8, then the trampoline's rcx, r11 and rax below it, down to rsp-0x20."),
    _q("Q3", "03, 03b", "On 7.3, a probed nop10 that ends on the last byte of its page. In the steady state a hit "
       "costs...", C_BILL, lambda: _bill_words(hit_verdict(NOP10, PAGE_END - len(NOP10), "7.3")),
       "All ten bytes are on one page, so can_optimize says yes: after the first hit it is lea; call, a syscall a "
       "hit. One byte later it would cross the page and be refused."),
    _q("Q4", "03b", "On a 7.1 kernel (which still optimises the nop5), a program's own code calls syscall 336 "
       "(`uprobe`) outside any trampoline. It gets...", C_ERRNO, lambda: _sys_uprobe_from_own_code("7.1"),
       "-EPROTO came with the nop10 scheme (7.3; 7.2.y from 7.2.6); before it sys_uprobe answers a stray caller "
       "-ENXIO, which is how libbpf tells the two apart."),
    _q("Q5", "03, 03b", "On 7.1, a process whose probed nop5 has been hit forks, and the child calls the probed "
       "function. The child...", C_CHILD, lambda: _forked_child("7.1"),
       "The child's text still calls [uprobes-trampoline], but that page is VM_DONTCOPY before 7.3 (d9a48e77f6fe; "
       "7.2.y: 7.2.6): the call goes to an unmapped page."),
    _q("Q6", "04", "On an upstream arm64 kernel, a probe on `ldr x0, [x1]` (`f9400020`) costs per hit...", C_ARM,
       lambda: {"simulate": C_ARM["a"], "xol": C_ARM["b"], "reject": C_ARM["c"]}[
           analyze("f9400020", arch="arm64")["action"]],
       "A load is neither a branch, a nop nor adr/adrp: stepped out of line, the BRK then the step exception."),
    _q("Q7", "02, 05", "On chapter 05's Intel i7-1165G7 profile, which hit costs more on 6.18: a uprobe on `ret` or "
       "a uretprobe on a function that starts with `nop`?", C_DEARER, _dearer_on_the_i7,
       "Two exceptions and a step (the ret) against one exception and one syscall (the nop and its return): an "
       "exception costs several syscalls."),
    _q("Q8", "01, 06", "Debian 13's kernel, 6.12.48: how many exceptions does a probe on a nop5 cost per hit?", C_EXC,
       lambda: f"{hit_verdict(X86_NOPS[5], 0x401000, release_rules('6.12.48'))['exceptions']:g}",
       "6.12 follows 6.11's rules: the nop5 is stepped (int3 and #DB). Emulating it came in 6.16."),
    _q("Q9", "07", "How many writes to lines other CPUs write does one `uprobe-ret` hit make on 6.15?", C_WRITES,
       lambda: f"{shared_writes('uprobe-ret', ['6.15'])['6.15']:g}",
       "The XOL slot's bitmap bit (set, clear), the probe's reference held over the step (get, put) and the "
       "instruction's copy into the shared XOL page; 6.15 dropped sighand->siglock."),
    _q("Q10", "08", "A program linked with `-no-pie` has `tick` at address 0x401136 in `.text`, whose address is "
       "0x401040 and whose offset in the file is 0x1040. Which offset does a uprobe on `tick` take?", C_OFFSET,
       lambda: f"{file_offset(0x401136, 0x401040, 0x1040):#x}",
       "The address, less the section's address, plus the section's offset in the file."),
]


class QuizText(str):
    def __repr__(self) -> str:
        return str(self)

    def _repr_markdown_(self) -> str:
        return str(self)


def _chapters(q: Question) -> str:
    return ("chapters " if "," in q.chapter else "chapter ") + q.chapter


def quiz() -> QuizText:
    """The questions, as markdown."""
    parts = []
    for q in QUESTIONS:
        choices = "\n".join(f"   - **{k}**: {v}" for k, v in q.choices.items())
        parts.append(f"{q.id[1:]}. {q.text} ({_chapters(q)})\n{choices}")
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


def question_id(key) -> str | None:
    """The question a key of the answers names: "Q3", "q3", "3" and 3 all name Q3 (quiz() numbers them 1 to 10);
    None for a key that names none."""
    if is_int(key):
        key = str(key)
    if not isinstance(key, str):
        return None
    key = key.strip().upper()
    key = key if key.startswith("Q") else "Q" + key
    return key if key in {q.id for q in QUESTIONS} else None


def check_quiz(answers: dict) -> QuizResult:
    """Score ``answers`` ({"Q1": "b", ...}; letters, any case). An unanswered question scores nothing."""
    if not isinstance(answers, dict):
        raise LabError('answer the quiz with a dict of letters: {"Q1": "b", "Q2": "a", ...}')
    unknown = [k for k in answers if question_id(k) is None]
    if unknown:
        raise LabError(f"no question {listed(unknown)}: the questions are Q1 to Q{len(QUESTIONS)}")
    given = {}
    for key, letter in answers.items():
        q = question_id(key)
        if q in given:  # "q1" and "Q1": which one the learner meant is theirs to say
            raise LabError(f"{shown(given[q][0])} and {shown(key)} both answer {q}: keep one of them")
        given[q] = key, letter
    score, lines = 0, []
    for q in QUESTIONS:
        said = given.get(q.id, (None, None))[1]
        try:
            said = plain(said)  # a numpy string or pd.NA as the str or None it stands for
        except Exception:  # a text too long to be a letter, ...: shown below as not a choice
            pass
        if said is None:
            lines.append(f"{q.id}: not answered")
            continue
        got = word(said) if isinstance(said, str) else None
        if got not in q.choices:
            lines.append(f"{q.id}: {shown(said)} is not one of {', '.join(q.choices)}")
            continue
        right = got == q.answer()
        score += right
        lines.append(f"{q.id}: {'right' if right else 'not yet'}. {q.why}" if right else
                     f"{q.id}: not yet (see {_chapters(q)}).")
    return QuizResult(score, lines)
