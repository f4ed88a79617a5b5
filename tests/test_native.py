"""Native mode: unit tests that run anywhere, and measurements that run where the host allows.

The native tests skip with NativeUnavailable's reason on hosts that cannot run them (not Linux,
no uprobe PMU, no CAP_SYS_ADMIN, noexec temp dirs). Error paths are unit-tested by faking the
host (PMU paths, os.uname, errno, /proc/mounts), so they need no privileges.
"""
from __future__ import annotations

import ctypes
import errno
import glob
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from uprobe_lab.native import arch as arch_mod
from uprobe_lab.native import bench, code, host, perf
from uprobe_lab.native import NativeUnavailable, check_native_support, host_snapshot, run_native_benches
from uprobe_lab.native.code import NativeCode
from uprobe_lab.native.perf import PerfEventAttr, UprobeEvent
from uprobe_lab import sites
from uprobe_lab.cli import terminate_as_ctrl_c
from uprobe_lab.interrupt import handling, stop_deferred
from uprobe_lab.program import listing_lines
from kernel_bytes import UPROBE_TRAMPOLINE
from native_support import (NATIVE_REASON, PMU_TYPE_FILE, REQUIRE_ENV, Uname, host_has_uprobes, kernel_at_least, native,
                            perf_fds, require_native, skip_or_fail)

NOP5 = "0f1f440000"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def scratch_dirs() -> set[str]:
    return set(glob.glob(os.path.join(code.find_exec_dir(), "uprobe_lab-native-*")))


def mapped_bench_files() -> list[str]:
    return [m.name for m in host.parse_maps() if m.name.endswith(NativeCode.FILE_NAME)]


# ------------------------------------------------------------------------------------------------
# arch-aware parts: syscall numbers and struct perf_event_attr
# ------------------------------------------------------------------------------------------------
def test_perf_event_open_numbers():
    assert arch_mod.perf_event_open_nr("x86_64") == 298  # syscall_64.tbl
    assert arch_mod.perf_event_open_nr("arm64") == 241  # asm-generic/unistd.h
    with pytest.raises(KeyError):
        arch_mod.perf_event_open_nr("riscv64")


def test_host_arch_names(monkeypatch):
    for machine, name in [("x86_64", "x86_64"), ("aarch64", "arm64"), ("riscv64", "riscv64")]:
        monkeypatch.setattr(os, "uname", lambda m=machine: Uname("Linux", "h", "6.18.0", "#1", m))
        assert arch_mod.host_arch() == name


def test_perf_event_attr_layout():
    # include/uapi/linux/perf_event.h, natural alignment, little-endian bit-fields
    offsets = {
        "type": 0, "size": 4, "config": 8, "sample_period": 16, "sample_freq": 16, "sample_type": 24,
        "read_format": 32, "flags": 40, "wakeup_events": 48, "bp_type": 52,
        "bp_addr": 56, "uprobe_path": 56, "config1": 56, "bp_len": 64, "probe_offset": 64, "config2": 64,
        "branch_sample_type": 72, "sample_regs_user": 80, "sample_stack_user": 88, "clockid": 92,
        "sample_regs_intr": 96, "aux_watermark": 104, "sample_max_stack": 108, "aux_sample_size": 112,
        "aux_action": 116, "sig_data": 120, "config3": 128,
    }
    for name, off in offsets.items():
        assert getattr(PerfEventAttr, name).offset == off, name
    assert ctypes.sizeof(PerfEventAttr) == perf.PERF_ATTR_SIZE_VER8 == 136
    assert ctypes.sizeof(PerfEventAttr) >= perf.PERF_ATTR_SIZE_VER5
    assert perf.PERF_EVENT_IOC_RESET == 0x2403  # _IO('$', 3)


def fake_pmu(tmp_path, type_=42, retprobe="config:0"):
    d = tmp_path / "uprobe"
    (d / "format").mkdir(parents=True)
    (d / "type").write_text(f"{type_}\n")
    if retprobe is not None:
        (d / "format" / "retprobe").write_text(retprobe + "\n")
    return str(d)


