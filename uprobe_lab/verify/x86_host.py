"""Ask the host kernel: one instruction, run in a forked child twice unprobed and once under a real uprobe.

The child maps the harness (``x86_harness``) at its fixed addresses, installs a signal handler on an
alternate stack, and runs the instruction from the same state three times: twice without a probe (a
result that differs between those two is not deterministic and cannot be judged) and once with a
perf ``uprobe`` on SITE. It reports whether perf_event_open refused the probe (errno), how many
hits the event counted, whether ``[uprobes]`` (an XOL area: the hit was single-stepped out of line)
or ``[uprobes-trampoline]`` (6.18 optimised a nop5 into a call) appeared in /proc/self/maps, the
site's first bytes after the hit, and each run's registers, signal, extended state and memory.
Nothing is compiled: the machine code is the harness's, the probe is native.perf's.
"""
from __future__ import annotations

import ctypes
import errno as errno_mod
import os
import pickle
import signal
import struct
from dataclasses import dataclass

from ..errors import LabError
from ..interrupt import stop_deferred
from ..native.libc import libc
from ..native.perf import PR_SET_PDEATHSIG, open_uprobe, read_count
from . import uprobe_multi, x86_harness as H

PROT_READ, PROT_WRITE, PROT_EXEC = 1, 2, 4
MAP_PRIVATE, MAP_ANONYMOUS, MAP_FIXED_NOREPLACE = 0x02, 0x20, 0x100000
SA_SIGINFO, SA_ONSTACK = 0x4, 0x08000000
CAUGHT = {"SIGILL": 4, "SIGTRAP": 5, "SIGBUS": 7, "SIGFPE": 8, "SIGSEGV": 11}
SIGNAMES = {v: k for k, v in CAUGHT.items()}
XSAVE_LEGACY_XMM, XSAVE_HEADER, XSAVE_YMM_HI = 160, 512, 576
XSAVE_X87_POINTERS = slice(8, 24)  # FIP and FDP: where the last x87 insn ran, not what it computed
CHUNK = 256
CHILD_TIMEOUT_S = 30  # a child still running then (a case that loops) is killed by SIGALRM: an error, not a hang


class SigAction(ctypes.Structure):  # glibc's struct sigaction on x86-64
    _fields_ = [("handler", ctypes.c_void_p), ("mask", ctypes.c_uint64 * 16), ("flags", ctypes.c_int),
                ("restorer", ctypes.c_void_p)]


class StackT(ctypes.Structure):
    _fields_ = [("sp", ctypes.c_void_p), ("flags", ctypes.c_int), ("size", ctypes.c_size_t)]


def cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _mmap(addr: int, size: int, prot: int, flags: int, fd: int = -1, offset: int = 0) -> None:
    got = libc().mmap(addr, size, prot, flags | MAP_FIXED_NOREPLACE, fd, offset)
    if got != addr:
        e = ctypes.get_errno()
        raise OSError(e, f"mmap at {addr:#x}: {os.strerror(e)} (got {got})")


def _install_signal_handlers() -> None:
    lib = libc()
    stack = StackT(H.ALT_STACK, 0, H.ALT_STACK_SIZE)
    if lib.sigaltstack(ctypes.byref(stack), None):
        raise OSError(ctypes.get_errno(), "sigaltstack")
    act = SigAction(H.SIG_HANDLER, (ctypes.c_uint64 * 16)(), SA_SIGINFO | SA_ONSTACK, None)
    for signo in CAUGHT.values():
        if lib.sigaction(signo, ctypes.byref(act), None):
            raise OSError(ctypes.get_errno(), f"sigaction {signo}")


