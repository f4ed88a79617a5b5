"""Chapter 03: the nop5 optimisation (6.18) - staged patching, events, the page-crossing limit, the red zone."""
from __future__ import annotations

from .. import events_per_hit
from ..bench import bench_names
from ..views.nop5 import patch_run
from ..x86.redzone_programs import check_transparency
from .core import exercise
from . import judges as j
from .ch02 import open_bench_task

NOP5_KERNELS = ("6.11", "6.16", "6.18")
NOP5_BENCHES = tuple(b for b in bench_names("x86_64") if "nop5" in b)


def first_insn_after_writes() -> dict[str, str]:
    """While 6.18 optimises the bench's nop5: the mnemonic a CPU entering the site meets after each write."""
    out = {}
    for stage in patch_run("6.18").stages:
        if stage.action == "start" and out:
            break  # the unoptimise half begins
        if stage.action == "write":
            key = "bytes 1..4" if stage.what.startswith("bytes") else "byte 0"
            out[key] = stage.listing[0][2].split()[0]
    return out


exercise(
    id="03.1", kind="predict", title="Exceptions per nop5 hit, kernel by kernel",
    question="Steady state of the bench's `uprobe-nop5` (a probe on a 5-byte nop). How many exceptions per hit "
             "on 6.11, 6.16 and 6.18? Answer whole numbers (exact): `{\"6.11\": ..., \"6.16\": ..., \"6.18\": ...}`.",
    hint="6.11 steps the nop5 out of line; 6.16 emulates every standard nop; 6.18 turns the site into a `call` "
         "into `[uprobes-trampoline]`, which enters the kernel with `syscall`.",
    solution="""import uprobe_lab as ul
answer = {k: ul.events_per_hit("uprobe-nop5", "x86_64", k).get("exceptions", 0) for k in ("6.11", "6.16", "6.18")}""",
    explanation="Two (int3 + #DB), one (int3, emulated), none (a syscall instead): each release removed a trap.",
    expected=lambda: {k: events_per_hit("uprobe-nop5", "x86_64", k).get("exceptions", 0) for k in NOP5_KERNELS},
    judge=j.per_item(str, j.number(), lambda k, n: "what does that release do with a probed nop5: step it, emulate "
                                                   "it, or call the trampoline?"),
    why=lambda e: "The emulator counts " + ", ".join(f"{k}: {v}" for k, v in e.items()) + ".",
)

exercise(
    id="03.2", kind="predict", title="What does another CPU decode mid-patch?",
    question="6.18 rewrites the probed nop5 into `call [uprobes-trampoline]` while other CPUs may be executing "
             "it. The int3 is already on byte 0. What is the **first instruction** a CPU entering the site meets "
             "right after the kernel wrote bytes 1..4, and right after it wrote byte 0? Answer mnemonics: "
             "`{\"bytes 1..4\": ..., \"byte 0\": ...}`.",
    hint="Byte 0 is what a CPU decodes first. Until byte 0 changes, what is there?",
    solution="""from uprobe_lab.views.nop5 import patch_run
answer = {}
for stage in patch_run("6.18").stages[:6]:          # the optimise half: start, sync, write, sync, write, sync
    if stage.action == "write":
        key = "bytes 1..4" if stage.what.startswith("bytes") else "byte 0"
        answer[key] = stage.listing[0][2].split()[0]""",
    explanation="While byte 0 is `int3` every CPU traps into the kernel, whatever bytes 1..4 hold, so they can be "
                "rewritten safely; the last write (byte 0 = `e8`) makes the whole `call` appear at once "
                "(`int3_update`, with a sync of every CPU after each write).",
    expected=first_insn_after_writes,
    judge=j.per_item(str, j.value(), lambda k, m: "which byte does a CPU decode first, and what is on it then?"),
    why=lambda e: f"The lab's patch log: after bytes 1..4 the site starts with {e['bytes 1..4']}, after byte 0 "
                  f"with {e['byte 0']}.",
)

exercise(
    id="03.3", kind="predict", title="A nop5 across a page boundary",
    question="`uprobe-nop5-pagecross` probes a nop5 whose bytes straddle two pages. How many exceptions per hit "
             "does it cost on 6.18? A whole number (exact).",
    hint="`can_optimize()` refuses a site it cannot rewrite atomically. What does 6.18 do with a nop5 it will not "
         "optimise - what did 6.16 do?",
    solution="""import uprobe_lab as ul
answer = ul.events_per_hit("uprobe-nop5-pagecross", "x86_64", "6.18")["exceptions"]""",
    explanation="Not optimised, so it stays an int3 probe - but still emulated as a nop (6.16's rule): one "
                "exception per hit instead of none.",
    expected=lambda: events_per_hit("uprobe-nop5-pagecross", "x86_64", "6.18").get("exceptions", 0),
    judge=j.number(),
    why=lambda e: f"The emulator counts {e} exception(s) per hit: the site keeps its int3.",
)


def _redzone_writes() -> set[int]:
    return set(check_transparency("redzone_leaf_nop5", "6.18").redzone_changed)


def _offset(value) -> int:
    text = j.word(value).replace("rsp", "").replace(" ", "")
    return int(j.as_number(text))


exercise(
    id="03.4", kind="break it", title="The red zone",
    question="`redzone_leaf_nop5` is a leaf function that keeps a live value at `rsp-8` (the red zone) and has a "
             "nop5 right after the store. Probe it on 6.18 and hit it until it is optimised. Which red-zone "
             "offsets does the probe overwrite? Answer a set of negative offsets from the leaf's rsp at the probe "
             "site (its rsp on entry: a leaf does not move it), e.g. `{-8}`.",
    hint="The optimised site is a `call`: where does a call store its return address? Then the trampoline "
         "saves registers before its `syscall` - how many words does it push?",
    solution="""from uprobe_lab.x86.redzone_programs import check_transparency
report = check_transparency("redzone_leaf_nop5", "6.18")
print(report)
answer = set(report.redzone_changed)""",
    explanation="The `call` pushes the return address at rsp-8 and the trampoline pushes three more registers "
                "below it: the leaf's live value is gone. Chapter 03b's nop10 scheme moves rsp below the red "
                "zone first.",
    expected=_redzone_writes,
    judge=j.same_set(_offset, "offset(s)"),
    why=lambda e: "The lab's transparency check saw writes at " + ", ".join(f"rsp{o:+d}" for o in sorted(e)) + ".",
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
