"""The stepper widget: Back is the same run one step shorter; the kernel selector rebuilds the run for that kernel."""

import uprobe_lab as ul
from uprobe_lab.views.stepper import replay, stepper_widget, warm_stepper
from uprobe_lab.views.uretprobe import ReturnStepper


def _lines(stepper):
    return [s.describe() for s in stepper.steps]


def test_back_returns_to_the_state_one_step_earlier():
    make = lambda: warm_stepper("uprobe_target_push", "6.18")  # noqa: E731
    box = stepper_widget(make)
    for _ in range(3):
        box.step()
    after_two = _lines(replay(make, 2))
    box.back()
    assert _lines(box.stepper()) == after_two and len(after_two) == 2
    assert box.stepper().pc == replay(make, 2).pc


def test_kernel_selector_rebuilds_for_that_kernel():
    box = stepper_widget(lambda k: warm_stepper("uprobe_target_nop5", k), kernels=list(ul.KERNELS), kernel="6.16")
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
    picker.value = "6.10"
    assert stepper.kernel == "6.10" and any(s.text == "int3" and "[uprobes]" in s.where for s in stepper.steps)
    picker.value = "6.11"
    assert any(s.text == "syscall" and "[uprobes]" in s.where for s in stepper.steps)
