"""The kernel bench's trig-* usermode family, measured on this host's kernel with the lab's bytes.

Same method as tools/testing/selftests/bpf/bench: a producer calls the target in a tight loop
while a probe counts hits. Here the loop is the lab's ``producer_loop`` (native code); the probe is a
perf uprobe event, opened for every task as the bench opens its own (:func:`.perf.bench_trigger_event`),
running the bench's kind of BPF program (:mod:`.bpf`: one atomic add to a map counter), so a hit costs what
it costs in the published rows. Each bench attaches, warms up,
then times ``repeats`` intervals of ``iterations`` calls; ``mops`` and ``stddev`` are the mean
and sample standard deviation of the per-interval rates in M calls/s, as in the bench's
"Summary: hits X ± Y M/s" line.
"""
from __future__ import annotations

import contextlib
import os
import statistics
import tempfile
import time
import warnings
from pathlib import Path
from typing import Callable, Iterable

try:
    import fcntl
except ImportError:  # not POSIX: no native bench runs, but the package still imports
    fcntl = None

from ..bench import bench_names, bench_spec, refused_row
from ..errors import is_int, shown
from ..machine_scaling import calls_lasting
from ..sites import LEA_RSP_MINUS_0X80, calls_uprobe_trampoline
from ..usdt import LIBBPFS, has_uprobe_syscall, usdt_probe_offset
from .bpf import BpfCounter
from .arch import load_bench_program
from .code import MAX_CALLS, NativeCode
from .host import kernel_release, parse_maps
from .perf import bench_trigger_event
from .scheme import ENOTSUPP, uprobe_syscall_result
from .support import check_native_support

DEFAULT_ITERATIONS = 100_000
DEFAULT_REPEATS = 5
NOISY_SPREAD = 0.5  # stddev over mean past which a row's intervals disagree too much to trust its mean
WARMUP_MIN = 1_000  # the first hit on a nop5 is where 6.18 optimises it
CALIBRATION_S = 0.02  # a baseline's trial interval, long enough that the timer and start-up weigh little in it
CPU_LOCK_DIR = Path(tempfile.gettempdir()) / "uprobe_lab-cpus"  # one lock file per CPU a bench is pinned to
# another directory for the locks: benches that share it share the CPUs out; a test suite gives its own
CPU_LOCK_DIR_ENV = "UPROBE_LAB_CPU_LOCK_DIR"


# The native table: the 6.18 bench's names (bench_spec gives each one's target and probe kind), with
# the pagecross pair last, the order of the recorded example. 7.3's nop10 benches and the USDT ones
# (EXTRA_BENCH_NAMES) run when asked for by name: the recording predates them.
BENCH_NAMES = tuple(sorted((n for n in bench_names() if "nop10" not in n and not n.startswith("usdt-")),
                           key=lambda n: n.endswith("-pagecross")))
EXTRA_BENCH_NAMES = tuple(n for n in bench_names() if n not in BENCH_NAMES)


def available_benches(program) -> list[str]:
    """Bench names whose target exists in ``program`` (the nop5, nop10 and usdt ones are x86-only)."""
    return [n for n in BENCH_NAMES + EXTRA_BENCH_NAMES if bench_spec(n).target in program.symbols]


def host_benches(arch: str, names: list[str]) -> list[str]:
    """The benches ``arch``'s bench program has; ValueError naming any of ``names`` it lacks. Asked before a CPU is
    pinned or held, so a mistyped name is the one thing said."""
    have = available_benches(load_bench_program(arch)())
    unknown = [n for n in names if n not in have]
    if unknown:
        raise ValueError(f"unknown native bench(es) {', '.join(map(shown, unknown))} on {arch}; known: {', '.join(have)}")
    return have


