"""Kernel versions the lab models, and what each one changed about a probe hit.

Every rule that changed over time is declared once, in :data:`RULES`: the field the arch hook reads, the
release that brought it (and took it away), the commit and its stable backports. The modelled versions
(:data:`KERNELS`), the release mapping (:func:`kernel_for_release`) and every selector built on them follow
from that table; no ``if version >= ...`` stands anywhere else. Each rule's mainline release, stable sublevels
and the notice they were read from are in docs/references.md ("Rule sources"; tests/test_kernel_rules.py holds
the table and this one to each other). Out of scope: 32-bit tasks' own changes (d55c571e4333, 7.0: "Fix XOL
allocation failure for 32-bit tasks"); the lab's compat task models only its int3 return path.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from .errors import LabError, shown

Release = tuple[int, int]  # (major, minor)


@dataclass(frozen=True)
class Rule:
    """One change to what a probe hit does."""
    name: str  # the attribute the hook reads: kernel.<name>
    arch: str  # "x86_64", "arm64", or "core" (kernel/events/uprobes.c, both arches)
    since: Release  # the mainline release that brought it
    commit: str  # the mainline commit, 12 hex digits
    until: Release | None = None  # the mainline release that took it away
    backports: dict[Release, int] = field(default_factory=dict)  # stable line -> first sublevel with it
    removed: dict[Release, int] = field(default_factory=dict)  # stable line -> first sublevel without it again
    new_version: bool = False  # it changes an x86 hit's events: the release is a modelled version of its own

    def in_release(self, release: Release, sublevel: int = 0) -> bool:
        """Whether a kernel of ``release`` has it; a stable line's backport (or removal) counts from ``sublevel``
        (0: mainline X.Y.0, as a modelled version reads it; -1, unknown, reads the same)."""
        gone = self.removed.get(release)
        if gone is not None and sublevel >= gone:
            return False
        if self.since <= release and (self.until is None or release < self.until):
            return True
        first = self.backports.get(release)
        return first is not None and sublevel >= first


RULES: list[Rule] = [
    Rule("uretprobe_syscall", "x86_64", (6, 11), "ff474a78cef5", new_version=True),  # return through sys_uretprobe
    # every x86_nops[len] pattern is emulated (1-8: 9-11 have 0x2e)
    Rule("emulate_all_nops", "x86_64", (6, 16), "610f6e14c29d", new_version=True),
    # a nop5 rewritten into a call to [uprobes-trampoline] + sys_uprobe; the nop10 series (below) ended it
    Rule("optimize_nop5", "x86_64", (6, 18), "ba2bfc97b462", until=(7, 3),
         removed={(7, 2): 6}, new_version=True),
    Rule("trampoline_sls_int3", "x86_64", (6, 18), "354492a0e1bc"),  # an int3 after each trampoline's ret
    # only the nop10 is optimised, into lea -0x80(%rsp),%rsp + call, so the call's push stays below the red
    # zone. Mainline 7.3 (perf-core-2026-08-17); mainline 7.2 has not it. 7.2.y stable took it: Debian's
    # 7.2.6 has it and its changelog names no Debian patch, only stable updates; 6 is the first sublevel
    # seen with it, the stable release that took it is unconfirmed (docs/references.md, rule sources)
    Rule("optimize_nop10", "x86_64", (7, 3), "554ba38456da", backports={(7, 2): 6}, new_version=True),
    # a forked child keeps the [uprobes-trampoline] pages its copied text calls; 6.18 maps them VM_DONTCOPY,
    # so a child calling an optimised site calls an unmapped page (this 6.18 host: SIGSEGV). Same series and
    # stable batch as optimize_nop10 (Debian's 7.2.13 is the 7.2 kernel the fork referee ran)
    Rule("copy_uprobe_trampolines_on_fork", "x86_64", (7, 3), "d9a48e77f6fe", backports={(7, 2): 6}),
    # an emulated CALL pushes its return address on the user shadow stack too (before, the shadow stack
    # missed it, so the callee's ret did not match); the lab's tasks have no shadow stack: analyze says so
    Rule("shstk_emulated_call", "x86_64", (7, 2), "abf08854d224"),
    # branch_setup_xol_ops emulates what insn_is_nop() recognises (NOP but not PAUSE or REX.B NOP, NOPL,
    # native-size mov %reg,%reg, lea 0(%reg),%reg, jmp +0) instead of the x86_nops[] patterns, and
    # can_optimize takes any 5-byte insn_is_nop(); merged for 6.19, no modelled version of its own
    Rule("insn_is_nop", "x86_64", (6, 19), "8a5c6cbfe4a3"),
    # handle_swbp skips the probed instruction when a consumer moved ip; stable backports from the review
    # mails and release announcements (docs/references.md; the 6.1 and 6.12 lines are not checked, so they
    # are modelled without it)
    Rule("ip_change_skips_insn", "core", (6, 18), "4363264111e1",
         backports={(5, 4): 302, (5, 10): 247, (5, 15): 197, (6, 6): 117, (6, 17): 8}),
    Rule("arm64_simulate_nop", "arm64", (6, 13), "ac4ad5c09b34"),  # nop simulated instead of stepped
    # FEAT_HBC's BC.cond (b.cond with bit 4 set) matches insn.h's bcond mask, so it is simulated like b.cond;
    # before, it was stepped out of line and the step's end set pc = vaddr + 4: a taken BC.cond fell through
    Rule("arm64_simulate_bc_cond", "arm64", (7, 1), "2ccd8ff980b5",
         backports={(6, 6): 142, (6, 12): 92, (6, 18): 34, (7, 0): 11}),
    # MOPS (cpy*/set*) prologue/main/epilogue words refused instead of stepped (patch 049/676 of 6.6.64-rc1,
    # 051/817 of 6.11.11-rc1, 007/826 of 6.12.2-rc1; none for 6.1, which predates MOPS: the arm64 referee's
    # 6.1.192 steps MOPS words)
    Rule("arm64_reject_mops", "arm64", (6, 13), "c56c599d9002", backports={(6, 6): 64, (6, 11): 11, (6, 12): 2}),
    # ldr/ldrsw (literal) refused (CVE-2024-50099); before, simulated with a kernel load of the user address
    Rule("arm64_refuse_ldr_literal", "arm64", (6, 12), "acc450aa0709", backports={(6, 1): 114, (6, 11): 5}),
    # What many CPUs hitting one probe contend on (uprobe_lab.contended records it): the same events on one CPU.
    Rule("treelock_rwlock", "core", (6, 10), "0dc715295d41"),  # uprobes_treelock: a spinlock, then an rwlock
    Rule("lockless_lookup", "core", (6, 12), "cd7bdd9d46a9"),  # find_uprobe_rcu: uprobes_seqcount + rb_find_rcu
    Rule("srcu_uprobe_lifetime", "core", (6, 12), "8617408f7a01"),  # no uprobe refcount for a hit that is not stepped
    Rule("lockless_consumers", "core", (6, 12), "cc01bd044e6a"),  # consumer list under SRCU, not register_rwsem
    # SRCU's per-CPU counters -> a per-task nesting count
    Rule("rcu_tasks_trace", "core", (6, 13), "87195a1ee332", backports={(6, 12): 77}),
    Rule("uretprobe_lease", "core", (6, 13), "dd1a7567784e"),  # return instance holds an SRCU lease, not a refcount
    Rule("xol_no_slot_count", "core", (6, 13), "7a166094bd2b"),  # the XOL area's atomic slot_count went
    Rule("speculative_vma_lookup", "core", (6, 14), "e0925f2dc4de"),  # mm_lock_seq read instead of mmap_read_lock
    Rule("ri_pool", "core", (6, 14), "8622e45b5da1"),  # return instances reused from a per-task pool
    Rule("singlestep_without_siglock", "core", (6, 15), "83179cd67846"),  # handle_singlestep: no sighand->siglock
    # RCU Tasks Trace re-implemented on SRCU-fast: a reader takes srcu_read_lock_fast() (a per-CPU counter)
    # plus smp_mb() unless TASKS_TRACE_RCU_NO_MB
    Rule("tasks_trace_srcu_fast", "core", (7, 0), "c27cea4416a3"),
    # uretprobes_srcu is SRCU-fast-updown: the uretprobe lease takes no smp_mb() on the hit
    Rule("uretprobes_srcu_fast", "core", (7, 3), "36c8b02c3fe9"),
    # The kernel bench's consumer (kernel/trace/trace_uprobe.c) on every hit: the filter's rwlock, its hit count.
    Rule("perf_filter_nr_systemwide", "core", (6, 10), "cdf355cc60e3"),  # uprobe_perf_filter: no read_lock
    Rule("per_cpu_nhit", "core", (6, 12), "10cdb82aa77f"),  # trace_uprobe's nhit++: per-CPU, not shared
]
OLDEST: Release = (6, 10)  # the oldest modelled version: the int3 return trampoline, every long nop stepped
# the first release with uprobes on each arch: x86 came with uprobes themselves (3.5), arm64's arch code in 4.10
UPROBES_SINCE: dict[str, Release] = {"x86_64": (3, 5), "arm64": (4, 10)}
# uretprobes (uprobe_consumer->ret_handler, the return trampoline in the XOL area, uprobe_events' "r:" probes) came
# in 3.10, after x86's uprobes: a release from 3.5 to 3.9 has uprobes and no uretprobe (docs/references.md, "Kernel
# history before the modelled versions"). arm64's uprobes (4.10) came with uretprobes.
URETPROBES_SINCE: Release = (3, 10)


def refuse_uretprobe_before(release: str, bench: str) -> str | None:
    """Why ``release`` cannot run the uretprobe bench ``bench`` (it predates uretprobes), or None: the one check
    every uretprobe bench on a release passes through (bench.refusal, the model's events_for)."""
    line = major_minor(str(release))
    if line is None or line >= URETPROBES_SINCE:
        return None
    return (f"kernel {str(release).strip()} has no uretprobes, so no {bench}: they came in Linux "
            f"{version_name(URETPROBES_SINCE)}; give a release from {version_name(URETPROBES_SINCE)} on, or a uprobe "
            "bench")


@dataclass(frozen=True)
class KernelVersion:
    """A kernel as the lab models it: its name and the rules of :data:`RULES` it has (``kernel.<rule>``)."""
    name: str
    rules: frozenset[str]

    def __post_init__(self):
        for rule in RULES:  # plain attributes: the hooks read them on every hit
            object.__setattr__(self, rule.name, rule.name in self.rules)

    def __getattr__(self, name: str):  # only for names that are no attribute
        raise AttributeError(f"{type(self).__name__} has no rule {name!r}: the rules are {', '.join(r.name for r in RULES)}")

    @property
    def uprobe_syscall(self) -> bool:
        """sys_uprobe (336) exists: the optimised site's trampoline enters the kernel through it."""
        return self.optimize_nop5 or self.optimize_nop10

    def __str__(self) -> str:
        return self.name


def version_name(release: Release) -> str:
    return f"{release[0]}.{release[1]}"


def stable_changes(release: Release, arch: str) -> list[tuple[Rule, int, bool]]:
    """The rules of ``arch`` (and the core) that ``release``'s stable line took (True) or dropped again (False) at a
    sublevel, oldest first: where X.Y.0 and the line's later releases differ."""
    mine = [r for r in RULES if r.arch in (arch, "core")]
    out = [(r, r.backports[release], True) for r in mine if release in r.backports and not r.since <= release]
    out += [(r, r.removed[release], False) for r in mine if release in r.removed]
    return sorted(out, key=lambda change: change[1])


def describe_stable_changes(release: Release, arch: str) -> str:
    """One line for a learner who named ``release`` without a sublevel, which means mainline X.Y.0: which stable
    sublevels change the answer, and how to ask for them. '' when the line changed nothing for ``arch``."""
    changes = stable_changes(release, arch)
    if not changes:
        return ""
    name = version_name(release)
    said = "; ".join(f"{name}.{sub} {'took' if took else 'dropped'} {r.name} ({r.commit})" for r, sub, took in changes)
    return f"kernel {name}: mainline {name} ({name}.0); its stable line changed since ({said}): give the sublevel, e.g. --kernel {name}.{changes[-1][1]}"


def unknown_sublevel_note(release: str, arch: str) -> str:
    """For a release read as mainline because it names no sublevel ('7.2', or an ABI number: '7.2.0-45-generic'),
    the line that says which stable sublevels of its line answer otherwise for ``arch``; '' for any other."""
    text = str(release).strip()
    line = major_minor(text)
    if line is None or stable_sublevel(text) >= 0:
        return ""
    said = describe_stable_changes(line, arch)
    if said and text != version_name(line):
        said = f"kernel {text}: no sublevel (an ABI number), so read as mainline; " + said
    return said


def kernel_of(name: str, release: Release, sublevel: int = 0) -> KernelVersion:
    """The lab's kernel for ``release``: every rule it has, by the table."""
    return KernelVersion(name, frozenset(r.name for r in RULES if r.in_release(release, sublevel)))


def modelled_versions() -> list[Release]:
    """The oldest version and each mainline release that brought a rule of its own (new_version), oldest first. A
    stable line that took such a rule is no version of its own: its releases answer with the row they hit like
    (7.2.6, which took the nop10 series, with 7.3; :func:`modelled_kernel`)."""
    return sorted({OLDEST, *(r.since for r in RULES if r.new_version)})


KERNELS: dict[str, KernelVersion] = {}


def rebuild() -> None:
    """Derive the modelled versions from :data:`RULES` (again, after a rule was added to it)."""
    KERNELS.clear()
    KERNELS.update({version_name(v): kernel_of(version_name(v), v) for v in modelled_versions()})  # mainline X.Y.0


rebuild()
# On one CPU not priced: 6.13 dd1a7567784e "uprobes: SRCU-protect uretprobe lifetime (with timeout)" made each
# return instance dearer (SRCU lock/unlock, a mod_timer, kfree_rcu) and 6.14 8622e45b5da1 reuses them; the events
# per hit stay the same, only their price moves, which the seed tables (before and after on one tree) cannot show.
# What they share with other CPUs is modelled (rules uretprobe_lease and ri_pool above, uprobe_lab.contended).
# One table outside the seeds spans the first (docs/model.md, rule 8).
# 6.18 is the newest version published figures cover (seeds 000/002 are 6.10 vs 6.11, seeds 003/004
# 6.11 vs 6.18; the cost model is fitted on all of them, each under its own version) and the version
# this project's host runs; nothing has been published for the nop10 scheme (7.3, and 7.2.y from 7.2.6)
# yet: 6.18 stays the default, 7.3 is one --kernel away (README).
DEFAULT_KERNEL = "6.18"


def get_kernel(version: str | KernelVersion | None = None) -> KernelVersion:
    """Look a version up by name ('6.10', '6.11', '6.16', '6.18', '7.3': each the mainline release); None gives the
    default."""
    if isinstance(version, KernelVersion):
        return version
    if isinstance(version, float):  # 6.10 as a number is 6.1
        raise LabError(f"write the kernel version as a string, e.g. '6.10': as a number, {version!r} loses its "
                       f"trailing zero; the lab models {', '.join(KERNELS)}")
    if not isinstance(version, (str, type(None))):
        raise LabError(f"write the kernel version as a string, e.g. '6.10', got {shown(version)}; the lab models "
                       f"{', '.join(KERNELS)}")
    name = DEFAULT_KERNEL if version is None else version
    try:
        return KERNELS[name]
    except KeyError:
        row = modelled_kernel(name) if isinstance(name, str) else None
        hint = (f"; for release {name} give its row, {row} (row_for_release says why), or its own rules, "
                f"kernel_for_release({name!r})" if row is not None else "")
        raise LabError(
            f"unknown kernel version {shown(name)}: the lab models {', '.join(KERNELS)} "
            f"(the versions where a probe hit's cost changed){hint}"
        ) from None


def major_minor(text: str) -> tuple[int, int] | None:
    """(major, minor) at the start of a release or version such as 6.18.4; None if it has none."""
    m = re.match(r"(\d+)\.(\d+)", str(text))
    return (int(m.group(1)), int(m.group(2))) if m else None


def _hit_rules(kernel: KernelVersion) -> frozenset[str]:
    """The rules that change an x86 hit's events (each one made a modelled version of its own)."""
    return frozenset(r.name for r in RULES if r.new_version and r.name in kernel.rules)


def modelled_kernel(release: str) -> str | None:
    """The modelled kernel whose probe-hit rules ``release`` has, or None if it predates them all or is not a
    version: the newest modelled version not newer than it with the same rules (``6.14.2`` -> ``6.11``,
    ``7.2.5`` -> ``6.18``), else the newer one its stable line's backports made it hit like (``7.2.6``, which
    took the nop10 series, -> ``7.3``), else the newest not newer."""
    text = str(release).strip()
    if text in KERNELS:
        return text
    have = major_minor(text)
    return None if have is None else modelled_row(have, stable_sublevel(text))


def modelled_row(line: Release, sublevel: int) -> str | None:
    """:func:`modelled_kernel` of the release ``line``.``sublevel`` (sublevel -1: unknown, read as mainline)."""
    older = [k for k in sorted(KERNELS, key=major_minor) if major_minor(k) <= line]
    if not older:
        return None
    rules = _hit_rules(kernel_of("", line, sublevel))
    same = [k for k in sorted(KERNELS, key=major_minor) if _hit_rules(KERNELS[k]) == rules]
    not_newer = [k for k in same if major_minor(k) <= line]
    return not_newer[-1] if not_newer else same[0] if same else older[-1]


def refuse_before_uprobes(release: str, arch: str | None = None) -> None:
    """LabError for a release older than uprobes on ``arch`` (None: on every arch, so older than x86's 3.5)."""
    line = major_minor(release)
    first = UPROBES_SINCE.get(arch, min(UPROBES_SINCE.values()))
    if line is not None and line < first:
        where = f"on {arch}" if arch in UPROBES_SINCE else "at all"
        since = ", ".join(f"{version_name(v)} on {a}" for a, v in UPROBES_SINCE.items())
        raise LabError(f"kernel {str(release).strip()} has no uprobes {where} (they came in Linux {since}); give a "
                       f"newer release, e.g. {version_name(first)}, or a modelled version: {', '.join(KERNELS)}")


def outside_modelled(release: str, arch: str = "x86_64") -> tuple[str, str] | None:
    """For a release older than the oldest modelled version or newer than the newest, (the row that answers for
    it, the line saying so, in ``arch``'s terms); None for any other."""
    text, line = str(release).strip(), major_minor(release)
    oldest, newest = min(KERNELS, key=major_minor), max(KERNELS, key=major_minor)
    if line is None or text in KERNELS:
        return None
    if line < major_minor(oldest):
        if arch == "arm64":  # no nop5 optimisation and no uretprobe syscall on arm64: every hit traps on a brk
            why = "on arm64 a hit traps on brk and a uretprobe returns through the brk trampoline, as in the 6.10 row"
        elif line < URETPROBES_SINCE:
            why = (f"the stepped nop5 predates it; it has no uretprobes, which came in "
                   f"{version_name(URETPROBES_SINCE)}")
        else:
            why = "the int3 return trampoline and the stepped nop5 predate it"
        return oldest, f"kernel {text}: older than every modelled version; the lab's {oldest} row answers for it ({why})"
    if line > major_minor(newest):
        return newest, (f"kernel {text}: newer than every release the lab models, so it is modelled as {newest}, "
                        f"the newest: the lab's {newest} row answers for it, and what changed after {newest} is not "
                        "in the lab")
    return None


def row_for_release(release: str, arch: str | None = None) -> tuple[str, str | None]:
    """The modelled row that answers for a kernel release ('7.3', '6.12.118+deb12-amd64', ``uname -r``) and,
    unless the release is that row's own name, a line saying which row and why (in ``arch``'s terms; None: x86-64's);
    LabError for anything else, and for a release older than uprobes on ``arch`` (None: on every arch)."""
    text = str(release).strip()
    if text in KERNELS:
        return text, None
    if major_minor(text) is None:
        raise LabError(f"{text!r} is not a kernel release: give one such as 7.3, 6.8.0-45-generic or $(uname -r), "
                       f"or a modelled version: {', '.join(KERNELS)}")
    refuse_before_uprobes(text, arch)
    outside = outside_modelled(text, arch or "x86_64")
    if outside:
        return outside
    row = modelled_kernel(text)
    if major_minor(row) > major_minor(text):
        took = ", ".join(f"{r.name} at {version_name(major_minor(text))}.{sub}"
                         for r, sub, gained in stable_changes(major_minor(text), "x86_64") if gained and r.new_version)
        return row, (f"kernel {text}: the lab's {row} row answers for it: its stable line took {row}'s "
                     f"{took}, so it hits as mainline {row} does")
    note = f"kernel {text}: the lab's {row} row answers for it (the newest modelled version not newer)"
    later = unknown_sublevel_note(text, "x86_64")
    return row, note + (f"\n{later}" if later else "")


def release_rules(release) -> KernelVersion:
    """A modelled version by name, or any other release ('6.13', '6.8.0-45-generic') with every rule of
    :data:`RULES` it has, under its major.minor name: 6.13 hits like 6.11 on one CPU and has 6.13's locks.
    A release without a sublevel is the mainline release: 6.12 has SRCU, 6.12.77 RCU Tasks Trace (a backport)."""
    if isinstance(release, KernelVersion) or release is None or str(release) in KERNELS:
        return get_kernel(release)
    rel = major_minor(str(release))
    if rel is None:
        raise LabError(f"{release!r} is not a kernel release: give one such as 6.13 or 6.8.0-45-generic")
    refuse_before_uprobes(str(release))
    sublevel = stable_sublevel(str(release))
    return kernel_of(_release_name(rel, sublevel), rel, sublevel)


def _release_name(line: Release, sublevel: int) -> str:
    """A release as the lab names it: 7.2.13 where the sublevel is known (its backports count), else 7.2 (mainline)."""
    return f"{version_name(line)}.{sublevel}" if sublevel >= 0 else version_name(line)


def stable_sublevel(release: str, version: str | None = None) -> int:
    """The stable sublevel of ``release`` (or of a package ``version`` such as Debian's 6.1.192-3); -1 where none
    is known: Debian's and Ubuntu's uname -r carry an ABI number (6.1.0-57), not the sublevel."""
    sub = re.match(r"\d+\.\d+\.(\d+)", version or ("" if re.match(r"\d+\.\d+\.0-", release) else release))
    return int(sub.group(1)) if sub else -1


def kernel_for_release(release: str, version: str | None = None) -> KernelVersion:
    """The lab's rules for a real kernel release ('6.1.0-57-arm64', '6.12.117+deb13-arm64', '7.3.4'): each rule
    of :data:`RULES` from the release that brought it (6.19.1 is 6.18 with insn_is_nop; anything older than
    6.10 hits like 6.10 on one CPU, as the int3 return trampoline predates it, but keeps the lock rules from
    before 6.10: no treelock_rwlock, no perf_filter_nr_systemwide), or from the stable sublevel it was backported to
    (the sublevel comes from ``version``, e.g. Debian's package version 6.1.192-3, or from the release itself).
    Stable backports not listed in the table are not modelled. A release older than uprobes (3.5) is refused.
    """
    rel = major_minor(release)
    if rel is None:
        raise LabError(f"cannot read a kernel version from {release!r} (expected e.g. 6.1.0-57-arm64)")
    refuse_before_uprobes(release)
    detail = f"{release}, {version}" if version else release
    # a release names its line at an unknown sublevel: stable backports count only where the sublevel is known
    sublevel = stable_sublevel(release, version)
    name = _release_name(rel, sublevel)
    return kernel_of(name if detail == name else f"{name} ({detail})", rel, sublevel)