def _prepare_template() -> None:
    """Extended state the test starts from: this thread's, with xmm/ymm 0-15 set to vector_pattern."""
    ctypes.CFUNCTYPE(None)(H.SAVE_TEMPLATE)()
    for i in range(16):
        pattern = H.vector_pattern(i)
        ctypes.memmove(H.TEMPLATE + XSAVE_LEGACY_XMM + 16 * i, pattern[:16], 16)
        ctypes.memmove(H.TEMPLATE + XSAVE_YMM_HI + 16 * i, pattern[16:], 16)
    bv = ctypes.c_uint64.from_address(H.TEMPLATE + XSAVE_HEADER)
    bv.value |= 0b110  # SSE and AVX state come from the area, not from their init values


def _mem_changes(initial: bytes) -> dict[int, bytes]:
    now = ctypes.string_at(H.DATA, H.DATA_SIZE)
    return {off: now[off : off + CHUNK] for off in range(0, H.DATA_SIZE, CHUNK)
            if now[off : off + CHUNK] != initial[off : off + CHUNK]}


def _xsave_at(addr: int) -> bytes:
    xsave = bytearray(ctypes.string_at(addr, H.XSAVE_SIZE))
    xsave[XSAVE_X87_POINTERS] = bytes(16)
    return bytes(xsave)


def _one_run(entry, data: bytes, regs_in: bytes) -> dict:
    ctypes.memmove(H.DATA, data, len(data))
    ctypes.memmove(H.IN_REGS, regs_in, len(regs_in))
    ctypes.memset(H.OUT_REGS, 0, 8 * len(H.GREGS))
    ctypes.memset(H.OUT_SIGNO, 0, 16)
    signalled = entry()
    out = struct.unpack(f"<{len(H.GREGS)}Q", ctypes.string_at(H.OUT_REGS, 8 * len(H.GREGS)))
    run = {"regs": dict(zip(H.GREGS, out)), "xsave": _xsave_at(H.OUT_XSAVE), "xsave_before": _xsave_at(H.IN_XSAVE),
           "mem": _mem_changes(data), "signal": None}
    if signalled:
        signo, addr = struct.unpack("<QQ", ctypes.string_at(H.OUT_SIGNO, 16))
        run["signal"] = SIGNAMES.get(signo & 0xFFFFFFFF, str(signo))
        run["sigaddr"] = addr
    return run


def _maps_names() -> set[str]:
    with open("/proc/self/maps") as f:
        return {line.split(maxsplit=5)[5].strip() for line in f if len(line.split(maxsplit=5)) == 6}


def _setup(code_fd: int, offset: int, flags: int):
    _mmap(H.CODE, H.CODE_SIZE, PROT_READ | PROT_EXEC, MAP_PRIVATE, code_fd, offset)
    _mmap(H.DATA, H.DATA_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS)
    _mmap(H.CTRL, H.CTRL_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS)
    _install_signal_handlers()
    _prepare_template()
    gprs = H.initial_gprs()
    regs_in = struct.pack(f"<{len(H.GREGS)}Q", *(gprs.get(r, 0) if r != "eflags" else flags for r in H.GREGS))
    return ctypes.CFUNCTYPE(ctypes.c_int)(H.ENTRY), H.data_image(), regs_in


def _after_probed_run(report: dict) -> None:
    names = _maps_names()
    report["xol_area"] = "[uprobes]" in names
    report["trampoline"] = "[uprobes-trampoline]" in names
    report["site_after"] = ctypes.string_at(H.SITE, 5)


def child_perf(job: "Job") -> dict:
    """perf mode: write this instruction's file, run it twice, attach a perf uprobe, run it again."""
    with open(job.path, "wb") as f:
        f.write(H.build_image(job.insn, job.opmask))
    entry, data, regs_in = _setup(os.open(job.path, os.O_RDONLY), 0, job.flags)
    report = {"runs": [_one_run(entry, data, regs_in), _one_run(entry, data, regs_in)], "attach_errno": None}
    try:
        probe = open_uprobe(job.path, H.SITE - H.CODE)
    except OSError as err:
        report["attach_errno"] = err.errno
        report["attach_error"] = errno_mod.errorcode.get(err.errno, str(err.errno))
        return report
    try:
        report["runs"].append(_one_run(entry, data, regs_in))
        report["hits"] = read_count(probe)
        _after_probed_run(report)
    finally:
        os.close(probe)
    return report


