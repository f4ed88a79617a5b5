"""Chapter 05: the published tables and the cost model."""
from __future__ import annotations

import re

import pandas as pd

from .. import LabError, model
from ..published import load_published, seed_speedups
from .core import exercise
from . import judges as j


ASKED = "uretprobe-nop"  # the bench exercise 05.5 asks the learner to predict


def _seed_gain(source_prefix: str, table: str, bench: str) -> float:
    s = seed_speedups()
    row = s[s["source"].str.startswith(source_prefix) & (s["table"] == table) & (s["bench"] == bench)]
    if len(row) != 1:
        raise LabError(f"seed {source_prefix} table {table} has {len(row)} rows for {bench}")
    return float(row["speedup_pct"].iloc[0])


def _prose_gain(source_prefix: str, table: str, bench: str) -> float:
    """The gain the two figures a seed's prose quotes for a row give ("from 0.868M/s/cpu to 1.1238M/s/cpu"),
    read from the row's ``note`` in the lab's copy of the tables."""
    pub = load_published()
    notes = pub[pub["source"].str.startswith(source_prefix) & (pub["table"] == table) & (pub["bench"] == bench)
                & pub["note"].notna()]["note"]
    found = [m for m in (re.search(r"from ([\d.]+)\s*M/s(?:/cpu)? to ([\d.]+)\s*M/s", n) for n in notes) if m]
    if len(found) != 1:
        raise LabError(f"seed {source_prefix} table {table}: {len(found)} prose figures for {bench}")
    before, after = (float(x) for x in found[0].groups())
    return 100.0 * (after / before - 1.0)


def _stated_gain(source_prefix: str, table: str, bench: str) -> float:
    """The percentage a seed's prose states for a row (its ``stated_speedup``)."""
    s = seed_speedups()
    row = s[s["source"].str.startswith(source_prefix) & (s["table"] == table) & (s["bench"] == bench)
            & s["stated_pct"].notna()]
    if len(row) != 1:
        raise LabError(f"seed {source_prefix} table {table}: {len(row)} stated gains for {bench}")
    return float(row["stated_pct"].iloc[0])


PROSE_ROW = ("001", "kunpeng916-bench", "uprobe-push")  # exercise 05.4's row


def _judge_prose_gain(answer, expected: float) -> tuple[bool, str]:
    """Exercise 05.4: too high or too low, and the prose's stated percentage or the table's ratio named as what
    it is."""
    ok, reason = _PROSE_NUMBER(answer, expected)
    if ok:
        return ok, reason
    got, near = j.as_number(answer), _PROSE_NUMBER.tolerance + 1e-9
    if abs(got - _stated_gain(*PROSE_ROW)) <= near:
        reason = (f"{reason.rstrip('.')}: {got:g}% is the percentage the prose states, not the ratio of the "
                  "prose's own two figures - work that out from them.")
    elif abs(got - _seed_gain(*PROSE_ROW)) <= near:
        reason = (f"{reason.rstrip('.')}: {got:g}% is the ratio of the table's two figures, not of the prose's - "
                  "the question asks what the prose's own figures give.")
    return ok, reason


_PROSE_NUMBER = j.number(0.15, "%")
_judge_prose_gain.tolerance = _PROSE_NUMBER.tolerance


NOP5_STEP = ("6.11", "6.18")  # exercise 05.3: the nop5 optimisation, stepped nop5 -> call into the trampoline
MOVED_PRICES = ("xol_step", "uaccess", "handler")  # the prices exercise 05.3 doubles


def _model_gain(profile, bench: str = "uretprobe-nop", before: str = "6.10", after: str = "6.11") -> float:
    return 100.0 * (profile.predict(bench, after) / profile.predict(bench, before) - 1.0)


def _direction_when_doubled() -> dict[str, str]:
    intel = model.get_profile("intel")
    base = _model_gain(intel, "uprobe-nop5", *NOP5_STEP)
    out = {}
    for price in MOVED_PRICES:
        gain = _model_gain(intel.with_prices(**{price: 2 * intel.prices[price]}), "uprobe-nop5", *NOP5_STEP)
        out[price] = "grow" if gain > base else "shrink"
    return out


def _why_this_way(price: str, _expected: str) -> str:
    kinds = " and ".join(model.PRICES[price][0])
    return (f"a dearer {price} adds to a kernel's ns per hit in proportion to its {kinds} per hit: compare those "
            f"counts on {NOP5_STEP[0]} and {NOP5_STEP[1]}, and remember the gain is "
            f"t({NOP5_STEP[0]}) / t({NOP5_STEP[1]}) - 1")


