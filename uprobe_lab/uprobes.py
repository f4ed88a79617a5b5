"""The generic uprobe core: twin of kernel/events/uprobes.c (and include/linux/uprobes.h).

Probes, consumers, the breakpoint handler (``handle_swbp`` -> ``handler_chain``), single-stepping
out of line through the XOL area, return instances and ``uprobe_handle_trampoline``. The
architecture's part is reached through ``proc.arch_ops`` with the kernel's arch hook names
(``arch_uprobe_analyze_insn``, ``arch_uprobe_skip_sstep``, ``arch_uprobe_pre_xol``, ...): the
whole list is uprobe_lab.arch_ops.ArchOps.

What the lab leaves out: RCU, SRCU, refcounts and hprobe leases are not run (uprobe_lab.contended records
what each version's locks and counters share between CPUs), nor the ri_timer; probes are keyed by virtual
address instead of inode+offset; consumer filters are a per-consumer callable; no session cookies.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from .arch_ops import ArchUprobe
from .constants import MASK64, PAGE_SIZE
from .errors import LabError, is_int, shown
from .program import resolve_probe_address
from .sites import UPROBES

UPROBE_HANDLER_REMOVE = 1
UPROBE_HANDLER_IGNORE = 2
MAX_URETPROBE_DEPTH = 64
UPROBE_NO_TRAMPOLINE_VADDR = MASK64  # ~0UL
ENOTSUPP = 524  # include/linux/errno.h: prepare_uprobe()'s answer to a probe on a trap instruction

# enum rp_check
RP_CHECK_CALL, RP_CHECK_CHAIN_CALL, RP_CHECK_RET = range(3)


class UnprobeableInstruction(LabError):
    """arch_uprobe_analyze_insn refused the instruction (-ENOTSUPP/-ENOEXEC). ``errno``: the error the kernel's
    registration returns, where known; ``why``: the reason alone, without the way out."""

    def __init__(self, message: str, errno: int | None = None, why: str | None = None):
        super().__init__(message)
        self.errno = errno
        self.why = why or message


class UprobeConsumer:
    """A uprobe consumer (struct uprobe_consumer).

    ``handler(regs) -> int`` runs at the probe (0, UPROBE_HANDLER_REMOVE or UPROBE_HANDLER_IGNORE);
    ``ret_handler(regs, func)`` runs when the probed function returns; ``filter(proc) -> bool``
    says whether this consumer still wants the probe in that process (no filter: always).
    A consumer with both handlers is a session consumer: its ret_handler runs only for the
    calls where its handler returned 0, as in the kernel.
    """

    def __init__(self, handler: Callable | None = None, ret_handler: Callable | None = None,
                 filter: Callable | None = None, name: str = ""):
        if handler is None and ret_handler is None:
            raise LabError("a consumer needs a handler, a ret_handler, or both")
        self.handler = handler
        self.ret_handler = ret_handler
        self.filter = filter
        self.name = name or "consumer"

    @property
    def session(self) -> bool:
        return self.handler is not None and self.ret_handler is not None

    def __repr__(self) -> str:
        kinds = "+".join(k for k, f in (("entry", self.handler), ("return", self.ret_handler)) if f)
        return f"<{type(self).__name__} {self.name} ({kinds})>"


class CountingConsumer(UprobeConsumer):
    """What the kernel bench attaches: a BPF program that only increments a hit counter.

    With ``ret=True`` it counts at function return, like the bench's uretprobe programs.
    """

    def __init__(self, ret: bool = False, name: str = ""):
        self.hits = 0
        self.funcs: list[int] = []
        if ret:
            super().__init__(ret_handler=self._count_ret, name=name or "count-return")
        else:
            super().__init__(handler=self._count, name=name or "count")

    def _count(self, regs) -> int:
        self.hits += 1
        return 0

    def _count_ret(self, regs, func: int) -> None:
        self.hits += 1
        if len(self.funcs) < 16:
            self.funcs.append(func)


@dataclass
class Uprobe:
    vaddr: int
    auprobe: ArchUprobe  # struct uprobe's ``arch`` member: the decoded instruction and how it runs
    consumers: list[UprobeConsumer] = field(default_factory=list)
    symbol: str = ""
    applied: bool = True  # breakpoint present in this mm (unapply_uprobe clears it)

    @property
    def insn(self) -> bytes:
        return self.auprobe.insn

    def __repr__(self) -> str:
        where = f" {self.symbol}" if self.symbol else ""
        return f"<Uprobe {self.vaddr:#x}{where} {self.auprobe.describe()} consumers={len(self.consumers)}>"


@dataclass
class ReturnInstance:
    uprobe: Uprobe
    func: int
    stack: int
    orig_ret_vaddr: int
    chained: bool
    session_consumers: list[UprobeConsumer] = field(default_factory=list)


@dataclass
class XolArea:
    """The ``[uprobes]`` page: slot 0 holds the return trampoline, the others hold XOL copies."""

    vaddr: int
    slot_bytes: int
    bitmap: list[bool]
    # what each slot holds: a slot that already holds the copy is not written again (as arm64's
    # arch_uprobe_copy_ixol compares first), so Unicorn keeps the code it translated there
    slot_insns: dict[int, bytes] = field(default_factory=dict)

    def slot_vaddr(self, slot: int) -> int:
        return self.vaddr + slot * self.slot_bytes


@dataclass
class MmUprobes:
    """Per-mm state: the probes applied, the XOL area, and x86's optimised-probe trampolines."""

    probes: dict[int, Uprobe] = field(default_factory=dict)
    xol_area: XolArea | None = None
    tramps: list[int] = field(default_factory=list)  # [uprobes-trampoline] pages (x86, 6.18 and 7.3)
    has_uprobes: bool = False  # MMF_HAS_UPROBES: set on install, cleared only by a recalculation
    recalc: bool = False  # MMF_RECALC_UPROBES: a breakpoint went; recalculate at the next lookup miss

    def recalc_has_uprobes(self) -> None:  # mmf_recalc_uprobes()
        self.has_uprobes = any(p.applied for p in self.probes.values())