def child_batch(job: "Job") -> dict:
    """uprobe_multi mode: this instruction's cell of the batch, from the unprobed copy twice, then from
    the probed file, where the kernel installed the breakpoint when the cell was mapped - or, if it
    refused the instruction (arch_uprobe_analyze_insn failed in uprobe_mmap), did not."""
    entry, data, regs_in = _setup(os.open(job.plain_path, os.O_RDONLY), job.offset, job.flags)
    report = {"runs": [_one_run(entry, data, regs_in), _one_run(entry, data, regs_in)], "attach_errno": None}
    if libc().munmap(ctypes.c_void_p(H.CODE), ctypes.c_size_t(H.CODE_SIZE)):
        raise OSError(ctypes.get_errno(), "munmap")
    _mmap(H.CODE, H.CODE_SIZE, PROT_READ | PROT_EXEC, MAP_PRIVATE, os.open(job.path, os.O_RDONLY), job.offset)
    if ctypes.string_at(H.SITE, 1) != b"\xcc":
        report["attach_errno"] = "no breakpoint installed"
        return report
    report["runs"].append(_one_run(entry, data, regs_in))
    report["hits"] = None  # no counter in this mode: the breakpoint is at the first instruction run
    _after_probed_run(report)
    return report


@dataclass
class Job:
    key: object
    insn: bytes
    flags: int
    opmask: bool
    path: str  # perf: this instruction's file; batch: the probed batch file
    plain_path: str = ""  # batch: an unprobed copy of the batch file
    offset: int = 0  # batch: this instruction's cell


def _child(job: Job, run, w: int, parent: int) -> None:
    """The forked child: run, send the report (length-prefixed pickle), exit without returning."""
    status = 0
    signal.signal(signal.SIGALRM, signal.SIG_DFL)  # its default action ends the child, whatever the parent set
    signal.alarm(CHILD_TIMEOUT_S)
    try:
        libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # dies with the parent, even one killed hard
        if os.getppid() != parent:  # the parent died before the prctl: nobody is left to read the report
            raise SystemExit
        try:
            report = run(job)
        except BaseException as err:  # noqa: BLE001 - the parent gets it as data
            report = {"error": f"{type(err).__name__}: {err}"}
        payload = pickle.dumps(report)
        view = memoryview(struct.pack("<Q", len(payload)) + payload)
        while view:
            view = view[os.write(w, view):]
    except BaseException:
        status = 1
    finally:
        os._exit(status)  # a perf probe's fd is closed here, after the parent has the report


