"""Chapter 02: uretprobes, the int3 trampoline (6.10) and the uretprobe syscall (6.11)."""
from __future__ import annotations

from .. import LabError, analyze, disasm, events_per_hit
from ..bench import bench_names
from ..kernel import KERNELS, row_for_release
from ..trace import EVENT_KINDS
from ..uprobes import UnprobeableInstruction, uprobe_register
from ..x86.asm import X86_NOPS
from ..x86.constants import __NR_uretprobe
from ..x86.optimize import uprobe_trampoline_code
from ..x86.uretprobe import uretprobe_syscall_check_offset
from ..x86.uretprobe_programs import RegsRecorder, make_uretprobe_process, random_registers, regs_roundtrip
from .core import exercise
from . import judges as j


URETPROBE_BENCHES = tuple(b for b in bench_names("x86_64") if b.startswith("uretprobe-"))
# uretprobe-nop5 on three kernels: the chapter's table has only nop/push/ret, on 6.10 and 6.11
NOP5_KERNELS = ("6.10", "6.11", "6.16")


def trampoline_insns(code: bytes) -> list[str]:
    return [text for _, _, text in disasm(code)]


def _around_syscall(code: bytes, op: str, before: bool) -> list[str]:
    """The registers ``op`` (push or pop) names before or after the ``syscall``, in the code's order."""
    insns = trampoline_insns(code)
    cut = insns.index("syscall")
    part = insns[:cut] if before else insns[cut + 1:]
    return [j.register(t.split()[1]) for t in part if t.startswith(op + " ")]


def _syscall_number(code: bytes) -> int:
    insns = trampoline_insns(code)
    mov = insns[insns.index("syscall") - 1]  # "mov rax, 0x150"
    return int(mov.split(",")[1], 0)


def _nop5_bill_reason(kernel: str, want) -> str:
    """Why a count for ``kernel`` is wrong: what that kernel does at the entry and at the return, not the count."""
    entry = analyze(X86_NOPS[5].hex(), kernel=kernel)["action"]
    how = {"emulate": "emulated inside the int3 trap", "xol": "stepped out of line"}[entry]
    back = ("the syscall trampoline (a syscall is no exception)" if KERNELS[kernel].uretprobe_syscall
            else "the int3 trampoline")
    return f"the nop5 is {how} here, and the return comes back through {back}: count the traps of both again"


exercise(
    id="02.1", kind="predict", title="A return probe on a 5-byte nop",
    question="The chapter's table counted `uretprobe-nop` (a one-byte nop). The kernel bench's `uretprobe-nop5` is "
             "the same entry-plus-return probe on a function that starts with the 5-byte nop `0f 1f 44 00 00` "
             "(chapter 01 showed which kernels emulate that one). In the steady state, how many **exceptions** "
             "does one hit cost on 6.10, 6.11 and 6.16 (exact)? Answer "
             "`{\"6.10\": ..., \"6.11\": ..., \"6.16\": ...}`.",
    hint="Add the entry and the return. The entry: a nop5 emulated inside the int3 trap is one exception; a nop5 "
         "stepped out of line is the int3 plus the `#DB` after the step. The return: an `int3` trampoline before "
         "6.11, a `syscall` from 6.11 (not an exception).",
    solution="""import uprobe_lab as ul
answer = {k: ul.events_per_hit("uretprobe-nop5", "x86_64", k).get("exceptions", 0)
          for k in ("6.10", "6.11", "6.16")}""",
    explanation="6.10 steps the nop5 out of line (int3 + #DB) and returns through the int3 trampoline: 3. 6.11 "
                "still steps it but returns by syscall: 2. 6.16 emulates every `x86_nops[]` pattern inside the "
                "int3 trap: 1. Each release takes one exception off.",
    expected=lambda: {k: events_per_hit("uretprobe-nop5", "x86_64", k).get("exceptions", 0) for k in NOP5_KERNELS},
    judge=j.per_item(str, j.number(), _nop5_bill_reason),
    why=lambda e: "The emulator counts " + ", ".join(f"{n} on {k}" for k, n in e.items()) + ".",
)

SECOND_TRAMPOLINE = ("From 6.18 the kernel can *optimise* a probe on a 5-byte nop (chapter 03): it rewrites the nop "
                     "into a `call` to a page of its own, `[uprobes-trampoline]`, whose code enters the kernel "
                     "through a second syscall, `uprobe`, and then goes on to the instruction after the nop. ")

