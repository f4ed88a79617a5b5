"""Shared by the native test files: whether this host can run native probes, and why not.

The lab's own check (check_native_support) says whether native tests run, but it is code under test:
a bug in it would skip every host test without a word. Two guards keep that from passing unseen:

* ``host_has_uprobes()`` asks the host directly (root with CAP_SYS_ADMIN, and the uprobe PMU's type
  file by its literal sysfs path, not the lab's constant), and test_native.py fails if such a host
  gets a reason from the lab;
* with UPROBE_LAB_REQUIRE_NATIVE=1 in the environment (.ci/run sets it) every skip function here fails
  the test instead of skipping it: on that machine the native tests must run.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import re
import struct
import subprocess
import sys
from collections import namedtuple
from pathlib import Path

import pytest

from uprobe_lab.native import NativeUnavailable, check_native_support

Uname = namedtuple("Uname", "sysname nodename release version machine")

PMU_TYPE_FILE = "/sys/bus/event_source/devices/uprobe/type"  # include/linux/perf_event.h: the uprobe PMU
REQUIRE_ENV = "UPROBE_LAB_REQUIRE_NATIVE"
CAP_SYS_ADMIN, CAP_BPF = 21, 39  # include/uapi/linux/capability.h
NR_BPF = {"x86_64": 321, "aarch64": 280}  # syscall_64.tbl; asm-generic/unistd.h
BPF_MAP_CREATE, BPF_MAP_TYPE_ARRAY = 0, 2


def native_reason() -> str | None:
    try:
        check_native_support()
    except NativeUnavailable as e:
        return str(e)
    return None


NATIVE_REASON = native_reason()


def kernel_at_least(major: int, minor: int) -> bool:
    m = re.match(r"(\d+)\.(\d+)", os.uname().release)
    return bool(m) and (int(m.group(1)), int(m.group(2))) >= (major, minor)


def host_kernel_rules():
    """The lab's rules for the host's release (uprobe_lab.verify.x86.host_rules: the newest modelled version
    not newer than it, with the release rules it has); a kernel older than every modelled one is a skip,
    even on CI: that is an old kernel, not missing native support."""
    from uprobe_lab.errors import LabError
    from uprobe_lab.verify.x86 import host_rules

    try:
        return host_rules(os.uname().release)
    except LabError as err:
        pytest.skip(str(err))


def effective_caps() -> int:
    """CapEff of this process, read from /proc/self/status (0 where it cannot be read)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except OSError:
        pass
    return 0


def host_has_uprobes() -> bool:
    """Root with CAP_SYS_ADMIN and a uprobe PMU: a host where perf uprobes must work, asked without the lab."""
    return os.geteuid() == 0 and bool(effective_caps() >> CAP_SYS_ADMIN & 1) and os.path.exists(PMU_TYPE_FILE)


def native_required() -> bool:
    return os.environ.get(REQUIRE_ENV, "") == "1"


def skip_or_fail(reason: str) -> None:
    """Skip the test with ``reason``; under UPROBE_LAB_REQUIRE_NATIVE=1 fail it instead."""
    if native_required():
        pytest.fail(f"{REQUIRE_ENV}=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def require_native() -> None:
    if NATIVE_REASON is not None:
        skip_or_fail(f"native mode unavailable: {NATIVE_REASON}")


def bpf_syscall_reason() -> str | None:
    """Why bpf(2) itself refuses this process (None if it creates a map), asked with a raw syscall and
    not through uprobe_lab.native.bpf, whose programs are under test."""
    nr = NR_BPF.get(os.uname().machine)
    if nr is None:
        return f"no bpf(2) number known for {os.uname().machine}"
    if not effective_caps() >> CAP_BPF & 1 and not effective_caps() >> CAP_SYS_ADMIN & 1:
        return "neither CAP_BPF nor CAP_SYS_ADMIN is effective"
    libc = ctypes.CDLL(None, use_errno=True)
    attr = ctypes.create_string_buffer(struct.pack("<IIIII", BPF_MAP_TYPE_ARRAY, 4, 8, 1, 0).ljust(128, b"\0"))
    fd = libc.syscall(ctypes.c_long(nr), ctypes.c_long(BPF_MAP_CREATE), attr, ctypes.c_ulong(128))
    if fd < 0:
        return f"bpf(BPF_MAP_CREATE) failed: {os.strerror(ctypes.get_errno())}"
    os.close(fd)
    return None


def require_bpf() -> None:
    """Native probes and bpf(2) permission; anything else that goes wrong loading a BPF program is a failure."""
    require_native()
    reason = bpf_syscall_reason()
    if reason is not None:
        skip_or_fail(f"BPF consumers cannot be loaded here: {reason}")


def refuse_bpf(*args, **kwargs):
    """A stand-in for any native call: bpf(2) refusing the consumer, as on a kernel without CONFIG_BPF_SYSCALL."""
    import errno

    from uprobe_lab.native.errors import bpf_refused

    raise bpf_refused(OSError(errno.EPERM, os.strerror(errno.EPERM)))


def perf_fds() -> list[int]:
    """This process's open perf event fds."""
    out = []
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}") == "anon_inode:[perf_event]":
                out.append(int(name))
        except OSError:
            pass
    return out


# a session fixture (in conftest.py), so it decides before any module fixture runs a native measurement
native = pytest.mark.usefixtures("native_host")


HOLD_CPU = """
import sys, time
from uprobe_lab.native.bench import cpu_lock
with cpu_lock(int(sys.argv[1])) as mine:
    print("held" if mine else "taken", flush=True)
    time.sleep(60)
"""


@contextlib.contextmanager
def cpu_held_elsewhere(cpu: int, lock_dir):
    """Another process holding ``cpu``'s bench lock in ``lock_dir`` for the block, which is given its pid."""
    from uprobe_lab.native.bench import CPU_LOCK_DIR_ENV

    repo = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, CPU_LOCK_DIR_ENV: str(lock_dir),
           "PYTHONPATH": os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")]))}
    holder = subprocess.Popen([sys.executable, "-c", HOLD_CPU, str(cpu)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout.readline().strip() == "held"
        yield holder.pid
    finally:
        holder.kill()
        holder.wait()