@contextlib.contextmanager
def pinned_to_one_cpu():
    """Pin to the first free CPU this process may run on for the block, and restore the old mask on the way out.

    That is CPU 0 when nothing restricts the process: the kernel bench's ``-a`` pins its one producer there
    (tools/testing/selftests/bpf/bench.c, ``next_cpu()`` counts up from 0 when no CPU list is given). Every
    run then measures the same CPU, where pinning to the CPU a process happened to start on did not. A CPU
    another lab bench holds (a lock file per CPU) is skipped: two producers on one CPU halve both rates."""
    try:
        old = os.sched_getaffinity(0)
    except (OSError, AttributeError):
        yield
        return
    with contextlib.ExitStack() as held:
        cpu = next((c for c in sorted(old) if held.enter_context(cpu_lock(c))), None)
        if cpu is None:
            cpu = min(old)
            warnings.warn(f"every CPU this process may use ({', '.join(map(str, sorted(old)))}) runs another lab "
                          f"bench: this one shares CPU {cpu} with {cpu_lock_holder(cpu)} and each measures about "
                          "half its rate; let the other finish", RuntimeWarning, stacklevel=3)
        os.sched_setaffinity(0, {cpu})
        try:
            yield
        finally:
            os.sched_setaffinity(0, old)


def cpu_lock_dir() -> Path:
    """Where the CPU locks are: $UPROBE_LAB_CPU_LOCK_DIR, else one directory every lab bench on the machine shares."""
    return Path(os.environ.get(CPU_LOCK_DIR_ENV) or CPU_LOCK_DIR)


@contextlib.contextmanager
def cpu_lock(cpu: int):
    """True inside the block if this process holds ``cpu``'s bench lock (another lab bench holds it: False).
    The holder writes its pid in the file, so a bench that finds it taken can say who has it. A lock this user
    cannot open (another user's lab made the shared directory) is taken read-only, which flock allows; where not
    even that opens, the bench runs without the lock and a warning says so, rather than failing."""
    if fcntl is None:
        yield True
        return
    try:
        lock = _open_lock(cpu_lock_dir() / f"cpu{cpu}.lock")
    except OSError as err:
        warnings.warn(f"the CPU bench locks in {cpu_lock_dir()} cannot be taken ({err.strerror}), so this bench "
                      f"may share a CPU with another user's; set {CPU_LOCK_DIR_ENV} to a directory of your "
                      "own to keep your benches apart", RuntimeWarning, stacklevel=3)
        yield True
        return
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        if lock.writable():
            lock.truncate(0)
            lock.write(f"{os.getpid()}\n")
            lock.flush()
        yield True  # closing the file releases the lock, also when the process dies


def _open_lock(path: Path):
    """``path`` opened for flock: read-write (to write the holder's pid), else read-only (another user's file).
    O_NOFOLLOW: a link planted in the shared directory is never followed to truncate the file it names."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        return os.fdopen(fd, "r+")
    except PermissionError:
        return open(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC))


def cpu_lock_holder(cpu: int) -> str:
    """Who holds ``cpu``'s bench lock, as 'pid N (command line)', from the pid the holder wrote."""
    try:
        pid = int((cpu_lock_dir() / f"cpu{cpu}.lock").read_text().split()[0])
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            command = " ".join(f.read().decode(errors="replace").replace("\0", " ").split())  # one line
    except (OSError, ValueError, IndexError):  # not written yet, or the holder has just gone
        return "another lab bench"
    return f"pid {pid} ({command[:120] or 'no command line'})"


def _measure(nc: NativeCode, addr: int, iterations: int, repeats: int,
             progress: Callable[[int], object] | None) -> list[float]:
    rates = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        nc.run(addr, iterations)
        dt = time.perf_counter_ns() - t0
        rates.append(iterations * 1e3 / max(dt, 1))  # calls per ns * 1e3 = M calls/s
        if progress is not None:
            progress(1)
    return rates


def calls_filling(seconds: float, per_cpu_rate: Callable[[int], float]) -> int:
    """Calls that fill an interval of ``seconds``, from trial intervals (``per_cpu_rate(calls)``: M calls/s per
    CPU over one interval of ``calls``) grown until one lasts CALIBRATION_S (or ``seconds``, if shorter)."""
    calls = 10_000
    while True:
        per_cpu = per_cpu_rate(calls)
        if calls / (per_cpu * 1e6) >= min(seconds, CALIBRATION_S):
            return min(calls_lasting(seconds, per_cpu), MAX_CALLS - 1)
        calls = min(calls_lasting(1.5 * min(seconds, CALIBRATION_S), per_cpu), MAX_CALLS - 1)


