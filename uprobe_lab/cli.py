"""Command line: ``python -m uprobe_lab bench|analyze|reproduce|predict|verify ...``."""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import sys
import warnings

from . import analyze, bench
from .arches import ARCHES
from .constants import MAX_ITERATIONS
from .contended import layout_note
from .errors import LabError
from .interrupt import handling, stop_signals
from .kernel import (DEFAULT_KERNEL, KERNELS, RULES, major_minor, kernel_for_release, outside_modelled,
                     refuse_before_uprobes, refuse_uretprobe_before, release_rules, row_for_release,
                     unknown_sublevel_note, version_name)
from .outputs import OutputDir, output_file, write_output


def _progress(total: int, enabled: bool):
    if not enabled or total < 3:
        return None, lambda: None
    from tqdm import tqdm

    bar = tqdm(total=total, file=sys.stderr, leave=False)
    return (lambda name: (bar.set_description(name), bar.update(1))), bar.close


def cmd_bench(args) -> int:
    if args.iterations is None:
        from .native.bench import DEFAULT_ITERATIONS as NATIVE_ITERATIONS

        args.iterations = NATIVE_ITERATIONS if args.mode == "native" else bench.DEFAULT_ITERATIONS
    if not 1 <= args.iterations < MAX_ITERATIONS:
        raise LabError(f"--iterations must be in 1 .. 2**64-1 (the bench loop counts in a 64-bit register), "
                       f"got {args.iterations}")
    options = {"stp": args.stp} if args.stp else {}
    if args.cpus is not None and args.mode == "model":
        raise LabError("-p is a --mode emulated or --mode native setting: the model prices one CPU's hit; drop -p")
    if args.kernel:
        refuse_before_uprobes(args.kernel, args.arch or "x86_64")
    # with -p the emulator runs the release's own rules (6.13's locks); otherwise the modelled row that answers
    kernel = (args.kernel if args.cpus is not None else kernel_row(args.kernel, args.arch or "x86_64") if args.kernel
              else DEFAULT_KERNEL)
    if args.cpus is not None and args.kernel and args.mode == "emulated":
        for note in (release_rules_note(args.kernel, args.arch or "x86_64"), layout_note(args.kernel)):
            if note:
                print(note, file=sys.stderr)
    if args.cpu and args.mode != "model":
        runs = "this machine's own CPU" if args.mode == "native" else "the emulator, which counts events, not time"
        raise LabError(f"--cpu is a --mode model setting (the CPU profile whose prices the model uses); --mode "
                       f"{args.mode} runs {runs}: drop --cpu, or add --mode model")
    if args.stp and args.mode != "native" and (args.arch or "x86_64") != "arm64":
        raise LabError("--stp is an arm64 setting (how a probed stp x29, x30 runs); add --arch arm64 or drop --stp")
    if args.mode == "emulated":
        args.arch = args.arch or "x86_64"
        names = args.names or bench.bench_names(args.arch)
        # a uretprobe bench on a release older than uretprobes: its refusal, in the table's order
        refused = {n: refuse_uretprobe_before(args.kernel, n) for n in names
                   if args.kernel and bench.bench_spec(n, args.arch).probe == "uretprobe"}
        refused = {n: why for n, why in refused.items() if why}
        runs = [n for n in names if n not in refused]
        if args.cpus is None:
            update, close = _progress(len(runs), not args.json)
            try:
                ran = bench.run_benches(runs, args.arch, kernel, args.iterations, progress=update, **options) if runs else []
            finally:
                close()
        else:
            ran = _emulated_on_cpus(runs, args, kernel, options)
        if refused:
            ran = iter(ran)
            results = [bench.refused_row(n, args.arch, "emulated", args.kernel, refused[n]) if n in refused
                       else next(ran) for n in names]
        else:
            results = ran
    elif args.mode == "native":
        ignored = [flag for flag, value in (("--kernel", args.kernel), ("--stp", args.stp)) if value]
        if ignored:
            raise LabError(f"{' and '.join(ignored)} cannot apply to --mode native: it measures the kernel this "
                           f"machine is running ({platform.release()}), not a modelled one; drop "
                           f"{'them' if len(ignored) > 1 else 'it'}, or use --mode emulated or --mode model "
                           "to choose a kernel or an arm64 stp handling")
        from tqdm import tqdm

        from .native import BENCH_NAMES, DEFAULT_REPEATS, NativeUnavailable, run_native_benches
        from .native.many_cpus import run_native_benches_on_cpus, runs_planned
        from .native.arch import host_arch

        if args.arch not in (None, host_arch()):
            raise LabError(f"--mode native --arch {args.arch}: native mode runs the bytes on this machine's CPU, "
                           f"which is {host_arch()}; drop --arch, or use --mode emulated --arch {args.arch}")

        # one tick per timed interval: the table takes seconds to minutes (uprobe-ret is single-stepped)
        try:
            # the bar is closed on leaving the with, before any message, so it does not overwrite it
            with tqdm(total=len(args.names or BENCH_NAMES) * DEFAULT_REPEATS, file=sys.stderr, leave=False,
                      desc="native", disable=args.json, delay=0.2) as bar:
                if args.cpus is None:
                    results = run_native_benches(args.names or None, iterations=args.iterations,
                                                 progress=bar.update, arch=args.arch)
                else:
                    # beside the benches, the machine's own scaling: the baselines, and every row on one CPU too
                    bar.total = runs_planned(args.names, args.cpus, baselines=True, one_cpu=True) * DEFAULT_REPEATS
                    results = run_native_benches_on_cpus(args.names or None, args.cpus, args.iterations,
                                                         DEFAULT_REPEATS, bar.update, baselines=True, one_cpu=True)
        except (NativeUnavailable, ValueError) as err:
            print(f"native benchmarks are not possible here: {err.said('--mode emulated')}"
                  if isinstance(err, NativeUnavailable)
                  else f"error: {err}", file=sys.stderr)
            return 2
    else:
        args.arch = args.arch or "x86_64"
        results = model_rows(args.names or bench.bench_names(args.arch), args.arch, kernel, args.cpu, options,
                             args.kernel)
    print(json.dumps(results, indent=2) if args.json else bench.format_table(results))
    if args.mode == "native":  # after the table, which stays whole
        from .native.bench import spread_note

        for note in filter(None, map(spread_note, results)):
            print(f"warning: {note}", file=sys.stderr)
    return 0


