"""How fast the lab is: emulated hits/s per bench against a bare Unicorn loop, notebook times, widget latency.

    python benchmarks/emulator_speed.py [--iterations N] [--skip-notebooks]

The baseline runs the same producer loop over ``uprobe_target_nop`` with an int3 on its nop and an
interrupt hook that only counts, in the same process: the cost of Unicorn plus one Python callback
per hit. Each bench's ratio is its emulated hits/s over that baseline. Before the benches, uprobe-nop
is run with its #BP entry built up step by step (nothing; pt_regs loaded, flush checked; plus the six
events of a hit; the whole kernel path), so the figures say where a hit's time goes.
Figures, not assertions.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from unicorn import UC_HOOK_INTR

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from uprobe_lab.arches import make_process  # noqa: E402
from uprobe_lab.bench import bench_names, bench_process, run_bench  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def bare_unicorn_hits_per_s(iterations: int) -> float:
    """hits/s of the producer loop over uprobe_target_nop with an int3 on its nop, in a raw Unicorn
    whose interrupt hook only counts."""
    from unicorn import UC_ARCH_X86, UC_MODE_64, Uc
    from unicorn import x86_const as X

    from uprobe_lab.x86.programs import bench_program

    program = bench_program()
    target = program.resolve("uprobe_target_nop")
    code = bytearray(program.code)
    code[target - program.base] = 0xCC  # the breakpoint, with nobody behind it
    uc = Uc(UC_ARCH_X86, UC_MODE_64)
    uc.mem_map(program.base, -(-len(code) // 0x1000) * 0x1000)
    uc.mem_write(program.base, bytes(code))
    stack, exit_addr = 0x7FF000000000, 0x7FF000100000
    uc.mem_map(stack, 0x10000)
    sp = stack + 0x8000
    uc.mem_write(sp, exit_addr.to_bytes(8, "little"))
    uc.reg_write(X.UC_X86_REG_RSP, sp)
    uc.reg_write(X.UC_X86_REG_RDI, iterations)
    uc.reg_write(X.UC_X86_REG_RSI, target)
    hits = [0]

    def count(uc, intno, data):
        hits[0] += 1

    uc.hook_add(UC_HOOK_INTR, count)
    t0 = time.perf_counter()
    uc.emu_start(program.resolve("producer_loop"), exit_addr, count=iterations * 100)
    elapsed = time.perf_counter() - t0
    assert hits[0] == iterations, hits[0]
    return iterations / elapsed


def _nop_hits_per_s(iterations: int, int3_entry=None, count_events: bool = True) -> float:
    """uprobe-nop on the lab's x86 process, optionally with its #BP entry swapped for a stand-in."""
    from uprobe_lab.trace import Trace
    from uprobe_lab.x86 import traps

    proc, _, target = bench_process("uprobe-nop")
    proc.call("producer_loop", 16, target)
    real_entry, real_emit = traps.exc_int3, Trace.emit
    try:
        traps.exc_int3 = int3_entry or real_entry
        if not count_events:
            Trace.emit = lambda self, kind, n=1, ip=None, note="": None
        t0 = time.perf_counter()
        proc.call("producer_loop", iterations, target, max_insns=iterations * 1000)
        return iterations / (time.perf_counter() - t0)
    finally:
        traps.exc_int3, Trace.emit = real_entry, real_emit


def _pt_regs_only(proc) -> None:
    proc.kernel_entry().flush()


def _pt_regs_and_six_events(proc) -> None:
    regs = proc.kernel_entry()
    for kind in ("exceptions", "exc_bp", "probe_lookups", "consumers", "emulated", "iret"):
        proc.trace.emit(kind)
    regs.flush()


def where_the_time_goes(iterations: int) -> list[tuple[str, float]]:
    """uprobe-nop hits/s with the kernel's part built up step by step, in one process each."""
    return [
        ("#BP entry does nothing", _nop_hits_per_s(iterations, lambda proc: None)),
        ("+ pt_regs loaded (flush finds nothing changed)", _nop_hits_per_s(iterations, _pt_regs_only)),
        ("+ six events counted", _nop_hits_per_s(iterations, _pt_regs_and_six_events)),
        ("the kernel path, events not counted", _nop_hits_per_s(iterations, count_events=False)),
        ("the kernel path (uprobe-nop as measured)", _nop_hits_per_s(iterations)),
    ]


def notebook_seconds() -> dict[str, float]:
    import nbformat
    from nbclient import NotebookClient

    times = {}
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        t0 = time.perf_counter()
        NotebookClient(nb, timeout=600, kernel_name="python3",
                       resources={"metadata": {"path": str(path.parent)}}).execute()
        times[path.stem] = time.perf_counter() - t0
    return times


def widget_step_ms(repeats: int = 20) -> float:
    from uprobe_lab.uprobes import CountingConsumer, uprobe_register
    from uprobe_lab.views.stepper import stepper_widget

    proc = make_process("x86_64", record=True)
    uprobe_register(proc, "uprobe_target_ret", CountingConsumer())
    samples = []
    for _ in range(repeats):
        widget = stepper_widget(lambda: proc.stepper("producer_loop", 50, proc.program.resolve("uprobe_target_ret")))
        t0 = time.perf_counter()
        widget.step()
        samples.append(time.perf_counter() - t0)
    return 1000 * sorted(samples)[len(samples) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=20_000)
    parser.add_argument("--skip-notebooks", action="store_true")
    args = parser.parse_args()

    bare = bare_unicorn_hits_per_s(args.iterations * 5)
    print(f"bare Unicorn loop (int3 + a hook that only counts): {bare / 1e6:.3f}M hits/s")
    print(f"uprobe-nop, where the time goes{'':<20}{'hits/s':>10}{'us/hit':>8}{'ratio':>7}")
    for label, rate in where_the_time_goes(args.iterations * 5):
        print(f"  {label:<48}{rate:>10,.0f}{1e6 / rate:>8.2f}{rate / bare:>7.3f}")
    print(f"{'bench':<26}{'emulated hits/s':>16}{'ratio':>8}")
    for name in bench_names("x86_64"):
        r = run_bench(name, "x86_64", "6.18", args.iterations)
        if "refused" in r:
            print(f"{name:<26}{'refused at attach on 6.18':>24}")
            continue
        print(f"{name:<26}{r['hits_per_s']:>16,.0f}{r['hits_per_s'] / bare:>8.3f}")
    print(f"widget step (median): {widget_step_ms():.1f} ms")
    if not args.skip_notebooks:
        times = notebook_seconds()
        for name, seconds in times.items():
            print(f"notebook {name:<30}{seconds:6.1f} s")
        print(f"notebooks total {sum(times.values()):.1f} s")


if __name__ == "__main__":
    main()
