"""The arch contract (uprobe_lab.arch_ops.ArchOps) is what the core calls, and both arches keep it."""
import ast
import sys
import inspect
from collections import Counter
from pathlib import Path

import pytest

import uprobe_lab
from uprobe_lab import uprobes
from uprobe_lab.arch_ops import ARCH_CONSTANTS, ARCH_HOOKS, LAB_OWN_HOOKS, ArchOps, ArchUprobe
from uprobe_lab.arches import ARCHES, make_process

CORE = Path(uprobe_lab.__file__).with_name("uprobes.py")


def _arch_members_the_core_uses() -> set[str]:
    """Every ``proc.arch_ops.X`` and ``arch.X`` (where ``arch = proc.arch_ops``) in the core."""
    used = set()
    for node in ast.walk(ast.parse(CORE.read_text())):
        if not isinstance(node, ast.Attribute):
            continue
        owner = node.value
        if isinstance(owner, ast.Attribute) and owner.attr == "arch_ops":
            used.add(node.attr)
        elif isinstance(owner, ast.Name) and owner.id == "arch":
            used.add(node.attr)
    return used


def test_the_contract_is_exactly_what_the_core_calls():
    assert _arch_members_the_core_uses() == set(ARCH_HOOKS) | set(ARCH_CONSTANTS)


@pytest.mark.parametrize("arch", sorted(ARCHES))
def test_each_arch_implements_the_contract_with_its_signatures(arch):
    ops = make_process(arch).arch_ops
    assert isinstance(ops, ArchOps)
    for name in ARCH_HOOKS:
        wanted = list(inspect.signature(getattr(ArchOps, name)).parameters)[1:]  # without self
        have = list(inspect.signature(getattr(ops, name)).parameters)
        assert have[: len(wanted)] == wanted, (arch, name, have)
        extra = [p for p in inspect.signature(getattr(ops, name)).parameters.values()][len(wanted):]
        assert all(p.default is not p.empty for p in extra), (arch, name, "extra parameters need defaults")
    for name in ARCH_CONSTANTS:
        assert isinstance(getattr(ops, name), int) and getattr(ops, name) > 0


@pytest.mark.parametrize("arch", sorted(ARCHES))
def test_a_hook_of_the_labs_own_says_it_has_no_kernel_twin(arch):
    # the kernel reads the opcode in the generic is_trap_at_addr() and asks the weak is_swbp_insn(); no arch
    # provides an is_swbp_at, so its docstring must not pass it off as the kernel's
    ops = make_process(arch).arch_ops
    assert set(LAB_OWN_HOOKS) <= set(ARCH_HOOKS)
    for name in LAB_OWN_HOOKS:
        assert "no kernel twin" in inspect.getdoc(getattr(ops, name)), (arch, name)


def test_the_cores_functions_carry_their_kernel_twins_names():
    # kernel/events/uprobes.c: find_active_uprobe_rcu() since 6.12; the abort of a trapped step is a branch
    # of handle_singlestep() calling arch_uprobe_abort_xol(), with no function of the lab's name
    assert hasattr(uprobes, "find_active_uprobe_rcu") and not hasattr(uprobes, "find_active_uprobe")
    assert "kernel/events/uprobes.c" in uprobes.find_active_uprobe_rcu.__doc__
    assert "no kernel twin" in uprobes.uprobe_abort_xol.__doc__


@pytest.mark.parametrize("arch, symbol", [("x86_64", "uprobe_target_nop"), ("arm64", "uprobe_target_nop")])
def test_a_registered_probe_holds_an_arch_uprobe(arch, symbol):
    proc = make_process(arch)
    probe = uprobe_lab.attach(proc, symbol, uprobe_lab.CountingConsumer())
    assert isinstance(probe.auprobe, ArchUprobe)
    assert probe.insn == probe.auprobe.insn == proc.program.code[probe.vaddr - proc.program.base:][: len(probe.insn)]


def test_each_arch_has_its_own_task_size():
    # x86-64 4-level paging: TASK_SIZE_MAX = (1 << 47) - PAGE_SIZE; arm64 VA_BITS=48: 1 << 48
    assert make_process("x86_64").arch_ops.TASK_SIZE == (1 << 47) - 0x1000
    assert make_process("arm64").arch_ops.TASK_SIZE == 1 << 48


# memory, registers, events, Ctrl-C and the checks on call()'s arguments: every path
INFRASTRUCTURE = {"process.py", "unicorn_c.py", "trace.py", "sites.py", "program.py", "interrupt.py", "errors.py"}