PROGRESS_DELAY_S = 1.0  # a bar only for a run long enough to leave someone waiting


def _emulated_on_cpus(names, args, kernel, options) -> list[dict]:
    """``bench -p N`` on the emulator, with a bar of the calls made on stderr once a run takes over a second."""
    from tqdm import tqdm

    calls = args.iterations * args.cpus
    results = []
    with tqdm(total=len(names) * calls, unit="call", desc="emulated", file=sys.stderr, leave=False,
              disable=args.json, delay=PROGRESS_DELAY_S) as bar:
        for name in names:
            done = bar.n
            bar.set_description(name, refresh=False)
            results.append(bench.run_bench_on_cpus(name, args.arch, kernel, args.iterations, args.cpus,
                                                   progress=lambda n: bar.update(done + n - bar.n), **options))
            bar.update(done + calls - bar.n)
    return results


def model_rows(names, arch: str, kernel: str, cpu, options: dict, release: str | None = None) -> list[dict]:
    """The model's table, with a refusal row where the kernel refuses the probe (or ``release``, which ``kernel``
    answers for, predates it: a uretprobe before 3.10), and each row saying whether a published figure exists for it
    or the model's number is a prediction only."""
    from .model import get_profile, model_table
    from .published import cpu_words, load_published

    published = load_published()
    cpu_label = get_profile(cpu, arch).cpu  # the published tables' name for the profile's CPU
    refused = {n: bench.refusal(n, arch, kernel, release) for n in names}
    priced = [n for n in names if refused[n] is None]
    rows = {r["bench"]: r for r in (model_table(priced, arch=arch, kernel=kernel, cpu=cpu, **options) if priced else [])}
    out = []
    for n in names:
        if refused[n] is not None:
            out.append(bench.refused_row(n, arch, "model", release or kernel, refused[n]))
            continue
        row = rows[n]
        seen = published[(published["bench"] == n) & (published["kernel"].astype(str) == str(kernel))
                         & (published["arch"] == arch)]
        here = seen[seen["cpu"] == cpu_label]
        if len(here):
            row["published"] = "this cpu"
            row["basis"] = "priced from the published figures' fit; published figures exist for this CPU, bench and kernel"
        elif len(seen):
            row["published"] = "other cpus"
            row["basis"] = (f"prediction for the {cpu_label}: on this kernel the bench is published only for "
                            f"{', '.join(dict.fromkeys(map(cpu_words, seen['cpu'])))}")
        else:
            row["published"] = "none"
            row["basis"] = "prediction: no throughput has been published for this bench on this kernel"
        out.append(row)
    return out


