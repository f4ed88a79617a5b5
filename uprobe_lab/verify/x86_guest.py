"""The half of the x86-64 kernels referee that runs inside a booted guest (:mod:`.x86_kernels` boots it).

It asks the guest's kernel, as root, what the lab claims of it and prints one JSON report: the scheme
answers of :func:`uprobe_lab.native.scheme.detect_scheme`, a snapshot of each bench of :data:`BENCHES`
after :data:`HITS` hits (or the kernel's refusal at attach), and what a forked child inherits.

The guest runs under QEMU's TCG, where every import is slow: this module and what it calls keep pandas
out (importing it costs the guest about 18 s, a third of its whole run), which
``tests/test_verify_x86_kernels.py`` checks.

    python -m uprobe_lab.verify.x86_guest
"""
from __future__ import annotations

import json
import os
import sys

from ..native.compare import snapshot_here
from ..native.fork import fork_report_here
from ..native.fresh import in_forked_child
from ..native.scheme import detect_scheme
from ..native.support import check_native_support
from ..uprobes import ENOTSUPP

BENCHES = ("uprobe-nop", "uprobe-ret", "uprobe-nop5", "uretprobe-nop", "uprobe-nop10", "uprobe-nop5-pagecross",
           "uprobe-nop10-pagecross")
HITS = 100
REFUSED = "refused at attach: errno 524 (ENOTSUPP)"


def _snapshot_or_refusal(bench: str) -> dict:
    try:
        return snapshot_here(bench, HITS)
    except OSError as err:
        return {"bench": bench, "refused": REFUSED if err.errno == ENOTSUPP else f"errno {err.errno}: {err}"}


def _snapshot_in_child(bench: str) -> dict:
    """The bench's host snapshot taken in a forked child, so no earlier probe's mappings show
    (compare.host_bench_snapshot starts a new Python instead: some 10 s each under TCG)."""
    return in_forked_child(f"the guest's snapshot of {bench}", _snapshot_or_refusal, bench)


def guest_report() -> dict:
    """What this kernel does (run inside the guest, as root): release, scheme answers, snapshots."""
    check_native_support()
    # snapshots first: from 7.3 (7.2.6) a forked child inherits the parent's [uprobes-trampoline] (seen on the 7.3
    # guest), which detect_scheme's nop10 probe would create
    snapshots = {b: _snapshot_in_child(b) for b in BENCHES}
    fork = fork_report_here()  # each site in a forked child of this process, which holds no probe yet
    return {"release": os.uname().release, "scheme": detect_scheme().as_dict(), "snapshots": snapshots,
            "fork": fork}


if __name__ == "__main__":
    print(json.dumps(guest_report()))
    sys.exit(0)
