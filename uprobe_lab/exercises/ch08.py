"""Chapter 08: probing a program of your own, and the capstone."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .. import LabError, analyze
from ..bench import events_per_hit
from ..model import Z80, get_profile
from ..own_program import hit_verdict, overhead
from ..views.many_cpus import shared_writes
from .core import Remembered, exercise
from . import judges as j

# The capstone's service: an Intel i7-1165G7 (seed 000's CPU, a profile fitted to its published rows)
CAPSTONE_CPU = "intel-i7-1165g7"
CAPSTONE_RATE = 200_000  # calls per second
CAPSTONE = {  # the probe -> (the bench target whose hit takes the same path, the kernel)
    "uprobe 6.18": ("uprobe-ret", "6.18"),  # the function's entry is a stepped instruction
    "usdt 6.18": ("usdt-nop5", "6.18"),  # a USDT site with libbpf's nop5 combo
    "usdt 7.3": ("usdt-nop10", "7.3"),  # the nop10 combo
}
# relative: room for a count priced by hand. It is no 80% interval: the profile's is narrower for the stepped
# entry (about +-3%) and wider for the USDT sites (about +-21%)
TOLERANCE = 0.15


def capstone_interval() -> dict[str, tuple[float, float, float]]:
    """Per probe: (ns of one hit, low, high), its events priced with the i7's fitted profile; low-high is the
    profile's 80% predictive interval (mean +- Z80 sd)."""
    profile = get_profile(CAPSTONE_CPU)
    out = {}
    for label, (bench, kernel) in CAPSTONE.items():
        ns, sd = profile.hit_interval(events_per_hit(bench, "x86_64", kernel))
        out[label] = (ns, ns - Z80 * sd, ns + Z80 * sd)
    return out


def capstone_ns() -> dict[str, float]:
    """Per probe: the ns of one hit, its events priced with the i7's fitted profile (unrounded: a tolerance is
    judged against the figure itself)."""
    return {label: ns for label, (ns, _, _) in capstone_interval().items()}


def capstone_overhead_interval() -> dict[str, tuple[float, float, float]]:
    """Per probe: (share of one CPU in %, low, high) at CAPSTONE_RATE calls a second, from the hit's 80% interval."""
    return {label: tuple(100 * overhead(CAPSTONE_RATE, ns) for ns in t) for label, t in capstone_interval().items()}


def capstone_overhead() -> dict[str, float]:
    """Per probe: the share of one CPU (in %) the probe takes at CAPSTONE_RATE calls a second."""
    return {label: 100 * overhead(CAPSTONE_RATE, ns) for label, ns in capstone_ns().items()}


def capstone_shared() -> set[str]:
    """The probes whose hit writes a line other CPUs write (chapter 07's count under their kernel's rules)."""
    return {label for label, (bench, kernel) in CAPSTONE.items() if shared_writes(bench, [kernel])[kernel]}


def stepped_entry_writes() -> float:
    """Writes per hit to lines other CPUs also write, for the capstone's stepped entry under its kernel's rules."""
    bench, kernel = CAPSTONE["uprobe 6.18"]
    return shared_writes(bench, [kernel])[kernel]


def _within(got: Any, want: float) -> tuple[bool, str]:
    """Within TOLERANCE of the lab's figure (relative)."""
    return abs(j.as_number(got) - want) <= TOLERANCE * want, ""


def _judge_within(unit: str):
    """Probe by probe (keys as :func:`judges.word` spells them), each wrong one said too high or too low; a share
    given as a fraction of the CPU where the question asks a percentage is named as that unit mistake."""
    def judge(answer: Any, expected: dict) -> tuple[bool, str]:
        said = {j.word(k): v for k, v in answer.items()} if isinstance(answer, dict) else {}

        def direction(key: str, want: float) -> str:
            got = j.as_number(said[key])
            told = f"{got:g}{unit} is too {'high' if got > want else 'low'}"
            if unit == "%" and _within(100 * got, want)[0]:
                told += ": a fraction of the CPU, not a percentage"
            return told
        return j.per_item(j.word, _within, direction)(answer, expected)
    return judge


CAPSTONE_KEYS = "`{\"uprobe 6.18\": ..., \"usdt 6.18\": ..., \"usdt 7.3\": ...}`"
CAPSTONE_PROBES = ("as a uprobe on the function's entry, whose first instruction is stepped, on 6.18; as a USDT "
                   "site with libbpf's nop5 combo on 6.18; with its nop10 combo on 7.3")


