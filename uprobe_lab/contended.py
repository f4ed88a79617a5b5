"""What a hit touches that other CPUs touch too, cache line by cache line: kernel/events/uprobes.c and, for the
kernel bench's consumer, kernel/trace/trace_uprobe.c.

What one CPU's hit costs changed with the rules of uprobe_lab.kernel that bring a modelled version (6.11, 6.16,
6.18, 7.3); what many CPUs hitting one probe fight over changed with its contention rules (6.10, 6.12, 6.13,
6.14, 6.15, 7.0, 7.3), which leave one CPU's events as they are: this module records the latter. Each function
here records, for one step of the hit path (named after the kernel function it happens in), the accesses that
kernel's version makes (``proc.kernel``: the rules of uprobe_lab.kernel, each with its commit). An access names
the 64-byte cache line it lands on (:class:`Line`: a structure and the line's offset in it, from the
structure's layout below), since what moves between CPUs is the line, whichever of its fields was written. A
process keeps its kernel's answers (``proc.accesses``, made once by :func:`accesses`), and the core hands them
to ``Trace.touch`` as the hit passes each step. Kinds:

- ``spinlock``: a lock taken and released (two writes) on a line every CPU takes; the holders run one at a time.
- ``atomic``: an atomic read-modify-write (rwlock or rwsem read side, refcount, bitmap bit) of a shared line.
- ``write``: a plain store to a shared line (a counter's ``++``, an instruction copied into the XOL page).
- ``read``: a load of a shared line: free while no hit writes it, a transfer when another CPU's hit did.
- ``per-cpu`` and ``per-task``: state no other CPU writes (SRCU's counters, RCU Tasks Trace's nesting count).

In the bench every thread is in one process and hits one probe, so a line of the process (``mm_struct``), of
the probe (``struct uprobe``, the consumer's ``trace_uprobe``) or of the whole system (``uprobes_treelock``)
is shared by all of them alike.

The layouts (x86-64, a distribution's config: no lockdep or lock debugging, CONFIG_RWSEM_SPIN_ON_OWNER=y;
pointers and longs 8 bytes, ``spinlock_t``/``atomic_t``/``refcount_t`` 4, ``rb_node`` 24, ``list_head`` 16,
``rw_semaphore`` 40: count 0, owner 8, osq 16, wait_lock 20, wait_list 24; ``wait_queue_head_t`` 24):

- ``struct uprobe`` (kernel/events/uprobes.c, 6.8-7.x): rb_node 0-23, ref 24-27, register_rwsem 32-71
  (count at 32, owner at 40), consumer_rwsem 72-111, ... The object is about 200 bytes, from kmalloc-256, so
  64-byte aligned: line +0 holds rb_node, ref and register_rwsem.count/owner. get_uprobe/put_uprobe (and 6.12's
  try_get_uprobe) and down_read/up_read(register_rwsem) write one line, and 6.12's lockless lookup
  (rb_find_rcu, reading rb_node) reads it.
- ``struct xol_area``: 6.8-6.11 {wq 0-23, slot_count 24, bitmap 32, xol_mapping 40-71 (6.11: -79), pages[2],
  vaddr 88 (6.11: 96)}: slot_count on the line at +0, vaddr past +64 whether the 96-byte object starts on a
  line or 32 bytes into one (kmalloc-96). 6.12 (6d27a31ef195 and 2abbcc099ec6 took the mapping and a page out):
  {wq 0-23, slot_count 24, bitmap 32, page 40, vaddr 48}, 56 bytes from kmalloc-64: one line, so the
  slot_count the steps write is on the line every int3 reads (``uprobe_get_trampoline_vaddr``: area->vaddr).
  6.13 (7a166094bd2b) dropped slot_count: the line is only read. The bitmap itself is a separate kcalloc of
  one long (32 slots), a kmalloc-8 object, on a line of its own as far as a hit goes.
- The ``[uprobes]`` page: UPROBE_XOL_SLOT_BYTES = 128 on x86-64, so a slot is two 64-byte lines; slot 0 is the
  return trampoline, and xol_take_insn_slot hands out the lowest free slot, so the steps of all CPUs land on
  slot 1 whenever fewer steps overlap than there are slots. xol_get_insn_slot copies ``arch.ixol`` (16 bytes)
  into the slot on every step: a store to the slot's first line (its second is never written).
- ``struct trace_uprobe`` (kernel/trace/trace_uprobe.c, 6.8-6.11): devent 0-23, consumer 24-55, path 56-71,
  inode 72, filename 80, offset 88, ref_ctr_offset 96, nhit 104: ``tu->nhit++`` in uprobe_dispatcher writes
  the line at +64 on every hit (kmalloc-192 or -256: 64-byte aligned). 10cdb82aa77f (6.12) made it per-CPU.
  Until cdf355cc60e3 (6.10) uprobe_perf_filter took read_lock(&filter->rwlock) on every hit; the filter sits
  in the ``trace_probe_event`` after its trace_event_call, at an offset the config decides (not computed).
- ``struct sighand_struct``: siglock at 0. ``struct mm_struct``: mmap_lock and mm_lock_seq, at offsets the
  config decides (not computed); no hit writes another field of their lines. ``uprobes_treelock`` and
  ``uprobes_seqcount`` are globals of kernel/events/uprobes.c.

What the lab leaves out: the rare paths (``register_rwsem`` after UPROBE_HANDLER_REMOVE, the fallback to
``mmap_read_lock`` when the address space changed under a speculative lookup, the lease expiring after 100 ms),
the int3's read of area->vaddr where no hit writes its line (every version but 6.12; on 6.12 it is counted even
before the process has an XOL area, when no hit writes the line either, so it moves nothing), a step landing on another
slot than the lowest when steps overlap (one slot line is followed), the neighbours of kmalloc-8's bitmap and
the slab allocator's internals.
"""
from __future__ import annotations

