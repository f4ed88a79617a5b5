"""Views for the nop5 chapter: the staged rewrite, events per hit, the red zone, the address map.

Every view has a plain form (text or a pandas DataFrame) that means something in a headless run,
and the patch stepper adds an ipywidgets slider when a widget front end is there.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ..arches import make_process
from ..errors import LabError
from ..bench import events_per_hit, events_table as bench_events_table
from ..cli import model_rows
from ..kernel import get_kernel
from ..native import NativeUnavailable
from ..native.fork import emulated_fork_report, host_fork_report
from ..native.host import kernel_release
from ..uprobes import CountingConsumer, UnprobeableInstruction, UprobeConsumer, uprobe_register, uprobe_unregister
from ..sites import LEA_INSN_SIZE, LEA_RSP_MINUS_0X80, call_target
from ..usdt import LIBBPFS, USDT_SHAPES, describe_syscall_result, emulated_syscall_336, usdt_probe_offset
from ..x86 import optimize
from ..x86.constants import __NR_uprobe
from ..x86.redzone_programs import check_transparency, make_redzone_process, site_of
from .redraw import shows_lab_errors
from .stepper import steplog_html

KINDS = ("exceptions", "iret", "syscalls", "sysret", "emulated", "xol_steps", "consumers", "uaccess_bytes")


@dataclass
class PatchRun:
    """One probe's life on an optimisable site (6.18's nop5, 7.3's nop10): registered, hit (optimised), unregistered."""

    proc: object
    site: int
    stages: list
    maps_while_optimised: str = ""

    def table(self) -> pd.DataFrame:
        rows = []
        for i, s in enumerate(self.stages):
            rows.append({"stage": i, "action": s.action, "what": s.what, "bytes": s.site.hex(" "),
                         "a CPU entering the site decodes": " ; ".join(t for _, _, t in s.listing)})
        return pd.DataFrame(rows)

    def text(self, i: int) -> str:
        s = self.stages[i]
        return f"stage {i}/{len(self.stages) - 1}  {s}"

    def nothing_rewritten(self) -> str:
        """Why a run has no stages: its kernel took every hit on the int3 path and never rewrote the site."""
        kernel = self.proc.kernel.name
        return (f"kernel {kernel} did not rewrite the site at {self.site:#x} (every hit took the int3 path), "
                f"so there are no stages to step through; use patch_run('6.18') for the nop5 "
                f"or patch_run('7.3') for the nop10")

    def widget(self):
        """A slider over the stages, played by the Play button; falls back to the full text without ipywidgets."""
        try:
            import ipywidgets as w
        except ImportError:  # pragma: no cover - ipywidgets is a dependency of the course
            return str(self)
        out = w.HTML()
        if not self.stages:
            out.value = f"<pre>{self.nothing_rewritten()}</pre>"
            return w.VBox([out])
        slider = w.IntSlider(min=0, max=len(self.stages) - 1, value=0, description="stage")
        play = w.Play(min=0, max=slider.max, interval=900)
        w.link((play, "value"), (slider, "value"))  # Play drives the slider, which the kernel renders

        @shows_lab_errors(out)
        def render(change=None):
            out.value = steplog_html(self.text(slider.value))  # a listing: monospace, as the slides size it
        slider.observe(render, names="value")
        render()
        return w.VBox([w.HBox([play, slider]), out])

    def __str__(self) -> str:
        return "\n\n".join(self.text(i) for i in range(len(self.stages))) or self.nothing_rewritten()


def patch_run(kernel="6.18", target: str | None = None) -> PatchRun:
    """Register a probe on the bench's optimisable nop (6.18: the nop5, 7.3: the nop10), hit it twice,
    unregister it.

    The first hit takes the int3 and, right after its consumers, the kernel rewrites the site (6.18:
    into a call; 7.3: into lea -0x80(%rsp),%rsp; call); the second goes through that call and
    sys_uprobe, with no exception. ``run.proc.trace`` thus holds one hit of each path before the
    unregister undoes the rewrite (7.3: bytes 0..4 only)."""
    if target is None:
        target = "uprobe_target_nop10" if get_kernel(kernel).optimize_nop10 else "uprobe_target_nop5"
    proc = make_process("x86_64", kernel)
    consumer = CountingConsumer()
    uprobe = uprobe_register(proc, target, consumer)
    site = proc.program.resolve(target)
    proc.call("producer_loop", 2, site)
    maps = address_map(proc, [site])
    uprobe_unregister(proc, uprobe, consumer)
    return PatchRun(proc, site, list(optimize.patch_log(proc)), maps)