@dataclass
class UprobeTask:
    """Per-task state (struct uprobe_task)."""

    return_instances: list[ReturnInstance] = field(default_factory=list)  # top of stack is [-1]
    active_uprobe: Uprobe | None = None
    vaddr: int = 0
    xol_vaddr: int = 0
    xol_slot: int = -1
    saved_tf: bool = False
    saved_scratch_register: int = 0  # x86 autask: the register a RIP-relative XOL step borrows

    @property
    def depth(self) -> int:
        """utask->depth: the kernel counts it beside the list; here it is the list's length."""
        return len(self.return_instances)


# --- registration -------------------------------------------------------------------------

def uprobe_register(proc, target, consumer: UprobeConsumer, offset: int = 0) -> Uprobe:
    """Attach ``consumer`` at a symbol(+offset) or address; installs the breakpoint on first use.

    Twin of uprobe_register() + register_for_each_vma(): the original bytes are analysed once
    (arch_uprobe_analyze_insn, which may refuse them) and kept; the breakpoint goes in, also
    over a probe its other consumers had removed from this mm. (The kernel asks the new
    consumer's filter first; the lab consults filters only after UPROBE_HANDLER_REMOVE.)
    """
    if not hasattr(proc, "arch_ops"):
        raise LabError(f"attach() needs a process to probe, got {proc!r}: make one with new_process()")
    if not isinstance(consumer, UprobeConsumer):
        raise LabError(f"attach() needs a consumer, got {consumer!r}: pass CountingConsumer() or "
                       "UprobeConsumer(handler=..., ret_handler=...)")
    if not is_int(offset):
        raise LabError(f"the offset into the symbol is an int of bytes, got {offset!r}")
    if not isinstance(target, (str, int)) or isinstance(target, bool):
        raise LabError(f"attach() probes a symbol by name ('uprobe_target_nop') or an address (an int), got {target!r}")
    vaddr, label = resolve_probe_address(proc, target, offset)
    uprobe = proc.mm.probes.get(vaddr)
    if uprobe is not None and consumer in uprobe.consumers:
        raise LabError(f"{consumer!r} is already attached at {vaddr:#x}; attaching it twice would count every "
                       "hit twice (the kernel's consumer list holds each consumer once): detach it first, or "
                       "attach a second consumer")
    if uprobe is None:
        arch = proc.arch_ops
        insn = proc.read(vaddr, arch.MAX_UINSN_BYTES if proc.mapping_at(vaddr + arch.MAX_UINSN_BYTES - 1)
                         else proc.mapping_at(vaddr).end - vaddr)
        if arch.is_swbp_at(proc, vaddr):  # prepare_uprobe(): is_trap_insn() before the arch's analysis
            raise UnprobeableInstruction(f"{vaddr:#x} holds the uprobe breakpoint itself (int3 on x86-64, brk #5 on "
                                         "arm64): prepare_uprobe() refuses to probe a trap (-ENOTSUPP)", errno=ENOTSUPP)
        auprobe = arch.arch_uprobe_analyze_insn(insn, vaddr, proc.kernel)
        uprobe = Uprobe(vaddr, auprobe, symbol=label, applied=False)
        proc.mm.probes[vaddr] = uprobe
    uprobe.consumers.append(consumer)
    if not uprobe.applied:
        install_breakpoint(proc, uprobe)
    return uprobe