from dataclasses import dataclass

from .kernel import major_minor

SPINLOCK, ATOMIC, WRITE, READ, PER_CPU, PER_TASK = "spinlock", "atomic", "write", "read", "per-cpu", "per-task"
# The layouts above were read from 6.8 on. An older release's hit is counted on them, with the rules of
# uprobe_lab.kernel it has (none of the contention rules: 6.8's locking), so its counts are 6.8's, not its own.
FIRST_LAID_OUT = (6, 8)


def layout_note(release) -> str | None:
    """For a release older than :data:`FIRST_LAID_OUT`, the line saying its shared lines are counted as 6.8's;
    None for any other (a modelled version, a newer release, or no release)."""
    text = str(release).strip()
    line = major_minor(text)
    if line is None or line >= FIRST_LAID_OUT:
        return None
    return (f"kernel {text}: older than 6.8, the oldest release whose structures the lab lays out "
            "(uprobe_lab.contended): its shared lines and writes per hit are 6.8's locking, not read from its own "
            "source")
WRITES = (SPINLOCK, ATOMIC, WRITE)  # the kinds that take a line away from the CPUs that hold it


@dataclass(frozen=True)
class Line:
    """One 64-byte cache line: the structure (or global) it belongs to, its first byte's offset there (None where
    the config decides it) and the fields on it that a hit touches."""
    structure: str
    offset: int | None
    fields: tuple[str, ...]

    @property
    def name(self) -> str:
        where = "" if self.offset is None else f" +{self.offset}"
        return f"{self.structure}{where}: {', '.join(self.fields)}"


UPROBE = Line("struct uprobe", 0, ("rb_node", "ref", "register_rwsem"))
XOL_AREA = Line("struct xol_area", 0, ("wq", "slot_count", "bitmap"))  # 6.8-6.11: vaddr on the next line
XOL_AREA_6_12 = Line("struct xol_area", 0, ("wq", "slot_count", "bitmap", "page", "vaddr"))
XOL_AREA_6_13 = Line("struct xol_area", 0, ("wq", "bitmap", "page", "vaddr"))  # 7a166094bd2b dropped slot_count
XOL_BITMAP = Line("xol_area->bitmap[]", 0, ("slots 0-31",))
XOL_SLOT = Line("[uprobes] slot 1", 0, ("ixol",))  # x86-64: page offset 128
NHIT = Line("struct trace_uprobe", 64, ("nhit",))
FILTER = Line("struct trace_probe_event", None, ("filter.rwlock",))
MMAP_LOCK = Line("struct mm_struct", None, ("mmap_lock",))
MM_LOCK_SEQ = Line("struct mm_struct", None, ("mm_lock_seq",))
TREELOCK = Line("uprobes_treelock", 0, ("rwlock or spinlock",))
SEQCOUNT = Line("uprobes_seqcount", 0, ("sequence",))
SIGLOCK = Line("struct sighand_struct", 0, ("siglock",))


