"""Chapter 01: breakpoint uprobes - emulate, single-step out of line, or refuse."""
from __future__ import annotations

from .. import CountingConsumer, LabError, analyze, attach, new_process
from .core import Remembered, exercise
from . import judges as j

ACTIONS = ("emulate", "xol", "reject")
# None of them is in the chapter's table, nor among the kinds its prose names (int3, int 0x80, 0f xx): the learner
# predicts from the kernel's rules, not from the chapter's words
CLASSIFY = ("6a 01", "eb fe", "74 05", "e3 05", "ff d0", "e4 60")

# per instruction, the rule to reread, not the verdict
CLASSIFY_CLUES = {
    "6a 01": "which pushes does push_setup_xol_ops() take: of a register only, or of an immediate too?",
    "eb fe": "does branch_setup_xol_ops() care where a relative jump goes, even to itself?",
    "74 05": "is 74 among the opcodes branch_setup_xol_ops() switches on?",
    "e3 05": "a conditional jump, but is e3 one that branch_setup_xol_ops() takes (is_cond_jmp_opcode())?",
    "ff d0": "an indirect call: is ff among the opcodes branch_setup_xol_ops() switches on, and is it a good "
             "instruction?",
    "e4 60": "a port read: look up opcode e4 in good_insns_64 (arch/x86/kernel/uprobes.c)",
}


def _hex(text) -> str:
    digits = j.word(text).replace(" ", "")
    return " ".join(digits[i:i + 2] for i in range(0, len(digits), 2))


def _actions(kernel: str, insns=CLASSIFY) -> dict:
    return {_hex(h): analyze(h.replace(" ", ""), kernel=kernel)["action"] for h in insns}


def _look_again(kernel: str):
    """What to reconsider for a wrong item, without the verdict: the instruction, and the rule that decides."""
    def explain(h, want):
        v = analyze(h.replace(" ", ""), kernel=kernel)
        return f"{v['mnemonic']} {v['op_str']}".strip() + " - " + CLASSIFY_CLUES[h]
    return explain


exercise(
    id="01.1", kind="predict", title="Emulate, step out of line, or refuse?",
    question="For each instruction (hex bytes as in memory) say what a 6.18 kernel does with a probe on it: "
             "`\"emulate\"` (finish it inside the int3 trap), `\"xol\"` (single-step a copy out of line) or "
             "`\"reject\"` (refuse the probe). None is in the chapter's table. Answer a dict: "
             "`{\"6a 01\": ..., \"eb fe\": ..., \"74 05\": ..., \"e3 05\": ..., \"ff d0\": ..., "
             "\"e4 60\": ...}`.",
    hint="`6a 01` is push $1, `eb fe` jmp to itself, `74 05` je +5, `e3 05` jrcxz +5 (jump if rcx is 0), "
         "`ff d0` call *%rax, `e4 60` in $0x60,%al (read I/O port 0x60). The kernel emulates nops, relative jumps "
         "and calls, the conditional jumps `jcc` (`70`-`7f`, `0f 80`-`0f 8f`) and `push` of a register; it "
         "refuses what is not in its table of good instructions (`good_insns_64`); everything else it steps out of "
         "line. Read `branch_setup_xol_ops` and `push_setup_xol_ops` in arch/x86/kernel/uprobes.c for the exact "
         "cases.",
    solution="""import uprobe_lab as ul
answer = {h: ul.analyze(h.replace(" ", ""), kernel="6.18")["action"]
          for h in ("6a 01", "eb fe", "74 05", "e3 05", "ff d0", "e4 60")}""",
    explanation="Only a push of a *register* is emulated, so `push $1` is stepped; `jmp` and `je` are emulated; "
                "`jrcxz` is a conditional jump but not a `jcc` (`is_cond_jmp_opcode()` takes `70`-`7f`), so it is "
                "stepped, and the step's ip fixup (ip += vaddr - xol_vaddr) moves its relative target back too; "
                "`call *%rax` is stepped and its pushed return address fixed; `in $0x60,%al` is refused: port I/O "
                "(`e4`-`e7`, `ec`-`ef`) is not in `good_insns_64`. `ul.analyze(...)['reason']` "
                "says why for each.",
    expected=lambda: _actions("6.18"),
    judge=j.per_item(_hex, j.choice(ACTIONS), _look_again("6.18")),
    why=lambda e: "The lab's verdicts come from its model of arch_uprobe_analyze_insn (arch/x86/kernel/uprobes.c).",
)

exercise(
    id="01.2", kind="predict", title="The rules changed: a 3-byte nop",
    question="The chapter showed what 6.11 and 6.16 do with the 5-byte nop `0f 1f 44 00 00`. Now the 3-byte nop "
             "`0f 1f 00` (`nopl (%rax)`, which compilers use to pad loops): what does the kernel do with a probe "
             "on it on 6.11, and on 6.16? Answer `{\"6.11\": ..., \"6.16\": ...}` with `\"emulate\"`, `\"xol\"` "
             "or `\"reject\"`.",
    hint="Before 6.16 the only nop emulated was `90`, with or without prefixes (`90`, `66 90`, ...: the "
         "\"prefix* + 0x90\" case of `branch_setup_xol_ops`). 6.16 recognises every nop in the kernel's "
         "`x86_nops` table: `BYTES_NOP1` to `BYTES_NOP8` in arch/x86/include/asm/nops.h (the lab's copy: "
         "`from uprobe_lab.x86.asm import X86_NOPS`).",
    solution="""import uprobe_lab as ul
answer = {k: ul.analyze("0f1f00", kernel=k)["action"] for k in ("6.11", "6.16")}
# {"6.11": "xol", "6.16": "emulate"}""",
    explanation="6.11 steps `0f 1f 00` out of line (`xol`): it emulated only `90` with prefixes. 6.16 emulates it "
                "(`emulate`): it is in `x86_nops`. Single-stepping costs a second exception (#DB); emulating it "
                "saves that - half the traps per hit.",
    expected=lambda: {k: analyze("0f1f00", kernel=k)["action"] for k in ("6.11", "6.16")},
    judge=j.per_item(str, j.choice(ACTIONS), lambda k, want: f"look at which nops {k} emulated"),
    why=lambda e: "The lab asked its model of branch_setup_xol_ops (arch/x86/kernel/uprobes.c) on each kernel.",
)