def cmd_analyze(args) -> int:
    options = {"stp": args.stp} if args.stp else {}
    refuse_before_uprobes(args.kernel, args.arch)
    kernel = args.kernel
    if kernel not in KERNELS:  # a release: its own rules, stable backports from its sublevel (6.18.15 vs 6.18.34)
        kernel = kernel_for_release(kernel)
    result = analyze(args.insn, args.arch, kernel, **options)  # a bad instruction is refused before any note
    # outside the modelled releases, or no sublevel: say what answers, and which sublevels answer otherwise
    for line in ((outside_modelled(args.kernel, args.arch) or (None, ""))[1], unknown_sublevel_note(args.kernel, args.arch)):
        if line:
            print(line, file=sys.stderr)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        what = (f"{result['mnemonic']} {result['op_str']}  ({result['length']} bytes)" if result["mnemonic"]
                else f"{args.insn} (no instruction)")
        print(f"{what}: {result['action']}")
        print(f"  {result['reason']}")
    return 0


def cmd_reproduce(args) -> int:
    """Every seed chart, the reproduction table and the per-hit cost breakdown, into ``args.out``."""
    from . import model
    from .reproduce import REPRODUCE_TABLES, write_reproduction

    target = OutputDir(args.out)
    target.claim(*REPRODUCE_TABLES)  # refused now, not after the run, when a user's file has one of these names
    n_rows = len(model.bench_rows())
    update, close = _progress(n_rows, True)
    try:
        repro = model.reproduction(progress=update)
    finally:
        close()
    with target.staged() as out:
        write_reproduction(out, repro)
    print(f"wrote {target.path}/reproduction.csv, scaling_model.csv and {len(list(target.path.glob('*.png')))} "
          "charts")
    return 0


def cmd_predict(args) -> int:
    """Fit a profile on an unseen machine's measurements and predict another kernel."""
    from . import model
    from .measured_file import read_measured

    out = output_file(args.out) if args.out is not None else None
    measured = read_measured(args.measured)
    note = None
    if args.to not in model.ARM64_STP:  # an STP label is no release: the arm64 emulator's options (kernel_setup)
        arch = str(measured["arch"].iloc[0]) if "arch" in measured and len(measured) else "x86_64"
        _, note = row_for_release(args.to, arch)  # which row prices a release, as bench and analyze say it
    with warnings.catch_warnings(record=True):  # printed below, once each
        warnings.simplefilter("always")
        result = model.predict_from_measured(measured, args.to)
    if note:  # once the prediction is made: a refusal is the only line
        print(note, file=sys.stderr)
    bad = result[~(result["predicted_mops"] > 0)]  # NaN too
    if len(bad):
        raise LabError(f"the fit on {args.measured} predicts {bad.iloc[0]['predicted_mops']} M/s for "
                       f"{bad.iloc[0]['bench']}, which no machine runs at; check the measured rates (mops is in "
                       "millions of calls per second)")
    table = result.to_csv(index=False, float_format="%.5g")
    if out:
        write_output(out, table, "--out", "predicted.csv")
    else:
        print(table, end="")
    for note in result.attrs["warnings"]:  # after the table: an error above stays the first line
        print(f"warning: {note}", file=sys.stderr)
    return 0