class HostPool:
    """Run instructions on the host, several children at a time.

    ``probe="perf"``: one perf uprobe per instruction, attached by the child itself. Closing a perf
    uprobe takes the kernel ~85 ms (tracepoint_synchronize_unregister under event_mutex, one close at
    a time), which bounds the throughput; a child sends its report before it exits, so at least the
    parent does not wait for it. ``probe="bpf"``: batches of instructions, one file and one
    uprobe_multi link per batch (see uprobe_multi), detached once per batch.
    """

    BATCH = 256

    def __init__(self, workdir: str, opmask: bool, parallel: int = 16, probe: str = "perf"):
        if probe not in ("perf", "bpf"):
            raise ValueError(f"probe must be perf or bpf, not {probe!r}")
        if parallel < 1:
            raise ValueError(f"parallel must be at least 1 (children at a time), not {parallel!r}")
        self.workdir, self.opmask, self.parallel, self.probe = workdir, opmask, parallel, probe
        self._serial = 0

    def run(self, jobs):
        """``jobs``: iterable of (key, insn bytes, flags). Yields (key, report) as reports arrive."""
        if self.probe == "perf":
            yield from self._run(self._perf_jobs(jobs), child_perf)
            return

        try:
            prog = uprobe_multi.load_program()
        except OSError as err:
            raise LabError(f"--probe bpf needs bpf(2) with uprobe_multi (Linux 6.6+, root): {err.strerror}; "
                           "use --probe perf") from None
        try:
            jobs = list(jobs)
            for start in range(0, len(jobs), self.BATCH):
                yield from self._batch(prog, jobs[start : start + self.BATCH])
        finally:
            os.close(prog)

    def _perf_jobs(self, jobs):
        for key, insn, flags in jobs:
            self._serial += 1
            yield Job(key, insn, flags, self.opmask, os.path.join(self.workdir, f"site-{os.getpid()}-{self._serial}.bin"))

    def _batch(self, prog: int, jobs: list):
        self._serial += 1
        probed, plain = (os.path.join(self.workdir, f"batch-{os.getpid()}-{self._serial}-{k}.bin") for k in ("p", "u"))
        image = b"".join(H.build_image(insn, self.opmask) for _, insn, _ in jobs)
        for path in (probed, plain):
            with open(path, "wb") as f:
                f.write(image)
        offsets = [k * H.CODE_SIZE for k in range(len(jobs))]
        link = uprobe_multi.attach(prog, probed, [o + H.SITE - H.CODE for o in offsets])
        try:
            batch = (Job(key, insn, flags, self.opmask, probed, plain, off) for (key, insn, flags), off in zip(jobs, offsets))
            yield from self._run(batch, child_batch)
        finally:
            os.close(link)  # every probe of the batch goes, with one synchronisation
            _unlink(probed)
            _unlink(plain)

    def _run(self, jobs, child):
        import selectors

        sel = selectors.DefaultSelector()
        jobs = iter(jobs)
        children: set[int] = set()
        pending = 0
        exhausted = False
        try:
            while True:
                while not exhausted and len(children) < self.parallel:
                    job = next(jobs, None)
                    if job is None:
                        exhausted = True
                        break
                    # Ctrl-C held: one raised in os.fork's hooks is lost, one after it leaves a child unreaped
                    with stop_deferred():
                        r, w = os.pipe()
                        parent = os.getpid()
                        pid = os.fork()
                        if pid == 0:
                            os.close(r)
                            _child(job, child, w, parent)
                        os.close(w)
                        children.add(pid)
                        own_file = job.path if child is child_perf else None
                        sel.register(r, selectors.EVENT_READ, [job.key, own_file, bytearray()])
                    pending += 1
                if not pending:
                    if exhausted:
                        break
                    # every slot is held by a child that has sent its report but not yet exited: the
                    # jobs left wait for one of them, they are not done
                    self._reap(children, block=True, one=True)
                    continue
                for sk, _ in sel.select(timeout=0.5):
                    key, own_file, buf = sk.data
                    chunk = os.read(sk.fd, 1 << 16)
                    buf += chunk
                    complete = len(buf) >= 8 and len(buf) >= 8 + struct.unpack_from("<Q", buf)[0]
                    if complete or not chunk:
                        sel.unregister(sk.fd)
                        os.close(sk.fd)
                        pending -= 1
                        if own_file:
                            _unlink(own_file)
                        yield key, (pickle.loads(bytes(buf[8:])) if complete
                                    else {"error": f"the child died without a report (one still running after "
                                                   f"{CHILD_TIMEOUT_S} s is killed)"})
                self._reap(children, block=False)
        finally:
            for key in list(sel.get_map().values()):
                os.close(key.fd)
                if key.data[1]:
                    _unlink(key.data[1])
            sel.close()
            self._reap(children, block=True)

    @staticmethod
    def _reap(children: set[int], block: bool, one: bool = False) -> None:
        for pid in list(children):
            got, _ = os.waitpid(pid, 0 if block else os.WNOHANG)
            if got:
                children.discard(pid)
                if one:
                    return


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
