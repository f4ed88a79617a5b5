"""Command line: ``python -m uprobe_lab bench|analyze ...``."""
from __future__ import annotations

import argparse
import json
import sys

from .kernel import DEFAULT_KERNEL, KERNELS, get_kernel
from .process import LabError


def _progress(total: int, enabled: bool):
    if not enabled or total < 3:
        return None, lambda: None
    from tqdm import tqdm

    bar = tqdm(total=total, file=sys.stderr, leave=False)
    return (lambda name: (bar.set_description(name), bar.update(1))), bar.close


def cmd_bench(args) -> int:
    from . import bench

    if args.mode == "emulated":
        names = args.names or bench.bench_names(args.arch)
        update, close = _progress(len(names), not args.json)
        options = {"stp": args.stp} if args.stp else {}
        try:
            results = bench.run_benches(names, args.arch, args.kernel, args.iterations, progress=update, **options)
        finally:
            close()
    elif args.mode == "native":
        from .native import NativeUnavailable, run_native_benches

        try:
            results = run_native_benches(args.names or None, iterations=args.iterations)
        except NativeUnavailable as err:
            print(f"native benchmarks are not possible here: {err}", file=sys.stderr)
            return 2
    else:
        from .model import model_table

        results = model_table(args.names or None, arch=args.arch, kernel=args.kernel, cpu=args.cpu)
    print(json.dumps(results, indent=2) if args.json else bench.format_table(results))
    return 0


def cmd_analyze(args) -> int:
    from .arches import arch_parts

    _, _, analyze = arch_parts(args.arch)
    options = {"stp": args.stp} if args.stp else {}
    result = analyze(args.insn, get_kernel(args.kernel), **options)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{result['mnemonic']} {result['op_str']}  ({result['length']} bytes): {result['action']}")
        print(f"  {result['reason']}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m uprobe_lab", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    b = sub.add_parser("bench", help="run the kernel bench's uprobe triggers")
    b.add_argument("names", nargs="*", help="bench names, e.g. uprobe-nop uretprobe-ret (default: all)")
    b.add_argument("--mode", choices=["emulated", "native", "model"], default="emulated")
    b.add_argument("--arch", default="x86_64", choices=["x86_64", "arm64"])
    b.add_argument("--kernel", default=DEFAULT_KERNEL, choices=list(KERNELS))
    b.add_argument("--stp", choices=["xol", "simulate"], help="arm64: how a probed stp x29, x30 runs")
    b.add_argument("--cpu", help="model mode: the CPU profile to price events with")
    b.add_argument("--iterations", type=int, default=20_000)
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_bench)

    a = sub.add_parser("analyze", help="what the kernel would do with a probe on an instruction")
    a.add_argument("insn", help="x86_64: bytes in memory order (0f1f440000); arm64: the word (a9bf7bfd)")
    a.add_argument("--arch", default="x86_64", choices=["x86_64", "arm64"])
    a.add_argument("--kernel", default=DEFAULT_KERNEL, choices=list(KERNELS))
    a.add_argument("--stp", choices=["xol", "simulate"], help="arm64: how a probed stp x29, x30 runs")
    a.add_argument("--json", action="store_true")
    a.set_defaults(func=cmd_analyze)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except LabError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
