"""The bench bytes as real code in this process: a file, mapped PROT_READ|PROT_EXEC, called via ctypes.

A uprobe names an inode and an offset, so the code must be a file-backed mapping: the program is
written to a file in a scratch directory, file offset 0 is mapped at the program's base, and the
probe for symbol S is at file offset ``S - base``. The mapping is MAP_PRIVATE, so the kernel's
breakpoint writes go to this process's copy of the page, never to the file.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import tempfile
import time
from typing import Iterator

from ..errors import LabError, is_int
from ..interrupt import stop_deferred
from .arch import host_arch, load_bench_program
from .errors import noexec, unsupported_arch
from .host import ended_here, pid_namespace, read_mem
from .libc import libc as _libc

MOUNTS = "/proc/mounts"
ENV_DIR = "UPROBE_LAB_NATIVE_DIR"

PROT_READ, PROT_EXEC = 0x1, 0x4
MAP_PRIVATE = 0x02
MAP_FAILED = ctypes.c_void_p(-1).value
MAX_CALLS = 1 << 64  # producer_loop's count is one 64-bit register
SCRATCH_PREFIX = "uprobe_lab-native-"
CHUNK_SECONDS = 0.1  # Ctrl-C is acted on between two chunks of a long run: this late at most

# producer_loop(n, target): System V rdi = n, rsi = target
ProducerLoop = ctypes.CFUNCTYPE(None, ctypes.c_uint64, ctypes.c_void_p)


def _unescape(field: str) -> str:
    # /proc/mounts writes space, tab, newline and backslash as octal escapes
    for esc, ch in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(esc, ch)
    return field


def mount_options(path: str, mounts_file: str | None = None) -> tuple[str, set[str]]:
    """(mount point, options) of the file system holding ``path``: the longest matching mount point."""
    path = os.path.realpath(path)
    best, opts = "", set()
    with open(mounts_file or MOUNTS) as f:
        for line in f:
            fields = line.split()
            if len(fields) < 4:
                continue
            mnt = _unescape(fields[1])
            inside = path == mnt or path.startswith(mnt.rstrip("/") + "/")
            if inside and len(mnt) >= len(best):  # a later mount on the same point hides the earlier
                best, opts = mnt, set(fields[3].split(","))
    return best, opts


def exec_dir_candidates() -> list[str]:
    dirs = [os.environ.get(ENV_DIR, ""), tempfile.gettempdir(), "/dev/shm", os.getcwd()]
    return [d for i, d in enumerate(dirs) if d and d not in dirs[:i]]


def find_exec_dir(candidates: list[str] | None = None, mounts_file: str | None = None) -> str:
    """First writable candidate directory whose file system is not mounted noexec."""
    tried = []
    for d in candidates if candidates is not None else exec_dir_candidates():
        if not os.path.isdir(d):
            tried.append((d, "missing"))
            continue
        if not os.access(d, os.W_OK | os.X_OK):
            tried.append((d, "not writable"))
            continue
        mnt, opts = mount_options(d, mounts_file)
        if "noexec" in opts:
            tried.append((d, f"noexec mount {mnt}"))
            continue
        return d
    raise noexec(tried)


def scratch_prefix() -> str:
    """The start of this process's scratch directory names."""
    return f"{SCRATCH_PREFIX}{pid_namespace()}-{os.getpid()}-"


def remove_stale_scratch_dirs(parent: str) -> list[str]:
    """Remove the scratch directories of lab processes that died without cleaning up (killed hard).

    Each directory is named after the pid namespace and pid that made it; one of this namespace whose
    pid no longer runs is stale (another namespace's pid cannot be looked up here: /tmp, /dev/shm or the
    working directory may be mounted into several containers). Returns the paths removed.
    """
    removed = []
    try:
        names = os.listdir(parent)
    except OSError:
        return removed
    for name in names:
        m = re.fullmatch(rf"{SCRATCH_PREFIX}([0-9a-f]+)-(\d+)-.*", name, re.S)
        if m and ended_here(m[1], int(m[2])):
            shutil.rmtree(os.path.join(parent, name), ignore_errors=True)
            removed.append(os.path.join(parent, name))
    return removed


@contextlib.contextmanager
def scratch_dir() -> Iterator[str]:
    """A fresh directory on an exec-capable file system, removed on the way out.

    Named uprobe_lab-native-<pid namespace>-<pid>-*, so a later run can tell it from a live one and
    remove it if this process is killed before it can (SIGKILL runs no cleanup)."""
    d = None
    try:
        parent = find_exec_dir()
        remove_stale_scratch_dirs(parent)
        with stop_deferred():
            d = tempfile.mkdtemp(prefix=scratch_prefix(), dir=parent)
        yield d
    finally:
        if d is not None:
            with stop_deferred():
                shutil.rmtree(d, ignore_errors=True)


