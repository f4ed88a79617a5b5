"""Chapter 04: arm64 BRK uprobes and the unmerged STP simulation."""
from __future__ import annotations

from .. import LabError, analyze, events_per_hit
from ..views.arm64 import misaligned_stp
from .core import exercise
from . import judges as j

ACTIONS = ("simulate", "xol", "reject")
UPSTREAM_WORDS = {"d503201f": "nop", "a9bf7bfd": "stp x29, x30, [sp, #-16]!", "910003fd": "mov x29, sp",
                  "d65f03c0": "ret"}
STP_WORDS = {"a9bf7bfd": "stp x29, x30, [sp, #-16]!", "a9be7bfd": "stp x29, x30, [sp, #-32]!",
             "a9bf53f3": "stp x19, x20, [sp, #-16]!"}


def _word(text) -> str:
    return j.word(text).replace(" ", "").removeprefix("0x")


def _actions(words, stp: str) -> dict:
    return {w: analyze(w, arch="arm64", stp=stp)["action"] for w in words}


def _reason(stp: str):
    """What to reconsider for a wrong word, without the verdict: the instruction, and where the rule is."""
    what = "the seed's decoder (pre-index, 64-bit, x29/x30, base sp)" if stp == "simulate" else \
        "arch/arm64/kernel/probes/decode-insn.c: what it simulates, steps and rejects"
    return lambda w, want: f"{analyze(w, arch='arm64', stp=stp)['mnemonic']} - look again at {what}"


exercise(
    id="04.1", kind="predict", title="Simulate or step, upstream",
    question="On an upstream arm64 kernel, what happens to a probe on each word? `\"simulate\"` (done in the BRK "
             "handler), `\"xol\"` (single-stepped out of line) or `\"reject\"`. Answer "
             "`{\"d503201f\": ..., \"a9bf7bfd\": ..., \"910003fd\": ..., \"d65f03c0\": ...}` "
             "(nop, stp x29, x30, [sp, #-16]!, mov x29, sp, ret).",
    hint="arm64 simulates what it must or can cheaply: nop, branches (ret included), adr/adrp. "
         "Everything else that is safe to run from another address is stepped.",
    solution="""import uprobe_lab as ul
answer = {w: ul.analyze(w, arch="arm64")["action"] for w in ("d503201f", "a9bf7bfd", "910003fd", "d65f03c0")}""",
    explanation="The function-entry `stp x29, x30` is stepped upstream: a BRK and a step exception per hit - "
                "what the seed wanted to remove.",
    expected=lambda: _actions(UPSTREAM_WORDS, "xol"),
    judge=j.per_item(_word, j.choice(ACTIONS), _reason("xol")),
    why=lambda e: "The lab's arm64 decoder follows arch/arm64/kernel/probes/decode-insn.c.",
)

exercise(
    id="04.2", kind="predict", title="What the STP simulation buys",
    question="Steady state of `uprobe-push` on arm64 (its first instruction is `stp x29, x30, [sp, #-16]!`). How "
             "many exceptions per hit upstream (`stp=\"xol\"`) and with the seed's simulation "
             "(`stp=\"simulate\"`)? Answer whole numbers (exact): `{\"xol\": ..., \"simulate\": ...}`.",
    hint="Stepping out of line needs a second exception once the step is done.",
    solution="""import uprobe_lab as ul
answer = {mode: ul.events_per_hit("uprobe-push", "arm64", stp=mode)["exceptions"] for mode in ("xol", "simulate")}""",
    explanation="Simulating the store in the BRK handler drops the step exception: 2 → 1. The seed measured "
                "+30% on uprobe-push (chapter 05 and the table above).",
    expected=lambda: {m: events_per_hit("uprobe-push", "arm64", stp=m).get("exceptions", 0) for m in ("xol", "simulate")},
    judge=j.per_item(str, j.number(), lambda m, n: "count the exceptions a hit takes in that mode, the BRK's and "
                                                   "any after it"),
    why=lambda e: f"The emulator counts {e['xol']} upstream and {e['simulate']} simulated.",
)

