"""How run_bench_uprobes.sh lines look in the posted texts (tests/data/seeds, tests/data/outside_seeds), for
the tests that check the published CSVs against them."""
import re

# quote marks ("> > ", "# "), and the "-->" a mail puts before the row it means
QUOTE = re.compile(r"^\s*(?:[>#]\s*)*(?:-->)?\s*")
# "uprobe-nop     :    3.252 ± 0.019M/s", "uprobe-nop      ( 1 cpus):    0.424 ± 0.000M/s  (...)", with the
# speedup some mails add after it ("< 31% speed up")
BENCH_LINE = re.compile(
    r"^(?P<bench>[a-z][a-z0-9-]*)\s*(?:\(\s*\d+ cpus\))?\s*:\s*(?P<value>\d+\.\d+) ± (?P<pm>\d+\.\d+)M/s"
    r"(?:.*<\s*(?P<speedup>\d+%) speed ?up)?"
)
