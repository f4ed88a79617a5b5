"""perf_event_open(2) for one uprobe, through ctypes, and a counter you can read.

The uprobe PMU (kernel/events/core.c, since 4.17) takes a probe as (path, file offset): attr.type
is the PMU's dynamic type from sysfs, ``uprobe_path`` (the config1 union) points at the path
string, ``probe_offset`` (config2) is the offset in the file, and config bit 0 asks for a
uretprobe. Opening the event registers the probe; closing the fd unregisters it, which restores
the original bytes in every mapping of the file. Each hit adds 1 to the event's count.
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import re
import signal
import struct
import subprocess

from ..errors import LabError, is_int, shown
from ..interrupt import stop_deferred
from ..uprobes import ENOTSUPP
from .arch import perf_event_open_nr
from .errors import NativeUnavailable, no_uprobe_pmu, permission_denied
from .libc import libc as _libc

u16, u32, u64, s32 = ctypes.c_uint16, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int32

UPROBE_PMU_DIR = "/sys/bus/event_source/devices/uprobe"
PERF_FLAG_FD_CLOEXEC = 1 << 3
PR_SET_PDEATHSIG = 1
# _IO('$', n): the asm-generic ioctl encoding, the same on x86_64 and arm64
PERF_EVENT_IOC_RESET = 0x2403

# bits of the u64 that holds perf_event_attr's bit-fields (little-endian: first field = bit 0)
ATTR_DISABLED = 1 << 0

PERF_ATTR_SIZE_VER5 = 112
PERF_ATTR_SIZE_VER8 = 136


class _Period(ctypes.Union):
    _fields_ = [("sample_period", u64), ("sample_freq", u64)]


class _Wakeup(ctypes.Union):
    _fields_ = [("wakeup_events", u32), ("wakeup_watermark", u32)]


class _Config1(ctypes.Union):
    _fields_ = [("bp_addr", u64), ("kprobe_func", u64), ("uprobe_path", u64), ("config1", u64)]


class _Config2(ctypes.Union):
    _fields_ = [("bp_len", u64), ("kprobe_addr", u64), ("probe_offset", u64), ("config2", u64)]


class PerfEventAttr(ctypes.Structure):
    """include/uapi/linux/perf_event.h ``struct perf_event_attr`` up to PERF_ATTR_SIZE_VER8 (config3).

    The kernel accepts any published size: it zero-extends a shorter struct and rejects a longer
    one only if the bytes it does not know are non-zero.
    """

    _anonymous_ = ("_period", "_wakeup", "_config1", "_config2")
    _fields_ = [
        ("type", u32),  # 0
        ("size", u32),  # 4
        ("config", u64),  # 8
        ("_period", _Period),  # 16
        ("sample_type", u64),  # 24
        ("read_format", u64),  # 32
        ("flags", u64),  # 40: disabled:1, inherit:1, pinned:1, ... (ATTR_* above)
        ("_wakeup", _Wakeup),  # 48
        ("bp_type", u32),  # 52
        ("_config1", _Config1),  # 56: uprobe_path
        ("_config2", _Config2),  # 64: probe_offset        (VER0 = 64 ends before it)
        ("branch_sample_type", u64),  # 72                  (VER1 = 72)
        ("sample_regs_user", u64),  # 80                    (VER2 = 80)
        ("sample_stack_user", u32),  # 88
        ("clockid", s32),  # 92
        ("sample_regs_intr", u64),  # 96                    (VER3 = 96)
        ("aux_watermark", u32),  # 104                      (VER4 = 104)
        ("sample_max_stack", u16),  # 108
        ("_reserved_2", u16),  # 110
        ("aux_sample_size", u32),  # 112                    (VER5 = 112)
        ("aux_action", u32),  # 116
        ("sig_data", u64),  # 120                           (VER6 = 120)
        ("config3", u64),  # 128                            (VER7 = 128)
    ]  # sizeof = 136 = VER8


assert ctypes.sizeof(PerfEventAttr) == PERF_ATTR_SIZE_VER8


def _killed_with_parent():  # runs in the child before exec: SIGKILL when this process dies, even by SIGKILL
    _libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def run_own_group(command: list[str], timeout_s: float) -> subprocess.CompletedProcess:
    """Run ``command`` (text output captured) in a process group of its own and wait for it; on the timeout
    (TimeoutExpired) or Ctrl-C the whole group is killed and reaped before the exception goes on, so what the
    command started (``perf stat``'s workload) does not live on, reparented to init."""
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True,  # its own group; a terminal's Ctrl-C reaches only this process
                             preexec_fn=_killed_with_parent)
    try:
        out, err = child.communicate(timeout=timeout_s)
    except BaseException:
        with stop_deferred():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            child.communicate()  # reaps it and closes the pipes
        raise
    return subprocess.CompletedProcess(command, child.returncode, out, err)


