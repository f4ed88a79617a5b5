"""Views for the nop5 chapter: the staged rewrite, events per hit, the red zone, the address map.

Every view has a plain form (text or a pandas DataFrame) that means something in a headless run,
and the patch stepper adds an ipywidgets slider when a widget front end is there.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ..arches import make_process
from ..bench import events_table as bench_events_table
from ..uprobes import CountingConsumer, uprobe_register, uprobe_unregister
from ..sites import call_target
from ..x86 import optimize
from ..x86.constants import __NR_uprobe
from ..x86.redzone_programs import check_transparency

KINDS = ("exceptions", "iret", "syscalls", "sysret", "emulated", "xol_steps", "consumers", "uaccess_bytes")


@dataclass
class PatchRun:
    """One probe's life on a 6.18 nop5 site: registered, hit (optimised), unregistered."""

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

    def widget(self):
        """A slider over the stages; falls back to the full text without ipywidgets."""
        try:
            import ipywidgets as w
        except ImportError:  # pragma: no cover - ipywidgets is a dependency of the course
            return "\n\n".join(self.text(i) for i in range(len(self.stages)))
        out = w.HTML()
        slider = w.IntSlider(min=0, max=len(self.stages) - 1, value=0, description="stage")

        def render(change=None):
            out.value = f"<pre>{self.text(slider.value)}</pre>"
        slider.observe(render, names="value")
        render()
        return w.VBox([w.HBox([w.Play(min=0, max=slider.max, interval=900), slider]), out])

    def __str__(self) -> str:
        return "\n\n".join(self.text(i) for i in range(len(self.stages)))


def patch_run(kernel="6.18", target: str = "uprobe_target_nop5") -> PatchRun:
    """Register a probe on the bench's nop5, hit it twice, unregister it.

    The first hit takes the int3 and, right after its consumers, 6.18 rewrites the site into a call;
    the second goes through that call and sys_uprobe, with no exception. ``run.proc.trace`` thus holds
    one hit of each path before the unregister undoes the rewrite."""
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


def address_map(proc, sites=()) -> str:
    """/proc/PID/maps of a process, with each probe site and the trampoline it calls marked."""
    lines = [proc.maps()]
    for site in sites:
        raw = proc.read(site, 5)
        target = call_target(raw, site)
        if target is not None:
            lines.append(f"site {site:#x}: call {target:#x} ({proc.mapping_at(target).name}), "
                         f"rel32 = {target - site - 5:+#x} (reach: +-2 GB from {site + 5:#x})")
        else:
            lines.append(f"site {site:#x}: {raw.hex(' ')} (not optimised)")
    return "\n".join(lines)


def redzone_reports() -> list:
    """The leaf with a live red-zone value, on the int3 path, optimised nop5, and the dev-tree nop10."""
    return [check_transparency("redzone_leaf_nop5", "6.16"),
            check_transparency("redzone_leaf_nop5", "6.18"),
            check_transparency("redzone_leaf_nop10", optimize.NOP10_DEV_TREE)]


def stack_at_sys_uprobe(kernel="6.18") -> pd.DataFrame:
    """The user stack when sys_uprobe is entered from the trampoline, for a uretprobe'd nop5 function.

    The four words the trampoline and the site's call pushed sit on top; the probed function's own
    return address - the one a uretprobe hijacks - is 4*8 bytes up (``optimize.UPROBE_SYSCALL_ARGS_SIZE``).
    RFC v2 read it there; the merged sys_uprobe moves sp past the four words first.
    """
    proc = make_process("x86_64", kernel)
    site = proc.program.resolve("uprobe_target_nop5")
    uprobe_register(proc, site, CountingConsumer(ret=True))
    captured = {}

    def spy(p, regs):
        if not captured:
            captured["sp"] = regs.sp
            captured["words"] = [p.read_u64(regs.sp + 8 * i) for i in range(5)]
        return real(p, regs)
    real = proc.set_syscall(__NR_uprobe, spy)
    proc.call("producer_loop", 2, site)
    names = ["saved rax", "saved r11", "saved rcx", "return address of the site's call (site + 5)",
             "the probed function's return address (what a uretprobe hijacks)"]
    return pd.DataFrame({"address": [hex(captured["sp"] + 8 * i) for i in range(5)],
                         "offset from sp": [f"+{8 * i}" for i in range(5)],
                         "value": [hex(v) for v in captured["words"]], "what": names})