def test_uprobe_attr_fields(tmp_path):
    pmu = fake_pmu(tmp_path)
    path = ctypes.create_string_buffer(b"/some/file")
    attr = perf.uprobe_attr(path, 0x60, retprobe=True, pmu_dir=pmu)
    raw = bytes(attr)
    assert int.from_bytes(raw[0:4], "little") == 42
    assert int.from_bytes(raw[4:8], "little") == 136
    assert int.from_bytes(raw[8:16], "little") == 1  # PERF_PROBE_CONFIG_IS_RETPROBE
    assert ctypes.string_at(int.from_bytes(raw[56:64], "little")) == b"/some/file"
    assert int.from_bytes(raw[64:72], "little") == 0x60
    assert raw[40] & 1 == 0  # enabled at open
    assert perf.uprobe_attr(path, 0, disabled=True, pmu_dir=pmu).flags & perf.ATTR_DISABLED
    assert perf.uprobe_attr(path, 0, retprobe=False, pmu_dir=pmu).config == 0


def test_retprobe_bit_from_format(tmp_path):
    assert perf.retprobe_bit(fake_pmu(tmp_path / "a", retprobe="config:3")) == 3
    assert perf.retprobe_bit(fake_pmu(tmp_path / "b", retprobe=None)) == 0
    with pytest.raises(NativeUnavailable, match="unexpected uprobe PMU format"):
        perf.retprobe_bit(fake_pmu(tmp_path / "c", retprobe="config1:0"))


def test_host_pmu_format():
    if not os.path.exists(PMU_TYPE_FILE):  # the literal sysfs path: a wrong perf.UPROBE_PMU_DIR must fail here
        skip_or_fail(f"no uprobe PMU on this host ({PMU_TYPE_FILE} is missing)")
    with open(PMU_TYPE_FILE) as f:
        assert perf.uprobe_pmu_type() == int(f.read()) > 0
    assert perf.retprobe_bit() == 0


def test_a_host_with_uprobes_runs_the_native_tests():
    """Not skipped anywhere: where the host itself shows root, CAP_SYS_ADMIN and the uprobe PMU, the lab
    must find native mode available, or every native test would skip and the suite pass unseen."""
    if host_has_uprobes():
        assert NATIVE_REASON is None, (f"root with CAP_SYS_ADMIN and {PMU_TYPE_FILE} present, yet the lab says: "
                                       f"{NATIVE_REASON} (a noexec temp dir is fixed with UPROBE_LAB_NATIVE_DIR)")
    elif not os.path.exists(PMU_TYPE_FILE):
        assert NATIVE_REASON is not None  # no PMU, no uprobe perf events: the lab must not claim otherwise


def test_require_native_turns_a_skip_into_a_failure(monkeypatch):
    monkeypatch.setenv(REQUIRE_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match=f"{REQUIRE_ENV}=1 but no uprobe PMU"):
        skip_or_fail("no uprobe PMU")
    monkeypatch.setenv(REQUIRE_ENV, "")
    with pytest.raises(pytest.skip.Exception, match="no uprobe PMU"):
        skip_or_fail("no uprobe PMU")


# ------------------------------------------------------------------------------------------------
# every NativeUnavailable message, produced without privileges
# ------------------------------------------------------------------------------------------------
@pytest.fixture
def linux_x86(monkeypatch):
    monkeypatch.setattr(os, "uname", lambda: Uname("Linux", "h", "6.18.0", "#1", "x86_64"))


@pytest.fixture
def pmu_ok(monkeypatch, tmp_path, linux_x86):
    monkeypatch.setattr(perf, "UPROBE_PMU_DIR", fake_pmu(tmp_path))


