"""The event vocabulary shared by the emulator and the cost model.

Every mechanism reports what a probe hit cost in these words, never in seconds. The emulator emits
events as it runs; the cost model (uprobe_lab.model) prices them. Counting is always on and cheap;
keeping each event with its instruction pointer is opt-in (``Trace(record=True)``) because it is what
the stepping widgets show, and what the hot benchmark loop must not pay for.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

# kind -> what it means. Kinds are plain strings so a DataFrame or a CSV can carry them.
EVENT_KINDS = {
    "user_insns": "instructions executed in user mode (program, XOL slot, trampolines)",
    "exceptions": "entries into the kernel by an exception (any kind below)",
    "exc_bp": "x86 #BP: an int3 was executed",
    "exc_db": "x86 #DB: the trap flag fired after a single-stepped instruction",
    "exc_brk": "arm64 BRK exception",
    "exc_step": "arm64 hardware single-step exception",
    "syscalls": "entries into the kernel by the syscall instruction",
    "iret": "return to user by iret (the slow, general exception return on x86)",
    "sysret": "return to user by sysret (the fast syscall return on x86)",
    "eret": "return to user by eret (arm64)",
    "probe_lookups": "a breakpoint address looked up in the probe tree (find_active_uprobe_rcu; before 6.12 "
                     "find_active_uprobe)",
    "consumers": "consumer handlers run (entry or return)",
    "emulated": "probed instruction emulated/simulated in the kernel instead of stepped",
    "xol_steps": "probed instruction single-stepped out of line in an XOL slot",
    "xol_waits": "every XOL slot was taken: the thread slept on the area's wait queue (many CPUs)",
    "line_transfers": "a shared cache line moved to this CPU from another that had it (many CPUs; see Trace.touch)",
    "uaccess_copies": "kernel copies from or to user memory (copy_from_user/copy_to_user calls)",
    "uaccess_bytes": "bytes copied from or to user memory by the kernel",
    "pages_pinned": "user pages pinned (and, arm64 STP v2, mapped) into the kernel",
    "futex_wakes": "FUTEX_WAKE calls past the key: the hash bucket looked at (nobody waits in the lab)",
    "ri_pushed": "return instances pushed (uretprobe entry)",
    "ri_popped": "return instances popped (uretprobe return)",
    "text_patches": "writes of probe text (int3, call, original bytes)",
    "cpu_syncs": "cross-CPU syncs while patching text",
    "signals": "signals delivered to the process",
}


@dataclass(frozen=True)
class Event:
    seq: int
    kind: str
    n: int
    ip: int | None
    note: str


class Trace:
    """Counts of every event kind; with ``record=True`` also the events in order."""

    def __init__(self, record: bool = False):
        self.record = record
        self.events: list[Event] = []
        self._counts: dict[str, int] = {}  # a plain dict: counting into a Counter costs twice as much
        self._touched: dict[tuple, int] = {}  # accesses -> how often a step made them (``touch``)
        self._holders: dict[str, set[int]] = {}  # kernel state -> the CPUs whose caches hold its line
        self.track_lines = False  # follow lines between CPUs (set while threads run on many CPUs)
        self.transfers: dict[str, int] = {}  # kernel state -> how often its line moved to another CPU

    @property
    def counts(self) -> Counter:
        """A copy of the counts so far."""
        return Counter(self._counts)

    def emit(self, kind: str, n: int = 1, ip: int | None = None, note="") -> None:
        """Count an event; when recording, keep it with its ip and note (a string, or a callable
        that makes one - so the hot path never formats text nobody will read)."""
        counts = self._counts
        counts[kind] = counts.get(kind, 0) + n
        if self.record:
            self.events.append(Event(len(self.events), kind, n, ip, note() if callable(note) else note))

    def touch(self, accesses, cpu: int) -> None:
        """Count ``accesses`` (a tuple of ((kernel state, kind), n) pairs: uprobe_lab.contended says what each kernel
        touches) made by ``cpu``; with ``track_lines``, follow their lines between CPUs (``_follow``). A hit
        passes the same few steps every time, so the steps are counted and ``lines`` adds them up."""
        touched = self._touched
        touched[accesses] = touched.get(accesses, 0) + 1
        if self.track_lines:
            self._follow(accesses, cpu)

    @property
    def lines(self) -> dict[tuple[str, str], int]:
        """(kernel state, access kind) -> accesses so far."""
        lines = {}
        for accesses, times in self._touched.items():
            for key, n in accesses:
                lines[key] = lines.get(key, 0) + n * times
        return lines

    def _follow(self, accesses, cpu: int) -> None:
        """A CPU that writes a line another CPU holds, or reads one it does not hold, takes it over: a
        ``line_transfers`` event (not a line's first access: every CPU would miss it once). Per-CPU and
        per-task state has no other holder."""
        for (line, kind), _ in accesses:
            if kind in ("per-cpu", "per-task"):
                continue
            holders = self._holders.get(line)
            if holders is None:
                self._holders[line] = {cpu}
            elif kind == "read":
                if cpu not in holders:
                    holders.add(cpu)
                    self._transfer(line)
            elif len(holders) > 1 or cpu not in holders:
                self._holders[line] = {cpu}
                self._transfer(line)

    def _transfer(self, line: str) -> None:
        self.transfers[line] = self.transfers.get(line, 0) + 1
        self.emit("line_transfers", note=line)

    def since(self, before: Counter) -> Counter:
        """Counts accumulated since ``before`` (an earlier ``counts``), zero kinds dropped."""
        diff = self.counts
        diff.subtract(before)
        return Counter({k: v for k, v in diff.items() if v})

    def clear(self) -> None:
        self._counts.clear()
        self.events.clear()
        self._touched.clear()
        self._holders.clear()
        self.transfers.clear()

    def summary(self):
        """The counts so far as a pandas DataFrame, one row per kind counted (vocabulary order), with what it means
        (shown whole, not cut to pandas' 50 characters)."""
        whole_text = _whole_text_frame()
        counts = self._counts
        rows = [{"event": k, "count": counts[k], "what it is": EVENT_KINDS[k]} for k in EVENT_KINDS if counts.get(k)]
        return whole_text(whole_text(rows, columns=["event", "count", "what it is"]).set_index("event"))

    def dataframe(self):
        """The recorded events as a pandas DataFrame (seq, kind, n, ip, note)."""
        import pandas as pd

        rows = [
            {"seq": e.seq, "kind": e.kind, "n": e.n, "ip": None if e.ip is None else hex(e.ip), "note": e.note}
            for e in self.events
        ]
        return pd.DataFrame(rows, columns=["seq", "kind", "n", "ip", "note"])


@lru_cache(maxsize=None)
def _whole_text_frame():
    """A DataFrame type shown with every cell's whole text (no ``display.max_colwidth`` cut to 50 characters and
    "..."): a page's HTML table wraps long cells instead. Slices and results are plain DataFrames. Made on first
    use, as pandas is imported only when a table is asked for."""
    import pandas as pd

    class WholeText(pd.DataFrame):
        def _repr_html_(self):
            with pd.option_context("display.max_colwidth", None):
                return super()._repr_html_()

        def __repr__(self) -> str:
            with pd.option_context("display.max_colwidth", None):
                return super().__repr__()

    return WholeText


def per_hit(counts: Counter, hits: int) -> dict[str, float]:
    """Average counts per hit, in the vocabulary's order."""
    if hits <= 0:
        raise ValueError(f"per_hit needs a positive number of hits, got {hits}")
    out = {}
    for kind in EVENT_KINDS:
        if counts.get(kind):
            value = counts[kind] / hits
            out[kind] = int(value) if value == int(value) else round(value, 3)
    return out


def bills_table(bills: dict):
    """Event counts side by side (a column per label, e.g. per kernel or per hit; a row per kind counted, in the
    vocabulary's order, 0 where a column has none): what a notebook shows instead of printing raw dicts."""
    import pandas as pd

    kinds = [k for k in EVENT_KINDS if any(bill.get(k) for bill in bills.values())]
    return pd.DataFrame({label: [bill.get(k, 0) for k in kinds] for label, bill in bills.items()},
                        index=pd.Index(kinds, name="event"))
