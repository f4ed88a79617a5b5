"""Kernel versions the lab models, and what each one changed about a probe hit.

Every rule that changed over time is declared once, in :data:`RULES`: the field the arch hook reads, the
release that brought it (and took it away), the commit and its stable backports. The modelled versions
(:data:`KERNELS`), the release mapping (:func:`kernel_for_release`) and every selector built on them follow
from that table; no ``if version >= ...`` stands anywhere else. Sources: the commits named in the table
(listed, with their releases, in docs/references.md) and the stable review mails named for the backports.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from .errors import LabError

Release = tuple[int, int]  # (major, minor)


@dataclass(frozen=True)
class Rule:
    """One change to what a probe hit does."""
    name: str  # the attribute the hook reads: kernel.<name>
    arch: str  # "x86_64", "arm64", or "core" (kernel/events/uprobes.c, both arches)
    since: Release  # the release that brought it
    commit: str  # the commit (12 hex digits) or, where the lab has none, the series or patch title
    until: Release | None = None  # the release that took it away
    backports: dict[Release, int] = field(default_factory=dict)  # stable line -> first sublevel with it
    new_version: bool = False  # it changes an x86 hit's events: the release is a modelled version of its own

    def in_release(self, release: Release, sublevel: int | None = None) -> bool:
        """Whether a kernel of ``release`` has it; a stable line's backport counts from ``sublevel`` (None: the
        line as it ended, which is how a modelled version reads it)."""
        if self.since <= release and (self.until is None or release < self.until):
            return True
        first = self.backports.get(release)
        return first is not None and (sublevel is None or sublevel >= first)


RULES: list[Rule] = [
    Rule("uretprobe_syscall", "x86_64", (6, 11), "ff474a78cef5", new_version=True),  # return through sys_uretprobe
    # every x86_nops[len] pattern is emulated (1-8: 9-11 have 0x2e)
    Rule("emulate_all_nops", "x86_64", (6, 16), "610f6e14c29d", new_version=True),
    # a nop5 rewritten into a call to [uprobes-trampoline] + sys_uprobe; 7.2 moved it to the nop10
    Rule("optimize_nop5", "x86_64", (6, 18), "uprobes/x86: Add support to optimize uprobes", until=(7, 2),
         new_version=True),
    Rule("trampoline_sls_int3", "x86_64", (6, 18), "354492a0e1bc"),  # an int3 after each trampoline's ret
    # only the nop10 is optimised, into lea -0x80(%rsp),%rsp + call, so the call's push stays below the red
    # zone; queued on perf/urgent for 7.2: Debian's 7.2.6 and 7.2.13 have it and 6.18.15 has not
    # (verify/x86_kernels.py, data/x86_kernels_referee.json)
    Rule("optimize_nop10", "x86_64", (7, 2), "554ba38456da", new_version=True),
    # a forked child keeps the [uprobes-trampoline] pages its copied text calls; 6.18 maps them VM_DONTCOPY,
    # so a child calling an optimised site calls an unmapped page (this 6.18 host: SIGSEGV)
    Rule("copy_uprobe_trampolines_on_fork", "x86_64", (7, 2), "d9a48e77f6fe"),
    # branch_setup_xol_ops emulates what insn_is_nop() recognises (NOP but not PAUSE or REX.B NOP, NOPL,
    # native-size mov %reg,%reg, lea 0(%reg),%reg, jmp +0) instead of the x86_nops[] patterns, and
    # can_optimize takes any 5-byte insn_is_nop(); merged for 6.19, no modelled version of its own
    Rule("insn_is_nop", "x86_64", (6, 19), "8a5c6cbfe4a3"),
    # handle_swbp skips the probed instruction when a consumer moved ip; stable backports from the review
    # mails (patch 080/392 of 5.15.197-rc1, 104/529 of 6.6.117-rc1, 208/849 of 6.17.8-rc1; the 5.4, 6.1 and
    # 6.12 queues are not checked, so those lines are modelled without it)
    Rule("ip_change_skips_insn", "core", (6, 18), "4363264111e1",
         backports={(5, 15): 197, (6, 6): 117, (6, 17): 8}),
    Rule("arm64_simulate_nop", "arm64", (6, 13), "ac4ad5c09b34"),  # nop simulated instead of stepped
    # MOPS (cpy*/set*) prologue/main/epilogue words refused instead of stepped (patch 049/676 of 6.6.64-rc1,
    # 051/817 of 6.11.11-rc1, 007/826 of 6.12.2-rc1; none for 6.1, which predates MOPS: the arm64 referee's
    # 6.1.192 steps MOPS words)
    Rule("arm64_reject_mops", "arm64", (6, 13), "c56c599d9002", backports={(6, 6): 64, (6, 11): 11, (6, 12): 2}),
    # ldr/ldrsw (literal) refused (CVE-2024-50099); before, simulated with a kernel load of the user address
    Rule("arm64_refuse_ldr_literal", "arm64", (6, 12), "arm64: probes: Remove broken LDR (literal) uprobe support",
         backports={(6, 1): 114, (6, 11): 5}),
    # What many CPUs hitting one probe contend on (uprobe_lab.contended records it): the same events on one CPU.
    Rule("treelock_rwlock", "core", (6, 10), "0dc715295d41"),  # uprobes_treelock: a spinlock, then an rwlock
    Rule("lockless_lookup", "core", (6, 12), "cd7bdd9d46a9"),  # find_uprobe_rcu: uprobes_seqcount + rb_find_rcu
    Rule("srcu_uprobe_lifetime", "core", (6, 12), "8617408f7a01"),  # no uprobe refcount for a hit that is not stepped
    Rule("lockless_consumers", "core", (6, 12), "cc01bd044e6a"),  # consumer list under SRCU, not register_rwsem
    Rule("rcu_tasks_trace", "core", (6, 13), "87195a1ee332"),  # SRCU's per-CPU counters -> a per-task nesting count
    Rule("uretprobe_lease", "core", (6, 13), "dd1a7567784e"),  # return instance holds an SRCU lease, not a refcount
    Rule("xol_no_slot_count", "core", (6, 13), "7a166094bd2b"),  # the XOL area's atomic slot_count went
    Rule("speculative_vma_lookup", "core", (6, 14), "e0925f2dc4de"),  # mm_lock_seq read instead of mmap_read_lock
    Rule("ri_pool", "core", (6, 14), "8622e45b5da1"),  # return instances reused from a per-task pool
    Rule("singlestep_without_siglock", "core", (6, 15), "83179cd67846"),  # handle_singlestep: no sighand->siglock
    # The kernel bench's consumer (kernel/trace/trace_uprobe.c) on every hit: the filter's rwlock, its hit count.
    Rule("perf_filter_nr_systemwide", "core", (6, 10), "cdf355cc60e3"),  # uprobe_perf_filter: no read_lock
    Rule("per_cpu_nhit", "core", (6, 12), "10cdb82aa77f"),  # trace_uprobe's nhit++: per-CPU, not shared
]
OLDEST: Release = (6, 10)  # the oldest modelled version: the int3 return trampoline, every long nop stepped


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

    @property
    def trampoline_handler_name(self) -> str:
        # The uretprobe syscall patch renamed the static handle_trampoline().
        return "uprobe_handle_trampoline" if self.uretprobe_syscall else "handle_trampoline"

    def __str__(self) -> str:
        return self.name


def version_name(release: Release) -> str:
    return f"{release[0]}.{release[1]}"


def kernel_of(name: str, release: Release, sublevel: int | None = None) -> KernelVersion:
    """The lab's kernel for ``release``: every rule it has, by the table."""
    return KernelVersion(name, frozenset(r.name for r in RULES if r.in_release(release, sublevel)))