def _trampoline_signal() -> str:
    """6.10: the CPU starts at slot 0 of [uprobes] (the int3 return trampoline) with no return probe pending."""
    proc = new_process(kernel="6.10")
    attach(proc, "uprobe_target_ret", CountingConsumer())
    proc.call("uprobe_target_ret")  # the stepped ret maps [uprobes]
    return proc.run(proc.mm.xol_area.slot_vaddr(0), 0).signal


def _trampoline_judge(answer, expected) -> tuple[bool, str]:
    """01.3's verdict, naming a signal as the kernel does (SIGTRAP), not as the learner spelled it."""
    ok, _ = j.choice(tuple(j.SIGNALS), j.signal_name)(answer, expected)
    said = j.signal_name(answer).upper()
    if ok:
        return True, ""
    if said == "SIGTRAP":
        return False, ("Not SIGTRAP: handle_swbp knows this int3's address - it is the trampoline's, not a stray "
                       "breakpoint.")
    return False, (f"Not {said}: the trap reaches the trampoline's handler, which finds no return instance to "
                   "restore - read what handle_trampoline() (kernel/events/uprobes.c) sends then.")


exercise(
    id="01.3", kind="break it", title="A jump into the return trampoline",
    question="Slot 0 of the `[uprobes]` page holds the return trampoline; on 6.10 it is a single `int3` (chapter "
             "02 follows a return through it). In a 6.10 process whose probe on `uprobe_target_ret` has been hit "
             "once (the stepped `ret` mapped the page), start the CPU at slot 0 "
             "(`proc.mm.xol_area.slot_vaddr(0)`) with no return probe pending. Which signal does the program "
             "get? Answer its name, e.g. `\"SIGSEGV\"`.",
    hint="`handle_swbp()` compares the trap's address with the trampoline's before it looks for a uprobe, and "
         "hands the trap to the trampoline's handler. What return address can that handler restore when no "
         "return probe is pending?",
    solution="""import uprobe_lab as ul
proc = ul.new_process(kernel="6.10")
ul.attach(proc, "uprobe_target_ret", ul.CountingConsumer())
proc.call("uprobe_target_ret")                       # the first hit maps [uprobes]
answer = proc.run(proc.mm.xol_area.slot_vaddr(0), 0).signal""",
    explanation="The int3 is at the trampoline's address, so it is not a stray breakpoint (that would be SIGTRAP, "
                "as the chapter showed): handle_swbp passes it to handle_trampoline, which finds no pending "
                "return, so no return address to restore, and sends SIGILL (\"handle uretprobe, sending "
                "SIGILL\").",
    expected=lambda: _trampoline_signal().lower(),
    judge=_trampoline_judge,
    why=lambda e: (f"The lab's process died of {e.upper()}: a trampoline hit with no pending return is an "
                   "illegal return."),
)


def _own_insn(answer, lab) -> tuple[bool, str]:
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        raise LabError("give (hex bytes, action), e.g. ('48 89 e5', action)")
    insn, action = answer
    said = j.spelling(action)
    if said not in ACTIONS:
        raise LabError(f"{j.shown(action)} is not one of {', '.join(ACTIONS)}")
    verdict = lab(str(insn).replace(" ", ""))
    insn_text = f"{verdict['mnemonic']} {verdict['op_str']}".strip()
    if verdict["action"] == said:
        return True, f"{insn_text}: {said}, as you said."
    return False, (f"{insn_text}: not {said} - look again at which of the three rules takes it (finished in the "
                   "trap, refused, or stepped).")


def _decoded(insn, verdict) -> str:
    """The lab's verdict on the learner's own instruction: shown with a right answer or the third wrong try."""
    insn_text = f"{verdict['mnemonic']} {verdict['op_str']}".strip()
    return (f"The lab decoded {insn_text} as arch_uprobe_analyze_insn would on 6.18: {verdict['action']} - "
            f"{verdict['reason']}.")


exercise(
    id="01.4", kind="open", title="Your own instruction",
    question="Pick an instruction from a real binary (`objdump -d /bin/true | head -40`, or one you know), predict "
             "what 6.18 does with a probe on it, then check: `answer = (\"48 89 e5\", action)`, the action one of "
             "`\"emulate\"`, `\"xol\"` or `\"reject\"`. Try one of each - can you find a second instruction the "
             "kernel refuses?",
    hint="Good candidates: `48 89 e5` (mov %rsp,%rbp), `f3 0f 1e fa` (endbr64), `eb fe` (jmp .), `fa` (cli), "
         "`f0 ff 00` (lock inc).",
    solution="""answer = ("48 89 e5", "xol")   # mov %rsp,%rbp: neither emulated nor refused""",
    expected=lambda: Remembered(lambda h: analyze(h, kernel="6.18")),
    judge=_own_insn,
    why=Remembered.why("The lab decodes your bytes as arch_uprobe_analyze_insn would on 6.18.", _decoded),
)