def cmd_verify(args) -> int:
    """Run instructions under real uprobes on this host and compare with the lab's emulator."""
    from .native import NativeUnavailable
    from .verify import verify

    if args.kernels:  # Debian's x86-64 kernels under QEMU: the version questions, not instruction forms
        from .verify.x86_kernels import run_referee

        instruction_only = _given(args, "--arch", "--sample", "--seed", "--classes", "--no-sweeps", "--kernel",
                                  "--probe", "--kernel-package", "--kernel-deb")
        if instruction_only:
            raise LabError(f"{', '.join(instruction_only)}: settings of the instruction referees (verify without "
                           "--kernels); --kernels boots Debian's x86-64 kernels and asks each the same questions, "
                           "with --record and --json alone: drop them")
        return run_referee([] if args.kernels == "all" else args.kernels.split(","), args.record, args.json)
    if args.sample is not None:
        from .verify import arm64_cases, x86_gen

        most = (arm64_cases if args.arch == "arm64" else x86_gen).MAX_SAMPLE
        if not 0 <= args.sample <= most:
            raise LabError(f"--sample {args.sample}: the number of random instructions is 0 to {most} on {args.arch} "
                           "(for more, run again with another --seed), e.g. --sample 300")
    seed = 1 if args.seed is None else args.seed
    if args.arch == "arm64":  # Debian's arm64 kernel under QEMU: its sweep, random words after it, its own kernel
        x86_only = _given(args, "--classes", "--no-sweeps", "--kernel", "--probe")
        if x86_only:
            raise LabError(f"{', '.join(x86_only)}: x86 settings; the arm64 referee runs its sweep of the decode "
                           "classes and --sample random words (from --seed), and compares with the lab's rules for "
                           "the kernel it boots (--kernel-package or --kernel-deb): drop them")
        options = {"package": args.kernel_package, "deb": args.kernel_deb, "record": args.record,
                   "sample": args.sample or 0, "seed": seed}
    else:
        arm64_only = _given(args, "--record", "--kernel-package", "--kernel-deb")
        if arm64_only:
            raise LabError(f"{', '.join(arm64_only)}: settings of the arm64 referee (--arch arm64; --record also of "
                           "--kernels); this run asks the host's own kernel and prints its report (--json for JSON): "
                           "drop them, or add --arch arm64")
        options = {"sample": 3000 if args.sample is None else args.sample, "seed": seed, "classes": args.classes,
                   "sweeps": not args.no_sweeps, "kernel": kernel_row(args.kernel) if args.kernel else None,
                   **({"probe": args.probe} if args.probe else {})}
    with _verify_progress(args.json) as progress:
        try:
            report = verify(args.arch, progress=progress, **options)
        except NativeUnavailable as err:
            print(f"the referee needs real uprobes, not possible here: {err.said(None)}", file=sys.stderr)
            return 2
    print(json.dumps(report.as_dict(), indent=2) if args.json else report.format())
    return 0


def _given(args, *flags: str) -> list[str]:
    """Those of ``flags`` set on the command line (--arch: set to other than x86_64, its default)."""
    values = {flag: getattr(args, flag[2:].replace("-", "_")) for flag in flags}
    return [flag for flag, value in values.items()
            if value is not None and value is not False and not (flag == "--arch" and value == "x86_64")]