def spread_note(row: dict) -> str | None:
    """A warning for a row whose timed intervals disagree by more than NOISY_SPREAD of their mean: its figure
    says little. Short intervals are the usual cause (thread start-up and timer reads weigh on a few ms), a
    busy machine the other; None for a row that can be trusted (or has no spread: one interval, refused)."""
    if not row.get("mops") or row.get("stddev", 0.0) <= NOISY_SPREAD * row["mops"]:
        return None
    interval_ms = row.get("cpus", 1) * row["iterations"] / (row["mops"] * 1e3)
    longer = (f"raise --iterations (say to {10 * row['iterations']:_})" if "lasts_as_long_as" not in row else
              f"raise --iterations, and its intervals, as long as {row['lasts_as_long_as']}'s, grow with it")
    return (f"{row['bench']}: stddev {row['stddev']:.3f} against a mean of {row['mops']:.3f} M/s: its "
            f"{row['repeats']} intervals of {row['iterations']:_} calls ({interval_ms:.2g} ms each) disagree too much "
            f"to trust; {longer}, or run it on a quieter machine")


def usdt_offset(nc: NativeCode, target: str) -> tuple[int, str]:
    """Where libbpf probes this USDT target on this host: the libbpf whose feature probe recognises
    the kernel's answer to syscall 336 (if any) decides between the nop and the long nop at +1."""
    ret = uprobe_syscall_result(nc)
    libbpf = next((lib for lib in LIBBPFS if has_uprobe_syscall(ret, lib)), LIBBPFS[-1])
    return usdt_probe_offset(nc.read(target, len(libbpf.combo)), nc.addr(target), ret, libbpf)


def open_bench_event(nc: NativeCode, name: str, kernel: str):
    """Bench ``name``'s probe as the kernel bench opens it: (the open event, its offset into the target, why there
    (usdt) or None, None); or (None, offset, why, a refused row) when the kernel refuses the instruction."""
    bench = bench_spec(name, nc.arch)
    offset, why = usdt_offset(nc, bench.target) if bench.probe == "usdt" else (0, None)
    ev = bench_trigger_event(nc.path, nc.offset(bench.target) + offset, retprobe=bench.probe == "uretprobe")
    try:
        ev.open()
    except OSError as err:
        if err.errno != ENOTSUPP:
            raise
        return None, offset, why, refused_row(name, nc.arch, "native", kernel, "perf_event_open failed with errno "
                                              "524 (ENOTSUPP): arch_uprobe_analyze_insn refused the instruction at "
                                              f"{bench.target}+{offset}")
    return ev, offset, why, None


