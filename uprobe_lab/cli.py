"""Command line: ``python -m uprobe_lab bench|analyze|reproduce|predict ...``."""
from __future__ import annotations

import argparse
import json
import platform
import sys

from . import analyze, bench
from .errors import LabError
from .kernel import DEFAULT_KERNEL, KERNELS


def _progress(total: int, enabled: bool):
    if not enabled or total < 3:
        return None, lambda: None
    from tqdm import tqdm

    bar = tqdm(total=total, file=sys.stderr, leave=False)
    return (lambda name: (bar.set_description(name), bar.update(1))), bar.close


def cmd_bench(args) -> int:
    options = {"stp": args.stp} if args.stp else {}
    kernel = args.kernel or DEFAULT_KERNEL
    if args.mode == "emulated":
        names = args.names or bench.bench_names(args.arch)
        update, close = _progress(len(names), not args.json)
        try:
            results = bench.run_benches(names, args.arch, kernel, args.iterations, progress=update, **options)
        finally:
            close()
    elif args.mode == "native":
        ignored = [flag for flag, value in (("--kernel", args.kernel), ("--stp", args.stp)) if value]
        if ignored:
            raise LabError(f"{' and '.join(ignored)} cannot apply to --mode native: it measures the kernel this "
                           f"machine is running ({platform.release()}), not a modelled one; drop "
                           f"{'them' if len(ignored) > 1 else 'it'}, or use --mode emulated or --mode model "
                           "to choose a kernel or an arm64 stp handling")
        from tqdm import tqdm

        from .native import BENCH_NAMES, DEFAULT_REPEATS, NativeUnavailable, run_native_benches

        # one tick per timed interval: the table takes seconds to minutes (uprobe-ret is single-stepped)
        try:
            # the bar is closed on leaving the with, before any message, so it does not overwrite it
            with tqdm(total=len(args.names or BENCH_NAMES) * DEFAULT_REPEATS, file=sys.stderr, leave=False,
                      desc="native", disable=args.json, delay=0.2) as bar:
                results = run_native_benches(args.names or None, iterations=args.iterations, progress=bar.update)
        except (NativeUnavailable, ValueError) as err:
            print(f"native benchmarks are not possible here: {err}" if isinstance(err, NativeUnavailable)
                  else f"error: {err}", file=sys.stderr)
            return 2
    else:
        from .model import model_table

        results = model_table(args.names or None, arch=args.arch, kernel=kernel, cpu=args.cpu, **options)
    print(json.dumps(results, indent=2) if args.json else bench.format_table(results))
    return 0


def cmd_analyze(args) -> int:
    options = {"stp": args.stp} if args.stp else {}
    result = analyze(args.insn, args.arch, args.kernel, **options)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{result['mnemonic']} {result['op_str']}  ({result['length']} bytes): {result['action']}")
        print(f"  {result['reason']}")
    return 0