def events_table(kernels=("6.11", "6.16", "6.18"),
                 benches=("uprobe-nop5", "uretprobe-nop5", "uprobe-nop5-pagecross",
                          "uretprobe-nop5-pagecross")) -> pd.DataFrame:
    """Steady-state events per hit, one row per (bench, kernel)."""
    return bench_events_table(benches, kernels=kernels, kinds=KINDS)


def kernels_side_by_side(kernels=("6.16", "6.18", "7.3"),
                         benches=("uprobe-nop", "uprobe-nop5", "uprobe-nop10", "usdt-nop", "usdt-nop5",
                                  "usdt-nop10", "usdt-nop10-pagecross")) -> pd.DataFrame:
    """Events per hit, benches down and kernels across: ``E exc + S sys`` per cell, or ``refused``.

    The usdt rows are probed where each kernel's own libbpf probes them (uprobe_lab.usdt)."""

    def cell(bench, kernel):
        try:
            ev = events_per_hit(bench, kernel=kernel)
        except UnprobeableInstruction:
            return "refused"
        return f"{ev.get('exceptions', 0):g} exc + {ev.get('syscalls', 0):g} sys"
    return pd.DataFrame({k: [cell(b, k) for b in benches] for k in kernels}, index=list(benches))


def libbpf_choices(kernels=("6.16", "6.18", "7.3"), shapes=("nop,nop5", "nop,nop10")) -> pd.DataFrame:
    """Per kernel: what its syscall 336 feature probe returns, and where each libbpf puts a USDT probe (+0 or +1)."""
    rows = []
    for k in kernels:
        ret = emulated_syscall_336(make_process("x86_64", k))
        row = {"kernel": k, "syscall 336 off the trampoline": describe_syscall_result(ret)}
        for lib in LIBBPFS:
            for shape in shapes:
                offset, _ = usdt_probe_offset(USDT_SHAPES[shape].site, 0x401000, ret, lib)
                row[f"{lib.name.split(' (')[0]}: {shape}"] = f"+{offset}"
        rows.append(row)
    return pd.DataFrame(rows)


def model_predictions(benches=("uprobe-nop5", "uprobe-nop10", "usdt-nop10"), kernels=("6.18", "7.3")) -> pd.DataFrame:
    """The cost model's throughput for each bench on each kernel (the default CPU profile), with its 80% interval
    and what it rests on (a published figure, or a prediction and why), as `python -m uprobe_lab model` has them; a
    bench the kernel refuses reads "refused", its reason in the basis."""
    rows = []
    for kernel in kernels:
        for r in model_rows(list(benches), "x86_64", kernel, None, {}):
            refused = "refused" in r
            rows.append({"kernel": kernel, "bench": r["bench"],
                         "M/s (model)": "refused" if refused else f"{r['mops']:.2f}",
                         "80% interval": "" if refused else f"{r['low']:.2f} .. {r['high']:.2f}",
                         "basis": r["refused"] if refused else r["basis"]})
    return pd.DataFrame(rows)


def address_map(proc, sites=()) -> str:
    """/proc/PID/maps of a process, with each probe site and the trampoline it calls marked."""
    lines = [proc.maps()]
    for site in sites:
        lea = proc.read(site, LEA_INSN_SIZE) == LEA_RSP_MINUS_0X80  # 7.3: the call follows the lea
        at = site + LEA_INSN_SIZE if lea else site
        target = call_target(proc.read(at, 5), at)
        if target is not None:
            lines.append(f"site {site:#x}: {'lea -0x80(%rsp),%rsp; ' if lea else ''}call {target:#x} "
                         f"({proc.mapping_at(target).name}), rel32 = {target - at - 5:+#x} "
                         f"(reach: +-2 GB from {at + 5:#x})")
        else:
            lines.append(f"site {site:#x}: {proc.read(site, 10 if lea else 5).hex(' ')} (not optimised)")
    return "\n".join(lines)