@contextlib.contextmanager
def _verify_progress(quiet: bool):
    """A progress(done, total) callback drawing a bar on stderr, closed on leaving the block."""
    from tqdm import tqdm

    bar = tqdm(file=sys.stderr, leave=False, disable=quiet, desc="verify", delay=0.5)

    def progress(done: int, total: int) -> None:
        bar.total = total
        bar.update(done - bar.n)

    try:
        yield progress
    finally:
        bar.close()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m uprobe_lab", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    b = sub.add_parser("bench", help="run the kernel bench's uprobe triggers")
    b.add_argument("names", nargs="*", help="bench names, e.g. uprobe-nop uretprobe-ret (default: all)")
    b.add_argument("--mode", choices=["emulated", "native", "model"], default="emulated")
    b.add_argument("--arch", choices=list(ARCHES), help="default x86_64; native mode: this machine's")
    b.add_argument("--kernel", type=kernel_release, help=f"emulated and model modes: the kernel to emulate, a "
                   f"release (7.3, $(uname -r)) or a modelled version {', '.join(KERNELS)} (default {DEFAULT_KERNEL})")
    b.add_argument("-p", "--producers", type=int, dest="cpus", help="the kernel bench's -p: producer threads, one per "
                   "CPU (emulated: that many emulated CPUs, with the --kernel release's own rules; native: pinned "
                   "to this machine's CPUs)")
    b.add_argument("--stp", choices=["xol", "simulate"], help="arm64: how a probed stp x29, x30 runs")
    b.add_argument("--cpu", help="model mode: the CPU profile to price events with")
    b.add_argument("--iterations", type=int,
                   help=f"emulated mode: calls per bench (default {bench.DEFAULT_ITERATIONS}); native mode: calls per "
                        "timed interval of a probed bench (default the native bench's; the loops without a "
                        "probe make at least as many, as many as fill the shortest probed bench's interval)")
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_bench)

    a = sub.add_parser("analyze", help="what the kernel would do with a probe on an instruction")
    a.add_argument("insn", help="x86_64: bytes in memory order (0f1f440000); arm64: the word (a9bf7bfd)")
    a.add_argument("--arch", default="x86_64", choices=list(ARCHES))
    a.add_argument("--kernel", default=DEFAULT_KERNEL, type=kernel_release,
                   help=f"a release (6.18.15, $(uname -r)) or a modelled version {', '.join(KERNELS)} "
                        f"(mainline X.Y.0; default {DEFAULT_KERNEL})")
    a.add_argument("--stp", choices=["xol", "simulate"], help="arm64: how a probed stp x29, x30 runs")
    a.add_argument("--json", action="store_true")
    a.set_defaults(func=cmd_analyze)

    r = sub.add_parser("reproduce", help="regenerate every seed chart and the model's reproduction table")
    r.add_argument("--out", required=True, help="directory for reproduction.csv and the PNG charts")
    r.set_defaults(func=cmd_reproduce)

    p = sub.add_parser("predict", help="fit a CPU profile on your measurements and predict another kernel")
    p.add_argument("--measured", required=True,
                   help="CSV with columns arch, kernel, bench, mops, or the JSON of bench --mode native --json")
    p.add_argument("--to", required=True, help="kernel to predict: a release such as 6.14.2 or a modelled version "
                   f"{', '.join(KERNELS)} (arm64: xol-stp, simulated-stp, simulated-stp-uaccess)")
    p.add_argument("--out", help="CSV to write (bench, predicted_mops, low_80, high_80); default: stdout")
    p.set_defaults(func=cmd_predict)

    v = sub.add_parser("verify", help="the host kernel as referee: instructions under real uprobes vs the lab")
    v.add_argument("--arch", default="x86_64", choices=list(ARCHES))
    v.add_argument("--sample", type=int, help="random instructions (x86: default 3000; arm64: after the fixed sweep, "
                   "a third each any word, the load/store group and the branch group, default 0)")
    v.add_argument("--seed", type=int, help="of the random instructions (default 1)")
    v.add_argument("--classes", nargs="+", metavar="CLASS",
                   help="x86: 1-byte 0f prefixed VEX EVEX RIP-relative branches nops syscall (default: all)")
    v.add_argument("--no-sweeps", action="store_true",
                   help="x86: leave out the sweep of every register-form VEX and EVEX opcode")
    v.add_argument("--kernel", type=kernel_release, help="the lab version to compare with, a release or a modelled "
                   "version (default: the host's)")
    v.add_argument("--probe", choices=["perf", "bpf"],
                   help="x86: perf (one perf uprobe per instruction, ~0.1 s each; default) or bpf (uprobe_multi "
                        "batches, the same kernel uprobes, much faster)")
    v.add_argument("--kernel-package", help="arm64: the Debian image package to boot (default: bookworm's newest 6.1), "
                   "e.g. linux-image-6.12.117+deb13-arm64")
    v.add_argument("--kernel-deb", help="arm64: a linux-image (or linux-binary) .deb already downloaded")
    v.add_argument("--kernels", nargs="?", const="all", metavar="LINES",
                   help="x86-64: boot Debian's kernels of these lines under QEMU (comma-separated, e.g. 6.1,7.2; "
                        "default: every line of verify.x86_boot.KERNEL_LINES) and compare what each does with the lab's rules")
    v.add_argument("--record", help="arm64, --kernels: also write the run as JSON to this file")
    v.add_argument("--json", action="store_true")
    v.set_defaults(func=cmd_verify)
    return parser


