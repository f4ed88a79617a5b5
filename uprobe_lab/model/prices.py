"""Priced kinds and per-hit counts: what one probe hit costs, in events, and how events become nanoseconds.

A bench's predicted time per hit (per loop iteration) is::

    ns = sum over priced kinds of  count_per_hit(kind) * price(kind)  +  fixed-price events

where ``count_per_hit`` always comes from :func:`uprobe_lab.bench.events_per_hit` for that bench, arch
and kernel (never typed in here). Each price names the event kinds it covers; kinds tied in one price
are ones that occur together in every bench (``handler`` = one probe lookup or one consumer run).

A copy to or from user memory is priced per call, not per byte: the uprobe paths copy 8 to 32 bytes at
a time, and what such a copy costs is its set-up (access_ok, STAC/CLAC, the exception-table guarded
moves), not its bytes (``benchmarks/uaccess_size.py`` measures both on the machine it runs on).

A trap taken in a 32-bit task (the host's ``*-compat`` benches) is priced apart from a 64-bit task's: the
emulator counts the same events for both, but the lab's VMs charge them differently (a third less for the
32-bit task on one AMD EPYC VM, a few percent more on the Intel ones; docs/model.md, v9), and no published
bench runs a 32-bit task.
"""
from __future__ import annotations

import functools
import numbers

import numpy as np
import pandas as pd

from .. import bench as _bench
from ..kernel import KERNELS, modelled_kernel, refuse_before_uprobes, refuse_uretprobe_before, row_for_release  # modelled_kernel: re-exported
from ..errors import shown
from ..process import LabError

PRICES = {
    "user_insn": ({"user_insns": 1}, "per user instruction (loop, target, XOL slot, trampoline)"),
    "exception": ({"exceptions": 1}, "per exception round trip: entry + iret/eret"),
    # only the host's 32-bit task benches pay it (see the module doc)
    "compat_exception": ({"compat_exceptions": 1}, "per exception round trip in a 32-bit task (host price benches only)"),
    "syscall": ({"syscalls": 1}, "per syscall round trip: entry + sysret"),
    "handler": ({"probe_lookups": 1, "consumers": 1}, "per probe lookup and per consumer run"),
    "xol_step": ({"xol_steps": 1}, "per out-of-line single-step (beyond its #DB exception)"),
    "return_instance": ({"ri_pushed": 1, "ri_popped": 1}, "per return instance pushed or popped"),
    "uaccess": ({"uaccess_copies": 1}, "per copy from/to user memory (a call, whatever its 8-64 bytes)"),
    "pin_map": ({"pages_pinned": 1}, "per user page pinned and mapped into the kernel (arm64 STP v2)"),
    # only the host's page-pin pair pays it; priced so that pair's extra kernel work is not read as a
    # dearer syscall
    "futex_wake": ({"futex_wakes": 1}, "per FUTEX_WAKE past its key (hash bucket; host price benches only)"),
}
PRICE_NAMES = list(PRICES)
# Not fitted: ``emulated`` is small next to the exception it rides on; the other three are zero per hit in
# the steady state (bench.events_per_hit warms up first), priced only so a non-steady count shows.
FIXED_PRICES = {"emulated": 5.0, "text_patches": 1000.0, "cpu_syncs": 1000.0, "signals": 1000.0}

# Seed 002's "base" is bench_trigger.c's old trig-base, the getpgid loop that syscall-count replaced.
BENCH_ALIASES = {"base": "syscall-count"}
# arm64 STP labels -> emulator options: stepped upstream, v2's pinned page (the seed), v1's one copy_to_user
ARM64_STP = {"xol-stp": {"stp": "xol"}, "simulated-stp": {"stp": "simulate"},
             "simulated-stp-uaccess": {"stp": "simulate", "stp_store": "uaccess"}}
ARM64_KERNEL = "6.18"



def kernel_setup(arch: str, kernel: str) -> tuple[str, dict]:
    """A kernel label -> (emulator kernel version, emulator options).

    x86-64 labels are versions; any other release (``6.14.2``, ``6.8.0-45-generic``, ``5.15``) is priced by the
    modelled row that answers for it, :func:`uprobe_lab.kernel.row_for_release` (the mapping ``bench`` and
    ``analyze`` use): one older than every modelled version by the oldest. The arm64 STP patch was never merged,
    so its labels (``xol-stp``, ``simulated-stp``, ``simulated-stp-uaccess``) are emulator options on the newest
    modelled kernel.
    """
    kernel = str(kernel)
    if arch == "arm64" and kernel in ARM64_STP:
        return ARM64_KERNEL, dict(ARM64_STP[kernel])
    if kernel in KERNELS:
        return kernel, {}
    refuse_before_uprobes(kernel, arch)
    return _row_for_release(kernel)[0], {}


_row_for_release = functools.lru_cache(maxsize=4096)(row_for_release)  # once per release: a table may name thousands