def install_breakpoint(proc, uprobe: Uprobe) -> None:
    """Write the arch's breakpoint over the probed instruction (set_swbp) and mark the mm."""
    proc.arch_ops.set_swbp(proc, uprobe.auprobe, uprobe.vaddr)
    uprobe.applied = True
    proc.mm.has_uprobes = True


def uprobe_unregister(proc, uprobe: Uprobe, consumer: UprobeConsumer) -> None:
    """Detach a consumer; the last one out restores the original instruction (set_orig_insn)."""
    if not hasattr(proc, "arch_ops"):
        raise LabError(f"detach() needs the process the probe is in, got {shown(proc)}")
    if not isinstance(uprobe, Uprobe):
        raise LabError(f"detach() needs the probe attach() returned, got {shown(uprobe)}: "
                       "probe = attach(proc, target, consumer); detach(proc, probe, consumer)")
    if proc.mm.probes.get(uprobe.vaddr) is not uprobe:
        raise LabError(f"{uprobe!r} is not a probe of this process; detach it from the process attach() "
                       "was given (attach returns the probe of that process)")
    if consumer not in uprobe.consumers:
        raise LabError(f"{consumer!r} is not attached to {uprobe!r}")
    uprobe.consumers.remove(consumer)
    if not uprobe.consumers:
        if uprobe.applied:
            proc.arch_ops.set_orig_insn(proc, uprobe.auprobe, uprobe.vaddr)
        del proc.mm.probes[uprobe.vaddr]
        proc.mm.recalc = True  # remove_breakpoint(): MMF_HAS_UPROBES stays for now


def unapply_uprobe(proc, uprobe: Uprobe) -> None:
    """Remove the breakpoint from this mm but keep the probe registered (all filters said no)."""
    proc.arch_ops.set_orig_insn(proc, uprobe.auprobe, uprobe.vaddr)
    uprobe.applied = False
    proc.mm.recalc = True


def uprobe_dup_mmap(oldproc, newproc) -> None:
    """At fork (dup_mmap), after the mappings are copied: twin of uprobe_dup_mmap().

    The kernel only marks the child's mm (MMF_HAS_UPROBES, and MMF_RECALC_UPROBES so that a lookup
    miss checks again): its probes are the file's, and the copied text already holds their int3s and
    optimised calls. The lab keys probes per process, so the child gets its own copy of each, with
    the same analysed instruction and consumers and the breakpoint as the copied text has it. The
    trampoline pages it keeps are those its copy of the mappings holds (7.3: all; 6.18: none).
    """
    old, new = oldproc.mm, newproc.mm
    if old.has_uprobes:
        new.has_uprobes = new.recalc = True
    new.probes = {vaddr: Uprobe(vaddr, p.auprobe, list(p.consumers), p.symbol, p.applied)
                  for vaddr, p in old.probes.items()}
    new.tramps = [t for t in old.tramps if newproc.mapping_at(t) is not None]


def filter_chain(proc, uprobe: Uprobe) -> bool:
    return any(c.filter is None or c.filter(proc) for c in uprobe.consumers)


# --- the XOL area -------------------------------------------------------------------------

def get_xol_area(proc) -> XolArea:
    """Map ``[uprobes]`` on first need (__create_xol_area): slot 0 gets the return trampoline."""
    area = proc.mm.xol_area
    if area is None:
        arch = proc.arch_ops
        slots = PAGE_SIZE // arch.UPROBE_XOL_SLOT_BYTES
        vaddr = arch.TASK_SIZE - PAGE_SIZE  # get_unmapped_area hint: "Try to map as high as possible"
        page = bytearray(PAGE_SIZE)
        tramp = arch.arch_uretprobe_trampoline(proc)
        page[: len(tramp)] = tramp
        # VM_EXEC|VM_MAYEXEC: execute-only, as /proc/PID/maps shows it ("--xp"); VM_DONTCOPY: not forked
        proc.map(UPROBES, vaddr, PAGE_SIZE, "--xp", bytes(page), dontcopy=True)
        area = XolArea(vaddr, arch.UPROBE_XOL_SLOT_BYTES, [True] + [False] * (slots - 1))
        proc.mm.xol_area = area
    return area


