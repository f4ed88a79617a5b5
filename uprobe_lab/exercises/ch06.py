"""Chapter 06: this machine - the host kernel's rules, the recorded run, a calibrated profile."""
from __future__ import annotations

import functools
import platform
import warnings

from .. import LabError, events_per_hit, model
from ..bench import bench_names
from ..kernel import DEFAULT_KERNEL, row_for_release
from ..native import calibrate, example
from .core import Remembered, exercise
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


def _exceptions_judge():
    """The number of exceptions, exactly; a kernel release given instead (``"6.18"``) is named as one."""
    count = j.number()

    def judge(answer, expected):
        if isinstance(answer, (tuple, list, dict, set)):
            raise LabError(f"{j.shown(answer)}: give the number of exceptions only, e.g. 1")
        if not j.as_number(answer).is_integer():
            raise LabError(f"{j.shown(answer)} is not a count of exceptions (a kernel release?): the question asks how "
                           f"many exceptions a hit costs, a whole number")
        ok, reason = count(answer, expected)
        return ok, reason if ok else (f"{reason} Which modelled kernel's rules apply here, and what do they "
                                      f"do with a probed nop5 once it has been hit?")
    judge.tolerance = count.tolerance
    return judge


exercise(
    id="06.1", kind="predict", title="This kernel's rules",
    question="Under the rules of this machine's kernel (`platform.release()`), how many exceptions does a "
             "steady-state `uprobe-nop5` hit cost? Not on Linux? Then take the course's default kernel's rules. "
             "A whole number (exact).",
    hint="`row_for_release(platform.release())` (uprobe_lab.kernel) names the modelled version whose rules a release "
         "follows; chapter 03's events table (6.11 to 6.18) and 03b's side by side (6.16 to 7.3) give the events. Not on Linux? Then there are no uprobes here: take the "
         "course's default kernel, `DEFAULT_KERNEL`.",
    solution="""import platform
import uprobe_lab as ul
from uprobe_lab.kernel import DEFAULT_KERNEL, row_for_release
kernel = row_for_release(platform.release())[0] if platform.system() == "Linux" else DEFAULT_KERNEL
answer = ul.events_per_hit("uprobe-nop5", "x86_64", kernel).get("exceptions", 0)""",
    explanation="On 6.18 to 7.1 (and 7.2 before 7.2.6) the probed nop5 becomes a call into `[uprobes-trampoline]` "
                "after its first hit: no exception at all (the table above shows `optimized` for it when measured "
                "here). 7.3 and the 7.2.y kernels from 7.2.6 optimise only the nop10, so their nop5 costs one int3 "
                "per hit, emulated - as on 6.16 and 6.17; before 6.16 the nop5 is stepped out of line: two "
                "exceptions.",
    expected=lambda: events_per_hit("uprobe-nop5", "x86_64", host_model_kernel()).get("exceptions", 0),
    judge=_exceptions_judge(),
    why=lambda e: f"{_host_rules_said()}: {e} exception(s) per hit.",
)

exercise(
    id="06.2", kind="predict", title="What the page boundary costs",
    question="In the recorded 6.18 run (`example.load_example()`), how many times faster is `uprobe-nop5` than "
             "`uprobe-nop5-pagecross`? Answer to ±0.1. Predict first from the events: what differs per hit?",
    hint="`{r[\"bench\"]: r[\"mops\"] for r in example.load_example()[\"benches\"]}`.",
    solution="""from uprobe_lab.native import example
mops = {r["bench"]: r["mops"] for r in example.load_example()["benches"]}
answer = mops["uprobe-nop5"] / mops["uprobe-nop5-pagecross"]""",
    explanation="The page-crossing nop5 keeps its int3: an exception per hit (the nop emulated) and an `iret`. "
                "The optimised one enters through `syscall` and leaves by `sysret`, adding the trampoline's few "
                "instructions and `sys_uprobe`'s two copies of the saved words. The ratio is how much dearer the "
                "first path is than the second on the recording's machine; the verdict prints it.",
    expected=lambda: _recorded_mops("uprobe-nop5") / _recorded_mops("uprobe-nop5-pagecross"),
    judge=j.number(0.1, "x"),
    why=lambda e: f"The recording gives {e:.2f}x.",
)

PRICED_WITHIN = 0.05  # relative: a hit priced from the table's rounded prices lands well inside it