exercise(
    id="02.2", kind="predict", title="The other trampoline's pushes",
    question=SECOND_TRAMPOLINE + "Predict before you look it up: before its `syscall`, which registers does "
             "that trampoline push? Answer a set of names, e.g. `{\"rax\", \"rdx\"}`.",
    hint="The constraints are the uretprobe trampoline's: which registers does `syscall` itself overwrite, and "
         "which one must carry the syscall number? The probed program's values in them must survive.",
    solution="""import uprobe_lab as ul
from uprobe_lab.x86.optimize import uprobe_trampoline_code
insns = [t for _, _, t in ul.disasm(uprobe_trampoline_code())]
answer = {t.split()[1] for t in insns[:insns.index("syscall")] if t.startswith("push")}""",
    explanation="rcx and r11 (`syscall` writes the next rip and rflags there) and rax (the syscall number): the "
                "same three as the uretprobe trampoline, pushed in another order - `sys_uprobe` reads them as ax, "
                "r11, cx from the lowest address up.",
    expected=lambda: set(_around_syscall(uprobe_trampoline_code(), "push", before=True)),
    judge=j.same_set(j.register, "register(s)"),
    why=lambda e: "The trampoline's bytes, disassembled, push "
                  f"{', '.join(_around_syscall(uprobe_trampoline_code(), 'push', before=True))}, in that order.",
)

exercise(
    id="02.3", kind="predict", title="The other trampoline's pops",
    question="The same `[uprobes-trampoline]` as in 02.2: after `sys_uprobe` returns, it pops some of what it "
             "pushed and ends with `ret`. Which registers does it pop? Answer a set. (The uretprobe trampoline "
             "popped only two - does this one have to?)",
    hint="Where does this trampoline's `ret` find its return address? The uretprobe trampoline was entered by "
         "a hijacked `ret` and needed a slot for the real return address; this one is entered by a `call` at the "
         "probe site.",
    solution="""import uprobe_lab as ul
from uprobe_lab.x86.optimize import uprobe_trampoline_code
insns = [t for _, _, t in ul.disasm(uprobe_trampoline_code())]
answer = {t.split()[1] for t in insns[insns.index("syscall") + 1:] if t.startswith("pop")}""",
    explanation="The site's `call` pushed the address after the nop5 above the three saves, so `ret` has a slot "
                "of its own: the trampoline pops all three (rax too - `sys_uprobe` leaves the program's rax in its "
                "slot, with any change a consumer made), and `ret` goes back to the instruction after the probe.",
    expected=lambda: set(_around_syscall(uprobe_trampoline_code(), "pop", before=False)),
    judge=j.same_set(j.register, "register(s)"),
    why=lambda e: f"The trampoline pops {', '.join(_around_syscall(uprobe_trampoline_code(), 'pop', before=False))}, "
                  "in that order; its `ret` takes the address the probe site's `call` pushed.",
)


def _broken_rcx() -> int:
    """Where the caller's rcx points after a return through the broken trampoline: an offset into [uprobes]."""
    proc = make_uretprobe_process("6.11", uretprobe_saves_regs=False)
    uprobe_register(proc, "uretprobe_regs_trigger", RegsRecorder())
    rcx = regs_roundtrip(proc, random_registers(0))["cx"]
    mapping = proc.mapping_at(rcx)
    if mapping is None or mapping.name != "[uprobes]":
        raise LabError(f"rcx {rcx:#x} does not point into [uprobes]")
    return rcx - mapping.start


def _broken_rcx_wrong(got: float) -> str:
    """Why an offset for 02.4 is wrong, without the right one: 0xd is the merged trampoline's."""
    merged = uretprobe_syscall_check_offset(save_regs=True)
    if got == merged:
        return (f"{merged:#x} is where the merged trampoline's syscall ends, after its pushes of rax, rcx and r11; "
                "the broken one pushes only rax.")
    return "rcx holds the address of the instruction after syscall: add up the broken trampoline's bytes."


