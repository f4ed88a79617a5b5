"""Public functions given an argument of the wrong type say what they expected (a LabError), instead of an
AttributeError or TypeError from deep inside."""
import pytest

import uprobe_lab as ul
from uprobe_lab.native import run_native_benches

PROC = ul.new_process()

REFUSED = {
    "attach without a process": (lambda: ul.attach(None, "uprobe_target_nop", ul.CountingConsumer()),
                                 "needs a process to probe, got None: make one with new_process"),
    "attach at a text offset": (lambda: ul.attach(PROC, "uprobe_target_nop", ul.CountingConsumer(), offset="1"),
                                "offset into the symbol is an int of bytes, got '1'"),
    "attach at a float": (lambda: ul.attach(PROC, 4.5, ul.CountingConsumer()),
                          "probes a symbol by name .* or an address \\(an int\\), got 4.5"),
    "call None": (lambda: PROC.call(None), "call a symbol of the program by name .* got None"),
    "call an arm64 process with None": (lambda: ul.new_process("arm64").call(None), "got None"),
    "analyze a list": (lambda: ul.analyze([0x90]), "as hex text .* or bytes .* got \\[144\\]"),
    "a kernel as a float": (lambda: ul.new_process(kernel=6.10), "write the kernel version as a string, e.g. '6.10'"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_a_wrong_type_is_named_with_what_was_expected(case):
    call, message = REFUSED[case]
    with pytest.raises(ul.LabError, match=message):
        call()


def test_instructions_as_bytes_or_an_int_word_are_understood():
    assert ul.analyze(b"\x90")["action"] == ul.analyze("90")["action"]
    assert ul.analyze(0xD503201F, "arm64") == ul.analyze("d503201f", "arm64")


def test_native_benches_are_asked_for_by_a_list_of_names():
    with pytest.raises(ValueError, match=r"names is a list of bench names: run_native_benches\(\['uprobe-nop'\]\)"):
        run_native_benches("uprobe-nop")
    with pytest.raises(ValueError, match="iterations and repeats are ints, got '10' and 1"):
        run_native_benches(["uprobe-nop"], iterations="10", repeats=1)
