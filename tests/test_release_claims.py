"""Every kernel commit the course names has a row in docs/references.md ("Kernel commits the course cites") with
the release it reached mainline in and the notice that says so; a release written beside a commit id is its row's."""
import re
import subprocess
from pathlib import Path

import pytest

from reference_tables import section_rows
from uprobe_lab.kernel import RULES, version_name

ROOT = Path(__file__).resolve().parents[1]
REFERENCES = ROOT / "docs" / "references.md"
# an abbreviated commit id as the course writes it: 12 lower-case hex digits, not part of a longer word, a number
# (0x...), a message id (<...-52caae46f8b2@huawei.com>) or a path
COMMIT_ID = r"(?<![0-9A-Za-z_@.\-/])([0-9a-f]{12})(?![0-9A-Za-z_])"
# 12 hex digits that are no commit
NOT_COMMITS = {"660f1f440000": "x86_nops[6], bytes in uprobe_lab/x86/asm.py"}
RELEASE = r"(?<![\d.])(\d\.\d{1,2})(?![\d.])"
# a release written beside an id: "6.13 (dd1a7567784e", "6.14** (e0925f2dc4de", "6.14's 8622e45b5da1",
# "10cdb82aa77f (6.12", "d55c571e4333, 7.0", "(5.13, 18107f8a2df6"
BESIDE = [RELEASE + r"\**(?:'s)? \(?" + COMMIT_ID, COMMIT_ID + r",? \(?" + RELEASE, r"\(" + RELEASE + ", " + COMMIT_ID]


def commit_rows(text: str | None = None) -> dict[str, dict]:
    """The rows of the tables under "## Kernel commits the course cites": id -> mainline release, release, source."""
    rows = {}
    for commits, _, release, source in section_rows("Kernel commits the course cites", 4, "[", text):
        mainline = re.match(r"(\d+\.\d+)\b", release)
        for commit in re.findall(r"\[([0-9a-f]{12})\]", commits):
            rows[commit] = {"mainline": mainline and mainline.group(1), "release": release, "source": source}
    return rows


def course_texts() -> dict[str, str]:
    """The notebooks, docs, README and package text a learner reads (references.md itself aside)."""
    names = subprocess.run(["git", "ls-files", "notebooks/*.ipynb", "docs/*.md", "README.md", "uprobe_lab"],
                           cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    return {name: (ROOT / name).read_text() for name in names
            if name.endswith((".ipynb", ".md", ".py")) and name != "docs/references.md"}


def unlisted_commits(texts: dict[str, str], rows: dict[str, dict]) -> list[str]:
    return sorted({f"{name}: {commit}" for name, text in texts.items() for commit in re.findall(COMMIT_ID, text)
                   if commit not in rows and commit not in NOT_COMMITS})


def releases_that_disagree(texts: dict[str, str], rows: dict[str, dict]) -> list[str]:
    wrong = set()
    for name, text in texts.items():
        for pattern in BESIDE:
            for m in re.finditer(pattern, text):
                release, commit = sorted(m.groups(), key=lambda g: len(g))
                row = rows.get(commit)
                if row and row["mainline"] != release:
                    wrong.add(f"{name}: {m.group()!r}, its row says {row['mainline']}")
    return sorted(wrong)


def test_every_commit_id_the_course_names_has_a_row():
    assert unlisted_commits(course_texts(), commit_rows()) == []


def row_problems(rows: dict[str, dict]) -> list[str]:
    """Rows without a mainline release, or without the notice it was read from."""
    rules = {r.commit: r for r in RULES}
    problems = []
    for commit, row in rows.items():
        rule = re.fullmatch(r"rule `(\w+)`", row["source"])
        if not row["mainline"]:
            problems.append(f"{commit}: no mainline release ({row['release']!r})")
        elif rule:  # the notices are in the rule's row under "Rule sources" (tests/test_kernel_rules.py)
            if commit not in rules or rules[commit].name != rule.group(1):
                problems.append(f"{commit}: rule {rule.group(1)} has another commit")
            elif row["mainline"] != version_name(rules[commit].since):
                problems.append(f"{commit}: {row['mainline']}, its rule {version_name(rules[commit].since)}")
        elif len(row["source"]) < 40:
            problems.append(f"{commit}: no notice cited ({row['source']!r})")
    return problems


def test_every_row_names_its_mainline_release_and_the_notice_it_was_read_from():
    assert row_problems(commit_rows()) == []


def test_every_rule_commit_has_a_row():
    assert sorted(r.commit for r in RULES if r.commit not in commit_rows()) == []


def test_a_release_written_beside_a_commit_is_its_rows():
    assert releases_that_disagree(course_texts(), commit_rows()) == []


@pytest.mark.parametrize("text, caught", [
    ("reverted in 5.5 (24cecc377463)", []),
    ("reverted in 5.6 (24cecc377463)", ["5.6 (24cecc377463"]),
    ("came back (5.12, 18107f8a2df6)", ["(5.12, 18107f8a2df6"]),
    ("until 8a5c6cbfe4a3 (6.18) replaced it", ["8a5c6cbfe4a3 (6.18"]),
])
def test_the_checks_catch_a_wrong_release(text, caught):
    found = releases_that_disagree({"x.md": text}, commit_rows())
    assert [c for c in caught if not any(c in f for f in found)] == [] and len(found) == len(caught)


def test_the_checks_catch_an_id_with_no_row():
    text = "a queue id 7cdb5321ced2 is no mainline commit; 0x7fffffffe080 and <a-52caae46f8b2@huawei.com> are no ids"
    assert unlisted_commits({"x.md": text}, commit_rows()) == ["x.md: 7cdb5321ced2"]


@pytest.mark.parametrize("old, new, problem", [
    ("| 7.0; stable 5.15.y, 6.1.y |", "| stable |", "d55c571e4333: no mainline release ('stable')"),
    ("| 6.13 | rule `xol_no_slot_count` |", "| 6.12 | rule `xol_no_slot_count` |", "7a166094bd2b: 6.12, its rule 6.13"),
    ("| 6.12 | same pull and FAILED mails as 6d27a31ef195 |", "| 6.12 | a mail |", "2abbcc099ec6: no notice cited"),
])
def test_the_row_check_catches_a_row_without_release_or_notice(old, new, problem):
    doc = REFERENCES.read_text()
    assert old in doc
    assert [p for p in row_problems(commit_rows(doc.replace(old, new))) if p.startswith(problem)] != []