def _other_number_wrong(got: float) -> str:
    """Why a syscall number for 02.5 is wrong, without the right one."""
    if got == __NR_uretprobe:
        return f"{__NR_uretprobe} is uretprobe's number (6.11); uprobe was numbered later, for 6.18."
    return "x86-64's own numbers are handed out in sequence: where does uretprobe sit in the table above?"


exercise(
    id="02.4", kind="break it", title="Take the saves out",
    question="Build the broken 6.11 trampoline that does not save rcx and r11 (`make_uretprobe_process(\"6.11\", "
             "uretprobe_saves_regs=False)`; it keeps only `push rax`). Before running it: after a probed return, "
             "the caller's rcx no longer holds its own value but an address inside `[uprobes]`. At which offset "
             "from the start of `[uprobes]` (exact)? Answer a number, in decimal or as a hex string such as "
             "`\"0x1\"`.",
    hint="`syscall` puts the address of the instruction after it into rcx, and the return to user space leaves "
         "it there. Add up the broken trampoline's bytes to the end of its `syscall`: `push rax`, the `mov` into "
         "rax and the `syscall` are as long as in the listing above.",
    solution="""from uprobe_lab.uprobes import uprobe_register
from uprobe_lab.x86.uretprobe_programs import make_uretprobe_process, RegsRecorder, random_registers, regs_roundtrip
proc = make_uretprobe_process("6.11", uretprobe_saves_regs=False)
uprobe_register(proc, "uretprobe_regs_trigger", RegsRecorder())
rcx = regs_roundtrip(proc, random_registers(0))["cx"]
mapping = proc.mapping_at(rcx)
assert mapping.name == "[uprobes]"
answer = rcx - mapping.start""",
    explanation="`push rax` (1 byte) + `mov rax, imm32` (7) + `syscall` (2): the instruction after `syscall` is at "
                "0xa, and that is what the caller finds in rcx (r11 holds rflags). Without the pushes of rcx and "
                "r11 nothing puts the program's values back; the merged trampoline's `push`/`pop` pairs are what "
                "hide the clobber.",
    expected=_broken_rcx,
    judge=j.number(offset_from="the start of [uprobes]", because=_broken_rcx_wrong),
    why=lambda e: f"The lab's run of the broken trampoline left rcx at [uprobes]+{e:#x}.",
)

exercise(
    id="02.5", kind="predict", title="The other syscall's number",
    question="The `uprobe` syscall of 02.2 is, like `uretprobe`, a syscall only x86-64 has, so it is numbered "
             "in x86-64's own part of the table, not with the syscalls every architecture shares (424 on). "
             "Which number does `[uprobes-trampoline]` load into rax before its `syscall` (exact)? Answer the "
             "number, in decimal or as a hex string such as `\"0x1\"`.",
    hint="Where did `uretprobe` end up in the history table above? x86-64's own numbers are handed out in "
         "sequence. To check, disassemble `uprobe_trampoline_code()` (uprobe_lab.x86.optimize) and read the "
         "`mov` into rax; it is printed in hex.",
    solution="""import uprobe_lab as ul
from uprobe_lab.x86.optimize import uprobe_trampoline_code
insns = [t for _, _, t in ul.disasm(uprobe_trampoline_code())]
answer = int(insns[insns.index("syscall") - 1].split(",")[1], 0)""",
    explanation="x86-64's own numbers (below 424) are handed out in sequence: `uretprobe` took 335 for 6.11 and "
                "`uprobe` the next one, 336, for 6.18 (0x150 in the listing).",
    expected=lambda: _syscall_number(uprobe_trampoline_code()),
    judge=j.number(because=_other_number_wrong),
    why=lambda e: f"The trampoline's bytes load {e} ({e:#x}) into rax.",
)


