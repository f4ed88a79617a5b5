"""Chapter 03: the nop5 optimisation (6.18) - the return path, the patch order, the page boundary, the red zone."""
from __future__ import annotations

from .. import LabError
from ..bench import bench_names
from ..own_program import hit_verdict
from ..sites import CALL_INSN_OPCODE, CALL_INSN_SIZE, call_target
from ..views.nop5 import patch_run
from ..x86.asm import X86_NOPS
from ..x86.redzone_programs import check_transparency
from .core import exercise
from . import judges as j
from .ch02 import open_bench_task

NOP5_BENCHES = tuple(b for b in bench_names("x86_64") if "nop5" in b)
NOP5 = X86_NOPS[5]


BILL = ("exceptions", "syscalls")


def _pagecross_uretprobe_bill() -> dict[str, float]:
    return j.bill("uretprobe-nop5-pagecross", "6.18", BILL)


PAGECROSS_CLUES = {"exceptions": "what does 6.18 do at the entry with a nop5 it cannot rewrite within one page, and "
                                 "does the return trap?",
                   "syscalls": "which halves of the call enter the kernel by syscall on 6.18: the entry on this "
                               "nop5, the return, both?"}

exercise(
    id="03.1", kind="predict", title="A uretprobe on the page-crossing nop5",
    question="`uretprobe-nop5-pagecross` puts a uretprobe on a function whose first instruction is a nop5 that "
             "crosses a page boundary. On 6.18, how many exceptions and how many syscalls does one call cost in the "
             "steady state? Answer whole numbers (exact): `{\"exceptions\": ..., \"syscalls\": ...}`.",
    hint="Two parts: the entry (what does 6.18 do with a nop5 it cannot rewrite atomically?) and the "
         "return (chapter 02: through which trampoline, entering the kernel how?).",
    solution="""import uprobe_lab as ul
bill = ul.events_per_hit("uretprobe-nop5-pagecross", "x86_64", "6.18")
answer = {k: bill.get(k, 0) for k in ("exceptions", "syscalls")}""",
    explanation="6.18 cannot optimise a nop5 that crosses a page, so the entry stays on 6.16's path: an int3, the "
                "nop5 emulated in the trap (one exception). The return goes through the uretprobe trampoline's "
                "`sys_uretprobe` (one syscall). The optimised `uretprobe-nop5` costs two syscalls and no exception.",
    expected=_pagecross_uretprobe_bill,
    judge=j.per_item(j.word, j.number(), lambda kind, n: PAGECROSS_CLUES[kind]),
    why=lambda e: "The emulator counts " + ", ".join(f"{v:g} {k.removesuffix('s') if v == 1 else k}"
                                                     for k, v in e.items()) + " per call.",
)


def _wrong_order_call_offset() -> int:
    """How far from the site a CPU would go if the nop5's byte 0 became e8 before bytes 1..4 held the offset."""
    return call_target(bytes([CALL_INSN_OPCODE]) + NOP5[1:CALL_INSN_SIZE], 0)


def _call_offset_judge(answer, expected) -> tuple[bool, str]:
    """03.2's verdict: the two ways to misread ``e8 1f 44 00 00`` named (rel32 read big-endian, rel32 not counted
    from the call's end), then :func:`judges.number`'s too high or low, or an address for an offset."""
    got = j.as_number(answer)
    rel = NOP5[1:CALL_INSN_SIZE]
    if got in (int.from_bytes(rel, "big"), int.from_bytes(rel, "big") + CALL_INSN_SIZE):
        return False, (f"{int(got):#x} reads bytes 1..4 most significant first: x86 stores the rel32 little-endian, "
                       "its lowest byte first.")
    if got == int.from_bytes(rel, "little") != expected:
        return False, f"{got:g} is too low: that is the rel32 itself, but counted from where?"
    return _by_number(answer, expected)


_by_number = j.number(offset_from="the site")
_call_offset_judge.tolerance = _by_number.tolerance

exercise(
    id="03.2", kind="break it", title="Byte 0 first",
    question="6.18 writes the call's offset into bytes 1..4 while byte 0 is still int3, and turns byte 0 into "
             "`e8` last. Suppose it did it the other way round: byte 0 first. A CPU that enters the site between "
             "the two writes decodes `e8` followed by the nop5's old bytes 1..4 (`1f 44 00 00`). Where does its "
             "`call` go? Answer the target's distance from the site in bytes (exact; hex like `0x10` is fine).",
    hint="A `call rel32` goes to the address after the call (site + 5) plus the 32-bit little-endian offset in "
         "bytes 1..4.",
    solution="""from uprobe_lab.program import disasm
from uprobe_lab.views.nop5 import patch_run
run = patch_run("6.18")
(_, _, text), = disasm(b"\\xe8" + run.stages[0].site[1:5], "x86_64", run.site)
print(text)
answer = int(text.split()[-1], 16) - run.site""",
    explanation="`1f 44 00 00` read as a little-endian offset is 0x441f, so the call goes to site + 5 + 0x441f, "
                "into whatever lies 17 KB further on: a CPU would run garbage. That is why byte 0 is written last, "
                "behind an int3 that every CPU has been synced to see.",
    expected=_wrong_order_call_offset,
    judge=_call_offset_judge,
    why=lambda e: f"The call's target is the site + {e:#x}.",
)


def _boundary_verdicts() -> dict[str, str]:
    """What 6.18 does with a probed nop5 starting 5 or 4 bytes before a page ends."""
    return {f"{vaddr:#x}": hit_verdict(NOP5, vaddr, "6.18")["probe"] for vaddr in BOUNDARY_SITES}


