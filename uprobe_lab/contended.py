"""What a hit touches that other CPUs touch too: the locks, counters and bitmaps of kernel/events/uprobes.c.

One CPU's hit costs the same events on every kernel since 6.10; what changed from 6.10 to 6.15 is what many
CPUs hitting one probe fight over. Each function here records, for one step of the hit path (named after the
kernel function it happens in), the accesses that kernel's version makes (``proc.kernel``: the rules of
uprobe_lab.kernel, each with its commit). A process keeps its kernel's answers (``proc.accesses``, made once by
:func:`accesses`), and the core hands them to ``Trace.touch`` as the hit passes each step. Kinds:

- ``spinlock``: a lock taken and released (two writes) on a line every CPU takes; the holders run one at a time.
- ``atomic``: an atomic read-modify-write (rwlock or rwsem read side, refcount, bitmap bit) of a shared line.
- ``read``: a load of a shared line only writers (registration, mmap) store to: a seqcount, for instance.
- ``per-cpu`` and ``per-task``: state no other CPU writes (SRCU's counters, RCU Tasks Trace's nesting count).

In the bench every thread is in one process and hits one probe, so a line shared by the process (``mm->``),
by the probe (``uprobe->``) or by the whole system (``uprobes_treelock``) is shared by all of them alike.

What the lab leaves out: the consumers' own sharing (the kernel bench's BPF program counts per CPU), the
rare paths (``register_rwsem`` after UPROBE_HANDLER_REMOVE, the fallback to ``mmap_read_lock`` when the
address space changed under a speculative lookup, the lease expiring after 100 ms), the XOL page's copy of
the instruction (a store to a page the other threads execute from) and the slab allocator's internals.
"""
from __future__ import annotations

from dataclasses import dataclass

SPINLOCK, ATOMIC, READ, PER_CPU, PER_TASK = "spinlock", "atomic", "read", "per-cpu", "per-task"


def _read_side(k) -> tuple:
    """One read-side section (its lock and unlock): srcu_read_lock on uprobes_srcu's per-CPU counters until
    6.13, then rcu_read_lock_trace's per-task nesting count; from 7.0 (c27cea4416a3) RCU Tasks Trace is
    SRCU-fast underneath, so its reader increments a per-CPU counter and issues smp_mb() (a full barrier on
    the hit, though no line another CPU writes) unless the kernel is built with TASKS_TRACE_RCU_NO_MB."""
    if k.tasks_trace_srcu_fast:
        return (("rcu_tasks_trace_srcu_struct (per-CPU counters, smp_mb)", PER_CPU), 2),
    if k.rcu_tasks_trace:
        return (("current->trc_reader_nesting", PER_TASK), 2),
    return (("uprobes_srcu (per-CPU counters)", PER_CPU), 2),


def find_active_uprobe_accesses(k) -> tuple:
    """The lookup: the VMA under mmap_lock (6.14: speculatively), then the probe in uprobes_tree, and its refcount
    (6.12: handle_swbp's read section instead, which also covers the walk of the consumers)."""
    vma = (("mm->mm_lock_seq", READ), 1) if k.speculative_vma_lookup else (("mm->mmap_lock", ATOMIC), 2)  # lock + unlock
    if k.lockless_lookup:
        tree = (("uprobes_seqcount", READ), 1)
    else:
        tree = (("uprobes_treelock", ATOMIC), 2) if k.treelock_rwlock else (("uprobes_treelock", SPINLOCK), 2)
    life = _read_side(k) if k.srcu_uprobe_lifetime else ((("uprobe->ref", ATOMIC), 2),)  # get_uprobe + put_uprobe
    return (vma, tree, *life)


def handler_chain_accesses(k) -> tuple:
    """The consumer list: read under register_rwsem (down_read + up_read) until 6.12."""
    return () if k.lockless_consumers else ((("uprobe->register_rwsem", ATOMIC), 2),)


def pre_ssout_accesses(k) -> tuple:
    """A step out of line holds the probe by a reference from 6.12 (try_get_uprobe here, put_uprobe after it;
    before, the lookup's reference did)."""
    return ((("uprobe->ref", ATOMIC), 2),) if k.srcu_uprobe_lifetime else ()


def xol_slot_accesses(k) -> tuple:
    """Taking or freeing a slot: a bit of the area's bitmap, and (until 6.13) its atomic slot_count."""
    bit = (("xol_area->bitmap", ATOMIC), 1)
    return (bit,) if k.xol_no_slot_count else (bit, (("xol_area->slot_count", ATOMIC), 1))


def handle_singlestep_accesses(k) -> tuple:
    """recalc_sigpending() under the process's sighand->siglock after every step, until 6.15."""
    return () if k.singlestep_without_siglock else ((("sighand->siglock", SPINLOCK), 2),)  # spin_lock_irq + unlock


def prepare_uretprobe_accesses(k) -> tuple:
    """The return instance: allocated (6.14: from the task's pool), holding the probe by a reference until the
    return (6.13: by an SRCU lease, __srcu_read_lock now and unlock then; 7.3, 36c8b02c3fe9: an
    SRCU-fast-updown lease, whose lock and unlock take no smp_mb())."""
    alloc = (("utask->ri_pool", PER_TASK), 1) if k.ri_pool else (("kmalloc (per-CPU slab)", PER_CPU), 1)
    if k.uretprobes_srcu_fast:
        hold = (("uretprobes_srcu (SRCU-fast-updown per-CPU counters)", PER_CPU), 2)
    elif k.uretprobe_lease:
        hold = (("uretprobes_srcu (per-CPU counters)", PER_CPU), 2)
    else:
        hold = (("uprobe->ref", ATOMIC), 2)
    return alloc, hold


def handle_uretprobe_chain_accesses(k) -> tuple:
    """The return consumers: under register_rwsem until 6.12, then in a read section of their own."""
    return _read_side(k) if k.lockless_consumers else ((("uprobe->register_rwsem", ATOMIC), 2),)


@dataclass(frozen=True)
class Accesses:
    """One kernel's accesses at each step of the hit path, as ((state, kind), count) pairs."""
    find_active_uprobe: tuple
    handler_chain: tuple
    pre_ssout: tuple
    xol_slot: tuple
    handle_singlestep: tuple
    prepare_uretprobe: tuple
    handle_uretprobe_chain: tuple


def accesses(k) -> Accesses:
    return Accesses(find_active_uprobe_accesses(k), handler_chain_accesses(k), pre_ssout_accesses(k),
                    xol_slot_accesses(k), handle_singlestep_accesses(k), prepare_uretprobe_accesses(k),
                    handle_uretprobe_chain_accesses(k))