def modelled_versions() -> list[Release]:
    """The oldest version and each release that brought a rule of its own (new_version), oldest first."""
    return sorted({OLDEST, *(r.since for r in RULES if r.new_version)})


KERNELS: dict[str, KernelVersion] = {}


def rebuild() -> None:
    """Derive the modelled versions from :data:`RULES` (again, after a rule was added to it)."""
    KERNELS.clear()
    KERNELS.update({version_name(v): kernel_of(version_name(v), v) for v in modelled_versions()})


rebuild()
# On one CPU not priced: 6.13 dd1a7567784e "uprobes: SRCU-protect uretprobe lifetime (with timeout)" made each
# return instance dearer (SRCU lock/unlock, a mod_timer, kfree_rcu) and 6.14 8622e45b5da1 reuses them; the events
# per hit stay the same, only their price moves, which the seed tables (before and after on one tree) cannot show.
# What they share with other CPUs is modelled (rules uretprobe_lease and ri_pool above, uprobe_lab.contended).
# One table outside the seeds spans the first (docs/model.md, rule 8).
# 6.18 is the newest version published figures cover (seeds 000/002 are 6.10 vs 6.11, seeds 003/004
# 6.11 vs 6.18; the cost model is fitted on all of them, each under its own version) and the version
# this project's host runs; nothing has been published for 7.2 yet: 6.18 stays the default, 7.2 is
# one --kernel away (README).
DEFAULT_KERNEL = "6.18"


