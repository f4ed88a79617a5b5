"""The pt_regs block: one batch read on entry, one batch write on exit, and only when something changed."""
import pytest
from unicorn import arm64_const as A
from unicorn import x86_const as X

import uprobe_lab.process as process_module
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
    real = process_module._uc_reg_write_batch
    monkeypatch.setattr(process_module, "_uc_reg_write_batch", lambda *a: writes.append(1) or real(*a))
    regs = proc.task_pt_regs()
    regs.flush()
    assert writes == []
    regs.bx = regs.bx + 1
    regs.flush()
    regs.flush()
    assert writes == [1]


def test_task_pt_regs_is_one_block_per_task_refilled_on_each_entry():
    proc = make_process("arm64")
    first = proc.task_pt_regs()
    proc.reg_write(A.UC_ARM64_REG_X3, 77)
    again = proc.task_pt_regs()
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
    before = proc.trace.snapshot()
    proc.call("producer_loop", 3, proc.program.resolve("uprobe_target_push"))
    events = proc.trace.since(before)
    assert consumer.hits == 3 and events["xol_steps"] == 3 and events["exc_step"] == 3


def test_a_misspelt_register_is_an_error_not_a_new_attribute():
    regs = make_process("x86_64").regs()
    with pytest.raises(AttributeError):
        regs.rax = 1  # pt_regs calls it ax
    with pytest.raises(AttributeError):
        regs.set("eflags", 0)
