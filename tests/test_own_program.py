"""Probing a program of your own: the probe site from the ELF file, the kernels' verdicts, a real probe here."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from uprobe_lab import LabError
from uprobe_lab.own_program import (build_example, function_site, hit_verdict, loaded_library, measure_probe,
                                    overhead, perf_probe_count, probe_verdicts)
from uprobe_lab.verify import x86_kernels
from uprobe_lab.verify.x86 import host_rules
from native_support import native, perf_fds, require_bpf


@pytest.fixture(scope="module")
def tick(tmp_path_factory):
    try:
        return build_example(tmp_path_factory.mktemp("tick"))
    except LabError as err:
        pytest.skip(str(err))


def test_the_site_is_where_the_symbol_table_and_the_section_put_it(tick):
    site = function_site(tick, "tick")
    # readelf's view of the same symbol: its value, and its section's address and file offset
    out = subprocess.run(["readelf", "-sW", str(tick)], capture_output=True, text=True).stdout
    value = next(int(line.split()[1], 16) for line in out.splitlines() if line.endswith(" tick"))
    assert site.vaddr == value
    with open(tick, "rb") as f:
        f.seek(site.file_offset)
        assert f.read(8) == site.code[:8]
    assert site.listing()[-1].endswith("ret")  # the listing stops at the function's end


def test_a_program_linked_at_a_fixed_address_has_offset_and_address_apart(tmp_path):
    try:
        fixed = build_example(tmp_path, pie=False)
    except LabError as err:
        pytest.skip(str(err))
    site = function_site(fixed, "tick")
    # readelf's program headers, another route to the same offset: the LOAD segment holding the address maps
    # its p_vaddr to its p_offset in the file
    out = subprocess.run(["readelf", "-lW", str(fixed)], capture_output=True, text=True).stdout
    loads = [line.split() for line in out.splitlines() if line.split()[:1] == ["LOAD"]]
    offset, vaddr, filesz = next((int(l[1], 16), int(l[2], 16), int(l[4], 16)) for l in loads
                                 if int(l[2], 16) <= site.vaddr < int(l[2], 16) + int(l[4], 16))
    assert site.file_offset == site.vaddr - vaddr + offset != site.vaddr and site.vaddr >= 0x400000
    assert site.offset_formula() == (f"file offset = {site.vaddr:#x} - {site.section_addr:#x} (.text's address) + "
                                     f"{site.section_offset:#x} (.text's offset in the file) = {site.file_offset:#x}")
    assert site.vaddr - site.section_addr + site.section_offset == site.file_offset
    assert fixed.name == "tick-no-pie" and (tmp_path / "tick").exists() is False  # the PIE build's name is free


def test_the_chapters_stepped_hit_figure_is_the_recordings():
    """Chapter 08's "about 10 us" and 08.1's solution are both the recording's getpid hit (9565.7 ns)."""
    import nbformat
    from uprobe_lab.exercises.ch08 import recorded_hit_us
    from uprobe_lab.exercises import solution
    stepped = round(recorded_hit_us()["stepped"])
    chapter = nbformat.read(Path(__file__).resolve().parents[1] / "notebooks" / "08_your_program.ipynb", as_version=4)
    text = " ".join(" ".join(c.source.split()) for c in chapter.cells if c.cell_type == "markdown")
    assert stepped == 10 and f"has about {stepped} us" in text and f"cost about {stepped} us" in str(solution("08.1"))


def test_a_library_function_is_found_in_its_dynamic_symbols():
    libc = function_site(loaded_library("libc.so"), "getpid")
    assert libc.size > 0 and "getpid" == libc.symbol


@pytest.mark.parametrize("args, words", [
    (("/nonexistent/prog", "main"), "cannot open /nonexistent/prog"),
    ((__file__, "main"), "is not an ELF file"),
])
def test_a_bad_path_names_the_problem(args, words):
    with pytest.raises(LabError, match=words):
        function_site(*args)


def test_a_missing_symbol_names_the_way_to_list_them(tick):
    with pytest.raises(LabError, match="nm -D --defined-only"):
        function_site(tick, "no_such_function")


def test_verdicts_follow_the_first_instruction(tick):
    table = probe_verdicts(function_site(tick, "tick")).set_index("kernel")
    first = function_site(tick, "tick").listing(1)[0]
    stepped = table["probe"].eq("xol").all()
    # the compiler's first instruction decides: a push or a nop is emulated, most else stepped
    assert stepped == (" push " not in first and " nop" not in first)
    assert set(table.loc[table["probe"] == "xol", "exceptions"]) <= {2}
    assert set(table.loc[table["probe"] == "emulate", "exceptions"]) <= {1}


def test_where_a_nop10_sits_decides_its_verdict_as_on_a_real_7_2():
    # Debian's 7.2 under QEMU (the recorded x86 referee) refused the bench's page-crossing nop10 at attach
    real = next(r for r in x86_kernels.load_recording() if r["release"].startswith("7.2"))
    assert real["snapshots"]["uprobe-nop10"]["site_bytes"] == "488d642480"  # the nop10 it did optimise
    assert "ENOTSUPP" in real["snapshots"]["uprobe-nop10-pagecross"]["refused"]
    nop10 = bytes.fromhex("662e0f1f840000000000")
    assert hit_verdict(nop10, 0x401ffd, "7.2")["probe"] == "reject"  # bytes 3..9 on the next page
    assert hit_verdict(nop10, 0x401000, "7.2")["probe"] == "optimise"


def test_overhead_is_rate_times_time():
    assert overhead(200_000, 1000) == pytest.approx(0.2)
    assert overhead(200_000, 1000, cpus=4) == pytest.approx(0.05)
    with pytest.raises(LabError):
        overhead(-1, 10)


@native
def test_a_real_probe_counts_every_call_and_goes_away():
    require_bpf()
    before = len(os.listdir("/proc/self/fd"))
    got = measure_probe(function_site(loaded_library("libc.so"), "getpid"), os.getpid, calls=2000, repeats=2)
    assert got["hits"] >= got["calls"] == 4000  # this process's other getpid calls count too
    assert got["ns_per_call_with"] > got["ns_per_call_without"]
    assert len(os.listdir("/proc/self/fd")) == before and not perf_fds()


@native
def test_perf_probe_counts_the_calls_and_deletes_its_event(tick):
    if shutil.which("perf") is None:
        pytest.skip("perf is not installed")
    got = perf_probe_count(function_site(tick, "tick"), [str(tick), "5000"])
    assert got.get("count") == 5000, got
    listed = subprocess.run(["perf", "probe", "-l"], capture_output=True, text=True).stdout
    assert "lab_tick" not in listed


def test_the_interpreter_s_file_defines_the_interpreter_s_functions():
    from uprobe_lab.own_program import interpreter_file

    assert function_site(interpreter_file(), "PyObject_GetAttr").size > 0


def test_a_release_s_own_rules_give_a_verdict_too():
    # a host's kernel (its own name, the rules of its release) optimises as the modelled version does
    rules = host_rules("6.18.44-custom")
    assert rules.name != "6.18"
    modelled = hit_verdict(bytes.fromhex("0f1f440000"), 0x401000, "6.18")
    assert hit_verdict(bytes.fromhex("0f1f440000"), 0x401000, rules) == {
        **modelled, "kernel": rules.name, "why": modelled["why"].replace("on 6.18 ", f"on {rules.name} ")}