exercise(
    id="04.3", kind="predict", title="Exactly which STP?",
    question="With the seed's simulation on (`stp=\"simulate\"`), which of these does the kernel simulate? Answer "
             "`{\"a9bf7bfd\": ..., \"a9be7bfd\": ..., \"a9bf53f3\": ...}` (stp x29, x30, [sp, #-16]!; the same "
             "with #-32; stp x19, x20, [sp, #-16]!).",
    hint="The seed matches one exact form: pre-index, 64-bit, rt=x29, rt2=x30, base sp - any offset?",
    solution="""import uprobe_lab as ul
answer = {w: ul.analyze(w, arch="arm64", stp="simulate")["action"] for w in ("a9bf7bfd", "a9be7bfd", "a9bf53f3")}""",
    explanation="Any pre-index offset of the fp/lr pair is simulated; another register pair keeps the upstream "
                "out-of-line step.",
    expected=lambda: _actions(STP_WORDS, "simulate"),
    judge=j.per_item(_word, j.choice(ACTIONS), _reason("simulate")),
    why=lambda e: "The lab's model of the seed's decoder gave " + ", ".join(f"{w}: {a}" for w, a in e.items()) + ".",
)


def _misaligned() -> tuple[str, bool]:
    r = misaligned_stp(offset=-8)
    return r["signal"].lower(), r["sp_before"] != r["sp_after"]


def _signal_and_sp(answer, expected) -> tuple[bool, str]:
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        raise LabError("give (signal name, sp moved?), e.g. ('SIGBUS', False)")
    signal = j.signal_name(answer[0])
    wrong = []
    if signal != expected[0]:
        wrong.append(f"the signal is not {signal.upper()}")
    if j.truth(answer[1]) != expected[1]:
        wrong.append("sp " + ("did move" if expected[1] else "did not move"))
    return (not wrong), "; ".join(wrong).capitalize() + ("." if wrong else "")


exercise(
    id="04.4", kind="break it", title="A misaligned stack",
    question="arm64 requires sp to stay 16-byte aligned. Run the seed's simulation on "
             "`stp x29, x30, [sp, #-8]!` (`misaligned_stp(offset=-8)`). Which signal does the program get, and "
             "has sp already moved when it arrives? Answer `(\"SIG...\", True or False)`.",
    hint="Read the seed's `simulate_stp_fp_lr_sp_64b`: which sp does it check for alignment, what does it do "
         "when the check fails, and what still runs at its `done:` label?",
    solution="""from uprobe_lab.views.arm64 import misaligned_stp
r = misaligned_stp(offset=-8)
answer = (r["signal"], r["sp_before"] != r["sp_after"])""",
    explanation="The seed checks the *new* sp (base plus offset): misaligned, with SCTLR_EL1.SA0 set, it sends "
                "SIGSEGV and jumps to `done:`, which still writes the new sp and steps pc past the instruction, "
                "though nothing was stored. Hardware does otherwise: the Arm ARM's STP checks the alignment of the "
                "*base* sp, before the offset is added, so from an aligned sp this `stp` stores, completes and "
                "leaves sp misaligned; the fault (an SP alignment fault, SIGBUS on Linux) comes with the next "
                "access through sp.",
    expected=_misaligned,
    judge=_signal_and_sp,
    why=lambda e: f"The lab: {e[0].upper()}, sp {'moved' if e[1] else 'unchanged'}.",
)


def _own_word(answer, lab) -> tuple[bool, str]:
    if not isinstance(answer, (tuple, list)) or len(answer) != 3:
        raise LabError("give (word, stp mode, action), e.g. ('a9bf7bfd', 'simulate', 'simulate')")
    w, mode, said = _word(answer[0]), j.spelling(answer[1]), j.spelling(answer[2])
    if mode not in ("xol", "simulate") or said not in ACTIONS:
        raise LabError(f"mode is 'xol' or 'simulate'; action one of {', '.join(ACTIONS)}")
    verdict = lab(w, mode)
    text = f"{verdict['mnemonic']} {verdict['op_str']}".strip()
    if verdict["action"] == said:
        return True, f"{text}: {said}, as you said."
    return False, f"{text}: not {said} but {verdict['action']} - {verdict['reason']}."


exercise(
    id="04.5", kind="open", title="Your own word",
    question="Take an instruction word from an arm64 listing (`objdump -d` of any arm64 binary, or the decode "
             "widget above), predict the action in one mode, then check: "
             "`answer = (\"f9400be0\", \"xol\", \"xol\")` (word, mode, action). Can you find one the kernel rejects?",
    hint="Try `d4000001` (svc #0), `d503233f` (paciasp), `58000040` (ldr x0, literal), `b9400000` (ldr w0, [x0]).",
    solution="""answer = ("d503233f", "xol", "xol")   # paciasp: safe to run from the XOL slot""",
    expected=lambda: (lambda w, mode: analyze(w, arch="arm64", stp=mode)),
    judge=_own_word,
    why=lambda lab: "The lab decoded your word as the arm64 kernel would (with the seed's STP rule if asked).",
)