def recorded_hit_us() -> dict[str, float]:
    """The lab VM's recorded cost of a hit in us: stepped (the getpid probe of chapter 08's recording), emulated
    (uprobe-nop on one CPU in chapter 07's recording)."""
    data = Path(__file__).resolve().parents[1] / "data"
    getpid = json.loads((data / "own_program_6.18.json").read_text())["getpid"]
    nop = next(r for r in json.loads((data / "native_scaling_6.18.json").read_text())["rows"]
               if r["bench"] == "uprobe-nop" and r["cpus"] == 1)
    return {"stepped": getpid["ns_per_hit"] / 1000, "emulated": 1 / nop["mops_per_cpu"]}


# Exercise 08.1: a wrong pick's reason, per instruction and pick. Each says where the pick goes wrong and never
# rules out the other wrong choice too: with three choices, that would leave the answer
ENTRY_REASONS = {
    "4889e5": {
        "emulate": "`mov rbp, rsp` - which instruction classes do branch_setup_xol_ops and push_setup_xol_ops "
                   "take, and which nops does 6.18 emulate (a 0x90 after any prefixes, or one of x86_nops[] byte "
                   "for byte)?",
        "reject": "`mov rbp, rsp` - is its opcode 89, after a REX.W prefix, one that good_insns_64 (the table of "
                  "what the kernel accepts) leaves out?",
    },
    "f30f1efa": {
        "emulate": "`endbr64` - 6.18 emulates a nop only as a 0x90 after any prefixes or one of x86_nops[] byte "
                   "for byte: is `f3 0f 1e fa` either?",
        "reject": "`endbr64` - is its f3 prefix or its 2-byte opcode 0f 1e one that the tables of what the kernel "
                  "accepts (good_insns_64, good_2byte_insns) leave out?",
    },
    "e800000000": {
        "xol": "a `call` - which instruction classes does branch_setup_xol_ops take before anything is given the "
               "default out-of-line ops, and does the call's target matter to it?",
        "reject": "a `call` - is opcode e8 one that good_insns_64 (the table of what the kernel accepts) leaves "
                  "out?",
    },
}


def _judge_entries(answer: Any, expected: dict) -> tuple[bool, str]:
    """Exercise 08.1: instruction by instruction, each wrong pick with :data:`ENTRY_REASONS`' reason for it."""
    said = {j.word(k).replace(" ", ""): v for k, v in answer.items()} if isinstance(answer, dict) else {}
    return j.per_item(lambda k: j.word(k).replace(" ", ""), j.choice(("emulate", "xol", "reject")),
                      lambda k, _: ENTRY_REASONS[k][j.spelling(said[k])])(answer, expected)


exercise(
    id="08.1", kind="predict", title="Where the probe goes",
    question="The chapter showed a `lea`, a `mov` and a `push` at function entries. Three more that start many "
             "functions: `mov rbp, rsp` (`48 89 e5`), `endbr64` (`f3 0f 1e fa`, every function built with "
             "`-fcf-protection`), and `call` to the next instruction (`e8 00 00 00 00`, how 32-bit-style code "
             "finds its own address). How does a 6.18 kernel run a steady-state hit of a probe on each? Answer "
             "`{\"4889e5\": ..., \"f30f1efa\": ..., \"e800000000\": ...}` with `\"emulate\"`, `\"xol\"` or "
             "`\"reject\"`.",
    hint="Chapter 01: the x86 kernel emulates a few instruction classes (pushes, branches and calls, and on 6.18 "
         "the nops it knows byte for byte) and steps everything else it accepts.",
    solution="""import uprobe_lab as ul
answer = {insn: ul.analyze(insn, "x86_64", "6.18")["action"] for insn in ("4889e5", "f30f1efa", "e800000000")}""",
    explanation="The call is emulated (a branch: the kernel pushes the return address and moves ip); `mov` and "
                "`endbr64` are stepped out of line, two exceptions a hit. On the lab's recorded 2-CPU VM a stepped "
                f"hit (getpid's `mov`, this chapter's section 3) cost about {recorded_hit_us()['stepped']:.0f} us, "
                f"an emulated one (chapter 07's uprobe-nop) about {recorded_hit_us()['emulated']:.1f}: where a "
                "function's first instruction is stepped, a probe a few bytes later, on an emulated one, is far "
                "cheaper.",
    expected=lambda: {i: analyze(i, "x86_64", "6.18")["action"] for i in ("4889e5", "f30f1efa", "e800000000")},
    judge=_judge_entries,
    why=lambda e: "The lab decoded each as arch_uprobe_analyze_insn does on 6.18.",
)