def uprobe_get_trampoline_vaddr(proc) -> int:
    area = proc.mm.xol_area
    return area.vaddr if area else UPROBE_NO_TRAMPOLINE_VADDR


def xol_get_insn_slot(proc, uprobe: Uprobe) -> int:
    """A free slot with the copy of the probed instruction in it, its address; 0 when every slot is taken
    (the kernel's caller then sleeps on the area's wait queue: ``pre_ssout``)."""
    area = get_xol_area(proc)
    if all(area.bitmap):
        return 0
    slot = area.bitmap.index(False)
    area.bitmap[slot] = True
    proc.trace.touch(proc.accesses.xol_slot, proc.cpu)
    utask = proc.utask
    utask.xol_slot = slot
    utask.xol_vaddr = area.slot_vaddr(slot)
    ixol = uprobe.auprobe.ixol
    if area.slot_insns.get(slot) != ixol:
        proc.write(utask.xol_vaddr, ixol)  # arch_uprobe_copy_ixol: through the page, not uaccess
        area.slot_insns[slot] = ixol
    return utask.xol_vaddr


def xol_free_insn_slot(proc) -> None:
    utask = proc.utask
    if utask.xol_slot > 0:
        proc.mm.xol_area.bitmap[utask.xol_slot] = False
        proc.trace.touch(proc.accesses.xol_slot, proc.cpu)
        if proc.scheduler is not None:
            proc.scheduler.wake_all()  # wake_up(&area->wq)
    utask.xol_slot = -1
    utask.xol_vaddr = 0


# --- the breakpoint path ------------------------------------------------------------------

def uprobe_pre_sstep_notifier(proc) -> bool:
    """Claim the trap for uprobes only if this mm has probes or pending return instances."""
    return proc.mm.has_uprobes or bool(proc.utask.return_instances)


def find_active_uprobe_rcu(proc, bp_vaddr: int) -> tuple[Uprobe | None, bool]:
    """(uprobe, is_swbp): the probe at bp_vaddr, or whether a breakpoint insn is there at all. Twin of
    find_active_uprobe_rcu() in kernel/events/uprobes.c (find_active_uprobe() before 6.12, 8617408f7a01)."""
    proc.trace.emit("probe_lookups")
    proc.trace.touch(proc.accesses.find_active_uprobe_rcu, proc.cpu)
    uprobe = proc.mm.probes.get(bp_vaddr)
    if uprobe is not None and uprobe.applied:
        return uprobe, True
    if proc.mm.recalc:  # test_and_clear_bit(MMF_RECALC_UPROBES) -> mmf_recalc_uprobes()
        proc.mm.recalc = False
        proc.mm.recalc_has_uprobes()
    return None, proc.arch_ops.is_swbp_at(proc, bp_vaddr)


def handle_swbp(proc, regs) -> None:
    """A breakpoint trapped: run consumers, then emulate or single-step the original instruction.

    Order as in 6.18: the trampoline check first, then lookup, ``handler_chain``,
    ``arch_uprobe_optimize`` after the hit, the "consumer moved ip" check, emulation, XOL. The ip check
    (4363264111e1) is ``kernel.ip_change_skips_insn``: before it the original instruction was emulated or
    stepped anyway, an emulation starting from the consumer's ip and an XOL step ending at vaddr + length.
    """
    arch = proc.arch_ops
    bp_vaddr = arch.uprobe_get_swbp_addr(regs)
    if bp_vaddr == uprobe_get_trampoline_vaddr(proc):
        uprobe_handle_trampoline(proc, regs)
        return
    uprobe, is_swbp = find_active_uprobe_rcu(proc, bp_vaddr)
    if uprobe is None:
        if is_swbp:
            proc.force_sig("SIGTRAP", f"breakpoint at {bp_vaddr:#x} with no uprobe")
        else:
            regs.ip = bp_vaddr  # the probe went away under us: restart the original instruction
        return
    regs.ip = bp_vaddr  # "change it in advance for ->handler() and restart"
    handler_chain(proc, uprobe, regs)
    if proc.signal:
        return
    arch.arch_uprobe_optimize(proc, uprobe.auprobe, bp_vaddr)
    if regs.ip != bp_vaddr and proc.kernel.ip_change_skips_insn:  # execution taken elsewhere: skip the insn
        return
    if arch.arch_uprobe_skip_sstep(proc, uprobe.auprobe, regs):
        proc.trace.emit("emulated", ip=bp_vaddr, note=uprobe.auprobe.describe)
        return
    pre_ssout(proc, uprobe, regs, bp_vaddr)