def test_not_linux(monkeypatch):
    monkeypatch.setattr(os, "uname", lambda: Uname("Darwin", "h", "23.0", "#1", "arm64"))
    with pytest.raises(NativeUnavailable, match=r"needs Linux.*Darwin.*emulator \(uprobe_lab\.bench\.run_benches\)"):
        check_native_support()


def test_unknown_arch(linux_x86):
    with pytest.raises(NativeUnavailable, match="no native bench for 'riscv64'.*no bytes"):
        check_native_support("riscv64")
    with pytest.raises(NativeUnavailable, match="cannot run on this x86_64 host"):
        check_native_support("arm64")


def test_no_uprobe_pmu(monkeypatch, tmp_path, linux_x86):
    monkeypatch.setattr(perf, "UPROBE_PMU_DIR", str(tmp_path / "missing"))
    with pytest.raises(NativeUnavailable, match="no uprobe PMU.*CONFIG_UPROBE_EVENTS"):
        check_native_support()


@pytest.mark.parametrize("err", [errno.EACCES, errno.EPERM])
def test_permission_denied(monkeypatch, pmu_ok, err):
    def refuse(*a, **k):
        raise OSError(err, os.strerror(err))

    monkeypatch.setattr(perf, "perf_event_open", refuse)
    with pytest.raises(NativeUnavailable, match=r"CAP_SYS_ADMIN.*6\.16.*ba677dbe77af.*CAP_PERFMON"):
        check_native_support()
    with pytest.raises(NativeUnavailable, match=errno.errorcode[err]):
        UprobeEvent("/bin/true", 0).open()


def test_the_way_out_a_notebook_is_shown_names_a_function_that_runs_the_emulated_benches(monkeypatch, pmu_ok):
    """Chapters 06-08 print the refusal as it is: its way out must be something Python can call."""
    import importlib

    from uprobe_lab.native import errors

    def refuse(*a, **k):
        raise OSError(errno.EACCES, os.strerror(errno.EACCES))

    monkeypatch.setattr(perf, "perf_event_open", refuse)
    with pytest.raises(NativeUnavailable) as info:
        check_native_support()
    said = str(info.value)
    assert said.endswith(f"or the emulator ({errors.EMULATOR}) runs everywhere"), said
    module, name = errors.EMULATOR.rsplit(".", 1)
    emulator = getattr(importlib.import_module(module), name)
    assert emulator("uprobe-nop", iterations=100)[0]["bench"] == "uprobe-nop"


REFUSING_CHILD = """
import errno
from uprobe_lab.native.errors import permission_denied
raise permission_denied(OSError(errno.EACCES, "Permission denied"))
"""


def test_a_child_s_refusal_reaches_the_parent_as_native_unavailable_not_a_traceback(monkeypatch, tmp_path):
    """A host question asked in a new Python or a forked child (chapter 03b's fork table, chapter 06's
    snapshots) may be refused where the parent's trial open was not: the reader gets the one-line refusal with
    its way out, which the callers catch, not a RuntimeError carrying the child's traceback."""
    from uprobe_lab.native import fresh

    (tmp_path / "refusing_child.py").write_text(REFUSING_CHILD)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    with pytest.raises(NativeUnavailable) as info:
        fresh.in_new_python("refusing_child", [], "the question")
    assert str(info.value).startswith("perf_event_open refused the uprobe (EACCES, running as uid")
    assert "Traceback" not in str(info.value)

    def refused():
        raise NativeUnavailable("refused here; the way out")

    with pytest.raises(NativeUnavailable, match=r"^refused here; the way out$"):
        fresh.in_forked_child("the question", refused)
    (tmp_path / "failing_child.py").write_text("raise ValueError('bad')")
    with pytest.raises(RuntimeError, match="(?s)the question failed in the child process:.*ValueError: bad"):
        fresh.in_new_python("failing_child", [], "the question")