@functools.lru_cache(maxsize=1)
def recorded_profile() -> model.Profile:
    """The profile calibrated on the recorded run (its xol_step warning kept quiet: the chapter prints it)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return calibrate.calibrate(example.load_example()["benches"])


def _priced_hit(bench: str, kernel: str) -> dict:
    """The lab's side of 06.3: the recorded profile's figure for ``bench`` on ``kernel`` (``mops``, ``low``,
    ``high``) and the events of a hit, counted per price."""
    if bench not in bench_names("x86_64"):
        raise LabError(f"{j.shown(bench)} is not a bench; the benches: {', '.join(bench_names('x86_64'))}")
    counts = model.price_counts(model.events_for(bench, "x86_64", kernel))
    mops, low, high = recorded_profile().interval(bench, kernel)
    return {"mops": mops, "low": low, "high": high, **{p: float(n) for p, n in zip(model.PRICE_NAMES, counts) if n}}


def _judge_priced(answer, lab: Remembered) -> tuple[bool, str]:
    if not (isinstance(answer, (tuple, list)) and len(answer) == 3):
        raise LabError('give (bench, kernel, M/s), e.g. ("uretprobe-push", "6.11", 0.5)')
    bench, kernel, said = j.word(answer[0]), str(answer[1]).strip(), j.as_number(answer[2])
    want = lab(bench, kernel)["mops"]
    if abs(said - want) <= PRICED_WITHIN * want:
        return True, ""
    return False, (f"{said:g} M/s is too {'high' if said > want else 'low'} (more than {PRICED_WITHIN:.0%} from "
                   f"the lab's figure): count the hit's events again, price by price.")


def _priced(bench: str, kernel: str, got: dict) -> str:
    events = ", ".join(f"{p} x{n:g}" for p, n in got.items() if p not in ("mops", "low", "high"))
    return (f"The recorded run's profile prices {bench} on {kernel} at {got['mops']:.3f} M/s (80% interval "
            f"{got['low']:.3f}..{got['high']:.3f}): {events} a hit.")


exercise(
    id="06.3", kind="open", title="Price a hit by hand",
    question="Calibrate a profile on the recorded run (`profile = calibrate.calibrate(example.load_example()"
             "[\"benches\"])`); `calibrate.prices_table(profile)` gives its prices in ns per event. Pick a bench and "
             "a kernel (a modelled version or a release), count the events one hit costs (exceptions, syscalls, "
             "single steps, probe lookups and consumer runs, [return instances](../docs/glossary.md#return-instance), copies to or from user memory), "
             "price them from the table and predict the bench's rate there in M/s (1000 / ns a hit): `answer = "
             "(bench, kernel, mops)`, e.g. `(\"uretprobe-push\", \"6.11\", 0.5)`. Within 5% of the lab's figure "
             "counts as right. Then, with no checker: how much of your hit is `xol_step`, the price the table "
             "flags, and which bench would you add to pin that price down?",
    hint="`model.events_for(bench, \"x86_64\", kernel)` (uprobe_lab.model) lists a hit's events; `model.PRICES` says "
         "which events each price covers (`handler` is one probe lookup or one consumer run). The user "
         "instructions cost well under a nanosecond each.",
    solution="""from uprobe_lab import model
from uprobe_lab.native import calibrate, example
profile = calibrate.calibrate(example.load_example()["benches"])
prices = calibrate.prices_table(profile).set_index("price")["ns"]
counts = model.price_counts(model.events_for("uretprobe-ret", "x86_64", "6.10"))
ns = sum(n * prices[p] for p, n in zip(model.PRICE_NAMES, counts))
answer = ("uretprobe-ret", "6.10", 1000 / ns)""",
    explanation="`uretprobe-ret` on 6.10: three exceptions (the probe's int3, the step's #DB, the return "
                "trampoline's int3), one single step, a probe lookup and a consumer run, the return instance "
                "pushed and popped, two copies to and from the user stack: about 10 us a hit, 8 of them the "
                "single step the recording's hypervisor intercepts. A bench with two steps per hit, or the same "
                "hit on bare metal, would separate `xol_step` from the exception it rides on.",
    expected=lambda: Remembered(_priced_hit),
    judge=_judge_priced,
    why=Remembered.why("The lab priced the hit's events with the recorded run's profile.", _priced),
)
