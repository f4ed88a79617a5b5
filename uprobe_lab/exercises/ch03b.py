"""Chapter 03b: the nop10 optimisation (7.3) - which nop it takes, a uretprobe on it, USDT sites per kernel."""
from __future__ import annotations

from ..bench import bench_names
from ..own_program import hit_verdict
from ..arches import make_process
from ..constants import PAGE_SIZE
from .core import exercise
from . import judges as j
from .ch02 import open_bench_task

PROBE_ACTIONS = ("optimise", "emulate", "xol", "reject")
URETPROBE_BENCHES = ("uretprobe-nop5", "uretprobe-nop10")
KINDS = ("exceptions", "syscalls")


def _page_crossing_site() -> tuple[int, bytes]:
    """Where the bench program puts its page-crossing nop10, and its bytes."""
    proc = make_process("x86_64", "7.3")
    site = proc.program.resolve("uprobe_target_nop10_pagecross")
    return site, proc.read(site, 10)


def _page_crossing_nop10() -> str:
    """What 7.3 does with a probe on the bench's page-crossing nop10."""
    site, raw = _page_crossing_site()
    return hit_verdict(raw, site, "7.3")["probe"]


def _not_that_action(action: str) -> str:
    """Why 7.3 does not do ``action`` with the page-crossing nop10: the check that decides, not the verdict."""
    site, _ = _page_crossing_site()
    left = PAGE_SIZE - site % PAGE_SIZE
    generic = ("7.3 {} an instruction only once it is past the generic instruction checks, which it skips only "
               "for a nop10 it can optimise; what do they make of byte 1, 0x2e (is_prefix_bad)?")
    return {"optimise": f"can_optimize() wants all ten bytes on one page, and only {left} of them are on the "
                        "site's page.",
            "emulate": generic.format("emulates"),
            "xol": generic.format("steps"),
            "reject": "7.3 takes a probe on these bytes; which path does a hit take?"}[action]


exercise(
    id="03b.1", kind="predict", title="A nop10 across a page boundary",
    question="The bench's `uprobe-nop10-pagecross` target puts the nop10 `66 2e 0f 1f 84 00 00 00 00 00` so that "
             "its ten bytes cross a page boundary. What does 7.3 do with a probe there? Answer one of "
             "`\"optimise\"` (a syscall per hit after the first), `\"emulate\"` (an int3 per hit), `\"xol\"` "
             "(int3 and a single step) or `\"reject\"` (refused at attach).",
    hint="Two checks meet here: the one that lets 7.3 optimise the nop10, and the generic instruction checks that "
         "7.3 skips only when the first one says yes. What do the generic checks think of byte 1?",
    solution="""from uprobe_lab.arches import make_process
from uprobe_lab.own_program import hit_verdict
proc = make_process("x86_64", "7.3")
site = proc.program.resolve("uprobe_target_nop10_pagecross")
print(hex(site), proc.read(site, 10).hex(" "))        # three bytes before a page ends
answer = hit_verdict(proc.read(site, 10), site, "7.3")["probe"]""",
    explanation="`can_optimize` says no (the bytes cross a page), so 7.3 runs the generic checks, and "
                "`is_prefix_bad` refuses the 0x2e (CS) prefix: -ENOTSUPP at attach. Debian's 7.3.4 and "
                "7.2.13 kernels do the same; libbpf therefore keeps such a USDT probe on the 1-byte nop before it.",
    expected=_page_crossing_nop10,
    judge=j.choice(PROBE_ACTIONS, because=_not_that_action),
    why=lambda e: f"The lab's decoder for 7.3 answers {e} for these bytes at that address.",
)


def _uretprobe_bills() -> dict[str, dict[str, float]]:
    return {b: j.bill(b, "7.3", KINDS) for b in URETPROBE_BENCHES}


# why a count of 03b.2 is wrong: where that kind arises on the entry and the return, not the count
KIND_CLUES = {"exceptions": "does 7.3 trap at the entry on that nop, and does the return trap?",
              "syscalls": "which halves of the call enter the kernel by syscall on 7.3: the entry on that nop, "
                          "the return, both?"}
