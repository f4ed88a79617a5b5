"""Whatever a learner passes to check() or check_quiz(), the answer is judged, never raised: numpy and pandas
values are read as the Python values they hold, and NaN, NA, huge numbers and texts, bytes, containers and objects
whose own methods raise get a verdict with a short reason."""
import functools
import itertools

import numpy as np
import pandas as pd
import pytest

from uprobe_lab import LabError, exercises
from uprobe_lab.exercises import core
from uprobe_lab.exercises.quiz import check_quiz

IDS = list(exercises.all_exercises())
LONGEST_MESSAGE = 700  # characters: a reason names the problem and the way out, it does not echo a value whole


def raising(*methods):
    """An object whose ``methods`` raise, as a learner's own class with a bug in them would."""
    def fail(*_):
        raise RuntimeError(f"{methods[0]} fails")
    return type("Answer", (), dict.fromkeys(methods, fail))()


def nested(depth: int):
    value = 1
    for _ in range(depth):
        value = [value]
    return value


def looped(container):
    container.append(container) if isinstance(container, list) else container.update(me=container)
    return container


# Values no question takes: each gets a verdict "not yet" with a reason, at the top of the answer and in every slot
# of a worked answer (a tuple's item, a dict's value, an extra dict key). The lambdas make a fresh value each time
# (a generator is read once).
JUNK = {
    "nan": lambda: float("nan"), "numpy nan": lambda: np.float64("nan"), "inf": lambda: float("inf"),
    "-inf": lambda: -float("inf"), "'nan'": lambda: "nan", "'-inf'": lambda: "-inf", "'1e999'": lambda: "1e999",
    "10**5000": lambda: 10 ** 5000, "-10**5000": lambda: -10 ** 5000, "2**1100": lambda: 2 ** 1100,
    "hex of 100k digits": lambda: "0x" + "f" * 100_000, "hex of 250 digits": lambda: "0x" + "f" * 250,
    "100k digits": lambda: "9" * 100_000, "1M characters": lambda: "x" * 1_000_000,
    "bytes": lambda: b"\xff" * 1000, "bytearray": lambda: bytearray(b"\x00"), "NUL": lambda: "a\0b",
    "complex": lambda: 1 + 2j, "object": object, "type": lambda: int, "function": lambda: print,
    "empty dict": dict, "dict of None": lambda: {None: None}, "empty set": set, "empty list": list,
    "list of None": lambda: [None], "nested 10 deep": lambda: nested(10), "nested 3000 deep": lambda: nested(3000),
    "list holding itself": lambda: looped([]), "dict holding itself": lambda: looped({}),
    "endless generator": lambda: itertools.count(), "100k-item list": lambda: list(range(100_000)),
    "array of 3": lambda: np.array([1, 2, 3]), "empty array": lambda: np.array([]), "2x2 array": lambda: np.eye(2),
    "array of strings": lambda: np.array(["a", "b"]), "Series of 2": lambda: pd.Series([1, 2]),
    "empty Series": lambda: pd.Series([], dtype=float), "DataFrame of 2": lambda: pd.DataFrame({"a": [1, 2]}),
    "Index": lambda: pd.Index([1, 2]), "Timestamp": lambda: pd.Timestamp(0),
    "__eq__ raises": lambda: raising("__eq__"), "__bool__ raises": lambda: raising("__bool__"),
    "__str__ and __repr__ raise": lambda: raising("__str__", "__repr__", "__format__"),
    "__hash__ raises": lambda: raising("__hash__"), "__iter__ raises": lambda: raising("__iter__"),
    "__len__ raises": lambda: raising("__len__", "__iter__"), "__float__ raises": lambda: raising("__float__"),
}
NO_ANSWER = {"None": None, "Ellipsis": ..., "''": "", "spaces": " \n ", "pd.NA": pd.NA, "pd.NaT": pd.NaT,
             "Series of NA": pd.Series([pd.NA]), "numpy str of spaces": np.str_("  ")}


@pytest.fixture(scope="module")
def worked():
    """Each exercise's worked answer, and its expected() asked once (the lab's answer does not change between
    calls; asking it for each of thousands of answers would take minutes)."""
    answers = {}
    with pytest.MonkeyPatch.context() as mp:
        for ex_id in IDS:
            ex = exercises.get(ex_id)
            scope = {}
            exec(ex.solution, scope)
            answers[ex_id] = scope["answer"]
            mp.setattr(ex, "expected", functools.cache(ex.expected))
        mp.setattr(core, "_MISSES", {})
        yield answers


