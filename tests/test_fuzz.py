"""The differential fuzzer: quick profile, the red-zone case it must detect, and a bug it must report."""
import pytest

from uprobe_lab import fuzz as fz
from uprobe_lab.program import Assembler
from uprobe_lab.x86 import asm
from uprobe_lab.x86.randprog import FUZZ_DATA, FUZZ_REPEATS

X86_MECHANISMS = {"emulate", "xol", "uretprobe-int3", "uretprobe-syscall", "nop5-opt"}  # nop10-opt: below
ARM64_MECHANISMS = {"simulate", "xol", "stp-simulate", "stp-xol", "uretprobe"}


@pytest.fixture(scope="module")
def quick():
    return fz.fuzz("all", programs=8, seed=0, sites=6)


def test_quick_profile_has_no_bug_divergences(quick):
    assert quick.programs == 16 and quick.probe_runs > 500
    assert not quick.bugs, "\n\n".join(map(str, quick.bugs))
    assert set(quick.divergences) <= {"red-zone"}
    assert all(c.config == "6.18" and c.mechanism == "nop5-opt" for c in quick.cases)


def test_quick_profile_exercises_every_mechanism_and_config(quick):
    seen = {m.split("/", 1)[1] for m in quick.mechanisms if m.startswith("x86_64/")}
    assert X86_MECHANISMS <= seen
    assert {m.split("/", 1)[1] for m in quick.mechanisms if m.startswith("arm64/")} == ARM64_MECHANISMS
    assert {c.label for c in fz.TARGETS["x86_64"].configs() + fz.TARGETS["arm64"].configs()} == {k.split("/", 1)[1] for k in quick.configs}


def test_progress_is_called_with_the_result_so_far_after_each_program():
    seen = []
    result = fz.fuzz("x86_64", programs=2, seed=0, sites=1, size=4, progress=lambda r: seen.append(r.programs))
    assert seen == [1, 2] and result.programs == 2


def redzone_program(site=asm.X86_NOPS[5]):
    """fuzz_main calls a leaf 3 times; the leaf keeps a value at -8(%rsp) across a nop5 (or ``site``) and stores it."""
    a = Assembler("x86_64", 0x400000)
    a.function("fuzz_main")
    for _ in range(FUZZ_REPEATS):
        asm.call(a, "fuzz_target")
    a.emit(asm.RET)
    a.align(16, asm.INT3)
    a.function("fuzz_target")
    a.emit(asm.mov_imm64("rbx", FUZZ_DATA) + asm.mov_imm64("rdi", 0x1122334455667788))
    a.emit(asm.mov_store_rsp_disp8("rdi", -8))
    a.emit(site)  # the probe site
    a.emit(asm.mov_load_rsp_disp8("rax", -8) + asm.mov_store("rbx", 0, "rax") + asm.RET)
    a.end_function()
    return a.link()


def test_constructed_redzone_case_is_detected_on_6_18_only():
    program = redzone_program()
    site = program.resolve("fuzz_target") + 10 + 10 + 5
    per = {}
    for config in fz.TARGETS["x86_64"].configs():
        r = fz.fuzz_program_once("x86_64", 0, configs=[config], sites=0, program=program)
        per[config.label] = r
        assert not r.bugs, "\n".join(map(str, r.bugs))
    assert per["6.18"].divergences["red-zone"] >= 1
    case = next(c for c in per["6.18"].cases if c.probe == f"entry@{site:#x}")
    assert case.mechanism == "nop5-opt"
    ret_addr = (site + 5).to_bytes(8, "little").hex()  # the call's return address replaced the live value
    assert f"data {FUZZ_DATA:#x}: {0x1122334455667788 .to_bytes(8, 'little').hex()} -> {ret_addr}" in case.diff
    for label in ("6.10", "6.11", "6.16", "7.3"):
        assert sum(per[label].divergences.values()) == 0, label
    assert per["6.16"].mechanisms["x86_64/emulate"] >= 1  # the same site, emulated: transparent


def test_a_probe_that_changes_state_is_a_bug_even_on_an_optimised_nop5(monkeypatch):
    record = fz.RecordingConsumer._hit

    def clobber(self, regs):
        regs.r10 ^= 1  # what a broken emulation would do
        return record(self, regs)
    monkeypatch.setattr(fz.RecordingConsumer, "_hit", clobber)
    program = redzone_program()
    r = fz.fuzz_program_once("x86_64", 7, configs=[c for c in fz.TARGETS["x86_64"].configs() if c.label == "6.18"],
                             sites=0, program=program)
    assert r.bugs and all(c.kind == "BUG" for c in r.cases)
    bug = r.bugs[0]
    assert bug.seed == 7 and "fuzz_target" in bug.listing and bug.probe.startswith("entry@0x")
    assert any(line.startswith("r10:") for line in bug.diff)


def test_the_same_leaf_around_a_nop10_runs_optimised_on_73_without_divergence():
    program = redzone_program(asm.NOP10)
    site = program.resolve("fuzz_target") + 10 + 10 + 5
    r = fz.fuzz_program_once("x86_64", 0, configs=[c for c in fz.TARGETS["x86_64"].configs() if c.label == "7.3"], sites=0,
                             program=program)
    assert r.mechanisms["x86_64/nop10-opt"] >= 1 and not r.cases, "\n".join(map(str, r.cases))
    older = fz.fuzz_program_once("x86_64", 0, configs=[c for c in fz.TARGETS["x86_64"].configs() if c.label == "6.18"], sites=0,
                                 program=program)
    assert older.refused >= 1 and "x86_64/nop10-opt" not in older.mechanisms  # 6.18 refuses the nop10 site
    assert site == program.resolve("fuzz_target") + 25
