"""The x86-64 referee: each instruction run by the host kernel and by the lab, verdicts compared.

For every instruction the host says (x86_host) whether perf_event_open refused the probe, whether
the hit was emulated (no ``[uprobes]`` area appeared) or single-stepped out of line (it did), and
whether the probe changed the outcome (registers, flags, extended state, memory or signal against
the unprobed run). The lab (x86_lab) answers the same for the modelled kernel. An instruction the
CPU cannot run (SIGILL without a probe) or whose two unprobed runs differ is skipped and counted.
"""
from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass, field

from ..errors import LabError
from ..kernel import KERNELS, KernelVersion, kernel_for_release, modelled_kernel
from . import x86_gen as G
from . import x86_harness as H
from ..native.code import scratch_dir
from .x86_host import HostPool, cpu_flags
from ..native.support import check_native_support
from .x86_lab import lab_runs

SKIP_SIGILL = "skipped: the CPU cannot run it (SIGILL unprobed)"
SKIP_UNSTABLE = "skipped: two unprobed runs differ"
SKIP_FLAKY = "skipped: the host's answer changed when asked again"
RECHECKS = 2


def lab_kernel_for(release: str) -> str:
    """The modelled version for a host release: the row it hits like (:func:`uprobe_lab.kernel.modelled_kernel`)."""
    kernel = modelled_kernel(release)
    if kernel is None:
        raise LabError(f"the host runs {release}, which is not a version or is older than every modelled kernel "
                       f"({', '.join(KERNELS)}); pass --kernel")
    return kernel


def host_rules(release: str) -> KernelVersion:
    """The lab's rules for a host release: its modelled version plus the release rules it has (6.19:
    insn_is_nop), as :func:`uprobe_lab.kernel.kernel_for_release` gives them; refused as lab_kernel_for does."""
    lab_kernel_for(release)
    return kernel_for_release(release)


def host_action(report: dict) -> str:
    if report.get("attach_errno") is not None:
        return "reject"
    if report.get("hits") == 0:  # None: uprobe_multi mode counts no hits (the breakpoint was in place)
        return "no hit"
    return "xol" if report["xol_area"] else "emulate"


def changes(a: dict, b: dict, vectors: str) -> list[str]:
    """What differs between two runs (unprobed a, probed b); ``vectors`` names the extended-state key
    ("xsave" on the host, "ymm" in the lab)."""
    out = [r for r in H.GREGS if a["regs"].get(r) != b["regs"].get(r)]
    if a["signal"] != b["signal"]:
        out.append(f"signal {a['signal']}->{b['signal']}")
    if a[vectors] != b[vectors]:
        out.append("vector/x87 state")
    if a["mem"] != b["mem"]:
        out.append("memory")
    return out


@dataclass
class Verdict:
    case: G.Case
    status: str  # "agree", "disagree", or a skip / error reason
    host_action: str = ""
    lab_action: str = ""
    host_changed: list = field(default_factory=list)
    lab_changed: list = field(default_factory=list)
    host_optimized: bool = False
    lab_optimized: bool = False
    lab_reason: str = ""
    host_error: str = ""

    def as_dict(self) -> dict:
        return {"class": self.case.cls, "bytes": self.case.hex, "insn": self.case.text, "status": self.status,
                "host": {"action": self.host_action, "changed": self.host_changed, "optimized": self.host_optimized,
                         **({"error": self.host_error} if self.host_error else {})},
                "lab": {"action": self.lab_action, "changed": self.lab_changed, "optimized": self.lab_optimized,
                        "reason": self.lab_reason}}

    def line(self) -> str:
        host = f"host {self.host_action}" + (f", changes {','.join(self.host_changed)}" if self.host_changed else "")
        lab = f"lab {self.lab_action}" + (f", changes {','.join(self.lab_changed)}" if self.lab_changed else "")
        if self.host_error:
            host += f" error: {self.host_error}"
        return f"[{self.case.cls}] {self.case.insn.hex(' ')}  {self.case.text}\n    {host}\n    {lab}: {self.lab_reason}"