def uprobe_pmu_type(pmu_dir: str | None = None) -> int:
    """The uprobe PMU's dynamic type number; NativeUnavailable if the kernel has none."""
    path = os.path.join(pmu_dir or UPROBE_PMU_DIR, "type")
    try:
        with open(path) as f:
            return int(f.read().strip())
    except FileNotFoundError:
        raise no_uprobe_pmu(path) from None


def retprobe_bit(pmu_dir: str | None = None) -> int:
    """Bit of attr.config that selects a uretprobe, from the PMU's format file ('config:0')."""
    path = os.path.join(pmu_dir or UPROBE_PMU_DIR, "format", "retprobe")
    try:
        with open(path) as f:
            text = f.read().strip()
    except FileNotFoundError:
        return 0  # PERF_PROBE_CONFIG_IS_RETPROBE = 1U << 0 since the PMU exists
    m = re.fullmatch(r"config:(\d+)", text)
    if not m:
        raise NativeUnavailable(f"unexpected uprobe PMU format {path}: {text!r} (expected 'config:N')")
    return int(m.group(1))


def uprobe_attr(path_buf: ctypes.Array, offset: int, retprobe: bool = False, *, disabled: bool = False,
                pmu_dir: str | None = None) -> PerfEventAttr:
    """A perf_event_attr for a (u|uret)probe at ``offset`` in the file named by ``path_buf``.

    ``path_buf`` must be a ctypes char buffer the caller keeps alive while the fd is being opened.
    """
    attr = PerfEventAttr()
    attr.type = uprobe_pmu_type(pmu_dir)
    attr.size = ctypes.sizeof(PerfEventAttr)
    attr.config = (1 << retprobe_bit(pmu_dir)) if retprobe else 0
    attr.uprobe_path = ctypes.addressof(path_buf)
    attr.probe_offset = offset
    attr.flags = ATTR_DISABLED if disabled else 0
    return attr


def perf_event_open(attr: PerfEventAttr, pid: int = 0, cpu: int = -1, group_fd: int = -1,
                    flags: int = PERF_FLAG_FD_CLOEXEC) -> int:
    """The raw syscall; an fd, or OSError with the kernel's errno."""
    nr = perf_event_open_nr()
    fd = _libc().syscall(ctypes.c_long(nr), ctypes.byref(attr), ctypes.c_long(pid), ctypes.c_long(cpu),
                       ctypes.c_long(group_fd), ctypes.c_ulong(flags))
    if fd < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"perf_event_open: {os.strerror(e)}")
    return fd


class ProbeRefused(LabError, OSError):
    """perf_event_open refused a uprobe for a reason of the caller's (no such file, an offset past its end, an
    instruction the kernel does not probe): a LabError whose message names it and the way out, and an OSError
    with the kernel's errno for code that tells the reasons apart (ENOTSUPP: the instruction)."""

    def __str__(self) -> str:
        return self.strerror


def probe_refused(err: OSError, path: str, offset: int) -> ProbeRefused:
    """The kernel's errno from opening a uprobe on ``path`` at ``offset``, said in words."""
    name = path if len(path) <= 200 else shown(path, 200)
    where = f"offset {offset:#x} of {name}"
    if err.errno == errno.ENOENT:
        said = f"no file {name}: give the path of an ELF file that exists"
    elif err.errno == ENOTSUPP:  # prepare_uprobe(): arch_uprobe_analyze_insn refused the bytes there
        said = (f"the kernel refuses to probe the instruction at {where} (ENOTSUPP): is the offset where an "
                "instruction starts? uprobe_lab.analyze(bytes) says what a kernel does with those bytes")
    elif err.errno == errno.EINVAL and not os.path.isfile(path):
        said = f"{name} is not a regular file: a uprobe goes on an executable or a library"
    elif err.errno == errno.EINVAL and offset >= os.path.getsize(path):
        said = f"{where} is past the file's end ({os.path.getsize(path):,} bytes): give a file offset inside it"
    else:
        said = (f"perf_event_open refused a uprobe at {where} "
                f"({errno.errorcode.get(err.errno, err.errno)}: {os.strerror(err.errno)})")
    return ProbeRefused(err.errno, said)


def open_uprobe(path: str, offset: int, retprobe: bool = False, *, disabled: bool = False, pid: int = 0,
                cpu: int = -1) -> int:
    """Attach a uprobe to process ``pid`` (0: this one; -1: every process, which needs a ``cpu``) on ``cpu``
    (-1: any) and return its fd.

    EACCES/EPERM become NativeUnavailable; other errors ProbeRefused, an OSError with the errno.
    """
    path_buf = ctypes.create_string_buffer(os.fsencode(path))
    attr = uprobe_attr(path_buf, offset, retprobe, disabled=disabled)
    try:
        return perf_event_open(attr, pid=pid, cpu=cpu)
    except OSError as err:
        if err.errno in (errno.EACCES, errno.EPERM):
            raise permission_denied(err) from None
        raise probe_refused(err, os.fsdecode(path), offset) from None
    finally:
        del path_buf  # the kernel copied the path during the call