def slots(answer):
    """Where a value can stand in ``answer``: (name, a function putting a value there)."""
    yield "the answer", lambda v: v
    if isinstance(answer, dict):
        first = next(iter(answer))
        yield f"[{first!r}]", lambda v: {**answer, first: v}
        yield "a key", lambda v: {**answer, v: 1}
    if isinstance(answer, (tuple, list)):
        for i, item in enumerate(answer):
            yield f"[{i}]", lambda v, i=i: answer[:i] + type(answer)([v]) + answer[i + 1:]
            if isinstance(item, dict):
                first = next(iter(item))
                yield f"[{i}][{first!r}]", lambda v, i=i, first=first: answer[:i] + type(answer)(
                    [{**answer[i], first: v}]) + answer[i + 1:]


def hashable(value) -> bool:
    try:
        hash(value)
        return True
    except Exception:
        return False


@pytest.mark.parametrize("name", JUNK)
def test_a_value_no_question_takes_gets_a_reason_in_every_slot(name, worked):
    for ex_id in IDS:
        for where, put in slots(worked[ex_id]):
            value = JUNK[name]()
            if where == "a key" and not hashable(value):
                continue
            verdict = exercises.check(ex_id, put(value))
            case = f"{ex_id} {where}: {verdict.message}"
            assert isinstance(verdict, core.Verdict) and not verdict.ok and verdict.answered, case
            assert verdict.message and len(verdict.message) <= LONGEST_MESSAGE, case
            assert "nan is too" not in verdict.message and "inf is too" not in verdict.message, case
            assert str(verdict) and verdict._repr_html_()


@pytest.mark.parametrize("name", NO_ANSWER)
def test_a_missing_value_is_no_answer_yet(name, worked):
    for ex_id in IDS:
        verdict = exercises.check(ex_id, NO_ANSWER[name])
        assert not verdict.ok and not verdict.answered, (ex_id, verdict)


# How a number comes out of numpy and pandas: each holds the one value it is given
DRESS = {"numpy int": lambda x: np.int64(x) if float(x).is_integer() else np.float64(x), "numpy float": np.float64,
         "0-d array": np.array, "array of 1": lambda x: np.array([x]), "1x1 array": lambda x: np.array([[x]]),
         "Series of 1": lambda x: pd.Series([x]), "1x1 DataFrame": lambda x: pd.DataFrame({"a": [x]}),
         "numpy str": lambda x: np.str_(x)}


@pytest.mark.parametrize("dress", DRESS)
def test_a_number_from_numpy_or_pandas_is_read_as_its_value(dress, worked, monkeypatch):
    dressed = DRESS[dress]
    scalar = [i for i in IDS if isinstance(worked[i], (int, float)) and not isinstance(worked[i], bool)]
    per_item = [i for i in IDS if isinstance(worked[i], dict) and worked[i]
                and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in worked[i].values())]
    assert {"02.5", "03.2", "05.1"} <= set(scalar) and {"00.1", "03.1", "08.2"} <= set(per_item)
    for ex_id in scalar:
        assert exercises.check(ex_id, dressed(worked[ex_id])).ok, ex_id
        monkeypatch.setattr(core, "_MISSES", {})
        wrong = worked[ex_id] + 1000
        assert exercises.check(ex_id, dressed(wrong)).message == exercises.check(ex_id, wrong).message, ex_id
    for ex_id in per_item:
        assert exercises.check(ex_id, {k: dressed(v) for k, v in worked[ex_id].items()}).ok, ex_id


# (a value given for 02.5, whose answer is a number (24, the bytes sys_uretprobe adds to sp), and the words of
# its reason)
NAMED = {
    "array of 3": (np.array([24, 25, 26]), "an array of 3 values: give one value"),
    "Series of 2": (pd.Series([24, 25]), "a Series of 2 values: give one value"),
    "DataFrame of 2": (pd.DataFrame({"a": [24], "b": [25]}), "a DataFrame of 2 values"),
    "empty array": (np.array([]), "an array of 0 values"),
    "nan": (float("nan"), "nan is not a number (NaN)"), "'NaN'": ("NaN", "'NaN' is not a number (NaN)"),
    "numpy nan": (np.float64("nan"), "nan is not a number (NaN)"), "'-inf'": ("-inf", "'-inf' is beyond any answer"),
    "10**5000": (10 ** 5000, "an int of 16,610 bits is beyond any answer here"),  # log2(10) * 5000 = 16,609.6
    "hex of 100k digits": ("0x" + "f" * 100_000, "a text of 100,002 characters"),
    "100k digits": ("9" * 100_000, "a text of 100,000 characters"),
    "hex of 190 digits": ("0x" + "f" * 190, "is too high"),
    "2**64": (2 ** 64, "1.84467e+19 is too high"),  # 2**64 = 18,446,744,073,709,551,616
    "40-item list": (list(range(40)), "a list of 40 items"),
    "endless generator": (itertools.count(), "an iterator of more than 32 items"),
    "unprintable": (raising("__str__", "__repr__", "__format__"),
                    "The checker cannot read an object (Answer) that cannot be printed"),
}


