"""The x86-64 kernels referee: each of Debian's kernel lines from 6.1 to 7.3, booted and asked what
the lab claims of it.

This machine runs one kernel; the lab models five versions. Here each line of :data:`.x86_boot.KERNEL_LINES`
is booted under QEMU (:mod:`.x86_boot`) and, inside, the lab's own native code answers
(:func:`.x86_guest.guest_report`):

* the three questions of :func:`uprobe_lab.native.scheme.detect_scheme`: syscall 336 off the trampoline,
  is a probed nop5 rewritten into a call, is a nop10 refused or rewritten into ``lea; call``;
* for each bench of :data:`BENCHES`, in a fresh process, what :func:`uprobe_lab.native.compare` snapshots
  after a hundred hits: the probe site's bytes, the ``[uprobes]`` and ``[uprobes-trampoline]`` mappings,
  their trampolines' bytes and the used XOL slots; or that the kernel refused the probe at attach;
* what a forked child inherits from a probed process (:mod:`uprobe_lab.native.fork`): its copy of the
  probe site, its uprobe mappings, and whether calling the site kills it (6.18's optimised nop5) or hits.

:func:`judge` sets those answers beside the emulator's for the rules
:func:`uprobe_lab.kernel.kernel_for_release` gives that release. The emulator's speed and the guest's are
not compared: under TCG neither says anything about a real machine.

    python -m uprobe_lab verify --kernels [6.1,7.3] [--record PATH] [--json]

needs qemu-system-x86, busybox-static, apt-get/dpkg-deb, the Debian keyring and deb.debian.org (about
600 MB of kernel packages, cached under ~/.cache/uprobe_lab); root is not needed outside the guest.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from ..errors import LabError
from ..kernel import kernel_for_release
from ..outputs import output_file, read_recording, write_output
from .x86_guest import HITS, REFUSED
from ..usdt import describe_syscall_result, emulated_syscall_336
from ..native.compare import site_form, compare, emulator_snapshot
from .x86_boot import KERNEL_LINES, fetch_kernel, run_in_guest
from ..native.fork import compare_fork, emulated_fork_report
from ..arches import make_process
from ..uprobes import UnprobeableInstruction

RECORDING = Path(__file__).resolve().parent.parent / "data" / "x86_kernels_referee.json"


# --- on this machine ------------------------------------------------------------------------------

def boot_and_report(line: str, timeout: int = 900) -> dict:
    """Fetch and boot the newest kernel of ``line``; its guest_report with the package it came from."""
    kernel = fetch_kernel(line)
    root = str(Path(__file__).resolve().parents[2])
    run = run_in_guest(kernel, f"{sys.executable} -m uprobe_lab.verify.x86_guest", root, timeout)
    lines = [ln for ln in run.output.splitlines() if ln.startswith("{")]
    if run.status or not lines:
        raise LabError(f"the {line} guest's report failed (exit {run.status}):\n{run.output[-1500:]}")
    return {"line": line, "package": kernel.package, "package_version": kernel.version,
            "boot_seconds": round(run.seconds, 1), **json.loads(lines[-1])}


def lab_rules(report: dict):
    return kernel_for_release(report["release"], report["package_version"])


def _lab_snapshot(bench: str, rules) -> dict:
    try:
        return emulator_snapshot(bench, rules, HITS)
    except UnprobeableInstruction:
        return {"bench": bench, "refused": REFUSED}


def judge(report: dict) -> pd.DataFrame:
    """Rows (line, bench, what, kernel, lab, same) of one guest report against the lab's rules for it."""
    rules = lab_rules(report)
    rows = [("scheme", "syscall 336 off the trampoline", report["scheme"]["syscall_336"],
             emulated_syscall_336(make_process("x86_64", rules)))]
    for bench, host in report["snapshots"].items():
        lab = _lab_snapshot(bench, rules)
        if "refused" in host or "refused" in lab:
            rows.append((bench, "attach", host.get("refused", "accepted"), lab.get("refused", "accepted")))
            continue
        for r in compare(host, lab).itertuples(index=False):
            if r.what not in ("kernel", "probe site bytes"):  # addresses differ; "probe site" compares the form
                rows.append((bench, r.what, r.host, r.emulator))
    for r in compare_fork(report["fork"], emulated_fork_report(rules)).itertuples(index=False):
        rows.append((f"fork, {r.site}", r.what, r.kernel, r.lab))
    out = pd.DataFrame(rows, columns=["bench", "what", "kernel", "lab"])
    out["same"] = [str(k) == str(v) for k, v in zip(out["kernel"], out["lab"])]
    out.insert(0, "line", report["line"])
    return out


def referee(lines: tuple = (), progress=print) -> list[dict]:
    """Boot every line of ``lines`` (default: all of x86_boot.KERNEL_LINES) and return their reports."""
    reports = []
    for line in lines or KERNEL_LINES:
        if progress:
            progress(f"booting Debian's newest {line} kernel ...")
        reports.append(boot_and_report(line))
    return reports


