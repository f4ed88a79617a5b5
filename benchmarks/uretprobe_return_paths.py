"""What the uretprobe syscall (6.11) buys on this kernel: the int3 return and the syscall return, side by side.

    python benchmarks/uretprobe_return_paths.py [--rounds 8] [--calls 150000]

On a 6.11+ x86-64 kernel a 64-bit task returns from a uretprobe through the syscall trampoline, and a
32-bit task still through an int3 (arch_uretprobe_trampoline). Both run the same probe on a ``nop; ret``
target with a BPF consumer, interleaved round by round so that the machine's drift falls on both:
uprobe and uretprobe, compat and 64-bit. The extra time a uretprobe adds to a uprobe is the return path;
its ratio between the two tasks is what the syscall saved. Figures, not assertions; needs root.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from uprobe_lab.bench import bench_spec  # noqa: E402
from uprobe_lab.native import NativeUnavailable, check_native_support  # noqa: E402
from uprobe_lab.native.bench import pinned_to_one_cpu  # noqa: E402
from uprobe_lab.native.bpf import BpfCounter  # noqa: E402
from uprobe_lab.native.code import NativeCode  # noqa: E402
from uprobe_lab.native.compat import run_compat  # noqa: E402
from uprobe_lab.native.perf import UprobeEvent  # noqa: E402


def native_mops(nc: NativeCode, probe: str, calls: int) -> float:
    spec = bench_spec(f"{probe}-nop")
    addr = nc.addr(spec.target)
    with BpfCounter() as counter, UprobeEvent(nc.path, nc.offset(spec.target), retprobe=probe == "uretprobe") as ev:
        counter.attach(ev.fd)
        nc.run(addr, 2000)
        t0 = time.thread_time_ns()
        nc.run(addr, calls)
        return calls * 1e3 / (time.thread_time_ns() - t0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--calls", type=int, default=150_000)
    args = parser.parse_args()
    try:
        check_native_support()
    except NativeUnavailable as err:
        print(f"native benchmarks are not possible here: {err}", file=sys.stderr)
        return 2
    rates = {(task, probe): [] for task in ("64-bit", "compat") for probe in ("uprobe", "uretprobe")}
    with pinned_to_one_cpu(), NativeCode() as nc:
        for _ in range(args.rounds):
            for probe in ("uprobe", "uretprobe"):
                rates[("64-bit", probe)].append(native_mops(nc, probe, args.calls))
                rates[("compat", probe)].append(run_compat(args.calls, "target", probe).mops)
    ns = {}
    for (task, probe), r in rates.items():
        med = statistics.median(r)
        ns[(task, probe)] = 1000 / med
        print(f"{task:>6} {probe:<9}: {med:6.3f} M/s median of {len(r)} rounds "
              f"(min {min(r):.3f}, max {max(r):.3f}), {1000 / med:6.0f} ns per hit")
    ret = {task: ns[(task, "uretprobe")] - ns[(task, "uprobe")] for task in ("64-bit", "compat")}
    print(f"\nthe return path (uretprobe - uprobe): compat, int3 {ret['compat']:.0f} ns; 64-bit, syscall "
          f"{ret['64-bit']:.0f} ns; int3 / syscall = {ret['compat'] / ret['64-bit']:.2f}")
    print(f"uretprobe-nop, 64-bit / compat throughput: {ns[('compat', 'uretprobe')] / ns[('64-bit', 'uretprobe')]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
