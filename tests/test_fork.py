"""fork(): what a child inherits from a probed process (EmulatedProcess.fork, uprobes.uprobe_dup_mmap).

The expectations come from the kernel source, not from the lab:

* dup_mmap() (mm/mmap.c since 6.16, kernel/fork.c before): ``if (mpnt->vm_flags & VM_DONTCOPY) { ... continue; }`` - such a mapping is
  not in the child; every other one is copied, anonymous copies of text pages (where uprobes wrote their
  int3s and calls) included. uprobe_dup_mmap() only sets MMF_HAS_UPROBES and MMF_RECALC_UPROBES.
* kernel/events/uprobes.c __create_xol_area(): ``[uprobes]`` is installed with
  ``VM_EXEC|VM_MAYEXEC|VM_DONTCOPY|VM_IO`` on every version the lab models.
* [6.18] arch/x86/kernel/uprobes.c create_uprobe_trampoline(): ``_install_special_mapping(mm, tramp->vaddr,
  PAGE_SIZE, VM_READ|VM_EXEC|VM_MAYEXEC|VM_MAYREAD|VM_DONTCOPY|VM_IO, &tramp_mapping)``; 7.3's
  d9a48e77f6fe "uprobes/x86: Allow to copy uprobe trampolines on fork" lets the child keep it (7.2.y from 7.2.6).
* arch_uprobe_optimize() rewrites the site of ``current->mm``: each process optimises its own copy.

tests/test_native_fork.py asks this host's kernel the same questions.
"""
import pytest

from uprobe_lab.arches import make_process
from uprobe_lab.errors import LabError, ProcessKilled
from uprobe_lab.native.fork import FORK_SITES, emulated_fork_report
from uprobe_lab.sites import UPROBES, UPROBES_TRAMPOLINE, call_target, site_state
from uprobe_lab.uprobes import CountingConsumer, UprobeConsumer, uprobe_register, uprobe_unregister

NOP5, NOP10 = "uprobe_target_nop5", "uprobe_target_nop10"


def probed(kernel: str, target: str, hits: int = 2, **options):
    proc = make_process("x86_64", kernel, **options)
    consumer = CountingConsumer()
    uprobe = uprobe_register(proc, target, consumer)
    site = proc.program.resolve(target)
    if hits:
        proc.call("producer_loop", hits, site)
    return proc, consumer, uprobe, site


def names(proc) -> set[str]:
    return {m.name for m in proc.mappings}


def test_618_child_of_an_optimised_nop5_calls_an_unmapped_page_and_dies():
    parent, consumer, _, site = probed("6.18", NOP5)
    tramp = call_target(parent.read(site, 5), site)
    assert parent.mapping_at(tramp).name == UPROBES_TRAMPOLINE
    child = parent.fork()
    assert child.read(site, 5) == parent.read(site, 5)  # the text page is copied with its call
    assert UPROBES_TRAMPOLINE not in names(child) and child.mapping_at(tramp) is None
    with pytest.raises(ProcessKilled):
        child.call("producer_loop", 1, site)
    assert child.signal == "SIGSEGV" and child.pc == tramp
    assert consumer.hits == 2  # the child never reached the kernel
    parent.call("producer_loop", 3, site)  # the parent is untouched
    assert consumer.hits == 5


def test_73_child_keeps_the_trampoline_and_its_calls_are_probe_hits():
    parent, consumer, _, site = probed("7.3", NOP10)
    child = parent.fork()
    tramp = call_target(child.read(site + 5, 5), site + 5)
    m = child.mapping_at(tramp)
    assert m is not None and m.name == UPROBES_TRAMPOLINE and m.start == parent.find_mapping(UPROBES_TRAMPOLINE).start
    assert child.read(m.start, 32) == parent.read(m.start, 32)
    child.call("producer_loop", 3, site)
    assert consumer.hits == 5
    counts = child.trace.counts
    assert counts["syscalls"] == 3 and counts["consumers"] == 3 and not counts.get("exceptions")


def test_uprobes_xol_area_is_not_inherited_and_the_child_maps_its_own():
    parent, consumer, _, site = probed("6.18", "uprobe_target_ret")  # ret is stepped out of line
    area = parent.find_mapping(UPROBES)
    assert area is not None
    child = parent.fork()
    assert UPROBES not in names(child) and child.mm.xol_area is None
    child.call("producer_loop", 2, site)
    assert consumer.hits == 4 and child.trace.counts["xol_steps"] == 2
    assert child.find_mapping(UPROBES) == area  # the same address: the hint is TASK_SIZE - PAGE_SIZE