def run_bench(nc: NativeCode, name: str, iterations: int = DEFAULT_ITERATIONS, repeats: int = DEFAULT_REPEATS,
              progress: Callable[[int], object] | None = None) -> dict:
    """One bench on an open NativeCode; the probe (if any) is gone when this returns or raises.

    A probe the kernel refuses at attach (ENOTSUPP: 6.18 and a nop10) gives a row with ``refused``."""
    bench = bench_spec(name, nc.arch)
    addr = nc.addr(bench.target)
    warmup = max(WARMUP_MIN, iterations // 10)
    row = {"bench": name, "arch": nc.arch, "mode": "native", "kernel": kernel_release(),
           "iterations": iterations, "repeats": repeats}
    if bench.probe is None:
        nc.run(addr, warmup)
        rates = _measure(nc, addr, iterations, repeats, progress)
        hits, optimized, site = iterations * repeats, None, nc.read(bench.target)
    else:
        ev, offset, why, refused = open_bench_event(nc, name, row["kernel"])
        if why:
            row["usdt_probe"] = f"+{offset}: {why}"
        if refused:
            if progress is not None:
                progress(repeats)
            return refused
        try:
            with BpfCounter() as counter:
                counter.attach(ev.fd)
                nc.run(addr, warmup)
                site = nc.read(bench.target, 10 + offset)[offset:]
                optimized = calls_uprobe_trampoline(site, addr + offset, parse_maps())
                site = site[:10] if site[:5] == LEA_RSP_MINUS_0X80 else site[:5]
                before = counter.count()
                rates = _measure(nc, addr, iterations, repeats, progress)
                hits = counter.count() - before
        finally:
            ev.close()
    row.update(hits=hits, mops=statistics.fmean(rates),
               stddev=statistics.stdev(rates) if len(rates) > 1 else 0.0,
               optimized=optimized, site_bytes=site.hex())
    return row


def run_native_benches(names: Iterable[str] | None = None, iterations: int = DEFAULT_ITERATIONS,
                       repeats: int = DEFAULT_REPEATS,
                       progress: Callable[[int], object] | None = None, arch: str | None = None) -> list[dict]:
    """Run the native benches on this host; one result dict per bench, in the order asked.

    names       bench names (default: the table of BENCH_NAMES this architecture has; any of
                EXTRA_BENCH_NAMES by name: uprobe-nop10, uretprobe-nop10, usdt-*, their pagecross variants)
    iterations  calls per timed interval (>= 1) of a probed bench; a bench without a probe (usermode-count,
                syscall-count), a hundred times faster, makes as many calls as fill the shortest probed bench's
                interval, and never fewer than ``iterations`` (its row says ``lasts_as_long_as``): in a
                10_000-call interval of a 700 M/s loop (14 us) the timer's reads weigh as much as the calls
    repeats     timed intervals per bench (>= 1); stddev needs >= 2
    progress    called as progress(1) after every timed interval, e.g. a tqdm bar's ``update``
                with total = len(names) * repeats
    arch        the architecture asked for (default: this host's); another one is refused

    Each dict: bench, arch, mode ("native"), kernel, iterations, repeats, hits, mops, stddev,
    optimized (True/False for probe benches, None without a probe), site_bytes (hex of the first
    5 bytes of the probed instruction after warm-up, 10 for an optimised nop10), usdt_probe (usdt
    benches: where libbpf put the probe and why); a bench whose probe the kernel refuses gives
    {bench, arch, mode, kernel, refused} instead. Raises NativeUnavailable (with the reason and the way
    out) when the host cannot run them; ValueError for an unknown name. Every probe, mapping,
    fd and temp file is released on return, on error and on KeyboardInterrupt. The process is
    pinned to one CPU while it runs (like the bench's -a) and unpinned afterwards.
    """
    if isinstance(names, str):
        raise ValueError(f"names is a list of bench names: run_native_benches([{names!r}])")
    if names is not None:
        try:
            names = list(names)
        except TypeError:
            raise ValueError(f"names is a list of bench names, e.g. ['uprobe-nop'], got {shown(names)}") from None
        if not all(isinstance(n, str) for n in names):
            raise ValueError(f"bench names are strings such as 'uprobe-nop', got "
                             f"{shown(next(n for n in names if not isinstance(n, str)))}")
    if not (is_int(iterations) and is_int(repeats)):
        raise ValueError(f"iterations and repeats are ints, got {iterations!r} and {repeats!r}")
    if iterations < 1 or repeats < 1:
        raise ValueError("iterations and repeats must be >= 1")
    if iterations >= MAX_CALLS:
        raise ValueError(f"iterations must be below 2**64 (the loop count is one 64-bit register), got {iterations}")
    arch = check_native_support(arch)
    have = host_benches(arch, names or [])
    wanted = [n for n in BENCH_NAMES if n in have] if names is None else names
    with pinned_to_one_cpu(), NativeCode(arch) as nc:
        rows = {n: run_bench(nc, n, iterations, repeats, progress) for n in wanted
                if bench_spec(n, arch).probe is not None}
        shortest = min((r for r in rows.values() if r.get("mops")), key=_interval_seconds, default=None)
        for n in wanted:
            if n in rows:
                continue
            if shortest is None:
                rows[n] = run_bench(nc, n, iterations, repeats, progress)
                continue
            addr = nc.addr(bench_spec(n, arch).target)
            calls = max(iterations, calls_filling(_interval_seconds(shortest),
                                                  lambda c: _measure(nc, addr, c, 1, None)[0]))
            rows[n] = {**run_bench(nc, n, calls, repeats, progress), "lasts_as_long_as": shortest["bench"]}
        return [rows[n] for n in wanted]


def _interval_seconds(row: dict) -> float:
    """How long one timed interval of a one-CPU row lasted."""
    return row["iterations"] / (row["mops"] * 1e6)
