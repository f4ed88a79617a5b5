"""Chapter 07: many CPUs hitting one probe."""
from __future__ import annotations

from typing import Any

from .. import LabError
from ..arches import make_process
from ..bench import bench_names
from ..constants import PAGE_SIZE
from ..contended import layout_note
from ..kernel import release_rules
from ..views.many_cpus import shared_writes
from .core import Remembered, exercise
from . import judges as j

RELEASES = ("6.8", "6.10", "6.12", "6.13", "6.14", "6.15", "6.18")
FEW_WRITES = 5  # exercise 07.2: the first release whose uretprobe-ret hit makes no more than this many


def _first_release_with_at_most(bench: str, most: float) -> str:
    writes = shared_writes(bench, RELEASES)
    return next(k for k in RELEASES if writes[k] <= most)


def _forgot_the_return(got: float) -> str:
    """Exercise 07.1's wrong count: the entry alone (a uprobe-nop hit's count) named as such."""
    if got == shared_writes("uprobe-nop", ["6.12"])["6.12"]:
        return ("that is what the entry's lookup writes, a uprobe-nop hit's count on 6.12; the return instance must "
                "keep the probe alive until the function returns - what does that cost on 6.12?")
    return "go through the hit's steps on 6.12 again: the lookup, the consumers, the return instance."


exercise(
    id="07.1", kind="predict", title="A uretprobe on 6.12",
    question="The chapter counted what a `uprobe-nop` hit writes that other CPUs also write. Now a `uretprobe-nop` "
             "hit (entry and return) on 6.12: how many writes per hit to shared lines (atomic, spinlock and "
             "plain-store accesses, each lock and unlock one)? A whole number (exact).",
    hint="Start from 6.12's uprobe-nop column, then add what the return instance needs to keep the probe alive "
         "until the function returns on 6.12 (the lease came one release later).",
    solution="""from uprobe_lab.views.many_cpus import shared_writes
answer = shared_writes("uretprobe-nop", ["6.12"])["6.12"]""",
    explanation="mmap_lock's read lock and unlock in the lookup (2), and the return instance's `try_get_uprobe` "
                "and its `put_uprobe` at the return (2). The consumer lists, entry and return, are walked under "
                "SRCU by then: per-CPU counters, nothing shared.",
    expected=lambda: shared_writes("uretprobe-nop", ["6.12"])["6.12"],
    judge=j.number(because=_forgot_the_return),
    why=lambda e: "The lab counts kernel/events/uprobes.c's accesses at 8617408f7a01 and cc01bd044e6a (6.12) for "
                  "both halves of the hit.",
)

def _judge_release(answer: Any, want: str, bench: str, most: float) -> tuple[bool, str]:
    """Right, or how many shared writes the named release's hit still makes (not which: that would name the
    change still to come), or that an earlier release already made no more than ``most``."""
    ok, _ = j.choice(RELEASES)(answer, want)
    if ok:
        return True, ""
    got = j.word(answer)
    still = shared_writes(bench, [got])[got]
    if still > most:
        return False, (f"On {got} a {bench} hit still makes {still:g} writes to shared lines: which of the hit's "
                       f"steps still write one then?")
    return False, f"{got} makes {most:g} or fewer, but an earlier release already did."


exercise(
    id="07.2", kind="predict", title="A stepped return probe, release by release",
    question=f"A `uretprobe-ret` hit steps the probed `ret` out of line and keeps a return instance. From which "
             f"release does such a hit make at most {FEW_WRITES} writes to lines other CPUs also write (atomic, "
             "spinlock and plain-store accesses, each lock and unlock one)? One of "
             + ", ".join(f"`\"{k}\"`" for k in RELEASES) + ".",
    hint="List the hit's shared writes on 6.12 (section 2: the lookup, the step out of line, the return instance) "
         "and strike each one off in the release that removed it.",
    solution=f"""from uprobe_lab.views.many_cpus import shared_writes
releases = ("6.8", "6.10", "6.12", "6.13", "6.14", "6.15", "6.18")
writes = shared_writes("uretprobe-ret", releases)
answer = next(k for k in releases if writes[k] <= {FEW_WRITES})""",
    explanation="On 6.12 the hit makes 13: mmap_lock (2), the step's reference on the probe (2), the slot's bitmap "
                "bit and slot_count (4), the copy into the slot (1), sighand->siglock (2), the return instance's "
                "reference (2). 6.13's lease (dd1a7567784e) and 7a166094bd2b take the return instance's reference "
                "and slot_count: 9; 6.14's speculative lookup (e0925f2dc4de) mmap_lock: 7; 6.15 (83179cd67846) "
                "the siglock: 5. What is left is the step's own - the bitmap bit, the reference held over the "
                "step, the copy - and 6.18 keeps it: a stepped probe still shares lines however many CPUs hit it.",
    expected=lambda: _first_release_with_at_most("uretprobe-ret", FEW_WRITES),
    judge=lambda answer, want: _judge_release(answer, want, "uretprobe-ret", FEW_WRITES),
    why=lambda e: "The lab asked each release's rules (uprobe_lab.kernel.RULES) what one hit touches.",
)


def _free_slots(arch: str) -> int:
    """The XOL slots a thread can take: one page of them, less slot 0, the return trampoline's."""
    return PAGE_SIZE // make_process(arch).arch_ops.UPROBE_XOL_SLOT_BYTES - 1