@native
def test_real_permission_error_without_cap_sys_admin():
    """The kernel's own refusal, not a fake: a child without CAP_SYS_ADMIN in its bounding set."""
    if not shutil.which("setpriv"):
        skip_or_fail("needs setpriv (util-linux) to take CAP_SYS_ADMIN away")
    src = "from uprobe_lab.native import check_native_support as c\ntry:\n c()\nexcept Exception as e:\n print(type(e).__name__, e)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))}
    out = subprocess.run(["setpriv", "--bounding-set", "-sys_admin", sys.executable, "-c", src],
                         capture_output=True, text=True, env=env, timeout=60)
    assert out.stdout.startswith("NativeUnavailable"), out.stdout + out.stderr
    assert "without CAP_SYS_ADMIN" in out.stdout and "ba677dbe77af" in out.stdout


def test_other_errno_stays_oserror(monkeypatch, pmu_ok):
    def einval(*a, **k):
        raise OSError(errno.EINVAL, "bad")

    monkeypatch.setattr(perf, "perf_event_open", einval)
    ev = UprobeEvent("/bin/true", 0)
    with pytest.raises(OSError) as info:
        ev.open()
    assert info.value.errno == errno.EINVAL and ev.fd is None


def test_noexec_everywhere(monkeypatch, tmp_path, pmu_ok):
    mounts = tmp_path / "mounts"
    mounts.write_text("rootfs / ext4 rw,nosuid,noexec 0 0\ntmpfs /dev/shm tmpfs rw,noexec 0 0\n")
    monkeypatch.setattr(code, "MOUNTS", str(mounts))
    with pytest.raises(NativeUnavailable, match="noexec mount /.*UPROBE_LAB_NATIVE_DIR"):
        check_native_support()
    with pytest.raises(NativeUnavailable, match="missing"):
        code.find_exec_dir([str(tmp_path / "nope")])


def test_exec_dir_choice(monkeypatch, tmp_path):
    mounts = tmp_path / "mounts"
    exec_dir = tmp_path / "with space"
    exec_dir.mkdir()
    mounts.write_text(f"a / ext4 rw,noexec 0 0\nb {str(exec_dir).replace(' ', chr(92) + '040')} tmpfs rw 0 0\n")
    assert code.mount_options(str(exec_dir / "x"), str(mounts)) == (str(exec_dir), {"rw"})
    assert code.mount_options("/usr", str(mounts))[1] == {"rw", "noexec"}
    assert code.find_exec_dir([str(tmp_path), str(exec_dir)], str(mounts)) == str(exec_dir)
    monkeypatch.setenv(code.ENV_DIR, str(exec_dir))
    assert code.exec_dir_candidates()[0] == str(exec_dir)


# ------------------------------------------------------------------------------------------------
# host introspection helpers on canned data
# ------------------------------------------------------------------------------------------------
MAPS = """\
7f0000000000-7f0000002000 r-xp 00000000 fe:00 123 /tmp/x/bench_targets.bin
7f0000100000-7f0000101000 r-xp 00000000 00:00 0                          [uprobes-trampoline]
7ffffffe0000-7ffffffff000 rw-p 00000000 00:00 0                          [stack]
7ffffffff000-800000000000 --xp 00000000 00:00 0                          [uprobes]
"""


def test_parse_maps_and_optimized():
    maps = host.parse_maps(MAPS)
    assert [m.name for m in host.special_mappings(maps)] == ["[uprobes-trampoline]", "[uprobes]"]
    site_addr = 0x7F0000000060
    rel = 0x7F0000100000 - (site_addr + 5)
    site = b"\xe8" + rel.to_bytes(4, "little", signed=True)
    assert sites.call_target(site, site_addr) == 0x7F0000100000
    assert sites.calls_uprobe_trampoline(site, site_addr, maps)
    assert not sites.calls_uprobe_trampoline(bytes.fromhex("cc1f440000"), site_addr, maps)
    assert not sites.calls_uprobe_trampoline(b"\xe8\0\0\0\0", site_addr, maps)  # a call, but not into a trampoline