def xol_area_line(k) -> Line:
    """struct xol_area's first line as kernel ``k`` lays it out: wq, slot_count and bitmap (vaddr on a later line)
    until 6.12; 6.12's vaddr beside them; from 6.13 (7a166094bd2b) no slot_count."""
    if k.xol_no_slot_count:
        return XOL_AREA_6_13
    return XOL_AREA_6_12 if k.lockless_lookup else XOL_AREA


def _at(line: Line, kind: str, n: int) -> tuple:
    return (line.name, kind), n


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


def find_active_uprobe_rcu_accesses(k) -> tuple:
    """handle_swbp's lookup: the VMA under mmap_lock (6.14: speculatively), then the probe in uprobes_tree and its
    refcount (6.12: the tree under a seqcount and a read section, which also covers the walk of the consumers;
    rb_find_rcu reads the probe's first line). On 6.12 the int3's area->vaddr shares a line with slot_count."""
    vma = _at(MM_LOCK_SEQ, READ, 1) if k.speculative_vma_lookup else _at(MMAP_LOCK, ATOMIC, 2)  # lock + unlock
    if k.lockless_lookup:
        tree = (_at(SEQCOUNT, READ, 1), _at(UPROBE, READ, 1))
    else:  # the walk reads the probe's line under the lock; get_uprobe then writes it
        tree = (_at(TREELOCK, ATOMIC if k.treelock_rwlock else SPINLOCK, 2),)
    life = _read_side(k) if k.srcu_uprobe_lifetime else (_at(UPROBE, ATOMIC, 2),)  # get_uprobe + put_uprobe
    vaddr = (_at(XOL_AREA_6_12, READ, 1),) if k.lockless_lookup and not k.xol_no_slot_count else ()
    return (vma, *tree, *life, *vaddr)


def handler_chain_accesses(k) -> tuple:
    """The consumer list, read under register_rwsem (down_read + up_read) until 6.12, and the bench's consumer
    (trace_uprobe's uprobe_dispatcher): ``tu->nhit++`` until 6.12 and the filter's read_lock until 6.10."""
    chain = () if k.lockless_consumers else (_at(UPROBE, ATOMIC, 2),)
    nhit = () if k.per_cpu_nhit else (_at(NHIT, WRITE, 1),)
    rwlock = () if k.perf_filter_nr_systemwide else (_at(FILTER, ATOMIC, 2),)
    return (*chain, *nhit, *rwlock)


def pre_ssout_accesses(k) -> tuple:
    """The instruction copied into the slot (every step), and from 6.12 the probe held by a reference for the step
    (try_get_uprobe here, put_uprobe after it; before, the lookup's reference did)."""
    ref = (_at(UPROBE, ATOMIC, 2),) if k.srcu_uprobe_lifetime else ()
    return (_at(XOL_SLOT, WRITE, 1), *ref)


def xol_slot_accesses(k) -> tuple:
    """Taking or freeing a slot: a bit of the area's bitmap, and (until 6.13) its atomic slot_count."""
    bit = _at(XOL_BITMAP, ATOMIC, 1)
    if k.xol_no_slot_count:
        return (bit,)
    return bit, _at(xol_area_line(k), ATOMIC, 1)


def handle_singlestep_accesses(k) -> tuple:
    """recalc_sigpending() under the process's sighand->siglock after every step, until 6.15."""
    return () if k.singlestep_without_siglock else (_at(SIGLOCK, SPINLOCK, 2),)  # spin_lock_irq + unlock


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
        hold = _at(UPROBE, ATOMIC, 2)
    return alloc, hold


def handle_uretprobe_chain_accesses(k) -> tuple:
    """The return consumers: under register_rwsem until 6.12, then in a read section of their own."""
    return _read_side(k) if k.lockless_consumers else (_at(UPROBE, ATOMIC, 2),)


@dataclass(frozen=True)
class Accesses:
    """One kernel's accesses at each step of the hit path, as ((line, kind), count) pairs."""
    find_active_uprobe_rcu: tuple
    handler_chain: tuple
    pre_ssout: tuple
    xol_slot: tuple
    handle_singlestep: tuple
    prepare_uretprobe: tuple
    handle_uretprobe_chain: tuple


def accesses(k) -> Accesses:
    return Accesses(find_active_uprobe_rcu_accesses(k), handler_chain_accesses(k), pre_ssout_accesses(k),
                    xol_slot_accesses(k), handle_singlestep_accesses(k), prepare_uretprobe_accesses(k),
                    handle_uretprobe_chain_accesses(k))