def test_618_each_process_optimises_its_own_copy():
    parent, consumer, _, site = probed("6.18", NOP5, hits=0)  # forked before any hit: still an int3
    child = parent.fork()
    child.call("producer_loop", 2, site)
    assert site_state(child.read(site, 5), site, child.mappings) == "call [uprobes-trampoline]"
    assert site_state(parent.read(site, 5), site, parent.mappings) == "int3"
    assert UPROBES_TRAMPOLINE not in names(parent)
    assert consumer.hits == 2


def test_the_child_gets_the_mm_flags_and_probes_of_its_own():
    parent, consumer, uprobe, site = probed("6.18", "uprobe_target_nop")
    child = parent.fork()
    assert child.mm.has_uprobes and child.mm.recalc  # MMF_HAS_UPROBES, MMF_RECALC_UPROBES
    theirs = child.mm.probes[site]
    assert theirs is not uprobe and theirs.auprobe is uprobe.auprobe and theirs.consumers == [consumer]
    uprobe_unregister(parent, uprobe, consumer)  # the lab's simplification: the child keeps its probe
    assert parent.read(site, 1) != b"\xcc" and child.read(site, 1) == b"\xcc"
    child.call("producer_loop", 1, site)
    assert consumer.hits == 3


def test_the_child_has_the_parents_registers_and_options():
    parent = make_process("x86_64", "6.11", compat_task=True, uretprobe_saves_regs=False, record=True)
    parent.call("producer_loop", 1, parent.program.resolve("uprobe_target_nop"))
    child = parent.fork()
    assert child.regs().as_dict() == parent.regs().as_dict()
    assert (child.compat_task, child.uretprobe_saves_regs, child.trace.record, child.kernel) == (True, False, True,
                                                                                                 parent.kernel)
    assert child.maps() == parent.maps()


def test_arm64_child_steps_in_a_new_xol_area():
    parent = make_process("arm64", "6.18", stp="xol", stp_store="uaccess")
    consumer = CountingConsumer()
    site = parent.program.resolve("uprobe_target_push")  # stp x29, x30, [sp, #-16]!: stepped out of line
    uprobe_register(parent, site, consumer)
    parent.call("producer_loop", 1, site)
    assert UPROBES in names(parent)
    child = parent.fork()
    assert (child.stp, child.stp_store) == ("xol", "uaccess") and UPROBES not in names(child)
    child.call("producer_loop", 2, site)
    assert consumer.hits == 3 and child.trace.counts["xol_steps"] == 2 and UPROBES in names(child)


def test_fork_refuses_a_running_or_dead_process():
    proc = make_process("x86_64", "6.18")
    seen = []

    def handler(regs):
        try:
            proc.fork()
        except LabError as err:
            seen.append(str(err))
        return 0

    site = proc.program.resolve("uprobe_target_nop")
    uprobe_register(proc, site, UprobeConsumer(handler=handler))
    proc.call("producer_loop", 1, site)
    assert seen and "between two calls" in seen[0]
    parent, _, _, site = probed("6.18", NOP5)
    child = parent.fork()
    with pytest.raises(ProcessKilled):
        child.call("producer_loop", 1, site)
    with pytest.raises(ProcessKilled, match="does not fork"):
        child.fork()


@pytest.mark.parametrize("kernel,fates", [
    ("6.11", {NOP5: "exit 0", NOP10: None, "uprobe_target_ret": "exit 0"}),
    ("6.18", {NOP5: "SIGSEGV", NOP10: None, "uprobe_target_ret": "exit 0"}),
    ("7.3", {NOP5: "exit 0", NOP10: "exit 0", "uprobe_target_ret": "exit 0"}),
])
def test_fork_report_per_kernel(kernel, fates):
    report = emulated_fork_report(kernel)
    assert set(report) == set(FORK_SITES)
    for name, fate in fates.items():
        if fate is None:
            assert report[name] == {"attach": "refused (ENOTSUPP)"}
            continue
        assert report[name]["child"] == fate
        assert report[name]["child hits"] == (0 if fate == "SIGSEGV" else 2)
        assert report[name]["child maps"] == ("[uprobes-trampoline]" if name == NOP10 else "none")


def test_fork_table_shows_each_kernels_accepted_sites():
    from uprobe_lab.views.nop5 import fork_table

    table = fork_table(host=False).set_index(["who", "site"])
    assert list(table.index) == [("lab 6.18", "nop5"), ("lab 6.18", "ret"), ("lab 7.3", "nop5"), ("lab 7.3", "nop10"),
                                 ("lab 7.3", "ret")]  # 6.18 refuses the nop10 at attach
    assert table.loc[("lab 6.18", "nop5"), "child"] == "SIGSEGV"
    assert table.loc[("lab 6.18", "nop5"), "child site"] == "call into an unmapped page"
    assert table.loc[("lab 7.3", "nop10"), "child maps"] == "[uprobes-trampoline]"