def test_trampoline_trim_and_listing():
    tramp = UPROBE_TRAMPOLINE + bytes(64)
    first = host._trim(tramp, "x86_64", 0x1000)
    assert first.hex().endswith("c3cc") and len(first) == 19
    listing = listing_lines(first, "x86_64", 0x1000)
    assert "mov rax, 0x150" in listing[3] and listing[-1].endswith("int3")


def test_read_helpers_on_own_memory():
    buf = ctypes.create_string_buffer(b"uprobe!")
    addr = ctypes.addressof(buf)
    assert host.read_mem(addr, 7) == b"uprobe!"
    assert host.read_via_pipe(addr, 7) == b"uprobe!"
    big = ctypes.create_string_buffer(bytes(range(256)) * 400)  # larger than a pipe's buffer
    assert host.read_via_pipe(ctypes.addressof(big), 102400) == bytes(range(256)) * 400
    data, how = host.read_any(0x10, 4)  # never mapped: an error string, not a crash
    assert data is None and "unreadable" in how


def test_package_imports_without_posix_modules():
    """A notebook on another OS imports the package and learns why it cannot run, instead of an ImportError."""
    src = ("import sys; sys.modules['fcntl'] = None\n"
           "import uprobe_lab.native as n\nprint(n.run_native_benches.__name__)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-c", src], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "run_native_benches", out.stderr


def test_bench_names():
    assert bench.BENCH_NAMES == (
        "usermode-count", "syscall-count",
        "uprobe-nop", "uprobe-push", "uprobe-ret", "uprobe-nop5",
        "uretprobe-nop", "uretprobe-push", "uretprobe-ret", "uretprobe-nop5",
        "uprobe-nop5-pagecross", "uretprobe-nop5-pagecross",
    )


# ------------------------------------------------------------------------------------------------
# the code mapping alone (no probe: needs no privileges, only Linux x86_64 and an exec dir)
# ------------------------------------------------------------------------------------------------
def _can_map() -> str | None:
    if os.uname().sysname != "Linux" or arch_mod.host_arch() not in ("x86_64",):
        return "needs Linux on x86_64"
    try:
        code.find_exec_dir()
    except NativeUnavailable as e:
        return str(e)
    return None


@pytest.mark.skipif(_can_map() is not None, reason=str(_can_map()))
def test_native_code_runs_and_cleans_up(private_scratch):
    before_fds, before_dirs = fd_count(), scratch_dirs()
    with NativeCode() as nc:
        assert nc.program.base == nc.base and nc.base % 4096 == 0
        assert nc.offset("uprobe_target_nop5_pagecross") == 0x1000 - 2
        assert nc.read("uprobe_target_nop5") == bytes.fromhex(NOP5)
        assert any(m.name == nc.path and "x" in m.perms for m in host.parse_maps())
        nc.run("uprobe_target_nop", 1000)
        nc.run("getpgid_syscall", 10)
        with pytest.raises(ValueError):
            nc.run("uprobe_target_nop", 0)
        path = nc.path
    assert not os.path.exists(path) and not os.path.exists(os.path.dirname(path))
    assert fd_count() == before_fds and scratch_dirs() == before_dirs and not mapped_bench_files()


@pytest.mark.skipif(_can_map() is not None, reason=str(_can_map()))
def test_native_code_cleans_up_on_exception(private_scratch):
    before_fds, before_dirs = fd_count(), scratch_dirs()
    with pytest.raises(KeyboardInterrupt):
        with NativeCode() as nc:
            nc.run("uprobe_target_nop", 10)
            raise KeyboardInterrupt
    assert fd_count() == before_fds and scratch_dirs() == before_dirs and not mapped_bench_files()


# ------------------------------------------------------------------------------------------------
# native measurements (root, uprobe PMU)
# ------------------------------------------------------------------------------------------------
ITER, REP = 20_000, 3


@pytest.fixture(scope="module")
def table():
    require_native()
    return {r["bench"]: r for r in run_native_benches(iterations=ITER, repeats=REP)}


