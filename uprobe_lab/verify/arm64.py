"""``python -m uprobe_lab verify --arch arm64``: a real arm64 kernel (Debian's, under QEMU) as referee.

Builds the cases file, /init and the initramfs (uprobe_lab.verify.arm64_guest), boots the kernel
once (arm64_boot), runs every case (the fixed sweep, then ``sample`` random words from ``seed``) in the lab with the lab's rules for that kernel release
(kernel.kernel_for_release), and judges each case (arm64_judge). TCG timing says nothing about
real hardware: only behaviour is judged. The unmerged STP simulation is not in any kernel, so the
referee checks the upstream behaviour only (stp is stepped out of line); the STP chapter's
simulation stays a model.
"""
from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

from ..arm64.analyze import parse_word
from ..errors import LabError
from ..kernel import kernel_for_release
from ..outputs import output_file, read_recording, write_output
from . import arm64_boot as B
from . import arm64_cases as C
from . import arm64_guest as G
from . import arm64_judge as J
from . import arm64_layout as L


def probe_offsets(cases) -> list[list[tuple[int, int]]]:
    """Per case: [(file offset, retprobe)] of its probes."""
    return [[(i * L.SLOT + (L.F if c.kind == "uretprobe" else L.P), int(c.kind == "uretprobe"))]
            for i, c in enumerate(cases)]


def initramfs(cases) -> bytes:
    code = b"".join(L.slot_code(L.slot_base(i), c.word, C.regs_for(c, L.slot_base(i)), c.nzcv)
                    for i, c in enumerate(cases))
    return G.cpio_newc({"init": G.build_init(), "cases": code, "cases.tab": G.build_tab(cases, probe_offsets(cases))})


def kernel_runs(lines: list[str], n: int) -> list[tuple[J.Run, J.Run]]:
    runs = {}
    for line in lines:
        index, mode, run = J.parse_record(line)
        runs[(index, mode)] = run
    missing = [i for i in range(n) if (i, 0) not in runs or (i, 1) not in runs]
    if missing:
        raise LabError(f"the guest reported no result for {len(missing)} cases (first: {missing[:5]})")
    return [(runs[(i, 0)], runs[(i, 1)]) for i in range(n)]


@dataclass
class Report:
    package: str
    release: str
    lab_kernel: str
    boot_seconds: float
    lab_seconds: float
    judged: list
    sample: int = 0  # random words after the sweep
    seed: int | None = None

    @property
    def agreement(self) -> tuple[int, int]:
        return sum(j.agree for j in self.judged), len(self.judged)

    def table(self) -> list[dict]:
        """Per class: forms, how the kernel ran them, agreement, kernel bugs."""
        rows = defaultdict(Counter)
        for j in self.judged:
            r = rows[j.case.cls]
            r["forms"] += 1
            r[j.kernel_verdict.split(" (")[0]] += 1
            r["agree"] += j.agree
            r["kernel bugs"] += bool(j.kernel_bug)
        cols = ("forms", "simulated", "stepped", "refused", "uretprobe", "agree", "kernel bugs")
        return [{"class": cls, **{c: r.get(c, 0) for c in cols}} for cls, r in rows.items()]

    def text(self) -> str:
        ok, n = self.agreement
        lines = [f"arm64 referee: {self.package} (uname -r {self.release}) under qemu-system-aarch64 TCG, "
                 f"lab rules for {self.lab_kernel}",
                 f"agreement (verdict and effect): {ok}/{n} forms ({100 * ok / n:.1f}%)"
                 + (f", {self.sample} of them random words from seed {self.seed}" if self.sample else "") + "; "
                 f"boot+run {self.boot_seconds:.1f} s, lab {self.lab_seconds:.1f} s "
                 "(TCG time says nothing about real hardware: behaviour only)"]
        rows = self.table()
        cols = list(rows[0])
        width = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in cols}
        lines.append("  ".join(c.ljust(width[c]) for c in cols))
        lines += ["  ".join(str(r[c]).ljust(width[c]) for c in cols) for r in rows]
        for j in self.judged:
            if j.kernel_bug:
                lines.append(f"KERNEL BUG {j.case.text()} ({j.case.word:08x}): {j.kernel_bug}; "
                             f"effect {j.kernel_effect}; lab {'reproduces it' if j.agree else 'DIFFERS: ' + str(j.lab_effect)}")
        for j in self.judged:
            if j.cpu_differs:
                lines.append(f"VERDICT ONLY {j.case.text()} ({j.case.word:08x}): {'; '.join(j.notes)}, so the "
                             f"probe's effect is not compared (kernel {j.kernel_verdict}, lab {j.lab_verdict})")
        unread = sum(J.XOL_UNREAD in j.notes for j in self.judged)
        if unread:
            lines.append(f"{J.XOL_UNREAD}: not compared on {unread} of {len(self.judged)} forms")
        for j in self.judged:
            if not j.agree:
                lines.append(f"DISAGREE {j.case.text()} ({j.case.word:08x}): kernel {j.kernel_verdict} {j.kernel_effect}"
                             f" | lab {j.lab_verdict} {j.lab_effect} {'; '.join(j.notes)}")
        lines.append("The STP fp/lr simulation (seed 001) was never merged: the kernel steps stp x29, x30, "
                     "[sp, #-16]! out of line, and the lab's simulation of it stays a model.")
        return "\n".join(lines)

    def format(self) -> str:  # the verify CLI's names for text() and to_json()
        return self.text()

    def as_dict(self) -> dict:
        return self.to_json()

    def to_json(self) -> dict:
        return {"package": self.package, "release": self.release, "lab_kernel": self.lab_kernel,
                "boot_seconds": round(self.boot_seconds, 1), "agreement": list(self.agreement),
                "sample": self.sample, "seed": self.seed,
                "table": self.table(),
                "cases": [{"word": f"{j.case.word:08x}", "text": j.case.text(), "class": j.case.cls,
                           "kernel": j.kernel_verdict, "lab": j.lab_verdict, "agree": j.agree,
                           "kernel_effect": {k: str(v) for k, v in j.kernel_effect.items()},
                           "lab_effect": {k: str(v) for k, v in j.lab_effect.items()},
                           "kernel_bug": j.kernel_bug, "notes": j.notes} for j in self.judged]}