exercise(
    id="05.1", kind="predict", title="Read a speedup off a seed table",
    question="Seed 001 (the arm64 STP patch, on a Kunpeng916) also timed Redis GET with a uprobe on a function "
             "entry's STP: 46750.82 requests/s with the STP single-stepped and 48981.19 requests/s with it "
             "emulated. By how many percent did emulating the STP raise the request rate? Answer in percent, "
             "±0.15.",
    hint="Speedup % = 100 × (after / before − 1); requests per second are a rate, so higher is better, as with "
         "M/s.",
    solution="""answer = 100 * (48981.19 / 46750.82 - 1)
# or from the lab's copy of the tables:
from uprobe_lab.published import seed_speedups
s = seed_speedups()
print(s[s["table"] == "redis"][["bench", "before", "after", "speedup_pct"]])""",
    explanation=f"v2 of the same patch lifts the bench's `uprobe-push` by about "
                f"{_seed_gain('001', 'kunpeng916-bench', 'uprobe-push'):.0f}% (the Kunpeng chart above); the Redis "
                "figures are v1's, which stored the pushed registers with a copy to user memory instead of v2's "
                "pinned page. A bench does little besides hitting the probe, while a Redis request spends most "
                "of its time elsewhere, so a saving per hit is a few percent of a request.",
    expected=lambda: _seed_gain("001", "redis", "redis-get"),
    judge=j.number(0.15, "%"),
    why=lambda e: f"From the table's own figures: +{e:.2f}%.",
)

NOP5_EMULATED = ("6.11", "6.16")  # exercise 05.2: the nop5 stepped, then emulated after its int3


def _other_profile(got: float) -> str:
    """Exercise 05.2's wrong number, named where it is another x86 profile's prediction (the chart's Intel line)."""
    asked = model.get_profile("amd").name
    for name in model.profile_names("x86_64"):
        gain = _model_gain(model.get_profile(name), "uprobe-nop5", *NOP5_EMULATED)
        if name != asked and abs(got - gain) <= _AMD_NUMBER.tolerance:
            return f"that is the {name} profile's prediction; the question asks the amd profile's."
    return "price the events that 6.16 drops against those every hit still pays, with the amd profile's prices."


_AMD_NUMBER = j.number(1.0, "%", because=_other_profile)


exercise(
    id="05.2", kind="predict", title="What an upgrade buys, on a profile",
    question="Take the model's `amd` profile (the Ryzen 7 5700U's prices, fitted on its before-rows; that CPU "
             "never ran a nop5 bench). What gain does it predict for `uprobe-nop5` from 6.11 to 6.16, in "
             "percent, ±1? Predict it from the events first: 6.11 single-steps the nop5 (its int3, then the "
             "step and its #DB), 6.16 emulates it after the int3.",
    hint="`p = model.get_profile(\"amd\")`; `p.predict(bench, kernel)` gives M/s, and `p.prices` the fitted "
         "prices in ns.",
    solution="""from uprobe_lab import model
p = model.get_profile("amd")
answer = 100 * (p.predict("uprobe-nop5", "6.16") / p.predict("uprobe-nop5", "6.11") - 1)""",
    explanation="The gain is the 6.11 time per hit over the 6.16 one, less 1: what 6.16 drops (one exception and "
                "the out-of-line step) against what every hit still pays (the int3, the handler). The AMD "
                "profile's exception is dear and its step cheap next to the Intel laptop's, so the same change "
                "buys it less than the Intel line in the chart above shows.",
    expected=lambda: _model_gain(model.get_profile("amd"), "uprobe-nop5", *NOP5_EMULATED),
    judge=_AMD_NUMBER,
    why=lambda e: f"The amd profile predicts +{e:.1f}% for this CPU.",
)

exercise(
    id="05.3", kind="predict", title="Move a price",
    question="Take the `intel` profile and the nop5 optimisation: `uprobe-nop5` from 6.11 (the nop5 "
             "single-stepped) to 6.18 (a `call` into the trampoline and `sys_uprobe`). Double one price at a "
             "time: does the predicted gain grow or shrink when **xol_step** doubles, when **uaccess** doubles "
             "and when **handler** doubles? Answer `{\"xol_step\": \"grow\" or \"shrink\", \"uaccess\": ..., "
             "\"handler\": ...}`.",
    hint="The breakdown above (`intel`) shows what a `uprobe-nop5` hit pays on 6.11 and on 6.18, price by price.",
    solution="""from uprobe_lab import model
p = model.get_profile("intel")
def gain(prof):
    return prof.predict("uprobe-nop5", "6.18") / prof.predict("uprobe-nop5", "6.11") - 1
answer = {price: "grow" if gain(p.with_prices(**{price: 2 * p.prices[price]})) > gain(p) else "shrink"
          for price in ("xol_step", "uaccess", "handler")}""",
    explanation="The gain is t(6.11) / t(6.18) − 1. Only 6.11 steps out of line, so a dearer step lengthens the "
                "old time alone; only 6.18 copies to and from user memory (the trampoline's saved registers), so "
                "dearer copies lengthen the new time alone; both pay the same lookup and consumer run, and the "
                "same nanoseconds added to both times bring their ratio closer to 1.",
    expected=_direction_when_doubled,
    judge=j.per_item(j.word, j.choice(("grow", "shrink")), _why_this_way),
    why=lambda e: "The model, re-priced: " + ", ".join(f"{p} doubled → {e[p]}" for p in MOVED_PRICES) + ".",
)

