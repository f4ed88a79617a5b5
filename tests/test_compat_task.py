"""A 32-bit (compat) task: its uretprobes return through an int3 on every kernel, in the emulator and on
this host (arch_uretprobe_trampoline hands the syscall trampoline to 64-bit tasks only)."""
import contextlib
import os

import capstone
import pytest

from uprobe_lab.bench import bench_spec, events_per_hit
from uprobe_lab.errors import LabError
from uprobe_lab.native import compat
from uprobe_lab.native.code import find_exec_dir, scratch_prefix
from uprobe_lab.uprobes import CountingConsumer, uprobe_get_trampoline_vaddr, uprobe_register
from uprobe_lab.arches import make_process
from native_support import native

# What the program's code says, written out from the module doc's description (i386 syscall numbers:
# read 3, clock_gettime 265 = 0x109, write 4, exit 1; CLOCK_THREAD_CPUTIME_ID 3; data at 0x804a000:
# t0, t1 at +8, the return-address slot at +0x10, the go byte at +0x14).
EXPECTED_TEXT = [
    ("mov", "eax, 3"), ("xor", "ebx, ebx"), ("mov", "ecx, 0x804a014"), ("mov", "edx, 1"), ("int", "0x80"),
    ("mov", "eax, 0x109"), ("mov", "ebx, 3"), ("mov", "ecx, 0x804a000"), ("int", "0x80"),
    ("mov", "esi, 7"),
    ("call", "PEEK"), ("dec", "esi"), ("jne", "LOOP"),
    ("mov", "eax, 0x109"), ("mov", "ebx, 3"), ("mov", "ecx, 0x804a008"), ("int", "0x80"),
    ("mov", "eax, 4"), ("mov", "ebx, 1"), ("mov", "ecx, 0x804a000"), ("mov", "edx, 0x14"), ("int", "0x80"),
    ("mov", "eax, 4"), ("mov", "ebx, 1"), ("mov", "ecx, dword ptr [0x804a010]"), ("mov", "edx, 1"), ("int", "0x80"),
    ("mov", "eax, 3"), ("xor", "ebx, ebx"), ("mov", "ecx, 0x804a014"), ("mov", "edx, 1"), ("int", "0x80"),
    ("mov", "eax, 1"), ("xor", "ebx, ebx"), ("int", "0x80"),
    ("nop", ""), ("ret", ""),  # target
    ("nop", ""), ("mov", "eax, dword ptr [esp]"), ("mov", "dword ptr [0x804a010], eax"), ("ret", ""),  # peek
]


def test_the_i386_program_decodes_as_written():
    prog = compat.compat_program(7, "peek")
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_32)
    start = prog.symbols["_start"]
    insns = list(md.disasm(prog.image[start - compat.BASE:], start))
    names = {"PEEK": hex(prog.symbols["peek"]), "LOOP": hex(prog.symbols["loop"])}
    want = [(m, names.get(o, o)) for m, o in EXPECTED_TEXT]
    assert [(i.mnemonic, i.op_str) for i in insns] == want
    assert sum(i.size for i in insns) == len(prog.image) - (start - compat.BASE)  # nothing left undecoded
    assert prog.image[:5] == b"\x7fELF\x01"  # ELFCLASS32
    assert prog.image[prog.offset("target"):prog.offset("target") + 2] == b"\x90\xc3"


def test_bad_program_arguments_are_refused():
    with pytest.raises(ValueError, match="2\\*\\*32"):
        compat.compat_program(1 << 32)
    with pytest.raises(ValueError, match="target or peek"):
        compat.compat_program(5, "main")
    with pytest.raises(ValueError, match="probe is None"):
        compat.run_compat(5, "target", "kprobe")
    with pytest.raises(ValueError, match="consumers must be >= 1, got 0"):
        compat.CompatBench(5, "target", "uprobe", consumers=0)


@pytest.mark.parametrize("kernel", ["6.10", "6.11", "6.16", "6.18", "7.3"])
def test_a_compat_task_returns_through_an_int3_on_every_kernel(kernel):
    """The compat bench's events equal 6.10's 64-bit uretprobe-nop: two exceptions, no syscall."""
    ev = events_per_hit("uretprobe-nop-compat", "x86_64", kernel)
    assert ev == events_per_hit("uretprobe-nop", "x86_64", "6.10")
    assert ev["exceptions"] == 2 and "syscalls" not in ev
    assert events_per_hit("uprobe-nop-compat", "x86_64", kernel) == events_per_hit("uprobe-nop", "x86_64", kernel)


