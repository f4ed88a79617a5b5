"""The pt_regs block: one batch read on entry, one batch write on exit, and only when something changed."""
import ctypes

import pytest
from unicorn import arm64_const as A
from unicorn import x86_const as X

from uprobe_lab.arches import make_process


def test_regs_is_a_block_of_its_own_until_flushed():
    proc = make_process("x86_64")
    regs = proc.regs()
    regs.ax = 0x1234
    assert proc.reg_read(X.UC_X86_REG_RAX) != 0x1234  # not written yet
    regs.flush()
    assert proc.reg_read(X.UC_X86_REG_RAX) == 0x1234
    assert proc.regs().ax == 0x1234 and proc.regs() is not proc.regs()


def test_fields_wrap_like_64_bit_registers():
    proc = make_process("x86_64")
    regs = proc.regs()
    regs.cx = -1
    regs.dx = (1 << 64) + 5
    regs.flush()
    assert proc.reg_read(X.UC_X86_REG_RCX) == (1 << 64) - 1
    assert proc.reg_read(X.UC_X86_REG_RDX) == 5


def test_flush_writes_only_when_something_changed(monkeypatch):
    proc = make_process("x86_64")
    writes = []
    regs = proc.kernel_entry()
    real = regs._write
    regs._write = lambda: writes.append(1) or real()  # the batch write the block was bound to
    regs.flush()
    assert writes == []
    regs.bx = regs.bx + 1
    regs.flush()
    regs.flush()
    assert writes == [1]


def test_kernel_entry_reuses_one_block_per_task_refilled_each_time():
    proc = make_process("arm64")
    first = proc.kernel_entry()
    proc.reg_write(A.UC_ARM64_REG_X3, 77)
    again = proc.kernel_entry()
    assert again is first and again.x3 == 77 and again.get("x3") == 77
    assert (again.pc, again.fp, again.lr) == (again.ip, again.x29, again.x30)


def test_a_pc_written_from_inside_a_hook_is_kept():
    # A consumer that moves ip must move the CPU: the write-back has to take the new pc too.
    from uprobe_lab.uprobes import UprobeConsumer, uprobe_register

    proc = make_process("x86_64")
    elsewhere = proc.program.resolve("uprobe_target_push")  # ends in mov $1, %eax; pop; ret

    def redirect(regs):
        regs.ip = elsewhere
        regs.ax = 7  # what the call returns if execution went on after the nop instead
        return 0

    uprobe_register(proc, "uprobe_target_nop", UprobeConsumer(handler=redirect))
    assert proc.call("uprobe_target_nop") == 1


def test_a_pc_written_from_the_arm64_step_hook_is_kept():
    # The arm64 single-step exception is raised from a code hook, where Unicorn 2.1 drops a pc
    # written by the batch call: without the one-register write the CPU would run on in the XOL page.
    from uprobe_lab.uprobes import CountingConsumer, uprobe_register

    proc = make_process("arm64")
    consumer = CountingConsumer()
    uprobe_register(proc, "uprobe_target_push", consumer)  # stp x29, x30, [sp, #-16]!: stepped out of line
    before = proc.trace.counts
    proc.call("producer_loop", 3, proc.program.resolve("uprobe_target_push"))
    events = proc.trace.since(before)
    assert consumer.hits == 3 and events["xol_steps"] == 3 and events["exc_step"] == 3


def test_a_misspelt_register_is_an_error_not_a_new_attribute():
    regs = make_process("x86_64").regs()
    with pytest.raises(AttributeError):
        regs.rax = 1  # pt_regs calls it ax
    with pytest.raises(AttributeError):
        regs.set("eflags", 0)


@pytest.mark.parametrize("arch, reg", [("arm64", "x5"), ("x86_64", "r10")])
def test_a_flush_from_a_code_hook_that_keeps_the_pc_runs_the_instruction_once(arch, reg):
    # A batch write that included the unchanged pc would put Unicorn back on the current
    # instruction: the hook would fire again, flush again, and never get past it.
    from unicorn import UC_HOOK_CODE

    proc = make_process(arch)
    target = proc.program.resolve("uprobe_target_nop")
    calls = []

    def bump(uc, address, size, data):
        calls.append(address)
        regs = proc.regs()
        setattr(regs, reg, getattr(regs, reg) + 1)
        regs.flush()

    proc.uc.hook_add(UC_HOOK_CODE, bump, None, target, target)
    proc.call("uprobe_target_nop", max_insns=1000)
    assert calls == [target]


def test_arm64_pstate_is_as_wide_as_nzcv():
    # Unicorn reads and writes 32 bits of NZCV: upper bits a consumer sets must not come back
    from uprobe_lab.uprobes import UprobeConsumer, uprobe_register

    proc = make_process("arm64")
    seen = []

    def widen(regs):
        seen.append(regs.pstate)
        regs.pstate = regs.pstate | (0xDEAD << 32)
        return 0

    uprobe_register(proc, "uprobe_target_nop", UprobeConsumer(handler=widen))
    proc.call("producer_loop", 3, proc.program.resolve("uprobe_target_nop"))
    assert all(value < 1 << 32 for value in seen) and proc.regs().pstate < 1 << 32
    proc.reg_write(A.UC_ARM64_REG_X5, 0x1122334455667788)
    proc.reg_read(A.UC_ARM64_REG_X5)
    assert proc.reg_read(A.UC_ARM64_REG_NZCV) < 1 << 32  # the one-register read does not keep x5's upper half


def test_x86_registers_sit_at_the_kernel_s_pt_regs_offsets():
    """A BPF program reads its context at struct pt_regs's offsets (arch/x86/include/asm/ptrace.h: r15 ..
    di, orig_ax, ip, cs, flags, sp, ss, each 8 bytes), and tests hand it PtRegs offsets."""
    from uprobe_lab.x86.process import PtRegs

    kernel = ["r15", "r14", "r13", "r12", "bp", "bx", "r11", "r10", "r9", "r8", "ax", "cx", "dx", "si", "di",
              "orig_ax", "ip", "cs", "flags", "sp", "ss"]
    assert [(name, getattr(PtRegs, name).offset) for name in kernel] == [(name, 8 * k) for k, name in enumerate(kernel)]
    assert ctypes.sizeof(PtRegs) == 8 * len(kernel)
    proc = make_process("x86_64")
    regs = proc.regs()
    regs.ip, regs.flags, regs.sp = 0x401000, 0x246, 0x7FFF_F000
    regs.flush()
    assert (proc.reg_read(X.UC_X86_REG_RIP), proc.reg_read(X.UC_X86_REG_EFLAGS), proc.reg_read(X.UC_X86_REG_RSP)) \
        == (0x401000, 0x246, 0x7FFF_F000)
    assert "orig_ax" not in proc.regs().as_dict()  # the places are no registers