exercise(
    id="08.2", kind="predict", title="The capstone, step 1: what one hit costs",
    question=f"A service on an Intel i7-1165G7 calls a probed function {CAPSTONE_RATE:,} times a second, probed "
             f"{CAPSTONE_PROBES}. First, what does one hit cost, in ns, on that CPU? Count each hit's events "
             "(chapters 01, 03 and 03b), then price them with the i7's fitted prices, in ns per event "
             f"(`uprobe_lab.model.get_profile(\"{CAPSTONE_CPU}\").prices`; chapter 05 fitted them). Answer "
             f"{CAPSTONE_KEYS}; within {TOLERANCE:.0%} of the lab's figure counts as right.",
    hint="A stepped entry: the int3's exception, the single step in an XOL slot and its #DB (a second "
         "exception), the probe lookup and the consumer run. An optimised USDT site: one syscall through the "
         "trampoline, the lookup and the consumer run, and the copies `sys_uprobe` makes of the saved registers. "
         "Each event kind has one price in `prices`; a hit costs the sum.",
    solution=f"""from uprobe_lab.bench import events_per_hit
from uprobe_lab.model import Z80, get_profile
profile = get_profile("{CAPSTONE_CPU}")
paths = {{"uprobe 6.18": ("uprobe-ret", "6.18"), "usdt 6.18": ("usdt-nop5", "6.18"), "usdt 7.3": ("usdt-nop10", "7.3")}}
answer = {{}}
for label, (bench, kernel) in paths.items():
    ns, sd = profile.hit_interval(events_per_hit(bench, "x86_64", kernel))  # sd: the profile's predictive error
    answer[label] = ns
    print(f"{{label}}: {{ns:.0f}} ns, 80% interval {{ns - Z80 * sd:.0f}}-{{ns + Z80 * sd:.0f}} ns")""",
    explanation="Each probe's hit takes the path of one of the kernel bench's targets: the stepped entry "
                "`uprobe-ret`'s, the USDT sites `usdt-nop5`'s and `usdt-nop10`'s. The stepped entry pays two "
                "exceptions and the step; an optimised site one syscall and a few copies, about a fifth of that. "
                "Each figure is a prediction: the interval printed beside it (80%, from the fitted prices' "
                "uncertainty and the model's own error) is how far the i7 could be from it - "
                + ", ".join(f"{k} {lo:.0f}-{hi:.0f} ns" for k, (_, lo, hi) in capstone_interval().items()) + ".",
    expected=capstone_ns,
    judge=_judge_within(" ns"),
    why=lambda e: "The lab priced each path's events with the i7's fitted profile: "
                  + ", ".join(f"{k} {v:.0f} ns" for k, v in e.items()) + ".",
)


PROBES = ("emulate", "xol", "optimise", "reject")  # what hit_verdict says a kernel does with the probe
PREDICTED = ("probe", "exceptions")


def _open_bill(insn: str, kernel: str) -> dict:
    """The lab's side of 08.3: the probe and the exceptions of a hit on ``insn`` (hex bytes) on ``kernel``, and
    the instruction as the lab decoded it."""
    verdict = hit_verdict(bytes.fromhex(insn), 0x400000, kernel)  # the address only matters to a page-crossing nop
    return {"probe": verdict["probe"], "exceptions": verdict["exceptions"], "kernel": verdict["kernel"],
            "instruction": verdict["instruction"]}


def _judge_open(answer: Any, lab: Remembered) -> tuple[bool, str]:
    if not (isinstance(answer, (tuple, list)) and len(answer) == 3 and isinstance(answer[2], dict)):
        raise LabError('give (instruction bytes, kernel, {"probe": ..., "exceptions": ...}), e.g. '
                       '("4889e5", "6.18", {"probe": action, "exceptions": count})')
    insn, kernel = j.word(answer[0]).replace(" ", ""), str(answer[1]).strip()
    said = {j.word(k): v for k, v in answer[2].items()}
    unknown = [k for k in said if k not in PREDICTED]
    if unknown:
        raise j.not_known(unknown, PREDICTED, "part of the prediction", "parts")
    try:
        code = bytes.fromhex(insn)
    except ValueError:
        raise LabError(f"{j.shown(answer[0])}: give the instruction's bytes in hex, e.g. \"4889e5\"") from None
    want = lab(code.hex(), kernel)
    missing = [k for k in PREDICTED if k not in said]
    wrong = [f"No prediction for {', '.join(missing)} (the question asks for {', '.join(PREDICTED)})"] \
        if missing else []
    if "probe" in said:  # the learner's word only: the lab's comes with the third wrong try
        if not j.choice(PROBES)(said["probe"], want["probe"])[0]:
            wrong.append(f"probe: not {j.spelling(said['probe'])} - which instructions does {kernel} emulate, "
                         f"step out of line, optimise or refuse?")
    if "exceptions" in said:
        ok, reason = j.number()(said["exceptions"], want["exceptions"])
        if not ok:
            wrong.append(f"exceptions: {reason.rstrip('.')}")
    if wrong:
        return False, "; ".join(wrong) + "."
    return True, ""


def _decoded(insn: str, kernel: str, bill: dict) -> str:
    return (f"The lab decoded {insn} as `{bill['instruction']}`: {bill['kernel']} answers probe {bill['probe']!r}, "
            f"{bill['exceptions']} exception(s) a hit (the bench target that takes its path).")


