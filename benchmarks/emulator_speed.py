"""How fast the lab is: emulated hits/s per bench against a bare Unicorn loop, notebook times, widget latency.

    python benchmarks/emulator_speed.py [--iterations N] [--skip-notebooks]

The baseline runs the same producer loop over ``uprobe_target_nop`` with an int3 on its nop and an
empty interrupt hook, in the same process: the cost of Unicorn plus one Python callback per hit.
Each bench's ratio is its emulated hits/s over that baseline. Figures, not assertions.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from unicorn import UC_HOOK_INTR

from uprobe_lab.arches import make_process
from uprobe_lab.bench import bench_names, run_bench

ROOT = Path(__file__).resolve().parents[1]


def _bare_loop(iterations: int, hook) -> float:
    """hits/s of the producer loop over uprobe_target_nop with an int3 on its nop, in a raw Unicorn."""
    from unicorn import UC_ARCH_X86, UC_MODE_64, Uc
    from unicorn import x86_const as X

    from uprobe_lab.x86.programs import bench_program

    program = bench_program()
    target = program.resolve("uprobe_target_nop")
    code = bytearray(program.code)
    code[target - program.base] = 0xCC  # the breakpoint, with nobody behind it
    uc = Uc(UC_ARCH_X86, UC_MODE_64)
    uc.mem_map(program.base, len(code))
    uc.mem_write(program.base, bytes(code))
    stack, exit_addr = 0x7FF000000000, 0x7FF000100000
    uc.mem_map(stack, 0x10000)
    sp = stack + 0x8000
    uc.mem_write(sp, exit_addr.to_bytes(8, "little"))
    uc.reg_write(X.UC_X86_REG_RSP, sp)
    uc.reg_write(X.UC_X86_REG_RDI, iterations)
    uc.reg_write(X.UC_X86_REG_RSI, target)
    hits = [0]

    def counted(uc, intno, data):
        hits[0] += 1
        hook(uc)

    uc.hook_add(UC_HOOK_INTR, counted)
    t0 = time.perf_counter()
    uc.emu_start(program.resolve("producer_loop"), exit_addr, count=iterations * 100)
    elapsed = time.perf_counter() - t0
    assert hits[0] == iterations, hits[0]
    return iterations / elapsed


def bare_unicorn_hits_per_s(iterations: int) -> float:
    return _bare_loop(iterations, lambda uc: None)


def python_kernel_floor_hits_per_s(iterations: int) -> float:
    """The least any Python kernel model must do per hit: read rip and rflags (two C calls into Unicorn
    through ctypes, as the lab makes them) and count a handful of events. An upper bound for uprobe-nop."""
    from collections import Counter

    from unicorn import x86_const as X

    from uprobe_lab.process import register_access

    counts = Counter()
    access = {}

    def minimal(uc):
        read = access.get("read") or access.setdefault("read", register_access(uc)[0])
        read(X.UC_X86_REG_RIP)
        read(X.UC_X86_REG_RFLAGS)
        for kind in ("exceptions", "exc_bp", "probe_lookups", "consumers", "emulated", "iret"):
            counts[kind] += 1

    return _bare_loop(iterations, minimal)


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
    floor = python_kernel_floor_hits_per_s(args.iterations * 5)
    print(f"bare Unicorn loop (int3 + empty hook): {bare / 1e6:.3f}M hits/s")
    print(f"floor for any Python kernel (2 register reads + counting): {floor / 1e6:.3f}M hits/s, "
          f"ratio {floor / bare:.3f}")
    print(f"{'bench':<26}{'emulated hits/s':>16}{'ratio':>8}")
    for name in bench_names("x86_64"):
        r = run_bench(name, "x86_64", "6.18", args.iterations)
        print(f"{name:<26}{r['hits_per_s']:>16,.0f}{r['hits_per_s'] / bare:>8.3f}")
    print(f"widget step (median): {widget_step_ms():.1f} ms")
    if not args.skip_notebooks:
        times = notebook_seconds()
        for name, seconds in times.items():
            print(f"notebook {name:<30}{seconds:6.1f} s")
        print(f"notebooks total {sum(times.values()):.1f} s")


if __name__ == "__main__":
    main()
