"""Chapter 06: this machine - the host kernel's rules, the recorded run, a calibrated profile."""
from __future__ import annotations

import platform

from .. import LabError, events_per_hit, model
from ..kernel import DEFAULT_KERNEL, row_for_release
from ..native import calibrate, example
from .core import exercise
from . import judges as j


def host_model_kernel() -> str:
    """The modelled version whose rules this machine's kernel follows (the oldest, 6.10, for an older release);
    on a system that is not Linux, the course's default kernel: uprobes are a Linux feature."""
    if platform.system() != "Linux":
        return DEFAULT_KERNEL
    return row_for_release(platform.release())[0]


def _host_rules_said() -> str:
    if platform.system() != "Linux":
        return (f"{platform.system()} {platform.release()} has no uprobes (a Linux kernel feature): the answer is "
                f"for the course's default kernel, {DEFAULT_KERNEL}")
    return f"This host runs {platform.release()} (rules of {host_model_kernel()})"


def _recorded_mops(bench: str) -> float:
    return next(r["mops"] for r in example.load_example()["benches"] if r["bench"] == bench)


def implausible_price() -> str:
    """The calibrated price the recorded run's profile warns about (outside its plausible range)."""
    table = calibrate.prices_table(calibrate.calibrate(example.load_example()["benches"]))
    warned = table[table["warning"] == "outside plausible range"]["price"]
    if len(warned) != 1:
        raise LabError(f"the recorded run should leave exactly one price implausible, not {list(warned)}")
    return warned.iloc[0]


exercise(
    id="06.1", kind="predict", title="This kernel's rules",
    question="Which modelled kernel's rules does this machine's kernel follow (`platform.release()`), and how "
             "many exceptions does a steady-state `uprobe-nop5` hit cost under them? Answer the number.",
    hint="`row_for_release(platform.release())` (uprobe_lab.kernel) names the modelled version whose rules a release "
         "follows; chapter 03b's side-by-side table gives the events. Not on Linux? Then there are no uprobes here: take the "
         "course's default kernel, `DEFAULT_KERNEL`.",
    solution="""import platform
import uprobe_lab as ul
from uprobe_lab.kernel import DEFAULT_KERNEL, row_for_release
kernel = row_for_release(platform.release())[0] if platform.system() == "Linux" else DEFAULT_KERNEL
answer = ul.events_per_hit("uprobe-nop5", "x86_64", kernel).get("exceptions", 0)""",
    explanation="On 6.18 to 7.1 the probed nop5 becomes a call into `[uprobes-trampoline]` after its first hit: "
                "no exception at all (the table above shows `optimized` for it when measured here). 7.2 optimises "
                "only the nop10, so its nop5 costs one int3 per hit, emulated - as on 6.16 and 6.17; before 6.16 "
                "the nop5 is stepped out of line: two exceptions.",
    expected=lambda: events_per_hit("uprobe-nop5", "x86_64", host_model_kernel()).get("exceptions", 0),
    judge=j.number(),
    why=lambda e: f"{_host_rules_said()}: {e} exception(s) per hit.",
)

exercise(
    id="06.2", kind="predict", title="What the page boundary costs",
    question="In the recorded 6.18 run (`example.load_example()`), how many times faster is `uprobe-nop5` than "
             "`uprobe-nop5-pagecross`? One decimal. Predict first from the events: what differs per hit?",
    hint="`{r[\"bench\"]: r[\"mops\"] for r in example.load_example()[\"benches\"]}`.",
    solution="""from uprobe_lab.native import example
mops = {r["bench"]: r["mops"] for r in example.load_example()["benches"]}
answer = round(mops["uprobe-nop5"] / mops["uprobe-nop5-pagecross"], 1)""",
    explanation="The page-crossing nop5 keeps its int3: an exception per hit (the nop emulated) and an `iret`. "
                "The optimised one enters through `syscall` and leaves by `sysret`, adding the trampoline's few "
                "instructions and `sys_uprobe`'s two copies of the saved words. The ratio is how much dearer the "
                "first path is than the second on the recording's machine; the verdict prints it.",
    expected=lambda: round(_recorded_mops("uprobe-nop5") / _recorded_mops("uprobe-nop5-pagecross"), 1),
    judge=j.number(0.1, "x"),
    why=lambda e: f"The recording gives {e}x.",
)

exercise(
    id="06.3", kind="open", title="Which price is implausible?",
    question="Calibrate a profile on the recorded run (`calibrate.calibrate(example.load_example()[\"benches\"])`) "
             "and look at `calibrate.prices_table(...)`. Which price lies outside its `plausible_ns` range for a CPU "
             "running natively? Then: which bench would you add to pin it down, and why? (The second part has no "
             "checker: discuss it.)",
    hint="Look at the `warning` column; a virtual machine makes some traps far dearer.",
    solution="""from uprobe_lab.native import calibrate, example
table = calibrate.prices_table(calibrate.calibrate(example.load_example()["benches"]))
answer = table[table["warning"] == "outside plausible range"]["price"].iloc[0]""",
    explanation="On the recording's VM, a single-step out of line (`uprobe-ret`) costs several microseconds, "
                "far above what one event costs natively: the trap flag's #DB is intercepted by the hypervisor. "
                "A bench with two "
                "out-of-line steps per hit, or one without any exception, would separate it from the others.",
    expected=implausible_price,
    judge=j.choice(tuple(model.PRICE_NAMES)),
    why=lambda e: f"The lab's calibration moves {e} furthest.",
)
