"""The helpers a notebook calls, given a value they do not take, raise a LabError that names the value, what is
taken and the way out, instead of a KeyError, IndexError, TraitError or JSONDecodeError from inside."""
import os
import threading

import pytest

import uprobe_lab as ul
from uprobe_lab import model
from uprobe_lab.bench import refused_row
from uprobe_lab.model.priors import load_host_recording
from uprobe_lab.native import calibrate
from uprobe_lab.native.example import load_example
from uprobe_lab.verify import arm64 as referee
from uprobe_lab.verify.x86_kernels import load_recording
from uprobe_lab.views import arm64 as arm64_views, many_cpus, native as native_views
from uprobe_lab.views import model as model_views

pytest.importorskip("ipywidgets")

ROW = {"bench": "uprobe-nop", "arch": "x86_64", "kernel": "6.18.1", "mops": 1.0}
LOADERS = {"load_example": load_example, "load_recording": load_recording, "referee.recorded": referee.recorded,
           "load_host_recording": load_host_recording}
FILES = {"not JSON": ("x.json", "not json{", "not JSON \\(Expecting value, line 1 column 1\\)"),
         "a directory": (None, None, "a directory, not a regular file"), "missing": ("nope.json", None, "no such file"),
         "JSON of another shape": ("x.json", "[1, 2]", "JSON without .*, so not such a recording")}

# each: a call (given a temporary directory) and a regex its message must match: the bad value, what is taken
CASES = {
    "lines_widget cpus=0": (lambda _: many_cpus.lines_widget(cpus=0), "CPU count must be one of 1, 2, 4, .* got 0; "
                            "lines_figure\\(bench, kernel, cpus\\) draws"),
    "lines_widget kernel 9.9": (lambda _: many_cpus.lines_widget(kernel="9.9"), "kernel must be one of 6.8, .*'9.9'"),
    "lines_widget bench": (lambda _: many_cpus.lines_widget(bench="nosuch"), "one of uprobe-nop, .* got 'nosuch'"),
    "lines_widget cpus=True": (lambda _: many_cpus.lines_widget(cpus=True), "got True"),
    "decode_widget stp": (lambda _: arm64_views.decode_widget(stp="bogus"), "stp must be one of xol, simulate, got "
                          "'bogus'; xol: stepped out of line"),
    "brk_install symbol": (lambda _: arm64_views.brk_install(symbol="nosuch"),
                           "no symbol 'nosuch' in this program; known symbols: .*uprobe_target_push"),
    "brk_install a list": (lambda _: arm64_views.brk_install(symbol=["x"]), "no symbol \\['x'\\]"),
    "price_sliders price": (lambda _: model_views.price_sliders(prices=("bogus",)),
                            "price must be one of user_insn, exception, .* got 'bogus'; the default is exception"),
    "with_prices": (lambda _: model.get_profile("intel").with_prices(bogus=1), "one of user_insn, .* got 'bogus'"),
    "get_profile mips": (lambda _: model.get_profile(None, arch="mips"),
                         "unknown architecture 'mips': the lab emulates x86_64, arm64"),
    "get_profile 5": (lambda _: model.get_profile(5), "unknown CPU profile 5; known: intel-i7-1165g7, .*for short"),
    "recorded_case unrecorded": (lambda _: referee.recorded_case(0x12345678),
                                 "12345678 is not among the recorded run's 452 forms .* uprobe_lab.analyze"),
    "recorded_case text": (lambda _: referee.recorded_case("zz"), "'zz' is not an arm64 instruction word"),
    "maps_lines {}": (lambda _: native_views.maps_lines({}), "host_bench_snapshot.* \\{\\} lacks kernel, "
                      "site_listing, trampolines, mappings"),
    "trampoline_listing None": (lambda _: native_views.trampoline_listing(None), "None lacks kernel"),
    "calibrate a row without kernel": (lambda _: calibrate.calibrate([{"bench": "uprobe-nop", "mops": -1}]),
                                       "row 0, \\{'bench': 'uprobe-nop', 'mops': -1\\}, lacks arch, kernel: each"),
    "calibrate mops=-1": (lambda _: calibrate.calibrate([{**ROW, "mops": -1}]), "row 0 \\('uprobe-nop'\\) has mops=-1: "
                          "a rate .* above 0 .* measure it again or leave the row out"),
    "calibrate mops=0": (lambda _: calibrate.calibrate([{**ROW, "mops": 0}]), "has mops=0: a rate"),
    "calibrate mops=nan": (lambda _: calibrate.calibrate([{**ROW, "mops": float("nan")}]), "has mops=nan: a rate"),
    "calibrate a refused row": (lambda _: calibrate.calibrate([refused_row("uprobe-nop10", "x86_64", "native",
                                                                           "6.18.1", "ENOTSUPP")]),
                                "row 0 \\('uprobe-nop10'\\) has no rate: refused by this kernel .* leave it out"),
    "calibrate no rows": (lambda _: calibrate.calibrate([]), "no rows to calibrate on: give a list of rows"),
    "calibrate a string": (lambda _: calibrate.calibrate("rows"), "the rows are a list, .* got 'rows'"),
    "events_for consumers=0": (lambda _: model.events_for("uprobe-nop", consumers=0),
                               "consumers=0 on uprobe-nop: a probe with no consumer is not installed .* "
                               "usermode-count"),
    "events_for consumers=-3": (lambda _: model.events_for("usermode-count", consumers=-3),
                                "consumers is an int from 1 \(0 for a bench without a probe\), got -3"),
    "events_for consumers=1.5": (lambda _: model.events_for("uprobe-nop", consumers=1.5), "got 1.5"),
    "predict consumers=0": (lambda _: model.get_profile("intel").predict("uprobe-nop", "6.18", consumers=0),
                            "consumers=0"),
}
for loader_name, loader in LOADERS.items():
    for what, (name, text, problem) in FILES.items():
        def call(tmp, loader=loader, name=name, text=text):
            path = tmp / name if name else tmp
            if text is not None:
                path.write_text(text)
            return loader(path)
        CASES[f"{loader_name} of {what}"] = (call, f"'/.*': {problem}; give the path of a file that .* wrote")


