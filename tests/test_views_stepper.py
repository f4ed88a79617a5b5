"""The stepper widget: Back is the same run one step shorter; the kernel selector rebuilds the run for that kernel."""

import re

import pytest

import uprobe_lab as ul
from uprobe_lab.errors import LabError
from uprobe_lab.views.stepper import probed_stepper, replay, stepper_widget
from uprobe_lab.views.uretprobe import ReturnStepper


def _lines(stepper):
    return [s.describe() for s in stepper.steps]


def test_back_returns_to_the_state_one_step_earlier():
    make = lambda: probed_stepper("uprobe_target_push", "6.18", warm=True)  # noqa: E731
    box = stepper_widget(make)
    for _ in range(3):
        box.step()
    after_two = _lines(replay(make, 2))
    box.back()
    assert _lines(box.stepper()) == after_two and len(after_two) == 2
    assert box.stepper().pc == replay(make, 2).pc


def test_kernel_selector_rebuilds_for_that_kernel():
    box = stepper_widget(lambda k: probed_stepper("uprobe_target_nop5", k, warm=True), kernels=list(ul.KERNELS),
                         kernel="6.16")
    box.step()
    assert box.stepper().steps[0].text == "int3"  # 6.16: the probe is still an int3, the nop emulated in the trap
    box.picker.value = "6.18"
    assert box.stepper().steps == []  # a new kernel starts again
    box.step()
    assert box.stepper().steps[0].text.startswith("call")  # 6.18: the site became a call into the trampoline


def test_uretprobe_stepper_switches_between_the_int3_and_the_syscall_trampoline():
    stepper = ReturnStepper("6.11")
    box = stepper.widget()
    picker = next(c for c in box.children if getattr(c, "description", "") == "kernel")
    cells_steps = [s.describe() for s in stepper.steps]
    picker.value = "6.10"
    own = box.stepper()
    assert own.kernel == "6.10" and any(s.text == "int3" and "[uprobes]" in s.where for s in own.steps)
    assert "int3" in box.output.value and "[uprobes]" in box.output.value  # the trampoline's first step, shown
    # the widget's pick is its own: the cells that read ``stepper`` still see the 6.11 call they built
    assert stepper.kernel == "6.11" and [s.describe() for s in stepper.steps] == cells_steps
    picker.value = "6.11"
    assert any(s.text == "syscall" and "[uprobes]" in s.where for s in own.steps)


def _buttons(box):
    return {b.description: b for c in box.children if hasattr(c, "children") for b in c.children}


def test_a_kernel_that_refuses_the_probe_says_so_instead_of_keeping_the_last_walk():
    make = lambda k: probed_stepper("uprobe_target_nop10", k, warm=True)  # noqa: E731 - nop10 probeable from 7.3
    box = stepper_widget(make, kernels=list(ul.KERNELS), kernel="7.3")
    buttons = _buttons(box)
    buttons["Step"].click()
    buttons["Step"].click()
    box.picker.value = "6.18"  # mid-walk, to a kernel whose decoder refuses the cs prefix
    assert box.stepper() is None
    assert "cannot step this walk" in box.output.value and "is_prefix_bad" in box.output.value
    assert "pick another kernel" in box.output.value and "6.18" in box.output.value
    assert all(buttons[b].disabled for b in ("Step", "Back", "Run to end"))
    for b in ("Step", "Back", "Run to end", "Reset"):  # pressed anyway (click() ignores disabled): no exception
        buttons[b].click()
    assert box.stepper() is None
    box.picker.value = "7.3"
    assert box.stepper().steps == [] and "cannot step" not in box.output.value
    buttons["Step"].click()
    assert _lines(box.stepper()) == _lines(replay(lambda: make("7.3"), 1))


def test_a_refused_starting_kernel_builds_the_widget_with_the_reason():
    box = stepper_widget(lambda k: probed_stepper("uprobe_target_nop10", k, warm=True), kernels=list(ul.KERNELS),
                         kernel="6.16")
    assert box.stepper() is None and "is_prefix_bad" in box.output.value
    box.picker.value = "7.3"
    assert box.stepper() is not None and not _buttons(box)["Step"].disabled