@functools.lru_cache(maxsize=None)
def _events(bench: str, arch: str, kernel: str, options: tuple) -> tuple:
    name = BENCH_ALIASES.get(bench, bench)
    ev = _bench.events_per_hit(name, arch, kernel, **dict(options))
    process_options = {**dict(_bench.bench_spec(name, arch).options), **dict(options)}  # as bench_process merges them
    if process_options.get("compat_task") and "exceptions" in ev:
        ev["compat_exceptions"] = ev.pop("exceptions")  # priced apart: see the module doc
    return tuple(sorted(ev.items()))


def clear_cache() -> None:
    """Forget cached emulator counts (after monkeypatching the emulator, for instance)."""
    _events.cache_clear()


def events_for(bench: str, arch: str = "x86_64", kernel: str = "6.18", consumers: int = 1,
               **options) -> dict[str, float]:
    """Steady-state events per hit, from the emulator (cached), as the model prices them: a 32-bit task's
    traps are counted as ``compat_exceptions`` instead of ``exceptions`` (the module doc says why). ``kernel``
    may be an arm64 STP label or a release string. ``consumers`` > 1: that many consumers on the probe (each
    runs on every hit); 0 only for a bench without a probe. A probe bench with none is refused: unregistering a
    probe's last consumer removes its breakpoint (register_for_each_vma() in kernel/events/uprobes.c, as the filter
    chain of no consumer wants no mm; the lab's twin is uprobes.uprobe_unregister), so no call hits it."""
    if isinstance(consumers, bool) or not isinstance(consumers, numbers.Integral) or consumers < 0:
        raise LabError(f"consumers is an int from 1 (0 for a bench without a probe), got {shown(consumers)}")
    version, extra = kernel_setup(arch, kernel)
    if _bench.bench_spec(BENCH_ALIASES.get(bench, bench), arch).probe == "uretprobe":
        missing = refuse_uretprobe_before(kernel, bench)  # a release the oldest row answers for may predate them
        if missing:
            raise LabError(missing)
    extra.update(options)
    ev = dict(_events(bench, arch, version, tuple(sorted(extra.items()))))
    if consumers == 0 and ev.get("consumers"):
        raise LabError(f"consumers=0 on {bench}: a probe with no consumer is not installed (the kernel removes its "
                       "breakpoint when the last consumer goes), so no call hits it; give 1 or more, or price the "
                       "plain call with the bench usermode-count, which has no probe")
    if consumers != 1 and ev.get("consumers"):
        ev["consumers"] = ev["consumers"] * consumers
    return ev


def kernel_label(arch: str, kernel: str) -> str:
    """The label :func:`events_for` reads a kernel label or release as (``6.14.2`` -> ``6.11``): rows of the
    releases one modelled version answers for have its events, so they can be priced once."""
    version, options = kernel_setup(arch, kernel)
    return str(kernel) if options else version


def events_rows(rows: pd.DataFrame, arch: str) -> tuple[np.ndarray, list[dict]]:
    """The events per hit of each row (bench, kernel[, consumers]) as an index into a list of the distinct
    ones: a table of many rows costs one :func:`events_for` per distinct (bench, modelled kernel, consumers),
    not one per row."""
    kernels = rows["kernel"].astype(str)
    labels = kernels.map({k: kernel_label(arch, k) for k in kernels.unique()})
    consumers = (pd.to_numeric(rows["consumers"]).fillna(1).replace(0, 1).astype(int) if "consumers" in rows
                 else pd.Series(1, index=rows.index))
    frame = pd.DataFrame({"bench": rows["bench"].astype(str).to_numpy(), "kernel": labels.to_numpy(),
                          "consumers": consumers.to_numpy()})
    codes = frame.groupby(list(frame), sort=False).ngroup().to_numpy()
    firsts = frame.iloc[np.unique(codes, return_index=True)[1]]  # a row of each group, in the groups' order
    return codes, [events_for(r.bench, arch, r.kernel, int(r.consumers)) for r in firsts.itertuples(index=False)]


def price_counts(events: dict) -> np.ndarray:
    """Per-hit counts of each priced kind (in PRICE_NAMES order)."""
    return np.array([sum(events.get(k, 0) * w for k, w in PRICES[p][0].items()) for p in PRICE_NAMES], float)


def fixed_ns(events: dict) -> float:
    return sum(events.get(k, 0) * ns for k, ns in FIXED_PRICES.items())


def hit_ns(prices: dict, events: dict) -> float:
    """Predicted nanoseconds per hit (per loop iteration)."""
    return float(price_counts(events) @ np.array([prices[p] for p in PRICE_NAMES])) + fixed_ns(events)


def breakdown(prices: dict, events: dict) -> dict[str, float]:
    """ns per hit spent in each priced kind, plus ``fixed`` for the fixed-price events."""
    counts = price_counts(events)
    out = {p: float(c * prices[p]) for p, c in zip(PRICE_NAMES, counts)}
    out["fixed"] = fixed_ns(events)
    return out