def bench_bill(kinds: tuple[str, ...], benches: tuple[str, ...], what: str):
    """The judge of an open task's answer (bench, kernel, {kind: count}) against the emulator's steady-state
    counts: the bench is one of ``benches`` (the ``what`` the question asks for), every kind in ``kinds`` is
    predicted (0 is a prediction), and every key is a kind of the trace's vocabulary. A kernel that refuses the
    probe at attach is predicted with "reject" (any of its spellings) in place of the counts. The kernel is a
    modelled version or any release ('7.2.6', '6.12'): the row that answers for it (row_for_release) is asked,
    and the verdict says which."""
    def judge(answer, lab) -> tuple[bool, str]:
        if not isinstance(answer, (tuple, list)) or len(answer) != 3 or not isinstance(answer[2], (dict, str)):
            raise LabError(f"give (bench, kernel, {{kind: count}}), e.g. ({benches[0]!r}, '6.11', "
                           + "{" + ", ".join(f"{k!r}: ..." for k in kinds) + "}), or (bench, kernel, 'reject') "
                           "for a probe the kernel refuses")
        bench, kernel = j.word(answer[0]), str(answer[1]).strip()
        if bench not in benches:
            raise LabError(f"{j.shown(answer[0])} is not {what}; pick one of {', '.join(benches)}")
        row, note = row_for_release(kernel)
        try:
            right = lab(bench, row)
        except UnprobeableInstruction:
            right = None  # refused at attach: there is no hit to count
        ok, reason = _bill_verdict(answer[2], right, bench, kernel)
        return ok, reason + (f" ({note})" if note else "")

    def _bill_verdict(bill, right, bench: str, kernel: str) -> tuple[bool, str]:
        """``bill`` (the learner's counts, or "reject") against ``right`` (the lab's, None if refused)."""
        if isinstance(bill, str):
            if j.spelling(bill) != "reject":
                raise LabError(f"{bill!r}: predict the counts ({{kind: count}}), or 'reject' if {kernel} "
                               "refuses the probe")
            if right is None:
                return True, f"{kernel} refuses a probe on {bench}'s site at attach, as you said."
            return False, f"{kernel} accepts a probe on {bench}'s site: predict what a hit costs."
        if right is None:
            return False, f"Counting hits assumes {kernel} accepts a probe on {bench}'s site: does it?"
        said = {j.word(k): v for k, v in bill.items()}
        unknown = [k for k in said if k not in EVENT_KINDS]
        if unknown:
            raise j.not_known(unknown, EVENT_KINDS, "an event kind", "kinds")
        missing = [k for k in kinds if k not in said]
        wrong = [f"No prediction for {', '.join(missing)} (the question asks for {', '.join(kinds)}; 0 is a "
                 f"prediction)"] if missing else []
        # the direction only: the count itself is the answer, which the third wrong try gives
        wrong += [f"{k}: {j.as_number(v):g} is too {'high' if j.as_number(v) > right.get(k, 0) else 'low'}"
                  for k, v in said.items() if j.as_number(v) != right.get(k, 0)]
        if wrong:
            return False, "; ".join(wrong) + "."
        return True, f"Every kind you predicted matches ({bench} on {kernel}: {right})."
    return judge


def open_bench_task(kinds: tuple[str, ...], benches: tuple[str, ...], what: str) -> dict:
    """The checking half of an open "pick a bench and a kernel, predict its bill" exercise."""
    return dict(expected=lambda: (lambda bench, kernel: events_per_hit(bench, "x86_64", kernel)),
                judge=bench_bill(kinds, benches, what),
                why=lambda lab: "The lab attached the bench's probe as that kernel would and, where the kernel "
                                "took it, ran the bench to its steady state.")


exercise(
    id="02.6", kind="open", title="Your own prediction",
    question="Pick a uretprobe bench (`uretprobe-push`, `uretprobe-ret`, ...) and a kernel, predict its "
             "exceptions, syscalls and xol_steps per hit, then check: "
             "`answer = (\"uretprobe-nop5\", \"6.11\", {\"exceptions\": ..., \"syscalls\": ..., \"xol_steps\": ...})`.",
    hint="Add up the entry probe (what does the probed instruction cost?) and the return (int3 trampoline "
         "before 6.11, syscall from 6.11).",
    solution="""import uprobe_lab as ul
bill = ul.events_per_hit("uretprobe-nop5", "x86_64", "6.11")
answer = ("uretprobe-nop5", "6.11", {k: bill.get(k, 0) for k in ("exceptions", "syscalls", "xol_steps")})""",
    explanation="uretprobe-nop5 on 6.11: the probed nop5 is stepped out of line (int3 + #DB, one XOL step), and "
                "the return comes back through the syscall trampoline: 2 exceptions, 1 syscall, 1 xol_step.",
    **open_bench_task(("exceptions", "syscalls", "xol_steps"), URETPROBE_BENCHES, "a uretprobe bench"),
)