def kernel_release(release: str) -> str:
    """--kernel's type where the release itself matters (bench -p): any release the lab can answer for, unchanged."""
    try:
        row_for_release(release)
    except LabError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return release


def release_rules_note(release: str, arch: str) -> str | None:
    """What answers for a release with -p (the emulator runs its own rules), unless it is a modelled version."""
    text = str(release).strip()
    if text in KERNELS:
        return None
    row, _ = row_for_release(text, arch)
    rules = release_rules(text).rules
    newest = max((r for r in RULES if r.name in rules and r.arch in (arch, "core")), key=lambda r: r.since,
                 default=None)
    line = major_minor(text)
    came = (f"a backport of {version_name(newest.since)}'s to {version_name(line)}.{newest.backports[line]}"
            if newest and newest.since > line else f"from {version_name(newest.since)}" if newest else "")
    has = f"the newest rule it has is {newest.name}, {came}" if newest else "it has none of the lab's rules"
    outside = outside_modelled(text, arch)
    return (f"kernel {text}: the emulator runs the lab's rules of every release up to it: a hit on one CPU is the "
            f"{row} row's, and {has}" + (f"\n{outside[1]}" if outside else ""))


def kernel_row(release: str, arch: str = "x86_64") -> str:
    """Any release (7.3, 6.19, 6.12.118+deb12-amd64, $(uname -r)) -> the modelled row that answers for it, said on
    stderr when it is another; nonsense is refused with the list. Called once the command's flags are accepted, so
    a refused command prints no note."""
    row, note = row_for_release(release, arch)
    if note:
        print(note, file=sys.stderr)
    return row


@contextlib.contextmanager
def plain_warnings():
    """Warnings printed on stderr as they come, one line each, not Python's two with the line that issued them."""
    def show(message, category, filename, lineno, file=None, line=None):
        print(f"warning: {message}", file=sys.stderr, flush=True)

    with warnings.catch_warnings():
        warnings.showwarning = show
        yield


@contextlib.contextmanager
def terminate_as_ctrl_c():
    """SIGTERM and SIGHUP (kill, a closed terminal) act as Ctrl-C: the SIGINT handler in place runs, so the
    probes, children and scratch directories are released as on Ctrl-C, and a step that holds Ctrl-C holds
    them too. Only on the main thread, where Python runs signal handlers."""
    def as_ctrl_c(signum, frame):
        handler = signal.getsignal(signal.SIGINT)
        if not callable(handler):  # SIGINT ignored or left to the OS: stop all the same, through the cleanup
            raise KeyboardInterrupt
        handler(signal.SIGINT, frame)

    with handling(stop_signals(), as_ctrl_c):
        yield


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with plain_warnings(), terminate_as_ctrl_c():
            return args.func(args)
    except LabError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # every probe, mapping and temp file is released on the way up
        print("interrupted", file=sys.stderr)
        return 130
    except OSError as err:  # the disk filled up, a file vanished mid-run: say which, no traceback
        where = f"{err.filename}: " if err.filename else ""
        print(f"error: {where}{err.strerror or err}; check the path and the free space, and run again",
              file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