@native
@pytest.mark.xdist_group("native-table")  # one native table for the three
def test_table_shape(table):
    assert list(table) == list(bench.BENCH_NAMES)
    for r in table.values():
        assert r["mode"] == "native" and r["kernel"] == os.uname().release and r["arch"] == "x86_64"
        assert r["repeats"] == REP
        assert r["mops"] > 0 and r["stddev"] >= 0 and len(r["site_bytes"]) == 10
    probed = [r for r in table.values() if r["optimized"] is not None]
    assert all(r["iterations"] == ITER for r in probed)


@native
@pytest.mark.xdist_group("native-table")  # one native table for the three
def test_the_loops_intervals_last_as_long_as_the_shortest_probed_bench_s(table):
    # 20_000 calls of a ~700 M/s loop would last ~30 us, so short that the clock's reads weigh on each interval
    lasted = {b: r["iterations"] / r["mops"] for b, r in table.items()}  # us an interval
    shortest = min((b for b, r in table.items() if r["optimized"] is not None), key=lasted.get)
    for loop in ("usermode-count", "syscall-count"):
        row = table[loop]
        assert row["lasts_as_long_as"] == shortest and row["iterations"] >= ITER
        assert lasted[loop] > 0.3 * lasted[shortest], (loop, lasted)


def test_calls_filling_grows_a_trial_interval_to_the_time_asked():
    # a loop at 700 M calls/s: 6 ms hold 4_200_000 calls; trial intervals grow from 10_000 calls (14 us) past 20 ms
    tried = []

    def rate(calls):
        tried.append(calls)
        return 700.0
    assert bench.calls_filling(0.006, rate) == 4_200_000
    assert tried[0] == 10_000 and tried[-1] / 700e6 >= 0.006


@native
@pytest.mark.xdist_group("native-table")  # one native table for the three
def test_every_call_is_a_hit(table):
    for r in table.values():
        assert r["hits"] == r["iterations"] * REP, r["bench"]


@native
@pytest.mark.xdist_group("native-table")  # one native table for the three
def test_optimized_flags(table):
    assert table["usermode-count"]["optimized"] is None and table["syscall-count"]["optimized"] is None
    for name in ("uprobe-nop", "uprobe-push", "uprobe-ret", "uretprobe-nop", "uretprobe-push", "uretprobe-ret"):
        assert table[name]["optimized"] is False
        assert table[name]["site_bytes"].startswith("cc")  # the int3 stays
    for name in ("uprobe-nop5-pagecross", "uretprobe-nop5-pagecross"):
        assert table[name]["optimized"] is False  # no atomic cross-page write: never optimised
        assert table[name]["site_bytes"] == "cc1f440000"
    if not kernel_at_least(6, 18):
        pytest.skip("nop5 optimisation needs Linux 6.18")
    for name in ("uprobe-nop5", "uretprobe-nop5"):
        assert table[name]["optimized"] is True and table[name]["site_bytes"].startswith("e8")


@native
def test_unregister_restores_site_and_closes_fd():
    with NativeCode() as nc:
        for name, retprobe in [("uprobe_target_nop5", False), ("uprobe_target_nop5", True),
                               ("uprobe_target_nop5_pagecross", False), ("uprobe_target_nop", True)]:
            original = nc.read(name)
            with UprobeEvent(nc.path, nc.offset(name), retprobe) as ev:
                assert ev.fd in perf_fds()
                nc.run(name, 100)
                assert ev.count() == 100
                ev.reset()
                assert ev.count() == 0
                assert nc.read(name) != original
            assert ev.fd is None and not perf_fds()
            assert nc.read(name) == original, name
        assert nc.read("uprobe_target_nop5").hex() == NOP5
        nc.run("uprobe_target_nop5", 10)  # still runs fine with no probe