class NativeCode:
    """``with NativeCode() as nc: nc.run("uprobe_target_nop", 1000)``.

    Inside the block: ``nc.program`` (a Program whose base is the mapped address), ``nc.path``
    (the file to name in a uprobe), ``nc.offset(name)`` (file offset of a symbol), ``nc.run``.
    On the way out - normally, on an exception or on KeyboardInterrupt - the mapping, the fd,
    the file and its directory are all released.

    ``program`` maps other position-independent bytes instead of the bench's: a function
    ``base -> Program`` like ``bench_program`` (tests build their own machine code with the lab's
    Assembler); ``run`` needs a ``producer_loop`` in it.
    """

    FILE_NAME = "bench_targets.bin"

    def __init__(self, arch: str | None = None, program=None):
        host = host_arch()
        if arch is not None and arch != host:  # calling foreign machine code would crash Python
            raise unsupported_arch(arch, f"its bytes cannot run on this {host} CPU; the emulator "
                                         f"runs them: uprobe_lab.new_process({arch!r})")
        self.arch = host
        self._make_program = program
        self.program = None
        self.path: str | None = None
        self.base: int | None = None
        self._size = 0
        self._fd: int | None = None
        self._dir_cm = None
        self._loop = None

    # -- lifetime -------------------------------------------------------------------------------
    def __enter__(self) -> "NativeCode":
        try:
            self._open()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _open(self) -> None:
        bench_program = self._make_program or load_bench_program(self.arch)
        image = bench_program().code  # position independent: same bytes at any base
        with stop_deferred():
            dir_cm = scratch_dir()
            directory = dir_cm.__enter__()
            self._dir_cm = dir_cm
        self.path = os.path.join(directory, self.FILE_NAME)
        with open(self.path, "wb") as f:
            f.write(image)
        with stop_deferred():
            self._fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        self._size = len(image)
        with stop_deferred():
            addr = _libc().mmap(None, self._size, PROT_READ | PROT_EXEC, MAP_PRIVATE, self._fd, 0)
            if addr in (None, MAP_FAILED):
                e = ctypes.get_errno()
                raise OSError(e, f"mmap of {self.path} PROT_READ|PROT_EXEC: {os.strerror(e)}")
            self.base = addr
        self.program = bench_program(base=addr)
        if self.program.code != image:
            raise RuntimeError("bench bytes depend on the base address; they must not")
        if "producer_loop" in self.program.symbols:
            self._loop = ProducerLoop(self.program.resolve("producer_loop"))

    def close(self) -> None:
        """Release everything that was acquired; safe to call twice.

        Ctrl-C waits until all of it is released, and a failure releasing one part does not keep
        the later parts.
        """
        with stop_deferred():
            self._loop = None
            try:
                base, self.base = self.base, None
                if base is not None:
                    _libc().munmap(base, self._size)
            finally:
                try:
                    fd, self._fd = self._fd, None
                    if fd is not None:
                        os.close(fd)
                finally:
                    cm, self._dir_cm = self._dir_cm, None
                    if cm is not None:
                        cm.__exit__(None, None, None)

    # -- use --------------------------------------------------------------------------------------
    def addr(self, name: str) -> int:
        return self.program.resolve(name)

    def offset(self, name: str) -> int:
        """File offset of a symbol: what a uprobe on ``self.path`` is given."""
        return self.program.resolve(name) - self.program.base

    def run(self, target: str | int, n: int) -> None:
        """Call ``target`` (a symbol or an address) ``n`` times from the program's producer_loop."""
        if self._loop is None:
            raise RuntimeError("NativeCode is not open" if self.base is None else "this program has no producer_loop")
        if not is_int(n) or not 1 <= n < MAX_CALLS:
            raise ValueError(f"n must be in 1 .. 2**64-1 (the loop decrements a 64-bit count before it "
                             f"tests), got {n}")
        addr = self.program.resolve(target) if isinstance(target, str) else self._function_at(target)
        # Ctrl-C cannot stop native code in a ctypes call: Python acts on it only when the call
        # returns. So a long loop runs in chunks of about CHUNK_SECONDS each, sized from the rate of
        # the first chunk: a run of up to 2**16 calls is still one call, and a longer one pays one
        # ctypes call per chunk (well under 0.1% of its time).
        chunk = 1 << 16
        while n:
            calls = min(chunk, n)
            t0 = time.perf_counter()
            self._loop(calls, addr)
            n -= calls
            chunk = max(1 << 16, int(calls * CHUNK_SECONDS / max(time.perf_counter() - t0, 1e-9)))

    def _function_at(self, addr) -> int:
        """``addr`` if a function of the bench program starts there: a call anywhere else (mid-instruction, the
        int3 padding, another mapping) kills this Python with SIGSEGV or SIGTRAP, so it is refused instead."""
        found = self.program.symbol_at(addr) if is_int(addr) else None
        if found is None or found[1] != 0:
            where = f"{addr:#x}" if isinstance(addr, int) else repr(addr)
            raise LabError(f"{where} is not the start of a function of the bench program: calling it would kill this "
                           f"Python; pass a function's name ({', '.join(sorted(self.program.symbols))}) or "
                           "its address, nc.addr(name)")
        return addr

    def read(self, name: str, n: int = 5) -> bytes:
        """The bytes at a symbol as this process sees them now (breakpoints and calls included)."""
        return read_mem(self.program.resolve(name), n)
