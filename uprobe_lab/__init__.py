"""uprobe_lab: learn, teach and check how Linux uprobes work.

The lab in five lines::

    import uprobe_lab as ul
    proc = ul.new_process(kernel="6.18")                 # x86-64, the kernel bench's program loaded
    ul.attach(proc, "uprobe_target_ret", ul.CountingConsumer())
    proc.call("uprobe_target_ret")                       # one hit: int3 -> consumer -> XOL step -> #DB
    proc.trace.counts                                    # what it cost, in events
"""
from .arches import check_options, get_arch, make_process as new_process
from .bench import events_per_hit, events_table, run_bench
from .errors import LabError, ProcessKilled, show_briefly_in_ipython
from .kernel import KERNELS, get_kernel
from .program import disasm, listing
from .uprobes import (UPROBE_HANDLER_IGNORE, UPROBE_HANDLER_REMOVE, CountingConsumer, UnprobeableInstruction,
                      UprobeConsumer, uprobe_register as attach, uprobe_unregister as detach)


show_briefly_in_ipython()


def analyze(insn: str, arch: str = "x86_64", kernel=None, **options) -> dict:
    """What the kernel would do with a probe on ``insn`` (x86: hex bytes; arm64: the word)."""
    row = get_arch(arch)
    check_options(row.analyze, options, f"analyze() on {arch}")
    return row.analyze(insn, get_kernel(kernel), **options)


__all__ = ["new_process", "attach", "detach", "run_bench", "events_per_hit", "events_table", "analyze", "disasm", "listing",
           "CountingConsumer", "UprobeConsumer", "UPROBE_HANDLER_REMOVE", "UPROBE_HANDLER_IGNORE", "LabError",
           "ProcessKilled", "UnprobeableInstruction", "KERNELS", "get_kernel"]