def handler_chain(proc, uprobe: Uprobe, regs) -> None:
    proc.trace.touch(proc.accesses.handler_chain, proc.cpu)
    ri = None
    remove = True
    for consumer in tuple(uprobe.consumers):
        rc = 0
        if consumer.handler is not None:
            proc.trace.emit("consumers", ip=uprobe.vaddr, note=consumer.name)
            rc = consumer.handler(regs) or 0
            if rc not in (0, UPROBE_HANDLER_REMOVE, UPROBE_HANDLER_IGNORE):
                raise LabError(f"{consumer!r} returned {rc}; a handler returns 0, "
                               "UPROBE_HANDLER_REMOVE or UPROBE_HANDLER_IGNORE")
        remove &= rc == UPROBE_HANDLER_REMOVE
        if consumer.ret_handler is None or rc in (UPROBE_HANDLER_REMOVE, UPROBE_HANDLER_IGNORE):
            continue
        if ri is None:
            ri = ReturnInstance(uprobe, 0, 0, 0, False)
        if consumer.session:
            ri.session_consumers.append(consumer)
    if ri is not None:
        prepare_uretprobe(proc, uprobe, regs, ri)
    if remove and uprobe.consumers and not filter_chain(proc, uprobe):
        unapply_uprobe(proc, uprobe)


def pre_ssout(proc, uprobe: Uprobe, regs, bp_vaddr: int) -> None:
    """Step the instruction out of line. A thread that finds every slot taken sleeps in the kernel until one is
    freed (``wait_event(area->wq, ...)``) and goes on from here when it runs again; only threads on many CPUs can."""
    utask = proc.utask
    if not xol_get_insn_slot(proc, uprobe):
        if proc.scheduler is None:
            raise LabError("every XOL slot is taken, and one thread cannot hold more than one")
        proc.trace.emit("xol_waits", ip=bp_vaddr, note=lambda: f"CPU {proc.cpu} sleeps: every XOL slot is taken")

        def woken():
            regs = proc.kernel_entry()
            pre_ssout(proc, uprobe, regs, bp_vaddr)
            regs.flush()
        proc.scheduler.sleep(woken)
        return
    proc.trace.touch(proc.accesses.pre_ssout, proc.cpu)
    utask.vaddr = bp_vaddr
    proc.arch_ops.arch_uprobe_pre_xol(proc, uprobe.auprobe, regs)
    utask.active_uprobe = uprobe
    proc.trace.emit("xol_steps", ip=bp_vaddr, note=lambda: f"slot {utask.xol_slot} at {utask.xol_vaddr:#x}")


def uprobe_post_sstep_notifier(proc) -> bool:
    return proc.utask.active_uprobe is not None


def uprobe_abort_xol(proc) -> bool:
    """Abandon a pending out-of-line step. The lab's own function, no kernel twin of this name: it is the
    UTASK_SSTEP_TRAPPED branch of handle_singlestep() (kernel/events/uprobes.c), which calls
    arch_uprobe_abort_xol() (ip back to the probed address, trap flag or MDSCR.SS cleared), drops
    active_uprobe and frees the XOL slot.

    The kernel takes it when the step faulted or a signal cut it short (uprobe_deny_signal); the
    lab also takes it when a run is stopped with a step pending (an instruction budget, Ctrl-C, a
    stepper's Reset), so the next run starts on a consistent task. The processes call it when the CPU
    faults, so a fault inside the step is reported at the probed address; it does nothing unless a
    step was under way. Returns whether a step was pending."""
    utask = proc.utask
    uprobe = utask.active_uprobe
    if uprobe is None:
        return False
    regs = proc.kernel_entry()
    proc.arch_ops.arch_uprobe_abort_xol(proc, uprobe.auprobe, regs)
    utask.active_uprobe = None
    xol_free_insn_slot(proc)
    regs.flush()
    return True


def handle_singlestep(proc, regs) -> None:
    utask = proc.utask
    uprobe = utask.active_uprobe
    err = proc.arch_ops.arch_uprobe_post_xol(proc, uprobe.auprobe, regs)
    proc.trace.touch(proc.accesses.handle_singlestep, proc.cpu)
    utask.active_uprobe = None
    xol_free_insn_slot(proc)
    if err:
        proc.force_sig("SIGILL", "execute the probed insn, sending SIGILL.")


