"""A LabError inside a widget's callback shows in the widget as the command line prints it; a bug still raises.

Headless (no IPython shell), ipywidgets lets an observer's exception out of the assignment that set the value and
logs a click's with its traceback: where a kernel would show a traceback, these tests see an exception or a log
record."""
from __future__ import annotations

import html
import re
import sys

import pytest

from uprobe_lab import cli, model
from uprobe_lab.errors import LabError
from uprobe_lab.views import arm64
from uprobe_lab.views.stepper import probed_stepper, stepper_widget

ipywidgets = pytest.importorskip("ipywidgets")
from test_widgets_driven import lab_callbacks  # noqa: E402 - needs ipywidgets, as it does


def text_of(value: str) -> str:
    return html.unescape(re.sub(r"<[^>]*>", "", value))


def decode_parts(box):
    (row, out) = box.children
    (text, mode) = row.children
    return text, mode, out


def test_a_typo_in_the_decode_widget_is_one_line_the_command_lines_words(capsys, caplog):
    text, mode, out = decode_parts(arm64.decode_widget())
    assert cli.main(["analyze", "--arch", "arm64", "not-a-word"]) == 2
    said = capsys.readouterr().err.strip()
    assert said.startswith("error: 'not-a-word' is not an arm64 instruction word; write all 8 hex digits")
    text.value = "not-a-word"  # an observer's exception would come out of this assignment
    assert text_of(out.value) == said and "Traceback" not in out.value and not caplog.records
    text.value = "a9bf7bfd"  # fixed: the report is back
    assert "exact 'stp x29, x30, [sp, #imm]!': yes" in text_of(out.value)


def test_a_bug_in_a_callback_raises_with_its_traceback(monkeypatch):
    text, mode, out = decode_parts(arm64.decode_widget())
    before = out.value

    def buggy(word, stp):
        return 1 // 0 if word == "d503201f" else before

    monkeypatch.setattr(arm64, "decode_report", buggy)
    with pytest.raises(ZeroDivisionError):  # a bug is not dressed up as a learner's mistake
        text.value = "d503201f"
    assert out.value == before


def test_a_bug_behind_a_button_shows_its_traceback_and_a_lab_error_does_not(monkeypatch):
    """The stepper's Step: a LabError from the step shows as the command line's words; a bug goes to ipywidgets,
    which in a kernel hands it to IPython's showtraceback."""
    import ipywidgets.widgets.widget as widget_module

    def make(fail):
        stepper = probed_stepper("uprobe_target_push", "6.18")

        def step():
            raise fail
        stepper.step = step
        return stepper

    shown = []

    class Shell:  # the kernel's shell, as ipywidgets meets it
        def showtraceback(self):
            shown.append(sys.exc_info()[0])

    monkeypatch.setattr(widget_module, "get_ipython", Shell)

    def click_step(box):
        next(b for b in box.children[-2].children if b.description == "Step").click()

    box = stepper_widget(lambda: make(LabError("the probe went away; register it again")))
    click_step(box)
    assert shown == [] and text_of(box.output.value).startswith("error: the probe went away; register it again")

    box = stepper_widget(lambda: make(RuntimeError("a bug")))
    click_step(box)
    assert shown == [RuntimeError] and "error:" not in box.output.value


def test_the_presenters_seed_table_picker_goes_through_the_same_decorator():
    """Only a lecture shows it (chapter 05 presenting), so tests/test_widgets_driven.py never meets it."""
    from uprobe_lab.views.charts import seed_table_picker

    box = seed_table_picker(model.reproduction())
    (show,) = lab_callbacks(box)
    assert show.shows_lab_errors and "data:image/svg+xml" in box.children[1].value
