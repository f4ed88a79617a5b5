"""What a forked child inherits from a probed process, asked of this host's kernel and of the emulator.

For each site of :data:`FORK_SITES` a fresh process attaches a uprobe, calls the site twice (an
optimisable nop is rewritten after its first hit), then forks. The child looks at its copy of the site
and at its special mappings, calls the site twice itself, and exits. The answers, per site:

* ``attach``: accepted, or refused (the nop10 before 7.3 or 7.2.6);
* ``parent site`` / ``child site``: the site in words (:func:`uprobe_lab.sites.site_state`): ``int3``,
  ``call [uprobes-trampoline]``, or ``call into an unmapped page``;
* ``parent maps`` / ``child maps`` / ``child maps after``: the uprobe special mappings each has (the
  child's before and after its own calls);
* ``child``: ``exit 0`` or the signal that killed it; ``child hits``: the consumer's runs for its calls.

On 6.18 the optimised nop5 is a ``call`` into a page mapped VM_DONTCOPY, so the child's copy calls an
unmapped page and dies of SIGSEGV; 7.3 copies the trampoline (d9a48e77f6fe) and the child's calls are
probe hits like the parent's. ``[uprobes]`` is VM_DONTCOPY on every version: a child that needs it maps
its own. The host side counts hits with one perf event for every process (pid -1) bound to the CPU both
processes are pinned to, and must run in a process no earlier probe touched (``host_fork_report`` starts
one): a 7.3 kernel would hand an earlier trampoline down too.

    python -m uprobe_lab.native.fork      # this host's answers as JSON
"""
from __future__ import annotations

import json
import os
import signal
import sys
from typing import TYPE_CHECKING

from ..arches import make_process
from ..errors import ProcessKilled
from ..sites import SPECIAL_MAPPINGS, site_state
from ..uprobes import ENOTSUPP, CountingConsumer, UnprobeableInstruction, uprobe_register
from .code import NativeCode
from .fresh import in_forked_child, in_new_python
from .host import parse_maps, read_mem
from .perf import UprobeEvent
from .support import check_native_support

if TYPE_CHECKING:
    import pandas as pd

FORK_SITES = ("uprobe_target_nop5", "uprobe_target_nop10", "uprobe_target_ret")
HITS = 2
SITE_BYTES = 10  # a nop10 and its lea; call
REFUSED = "refused (ENOTSUPP)"
KEYS = ("attach", "parent site", "parent maps", "child site", "child maps", "child", "child hits", "child maps after")


def _names(maps) -> str:
    return ", ".join(sorted(m.name for m in maps if m.name in SPECIAL_MAPPINGS)) or "none"


# --- the emulator's side ------------------------------------------------------------------------

def emulated_fork_report(kernel=None, hits: int = HITS) -> dict:
    """{site: answers} of the emulated kernel ``kernel``: the questions of the module doc."""
    return {name: _emulated_site(name, kernel, hits) for name in FORK_SITES}


def _emulated_site(name: str, kernel, hits: int) -> dict:
    proc = make_process("x86_64", kernel)
    consumer = CountingConsumer()
    try:
        uprobe_register(proc, name, consumer)
    except UnprobeableInstruction:
        return {"attach": REFUSED}
    site = proc.program.resolve(name)
    proc.call("producer_loop", hits, site)
    child = proc.fork()
    answers = {"attach": "accepted",
               "parent site": site_state(proc.read(site, SITE_BYTES), site, proc.mappings),
               "parent maps": _names(proc.mappings),
               "child site": site_state(child.read(site, SITE_BYTES), site, child.mappings),
               "child maps": _names(child.mappings)}
    before = consumer.hits
    try:
        child.call("producer_loop", hits, site)
        answers["child"] = "exit 0"
    except ProcessKilled:
        answers["child"] = child.signal
    answers["child hits"] = consumer.hits - before
    answers["child maps after"] = "(it died)" if child.signal else _names(child.mappings)
    return answers


# --- the host's side ----------------------------------------------------------------------------

def fork_report_here(hits: int = HITS) -> dict:
    """{site: answers} of this host's kernel. Each site is asked in a forked child of this process, which
    must hold no uprobe mapping (a 7.3 kernel hands ``[uprobes-trampoline]`` down to a child)."""
    check_native_support()
    return {name: in_forked_child(f"the fork question on {name}", _host_site, name, hits) for name in FORK_SITES}


def _host_site(name: str, hits: int) -> dict:
    cpu = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})  # the child inherits it: the event bound to this CPU sees both
    with NativeCode() as nc:
        site = nc.addr(name)
        event = UprobeEvent(nc.path, nc.offset(name), pid=-1, cpu=cpu)
        try:
            event.open()
        except OSError as err:
            if err.errno == ENOTSUPP:
                return {"attach": REFUSED}
            raise
        try:
            nc.run(site, hits)
            maps = parse_maps()
            answers = {"attach": "accepted", "parent site": site_state(read_mem(site, SITE_BYTES), site, maps),
                       "parent maps": _names(maps)}
            before = event.count()
            said, status = _fork_and_call(nc, site, hits)
            answers.update(said[0])
            answers["child"] = (signal.Signals(os.WTERMSIG(status)).name if os.WIFSIGNALED(status)
                                else f"exit {os.WEXITSTATUS(status)}")
            answers["child hits"] = event.count() - before
            answers["child maps after"] = said[1]["child maps after"] if len(said) > 1 else "(it died)"
        finally:
            event.close()
    return answers


def _fork_and_call(nc: NativeCode, site: int, hits: int) -> tuple[list[dict], int]:
    """Fork; the child reports its site and maps, calls the site, reports its maps again and exits.
    Each report is a line on a pipe, written before the next step (a child that dies has said the first)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            maps = parse_maps()
            os.write(w, (json.dumps({"child site": site_state(read_mem(site, SITE_BYTES), site, maps),
                                     "child maps": _names(maps)}) + "\n").encode())
            nc.run(site, hits)
            os.write(w, (json.dumps({"child maps after": _names(parse_maps())}) + "\n").encode())
            os._exit(0)
        except BaseException as err:  # noqa: BLE001 - said to the parent, which raises it
            os.write(w, (json.dumps({"error": repr(err)}) + "\n").encode())
            os._exit(1)
    os.close(w)
    with os.fdopen(r) as f:
        said = [json.loads(line) for line in f]
    _, status = os.waitpid(pid, 0)
    errors = [s["error"] for s in said if "error" in s]
    if errors or not said:
        raise RuntimeError(f"the forked child failed: {errors[0] if errors else 'it said nothing'}")
    return said, status


def host_fork_report(hits: int = HITS) -> dict:
    """This host's answers, asked in a new Python process (NativeUnavailable if native probes cannot run)."""
    check_native_support()
    return in_new_python(__name__, [str(hits)], "the host's fork report")


# --- side by side -------------------------------------------------------------------------------

def compare_fork(kernel_answers: dict, lab_answers: dict) -> "pd.DataFrame":
    """Rows (site, what, kernel, lab, same): every answer of either side."""
    import pandas as pd  # here: the host child (``main``) starts sooner without it

    rows = []
    for name in FORK_SITES:
        k, lab = kernel_answers.get(name, {}), lab_answers.get(name, {})
        for key in KEYS:
            if key in k or key in lab:
                rows.append((name, key, k.get(key), lab.get(key), k.get(key) == lab.get(key)))
    return pd.DataFrame(rows, columns=["site", "what", "kernel", "lab", "same"])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    print(json.dumps(fork_report_here(int(argv[0]) if argv else HITS)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