def redzone_reports() -> list:
    """The leaf with a live red-zone value: nop5 on the int3 path (6.16), optimised nop5 (6.18), the
    nop5 back on the int3 path (7.3), and 7.3's optimised nop10."""
    return [check_transparency("redzone_leaf_nop5", "6.16"),
            check_transparency("redzone_leaf_nop5", "6.18"),
            check_transparency("redzone_leaf_nop5", "7.3"),
            check_transparency("redzone_leaf_nop10", "7.3")]


def sys_uprobe_exits(kernel="7.3") -> pd.DataFrame:
    """The optimised red-zone leaf's second call (its value 5 in the red zone), once with a consumer that leaves
    sp alone and once with one that opens a new frame 16 bytes down (the return address copied, 0xBEEF in the
    red-zone slot the leaf reads back): sys_uprobe returns by sysret through the trampoline, or by iret."""
    rows = []
    for move_sp in (False, True):
        proc = make_redzone_process(kernel)
        leaf = "redzone_leaf_nop10" if get_kernel(kernel).optimize_nop10 else "redzone_leaf_nop5"
        site = site_of(leaf)

        def handler(regs, proc=proc, site=site, move_sp=move_sp):
            if move_sp and optimize.is_optimized(proc, site):
                proc.write_u64(regs.sp - 16, proc.read_u64(regs.sp))
                proc.write_u64(regs.sp - 24, 0xBEEF)
                regs.sp = regs.sp - 16
            return 0
        uprobe_register(proc, site, UprobeConsumer(handler=handler))
        proc.call(leaf, 5)  # the first hit optimises the site
        before = proc.trace.counts
        ret = proc.call(leaf, 5)
        spent = proc.trace.since(before)
        rows.append({"the consumer": "moves sp 16 down, 0xbeef below" if move_sp else "leaves sp alone",
                     "the leaf's red-zone word": f"{ret:#x}" + {5: ", its own", 0xBEEF: ", the consumer's"}.get(ret, ""),
                     "syscalls": spent.get("syscalls", 0),
                     "sysret": spent.get("sysret", 0), "iret": spent.get("iret", 0)})
    return pd.DataFrame(rows)


def stack_at_sys_uprobe(kernel="6.18") -> pd.DataFrame:
    """The user stack when sys_uprobe is entered from the trampoline, for a uretprobe'd optimised site.

    The four words the trampoline and the site's call pushed sit on top: saved rax, r11, rcx and the
    call's return address (site + 5 on 6.18, site + 10 on 7.3, whose call follows the lea). On 7.3 the
    lea put them 0x80 bytes further down, below the probed function's red zone. The probed function's
    own return address - the one a uretprobe hijacks - is above all that (``optimize.UPROBE_SYSCALL_ARGS_SIZE``
    up, + 0x80 on 7.3). RFC v2 read it there; the merged sys_uprobe moves sp past the words first.
    """
    nop10 = get_kernel(kernel).optimize_nop10
    proc = make_process("x86_64", kernel)
    site = proc.program.resolve("uprobe_target_nop10" if nop10 else "uprobe_target_nop5")
    uprobe_register(proc, site, CountingConsumer(ret=True))
    captured = {}
    skip = optimize.UPROBE_SYSCALL_ARGS_SIZE + (optimize.REDZONE_SIZE if nop10 else 0)

    def spy(p, regs):
        if not captured:
            captured["sp"] = regs.sp
            captured["words"] = [p.read_u64(regs.sp + 8 * i) for i in range(4)] + [p.read_u64(regs.sp + skip)]
        return real(p, regs)
    real = proc.set_syscall(__NR_uprobe, spy)
    proc.call("producer_loop", 2, site)
    if not captured:
        raise LabError(f"kernel {kernel} never enters sys_uprobe: it does not optimise the site, every hit takes "
                       f"the int3 path; ask for kernel 6.18 (the nop5) or 7.3 (the nop10)")
    size = optimize.opt_insn_size(proc.kernel)
    names = ["saved rax", "saved r11", "saved rcx", f"return address of the site's call (site + {size})",
             "the probed function's return address (what a uretprobe hijacks)"]
    offsets = [8 * i for i in range(4)] + [skip]
    rows = [{"address": hex(captured["sp"] + o), "offset from sp": f"+{o:#x}", "value": hex(v), "what": w}
            for o, v, w in zip(offsets, captured["words"], names)]
    if nop10:
        rows.insert(4, {"address": f"{captured['sp'] + 32:#x}..", "offset from sp": "+0x20..+0x9f",
                        "value": "(untouched)", "what": "the probed code's red zone: 0x80 bytes the lea stepped over"})
    return pd.DataFrame(rows)