@native
def test_event_closed_on_exception():
    with NativeCode() as nc:
        with pytest.raises(RuntimeError):
            with UprobeEvent(nc.path, nc.offset("uprobe_target_nop5"), False):
                nc.run("uprobe_target_nop5", 10)
                raise RuntimeError("boom")
        assert not perf_fds() and nc.read("uprobe_target_nop5").hex() == NOP5


def interrupt_after(n):
    calls = []

    def progress(k):
        calls.append(k)
        if len(calls) >= n:
            raise KeyboardInterrupt

    return progress


@native
def test_keyboard_interrupt_in_measuring_loop_restores_site():
    before = fd_count()
    with NativeCode() as nc:
        during = fd_count()
        with pytest.raises(KeyboardInterrupt):
            bench.run_bench(nc, "uprobe-nop5", iterations=1000, repeats=5, progress=interrupt_after(2))
        assert fd_count() == during and not perf_fds()
        assert nc.read("uprobe_target_nop5").hex() == NOP5
    assert fd_count() == before


@native
def test_keyboard_interrupt_in_run_native_benches_leaks_nothing(private_scratch):
    before_fds, before_dirs = fd_count(), scratch_dirs()
    before_mask = os.sched_getaffinity(0)
    with pytest.raises(KeyboardInterrupt):
        run_native_benches(["uprobe-nop", "uretprobe-nop5"], iterations=1000, repeats=3,
                           progress=interrupt_after(4))
    assert fd_count() == before_fds and not perf_fds()
    assert scratch_dirs() == before_dirs and not mapped_bench_files()
    assert os.sched_getaffinity(0) == before_mask


@native
def test_unknown_bench_name():
    with pytest.raises(ValueError, match="uprobe-bogus"):
        run_native_benches(["uprobe-bogus"])


@native
def test_host_snapshot_trampolines():
    if not kernel_at_least(6, 18):
        pytest.skip("[uprobes-trampoline] needs Linux 6.18")
    with NativeCode() as nc:
        site = nc.addr("uprobe_target_nop5")
        with UprobeEvent(nc.path, nc.offset("uprobe_target_nop5"), retprobe=True):
            nc.run(site, 100)
            snap = host_snapshot(site)
            assert snap["site_bytes"] == nc.read("uprobe_target_nop5").hex()
        assert snap["optimized"] and snap["site_listing"][0].split()[-2] == "call"
        by_name = {t["name"]: t for t in snap["trampolines"]}
        tramp = by_name["[uprobes-trampoline]"]
        assert int(snap["call_target"], 16) == int(tramp["start"], 16)
        text = " | ".join(line.split(None, 1)[1] for line in tramp["listing"])
        assert "mov rax, 0x150" in text and "syscall" in text  # __NR_uprobe = 336
        assert tramp["listing"][-2].endswith("ret") and tramp["listing"][-1].endswith("int3")
        xol = by_name["[uprobes]"]  # slot 0: the uretprobe trampoline
        text = " | ".join(line.split(None, 1)[1] for line in xol["listing"])
        assert "mov rax, 0x14f" in text and "syscall" in text  # __NR_uretprobe = 335
        assert nc.read("uprobe_target_nop5").hex() == NOP5  # and back after the probe


# ------------------------------------------------------------------------------------------------
# Ctrl-C between acquiring a resource and storing its handle
# ------------------------------------------------------------------------------------------------
needs_sigint = pytest.mark.skipif(signal.getsignal(signal.SIGINT) is not signal.default_int_handler,
                                  reason="needs Python's own SIGINT handler")


def ctrl_c():
    os.kill(os.getpid(), signal.SIGINT)


@needs_sigint
def test_stop_deferred_holds_ctrl_c_until_the_block_ends():
    reached = []
    with pytest.raises(KeyboardInterrupt):
        with stop_deferred():
            ctrl_c()
            reached.append("after kill")
            with stop_deferred():  # nested: the outer block still decides
                reached.append("nested")
            reached.append("end")
    assert reached == ["after kill", "nested", "end"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def _handler_names():
    return [getattr(signal.getsignal(sig), "__name__", "") for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)]


