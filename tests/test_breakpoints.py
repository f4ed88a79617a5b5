"""Breakpoint uprobes on x86-64: the trap path, transparency, consumers, errors."""
import random
import struct

import pytest

from uprobe_lab import fuzz as fz
from uprobe_lab.arches import make_process
from uprobe_lab.bench import bench_process, events_per_hit, run_bench
from uprobe_lab.errors import LabError, ProcessKilled
from uprobe_lab.uprobes import (UPROBE_HANDLER_IGNORE, UPROBE_HANDLER_REMOVE, CountingConsumer,
                                UnprobeableInstruction, UprobeConsumer, uprobe_register, uprobe_unregister)
from uprobe_lab.x86 import asm
from uprobe_lab.x86.constants import STACK_TOP
from uprobe_lab.x86.process import GPRS, X86Process
from uprobe_lab.x86.randprog import fuzz_program

KERNELS = ["6.10", "6.11", "6.16", "6.18"]
TARGETS = ["uprobe_target_nop", "uprobe_target_push", "uprobe_target_ret", "uprobe_target_nop5",
           "uprobe_target_nop5_pagecross", "opaque_noop_func", "getpgid_syscall", "futex_wake_private",
           "futex_wake_shared", "producer_loop"]


def final_state(proc):
    regs = proc.regs()
    state = {name: regs.get(name) for name in GPRS}
    state["flags"] = regs.get("flags") & 0x8D5  # arithmetic flags
    state["stack"] = proc.read(STACK_TOP - 0x400, 0x400)
    return state


@pytest.mark.parametrize("kernel", KERNELS)
def test_bench_targets_are_unchanged_by_a_probe_on_each_instruction(kernel):
    from uprobe_lab.x86.programs import bench_program
    program = bench_program()
    for target in TARGETS:
        args = (3, program.resolve("uprobe_target_push")) if target == "producer_loop" else ()
        base = make_process("x86_64", kernel)
        base.call(target, *args)
        expected = final_state(base)
        for addr in program.instruction_starts(target):
            proc = make_process("x86_64", kernel)
            consumer = CountingConsumer()
            uprobe_register(proc, addr, consumer)
            if proc.read(addr, 3) == b"\xcc\x05\xc3":  # syscall; ret, with the int3 over the syscall
                # a probed syscall is stepped in the XOL slot, and the step trap comes after the next
                # instruction, the ret, which also ran there: ip is then "fixed" from the ret's target to
                # garbage and the task dies (a 6.18 host: SIGSEGV; tests/test_verify_x86.py asks it)
                with pytest.raises(ProcessKilled, match="SIGSEGV"):
                    proc.call(target, *args)
                continue
            proc.call(target, *args)
            assert consumer.hits >= 1, hex(addr)
            got = final_state(proc)
            assert got == expected, f"{target} probed at {addr:#x}"


@pytest.mark.parametrize("seed", range(4))
def test_straight_line_programs_are_unchanged_by_a_probe_on_every_instruction(seed):
    program = fuzz_program(random.Random(seed), branchy=False)
    result = fz.fuzz_program_once("x86_64", seed, program=program)  # every kernel, every instruction
    assert result.probe_runs > 100 and not result.bugs, "\n".join(map(str, result.bugs))
    assert set(result.divergences) <= {"red-zone"}  # 6.18's call into the trampoline, and only that


def test_int3_without_a_probe_is_sigtrap():
    proc = make_process("x86_64")
    with pytest.raises(ProcessKilled, match="SIGTRAP"):
        proc.call(proc.program.resolve("uprobe_target_nop") + 2)  # int3 padding after the function
    assert proc.signal == "SIGTRAP"


def test_int3_is_sigtrap_even_when_other_probes_exist():
    proc = make_process("x86_64")
    uprobe_register(proc, "uprobe_target_nop", CountingConsumer())
    result = proc.run(proc.program.resolve("uprobe_target_nop") + 2, 0x1234)  # padding int3
    assert result.signal == "SIGTRAP" and "no uprobe" in result.reason


def test_syscall_writes_rcx_and_r11_like_the_cpu():
    proc = make_process("x86_64")
    regs = proc.regs()
    regs.cx, regs.r11 = 0x1111, 0x2222
    regs.flush()
    start = proc.program.resolve("getpgid_syscall")
    proc.run(start, start + 9)  # stop right after the syscall, before ret
    regs = proc.regs()
    assert regs.cx == start + 9  # rip of the next instruction
    assert regs.r11 == regs.flags  # rflags
    assert regs.ax == 1  # getpgid()
    assert proc.trace.counts["syscalls"] == 1 and proc.trace.counts["sysret"] == 1


