"""The end-of-course quiz: each answer is the lab's, and the lab's is the one worked out by hand."""
import pytest

from uprobe_lab import LabError
from uprobe_lab.exercises.quiz import QUESTIONS, check_quiz, quiz

# Worked out from the chapters and the kernel source, not from the quiz's code: ret is stepped (int3 + #DB);
# the trampoline pushes r11, rcx, rax; __NR_uretprobe 335; 6.18's nop5 becomes call (e8); 7.2's nop10 starts with
# lea -0x80(%rsp),%rsp; arm64 steps stp x29, x30; 6.14 drops mmap_lock; 4096 / 128 - 1 = 31 slots; uretprobe-nop
# 2 exceptions on 6.10, exception + syscall on 6.11; push is emulated, lea stepped.
BY_HAND = {"Q1": "c", "Q2": "a", "Q3": "a", "Q4": "b", "Q5": "a", "Q6": "b", "Q7": "d", "Q8": "b", "Q9": "b",
           "Q10": "a"}


@pytest.mark.parametrize("question", QUESTIONS, ids=[q.id for q in QUESTIONS])
def test_the_lab_s_answer_is_the_one_worked_out_by_hand(question):
    assert question.answer() == BY_HAND[question.id]


def test_ten_questions_cover_the_chapters():
    assert len(QUESTIONS) == 10 and {q.chapter for q in QUESTIONS} >= {"01", "02", "03", "04", "07"}
    assert "10. Which function entry" in quiz()


def test_a_full_score_and_a_wrong_answer_that_points_to_its_chapter():
    assert check_quiz(BY_HAND).score == 10
    result = check_quiz({**BY_HAND, "q1": "a"})
    assert result.score == 9 and "Q1: not yet (see chapter 01)." in str(result)
    assert "Q1" in str(result) and "stepped" not in str(result).split("Q2")[0]  # the miss does not say why


@pytest.mark.parametrize("answers, words", [("abc", "dict of letters"), ({"Q11": "a"}, "no question Q11")])
def test_answers_the_quiz_cannot_read_are_explained(answers, words):
    with pytest.raises(LabError, match=words):
        check_quiz(answers)
    assert "not one of a, b, c, d" in str(check_quiz({"Q1": "e"}))


def test_a_question_may_be_keyed_by_its_number():
    by_number = {int(k[1:]): v for k, v in BY_HAND.items()}
    assert check_quiz(by_number).score == 10
    assert check_quiz({"3": BY_HAND["Q3"]}).score == 1