def _can_sleep(threads: int) -> bool:
    """Whether some interleaving of ``threads`` x86-64 threads has one find every slot taken: all of them
    mid-step at once, one more than the free slots. A seeded run (xol_slots) need not meet that interleaving."""
    return threads > _free_slots("x86_64")


exercise(
    id="07.3", kind="predict", title="Enough slots?",
    question="Threads of one process step `ret` out of line on x86-64 (`uprobe-ret`), each switched out on every "
             "return to user mode. Is there any interleaving in which one of 31 such threads finds every XOL slot "
             "taken (and has to sleep for one)? Any with 32 threads? And how many threads can step out of line at "
             "once on arm64 (4 KB pages, `UPROBE_XOL_SLOT_BYTES` = 4)? Answer `{\"31\": True or False, \"32\": "
             "True or False, \"arm64\": a whole number}`, the count exact.",
    hint="One page of slots, 128 bytes each on x86-64; slot 0 holds the return trampoline. A thread holds one "
         "slot from its trap to its single-step trap.",
    solution="""import uprobe_lab as ul
def free_slots(arch):  # one page of slots, less slot 0 (the return trampoline)
    return 4096 // ul.new_process(arch).arch_ops.UPROBE_XOL_SLOT_BYTES - 1
answer = {"31": 31 > free_slots("x86_64"), "32": 32 > free_slots("x86_64"), "arm64": free_slots("arm64")}""",
    explanation="4096 / 128 = 32 slots, less the trampoline's: 31. Thirty-one threads can all be mid-step and "
                "still each have a slot; with 32, the last to trap while the other 31 are mid-step sleeps on the "
                "area's wait queue until a step ends. That interleaving is possible, not certain: "
                "`xol_slots(32)` (seed 3) does not meet it, as its threads seldom all stand mid-step at once; "
                "with 64 some do. arm64's 4-byte slots give 4096 / 4 - 1 = 1023.",
    expected=lambda: {"31": _can_sleep(31), "32": _can_sleep(32), "arm64": _free_slots("arm64")},
    judge=j.per_item(str, lambda got, want: (j.truth(got) == want if isinstance(want, bool)
                                             else j.number()(got, want)[0], ""),
                     lambda k, v: "count the slots one page holds" if k == "arm64" else
                     "compare the threads mid-step with the slots left after the trampoline's"),
    why=lambda e: "The lab read each arch's slot size (arch_ops.UPROBE_XOL_SLOT_BYTES) and compared the threads "
                  "with the free slots.",
)


def _bill(bench: str, release: str) -> dict[str, float]:
    if bench not in bench_names("x86_64"):
        raise LabError(f"{j.shown(bench)} is not a bench; the benches: {', '.join(bench_names('x86_64'))}")
    release_rules(release)  # a clear error for a release the lab cannot read
    if layout_note(release):  # counted as 6.8's: no answer of its own to check a prediction against
        raise LabError(f"{j.shown(release)} is older than 6.8: the lab lays out the structures a hit writes "
                       "(uprobe_lab.contended) from 6.8 on; pick a release from 6.8 on, e.g. \"6.8\" or \"6.10\"")
    return {"shared writes": shared_writes(bench, [release])[release]}


def _judge_open(answer: Any, lab: Remembered) -> tuple[bool, str]:
    if not (isinstance(answer, (tuple, list)) and len(answer) == 3):
        raise LabError('give (bench, release, writes per hit), e.g. ("uprobe-ret", "6.13", 6)')
    bench, release, said = j.word(answer[0]), str(answer[1]).strip(), answer[2]
    want = lab(bench, release)["shared writes"]
    ok, reason = j.number()(said, want)
    return ok, reason if ok else (f"{reason} Go through the hit's steps on {release} once more: the lookup, the "
                                  f"consumers, the step out of line, the return instance.")


def _counted(bench: str, release: str, bill: dict) -> str:
    return f"The lab counted {bill['shared writes']:g} shared writes per {bench} hit under {release}'s rules (uprobe_lab.contended)."


exercise(
    id="07.4", kind="open", title="Your bench, your release",
    question="Pick a bench and a kernel release (any from 6.8 on, e.g. your distribution's), predict how many writes "
             "per hit it makes to lines other CPUs share (atomic, spinlock and plain-store accesses, each lock and "
             "unlock one; exact), then check: `answer = (bench, release, writes)`, e.g. `(\"uprobe-push\", \"6.10\", 10)`.",
    hint="Add up the steps of the hit: the lookup, the consumers (before 6.12 the bench's consumer counts every "
         "hit in a shared nhit), the step out of line (the copy into the slot, the slot bitmap, the probe's "
         "reference, siglock), the return instance.",
    solution="""from uprobe_lab.views.many_cpus import shared_writes
answer = ("uprobe-ret", "6.13", shared_writes("uprobe-ret", ["6.13"])["6.13"])""",
    explanation="uprobe-ret on 6.13: mmap_lock (2), the step's reference on the probe (2), the slot's bitmap bit "
                "(2), the instruction copied into the slot (1), sighand->siglock (2): 9. 6.14 drops mmap_lock, "
                "6.15 the siglock.",
    expected=lambda: Remembered(_bill),
    judge=_judge_open,
    why=Remembered.why("The lab counted the accesses of that release's rules (uprobe_lab.contended).", _counted),
)
