"""The uretprobe stepper and chart: the data they show."""
import matplotlib

matplotlib.use("Agg")

from uprobe_lab.views.uretprobe import ReturnStepper, plot_trampoline_events, trampoline_events  # noqa: E402
from uprobe_lab.errors import LabError  # noqa: E402
import pytest  # noqa: E402


def _step(stepper, insn):
    return next(s for s in stepper.steps if s.where.startswith("[uprobes]") and s.text.startswith(insn))


def test_stepper_shows_saved_slots_then_real_return_address():
    st = ReturnStepper("6.11")
    assert [s.text.split()[0] for s in st.steps if s.where.startswith("[uprobes]")] == [
        "push", "push", "push", "mov", "syscall", "pop", "pop", "ret"]
    after_pushes = _step(st, "push r11")
    whats = [w for _, _, w in after_pushes.stack]
    assert whats[3:6] == ["saved r11", "saved rcx", "saved rax"]
    sysc = _step(st, "syscall")
    assert sysc.has("sysret")
    rax_slot = [(v, w) for a, v, w in sysc.stack if w.startswith("real return address")]
    assert rax_slot and rax_slot[0][0] == st.steps[-1].ip  # the caller's ret is the real return address
    last = st.steps[-1]
    assert last.regs["cx"] == 0xCCCCCCCC and last.regs["r11"] == 0x11111111 and last.regs["ax"] == 0x42
    assert "saved rax" in st.text(st.index + 2)
    assert st._repr_mimebundle_()["text/plain"].startswith("step")


def test_stepper_broken_variant_loses_rcx_r11():
    st = ReturnStepper("6.11", saves_regs=False)
    last = st.steps[-1]
    assert last.regs["ax"] == 0x42
    assert last.regs["cx"] != 0xCCCCCCCC and last.regs["r11"] != 0x11111111


def test_stepper_610_int3_trampoline():
    st = ReturnStepper("6.10")
    tramp = [s for s in st.steps if s.where.startswith("[uprobes]")]
    assert [s.text for s in tramp] == ["int3"]
    assert tramp[0].has("exc_bp")


def test_trampoline_chart():
    df = trampoline_events(("uretprobe-nop",))
    assert df.set_index("kernel")[["exceptions", "syscalls", "sysret"]].to_dict("index") == {
        "6.10": {"exceptions": 2, "syscalls": 0, "sysret": 0},
        "6.11": {"exceptions": 1, "syscalls": 1, "sysret": 1}}
    fig = plot_trampoline_events(df)
    assert fig.axes[0].get_title().startswith("uretprobe")


def test_broken_title_only_claims_lost_registers_on_a_syscall_trampoline():
    box = ReturnStepper("6.11", saves_regs=False).widget()
    title, picker, slider, _ = box.children
    assert "broken trampoline: no rcx/r11 saves" in title.value
    picker.value = "6.10"  # the int3 trampoline: the walk ends with the caller's rcx/r11 intact
    st = box.stepper()
    assert st.steps[-1].regs["cx"] == 0xCCCCCCCC and st.steps[-1].regs["r11"] == 0x11111111
    assert "no rcx/r11 saves" not in title.value and "6.10 returns by int3" in title.value
    assert slider.max == len(st.steps) - 1 and st.text() == ReturnStepper("6.10", saves_regs=False).text()


def test_trampoline_chart_title_names_the_kernels_it_draws():
    assert plot_trampoline_events(trampoline_events(("uretprobe-nop",))).axes[0].get_title() == (
        "uretprobe: int3 trampoline (6.10) vs syscall trampoline (6.11)")
    df = trampoline_events(("uretprobe-nop",), kernels=("6.11", "6.18"))
    assert plot_trampoline_events(df).axes[0].get_title() == (
        "uretprobe: syscall trampoline (6.11) vs syscall trampoline (6.18)")


def test_stepper_lists_every_kernel_event_as_chapter_01s_stepper_does():
    # the entry int3: the probe lookup and the two 8-byte copies of the return address (read, then hijacked)
    entry = next(s for s in ReturnStepper("6.11").steps if s.has("ri_pushed"))
    text = ReturnStepper("6.11").text(entry.index)
    assert "kernel: probe_lookups" in text and text.count("kernel: uaccess_bytes x8") == 2
    # sys_uretprobe reads the three saves and writes them back: 24 bytes each way
    sysc = _step(ReturnStepper("6.11"), "syscall")
    assert ReturnStepper("6.11").text(sysc.index).count("kernel: uaccess_bytes x24") == 2


def test_widget_of_a_stepper_whose_kernel_was_set_to_one_the_lab_lacks_names_the_kernels():
    s = ReturnStepper("6.11")
    s.kernel = "6.12"  # a release, not one of the buttons
    with pytest.raises(LabError, match="the stepper's kernel must be one of 6.10, 6.11, .*got '6.12'"):
        s.widget()