def test_back_at_the_start_and_step_after_the_end_keep_a_fresh_walk():
    make = lambda: probed_stepper("uprobe_target_push", "6.18", warm=True)  # noqa: E731
    box = stepper_widget(make)
    buttons = _buttons(box)
    buttons["Back"].click()
    assert box.stepper().steps == [] and buttons["Back"].disabled
    buttons["Run to end"].click()
    done = _lines(box.stepper())
    buttons["Step"].click()
    assert _lines(box.stepper()) == done == _lines(replay(make, 10_000)) and buttons["Step"].disabled
    buttons["Reset"].click()
    assert box.stepper().steps == [] and "(not started)" in box.output.value


def test_a_widget_over_a_shared_process_is_refused_when_built():
    """``lambda: proc.stepper(...)`` hands every Reset the process other cells run: refused, with the way out."""
    proc = ul.new_process(kernel="6.18", record=True)
    ul.attach(proc, "uprobe_target_push", ul.CountingConsumer())
    with pytest.raises(ul.LabError, match="same process twice.*probed_stepper"):
        stepper_widget(lambda: proc.stepper("uprobe_target_push"))


def test_a_stepper_whose_process_another_call_ran_refuses_to_step():
    """A stepper going on from its own pc over the stack another call has left would ret to 0 (SIGSEGV) and break
    chapter 01's widget: the stale stepper refuses and says why; the new one runs to the end."""
    proc = ul.new_process(kernel="6.18", record=True)
    ul.attach(proc, "uprobe_target_push", ul.CountingConsumer())
    stale = proc.stepper("uprobe_target_push")
    stale.step()
    assert proc.stepper("uprobe_target_push").run_to_end()[-1].signal is None
    with pytest.raises(ul.LabError, match="another call ran this stepper's process"):
        stale.step()
    assert proc.signal is None and len(stale.steps) == 1
    again = proc.stepper("uprobe_target_push").run_to_end()
    assert again[-1].done and again[-1].signal is None


def test_the_step_log_is_styled_by_its_class_monospace_and_at_least_16px():
    box = stepper_widget(lambda: probed_stepper("uprobe_target_push", "6.18"))
    box.step()
    assert "font-size:12px" not in box.output.value.replace(" ", "")
    assert "<div class='uprobe-lab-steplog'>step 0:" in box.output.value
    rule = re.search(r"\.uprobe-lab-steplog\) \{([^}]*)\}", box.output.value).group(1)
    assert "monospace" in rule and int(re.search(r"font-size: (\d+)px", rule).group(1)) >= 16


def test_reset_after_a_lab_error_or_a_signal_mid_walk_gives_a_walk_that_steps():
    box = stepper_widget(lambda: probed_stepper("uprobe_target_ret", "6.18"))
    buttons = _buttons(box)
    buttons["Step"].click()
    box.stepper().proc.call("uprobe_target_ret")  # a cell reaching into the widget's process mid-walk
    buttons["Step"].click()
    assert box.stepper() is None and "another call ran this stepper&#x27;s process" in box.output.value
    assert "press Reset" in box.output.value and buttons["Step"].disabled and not buttons["Reset"].disabled
    buttons["Reset"].click()
    assert box.stepper().steps == [] and not buttons["Step"].disabled
    buttons["Step"].click()
    box.stepper().proc.force_sig("SIGKILL", "killed from outside")  # the walk dies of a signal
    buttons["Step"].click()  # ignored: the walk is over
    assert box.stepper().done and buttons["Step"].disabled and "finished" in box.output.value
    buttons["Reset"].click()
    assert box.stepper().proc.signal is None and not buttons["Step"].disabled
    buttons["Run to end"].click()
    assert box.stepper().done and box.stepper().steps[-1].signal is None


@pytest.mark.parametrize("kernel", ["6.99", "6.12", 6.18])
def test_a_kernel_the_widgets_buttons_lack_is_refused_by_name(kernel):
    """A learner editing chapter 01's kernel="6.16" gets the kernels to choose from, not ipywidgets' TraitError."""
    make = lambda k: probed_stepper("uprobe_target_push", k)  # noqa: E731
    with pytest.raises(LabError, match=f"the widget's kernel must be one of 6.11, 6.18, got .*{kernel}.*give one of"):
        stepper_widget(make, kernels=("6.11", "6.18"), kernel=kernel)


def test_a_kernel_without_kernels_to_pick_from_is_refused():
    with pytest.raises(LabError, match="kernel='6.18' picks the first of the widget's kernels: give kernels too"):
        stepper_widget(lambda: probed_stepper("uprobe_target_push", "6.18"), kernel="6.18")