def test_unknown_syscall_is_enosys_and_uretprobe_syscall_is_unknown_on_6_10():
    proc = X86Process("6.10")
    code = asm.mov_imm32("rax", 335) + asm.SYSCALL + asm.RET
    proc.map("/lab/sc", 0x500000, 0x1000, "r-xp", code)
    proc.run(0x500000, 0x500000 + len(code) - 1)
    assert proc.regs().ax == (-38) & (2**64 - 1)


def test_ret_costs_two_exceptions_and_uses_an_xol_slot():
    proc = make_process("x86_64", record=True)
    uprobe_register(proc, "uprobe_target_ret", CountingConsumer())
    assert proc.find_mapping("[uprobes]") is None  # mapped on first need
    proc.call("uprobe_target_ret")
    kinds = [e.kind for e in proc.trace.events]
    assert kinds.count("exc_bp") == 1 and kinds.count("exc_db") == 1 and kinds.count("xol_steps") == 1
    xol = proc.find_mapping("[uprobes]")
    assert xol is not None and xol.perms == "--xp" and xol.end == 0x7FFFFFFFF000
    slot1 = xol.start + 128
    target = proc.program.resolve("uprobe_target_ret")
    # the kernel copies MAX_UINSN_BYTES of the file into the slot: the ret and what follows it
    assert proc.read(slot1, 16) == b"\xc3" + proc.read(target + 1, 15)
    assert proc.mm.xol_area.bitmap[:2] == [True, False]  # slot 0 reserved, slot 1 freed again


def test_install_keeps_the_original_bytes_and_unregister_restores_them():
    proc = make_process("x86_64")
    addr = proc.program.resolve("uprobe_target_push")
    c = CountingConsumer()
    u = uprobe_register(proc, "uprobe_target_push", c)
    assert proc.read(addr, 1) == b"\xcc" and u.insn == b"\x55"
    uprobe_unregister(proc, u, c)
    assert proc.read(addr, 1) == b"\x55" and not proc.mm.probes


def test_consumer_return_codes():
    proc = make_process("x86_64")
    ignore = UprobeConsumer(handler=lambda regs: UPROBE_HANDLER_IGNORE,
                            ret_handler=lambda regs, func: pytest.fail("IGNORE must not hijack the return"))
    uprobe_register(proc, "uprobe_target_nop", ignore)
    proc.call("uprobe_target_nop")
    assert proc.mm.xol_area is None  # no return instance, so no trampoline was needed

    proc = make_process("x86_64")
    filtered = UprobeConsumer(handler=lambda regs: UPROBE_HANDLER_REMOVE, filter=lambda p: False)
    u = uprobe_register(proc, "uprobe_target_nop", filtered)
    proc.call("producer_loop", 3, proc.program.resolve("uprobe_target_nop"))
    assert not u.applied and proc.read(u.vaddr, 1) == b"\x90"  # removed from this mm after the first hit
    assert proc.trace.counts["consumers"] == 1

    proc = make_process("x86_64")
    keep = UprobeConsumer(handler=lambda regs: UPROBE_HANDLER_REMOVE)  # no filter: the probe stays
    u = uprobe_register(proc, "uprobe_target_nop", keep)
    proc.call("producer_loop", 3, proc.program.resolve("uprobe_target_nop"))
    assert u.applied and proc.trace.counts["consumers"] == 3


def test_consumer_sees_pt_regs_at_the_probe():
    proc = make_process("x86_64")
    seen = {}
    uprobe_register(proc, "uprobe_target_push", UprobeConsumer(handler=lambda r: seen.update(ip=r.ip, sp=r.sp) or 0))
    proc.call("uprobe_target_push")
    assert seen["ip"] == proc.program.resolve("uprobe_target_push")
    assert seen["sp"] % 16 == 8  # just after a call


def test_a_consumer_can_redirect_execution():
    proc = make_process("x86_64")
    ret_addr = proc.program.resolve("uprobe_target_ret")

    def skip(regs):
        regs.ip = ret_addr  # take execution elsewhere: the probed push must not run
        return 0
    uprobe_register(proc, "uprobe_target_push", UprobeConsumer(handler=skip))
    assert proc.call("uprobe_target_push") != 1  # mov eax, 1 never ran
    assert proc.trace.counts["emulated"] == 0