def _site(snap: dict, rewritten: bool = False) -> str:
    """A probe site after the hits: refused, rewritten (``rewritten``: the scheme report saw the nop10's
    lea and call), a call, or an int3 whose hits were stepped in [uprobes] or emulated."""

    if "refused" in snap:
        return "refused"
    if rewritten:
        return "lea -0x80(%rsp),%rsp; call [uprobes-trampoline]"
    form = site_form(snap)
    if form.startswith("call") or not form.startswith("cc"):
        return form
    return "int3, " + ("stepped in [uprobes]" if any(m["name"] == "[uprobes]" for m in snap["mappings"]) else "emulated")


def _return_trampoline(code: str) -> str:
    """The uretprobe's return trampoline (hex) in words: an int3 (before 6.11), or syscall 335 (mov $0x14f,
    %rax; syscall), with the int3 after its ret that 6.18 added."""
    if code.startswith("cc"):
        return "int3"
    if "48c7c04f010000" in code:
        return "syscall 335" + (", int3 after the ret" if code.endswith("c3cc") else "")
    return code


def _forked_child(fork: dict) -> str:
    """What a child forked after the optimisation does at the optimised site, or that none was optimised."""
    for answers in fork.values():
        if answers.get("parent site", "").endswith("call [uprobes-trampoline]"):
            return f"{answers['child']}, its site: {answers['child site']}"
    return "no site optimised"


def summary(reports: list[dict]) -> pd.DataFrame:
    """One row per kernel: what it did to each probe site after the hits, syscall 336's answer, the
    uretprobe's return trampoline, and how many of its answers agree with the lab."""

    rows = []
    for r in reports:
        snaps = r["snapshots"]
        ret = {t["name"]: t["bytes"] for t in snaps["uretprobe-nop"]["trampolines"]}.get("[uprobes]", "")
        verdicts = judge(r)
        rows.append({"kernel": f"{r['release']} ({r['package_version']})",
                     "nop5 site": _site(snaps["uprobe-nop5"]),
                     "nop10 site": _site(snaps["uprobe-nop10"], r["scheme"]["nop10_rewritten"]),
                     "syscall 336": describe_syscall_result(r["scheme"]["syscall_336"]),
                     "return trampoline": _return_trampoline(ret),
                     "forked child at the optimised site": _forked_child(r["fork"]),
                     "agree with the lab": f"{int(verdicts['same'].sum())}/{len(verdicts)}"})
    return pd.DataFrame(rows)


def load_recording(path: Path = RECORDING) -> list[dict]:
    made_by = "that python -m uprobe_lab verify --kernels --record FILE wrote"
    return read_recording(path, ("reports",), made_by)["reports"]


def run_referee(lines: list[str], record: str | Path | None = None, as_json: bool = False) -> int:
    """Boot ``lines`` (all when empty), print every answer beside the lab's (or the reports as JSON) and
    the count that agree; write the reports to ``record`` if given. Exit status 0 when all agree, 1 when
    the kernels cannot be had (the message says why), 2 when some answer differs; LabError for a ``record``
    that would overwrite a file the lab did not write."""
    lines = [line.strip() for line in lines]
    unknown = [line for line in lines if line not in KERNEL_LINES]
    if unknown:  # checked before any download or boot
        raise LabError(f"--kernels: no Debian kernel line {', '.join(map(repr, unknown))}; the lines are "
                       f"{', '.join(KERNEL_LINES)} (e.g. --kernels {next(iter(KERNEL_LINES))}), or --kernels alone "
                       "for all")
    if record:  # refused now, not after the boots; a LabError of the command line, not of the kernels
        output_file(record, "--record", "kernels.json", recording=RECORDING.name)
    try:
        reports = referee(tuple(lines), progress=None if as_json else print)
    except LabError as err:
        print(f"cannot referee: {err}", file=sys.stderr)
        return 1
    verdicts = pd.concat([judge(r) for r in reports], ignore_index=True)
    bad = verdicts[~verdicts["same"]]
    if as_json:
        print(json.dumps({"reports": reports, "differ": bad.to_dict("records")}, indent=1))
    else:
        with pd.option_context("display.width", 200, "display.max_colwidth", 60, "display.max_rows", 500):
            print(summary(reports).to_string(index=False))
            if not bad.empty:
                print(bad.to_string(index=False))
        print(f"{len(verdicts) - len(bad)} of {len(verdicts)} answers agree across {len(reports)} kernels")
    if record:
        write_output(record, json.dumps({"command": f"python -m uprobe_lab verify --kernels --record {record}",
                                         "reports": reports}, indent=1) + "\n", "--record", "kernels.json",
                     recording=RECORDING.name)
    return 0 if bad.empty else 2


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", default="", help="kernel lines to boot, comma-separated (default: all)")
    ap.add_argument("--record", type=Path, help="write the reports here (as data/x86_kernels_referee.json)")
    args = ap.parse_args(argv)
    try:
        return run_referee(list(filter(None, args.lines.split(","))), args.record)
    except LabError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