@needs_sigint
def test_a_ctrl_c_as_stop_deferred_puts_its_handlers_back_leaves_none_held(monkeypatch):
    """A Ctrl-C that lands just after SIGINT's handler is back raises there; SIGTERM and SIGHUP are back too."""
    real, fired = signal.signal, []

    def set_then_ctrl_c(sig, handler):  # one Ctrl-C, as a person presses it, the first time SIGINT's is back
        old = real(sig, handler)
        if sig == signal.SIGINT and handler is signal.default_int_handler and not fired:
            fired.append(sig)
            ctrl_c()
        return old

    with terminate_as_ctrl_c():
        with pytest.raises(KeyboardInterrupt):
            with stop_deferred():
                monkeypatch.setattr(signal, "signal", set_then_ctrl_c)
        monkeypatch.undo()
        assert _handler_names() == ["default_int_handler", "as_ctrl_c", "as_ctrl_c"]


def test_a_hold_left_in_place_after_the_block_passes_the_signal_on():
    got = []
    with handling([signal.SIGTERM], lambda signum, frame: got.append(signum)):
        with stop_deferred():
            hold = signal.getsignal(signal.SIGTERM)
        hold(signal.SIGTERM, None)  # as if a restore cut short had left it in place
    assert got == [signal.SIGTERM]


@needs_sigint
def test_sigterm_stops_a_child_forked_inside_stop_deferred():
    """The child never leaves the block, so nothing would ever act on a signal it held."""
    with terminate_as_ctrl_c(), stop_deferred():
        pid = os.fork()
        if pid == 0:
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
                os._exit(0)
            except KeyboardInterrupt:
                os._exit(3)
            finally:
                os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 3  # SIGTERM acted as Ctrl-C, as the CLI has it


@native
@needs_sigint
def test_ctrl_c_just_after_perf_event_open_leaves_no_probe(monkeypatch):
    real = perf.perf_event_open

    def open_then_interrupt(*a, **kw):
        fd = real(*a, **kw)
        ctrl_c()  # lands before open_uprobe's caller has stored the fd
        return fd

    monkeypatch.setattr(perf, "perf_event_open", open_then_interrupt)
    with NativeCode() as nc:
        with pytest.raises(KeyboardInterrupt):
            with UprobeEvent(nc.path, nc.offset("uprobe_target_nop5")):
                pytest.fail("the interrupt should arrive before the block")
        assert not perf_fds()
        assert nc.read("uprobe_target_nop5").hex() == NOP5


@pytest.mark.skipif(_can_map() is not None, reason=str(_can_map()))
@needs_sigint
def test_ctrl_c_just_after_mmap_leaves_no_mapping(private_scratch, monkeypatch):
    libc = code._libc()

    class InterruptingLibc:
        munmap = libc.munmap

        @staticmethod
        def mmap(*a):
            addr = libc.mmap(*a)
            ctrl_c()  # lands before NativeCode has stored the base
            return addr

    monkeypatch.setattr(code, "_libc", lambda: InterruptingLibc)
    before_fds, before_dirs = fd_count(), scratch_dirs()
    with pytest.raises(KeyboardInterrupt):
        with NativeCode():
            pytest.fail("the interrupt should arrive before the block")
    assert fd_count() == before_fds and scratch_dirs() == before_dirs and not mapped_bench_files()


def test_cli_native_refuses_kernel_and_stp(capsys):
    from uprobe_lab import cli

    assert cli.main(["bench", "--mode", "native", "--kernel", "6.10"]) == 2
    err = capsys.readouterr().err
    assert "--kernel cannot apply to --mode native" in err and "running" in err and "--mode model" in err
    assert cli.main(["bench", "--mode", "native", "--stp", "xol", "uprobe-nop"]) == 2
    assert "--stp cannot apply to --mode native" in capsys.readouterr().err
