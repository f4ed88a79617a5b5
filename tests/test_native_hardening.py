"""Native mode cannot be made to crash Python, run forever, or leave files behind."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from uprobe_lab.errors import LabError
from uprobe_lab.native import NativeUnavailable, code, run_native_benches
from uprobe_lab.native.arch import host_arch
from uprobe_lab.native.code import NativeCode
from uprobe_lab.native.host import pid_namespace
from uprobe_lab.stress import HANG_GUARD_S

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OTHER_ARCH = "arm64" if host_arch() == "x86_64" else "x86_64"


def exec_dir_reason() -> str | None:
    try:
        code.find_exec_dir()
    except NativeUnavailable as err:
        return str(err)
    return None if host_arch() in ("x86_64", "arm64") else f"no bench bytes for {host_arch()}"


can_run_code = pytest.mark.skipif(exec_dir_reason() is not None, reason=f"cannot run native code: {exec_dir_reason()}")


def test_foreign_arch_code_is_refused_before_it_can_run():
    # Calling arm64 words on an x86 CPU (or the reverse) kills the interpreter with SIGSEGV/SIGILL.
    with pytest.raises(NativeUnavailable, match=f"no native bench for '{OTHER_ARCH}'.*new_process"):
        NativeCode(OTHER_ARCH)
    with pytest.raises(NativeUnavailable, match=f"cannot run on this {host_arch()}"):
        run_native_benches(["usermode-count"], iterations=10, repeats=1, arch=OTHER_ARCH)


@can_run_code
@pytest.mark.parametrize("n", [0, 2 ** 64, 2 ** 64 + 5])
def test_run_count_must_fit_the_loop_register(private_scratch, n):
    # 2**64 + 5 would reach the 64-bit register as 5: a short run that looks like a huge one
    with NativeCode() as nc, pytest.raises(ValueError, match=r"1 \.\. 2\*\*64-1"):
        nc.run("uprobe_target_nop", n)


@can_run_code
def test_only_the_start_of_a_bench_function_is_called(private_scratch):
    """Anything else would be called for real: mid-instruction, the int3 padding or an unmapped page kills
    this Python (SIGSEGV, SIGTRAP), so the address is refused before the call."""
    with NativeCode() as nc:
        nop = nc.addr("uprobe_target_nop")
        for bad in (nop + 1, nc.base - 4096, None, True):
            with pytest.raises(LabError, match="is not the start of a function of the bench program"):
                nc.run(bad, 3)
        nc.run(nop, 3)  # its start is a call like any other


def test_bench_iterations_must_fit_the_loop_register():
    with pytest.raises(ValueError, match="below 2\\*\\*64"):
        run_native_benches(["usermode-count"], iterations=2 ** 64, repeats=1)


# Ctrl-C (from another thread, as _thread.interrupt_main sends it) once the main thread is inside
# NativeCode.run, so it lands in the loop of native calls and not before it.
LONG_LOOP = """
import _thread, sys, threading, time
from uprobe_lab.native.code import NativeCode

def interrupt_inside_run():
    main = threading.main_thread().ident
    while getattr(sys._current_frames().get(main), "f_code", None) is not NativeCode.run.__code__:
        time.sleep(0.001)
    _thread.interrupt_main()

with NativeCode() as nc:
    threading.Thread(target=interrupt_inside_run, daemon=True).start()
    try:
        nc.run("uprobe_target_nop", 10 ** 12)
    except KeyboardInterrupt as err:
        tb = err.__traceback__
        while tb.tb_next:
            tb = tb.tb_next
        print("interrupted in", tb.tb_frame.f_code.co_name, flush=True)
        sys.exit(0)
print("ran to the end")
"""


@can_run_code
def test_ctrl_c_breaks_a_long_native_loop(tmp_path):
    """10**12 calls take many minutes; Ctrl-C ends the run from inside it, and the scratch files go.
    How soon it ends is benchmarks/stress_stops.py's to measure."""
    env = {**os.environ, "PYTHONPATH": REPO, code.ENV_DIR: str(tmp_path)}
    try:
        done = subprocess.run([sys.executable, "-c", LONG_LOOP], env=env, capture_output=True, text=True,
                              timeout=HANG_GUARD_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"Ctrl-C did not stop the native loop within {HANG_GUARD_S} s")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "interrupted in run\n", done.stdout + done.stderr
    assert os.listdir(tmp_path) == []  # the scratch directory went too


@can_run_code
def test_stale_scratch_dirs_of_dead_processes_are_removed(private_scratch):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    here = pid_namespace()
    stale = private_scratch / f"uprobe_lab-native-{here}-{dead.pid}-abc123"
    live = private_scratch / f"uprobe_lab-native-{here}-{os.getppid()}-def456"  # our parent is running
    unrelated = private_scratch / "uprobe_lab-native-notapid"
    for d in (stale, live, unrelated):
        d.mkdir()
        (d / code.NativeCode.FILE_NAME).write_bytes(b"\xc3")
    with NativeCode() as nc:
        mine = os.path.dirname(nc.path)
        assert os.path.basename(mine).startswith(f"uprobe_lab-native-{here}-{os.getpid()}-")
        assert not stale.exists() and live.exists() and unrelated.exists()
    assert not os.path.exists(mine)


def test_only_this_pid_namespace_s_dead_scratch_dirs_are_removed(tmp_path):
    """A /tmp mounted into several containers holds their scratch directories too; a pid free here may run there."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    here, other = pid_namespace(), format(int(pid_namespace(), 16) ^ 1, "x")
    names = [f"uprobe_lab-native-{here}-{dead.pid}-a1", f"uprobe_lab-native-{other}-{dead.pid}-b2",
             f"uprobe_lab-native-{dead.pid}-c3", f"uprobe_lab-native-{here}-{os.getpid()}-d4"]
    for name in names:
        (tmp_path / name).mkdir()
    assert code.remove_stale_scratch_dirs(str(tmp_path)) == [str(tmp_path / names[0])]
    assert sorted(os.listdir(tmp_path)) == sorted(names[1:])


@can_run_code
def test_a_process_killed_hard_leaves_a_dir_the_next_run_removes(private_scratch):
    script = "import os, time\nfrom uprobe_lab.native.code import NativeCode\nnc = NativeCode().__enter__()\n" \
             "print(nc.path, flush=True)\ntime.sleep(60)\n"
    env = {**os.environ, "PYTHONPATH": REPO, code.ENV_DIR: str(private_scratch)}
    child = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True)
    path = child.stdout.readline().strip()
    child.kill()
    child.wait()
    child.stdout.close()
    assert os.path.exists(path)  # SIGKILL ran no cleanup
    with NativeCode():
        assert not os.path.exists(os.path.dirname(path))