def judge_host(host: dict) -> Verdict:
    """The host's half of a verdict (no lab run)."""
    runs = host["runs"]
    return Verdict(G.Case("", b"", "", 0), "", host_action=host_action(host),
                   host_changed=changes(runs[0], runs[2], "xsave") if len(runs) == 3 else [],
                   host_optimized=bool(host.get("trampoline")))


def host_answer(v: Verdict) -> tuple:
    return v.host_action, bool(v.host_changed), v.host_optimized


def judge(case: G.Case, host: dict, kernel) -> Verdict:
    if "error" in host:
        return Verdict(case, "error", host_error=host["error"])
    runs = host["runs"]
    if runs[0]["signal"] == "SIGILL" and runs[0]["regs"]["rip"] == H.SITE:
        return Verdict(case, SKIP_SIGILL)
    if changes(runs[0], runs[1], "xsave"):
        return Verdict(case, SKIP_UNSTABLE)
    v = Verdict(case, "", host_action=host_action(host))
    v.host_changed = changes(runs[0], runs[2], "xsave") if len(runs) == 3 else []
    v.host_optimized = bool(host.get("trampoline"))
    lab = lab_runs(case, kernel, runs[0])
    v.lab_action, v.lab_reason = lab["action"], lab["reason"]
    v.lab_changed = changes(lab["unprobed"], lab["probed"], "ymm") if lab["probed"] else []
    v.lab_optimized = lab["trampoline"]
    same = (v.host_action == v.lab_action and bool(v.host_changed) == bool(v.lab_changed)
            and v.host_optimized == v.lab_optimized)
    v.status = "agree" if same else "disagree"
    return v


@dataclass
class VerifyReport:
    host_release: str
    kernel: str
    cpu_avx512: bool
    seconds: float
    verdicts: list[Verdict]
    probe: str = "perf"

    def table(self) -> list[dict]:
        rows = []
        for cls in sorted({v.case.cls for v in self.verdicts}, key=lambda c: G.CLASSES.index(c)):
            vs = [v for v in self.verdicts if v.case.cls == cls]
            judged = [v for v in vs if v.status in ("agree", "disagree")]
            agree = sum(v.status == "agree" for v in judged)
            rows.append({"class": cls, "instructions": len(vs), "judged": len(judged), "agree": agree,
                         "agreement": f"{100 * agree / len(judged):.1f}%" if judged else "-",
                         "skipped_sigill": sum(v.status == SKIP_SIGILL for v in vs),
                         "skipped_unstable": sum(v.status in (SKIP_UNSTABLE, SKIP_FLAKY) for v in vs),
                         "errors": sum(v.status == "error" for v in vs),
                         **{f"host_{a}": sum(v.host_action == a for v in judged) for a in ("reject", "emulate", "xol")},
                         "host_changed": sum(bool(v.host_changed) for v in judged)})
        return rows

    @property
    def disagreements(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.status in ("disagree", "error")]

    def as_dict(self) -> dict:
        judged = [v for v in self.verdicts if v.status in ("agree", "disagree")]
        return {"host_release": self.host_release, "lab_kernel": self.kernel, "cpu_avx512": self.cpu_avx512,
                "probe": self.probe,
                "seconds": round(self.seconds, 1), "instructions": len(self.verdicts), "judged": len(judged),
                "agree": sum(v.status == "agree" for v in judged), "classes": self.table(),
                "disagreements": [v.as_dict() for v in self.disagreements]}

    def format(self, limit: int = 40) -> str:
        d = self.as_dict()
        head = (f"host kernel {self.host_release} vs the lab's {self.kernel}: {d['agree']}/{d['judged']} judged "
                f"instructions agree on refuse/emulate/step, on whether the probe changes the result and on the "
                f"nop5 optimisation ({len(self.verdicts)} run, {self.seconds:.0f} s, {self.probe} uprobes)")
        cols = ["class", "instructions", "judged", "agree", "agreement", "skipped_sigill", "skipped_unstable",
                "host_reject", "host_emulate", "host_xol", "host_changed"]
        lines = [head, "", "  ".join(f"{c:>12}" for c in cols)]
        for row in d["classes"]:
            lines.append("  ".join(f"{str(row[c]):>12}" for c in cols))
        bad = self.disagreements
        if bad:
            lines += ["", f"{len(bad)} disagreements" + (f" (first {limit})" if len(bad) > limit else "") + ":"]
            lines += [v.line() for v in bad[:limit]]
        return "\n".join(lines)