def hijack_offsets(kernel="6.18") -> pd.DataFrame:
    """Where a uretprobe's hijack (arch_uretprobe_hijack_return_addr, which reads [regs->sp]) finds the probed
    function's return address on each path of an optimised site, measured in the emulator: from the consumers'
    sp on the first hit (int3) and on a later one (syscall), and from sys_uprobe's entry sp, which RFC v2 used
    (+ UPROBE_SYSCALL_ARGS_SIZE) before the merged sys_uprobe moved sp past the trampoline's words. The word
    column is read at that moment of the run."""
    nop10 = get_kernel(kernel).optimize_nop10
    proc = make_process("x86_64", kernel)
    site = proc.program.resolve("uprobe_target_nop10" if nop10 else "uprobe_target_nop5")
    hits, entry = [], []

    def handler(regs) -> int:
        hits.append((proc.read(site, 1) == b"\xcc", regs.sp, proc.read_u64(regs.sp)))
        return 0

    def spy(p, regs):  # sys_uprobe's entry sp, and the word at the site's sp (the int3 hit's) at that moment
        entry.append((regs.sp, p.read_u64(hits[0][1])))
        return real(p, regs)

    uprobe_register(proc, site, UprobeConsumer(handler=handler, ret_handler=lambda regs, func: None))
    real = proc.set_syscall(__NR_uprobe, spy)
    proc.call("producer_loop", 2, site)
    int3 = next((sp, word) for trapped, sp, word in hits if trapped)
    syscall = next(((sp, word) for trapped, sp, word in hits if not trapped), None)
    if syscall is None or not entry:
        raise LabError(f"kernel {kernel} never enters sys_uprobe: it does not optimise the site; ask for 6.18 or 7.3")
    entry_sp, entry_word = entry[0]
    rows = [("int3 (first hit)", "the consumers' regs->sp", 0, int3[1]),
            ("syscall, merged sys_uprobe", "the consumers' regs->sp (moved past the pushed words)",
             int3[0] - syscall[0], syscall[1]),
            ("syscall, RFC v2", "sys_uprobe's entry sp", int3[0] - entry_sp, entry_word)]
    return pd.DataFrame([{"path": path, "hijack's base": base, "return address at": f"base + {off:#x}",
                          "word there": hex(word)} for path, base, off, word in rows])

def fork_table(kernels=("6.18", "7.3"), host: bool = True) -> pd.DataFrame:
    """A child forked after its parent's probes were hit (uprobe_lab.native.fork), one row per kernel and
    accepted site: the emulator on each of ``kernels``, then this host's kernel when it can run probes (a
    row saying why not, when it cannot)."""

    reports = [(f"lab {k}", emulated_fork_report(k)) for k in kernels]
    if host:
        try:
            reports.append((f"this host ({kernel_release()})", host_fork_report()))
        except (NativeUnavailable, RuntimeError) as err:
            return pd.concat([_fork_rows(reports), pd.DataFrame([{"who": "this host", "site": f"not asked: {err}"}])],
                             ignore_index=True).fillna("")
    return _fork_rows(reports)


def _fork_rows(reports) -> pd.DataFrame:
    rows = [{"who": who, "site": site.removeprefix("uprobe_target_"),
             **{k: v for k, v in answers.items() if k != "attach"}}
            for who, report in reports for site, answers in report.items() if answers.get("attach") == "accepted"]
    return pd.DataFrame(rows)