# handle_swbp before and after 4363264111e1 "uprobe: Do not emulate/sstep original instruction when ip
# is changed" (6.18; 6.16.y ended with 6.16.12 before the stable backports). After it a moved ip is kept
# and the probed instruction skipped. Before it the instruction still ran: a stepped one
# (arch_uprobe_post_xol, UPROBE_FIX_IP) ends at vaddr + its length, an emulated nop
# (branch_emulate_op: new_ip = regs->ip + length) lands one past the consumer's ip.
ELSEWHERE = bytes.fromhex("0db802000000c3c3")  # at E: or $0x2b8,%eax; add %al,%bl; ret. At E+1: mov $2,%eax; ret


@pytest.mark.parametrize("site, kernel, returned", [
    ("b807000000c3", "6.18", 0x2B8), ("b807000000c3", "6.16", 7),  # mov $7,%eax: stepped out of line
    ("90b807000000c3", "6.18", 0x2B8), ("90b807000000c3", "6.16", 2),  # nop: emulated
    ("90b807000000c3", "6.11", 2), ("90b807000000c3", "7.3", 0x2B8),
])
def test_a_moved_ip_skips_the_probed_instruction_from_6_18(site, kernel, returned):
    proc = X86Process(kernel)
    proc.map("/lab/moved", 0x400000, 0x1000, "r-xp", bytes.fromhex(site).ljust(0x10, b"\xcc") + ELSEWHERE)

    def move(regs):
        regs.ip, regs.ax = 0x400010, 0
        return 0
    uprobe_register(proc, 0x400000, UprobeConsumer(handler=move))
    assert proc.call(0x400000) == returned


@pytest.mark.parametrize("release, skips", [
    ("6.16.12", False), ("6.17.7", False), ("6.17.8", True), ("6.18.0", True), ("6.6.116", False),
    ("6.6.117", True), ("5.15.197", True), ("7.3.1", True), ("5.4.301", False), ("5.4.302", True),
    ("5.10.246", False), ("5.10.247", True),
])
def test_the_ip_check_follows_its_release_and_stable_backports(release, skips):
    # stable review mails: patch 208/849 of 6.17.8-rc1, 104/529 of 6.6.117-rc1, 080/392 of 5.15.197-rc1;
    # the "Linux 5.4.302" and "Linux 5.10.247" announcements list it
    from uprobe_lab.kernel import kernel_for_release

    assert kernel_for_release(release).ip_change_skips_insn is skips

def test_bad_input_errors():
    proc = make_process("x86_64")
    with pytest.raises(KeyError, match="no symbol 'missing'"):
        uprobe_register(proc, "missing", CountingConsumer())
    with pytest.raises(LabError, match="inside an instruction"):
        uprobe_register(proc, "uprobe_target_push", CountingConsumer(), offset=2)
    with pytest.raises(LabError, match="not in an executable mapping"):
        uprobe_register(proc, 0x1000, CountingConsumer())
    with pytest.raises(UnprobeableInstruction, match="int3"):
        uprobe_register(proc, proc.program.resolve("uprobe_target_nop") + 2, CountingConsumer())  # padding
    with pytest.raises(LabError, match="from 1 to 1_000_000 on the emulator"):
        run_bench("uprobe-nop", iterations=0)
    with pytest.raises(LabError, match="max_insns must be an int from 1 to"):
        proc.run(proc.program.base, 0, max_insns=0)
    with pytest.raises(LabError, match="unknown bench"):
        run_bench("uprobe-bogus")
    with pytest.raises(LabError, match="unknown kernel"):
        make_process("x86_64", "5.4")
    with pytest.raises(LabError, match="unknown architecture"):
        make_process("riscv")


def test_runaway_code_is_stopped_by_the_guard():
    proc = X86Process()
    proc.map("/lab/spin", 0x500000, 0x1000, "r-xp", b"\xeb\xfe")  # jmp .
    result = proc.run(0x500000, 0x600000, max_insns=1000)
    assert result.stop == "count" and result.ip == 0x500000