def test_the_compat_task_s_slot_0_is_one_int3_and_a_64_bit_task_s_is_the_syscall_trampoline():
    for compat_task, first in ((True, 0xCC), (False, 0x50)):  # int3; push %rax
        proc = make_process("x86_64", "6.18", compat_task=compat_task)
        uprobe_register(proc, "uprobe_target_nop", CountingConsumer(ret=True))
        proc.call("producer_loop", 1, proc.program.resolve("uprobe_target_nop"))
        assert proc.read(uprobe_get_trampoline_vaddr(proc), 1)[0] == first


def test_return_paths_worked_out_by_hand():
    """1 M/s uprobe and 0.5 M/s uretprobe: 1000 and 2000 ns, a 1000 ns return; compat 0.8 and 0.4 M/s:
    1250 and 2500 ns, a 1250 ns return. A missing row leaves NaN and its name; the consumer scan's x8 row
    is not the uprobe's."""
    rows = [{"bench": "uprobe-nop", "consumers": 1, "mops": 1.0}, {"bench": "uprobe-nop", "consumers": 8, "mops": 0.3},
            {"bench": "uretprobe-nop", "consumers": 1, "mops": 0.5},
            {"bench": "uprobe-nop-compat", "consumers": 1, "mops": 0.8},
            {"bench": "uretprobe-nop-compat", "consumers": 1, "mops": 0.4}]
    table = compat.return_paths(rows).set_index("task: return through")
    assert list(table["return path ns"]) == pytest.approx([1000.0, 1250.0])
    assert list(table["uprobe ns"]) == pytest.approx([1000.0, 1250.0])
    assert list(table["+- ns"]) == [0.0, 0.0]  # no rel_err given
    noisy = [dict(r, rel_err=0.03) for r in rows]  # 3% of 1000 and of 2000 ns: hypot(30, 60) = 67.08
    assert compat.return_paths(noisy)["+- ns"].iloc[0] == pytest.approx(67.082, abs=1e-3)
    partial = compat.return_paths(rows[:3]).set_index("task: return through")
    assert partial.loc["32-bit task: int3", "note"] == "no uprobe-nop-compat, uretprobe-nop-compat row"
    assert partial["return path ns"].isna().tolist() == [False, True]


def test_compat_benches_are_x86_only():
    assert bench_spec("uretprobe-nop-compat").options == (("compat_task", True),)
    with pytest.raises(LabError, match="x86-64 only"):
        bench_spec("uretprobe-nop-compat", "arm64")


# --- the host referee --------------------------------------------------------------------------------
@native
def test_this_host_gives_a_32_bit_task_an_int3_trampoline_and_counts_every_hit():
    """A uretprobe on peek: the return address peek sees is in [uprobes] and the byte there is an int3
    (on 6.11+ a 64-bit task's is the syscall trampoline's push %rax, tested in test_native.py)."""
    run = compat.run_compat(1000, "peek", "uretprobe")
    assert run.hits == 1000
    assert run.ret_mapping == "[uprobes]" and run.ret_byte == 0xCC
    plain = compat.run_compat(1000, "peek", None)  # unprobed: peek returns into the loop, after the call
    assert plain.ret_mapping.endswith("compat_bench") and plain.ret_byte == 0x4E  # dec esi
    assert plain.ret_addr == compat.compat_program(1000, "peek").symbols["loop"] + 5
    probed = compat.run_compat(1000, "target", "uprobe")
    assert probed.hits == 1000 and probed.loop_ns > 0


def _perf_fds() -> int:
    return sum(os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[perf_event]" for fd in os.listdir("/proc/self/fd")
               if os.path.exists(f"/proc/self/fd/{fd}"))


def _my_scratch_dirs() -> list[str]:
    parent = find_exec_dir()
    return [d for d in os.listdir(parent) if d.startswith(scratch_prefix())]


@native
def test_a_compat_run_leaves_no_process_probe_or_file_behind():
    before, fds, dirs = set(os.listdir("/proc")), _perf_fds(), _my_scratch_dirs()
    compat.run_compat(500, "target", "uretprobe")
    left = [p for p in set(os.listdir("/proc")) - before
            if p.isdigit() and os.path.exists(f"/proc/{p}/comm") and open(f"/proc/{p}/comm").read().strip() == "compat_bench"]
    assert left == [] and _perf_fds() == fds and _my_scratch_dirs() == dirs


