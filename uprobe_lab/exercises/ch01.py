"""Chapter 01: breakpoint uprobes - emulate, single-step out of line, or refuse."""
from __future__ import annotations

from .. import CountingConsumer, LabError, analyze, attach, new_process
from .core import exercise
from . import judges as j

ACTIONS = ("emulate", "xol", "reject")
CLASSIFY = ("90", "55", "c3", "e8 00 00 00 00", "0f 05", "f4")


def _hex(text) -> str:
    return " ".join(j.word(text).replace(" ", "")[i:i + 2] for i in range(0, len(j.word(text).replace(" ", "")), 2))


def _actions(kernel: str, insns=CLASSIFY) -> dict:
    return {_hex(h): analyze(h.replace(" ", ""), kernel=kernel)["action"] for h in insns}


def _action_reason(kernel: str):
    return lambda h, want: f"{want} - {analyze(h.replace(' ', ''), kernel=kernel)['reason']}"


exercise(
    id="01.1", kind="predict", title="Emulate, step out of line, or refuse?",
    question="For each instruction (hex bytes as in memory) say what a 6.18 kernel does with a probe on it: "
             "`\"emulate\"` (finish it inside the int3 trap), `\"xol\"` (single-step a copy out of line) or "
             "`\"reject\"` (refuse the probe). Answer a dict: `{\"90\": ..., \"55\": ..., \"c3\": ..., "
             "\"e8 00 00 00 00\": ..., \"0f 05\": ..., \"f4\": ...}`.",
    hint="`90` is nop, `55` push %rbp, `c3` ret, `e8 ..` call rel32, `0f 05` syscall, `f4` hlt. The kernel emulates "
         "nops, relative jumps/calls, conditional jumps and `push reg`; it refuses what traps by itself or "
         "changes privileged state; everything else in between is stepped out of line.",
    solution="""import uprobe_lab as ul
answer = {h: ul.analyze(h.replace(" ", ""), kernel="6.18")["action"]
          for h in ("90", "55", "c3", "e8 00 00 00 00", "0f 05", "f4")}""",
    explanation="`ul.analyze` is `arch_uprobe_analyze_insn`'s verdict; its `reason` says why for each one.",
    expected=lambda: _actions("6.18"),
    judge=j.per_item(_hex, j.choice(ACTIONS), _action_reason("6.18")),
    why=lambda e: "The lab's verdicts come from its model of arch_uprobe_analyze_insn (arch/x86/kernel/uprobes.c).",
)

exercise(
    id="01.2", kind="predict", title="The rules changed: a 5-byte nop",
    question="`0f 1f 44 00 00` is the 5-byte nop of the kernel bench's `uprobe-nop5` (libbpf/usdt's `usdt.h` "
             "also emitted it, after a one-byte `nop`, at USDT sites from February to May 2026: chapter 03). What "
             "does the kernel do with a probe on it on 6.11, and on 6.16? Answer `{\"6.11\": ..., \"6.16\": ...}` "
             "with `\"emulate\"`, `\"xol\"` or `\"reject\"`.",
    hint="Before 6.16 the only nop emulated was `90`, with or without prefixes (`90`, `66 90`, ...: the "
         "\"prefix* + 0x90\" case of `branch_setup_xol_ops`). 6.16 recognises every nop in the kernel's "
         "`x86_nops` table.",
    solution="""import uprobe_lab as ul
answer = {k: ul.analyze("0f1f440000", kernel=k)["action"] for k in ("6.11", "6.16")}""",
    explanation="Single-stepping costs a second exception (#DB); emulating it saves that - half the traps per hit.",
    expected=lambda: {k: analyze("0f1f440000", kernel=k)["action"] for k in ("6.11", "6.16")},
    judge=j.per_item(str, j.choice(ACTIONS), lambda k, want: f"{want} - {analyze('0f1f440000', kernel=k)['reason']}"),
    why=lambda e: f"The lab: 6.11 {e['6.11']}, 6.16 {e['6.16']}.",
)


def _signal_name(answer) -> str:
    name = j.word(answer).upper()
    return ("SIG" + name if not name.startswith("SIG") else name).lower()


def _stray_signal() -> str:
    proc = new_process()
    attach(proc, "uprobe_target_nop", CountingConsumer())
    return proc.run(proc.program.resolve("uprobe_target_nop") + 2, 0).signal


exercise(
    id="01.3", kind="break it", title="A breakpoint nobody owns",
    question="The bench program pads its functions with `int3` bytes. Start the CPU on the padding right after "
             "`uprobe_target_nop` (its address + 2) in a process that has a uprobe elsewhere. Which signal does "
             "the program get? Answer its name, e.g. `\"SIGSEGV\"`.",
    hint="`handle_swbp()` looks the address up among the mm's uprobes. If there is none, is the int3 still the "
         "kernel's business?",
    solution="""import uprobe_lab as ul
proc = ul.new_process()
ul.attach(proc, "uprobe_target_nop", ul.CountingConsumer())
answer = proc.run(proc.program.resolve("uprobe_target_nop") + 2, 0).signal""",
    explanation="No uprobe at that address (and the bytes there really are `int3`): the trap is the program's "
                "own breakpoint, delivered as SIGTRAP as a debugger would expect.",
    expected=lambda: _stray_signal().lower(),
    judge=j.choice(("sigtrap", "sigill", "sigsegv", "sigbus", "sigkill"), _signal_name),
    why=lambda e: f"The lab's process died of {e}: an int3 with no uprobe is delivered to the program.",
)


def _own_insn(answer, lab) -> tuple[bool, str]:
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        raise LabError("give (hex bytes, action), e.g. ('48 89 e5', 'xol')")
    insn, action = answer
    said = j.word(action)
    if said not in ACTIONS:
        raise LabError(f"{action!r} is not one of {', '.join(ACTIONS)}")
    verdict = lab(str(insn).replace(" ", ""))
    if verdict["action"] == said:
        return True, f"{verdict['mnemonic']} {verdict['op_str']}: {said}, as you said."
    return False, f"{verdict['mnemonic']} {verdict['op_str']}: not {said} but {verdict['action']} - {verdict['reason']}."


exercise(
    id="01.4", kind="open", title="Your own instruction",
    question="Pick an instruction from a real binary (`objdump -d /bin/true | head -40`, or one you know), predict "
             "what 6.18 does with a probe on it, then check: `answer = (\"48 89 e5\", \"xol\")`. Try one of each "
             "action - can you find a second instruction the kernel refuses?",
    hint="Good candidates: `48 89 e5` (mov %rsp,%rbp), `f3 0f 1e fa` (endbr64), `eb fe` (jmp .), `fa` (cli), "
         "`f0 ff 00` (lock inc).",
    solution="""answer = ("48 89 e5", "xol")   # mov %rsp,%rbp: neither emulated nor refused""",
    expected=lambda: (lambda h: analyze(h, kernel="6.18")),
    judge=_own_insn,
    why=lambda lab: "The lab decoded your bytes as arch_uprobe_analyze_insn would on 6.18.",
)
