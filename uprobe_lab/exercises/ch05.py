"""Chapter 05: the published tables and the cost model."""
from __future__ import annotations

import pandas as pd

from .. import LabError, model
from ..published import seed_speedups
from .core import exercise
from . import judges as j


ASKED = "uretprobe-nop"  # the bench exercise 05.5 asks the learner to predict


def _seed_gain(source_prefix: str, table: str, bench: str) -> float:
    s = seed_speedups()
    row = s[s["source"].str.startswith(source_prefix) & (s["table"] == table) & (s["bench"] == bench)]
    if len(row) != 1:
        raise LabError(f"seed {source_prefix} table {table} has {len(row)} rows for {bench}")
    return round(float(row["speedup_pct"].iloc[0]), 1)


def _model_gain(profile, bench: str = "uretprobe-nop", before: str = "6.10", after: str = "6.11") -> float:
    return 100.0 * (profile.predict(bench, after) / profile.predict(bench, before) - 1.0)


def _direction_when_doubled() -> dict[str, str]:
    intel = model.get_profile("intel")
    base = _model_gain(intel)
    out = {}
    for price in ("syscall", "exception"):
        gain = _model_gain(intel.with_prices(**{price: 2 * intel.prices[price]}))
        out[price] = "grow" if gain > base else "shrink"
    return out


exercise(
    id="05.1", kind="predict", title="Read a speedup off a seed table",
    question="Seed 000 (the uretprobe syscall series) measured `uretprobe-nop` on an Intel i7-1165G7: 1.498 M/s on "
             "6.10 and 1.969 M/s with the patch. By how many percent did it improve? One decimal.",
    hint="Speedup % = 100 × (after / before − 1).",
    solution="""answer = round(100 * (1.969 / 1.498 - 1), 1)
# or from the lab's copy of the tables:
from uprobe_lab.published import seed_speedups
s = seed_speedups()
print(s[(s["table"] == "intel") & (s["bench"] == "uretprobe-nop")][["before", "after", "speedup_pct", "stated_speedup"]])""",
    explanation="The mail says \"31%\": the lab's `agreement` column records whether a stated figure is the "
                "table's own ratio rounded, truncated, or different.",
    expected=lambda: _seed_gain("000", "intel", "uretprobe-nop"),
    judge=j.number(0.15, "%"),
    why=lambda e: f"From the table's own figures: +{e}%.",
)

exercise(
    id="05.2", kind="predict", title="What an upgrade buys, on a profile",
    question="Take the model's `intel` profile (prices fitted on that CPU's before-rows). What gain does it "
             "predict for `uretprobe-nop` from 6.10 to 6.11, in percent (within 1 point)? Predict it from the "
             "events first: one exception is traded for one syscall.",
    hint="`p = model.get_profile(\"intel\")`; `p.predict(bench, kernel)` gives M/s.",
    solution="""from uprobe_lab import model
p = model.get_profile("intel")
answer = 100 * (p.predict("uretprobe-nop", "6.11") / p.predict("uretprobe-nop", "6.10") - 1)""",
    explanation="Compare with exercise 05.1: the prediction is close to the measured gain although no 6.11 row "
                "was used in the fit.",
    expected=lambda: round(_model_gain(model.get_profile("intel")), 1),
    judge=j.number(1.0, "%"),
    why=lambda e: f"The model predicts +{e}% for this CPU.",
)

exercise(
    id="05.3", kind="predict", title="Move a price",
    question="Double one price of the `intel` profile at a time. Does the predicted 6.10 → 6.11 gain of "
             "`uretprobe-nop` grow or shrink when the **syscall** price doubles, and when the **exception** price "
             "doubles? Answer `{\"syscall\": \"grow\" or \"shrink\", \"exception\": ...}`. (The sliders above do "
             "the same.)",
    hint="6.11 removes an exception from every hit and adds a syscall.",
    solution="""from uprobe_lab import model
p = model.get_profile("intel")
def gain(prof):
    return prof.predict("uretprobe-nop", "6.11") / prof.predict("uretprobe-nop", "6.10") - 1
answer = {price: "grow" if gain(p.with_prices(**{price: 2 * p.prices[price]})) > gain(p) else "shrink"
          for price in ("syscall", "exception")}""",
    explanation="A dearer syscall makes what 6.11 adds dearer (the gain shrinks); a dearer exception makes what "
                "it removes dearer (the gain grows).",
    expected=_direction_when_doubled,
    judge=j.per_item(j.word, j.choice(("grow", "shrink")), lambda k, d: f"the gain would {d}"),
    why=lambda e: "The model, re-priced: syscall doubled → " + e["syscall"] + ", exception doubled → "
                  + e["exception"] + ".",
)

exercise(
    id="05.4", kind="break it", title="When the prose and the table disagree",
    question="Seed 001's text says uprobe-push improves by 29.3% (\"0.868 to 1.1238\"). Its own table gives "
             "0.868 and 1.128 M/s. What speedup does the table give, in percent (one decimal)?",
    hint="Use the table's numbers, not the prose's.",
    solution="""answer = round(100 * (1.128 / 0.868 - 1), 1)""",
    explanation="The lab keeps both: `stated_speedup` as the mail says it and `speedup_pct` from the table, and "
                "marks the row `differs`. When a source contradicts itself, show both.",
    expected=lambda: _seed_gain("001", "kunpeng916-bench", "uprobe-push"),
    judge=j.number(0.15, "%"),
    why=lambda e: f"The table's own figures give +{e}%, not 29.3%.",
)


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
    wrong = [f"No prediction for {ASKED} (the question asks for it)"] if ASKED not in said else []
    wrong += [f"{b}: you have {j.as_number(v):.3f}, the model gives {right[b]:.3f}" for b, v in said.items()
              if abs(j.as_number(v) - right[b]) > 0.01]
    if wrong:
        return False, "; ".join(wrong) + "."
    return True, f"Your predictions match the model's fit on your numbers for {kernel}."


exercise(
    id="05.5", kind="open", title="Predict your own machine",
    question="Measure (or make up plausible) 6.10 figures for a machine - `usermode-count`, `syscall-count`, "
             "`uprobe-nop`, `uprobe-ret`, `uretprobe-nop` - and predict what 6.11 gives it. First write down your own guess "
             "for `uretprobe-nop`, then check the model's: `answer = (mine, \"6.11\", {\"uretprobe-nop\": ...})`; within "
             "0.01 M/s of the model's figure counts as the same.",
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
    why=lambda lab: "The lab fitted prices on your measured rows and priced the target kernel's events.",
)