@native
def test_a_compat_bench_attaches_once_counts_each_run_s_hits_and_leaves_nothing_behind():
    """Three runs under one CompatBench: one perf event for all of them (on the file, for every process),
    each run's hits its own calls, and on the way out no process, probe or file is left."""
    before, fds, dirs = set(os.listdir("/proc")), _perf_fds(), _my_scratch_dirs()
    with compat.CompatBench(700, "peek", "uretprobe") as bench:
        runs = [bench.run() for _ in range(3)]
        assert _perf_fds() == fds + 1
    assert [r.hits for r in runs] == [700] * 3
    assert {r.ret_mapping for r in runs} == {"[uprobes]"}
    left = [p for p in set(os.listdir("/proc")) - before
            if p.isdigit() and os.path.exists(f"/proc/{p}/comm") and open(f"/proc/{p}/comm").read().strip() == "compat_bench"]
    assert left == [] and _perf_fds() == fds and _my_scratch_dirs() == dirs


@native
def test_a_compat_bench_with_three_consumers_runs_each_on_every_hit():
    """The 32-bit side of the consumer scan: three perf events on one site, each with the BPF program, so the
    shared counter gains three runs per call, and all three events are closed on the way out."""
    fds = _perf_fds()
    with compat.CompatBench(700, "target", "uprobe", consumers=3) as bench:
        assert _perf_fds() == fds + 3
        assert [bench.run().hits for _ in range(2)] == [2100, 2100]
    assert _perf_fds() == fds


@native
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to run the task on another one")
def test_a_compat_bench_s_probe_bound_to_one_cpu_counts_a_task_on_another():
    """CompatBench's event is perf's pid -1 on one CPU; the host says its BPF program still counts every hit
    of a 32-bit task pinned to another CPU (the price benches' children run wherever they are put)."""
    cpus = sorted(os.sched_getaffinity(0))
    try:
        os.sched_setaffinity(0, {cpus[0]})  # the event binds to the lowest CPU this process may use
        with compat.CompatBench(3000, "target", "uprobe") as bench:
            os.sched_setaffinity(0, {cpus[1]})  # the child inherits this
            assert [bench.run().hits for _ in range(2)] == [3000, 3000]
    finally:
        os.sched_setaffinity(0, set(cpus))


@native
def test_this_host_runs_32_bit_programs():
    assert compat.compat_reason() is None


def test_a_kernel_without_32_bit_support_is_named(monkeypatch):
    def refuse(*a, **k):
        raise compat.NativeUnavailable(f"cannot run a 32-bit program here: {compat.EXEC_FAILED} (Exec format error)")

    monkeypatch.setattr(compat, "run_compat", refuse)
    assert "CONFIG_IA32_EMULATION" in compat.compat_reason()


def test_price_benches_leave_the_compat_rows_out_where_32_bit_programs_cannot_run(monkeypatch):
    """The other rows are still measured; the compat ones are named in a warning."""
    from uprobe_lab.native import price_benches as pb

    seen = []
    monkeypatch.setattr(pb, "check_native_support", lambda: "x86_64")
    monkeypatch.setattr(pb, "compat_reason", lambda: "no IA32 emulation")
    monkeypatch.setattr(pb, "pinned_to_one_cpu", contextlib.nullcontext)
    monkeypatch.setattr(pb, "NativeCode", lambda arch: contextlib.nullcontext())
    monkeypatch.setattr(pb, "attached_config", lambda arch, bench, consumers, state: contextlib.nullcontext())
    monkeypatch.setattr(pb, "reference_probe", lambda nc: contextlib.nullcontext(lambda: 1.0))

    def fake_round(nc, bench, consumers, budget_s, state, reference):
        seen.append(bench)
        state.setdefault("rounds", []).append([1.0, 1.0])
        state.setdefault("refs", []).append([1.0, 1.0])
        state["calls"] = 1

    monkeypatch.setattr(pb, "_round", fake_round)
    configs = [("uprobe-nop", 1), ("syscall-count", 0), ("usermode-count", 0), ("uretprobe-nop-compat", 1)]
    with pytest.warns(UserWarning, match="left out uretprobe-nop-compat: no IA32 emulation"):
        rows = pb.measure_price_rows(configs, budget_s=0.01, rounds=2)
    assert [r["bench"] for r in rows] == ["uprobe-nop", "syscall-count", "usermode-count"]
    assert "uretprobe-nop-compat" not in seen