def verify_x86(sample: int = 3000, seed: int = 1, classes=None, sweeps: bool = True, kernel: str | None = None,
               parallel: int = 16, probe: str = "perf", progress=None) -> VerifyReport:
    """Run the referee; ``progress(done, total)`` is called as verdicts come in.

    ``probe="perf"`` attaches one perf uprobe per instruction (~0.1 s each: the kernel's teardown of a
    perf uprobe); ``probe="bpf"`` attaches batches through one BPF uprobe_multi link each (fast)."""

    # the arguments first: a mistyped class or kernel is reported as such on any host, not as missing permission
    classes = tuple(classes or G.CLASSES)
    unknown = [c for c in classes if c not in G.CLASSES]
    if unknown:
        raise LabError(f"unknown instruction class(es) {', '.join(unknown)}; choose from {', '.join(G.CLASSES)}")
    if kernel is not None and kernel not in KERNELS:
        raise LabError(f"unknown kernel {kernel!r}: the lab models {', '.join(KERNELS)}")
    if probe not in ("perf", "bpf"):
        raise LabError(f"unknown probe {probe!r}: choose perf or bpf")
    if not 0 <= sample <= G.MAX_SAMPLE:
        raise LabError(f"sample {sample}: the x86 referee runs 0 to {G.MAX_SAMPLE} random instructions; for more, "
                       "run several seeds")
    check_native_support("x86_64")
    release = os.uname().release
    kernel = kernel or host_rules(release)
    cases = G.random_cases(sample, seed, classes)
    if sweeps and "VEX" in classes:
        cases += G.vex_sweep()
    if sweeps and "EVEX" in classes:
        cases += G.evex_sweep()
    avx512 = "avx512f" in cpu_flags()
    start = time.monotonic()
    verdicts: list[Verdict | None] = [None] * len(cases)
    # named after this process, so a run killed hard leaves a directory the next native run removes
    with scratch_dir() as workdir:
        pool = HostPool(workdir, opmask=avx512, parallel=parallel, probe=probe)
        jobs = ((i, c.insn, c.flags) for i, c in enumerate(cases))
        for done, (i, report) in enumerate(pool.run(jobs), 1):
            verdicts[i] = judge(cases[i], report, kernel)
            if progress:
                progress(done, len(cases))
        # a case the pool gave no report for is an error in the summary, not a hole in it
        verdicts = [v if v is not None else Verdict(cases[i], "error", host_error="the host returned no report for it")
                    for i, v in enumerate(verdicts)]
        # a disagreement counts only if the host gives the same answer when asked again
        doubtful = [i for i, v in enumerate(verdicts) if v.status == "disagree"]
        again = ((i, cases[i].insn, cases[i].flags) for i in doubtful for _ in range(RECHECKS))
        for i, report in pool.run(again):
            if "error" in report or host_answer(judge_host(report)) != host_answer(verdicts[i]):
                verdicts[i].status = SKIP_FLAKY
    return VerifyReport(release, str(kernel), avx512, time.monotonic() - start, verdicts, probe)


def counts(report: VerifyReport) -> Counter:
    return Counter(v.status for v in report.verdicts)
