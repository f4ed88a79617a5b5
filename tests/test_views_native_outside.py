"""Chapter 06's note on measured rows outside the model's intervals: it names them and the causes they point to."""
from types import SimpleNamespace

import pandas as pd

from uprobe_lab.views.native import outside_note


def _rows(errors, inside):
    benches = ["usermode-count", "uprobe-nop", "uprobe-push", "uprobe-ret", "uretprobe-nop"]
    return pd.DataFrame({"bench": benches, "model_error_pct": errors, "native_inside": inside})


def test_rows_inside_say_so():
    profile = SimpleNamespace(level_sd=0.02, warnings=[])
    assert outside_note(_rows([1, 2, 3, 4, 5], [True] * 5), profile).startswith("All 5 measured rows fall inside")


def test_a_machine_faster_than_the_prices_and_a_hypervisor_s_single_step_are_named():
    profile = SimpleNamespace(level_sd=0.05, warnings=["xol_step fitted at 6384.8 +- 216.9 ns, outside ..."])
    note = outside_note(_rows([-40.0, -22.0, -20.0, 15.0, -18.0], [False] * 5), profile)
    assert note.startswith("5 of 5 measured rows fall outside") and "-40.0% to +15.0%" in note
    assert "faster than the model" in note and "5.0% between rounds" in note
    assert "uprobe-ret" in note.split("stepped rows")[1] and "hypervisor intercepts the #DB" in note
    assert "usermode-count, the loop with no probe, is outside along with most probe rows" in note


def test_a_loop_timed_in_too_short_intervals_is_said_to_be_so():
    # 10_000 calls of a 700 M/s loop: 14.3 us an interval; every probe row inside, so the machine did not move
    profile = SimpleNamespace(level_sd=0.02, warnings=[])
    rows = _rows([40.0, 1.0, -1.0, 0.5, 0.2], [False, True, True, True, True])
    rows["native_interval_us"] = [10_000 / 700.0, 6000.0, 6000.0, 90_000.0, 7000.0]
    note = " ".join(outside_note(rows, profile).split())
    assert "lasted 14.3 us each" in note and "more iterations" in note
    assert "speed" not in note.split("usermode-count, the loop")[1].split("Run the chapter")[0]


def test_a_loop_outside_alone_is_not_blamed_on_the_cpu_s_speed():
    profile = SimpleNamespace(level_sd=0.02, warnings=[])
    rows = _rows([40.0, 1.0, -1.0, 0.5, 0.2], [False, True, True, True, True])
    rows["native_interval_us"] = [6000.0] * 5
    note = " ".join(outside_note(rows, profile).split())
    assert "the machine's speed did not move with it" in note and "was not the same in the two runs" not in note


def test_a_machine_slower_than_the_prices_is_named_too():
    profile = SimpleNamespace(level_sd=0.04, warnings=[])
    note = " ".join(outside_note(_rows([32.0, 57.0, 10.0, 22.0, 8.0], [False] * 5), profile).split())
    assert "most probe rows are slower than the model: the machine ran slower while the table" in note
    assert "faster than the model" not in note