_BILLS_FORM = j.per_item(j.word, j.per_item(j.word, j.number()))  # says what an answer of the wrong shape lacks


def _bills_judge(answer, expected) -> tuple[bool, str]:
    """03b.2's verdict: each wrong count named by its bench and kind, with that kind's clue."""
    ok, _ = _BILLS_FORM(answer, expected)
    if ok:
        return True, ""
    got = {j.word(b): {j.word(k): v for k, v in bill.items()} for b, bill in answer.items()}
    wrong = [f"{b} {k}: {KIND_CLUES[k]}" for b, bill in expected.items() for k, want in bill.items()
             if j.as_number(got[b][k]) != want]
    return False, f"{len(wrong)} of {sum(map(len, expected.values()))} wrong - " + "; ".join(wrong)


_bills_judge.tolerance = _BILLS_FORM.tolerance

exercise(
    id="03b.2", kind="predict", title="A uretprobe on each nop, on 7.3",
    question="`uretprobe-nop5` and `uretprobe-nop10` put a uretprobe on a function whose first instruction is "
             "a nop5 or the nop10. In 7.3's steady state, how many exceptions and syscalls does one call cost? "
             "Answer whole numbers (exact): `{\"uretprobe-nop5\": {\"exceptions\": ..., \"syscalls\": ...}, "
             "\"uretprobe-nop10\": {...}}`.",
    hint="Add the entry (what does 7.3 do with a probe on that nop?) and the return (through which trampoline, "
         "entering the kernel how?).",
    solution="""import uprobe_lab as ul
answer = {b: {k: ul.events_per_hit(b, "x86_64", "7.3").get(k, 0) for k in ("exceptions", "syscalls")}
          for b in ("uretprobe-nop5", "uretprobe-nop10")}""",
    explanation="The nop5 entry is an int3, emulated (7.3 no longer optimises it); the nop10 entry is the "
                "optimised `call` and `sys_uprobe`. Both return through the uretprobe trampoline's "
                "`sys_uretprobe`: one syscall more each.",
    expected=_uretprobe_bills,
    judge=_bills_judge,
    why=lambda e: "The emulator counts " + "; ".join(
        f"{b}: {v['exceptions']:g} exception(s), {v['syscalls']:g} syscall(s)" for b, v in e.items()) + ".",
)

# every USDT site shape and every nop10 probe, the page-crossing one of 03b.1 too
USDT_AND_NOP10_BENCHES = tuple(b for b in bench_names("x86_64") if b.startswith("usdt-") or "nop10" in b)

exercise(
    id="03b.3", kind="open", title="A USDT site on the kernel of your choice",
    question="Pick a USDT or nop10 bench (`usdt-nop5`, `usdt-nop10-pagecross`, `uretprobe-nop10`, ...) and a "
             "kernel (any the lab models, 6.10 to 7.3, or a release such as 7.2.6: the lab's row for it answers); predict its exceptions and syscalls per hit before you "
             "look it up, then check: "
             "`answer = (\"usdt-nop10\", \"6.18\", {\"exceptions\": ..., \"syscalls\": ...})`. If you "
             "predict that the kernel refuses the probe, answer `\"reject\"` in place of the counts: "
             "`(bench, kernel, \"reject\")`.",
    hint="A USDT site is probed where that kernel's own libbpf probes it: on the long nop only when the kernel "
         "optimises it, else on the 1-byte nop before it.",
    solution="""import uprobe_lab as ul
bill = ul.events_per_hit("usdt-nop10", "x86_64", "6.18")
answer = ("usdt-nop10", "6.18", {k: bill.get(k, 0) for k in ("exceptions", "syscalls")})""",
    explanation="6.18 does not optimise the nop10 (it would refuse a probe on it), so its libbpf probes the "
                "1-byte nop: an int3, emulated, every hit.",
    **open_bench_task(KINDS, USDT_AND_NOP10_BENCHES, "a USDT or nop10 bench"),
)
