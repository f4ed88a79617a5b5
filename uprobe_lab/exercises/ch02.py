"""Chapter 02: uretprobes, the int3 trampoline (6.10) and the uretprobe syscall (6.11)."""
from __future__ import annotations

from .. import LabError, analyze, events_per_hit
from ..bench import bench_names
from ..kernel import KERNELS, row_for_release
from ..stepper import where
from ..trace import EVENT_KINDS
from ..uprobes import UnprobeableInstruction, uprobe_register
from ..views.uretprobe import record_return_steps
from ..x86.asm import X86_NOPS
from ..x86.uretprobe import uretprobe_syscall_check_offset
from ..x86.uretprobe_programs import (RegsRecorder, make_uretprobe_process, random_registers, regs_roundtrip,
                                      return_consumer_regs)
from .core import exercise
from . import judges as j


URETPROBE_BENCHES = tuple(b for b in bench_names("x86_64") if b.startswith("uretprobe-"))
# uretprobe-nop5 on three kernels: the chapter's table has only nop/push/ret, on 6.10 and 6.11
NOP5_KERNELS = ("6.10", "6.11", "6.16")


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

COMPAT_BENCH = "uretprobe-nop-compat"  # the lab's bench: uretprobe-nop in a 32-bit task
COMPAT_KINDS = ("exceptions", "syscalls")


def _compat_bill() -> dict:
    return j.bill(COMPAT_BENCH, "6.18", COMPAT_KINDS)


def _compat_reason(kind: str, want) -> str:
    if kind == "exceptions":
        return "count the entry, then ask which instruction a 32-bit task finds in slot 0 when it returns"
    return "does a 32-bit task's return enter the kernel through the uretprobe syscall?"


exercise(
    id="02.2", kind="predict", title="A 32-bit task's return",
    question="The chapter's table counted 64-bit tasks on 6.10 and 6.11. The lab's bench `uretprobe-nop-compat` "
             "is `uretprobe-nop` in a 32-bit (compat) task, on 6.18. In the steady state, how many **exceptions** "
             "and how many **syscalls** does one hit cost (exact)? Answer "
             "`{\"exceptions\": ..., \"syscalls\": ...}`.",
    hint="Add the entry and the return. The entry is the nop's int3, emulated. For the return, read again what "
         "the chapter says a 32-bit task finds in slot 0 of `[uprobes]`.",
    solution="""import uprobe_lab as ul
counts = ul.events_per_hit("uretprobe-nop-compat", "x86_64", "6.18")
answer = {kind: counts.get(kind, 0) for kind in ("exceptions", "syscalls")}""",
    explanation="`arch_uretprobe_trampoline()` hands out the syscall trampoline only to a task in 64-bit mode; a "
                "32-bit task's slot 0 is the one `int3` on every kernel. So a 6.18 compat task pays what a 6.10 "
                "task paid: the entry int3 and the trampoline's int3, 2 exceptions and no syscall.",
    expected=_compat_bill,
    judge=j.per_item(j.word, j.number(), _compat_reason),
    why=lambda e: f"The emulator counts {e['exceptions']} exceptions and {e['syscalls']} syscalls per hit.",
)


IP_PLACES = ("trampoline", "function", "caller")


def _consumer_ip_place() -> str:
    proc, seen = return_consumer_regs("6.11")
    place = where(proc, seen["ip"])
    if place.startswith("[uprobes]"):
        return "trampoline"
    return "function" if place.startswith("stepper_target") else "caller"


def _consumer_ip_judge(answer, expected) -> tuple[bool, str]:
    ok, said = j.choice(IP_PLACES)(answer, expected)
    if ok:
        return True, ""
    return False, (f"{said} Which address does uprobe_handle_trampoline() put into regs->ip before it runs the "
                   "return consumers?")


