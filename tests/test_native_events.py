"""A hit's bill, asked of this host: the exceptions and uprobe syscalls one steady-state hit of each kernel
bench costs, counted by the host's own tracepoints, against the lab's events_per_hit for the host's kernel.

* exceptions: an int3 (#BP) reaches do_int3() -> notify_die(DIE_INT3), the #DB after an out-of-line step
  exc_debug_user() -> notify_debug() -> notify_die(DIE_DEBUG) (arch/x86/kernel/traps.c); the die chain
  runs uprobes' notifier, arch_uprobe_exception_notify (registered in kernel/events/uprobes.c), and
  notifier_call_chain() (kernel/notifier.c) fires the notifier:notifier_run tracepoint with that callback
  for each. A perf counter on it, filtered to that callback's address (/proc/kallsyms), counts them.
* syscalls: raw_syscalls:sys_enter filtered to __NR_uretprobe and __NR_uprobe, the only syscalls the
  bench loop makes.

Every bench with a probe is asked, USDT sites (probed where libbpf would put the probe on this host) and
the ones the kernel refuses at attach included. So the cheat sheet's column for the host's kernel, chapter
01's "a probe on ret costs two exceptions, nop and push one", chapter 02's "one syscall per return from
6.11" and chapter 03's "no exception at all" for an optimised nop5 are each the host's answer.
"""
from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os

import pytest

from native_support import host_kernel_rules, native, perf_fds
from uprobe_lab.bench import bench_spec, events_per_hit
from uprobe_lab.native.bench import BENCH_NAMES, EXTRA_BENCH_NAMES, available_benches, usdt_offset
from uprobe_lab.native.code import NativeCode
from uprobe_lab.native.perf import PerfEventAttr, UprobeEvent, perf_event_open, read_count
from uprobe_lab.uprobes import ENOTSUPP, UnprobeableInstruction
from uprobe_lab.x86.constants import __NR_uprobe, __NR_uretprobe

pytestmark = [native, pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86-64 exceptions and syscalls"),
              pytest.mark.xdist_group("native-events")]  # one worker asks the host once for every bench

TRACEFS = "/sys/kernel/tracing/events"
PERF_TYPE_TRACEPOINT = 2  # include/uapi/linux/perf_event.h
# _IO('$', 0), _IO('$', 1), _IOW('$', 6, char *): include/uapi/linux/perf_event.h
PERF_EVENT_IOC_ENABLE, PERF_EVENT_IOC_DISABLE, PERF_EVENT_IOC_SET_FILTER = 0x2400, 0x2401, 0x40082406
NOTIFIER = "arch_uprobe_exception_notify"
HITS = 200
PROBED = [n for n in BENCH_NAMES + EXTRA_BENCH_NAMES if bench_spec(n).probe]
WARMUP = 4  # as events_per_hit warms up: a nop5's first hit is an int3 that rewrites the site


def kernel_symbol(name: str) -> int | None:
    """``name``'s address from /proc/kallsyms; None if it is not there or kptr_restrict hides it (0)."""
    with open("/proc/kallsyms") as f:
        for line in f:
            addr, _, sym = line.split()[:3]
            if sym == name:
                return int(addr, 16) or None
    return None


@contextlib.contextmanager
def tracepoint_counter(event: str, filter_: str):
    """A disabled perf counter of tracepoint ``event`` (group/name) in this thread, with a trace filter."""
    attr = PerfEventAttr()
    attr.type, attr.size, attr.flags = PERF_TYPE_TRACEPOINT, ctypes.sizeof(PerfEventAttr), 1  # disabled
    with open(f"{TRACEFS}/{event}/id") as f:
        attr.config = int(f.read())
    fd = perf_event_open(attr)
    try:
        fcntl.ioctl(fd, PERF_EVENT_IOC_SET_FILTER, filter_.encode() + b"\0")
        yield fd
    finally:
        os.close(fd)


@pytest.fixture(scope="module")
def kernel():
    return host_kernel_rules()


@pytest.fixture(scope="module")
def notifier():
    for event in ("notifier/notifier_run", "raw_syscalls/sys_enter"):
        if not os.path.exists(f"{TRACEFS}/{event}/id"):
            pytest.skip(f"no {event} tracepoint under {TRACEFS} (tracefs not mounted, or a kernel without it)")
    addr = kernel_symbol(NOTIFIER)
    if addr is None:
        pytest.skip(f"/proc/kallsyms does not give {NOTIFIER}'s address (kptr_restrict?)")
    return addr


def host_bill(nc, name: str, notifier: int) -> tuple[int, int, int] | str:
    """(hits, exceptions, uprobe syscalls) of HITS calls after the warm-up, or "refused" when perf_event_open
    fails with ENOTSUPP (arch_uprobe_analyze_insn refused the instruction)."""
    spec = bench_spec(name)
    addr = nc.addr(spec.target)
    offset = usdt_offset(nc, spec.target)[0] if spec.probe == "usdt" else 0  # where libbpf puts it on this host
    try:
        ev = UprobeEvent(nc.path, nc.offset(spec.target) + offset, spec.probe == "uretprobe").open()
    except OSError as err:
        if err.errno == ENOTSUPP:
            return "refused"
        raise
    exc_filter, sc_filter = f"cb == {notifier:#x}", f"id == {__NR_uretprobe} || id == {__NR_uprobe}"
    with contextlib.closing(ev), tracepoint_counter("notifier/notifier_run", exc_filter) as exc, \
            tracepoint_counter("raw_syscalls/sys_enter", sc_filter) as sc:
        nc.run(addr, WARMUP)
        before = ev.count()
        for fd in (exc, sc):
            fcntl.ioctl(fd, PERF_EVENT_IOC_ENABLE, 0)
        nc.run(addr, HITS)
        for fd in (exc, sc):
            fcntl.ioctl(fd, PERF_EVENT_IOC_DISABLE, 0)
        return ev.count() - before, read_count(exc), read_count(sc)


@pytest.fixture(scope="module")
def host_bills(notifier) -> dict:
    with NativeCode() as nc:
        assert set(PROBED) <= set(available_benches(nc.program))
        bills = {name: host_bill(nc, name, notifier) for name in PROBED}
    assert not perf_fds()
    return bills


def lab_bill(name: str, kernel) -> tuple[int, int, int] | str:
    try:
        lab = events_per_hit(name, "x86_64", kernel)
    except UnprobeableInstruction:
        return "refused"
    assert lab.get("exceptions", 0) == lab.get("exc_bp", 0) + lab.get("exc_db", 0)
    return HITS, HITS * lab.get("exceptions", 0), HITS * lab.get("syscalls", 0)


@pytest.mark.parametrize("name", PROBED)
def test_a_hit_costs_the_exceptions_and_syscalls_the_lab_bills(name, host_bills, kernel):
    assert host_bills[name] == lab_bill(name, kernel)