def lab_judge(cases, kernel_pairs, lab_kernel, progress=None) -> list[J.Judged]:
    out = []
    for i, (case, (k_un, k_pr)) in enumerate(zip(cases, kernel_pairs)):
        l_un, l_pr = J.lab_run(case, i, lab_kernel, False), J.lab_run(case, i, lab_kernel, True)
        out.append(J.judge(i, case, k_un, k_pr, l_un, l_pr))
        if progress:
            progress(i + 1, len(cases))
    return out


def verify_arm64(package: str | None = None, deb: str | None = None, cases=None, timeout: int = 600,
                 record: str | None = None, progress=None, sample: int = 0, seed: int = 1,
                 qemu: str = B.QEMU) -> Report:
    """Boot one Debian arm64 kernel (an image package name, or a downloaded .deb) and judge the lab on the
    sweep and ``sample`` random words from ``seed`` (:func:`.arm64_cases.random_cases`); ``record``: also
    save the judged run as JSON there. (``progress(done, total)`` follows the lab's runs; ``qemu``: the
    qemu-system-aarch64 to boot it under.)"""
    if not 0 <= sample <= C.MAX_SAMPLE:
        raise LabError(f"sample {sample}: the arm64 referee runs 0 to {C.MAX_SAMPLE} random words in one boot "
                       "(each runs twice under TCG); for more, run several seeds")
    cases = (cases if cases is not None else C.all_cases()) + C.random_cases(sample, seed)
    if record:
        output_file(record, "--record", "run.json", recording=RECORDING.name)  # refused now, not after the boot
    if deb:
        image, version = B.unpack_deb(Path(deb))
        package = Path(deb).name
    else:
        image, version = B.fetch_kernel(package)
        package = f"{package or 'linux-image-6.1 (bookworm)'} {version}"
    boot = B.boot(image, initramfs(cases), timeout=timeout, qemu=qemu)
    lab_kernel = kernel_for_release(boot.release, version)
    start = time.monotonic()
    judged = lab_judge(cases, kernel_runs(boot.lines, len(cases)), lab_kernel, progress)
    report = Report(package, boot.release, lab_kernel.name, boot.seconds, time.monotonic() - start, judged, sample,
                    seed if sample else None)
    if record:
        save_recording(report, Path(record))
    return report


RECORDING = Path(__file__).resolve().parent.parent / "data" / "arm64_referee_6.1.json"


def save_recording(report: Report, path: Path) -> None:
    write_output(path, json.dumps(report.to_json(), separators=(",", ":")) + "\n", recording=RECORDING.name)


def recorded(path: Path = RECORDING) -> dict:
    """A judged run shipped with the lab (Debian's 6.1 under QEMU), for notebooks that must stay fast."""
    return read_recording(path, ("cases", "release", "package"),
                          "that python -m uprobe_lab verify --arch arm64 --record FILE wrote")


def recorded_case(word: int | str, path: Path = RECORDING) -> dict:
    """One case of the recorded run, beside what the lab answers for it now (same kernel release). ``word``: the
    instruction word as an int or as a listing shows it (``'a9bf7bfd'``)."""
    word = parse_word(word)
    rec = recorded(path)
    try:
        case = next(c for c in rec["cases"] if int(c["word"], 16) == word)
    except StopIteration:
        raise LabError(f"{word:08x} is not among the recorded run's {len(rec['cases'])} forms (recorded()['cases'] "
                       f"lists them, e.g. {rec['cases'][0]['word']}); uprobe_lab.analyze({word:#010x}, 'arm64') "
                       "gives the lab's answer for any word") from None
    index = rec["cases"].index(case)
    lab_case = C.Case(case["class"], word)
    kernel = kernel_for_release(rec["release"], rec["package"].split()[-1])
    un, pr = J.lab_run(lab_case, index, kernel, False), J.lab_run(lab_case, index, kernel, True)
    lab_now = {"verdict": J.verdict(lab_case, pr), "effect": {k: str(v) for k, v in J.effect(un, pr, L.slot_base(index)).items()}}
    return {"kernel": f"{rec['package']} (uname -r {rec['release']})", "instruction": case["text"], "word": case["word"],
            "kernel verdict": case["kernel"], "kernel effect": case["kernel_effect"],
            "lab verdict": lab_now["verdict"], "lab effect": lab_now["effect"],
            "agree": case["kernel"] == lab_now["verdict"] and case["kernel_effect"] == lab_now["effect"],
            "kernel bug": case["kernel_bug"]}

