"""What the uretprobe syscall (6.11) buys on this kernel: the int3 return and the syscall return, side by side.

    python benchmarks/uretprobe_return_paths.py [--budget 3]

On a 6.11+ x86-64 kernel a 64-bit task returns from a uretprobe through the syscall trampoline, and a
32-bit task still through an int3 (arch_uretprobe_trampoline). The price benches measure a uprobe and a
uretprobe on a ``nop; ret`` target in both tasks, each with a BPF consumer, in interleaved rounds, each
interval levelled by the reference probe timed next to it (uprobe_lab.native.price_benches); uprobe_lab.native.compat.return_paths turns them into the
return path's cost (uretprobe minus uprobe) per task, and the two tasks' uprobes are compared (the emulator
gives them the same events; the model prices a 32-bit task's trap apart, as ``compat_exception``, since v9). Figures, not assertions; needs root.
"""
from __future__ import annotations

import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from uprobe_lab.native import NativeUnavailable  # noqa: E402
from uprobe_lab.native.compat import return_paths  # noqa: E402
from uprobe_lab.native.price_benches import measure_price_rows  # noqa: E402

CONFIGS = [("uprobe-nop", 1), ("uretprobe-nop", 1), ("uprobe-nop-compat", 1), ("uretprobe-nop-compat", 1)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=3.0, help="seconds per bench")
    args = parser.parse_args()
    try:
        rows = measure_price_rows(CONFIGS, budget_s=args.budget)
    except NativeUnavailable as err:
        print(f"native benchmarks are not possible here: {err}", file=sys.stderr)
        return 2
    for r in rows:
        print(f"{r['bench']:<22}: {r['mops']:6.3f} M/s +- {100 * r['rel_err']:.1f}%  ({1000 / r['mops']:5.0f} ns per hit)")
    table = return_paths(rows).set_index("task: return through")
    print()
    print(table.round(1).to_string())
    syscall, int3 = table["return path ns"]
    print(f"\nthe return path, int3 / syscall: {int3 / syscall:.2f}; uretprobe-nop, 64-bit / 32-bit task throughput: "
          f"{table['uretprobe ns'].iloc[1] / table['uretprobe ns'].iloc[0]:.2f}")
    # the emulator gives both tasks' uprobe-nop the same events: does the 32-bit task's entry cost the same?
    by = {r["bench"]: r for r in rows}
    a, b = by["uprobe-nop-compat"], by["uprobe-nop"]
    print(f"uprobe-nop, 32-bit / 64-bit task time per hit: {b['mops'] / a['mops']:.3f} "
          f"+- {math.hypot(a['rel_err'], b['rel_err']):.3f} (equal emulator events)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
