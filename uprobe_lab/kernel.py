"""Kernel versions the lab models, and what each one changed about a probe hit.

The course compares versions, so every rule that changed over time is a field here instead of an
``if version >= ...`` scattered through the code. Sources: the commits named beside each rule (listed,
with their releases, in docs/references.md) and the stable review mails named for the backports.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace

from .errors import LabError


@dataclass(frozen=True)
class KernelVersion:
    name: str
    uretprobe_syscall: bool  # 6.11 ff474a78cef5: return through sys_uretprobe, not an int3
    emulate_all_nops: bool  # 6.16 610f6e14c29d: every x86_nops[len] pattern is emulated (1-8: 9-11 have 0x2e)
    optimize_nop5: bool  # 6.18: nop5 rewritten into a call to [uprobes-trampoline] + sys_uprobe
    trampoline_sls_int3: bool  # 6.18 354492a0e1bc: int3 after each trampoline's ret
    # 7.2 554ba38456da "uprobes/x86: Move optimized uprobe from nop5 to nop10": only the nop10 is
    # optimised, into lea -0x80(%rsp),%rsp + call, so the call's push stays below the red zone. Queued
    # on perf/urgent (peterz/queue, 2026-07-02) for 7.2; Debian's 7.2.6 and 7.2.13 have it and 6.18.15
    # has not (verify/x86_kernels.py, data/x86_kernels_referee.json)
    optimize_nop10: bool = False
    # 7.2 d9a48e77f6fe "uprobes/x86: Allow to copy uprobe trampolines on fork" (same series and queue): a
    # forked child keeps the [uprobes-trampoline] pages its copied text calls; 6.18 maps them VM_DONTCOPY,
    # so a child calling an optimised site calls an unmapped page (this 6.18 host: SIGSEGV)
    copy_uprobe_trampolines_on_fork: bool = False
    # 6.19 8a5c6cbfe4a3 "x86/insn,uprobes,alternative: Unify insn_is_nop()" (tip perf/core Oct 2025,
    # merged for 6.19 with perf-core-2025-12-01): branch_setup_xol_ops emulates what insn_is_nop()
    # recognises (NOP but not PAUSE or REX.B NOP, NOPL, native-size mov %reg,%reg, lea 0(%reg),%reg,
    # jmp +0) instead of the x86_nops[] patterns, and can_optimize takes any 5-byte insn_is_nop()
    insn_is_nop: bool = False
    # 6.18 4363264111e1 "uprobe: Do not emulate/sstep original instruction when ip is changed" (both
    # arches; stable 5.15.197, 6.6.117, 6.17.8 and other lines): handle_swbp skips the probed instruction
    # when a consumer moved ip; 6.10.y, 6.11.y and 6.16.y (last 6.16.12) ended before it
    ip_change_skips_insn: bool = True
    arm64_simulate_nop: bool = True  # 6.13 ac4ad5c09b34: arm64 simulates nop instead of stepping it
    # 6.13 c56c599d9002 "arm64: probes: Disable kprobes/uprobes on MOPS instructions" (stable 6.6.64,
    # 6.11.11, 6.12.2): MOPS (cpy*/set*) prologue/main/epilogue words are refused instead of stepped
    arm64_reject_mops: bool = True
    # 6.12 "arm64: probes: Remove broken LDR (literal) uprobe support" (CVE-2024-50099; stable 6.1.114,
    # 6.11.5): ldr/ldrsw (literal) refused; before, simulated with a kernel load of the user address
    arm64_refuse_ldr_literal: bool = True

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


KERNELS = {
    "6.10": KernelVersion("6.10", False, False, False, False, ip_change_skips_insn=False, arm64_simulate_nop=False,
                          arm64_reject_mops=False, arm64_refuse_ldr_literal=False),  # 6.10.y (6.10.14) ended first
    # 6.11 as 6.11.y ended: both arm64 fixes backported (6.11.5, 6.11.11)
    "6.11": KernelVersion("6.11", True, False, False, False, ip_change_skips_insn=False, arm64_simulate_nop=False),
    "6.16": KernelVersion("6.16", True, True, False, False, ip_change_skips_insn=False),
    "6.18": KernelVersion("6.18", True, True, True, True),
    "7.2": KernelVersion("7.2", True, True, False, True, optimize_nop10=True, insn_is_nop=True,
                         copy_uprobe_trampolines_on_fork=True),
}
# Not modelled: 6.13 dd1a7567784e "uprobes: SRCU-protect uretprobe lifetime (with timeout)" made each return
# instance dearer (SRCU lock/unlock, a mod_timer, kfree_rcu) and 6.14 8622e45b5da1 reuses them; the events per
# hit stay the same, only their price moves, which the seed tables (before and after on one tree) cannot show.
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


# x86 rules that arrived between two modelled versions, and the release that brought each: a release
# from 6.19 to 7.1 is the 6.18 row with insn_is_nop (no course kernel of its own: nothing published)
X86_RULES = {"insn_is_nop": (6, 19)}
# rules of the generic core (kernel/events/uprobes.c), both arches
CORE_RULES = {"ip_change_skips_insn": (6, 18)}
# 4363264111e1 went to every stable line in Nov-Dec 2025 (also 5.4, 6.1 and 6.12 queues); only these
# sublevels are checked (patch 080/392 of 5.15.197-rc1, 104/529 of 6.6.117-rc1, 208/849 of 6.17.8-rc1):
# a 5.4, 6.1 or 6.12 release is modelled without it, even where its stable line has it
CORE_BACKPORTS = {"ip_change_skips_insn": {(5, 15): 197, (6, 6): 117, (6, 17): 8}}
# arm64 rules and the release they arrived in (upstream, as stable kernels of that line carry them)
ARM64_RULES = {"arm64_simulate_nop": (6, 13), "arm64_reject_mops": (6, 13), "arm64_refuse_ldr_literal": (6, 12)}
# stable backports: {rule: {(major, minor): first sublevel with it}} (from the stable review mails: MOPS
# is patch 049/676 of 6.6.64-rc1, 051/817 of 6.11.11-rc1 and 007/826 of 6.12.2-rc1; none for 6.1, which
# predates the MOPS support the fix is for, and the arm64 referee's 6.1.192 steps MOPS words)
ARM64_BACKPORTS = {"arm64_refuse_ldr_literal": {(6, 1): 114, (6, 11): 5},
                   "arm64_reject_mops": {(6, 6): 64, (6, 11): 11, (6, 12): 2}}


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


def kernel_for_release(release: str, version: str | None = None) -> KernelVersion:
    """The lab's rules for a real kernel release ('6.1.0-57-arm64', '6.12.117+deb13-arm64', '7.3.4').

    x86 rules come from the newest modelled version not newer than the release (6.10 for anything
    older: the int3 return trampoline predates it), except those of X86_RULES, which apply from the
    release that brought them (6.19.1 is 6.18 with insn_is_nop); each core rule (CORE_RULES) and arm64
    rule (ARM64_RULES) applies from the release that brought it, or the stable sublevel it was backported
    to (CORE_BACKPORTS, ARM64_BACKPORTS; the sublevel comes from ``version``, e.g. Debian's package
    version 6.1.192-3, or from the release itself). Stable backports not listed there are not modelled.
    """
    rel = _major_minor(release)
    if rel is None:
        raise LabError(f"cannot read a kernel version from {release!r} (expected e.g. 6.1.0-57-arm64)")
    # Debian's uname -r carries the ABI (6.1.0-57), not the sublevel: the package version (6.1.192-3) does
    sub = re.match(r"\d+\.\d+\.(\d+)", version or ("" if re.match(r"\d+\.\d+\.0-", release) else release))
    sublevel = int(sub.group(1)) if sub else None
    base = KERNELS[modelled_kernel(release) or min(KERNELS, key=_major_minor)]
    rules = {rule: rel >= since for rule, since in {**X86_RULES, **CORE_RULES, **ARM64_RULES}.items()}
    for rule, lines in {**CORE_BACKPORTS, **ARM64_BACKPORTS}.items():
        if rel in lines and sublevel is not None and sublevel >= lines[rel]:
            rules[rule] = True
    detail = f"{release}, {version}" if version else release
    return replace(base, name=f"{rel[0]}.{rel[1]} ({detail})", **rules)