def cmd_reproduce(args) -> int:
    """Every seed chart, the reproduction table and the per-hit cost breakdown, into ``args.out``."""
    from pathlib import Path

    from . import model
    from .views import charts

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    n_rows = len(model.bench_rows())
    update, close = _progress(n_rows, True)
    try:
        repro = model.reproduction(progress=update)
    finally:
        close()
    repro.drop(columns=["table", "kernel"]).to_csv(out / "reproduction.csv", index=False)
    for (source, table), _ in repro.groupby(["source", "table"], sort=False):
        fig = charts.seed_table_chart(repro, source, table)
        fig.savefig(out / f"{source[:3]}_{table}.png", dpi=110)
    parts = []
    for name in model.profile_names():
        cpu, arch = model.PROFILES[name]
        prof = model.get_profile(name)
        for r in repro[repro["cpu"] == cpu].drop_duplicates(["bench", "kernel"]).itertuples(index=False):
            if r.bench in ("usermode-count",):
                continue
            parts.append((f"{name.split('-')[0]} {r.kernel} {r.bench}",
                          model.breakdown(prof.prices, model.events_for(r.bench, arch, str(r.kernel)))))
    charts.breakdown_chart(parts).savefig(out / "cost_breakdown.png", dpi=110)
    charts.error_chart(repro).savefig(out / "model_error.png", dpi=110)
    apps = model.app_predictions()
    apps.to_csv(out / "applications.csv", index=False)

    print(model.format_comparison(repro))
    print()
    print(model.APP_MODEL)
    print(apps.to_string(index=False))
    print()
    print("median |error| % per seed table:")
    print(model.error_summary(repro).to_string(index=False, float_format=lambda v: f"{v:.1f}"))
    ref = model.reference_dependence(repro)
    if len(ref):
        print(f"\nrole {model.ROLE_HELDOUT_REF}: held out from the fit, but priced with a reference measurement "
              "of the same patch from outside the seeds (model.REFERENCE_DIFFERENCES); fitted without it:")
        print(ref[["source", "bench", "variant", "published_mops", "predicted_mops", "error_pct",
                   "predicted_mops_no_ref", "error_pct_no_ref"]].drop_duplicates(["bench", "variant"]).to_string(
            index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"wrote {out}/reproduction.csv and {len(list(out.glob('*.png')))} charts")
    return 0


def cmd_predict(args) -> int:
    """Fit a profile on an unseen machine's measurements and predict another kernel."""
    import pandas as pd

    from . import model

    try:
        measured = pd.read_csv(args.measured, dtype={"kernel": str})
    except FileNotFoundError:
        raise LabError(f"--measured {args.measured}: no such file; give the path of a CSV with columns "
                       "arch, kernel, bench, mops (one row per bench measured on your machine)") from None
    result = model.predict_from_measured(measured, args.to)
    if args.out:
        result.to_csv(args.out, index=False)
    else:
        print(result.to_csv(index=False), end="")
    return 0


def cmd_verify(args) -> int:
    """Run instructions under real uprobes on this host and compare with the lab's emulator."""
    from .native import NativeUnavailable
    from .verify import verify

    options = {"sample": args.sample, "seed": args.seed, "classes": args.classes, "sweeps": not args.no_sweeps,
               "kernel": args.kernel}
    with _verify_progress(args.json) as progress:
        try:
            report = verify(args.arch, progress=progress, **options)
        except NativeUnavailable as err:
            print(f"the referee needs real uprobes, not possible here: {err}", file=sys.stderr)
            return 2
    print(json.dumps(report.as_dict(), indent=2) if args.json else report.format())
    return 0


def _verify_progress(quiet: bool):
    from tqdm import tqdm

    bar = tqdm(file=sys.stderr, leave=False, disable=quiet, desc="verify", delay=0.5)

    def progress(done: int, total: int) -> None:
        bar.total = total
        bar.update(done - bar.n)

    class _Bar:
        def __enter__(self):
            return progress

        def __exit__(self, *exc):
            bar.close()

    return _Bar()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m uprobe_lab", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    b = sub.add_parser("bench", help="run the kernel bench's uprobe triggers")
    b.add_argument("names", nargs="*", help="bench names, e.g. uprobe-nop uretprobe-ret (default: all)")
    b.add_argument("--mode", choices=["emulated", "native", "model"], default="emulated")
    b.add_argument("--arch", default="x86_64", choices=["x86_64", "arm64"])
    b.add_argument("--kernel", choices=list(KERNELS),
                   help=f"emulated and model modes: the kernel to emulate (default {DEFAULT_KERNEL})")
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

    r = sub.add_parser("reproduce", help="regenerate every seed chart and the model's reproduction table")
    r.add_argument("--out", required=True, help="directory for reproduction.csv and the PNG charts")
    r.set_defaults(func=cmd_reproduce)

    p = sub.add_parser("predict", help="fit a CPU profile on your measurements and predict another kernel")
    p.add_argument("--measured", required=True, help="CSV with columns arch, kernel, bench, mops")
    p.add_argument("--to", required=True, help="kernel to predict: 6.10, 6.11, 6.16, 6.18 (arm64: xol-stp, simulated-stp)")
    p.add_argument("--out", help="CSV to write (bench, predicted_mops); default: stdout")
    p.set_defaults(func=cmd_predict)

    v = sub.add_parser("verify", help="the host kernel as referee: instructions under real uprobes vs the lab")
    v.add_argument("--arch", default="x86_64", choices=["x86_64", "arm64"])
    v.add_argument("--sample", type=int, default=3000, help="random instructions (default 3000)")
    v.add_argument("--seed", type=int, default=1)
    v.add_argument("--classes", nargs="+", metavar="CLASS",
                   help="x86: 1-byte 0f prefixed VEX EVEX RIP-relative branches nops syscall (default: all)")
    v.add_argument("--no-sweeps", action="store_true",
                   help="x86: leave out the sweep of every register-form VEX and EVEX opcode")
    v.add_argument("--kernel", choices=list(KERNELS), help="the lab version to compare with (default: the host's)")
    v.add_argument("--json", action="store_true")
    v.set_defaults(func=cmd_verify)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except LabError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # every probe, mapping and temp file is released on the way up
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
