"""One moment seen twice: a probe registered and hit, on this host's kernel and in the emulator.

Both sides start from a fresh process (the host side runs in a child Python, because the kernel
keeps ``[uprobes]`` and ``[uprobes-trampoline]`` mapped until the process exits, so earlier probes
of a notebook would show), load the same bench bytes, attach the bench's probe, call the target
``hits`` times, and describe what is there now with the keys of :func:`host.host_snapshot`: the
probe site's bytes, whether it became a ``call`` into ``[uprobes-trampoline]``, the special
mappings and the trampolines' bytes. :func:`compare` lines the two up.

Addresses differ (ASLR on the host, fixed addresses in the lab), so a ``call rel32`` site is
compared by where it goes (which mapping, which offset), everything else byte for byte.

Run as ``python -m uprobe_lab.native.compare BENCH [HITS]`` it prints the host snapshot as JSON.
"""
from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

from ..arches import make_process
from ..bench import bench_spec
from ..errors import LabError
from ..program import listing_lines
from ..sites import SPECIAL_MAPPINGS, UPROBES, UPROBES_TRAMPOLINE, call_target, calls_uprobe_trampoline
from ..uprobes import CountingConsumer, uprobe_register
from ..kernel import modelled_kernel
from .code import NativeCode
from .fresh import in_new_python
from .host import host_snapshot, trampoline_report
from .perf import UprobeEvent
from .support import check_native_support

if TYPE_CHECKING:
    import pandas as pd

COMPARE_BENCHES = ("uprobe-nop5", "uretprobe-nop")
DEFAULT_HITS = 100
EMULATED_KERNEL = "6.18"


def _probed(bench: str, arch: str = "x86_64"):
    try:
        spec = bench_spec(bench, arch)
    except LabError as err:
        raise ValueError(str(err)) from None
    if spec.probe is None:
        raise ValueError(f"{bench} has no probe: nothing to compare")
    return spec


# --- the emulator's side ------------------------------------------------------------------------

def emulator_snapshot(bench: str = "uprobe-nop5", kernel: str = EMULATED_KERNEL, hits: int = DEFAULT_HITS,
                      arch: str = "x86_64") -> dict:
    """The emulator after ``hits`` calls of a probed bench target; same keys as ``host_snapshot``."""
    spec = _probed(bench, arch)
    proc = make_process(arch, kernel)
    consumer = CountingConsumer(ret=spec.probe == "uretprobe")
    uprobe_register(proc, spec.target, consumer)
    site_addr = proc.program.resolve(spec.target)
    proc.call("producer_loop", hits, site_addr)
    specials = [m for m in proc.mappings if m.name in SPECIAL_MAPPINGS]
    site = proc.read(site_addr, 5)
    target = call_target(site, site_addr)

    def reader(addr, n):
        return proc.read(addr, n), "emulated memory"

    return {
        "side": "emulator", "bench": bench, "hits": consumer.hits,
        "kernel": str(proc.kernel), "arch": arch,
        "site_addr": hex(site_addr), "site_bytes": site.hex(), "site_read_via": "emulated memory",
        "site_listing": listing_lines(site, arch, site_addr),
        "optimized": calls_uprobe_trampoline(site, site_addr, proc.mappings),
        "call_target": hex(target) if target is not None else None,
        "mappings": [m.as_dict() for m in specials],
        "trampolines": [trampoline_report(m, arch, reader) for m in specials],
    }


# --- the host's side ----------------------------------------------------------------------------

def snapshot_here(bench: str, hits: int) -> dict:
    """In this process: map the bench bytes, attach the probe, hit it, snapshot, detach."""
    spec = _probed(bench)
    with NativeCode() as nc:
        site = nc.addr(spec.target)
        with UprobeEvent(nc.path, nc.offset(spec.target), retprobe=spec.probe == "uretprobe") as ev:
            nc.run(site, hits)
            snap = host_snapshot(site, arch=nc.arch)
            count = ev.count()
    return {"side": "host", "bench": bench, "hits": count, **snap}


