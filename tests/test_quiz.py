"""The end-of-course quiz: each answer is the lab's, and the lab's is the one worked out by hand; no answer is a line
some chapter prints."""
import re
from pathlib import Path

import nbformat
import pytest

from uprobe_lab import LabError
from uprobe_lab.exercises.quiz import QUESTIONS, check_quiz, quiz

# Worked out from the kernel source and the chapters, not from the quiz's code:
# Q1 8a5c6cbfe4a3's insn_is_nop() refuses PAUSE (f3 90) and drops 0x90 from the branch switch: stepped (b);
# Q2 the call's return address at rsp-8, the trampoline's push rcx, r11, rax at -0x10, -0x18, -0x20: 4 words (c);
# Q3 ten bytes ending on the page's last byte do not cross it: can_optimize says yes, a syscall a hit (a);
# Q4 7.1 has 6.18's sys_uprobe, -ENXIO off the trampoline; -EPROTO came with 7.3's nop10 (a);
# Q5 [uprobes-trampoline] is VM_DONTCOPY until d9a48e77f6fe (7.3): the child calls an unmapped page, SIGSEGV (c);
# Q6 arm64 simulates branches, nop, adr/adrp; a load is stepped: BRK + step exception (b);
# Q7 on the i7 profile an exception costs several syscalls: 2 exceptions + a step > 1 exception + 1 syscall (a);
# Q8 6.12 runs 6.11's rules, the nop5 stepped: int3 + #DB (c);
# Q9 6.15's uprobe-ret: the XOL slot's bit set and cleared, the probe's reference got and put, the
# instruction copied into the slot's line of the shared XOL page: 5 (b);
# Q10 0x401136 - 0x401040 + 0x1040 = 0x1136 (b).
BY_HAND = {"Q1": "b", "Q2": "c", "Q3": "a", "Q4": "a", "Q5": "c", "Q6": "b", "Q7": "a", "Q8": "c", "Q9": "b",
           "Q10": "b"}


@pytest.mark.parametrize("question", QUESTIONS, ids=[q.id for q in QUESTIONS])
def test_the_lab_s_answer_is_the_one_worked_out_by_hand(question):
    assert question.answer() == BY_HAND[question.id]


def test_ten_questions_cover_the_chapters():
    assert len(QUESTIONS) == 10
    named = {c.strip() for q in QUESTIONS for c in q.chapter.split(",")}
    assert named >= {"01", "02", "03", "03b", "04", "05", "06", "07", "08"}
    assert "10. A program linked with `-no-pie`" in quiz() and "(chapters 01, 03b)" in quiz()


def test_a_full_score_and_a_wrong_answer_that_points_to_its_chapters():
    assert check_quiz(BY_HAND).score == 10
    result = check_quiz({**{k: v for k, v in BY_HAND.items() if k != "Q1"}, "q1": "a"})  # any case
    assert result.score == 9 and "Q1: not yet (see chapters 01, 03b)." in str(result)
    assert "PAUSE" not in str(result).split("Q2")[0]  # the miss does not say why


def test_no_option_says_why():
    """An option is a value to pick, not an argument for it: no "because", no kernel function's name."""
    for q in QUESTIONS:
        for text in q.choices.values():
            assert not re.search(r"because|since|emulated as|_", text), (q.id, text)


@pytest.mark.parametrize("answers, words", [("abc", "dict of letters"), ({"Q11": "a"}, "no question Q11")])
def test_answers_the_quiz_cannot_read_are_explained(answers, words):
    with pytest.raises(LabError, match=words):
        check_quiz(answers)
    assert "not one of a, b, c, d" in str(check_quiz({"Q1": "e"}))


def test_a_question_may_be_keyed_by_its_number():
    by_number = {int(k[1:]): v for k, v in BY_HAND.items()}
    assert check_quiz(by_number).score == 10
    assert check_quiz({"3": BY_HAND["Q3"]}).score == 1


# (where a chapter would name the question's case, the answer's words) per question: a line of a chapter that has
# both would answer the question by copying
PRINTED = {
    "Q1": (r"pause|f3 90", r"\bstepped\b|\bxol\b"),
    "Q2": (r"red.zone", r"(?<![\w.-])4 (?:of|words)"),
    "Q3": (r"last byte of (?:its|the) page|0x400ff6", r"syscall"),
    "Q4": (r"(?<![\d.])7\.1(?![\d])", r"ENXIO"),
    "Q5": (r"(?<![\d.])7\.1(?![\d])", r"SIGSEGV"),
    "Q6": (r"f9400020|ldr x0, \[x1\]", r"xol|stepped|2 exceptions"),
    "Q7": (r"uprobe-ret\b.*\buretprobe-nop\b|\buretprobe-nop\b.*\buprobe-ret\b", r"more|dearer|cheaper"),
    "Q8": (r"6\.12\.48", r"(?<![\w.])2(?![\w.])"),
    "Q9": (r"uprobe-ret.*6\.15|6\.15.*uprobe-ret", r"(?<![\w.])5(?![\w.])"),
    "Q10": (r"0x401136", r"0x1136"),
}
NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("[0-9][0-9]*_*.ipynb"))


def _answering_lines(text: str) -> list[str]:
    return [f"{qid}: {line.strip()}" for line in text.splitlines() for qid, (subject, answer) in PRINTED.items()
            if re.search(subject, line, re.I) and re.search(answer, line, re.I)]


def test_every_question_is_held_to_the_chapters():
    assert set(PRINTED) == {q.id for q in QUESTIONS}


def test_the_rule_finds_a_line_that_answers_a_question():
    assert _answering_lines("7.2: pause  xol  single-stepped") and not _answering_lines("7.2: pause, see 01")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_no_chapter_s_text_answers_a_quiz_question(path):
    from uprobe_lab.exercises.notebook import is_exercise_cell
    cells = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown" and not is_exercise_cell(c)]
    assert not _answering_lines("\n".join(c.source for c in cells))


@pytest.mark.notebooks
@pytest.mark.xdist_group("notebooks")
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_no_chapter_s_printed_output_answers_a_quiz_question(path):
    from notebook_runs import code_outputs, executed
    printed = []
    for out in code_outputs(executed(path.name)):
        printed.append(out.get("text", ""))
        data = out.get("data", {})
        printed.append(data.get("text/plain", "") if isinstance(data.get("text/plain", ""), str) else "")
    assert not _answering_lines("\n".join(printed))