@pytest.mark.parametrize("case", NAMED)
def test_what_is_wrong_with_such_a_value_is_named(case, worked):
    value, words = NAMED[case]
    verdict = exercises.check("02.5", value)
    assert not verdict.ok and words in verdict.message, verdict.message


@pytest.mark.parametrize("ex_id", [None, 1.1, b"01.1", ["01.1"], "x" * 100_000, "01.1" * 25_000,
                                   raising("__str__", "__repr__")],
                         ids=["None", "float", "bytes", "list", "100k x", "100k of ids", "repr raises"])
def test_an_exercise_id_that_names_none_is_refused_briefly(ex_id):
    with pytest.raises(LabError) as err:
        exercises.check(ex_id, 1)
    assert len(str(err.value)) < LONGEST_MESSAGE and ("the exercises are 00.1" in str(err.value)
                                                      or "a string such as '01.1'" in str(err.value))


# (answers, the score, a line of the result); the questions' letters are the quiz test's hand-worked ones: Q1 b
QUIZ = {
    "an int key": ({1: "b"}, 1, "Q1: right"), "a number as text": ({" 1 ": "b"}, 1, "Q1: right"),
    "lower case": ({"q1": "B"}, 1, "Q1: right"), "a numpy letter": ({"Q1": np.str_("b")}, 1, "Q1: right"),
    "a letter in quotes": ({"Q1": "'b'"}, 1, "Q1: right"), "pd.NA": ({"Q1": pd.NA}, 0, "Q1: not answered"),
    "None": ({"Q1": None}, 0, "Q1: not answered"), "a number": ({"Q1": 3}, 0, "Q1: 3 is not one of a, b, c, d"),
    "a huge text": ({"Q1": "c" * 100_000}, 0, "(100,002 characters) is not one of a, b, c, d"),
    "__eq__ raises": ({"Q1": raising("__eq__")}, 0, "is not one of a, b, c, d"),
    "__str__ raises": ({"Q1": raising("__str__", "__repr__")}, 0, "(Answer) that cannot be printed is not one of"),
    "a list": ({"Q1": ["c"]}, 0, "Q1: ['c'] is not one of"),
}
QUIZ_REFUSED = {
    "q1 and Q1": ({"q1": "c", "Q1": "a"}, "'q1' and 'Q1' both answer Q1: keep one of them"),
    "1 and Q1": ({1: "c", "Q1": "c"}, "1 and 'Q1' both answer Q1"),
    "no question 11": ({11: "a"}, "no question 11: the questions are Q1 to Q10"),
    "a huge key": ({"Q" * 100_000: "a"}, "(100,002 characters): the questions are Q1 to Q10"),
    "True": ({True: "a"}, "no question True"), "None": ({None: "a"}, "no question None"),
    "a float": ({1.0: "a"}, "no question 1.0"), "a tuple": ({("Q1",): "a"}, "no question ('Q1',)"),
    "a key that cannot be printed": ({raising("__str__", "__repr__"): "a"}, "no question an object (Answer)"),
    "a list": (["c"], "answer the quiz with a dict of letters"),
}


@pytest.mark.parametrize("case", QUIZ)
def test_the_quiz_reads_any_answer(case):
    answers, score, line = QUIZ[case]
    result = check_quiz(answers)
    assert result.score == score and line in str(result), str(result)
    assert len(str(result)) < 2000


@pytest.mark.parametrize("case", QUIZ_REFUSED)
def test_quiz_answers_that_name_no_question_or_one_twice_are_refused(case):
    answers, words = QUIZ_REFUSED[case]
    with pytest.raises(LabError) as err:
        check_quiz(answers)
    assert words in str(err.value) and len(str(err.value)) < LONGEST_MESSAGE, str(err.value)