@pytest.mark.parametrize("case", CASES)
def test_a_helper_names_the_value_it_does_not_take(case, tmp_path):
    call, message = CASES[case]
    with pytest.raises(ul.LabError, match=message) as info:
        call(tmp_path)
    assert len(str(info.value)) < 700, str(info.value)  # a message, not a dump


@pytest.mark.parametrize("loader", LOADERS)
def test_a_recording_loader_refuses_a_fifo_without_waiting_for_a_writer(loader, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    raised = []
    thread = threading.Thread(target=lambda: raised.append(pytest.raises(ul.LabError, LOADERS[loader], fifo)),
                              daemon=True)
    thread.start()
    thread.join(10)
    if thread.is_alive():
        with open(fifo, "wb"):  # a writer comes and goes, so the blocked reader ends
            pass
        pytest.fail(f"{loader} blocked on a FIFO")
    assert str(raised[0].value).startswith(f"'{fifo}': a FIFO, not a regular file; give the path of a file that ")


def test_what_the_helpers_take_still_works():
    assert referee.recorded_case("a9bf7bfd") == referee.recorded_case(0xA9BF7BFD)
    assert model.get_profile(None, "arm64").name == model.get_profile("KUNPENG").name == "kunpeng916"
    assert model.events_for("uprobe-nop", consumers=3)["consumers"] == 3
    assert model.events_for("usermode-count", consumers=0) == model.events_for("usermode-count")  # no probe, none
    assert len(model_views.price_sliders("intel", prices="exception").children) == 2  # one slider and the chart
