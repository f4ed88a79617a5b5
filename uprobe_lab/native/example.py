"""A recorded native run, for readers whose machine cannot run one.

``uprobe_lab/data/native_example_6.18.json`` holds one run of the native table and the host snapshots
of :data:`compare.COMPARE_BENCHES`, made on a Linux 6.18 x86-64 virtual machine, with that machine's
description. :func:`native_or_recorded` is what notebook 06 calls: it measures here when it can and
otherwise says why and hands back the recording, clearly marked as such.

Setting ``UPROBE_LAB_NATIVE=recorded`` in the environment asks for the recording even where native
runs would work (to see, or test, what a reader without root gets).
"""
from __future__ import annotations

import datetime
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .bench import DEFAULT_ITERATIONS, DEFAULT_REPEATS, run_native_benches
from .compare import COMPARE_BENCHES, DEFAULT_HITS, host_bench_snapshot
from .errors import NativeUnavailable
from .support import check_native_support
from .host import host_description
from ..outputs import read_recording, write_output

EXAMPLE_PATH = Path(__file__).resolve().parents[1] / "data" / "native_example_6.18.json"
ENV = "UPROBE_LAB_NATIVE"
NOT_HERE = "not measured on this machine"


def recorded_label(example: dict) -> str:
    """How a recording is labelled for the reader: its own ``label`` (where it was made) and that it is not
    from this machine."""
    return f"{example['label']}, {NOT_HERE}"


def native_reason() -> str | None:
    """Why native runs cannot happen here (None if they can); honours UPROBE_LAB_NATIVE=recorded."""
    if os.environ.get(ENV, "").lower() == "recorded":
        return f"{ENV}=recorded asks for the recorded example instead of a native run"
    try:
        check_native_support()
    except NativeUnavailable as err:
        return str(err)
    return None


def record_example(path: str | Path = EXAMPLE_PATH, iterations: int = DEFAULT_ITERATIONS,
                   repeats: int = DEFAULT_REPEATS, label: str = "",
                   progress: Callable[[int], object] | None = None) -> dict:
    """Run the native table and the snapshots here and write them to ``path`` as JSON."""
    rows = run_native_benches(iterations=iterations, repeats=repeats, progress=progress)
    snapshots = {b: host_bench_snapshot(b, DEFAULT_HITS) for b in COMPARE_BENCHES}
    data = {
        "label": label or f"recorded on {host_description()['kernel']}",
        "recorded": datetime.date.today().isoformat(),
        "host": host_description(),
        "command": f"uprobe_lab.native.example.record_example(iterations={iterations}, repeats={repeats})",
        "benches": rows,
        "snapshots": snapshots,
    }
    write_output(path, json.dumps(data, indent=1) + "\n", "path", "example.json", recording=EXAMPLE_PATH.name)
    return data


def load_example(path: str | Path = EXAMPLE_PATH) -> dict:
    """The recorded run: keys label, recorded, host, command, benches (result dicts), snapshots."""
    return read_recording(path, ("benches", "snapshots"), "that record_example(path) wrote")


RECORDED_LABEL = recorded_label(load_example())  # the bundled recording's (8 KB, read on import)


@dataclass
class NativeRun:
    """Native figures for notebook 06: measured here (``recorded`` False) or the recording."""

    recorded: bool
    reason: str | None  # why the recording is used (None when measured here)
    host: dict
    benches: list[dict]
    snapshots: dict = field(default_factory=dict)
    label: str = ""

    def banner(self) -> str:
        h = self.host
        where = (f"{h['kernel']} {h['machine']}, {h['cpu_model']}, {h['cpus']} CPUs, "
                 f"{'virtual machine' if h.get('virtualized') else 'bare metal'}")
        if self.recorded:
            return f"RECORDED EXAMPLE ({self.label}): {where}.\nNative runs are not possible here: {self.reason}"
        return f"Measured now on this machine: {where}."


def native_or_recorded(names=None, iterations: int = 20_000, repeats: int = 3,
                       progress: Callable[[int], object] | None = None, snapshots: bool = True) -> NativeRun:
    """Measure the native table (and host snapshots) here, or fall back to the recording with the reason."""
    reason = native_reason()
    if reason is None:
        try:
            rows = run_native_benches(names, iterations=iterations, repeats=repeats, progress=progress)
            snaps = {b: host_bench_snapshot(b) for b in COMPARE_BENCHES} if snapshots else {}
            return NativeRun(False, None, host_description(), rows, snaps, "measured here")
        except NativeUnavailable as err:  # e.g. a probe refused after the trial open succeeded
            reason = str(err)
    ex = load_example()
    rows = ex["benches"] if names is None else [r for r in ex["benches"] if r["bench"] in set(names)]
    return NativeRun(True, reason, ex["host"], rows, ex["snapshots"], recorded_label(ex))