@pytest.mark.parametrize("kernel,bench,expected", [
    ("6.18", "uprobe-nop", {"exceptions": 1, "iret": 1, "emulated": 1, "consumers": 1, "syscalls": 0}),
    ("6.18", "uprobe-push", {"exceptions": 1, "emulated": 1, "uaccess_bytes": 8}),
    ("6.18", "uprobe-ret", {"exceptions": 2, "exc_db": 1, "xol_steps": 1, "iret": 2, "emulated": 0}),
    ("6.11", "uprobe-nop5", {"exceptions": 2, "xol_steps": 1}),
    ("6.16", "uprobe-nop5", {"exceptions": 1, "emulated": 1, "syscalls": 0}),
    ("6.18", "usermode-count", {"exceptions": 0, "syscalls": 0, "user_insns": 5}),
    ("6.18", "syscall-count", {"exceptions": 0, "syscalls": 1, "sysret": 1}),
])
def test_events_per_hit(kernel, bench, expected):
    events = events_per_hit(bench, "x86_64", kernel)
    assert {k: events.get(k, 0) for k in expected} == expected


def test_bench_hits_equal_iterations():
    r = run_bench("uprobe-ret", kernel="6.18", iterations=500)
    assert r["hits"] == 500 and r["hits_per_s"] > 0 and r["events_per_hit"]["exceptions"] == 2


def test_a_stepped_popf_keeps_the_trap_flag_it_loads():
    # pushfq; pop rax; or rax, 0x100 (TF); push rax; popfq; nop; ret: the nop after popf traps (#DB)
    code = bytes.fromhex("9c58480d00010000509d90c3")
    assert [t for _, _, t in ul_disasm(code)] == ["pushfq", "pop rax", "or rax, 0x100", "push rax", "popfq", "nop", "ret"]
    popf = 0x500000 + 9
    for probed in (False, True):
        proc = X86Process("6.18")
        proc.map("/lab/popf", 0x500000, 0x1000, "r-xp", code)
        if probed:
            uprobe_register(proc, popf, CountingConsumer())
        proc.reg_write(proc.SP, STACK_TOP - 0x100)
        result = proc.run(0x500000, 0x500000 + len(code) - 1)
        assert result.signal == "SIGTRAP", (probed, result)
        assert proc.trace.counts["exc_db"] == 1 + probed  # the probe's own step, then the program's


def ul_disasm(code):
    from uprobe_lab.program import disasm
    return disasm(code, "x86_64", 0x500000)


def test_the_xol_page_is_execute_only_in_maps_but_readable_on_x86():
    proc = make_process("x86_64")
    uprobe_register(proc, "uprobe_target_ret", CountingConsumer())
    proc.call("uprobe_target_ret")
    xol = proc.find_mapping("[uprobes]")
    code = bytes.fromhex("48a1") + xol.start.to_bytes(8, "little") + b"\xc3"  # movabs rax, [xol.start]; ret
    assert ul_disasm(code)[0][2] == f"movabs rax, qword ptr [{xol.start:#x}]"
    proc.map("/lab/peek", 0x500000, 0x1000, "r-xp", code)
    assert xol.perms == "--xp"
    assert proc.call(0x500000) == int.from_bytes(proc.read(xol.start, 8), "little")  # push rax; push rcx; ...


def test_a_new_consumer_puts_back_a_probe_its_filter_had_removed():
    proc = make_process("x86_64")
    gone = UprobeConsumer(handler=lambda regs: UPROBE_HANDLER_REMOVE, filter=lambda p: False)
    u = uprobe_register(proc, "uprobe_target_nop", gone)
    proc.call("uprobe_target_nop")
    assert not u.applied and proc.read(u.vaddr, 1) == b"\x90"
    counting = CountingConsumer()
    assert uprobe_register(proc, "uprobe_target_nop", counting) is u
    proc.call("uprobe_target_nop")
    assert u.applied and proc.read(u.vaddr, 1) == b"\xcc" and counting.hits == 1 and proc.mm.has_uprobes