def read_count(fd: int) -> int:
    """The event's count (read_format 0: one u64)."""
    return struct.unpack("=Q", os.read(fd, 8))[0]


def trial_open(directory: str) -> None:
    """Open and close a uprobe on a scratch file in ``directory`` that no process maps.

    This is how to learn whether perf_event_open will accept a uprobe here without patching
    anything: the probe is registered but there is no mapping to write a breakpoint into.
    """
    path = os.path.join(directory, "trial.bin")
    with open(path, "wb") as f:
        f.write(b"\x90" * 16)
    try:
        with stop_deferred():
            os.close(open_uprobe(path, 0))
    finally:
        os.unlink(path)


class UprobeEvent:
    """``with UprobeEvent(path, offset, retprobe=False[, pid=N]) as ev: ... ev.count()``.

    The probe is live inside the block (attached enabled). The fd is closed on every way out of
    the block - normal exit, an exception, KeyboardInterrupt - and closing it unregisters the
    probe, so the site's original bytes are back when ``__exit__`` returns.
    """

    def __init__(self, path: str, offset: int, retprobe: bool = False, pid: int = 0, cpu: int = -1):
        if not isinstance(path, (str, bytes, os.PathLike)) or "\0" in os.fsdecode(path):
            raise LabError(f"a uprobe goes on a file: give its path (a str or Path without NUL), got {shown(path)}")
        if not is_int(offset) or not 0 <= offset < 1 << 63:
            raise LabError(f"the offset is where in the file the probe goes, an int from 0, got {shown(offset)} "
                           "(function_site(path, name).file_offset is a function's)")
        if not (is_int(pid) and is_int(cpu)):
            raise LabError(f"pid and cpu are ints (0: this process; -1: any CPU), got {shown(pid)} and {shown(cpu)}")
        self.path = os.fspath(path)
        self.offset = offset
        self.retprobe = retprobe
        self.pid = pid  # 0: this process; another process's pid probes only that one; -1 every process
        self.cpu = cpu  # -1: any; pid -1 needs one
        self.fd: int | None = None

    def open(self) -> "UprobeEvent":
        if self.fd is not None:
            raise RuntimeError("UprobeEvent is already open")
        with stop_deferred():  # no Ctrl-C between the probe's registration and storing its fd
            self.fd = open_uprobe(self.path, self.offset, self.retprobe, pid=self.pid, cpu=self.cpu)
        return self

    def close(self) -> None:
        with stop_deferred():
            fd, self.fd = self.fd, None
            if fd is not None:
                os.close(fd)

    def count(self) -> int:
        if self.fd is None:
            raise RuntimeError("UprobeEvent is closed")
        return read_count(self.fd)

    def _ioctl(self, request: int) -> None:
        import fcntl  # POSIX only; imported here so the package imports everywhere

        if self.fd is None:
            raise RuntimeError("UprobeEvent is closed")
        fcntl.ioctl(self.fd, request, 0)

    def reset(self) -> None:
        """Zero the count (PERF_EVENT_IOC_RESET)."""
        self._ioctl(PERF_EVENT_IOC_RESET)


    def __enter__(self) -> "UprobeEvent":
        try:
            return self.open()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):  # last resort if a caller forgot the with-block
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        kind = "uretprobe" if self.retprobe else "uprobe"
        state = f"fd {self.fd}" if self.fd is not None else "closed"
        return f"<UprobeEvent {kind} {self.path}:{self.offset:#x} {state}>"


def bench_trigger_event(path: str, offset: int, retprobe: bool = False) -> UprobeEvent:
    """A uprobe event opened as the kernel bench opens its own: tools/testing/selftests/bpf/benchs/bench_trigger.c
    attaches with libbpf's ``bpf_program__attach_uprobe(prog, retprobe, -1 /* all PIDs */, ...)``, and
    libbpf's ``perf_event_open_probe`` opens pid -1 on CPU 0. Here the CPU is the first this process may
    run on when the event is made: inside :func:`.bench.pinned_to_one_cpu`, the one it pins to (CPU 0 when
    nothing restricts it). The BPF consumer runs on every hit whichever CPU takes it (``__uprobe_perf_func``
    runs the program before it looks at the CPU's events); only the bench's own processes map its file.

    Why it matters: for an event of one task (pid 0), every hit runs ``uprobe_perf_filter``
    (kernel/trace/trace_uprobe.c) under the filter's rwlock, per consumer; an event of every task sets
    ``nr_systemwide``, which that function checks first, locklessly, and returns. On a 2-core AMD EPYC VM
    the per-task form cost 15-57 ns more per consumer per hit, over seven runs of the
    consumer scan both ways (13-59% of a consumer's price; benchmarks/consumer_scans.py)."""
    return UprobeEvent(path, offset, retprobe=retprobe, pid=-1, cpu=min(os.sched_getaffinity(0)))
