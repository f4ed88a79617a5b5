"""Chapter 04: arm64 BRK uprobes and the unmerged STP simulation."""
from __future__ import annotations

from .. import LabError, analyze
from ..arm64.analyze import PROBE_VADDR, parse_word, pc_relative
from ..views.arm64 import STACK_BOTTOM, stp_once
from .core import Remembered, exercise
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

PIN_SPS = (0x7FFFFFFDD010, 0x7FFFFFFDD000)  # the new sp on the old sp's page, and on the page below


def _pages_pinned() -> dict[str, int]:
    return {f"{sp:#x}": stp_once(-16, sp=sp)["pages_pinned"] for sp in PIN_SPS}


exercise(
    id="04.2", kind="predict", title="Two pages for one store",
    question="The seed's v2 pins user stack pages (`get_user_pages_fast`), maps them into the kernel "
             "(`kmap_local_page` for one page, `vmap` for more) and runs a real `stp` there: `uprobe-push` pinned one "
             "page per hit above. Probe `stp x29, x30, [sp, #-16]!` once from sp = 0x7ffffffdd010 and once from "
             "sp = 0x7ffffffdd000 (`stp_once(sp=...)` in uprobe_lab.views.arm64; pages are 4 KB). How many pages "
             "does each hit pin? Answer whole numbers (exact): `{\"0x7ffffffdd010\": ..., \"0x7ffffffdd000\": ...}`.",
    hint="The pair goes to the new sp, sp - 16. Which page holds it, which page holds the old sp, and does the seed "
         "count the pages the store touches or the pages between the two?",
    solution="""from uprobe_lab.views.arm64 import stp_once
answer = {hex(sp): stp_once(-16, sp=sp)["pages_pinned"] for sp in (0x7ffffffdd010, 0x7ffffffdd000)}""",
    explanation="From 0x7ffffffdd010 the pair goes to 0x7ffffffdd000..0f, on the old sp's own page: one page, "
                "mapped with `kmap_local_page`. From the page-aligned 0x7ffffffdd000 it goes to 0x7ffffffdcff0, on "
                "the page below, and the seed pins both pages (`nr_pages` counts from the new sp's page to the old "
                "sp's) and maps them with `vmap` - for a store that never touches the old sp's page.",
    expected=_pages_pinned,
    judge=j.per_item(lambda k: f"{int(j.as_number(k)):#x}", j.number(),
                     lambda sp, n: "which page does the pair land on, and which page holds the old sp?"),
    why=lambda e: "The lab's model of the seed pinned " + ", ".join(f"{n} from sp {sp}" for sp, n in e.items()) + ".",
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


GUARD_OUTCOMES = ("stored", "sigsegv")


def _guard_page() -> dict[str, str]:
    """What each of the seed's stores does when the stp's pair lands in a PROT_NONE guard page below the stack."""
    runs = {store: stp_once(-16, store=store, sp=STACK_BOTTOM, guard="---p") for store in ("pin", "uaccess")}
    return {store: "stored" if r["stored"] else j.signal_name(r["signal"]) for store, r in runs.items()}


def _outcome(text) -> str:
    return "stored" if j.word(text) in ("stored", "stores", "store") else j.signal_name(text)


GUARD_CLUES = {"pin": "whose permissions does a FOLL_FORCE write obey (mm/gup.c, check_vma_flags)?",
               "uaccess": "copy_to_user stores with the task's own permissions (STTR): what are the guard page's?"}

exercise(
    id="04.4", kind="break it", title="A guard page below the stack",
    question="Put sp at the stack's lowest address, with a private PROT_NONE guard page mapped right below it: "
             "`stp_once(sp=STACK_BOTTOM, guard=\"---p\", store=...)` (uprobe_lab.views.arm64). Unprobed, "
             "`stp x29, x30, [sp, #-16]!` faults there (SIGSEGV). Probed, with the seed's simulation on, what does "
             "each store do: v2 (`store=\"pin\"`, the seed: `get_user_pages_fast` with FOLL_WRITE | FOLL_FORCE, then "
             "a real `stp` through a kernel mapping) and v1 (`store=\"uaccess\"`: one `copy_to_user`)? Answer "
             "`\"stored\"` or `\"SIGSEGV\"` for each: `{\"pin\": ..., \"uaccess\": ...}`.",
    hint="FOLL_FORCE is what a debugger's pokes use: read mm/gup.c's `check_vma_flags` for a write into a vma without "
         "VM_WRITE. `copy_to_user` has no such licence.",
    solution="""from uprobe_lab.views.arm64 import STACK_BOTTOM, stp_once
answer = {}
for store in ("pin", "uaccess"):
    r = stp_once(-16, store=store, sp=STACK_BOTTOM, guard="---p")
    answer[store] = "stored" if r["stored"] else r["signal"]""",
    explanation="v2 pins with FOLL_WRITE | FOLL_FORCE, and `check_vma_flags` lets a forced write into a private "
                "(copy-on-write) mapping without VM_WRITE, as it does for a debugger's poke: the pair lands in the "
                "guard page with no signal, and sp moves into the guard page and pc past the `stp`, where the "
                "unprobed `stp` faults. v1's `copy_to_user` stores with the task's own permissions and faults as "
                "the `stp` itself would: SIGSEGV, and v1 returns before it moves sp or pc, so they stay at the "
                "`stp`.",
    expected=_guard_page,
    judge=j.per_item(j.word, j.choice(GUARD_OUTCOMES, _outcome), lambda store, want: GUARD_CLUES[store]),
    why=lambda e: "The lab's model of the seed: " + ", ".join(
        f"{v} {'stored the pair' if e[s] == 'stored' else 'got ' + e[s].upper()}" for s, v in (("pin", "v2"), ("uaccess", "v1"))) + ".",
)


def _insn_text(word: str, verdict: dict) -> str:
    """The word's text as the verdict's reason spells it; a pc-relative one with the address the lab puts it at."""
    text = f"{verdict['mnemonic']} {verdict['op_str']}".strip()
    return text + (f" (at {PROBE_VADDR:#x})" if pc_relative(parse_word(word)) else "")


# 04.5's modes: "upstream" (the seed's STP rule off) and "seed" (on), as analyze's stp= "xol" and "simulate",
# which are taken too
MODES = {"upstream": "xol", "seed": "simulate", "xol": "xol", "simulate": "simulate"}


def _own_word(answer, lab) -> tuple[bool, str]:
    if not isinstance(answer, (tuple, list)) or len(answer) != 3:
        raise LabError("give (word, mode, action), e.g. ('a9bf7bfd', 'seed', action)")
    w, said = _word(answer[0]), j.spelling(answer[2])
    mode = MODES.get(j.spelling(answer[1]))
    if mode is None or said not in ACTIONS:
        raise LabError(f"mode is 'upstream' (the seed's STP rule off) or 'seed' (on); action one of "
                       f"{', '.join(ACTIONS)}")
    verdict = lab(w, mode)
    text = _insn_text(w, verdict)
    if verdict["action"] == said:
        return True, f"{text}: {said}, as you said."
    # the verdict stays back until the third wrong try (the exercise's why): where to look instead
    return False, (f"{text}: not {said} - look again at which rule of decode-insn.c takes it: simulated in the BRK "
                   "handler, stepped out of line, or refused (what traps by itself, or reads relative to its pc)"
                   + (", with the seed's STP rule first" if mode == "simulate" else "") + ".")


def _decoded(word, mode, verdict) -> str:
    """The lab's verdict on the learner's own word: shown with a right answer or the third wrong try."""
    return (f"The lab decoded {_insn_text(word, verdict)} as the arm64 kernel would"
            + (" with the seed's STP rule" if mode == "simulate" else "") + f": {verdict['action']} - {verdict['reason']}.")


exercise(
    id="04.5", kind="open", title="Your own word",
    question="Take an instruction word from an arm64 listing (`objdump -d` of any arm64 binary, or the decode "
             "widget above), predict the action in one mode, then check: "
             "`answer = (\"f9400be0\", mode, action)`. The mode is `\"upstream\"` (the kernel as merged: the "
             "seed's STP rule off) or `\"seed\"` (the seed's STP rule on); the action is `\"simulate\"`, "
             "`\"xol\"` or `\"reject\"`. Can you find one the kernel rejects?",
    hint="Try `d4000001` (svc #0), `d503233f` (paciasp), `58000040` (ldr x0, literal), `b9400000` (ldr w0, [x0]).",
    solution="""answer = ("d503233f", "upstream", "xol")   # paciasp: safe to run from the XOL slot""",
    expected=lambda: Remembered(lambda w, mode: analyze(w, arch="arm64", stp=mode)),
    judge=_own_word,
    why=Remembered.why("The lab decodes your word as the arm64 kernel would (with the seed's STP rule if asked).",
                       _decoded),
)