exercise(
    id="02.3", kind="predict", title="Where the return consumer sees the program",
    question="On 6.11, `stepper_caller` calls the return-probed `stepper_target` (the stepper above). When "
             "`sys_uretprobe` runs the return consumer, where does the `ip` it is shown point: into the "
             "trampoline (`\"trampoline\"`), at the probed function's `ret` (`\"function\"`), or at the "
             "return address in the caller (`\"caller\"`)?",
    hint="A return consumer (a BPF uretprobe program, say) reads the function's return value from rax and often "
         "`ip` to know where the function returned to. The kernel keeps the real return address in the return "
         "instance: when does it use it?",
    solution="""from uprobe_lab.stepper import where
from uprobe_lab.x86.uretprobe_programs import return_consumer_regs
proc, seen = return_consumer_regs("6.11")   # stepper_caller -> return-probed stepper_target
place = where(proc, seen["ip"])              # "stepper_caller+0x19"
answer = "caller" if place.startswith("stepper_caller") else place""",
    explanation="`uprobe_handle_trampoline()` (kernel/events/uprobes.c), which `sys_uretprobe` calls, sets "
                "`regs->ip` to the return instance's `orig_ret_vaddr` before it runs the chain: the consumer sees "
                "the program as if the function had just returned, at `stepper_caller+0x19`. `sys_uretprobe` then "
                "puts that address into rax's slot for the trampoline's `ret`.",
    expected=_consumer_ip_place,
    judge=_consumer_ip_judge,
    why=lambda e: f"The lab's return consumer was shown an ip in the {e}'s code.",
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


def _consumer_sp() -> int:
    """How many bytes above the rsp of the trampoline's syscall the return consumer's sp is (6.11)."""
    _, seen = return_consumer_regs("6.11")
    syscall = next(s for s in record_return_steps("6.11") if s.text == "syscall")
    return seen["sp"] - syscall.regs["sp"]


def _consumer_sp_wrong(got: float) -> str:
    """Why an offset for 02.5 is wrong, without the right one."""
    if got == 0:
        return "0 is the trampoline's own rsp; would the consumer then see the stack the caller gets back?"
    return "what did the trampoline push before its syscall, and where would sp be after a plain ret?"


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
    id="02.5", kind="predict", title="The sp the return consumer sees",
    question="The same return on 6.11: `sys_uretprobe` gives the consumer the program's rax, rcx and r11 from "
             "the trampoline's saves, and an `sp` of its own too. How many bytes above the `rsp` of the "
             "trampoline's `syscall` is the `sp` the return consumer sees (exact)? Answer a number, in decimal "
             "or as a hex string such as `\"0x1\"`.",
    hint="The consumer should see the program as the caller will find it after the return. Count what the "
         "trampoline pushed between the function's `ret` and its `syscall`.",
    solution="""from uprobe_lab.views.uretprobe import record_return_steps
from uprobe_lab.x86.uretprobe_programs import return_consumer_regs
_, seen = return_consumer_regs("6.11")
syscall = next(s for s in record_return_steps("6.11") if s.text == "syscall")
answer = seen["sp"] - syscall.regs["sp"]""",
    explanation="`sys_uretprobe` adds the size of the three saves (rax, rcx, r11: 3 x 8 = 24 bytes) to "
                "`regs->sp` before the consumers run, and takes it off again before it writes the stack back: "
                "the consumer sees `sp` where the caller gets it after the return, as `ip` is the return "
                "address.",
    expected=_consumer_sp,
    judge=j.number(because=_consumer_sp_wrong),
    why=lambda e: f"The lab's return consumer saw sp {e} ({e:#x}) bytes above the syscall's rsp.",
)


def count_range(lab, bench: str, kind: str) -> set[float]:
    """The counts of ``kind`` a hit of ``bench`` takes on the modelled kernels (every release answers with one)."""
    counts = set()
    for kernel in KERNELS:
        try:
            counts.add(lab(bench, kernel).get(kind, 0))
        except UnprobeableInstruction:
            pass
    return counts


def count_clue(bench: str, kernel: str, kind: str) -> str:
    """Where a wrong count of ``kind`` goes wrong: the entry's path, and a uretprobe bench's return path."""
    ret = bench.startswith("uretprobe-")
    if kind == "exceptions":
        return ("count the entry's traps (does this kernel trap on the site, and step the instruction?)"
                + (" and the return's (does the return trap on this kernel, or enter the kernel another way?)"
                   if ret else ""))
    if kind == "syscalls":
        return ("count the entry's (does this kernel turn the site into a call that enters the kernel by syscall?)"
                + (" and the return's (through which trampoline, entering the kernel how?)" if ret else ""))
    if kind == "xol_steps":
        return f"look at which rule of {kernel} takes the probed instruction: emulated, optimised or stepped"
    return f"look at where on the entry{' or the return' if ret else ''} path the trace records {kind}"


def count_verdict(bench: str, kernel: str, kind: str, said, right, lab) -> str:
    """A wrong count: too high or too low only where the bench's other counts on that side are more than one,
    else only where to look (where a count is 0 or 1 on every kernel, the direction is the answer)."""
    said = j.as_number(said)
    above = said < right
    side = [c for c in count_range(lab, bench, kind) if (c > said if above else c < said)]
    verdict = f"is too {'low' if above else 'high'}" if len(side) > 1 else "is not it"
    return f"{kind}: {said:g} {verdict} - {count_clue(bench, kernel, kind)}"


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
        ok, reason = _bill_verdict(answer[2], right, bench, kernel, lab)
        return ok, reason + (f" ({note})" if note else "")

    def _bill_verdict(bill, right, bench: str, kernel: str, lab) -> tuple[bool, str]:
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
        # where to look, not the count itself, which the third wrong try gives
        wrong += [count_verdict(bench, kernel, k, v, right.get(k, 0), lab)
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