def test_a_single_stepping_program_gets_its_sigtrap_past_the_probed_insn_not_in_the_xol_slot():
    # TF is already set when the probed mov is reached: after the out-of-line step the kernel fixes
    # ip up and owes the program its SIGTRAP, which it sees at the instruction after the mov.
    code = bytes.fromhex("9c58480d00010000509d" "4889c3" "90c3")  # ... popfq; mov rbx, rax; nop; ret
    assert ul_disasm(code)[5][2] == "mov rbx, rax"
    mov = 0x500000 + 10
    proc = X86Process("6.18")
    proc.map("/lab/tf", 0x500000, 0x1000, "r-xp", code)
    uprobe_register(proc, mov, CountingConsumer())
    proc.reg_write(proc.SP, STACK_TOP - 0x100)
    result = proc.run(0x500000, 0x500000 + len(code) - 1)
    assert result.signal == "SIGTRAP" and proc.trace.counts["xol_steps"] == 1
    assert result.ip == mov + 3


def test_two_stepped_probes_take_turns_in_the_same_xol_slot():
    proc = make_process("x86_64")
    ret, push = CountingConsumer(), CountingConsumer()
    uprobe_register(proc, "uprobe_target_ret", ret)
    uprobe_register(proc, "uprobe_target_push", push, offset=1)  # mov %rsp, %rbp: stepped out of line
    for _ in range(3):
        assert proc.call("uprobe_target_push") == 1
        proc.call("uprobe_target_ret")
    assert ret.hits == push.hits == 3 and proc.trace.counts["xol_steps"] == 6
    assert proc.mm.xol_area.slot_insns[1] == proc.mm.probes[proc.program.resolve("uprobe_target_ret")].auprobe.ixol


def test_a_stepped_call_to_a_non_canonical_address_faults_the_same_one_instruction_at_a_time():
    """A probed ``call [rip+x]`` through a non-canonical pointer is a #GP on the call (the kernel aborts the
    step: ip back on the call, rsp as before it), whether the run goes through at once or one instruction
    per run(), as a stepper drives it."""
    text, data, ptr = 0x400000, 0x600000, 0x2139E073CC643173

    def probed():
        proc = X86Process("6.18")
        proc.map("text", text, 0x1000, "r-xp", b"\xff\x15" + struct.pack("<i", data - (text + 6)) + asm.RET)
        proc.map("data", data, 0x1000, "rw-p", struct.pack("<Q", ptr))
        regs = proc.regs()
        regs.set("sp", STACK_TOP - 0x100)
        regs.flush()
        uprobe_register(proc, text, CountingConsumer())
        return proc

    whole = probed()
    at_once = whole.run(text, text + 6)
    stepped, pc = probed(), text
    for _ in range(50):
        one = stepped.run(pc, text + 6, max_insns=1)
        if one.stop != "count":
            break
        pc = one.ip
    for proc, result in ((whole, at_once), (stepped, one)):
        assert result.signal == "SIGSEGV" and "non-canonical" in result.reason
        assert proc.pc == text and proc.regs().sp == STACK_TOP - 0x100


def test_a_stepped_branch_keeps_its_start_in_the_context_the_last_hit_let_go():
    # a stepped ret keeps the CPU's state on every hit, for an Intel #GP on a branch to a non-canonical address;
    # saving into a new Unicorn context costs four times updating the one the last hit let go
    proc, _, target = bench_process("uprobe-ret")
    proc.call("producer_loop", 2, target)
    real, saves = proc.uc.context_save, []
    proc.uc.context_save = lambda: saves.append(1) or real()
    proc.call("producer_loop", 20, target)
    assert saves == [] and proc.trace.counts["xol_steps"] == 22


def test_no_two_threads_hold_one_kept_start():
    # each thread's kept start is a context of its own, which the next kept start of whichever thread reuses once
    # let go: a thread made while the first one held a start begins with none (x86 new_task_state)
    from uprobe_lab.smp import Scheduler

    proc, _, target = bench_process("uprobe-ret")
    proc.watch_insn(proc.program.instruction_starts("producer_loop")[-1])  # its ret: a start kept as a call ends
    proc.call("producer_loop", 1, target)
    assert proc._branch_start is not None
    scheduler = Scheduler(proc, 3, seed=0, switch_on_exit=1.0)  # every hit's thread is switched out mid-step
    real_switch_out, shared = scheduler._switch_out, []

    def switch_out(t):
        real_switch_out(t)
        held = [id(u.task_state["_branch_start"]) for u in scheduler.threads if u.task_state.get("_branch_start")]
        shared.append(len(held) != len(set(held)))
    scheduler._switch_out = switch_out
    scheduler.run("producer_loop", 5, target, max_insns=100_000)
    assert len(shared) > 15 and not any(shared)