def get_kernel(version: str | KernelVersion | None = None) -> KernelVersion:
    """Look a version up by name ('6.10', '6.11', '6.16', '6.18', '7.2'); None gives the default."""
    if isinstance(version, KernelVersion):
        return version
    if isinstance(version, float):  # 6.10 as a number is 6.1
        raise LabError(f"write the kernel version as a string, e.g. '6.10': as a number, {version!r} loses its "
                       f"trailing zero; the lab models {', '.join(KERNELS)}")
    name = DEFAULT_KERNEL if version is None else str(version)
    try:
        return KERNELS[name]
    except KeyError:
        raise LabError(
            f"unknown kernel version {name!r}: the lab models {', '.join(KERNELS)} "
            f"(the versions where a probe hit's cost changed)"
        ) from None


def _major_minor(text: str) -> tuple[int, int] | None:
    m = re.match(r"(\d+)\.(\d+)", str(text))
    return (int(m.group(1)), int(m.group(2))) if m else None


def modelled_kernel(release: str) -> str | None:
    """The modelled kernel whose probe-hit rules ``release`` has (``6.14.2`` -> ``6.11``: the newest
    modelled version not newer than it), or None if it predates them all or is not a version."""
    have = _major_minor(release)
    older = [k for k in sorted(KERNELS, key=_major_minor) if have is not None and _major_minor(k) <= have]
    return older[-1] if older else None


def row_for_release(release: str) -> tuple[str, str | None]:
    """The modelled row that answers for a kernel release ('7.3', '6.12.118+deb12-amd64', ``uname -r``) and,
    unless the release is that row's own name, a line saying which row and why; LabError for anything else."""
    text = str(release).strip()
    if text in KERNELS:
        return text, None
    row = modelled_kernel(text)
    if row is not None:
        return row, f"kernel {text}: the lab's {row} row answers for it (the newest modelled version not newer)"
    if _major_minor(text) is None:
        raise LabError(f"{text!r} is not a kernel release: give one such as 7.3, 6.8.0-45-generic or $(uname -r), "
                       f"or a modelled version: {', '.join(KERNELS)}")
    oldest = min(KERNELS, key=_major_minor)
    return oldest, (f"kernel {text}: older than every modelled version; the lab's {oldest} row answers for it "
                    "(the int3 return trampoline and the stepped nop5 predate it)")


def release_rules(release) -> KernelVersion:
    """A modelled version by name, or any other release ('6.13', '6.8.0-45-generic') with every rule of
    :data:`RULES` it has, under its major.minor name: 6.13 hits like 6.11 on one CPU and has 6.13's locks."""
    if isinstance(release, KernelVersion) or release is None or str(release) in KERNELS:
        return get_kernel(release)
    rel = _major_minor(str(release))
    if rel is None:
        raise LabError(f"{release!r} is not a kernel release: give one such as 6.13 or 6.8.0-45-generic")
    return kernel_of(version_name(rel), rel)


def kernel_for_release(release: str, version: str | None = None) -> KernelVersion:
    """The lab's rules for a real kernel release ('6.1.0-57-arm64', '6.12.117+deb13-arm64', '7.3.4'): each rule
    of :data:`RULES` from the release that brought it (6.19.1 is 6.18 with insn_is_nop; anything older than
    6.10 is 6.10: the int3 return trampoline predates it), or from the stable sublevel it was backported to
    (the sublevel comes from ``version``, e.g. Debian's package version 6.1.192-3, or from the release itself).
    Stable backports not listed in the table are not modelled.
    """
    rel = _major_minor(release)
    if rel is None:
        raise LabError(f"cannot read a kernel version from {release!r} (expected e.g. 6.1.0-57-arm64)")
    # Debian's uname -r carries the ABI (6.1.0-57), not the sublevel: the package version (6.1.192-3) does
    sub = re.match(r"\d+\.\d+\.(\d+)", version or ("" if re.match(r"\d+\.\d+\.0-", release) else release))
    detail = f"{release}, {version}" if version else release
    # a release names its line at an unknown sublevel: stable backports count only where the sublevel is known
    return kernel_of(f"{rel[0]}.{rel[1]} ({detail})", rel, int(sub.group(1)) if sub else -1)