def host_bench_snapshot(bench: str = "uprobe-nop5", hits: int = DEFAULT_HITS, fresh: bool = True) -> dict:
    """The host kernel after ``hits`` calls of a probed bench target (NativeUnavailable if it cannot run).

    ``fresh=True`` (the default) takes the snapshot in a new Python process so that no earlier probe of
    this process left its mappings behind; ``fresh=False`` takes it here.
    """
    _probed(bench)
    check_native_support()
    if not fresh:
        return snapshot_here(bench, hits)
    return in_new_python(__name__, [bench, str(hits)], f"host snapshot of {bench}")


# --- side by side -------------------------------------------------------------------------------

def site_form(snap: dict) -> str:
    """The probe site without addresses: ``call [uprobes-trampoline]+0x0`` or the raw bytes."""
    if snap.get("call_target"):
        target = int(snap["call_target"], 16)
        for m in snap["mappings"]:
            lo = int(m["start"], 16)
            if lo <= target < int(m["end"], 16):
                return f"call {m['name']}+{target - lo:#x}"
        return "call (outside the uprobe mappings)"
    return snap.get("site_bytes") or "unreadable"


def trampoline_bytes(snap: dict) -> dict[str, str | None]:
    """{mapping name: hex of its first trampoline} of a snapshot."""
    return {t["name"]: t["bytes"] for t in snap["trampolines"]}


def compare(host: dict, emulator: dict) -> pd.DataFrame:
    """Rows (what, host, emulator, same) for one bench: kernel, site, mappings, trampoline bytes."""
    import pandas as pd  # here, not at the top: the snapshot child (``main``) starts 1.7 s sooner without it

    rows = [("kernel", host["kernel"], emulator["kernel"], modelled_kernel(host["kernel"]) == emulator["kernel"]),
            ("hits counted", host["hits"], emulator["hits"], host["hits"] == emulator["hits"]),
            ("probe site bytes", host["site_bytes"], emulator["site_bytes"], None),
            ("probe site", site_form(host), site_form(emulator), site_form(host) == site_form(emulator)),
            ("nop5 optimised", host["optimized"], emulator["optimized"], host["optimized"] == emulator["optimized"])]
    hmaps = {m["name"]: m for m in host["mappings"]}
    emaps = {m["name"]: m for m in emulator["mappings"]}
    for name in (UPROBES_TRAMPOLINE, UPROBES):
        h, e = hmaps.get(name), emaps.get(name)
        if h is None and e is None:
            continue
        rows.append((f"{name} perms", h and h["perms"], e and e["perms"],
                     (h and h["perms"]) == (e and e["perms"])))
    htr, etr = trampoline_bytes(host), trampoline_bytes(emulator)
    for name in (UPROBES_TRAMPOLINE, UPROBES):
        if name in htr or name in etr:
            h, e = htr.get(name), etr.get(name)
            rows.append((f"{name} trampoline bytes", h, e, h is not None and h == e))
    hslots = {t["name"]: t.get("slots", {}) for t in host["trampolines"]}.get(UPROBES, {})
    eslots = {t["name"]: t.get("slots", {}) for t in emulator["trampolines"]}.get(UPROBES, {})
    if hslots or eslots:
        rows.append((f"{UPROBES} used XOL slots", _slots(hslots), _slots(eslots), _slots(hslots) == _slots(eslots)))
    return pd.DataFrame(rows, columns=["what", "host", "emulator", "same"])


def _slots(slots: dict) -> str:
    return "; ".join(f"{int(k)}: {v}" for k, v in sorted(slots.items(), key=lambda kv: int(kv[0]))) or "-"


def side_by_side(bench: str = "uprobe-nop5", hits: int = DEFAULT_HITS, host: dict | None = None,
                 kernel: str = EMULATED_KERNEL) -> tuple[dict, dict, pd.DataFrame]:
    """(host snapshot, emulator snapshot, comparison) for one bench; pass ``host`` to use a recorded one."""
    host = host if host is not None else host_bench_snapshot(bench, hits)
    emulator = emulator_snapshot(bench, kernel, hits, host.get("arch", "x86_64"))
    return host, emulator, compare(host, emulator)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    bench = argv[0] if argv else "uprobe-nop5"
    hits = int(argv[1]) if len(argv) > 1 else DEFAULT_HITS
    print(json.dumps(snapshot_here(bench, hits)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