# --- return probes ------------------------------------------------------------------------

def prepare_uretprobe(proc, uprobe: Uprobe, regs, ri: ReturnInstance) -> None:
    utask = proc.utask
    area = get_xol_area(proc)
    if utask.depth >= MAX_URETPROBE_DEPTH:
        proc.dmesg.append("uprobe: omit uretprobe due to nestedness limit pid/tgid=1/1")
        return
    trampoline_vaddr = area.vaddr
    orig_ret_vaddr = proc.arch_ops.arch_uretprobe_hijack_return_addr(proc, trampoline_vaddr, regs)
    if orig_ret_vaddr == -1:
        return
    chained = orig_ret_vaddr == trampoline_vaddr
    cleanup_return_instances(proc, chained, regs)
    if chained:
        if not utask.return_instances:
            proc.dmesg.append("uprobe: lab:1 failed to handle tail call")  # uprobe_warn(); "Likely ... an attack"
            return
        orig_ret_vaddr = utask.return_instances[-1].orig_ret_vaddr
    ri.func = regs.ip
    ri.stack = regs.sp
    ri.orig_ret_vaddr = orig_ret_vaddr
    ri.chained = chained
    utask.return_instances.append(ri)
    proc.trace.touch(proc.accesses.prepare_uretprobe, proc.cpu)
    proc.trace.emit("ri_pushed", ip=ri.func, note=lambda: f"return to {orig_ret_vaddr:#x}{' (chained)' if chained else ''}")


def cleanup_return_instances(proc, chained: bool, regs) -> None:
    """Drop the instances a longjmp() left behind (their frames are gone)."""
    utask = proc.utask
    ctx = RP_CHECK_CHAIN_CALL if chained else RP_CHECK_CALL
    while utask.return_instances and not proc.arch_ops.arch_uretprobe_is_alive(
            utask.return_instances[-1], ctx, regs):
        utask.return_instances.pop()
        proc.trace.emit("ri_popped", note="dropped: frame no longer on the stack")


def find_next_ret_chain(utask: UprobeTask, index: int) -> int:
    """Index (into return_instances) of the next chain below the one whose top is ``index``; -1 if none."""
    while True:
        chained = utask.return_instances[index].chained
        index -= 1
        if not chained:
            return index


def uprobe_handle_trampoline(proc, regs) -> None:
    """A return reached the trampoline: restore the real return address and run ret handlers.

    Instances whose frames a longjmp() skipped are popped without running handlers (``valid``).
    Called from handle_swbp (int3 trampoline, before 6.11: then named handle_trampoline) or
    from sys_uretprobe.
    """
    utask = proc.utask
    if not utask.return_instances:
        proc.force_sig("SIGILL", "handle uretprobe, sending SIGILL.")
        return
    arch = proc.arch_ops
    while True:
        top = len(utask.return_instances) - 1
        next_chain = find_next_ret_chain(utask, top)
        valid = next_chain < 0 or arch.arch_uretprobe_is_alive(utask.return_instances[next_chain], RP_CHECK_RET, regs)
        regs.ip = utask.return_instances[top].orig_ret_vaddr
        while len(utask.return_instances) - 1 > next_chain:
            ri = utask.return_instances.pop()
            proc.trace.emit("ri_popped", ip=ri.orig_ret_vaddr, note="" if valid else "skipped by longjmp")
            if valid:
                handle_uretprobe_chain(proc, ri, regs)
        if valid:
            return


def handle_uretprobe_chain(proc, ri: ReturnInstance, regs) -> None:
    proc.trace.touch(proc.accesses.handle_uretprobe_chain, proc.cpu)
    for consumer in list(ri.uprobe.consumers):
        if consumer.ret_handler is None:
            continue
        if consumer.session and consumer not in ri.session_consumers:
            continue
        proc.trace.emit("consumers", ip=ri.func, note=lambda: f"{consumer.name} ret_handler")
        consumer.ret_handler(regs, ri.func)


def handle_syscall_uprobe(proc, regs, bp_vaddr: int) -> None:
    """sys_uprobe's probe hit (x86: a nop5 on 6.18, a nop10 on 7.3): consumers only - no emulation, no
    single-step. Twin of handle_syscall_uprobe() in kernel/events/uprobes.c."""
    uprobe, _ = find_active_uprobe_rcu(proc, bp_vaddr)
    if uprobe is None:
        return
    handler_chain(proc, uprobe, regs)