BOUNDARY_SITES = (0x400FFB, 0x400FFC)

exercise(
    id="03.3", kind="predict", title="Right at the page's end",
    question="A probed nop5 at 0x400ffb and another at 0x400ffc (pages are 4 KB: the next one starts at "
             "0x401000). What does 6.18 make of each after its first hit: `\"optimise\"` (the call) or "
             "`\"emulate\"` (stays an int3, emulated)? Answer `{\"0x400ffb\": ..., \"0x400ffc\": ...}`.",
    hint="`can_optimize()` asks whether the five bytes fit in what is left of the page.",
    solution="""from uprobe_lab.own_program import hit_verdict
nop5 = bytes.fromhex("0f1f440000")
answer = {hex(v): hit_verdict(nop5, v, "6.18")["probe"] for v in (0x400ffb, 0x400ffc)}""",
    explanation="0x400ffb is exactly the last five bytes of its page, so the kernel can rewrite them in one page: "
                "optimised. 0x400ffc has four bytes on this page and one on the next: it stays an int3, emulated.",
    expected=_boundary_verdicts,
    judge=j.per_item(lambda k: f"{int(j.as_number(k)):#x}", j.choice(("optimise", "emulate")),
                     lambda k, v: "how many of its five bytes are left on the site's page?"),
    why=lambda e: "6.18's can_optimize answers " + ", ".join(f"{k}: {v}" for k, v in e.items()) + ".",
)


WORDS_ASKED = (-0x8, -0x20, -0x28, -0x80)


def _redzone_writes() -> set[int]:
    return set(check_transparency("redzone_leaf_nop5", "6.18").redzone_changed) & set(WORDS_ASKED)


def _offset(value) -> int:
    text = j.word(value).replace("rsp", "").replace(" ", "")
    return int(j.as_number(text))


def _words(offsets) -> str:
    return ", ".join(f"rsp{o:+#x}" for o in sorted(offsets, reverse=True))


def _redzone_judge(answer, expected) -> tuple[bool, str]:
    """03.4's verdict: a word outside the four asked is a form error, whatever the kernel does there; a missing
    or extra word gets a question about how far below rsp a hit writes (not how many are missing: that would
    count the answer)."""
    if isinstance(answer, (str, bytes, dict)) or not hasattr(answer, "__iter__"):
        raise LabError(f"{j.shown(answer)}: give a set of offsets, e.g. {{-0x80}}")
    got = {_offset(a) for a in answer}
    unasked = got - set(WORDS_ASKED)
    if unasked:
        raise LabError(f"{_words(unasked)}: not one of the four words asked ({_words(WORDS_ASKED)}); answer which "
                       "of those four a hit overwrites")
    parts = []
    if expected - got:
        parts.append("a word a hit overwrites is missing: count the words the site's call and the trampoline's "
                     "pushes write below the site's rsp")
    if got - expected:
        parts.append(f"should not be there: {_words(got - expected)} - does a hit write that far below rsp?")
    if not parts:
        return True, ""
    text = "; ".join(parts)
    return False, text[0].upper() + text[1:] + ("" if text.endswith("?") else ".")


exercise(
    id="03.4", kind="break it", title="The red zone",
    question="A leaf function keeps live values in its red zone at rsp-0x8, rsp-0x20, rsp-0x28 and rsp-0x80 (its "
             "rsp at the probe site: a leaf does not move it) and has a nop5 after the stores. Probe it on 6.18 "
             "and hit it until it is optimised. Which of those four words does a hit overwrite? Answer a set of "
             "offsets, e.g. `{-0x80}`.",
    hint="The optimised site is a `call`: where does a call store its return address? Then the trampoline "
         "saves registers before its `syscall` - how many words does it push?",
    solution="""from uprobe_lab.x86.redzone_programs import check_transparency
report = check_transparency("redzone_leaf_nop5", "6.18")
print(report)
answer = set(report.redzone_changed) & {-0x8, -0x20, -0x28, -0x80}""",
    explanation="The `call` pushes the return address at rsp-8 and the trampoline pushes rcx, r11 and rax below "
                "it, down to rsp-0x20: those two of the four are lost. Chapter 03b's nop10 scheme moves rsp below "
                "the red zone first.",
    expected=_redzone_writes,
    judge=_redzone_judge,
    why=lambda e: "The lab's transparency check saw writes at " + ", ".join(f"rsp{o:+#x}" for o in sorted(e)) + ".",
)

exercise(
    id="03.5", kind="open", title="Before and after, your choice",
    question="Pick a nop5 bench (`uretprobe-nop5`, `uprobe-nop5-pagecross`, ...) and a kernel; predict its "
             "exceptions and syscalls per hit, then check: `answer = (\"uretprobe-nop5\", \"6.18\", "
             "{\"exceptions\": ..., \"syscalls\": ...})`.",
    hint="A uretprobe adds the return path: the uretprobe syscall from 6.11.",
    solution="""import uprobe_lab as ul
bill = ul.events_per_hit("uretprobe-nop5", "x86_64", "6.18")
answer = ("uretprobe-nop5", "6.18", {k: bill.get(k, 0) for k in ("exceptions", "syscalls")})""",
    explanation="6.18's uretprobe-nop5: the entry goes through the optimised call (sys_uprobe), the return "
                "through the uretprobe trampoline (sys_uretprobe): two syscalls, no exception.",
    **open_bench_task(("exceptions", "syscalls"), NOP5_BENCHES, "a nop5 bench"),
)