exercise(
    id="08.3", kind="open", title="A function of yours",
    question="Find a function in a program or library of yours (`function_site(path, name)`; `nm -D` lists a "
             "library's), read its first instruction (`site.listing()`), predict how a kernel of your choice "
             "runs a probe on it (`\"emulate\"`, `\"xol\"` for stepped out of line, `\"optimise\"` or "
             "`\"reject\"`) and the exceptions a steady-state hit costs (exact; an optimised site's first hit "
             "still takes its int3), then check: `answer = (\"4889e5\", \"6.18\", "
             "{\"probe\": ..., \"exceptions\": ...})` (the instruction's bytes, the kernel, your prediction).",
    hint="Emulated: one exception; stepped out of line: two; a nop the kernel optimises into a call: none, a "
         "syscall instead; refused: none (the probe fails at attach).",
    solution="""# glibc's getpid, as function_site(libc, "getpid").listing() shows it: mov eax, 0x27 (b8 27 00 00 00)
answer = ("b827000000", "6.18", {"probe": "xol", "exceptions": 2})""",
    explanation="glibc's getpid starts with `mov eax, 0x27`: stepped, two exceptions a hit.",
    expected=lambda: Remembered(_open_bill),
    judge=_judge_open,
    why=Remembered.why("The lab decoded the instruction and counted the hit of the bench target that takes its path.",
                       _decoded),
)


exercise(
    id="08.4", kind="predict", title="The capstone, step 2: the share of a CPU",
    question=f"With step 1's cost per hit (exercise 08.2): at {CAPSTONE_RATE:,} calls a second, what share of one "
             f"CPU (in %) does each probe take? Answer {CAPSTONE_KEYS}; within {TOLERANCE:.0%} of the lab's "
             "figure counts as right.",
    hint="A CPU has 1e9 ns a second. How many of them do the hits take?",
    solution=f"""from uprobe_lab.exercises.ch08 import capstone_interval
answer = {{}}
for label, (ns, low, high) in capstone_interval().items():  # step 1's ns a hit and its 80% interval
    answer[label] = 100 * {CAPSTONE_RATE} * ns * 1e-9
    print(f"{{label}}: {{answer[label]:.2f}}% of a CPU, 80% interval "
          f"{{100 * {CAPSTONE_RATE} * low * 1e-9:.2f}}-{{100 * {CAPSTONE_RATE} * high * 1e-9:.2f}}%")""",
    explanation="Calls a second times ns a hit, over the 1e9 ns a CPU has each second; step 1's 80% interval "
                "carries over in proportion: "
                + ", ".join(f"{k} {lo:.1f}-{hi:.1f}%" for k, (_, lo, hi) in capstone_overhead_interval().items())
                + ". The stepped entry takes several times what either USDT site takes: where it matters, probe "
                "an emulated instruction further in, or put a USDT site there.",
    expected=capstone_overhead,
    judge=_judge_within("%"),
    why=lambda e: "The lab's figures: " + ", ".join(f"{k} {v:.2f}%" for k, v in e.items()) + ".",
)

exercise(
    id="08.5", kind="predict", title="The capstone, step 3: on 64 CPUs",
    question="The same service on a 64-CPU server, the function called on every CPU at once. For which of the three "
             "probes does each hit write a line that other CPUs also write, so that its cost per hit grows with "
             f"the number of CPUs hitting it? Answer a set of the labels, e.g. `{{\"usdt 7.3\"}}` (or `set()` for "
             "none).",
    hint="Chapter 07: what does a stepped hit hold from its trap to its single-step trap, and what does that take "
         "from the process's shared state? What does an optimised site's hit touch on 6.18 and 7.3?",
    solution="""from uprobe_lab.views.many_cpus import shared_writes
paths = {"uprobe 6.18": ("uprobe-ret", "6.18"), "usdt 6.18": ("usdt-nop5", "6.18"), "usdt 7.3": ("usdt-nop10", "7.3")}
answer = {label for label, (bench, kernel) in paths.items() if shared_writes(bench, [kernel])[kernel]}""",
    explanation="The stepped entry takes an XOL slot (a bit of the area's bitmap, set and cleared), holds a "
                "reference on the probe over the step (taken and dropped) and copies the instruction into its slot "
                "of the shared `[uprobes]` page: "
                f"{stepped_entry_writes():g} writes a hit to lines other CPUs also write, so on 64 CPUs its hits queue for those lines and a "
                "hit costs more than step 1 says. The optimised sites' hits share nothing from 6.14 on.",
    expected=capstone_shared,
    judge=j.same_set(j.word, "probe(s)"),
    why=lambda e: "Chapter 07's count of shared writes per hit under each kernel's rules names "
                  + (", ".join(sorted(e)) if e else "none") + ".",
)