exercise(
    id="05.4", kind="break it", title="When the prose and the table disagree",
    question="Seed 001's prose says `uprobe-push` went \"from 0.868M/s/cpu to 1.1238M/s/cpu\" and calls that "
             "29.3%; its table (charted above) has 0.868 and 1.128 M/s. What gain do the prose's own two "
             "figures give, in percent, ±0.15?",
    hint="Speedup % = 100 × (after / before − 1), with the prose's figures, not the table's.",
    solution="""answer = 100 * (1.1238 / 0.868 - 1)""",
    explanation="The prose's two figures, its stated percentage and its table give three different gains. The "
                "lab keeps the table's ratio as `speedup_pct`, the stated figure as `stated_speedup`, marks the "
                "row `differs`, and records the prose's figures in `note`. When a source contradicts itself, "
                "show every version.",
    expected=lambda: _prose_gain(*PROSE_ROW),
    judge=_judge_prose_gain,
    why=lambda e: f"The prose's own figures give +{e:.2f}%.",
)


OWN_TOLERANCE = 0.01  # M/s: exercise 05.5's prediction counts as the model's within this


def _own_prediction(answer, lab) -> tuple[bool, str]:
    if not isinstance(answer, (tuple, list)) or len(answer) != 3 or not isinstance(answer[0], pd.DataFrame) \
            or not isinstance(answer[2], dict):
        raise LabError("give (measured DataFrame, target kernel, {bench: predicted M/s})")
    measured, kernel, said = answer
    said = {j.word(b): v for b, v in said.items()}
    right = lab(measured, str(kernel)).set_index("bench")["predicted_mops"].to_dict()
    if ASKED not in right:
        raise LabError(f"your measured table has no {ASKED} row: the question predicts {ASKED} from it")
    unknown = [b for b in said if b not in right]
    if unknown:
        raise j.not_known(unknown, right, "a bench of your measured table", "benches it has")
    said_wrong = [f"no prediction for {ASKED} (the question asks for it)"] if ASKED not in said else []
    unasked = [b for b in said if b != ASKED]
    said_wrong += [f"not asked: {', '.join(unasked)} (the question asks for {ASKED} only)"] if unasked else []
    if said_wrong:
        text = "; ".join(said_wrong)
        return False, text[0].upper() + text[1:] + "."
    got, want = j.as_number(said[ASKED]), right[ASKED]
    if abs(got - want) > OWN_TOLERANCE + 1e-9:  # too high or too low; the model's figure comes with ex.why
        return False, (f"{ASKED}: {got:g} M/s is too {'high' if got > want else 'low'} for the model fitted on "
                       f"your table.")
    return True, f"Your prediction matches the model's fit on your numbers for {kernel}."


_own_prediction.tolerance = OWN_TOLERANCE


exercise(
    id="05.5", kind="open", title="Predict your own machine",
    question="Measure (or make up plausible) 6.10 figures for a machine - `usermode-count`, `syscall-count`, "
             "`uprobe-nop`, `uprobe-ret`, `uretprobe-nop` - and predict what 6.11 gives it. First write down your own guess "
             "for `uretprobe-nop`, then check the model's: `answer = (mine, \"6.11\", {\"uretprobe-nop\": ...})`; "
             "within ±0.01 M/s of the model's figure counts as the same.",
    hint="The last cell above builds such a table (`mine`) and calls `model.predict_from_measured`.",
    solution="""import pandas as pd
from uprobe_lab import model
mine = pd.DataFrame({"arch": "x86_64", "kernel": "6.10",
                     "bench": ["usermode-count", "syscall-count", "uprobe-nop", "uprobe-ret", "uretprobe-nop"],
                     "mops": [800.0, 15.0, 2.8, 1.2, 1.4]})  # usermode-count: the loop with no probe (seed 003: 819)
pred = model.predict_from_measured(mine, "6.11").set_index("bench")["predicted_mops"]
answer = (mine, "6.11", {"uretprobe-nop": pred["uretprobe-nop"]})""",
    explanation="The model fits this machine's prices on your five rows (with priors carried from the lab's "
                "host recordings) and scales each bench by the ratio of its 6.11 and 6.10 event prices; only the uretprobe "
                "benches change.",
    expected=lambda: model.predict_from_measured,
    judge=_own_prediction,
    why=lambda lab: "The lab fitted prices on your measured rows and priced the target kernel's events: "
                    "`model.predict_from_measured(mine, \"6.11\")` lists its figure for every bench.",
)