def _files_a_hit_runs(arch, kernel, target, ret=False):
    """The lab's files whose code runs during the second call of a probed ``target`` (steady state)."""
    proc = make_process(arch, kernel)
    uprobe_lab.attach(proc, target, uprobe_lab.CountingConsumer(ret=ret))
    addr = proc.program.resolve(target)
    proc.call(addr)
    root = Path(uprobe_lab.__file__).parent
    seen = set()

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(str(root)):
            seen.add(Path(frame.f_code.co_filename).relative_to(root).as_posix())
    sys.setprofile(profile)
    try:
        proc.call(addr)
    finally:
        sys.setprofile(None)
    return seen - INFRASTRUCTURE


@pytest.mark.parametrize("arch, kernel, target, ret, path", [
    # docs/architecture.md: trap -> entry -> core -> arch ops -> the module that runs the instruction
    ("x86_64", "6.18", "uprobe_target_push", False,
     {"x86/process.py", "x86/traps.py", "uprobes.py", "x86/uprobes.py", "x86/emulate.py"}),
    ("x86_64", "6.18", "uprobe_target_ret", False,
     {"x86/process.py", "x86/traps.py", "uprobes.py", "x86/uprobes.py", "x86/xol.py"}),
    ("arm64", None, "uprobe_target_nop", False,
     {"arm64/process.py", "arm64/traps.py", "uprobes.py", "arm64/uprobes.py", "arm64/simulate.py"}),
    # the return of a uretprobe'd function that is only a nop (6.11+: through the syscall trampoline),
    # plus the entry hit that hijacked it
    ("x86_64", "6.11", "uprobe_target_nop", True,
     {"x86/process.py", "x86/traps.py", "uprobes.py", "x86/uprobes.py", "x86/emulate.py", "x86/uretprobe.py",
      "x86/syscalls.py"}),
])
def test_the_files_a_hit_runs_through_are_the_documented_ones(arch, kernel, target, ret, path):
    assert _files_a_hit_runs(arch, kernel, target, ret) == path


def _calls_per_hit(name: str) -> Counter:
    """The lab's Python functions a steady-state hit of bench ``name`` calls, and its dict lookups, per hit: the
    calls of a 100-iteration run less those of a 50-iteration one, over 50."""
    from uprobe_lab.bench import bench_process

    proc, _, target = bench_process(name)
    proc.call("producer_loop", 4, target)
    root = str(Path(uprobe_lab.__file__).parent)

    def calls(iterations: int) -> Counter:
        seen = Counter()

        def profile(frame, event, arg):
            if event == "call" and frame.f_code.co_filename.startswith(root):
                seen[frame.f_code.co_name] += 1
            elif event == "c_call" and getattr(arg, "__qualname__", "") == "dict.get":
                seen["dict.get"] += 1
        sys.setprofile(profile)
        try:
            proc.call("producer_loop", iterations, target)
        finally:
            sys.setprofile(None)
        return seen

    more, fewer = calls(100), calls(50)
    return Counter({k: (more[k] - fewer[k]) / 50 for k in more if more[k] != fewer[k]})


def test_a_uprobe_nop_hit_calls_its_kernel_path_and_no_more():
    # docs/performance.md: an emulated hit's time is its Python calls. Each is a step of the kernel's path or
    # the trace and pt_regs under it; the kernel's rule for a consumer that moved ip is asked only when one did,
    # and a step's lines are added up when read: dict lookups are the six events, the two steps touched, the
    # probe and the emulation op
    assert _calls_per_hit("uprobe-nop") == {
        "_on_interrupt": 1, "exc_int3": 1, "kernel_entry": 1, "load": 1, "<lambda>": 1, "flush": 1, "emit": 6,
        "uprobe_pre_sstep_notifier": 1, "handle_swbp": 1, "uprobe_get_swbp_addr": 1, "uprobe_get_trampoline_vaddr": 1,
        "find_active_uprobe_rcu": 1, "touch": 2, "handler_chain": 1, "_count": 1, "arch_uprobe_optimize": 1,
        "arch_uprobe_skip_sstep": 2, "branch_emulate_op": 1, "exit_to_user_mode": 1, "dict.get": 10}


@pytest.mark.parametrize("bench, syscall", [("uprobe-nop5", "sys_uprobe"), ("uretprobe-nop", "sys_uretprobe")])
def test_a_hit_through_a_uprobe_syscall_makes_no_generator(bench, syscall):
    # a generator made on every hit costs about a fifth of an emulated uprobe-nop5 hit (docs/performance.md): the
    # syscalls unpack and pack their trampoline's saved registers with struct. (From Python 3.12 a comprehension
    # runs in its caller's frame, so only a generator expression is seen there.)
    calls = _calls_per_hit(bench)
    assert calls[syscall] == 1 and calls["<genexpr>"] == 0 and calls["<dictcomp>"] == 0
