"""Return probes on x86-64: the hijack, both trampolines, sys_uretprobe and the return-instance rules."""
import json

import pytest

from uprobe_lab import cli
from uprobe_lab.bench import events_per_hit
from uprobe_lab.kernel import KERNELS
from uprobe_lab.x86.constants import URETPROBE_SYSCALL_HISTORY, __NR_uretprobe
from uprobe_lab.errors import ProcessKilled
from uprobe_lab.uprobes import MAX_URETPROBE_DEPTH, CountingConsumer, UprobeConsumer, uprobe_register
from uprobe_lab.x86 import asm
from uprobe_lab.x86.uretprobe_programs import (DATA_BASE, REG_ORDER, RegsRecorder, check_registers_equal,
                                          make_uretprobe_process, random_registers, regs_roundtrip)
from uprobe_lab.x86.uretprobe import trampoline_check_ip, uretprobe_syscall_check_offset, uretprobe_trampoline
from kernel_bytes import URETPROBE_TRAMPOLINE

ALL = list(KERNELS)


# --- registers equal / registers change (selftest uprobe_syscall.c) ---------------------------

@pytest.mark.parametrize("kernel", ALL)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_registers_equal_with_and_without_uretprobe(kernel, seed):
    values = random_registers(seed)
    plain = regs_roundtrip(make_uretprobe_process(kernel), values)
    assert plain == values
    proc = make_uretprobe_process(kernel, record=True)
    rec = RegsRecorder()
    uprobe_register(proc, "uretprobe_regs_trigger", rec)
    probed = regs_roundtrip(proc, values)
    assert probed == values
    assert len(rec.seen) == 1
    # the consumer saw the real registers too (sys_uretprobe restored r11/rcx/rax before it ran)
    assert {n: rec.seen[0][n] for n in REG_ORDER} == {n: values[n] for n in REG_ORDER}
    assert rec.seen[0]["ip"] == proc.program.resolve("regs_roundtrip") + _call_end(proc)
    assert rec.funcs == [proc.program.resolve("uretprobe_regs_trigger")]
    kinds = [e.kind for e in proc.trace.events]
    if KERNELS[kernel].uretprobe_syscall:
        assert kinds.count("syscalls") == 1 and kinds.count("sysret") == 1
    else:
        assert "syscalls" not in kinds and kinds.count("exc_bp") == 2


def _call_end(proc) -> int:
    """Offset of the instruction after regs_roundtrip's call: the real return address."""
    listing = proc.program.instructions("regs_roundtrip")
    for (addr, _, text), (nxt, _, _) in zip(listing, listing[1:]):
        if text.startswith("call"):
            return nxt - proc.program.resolve("regs_roundtrip")
    raise AssertionError("no call")


@pytest.mark.parametrize("kernel", ["6.10", "6.11"])
def test_check_registers_equal_passes(kernel):
    assert check_registers_equal(kernel) == {}
    assert check_registers_equal(kernel, probe=False) == {}


@pytest.mark.parametrize("kernel", ["6.10", "6.11", "6.18"])
def test_registers_change_reaches_caller(kernel):
    values = random_registers(7)
    changes = {"ax": 0x1234_5678_9ABC_DEF0, "cx": 0x0BAD_CAFE_0000_0001, "r11": 0x5555_AAAA_5555_AAAA}
    proc = make_uretprobe_process(kernel)
    uprobe_register(proc, "uretprobe_regs_trigger", RegsRecorder(changes))
    after = regs_roundtrip(proc, values)
    expected = dict(values, **changes)
    assert after == expected


# --- the broken teaching trampoline -----------------------------------------------------------

def test_broken_trampoline_bytes():
    good = asm.push("rax") + asm.push("rcx") + asm.push("r11") + asm.mov_imm_sx("rax", 335) + asm.SYSCALL
    good += asm.pop("r11") + asm.pop("rcx") + asm.RET
    assert uretprobe_trampoline(KERNELS["6.11"]) == good
    assert uretprobe_trampoline(KERNELS["6.18"]) == good + asm.INT3
    assert good + asm.INT3 == URETPROBE_TRAMPOLINE  # the kernel's bytes, 6.18 form
    assert uretprobe_trampoline(KERNELS["6.11"], save_regs=False) == asm.push("rax") + bytes.fromhex(
        "48c7c04f010000") + asm.SYSCALL + asm.RET
    assert uretprobe_syscall_check_offset() == 13  # 1+1+2 pushes, 7 mov, 2 syscall
    assert uretprobe_syscall_check_offset(False) == 10
    # arch/x86/kernel/uprobes.c trampoline_check_ip(tramp): tramp + (uretprobe_syscall_check - uretprobe_trampoline_entry)
    assert trampoline_check_ip(0x7fff_f000) == 0x7fff_f00d


@pytest.mark.parametrize("kernel", ["6.11", "6.18"])
def test_broken_trampoline_corrupts_rcx_r11_and_check_catches_it(kernel):
    diff = check_registers_equal(kernel, uretprobe_saves_regs=False)
    assert set(diff) == {"cx", "r11", "seen_by_consumer"}
    proc = make_uretprobe_process(kernel, uretprobe_saves_regs=False)
    rec = RegsRecorder()
    uprobe_register(proc, "uretprobe_regs_trigger", rec)
    values = random_registers(0)
    after = regs_roundtrip(proc, values)
    tramp = proc.mm.xol_area.vaddr
    assert after["cx"] == trampoline_check_ip(tramp, save_regs=False)  # syscall's rcx = next rip
    assert after["r11"] == values["flags"]  # syscall's r11 = rflags
    assert after["ax"] == values["ax"] and after["flags"] == values["flags"]
    assert {n: after[n] for n in REG_ORDER if n not in ("cx", "r11")} == {
        n: values[n] for n in REG_ORDER if n not in ("cx", "r11")}
    assert rec.seen[0]["cx"] == after["cx"] and rec.seen[0]["r11"] == after["r11"]


def test_broken_flag_changes_nothing_before_611():
    assert check_registers_equal("6.10", uretprobe_saves_regs=False) == {}


# --- return value, function address, depth limit ----------------------------------------------

@pytest.mark.parametrize("kernel", ALL)
def test_return_value_and_func_address(kernel):
    proc = make_uretprobe_process(kernel)
    rec = RegsRecorder()
    uprobe_register(proc, "tail_callee", rec)
    assert proc.call("tail_callee") == 7
    assert rec.funcs == [proc.program.resolve("tail_callee")]
    assert rec.seen[0]["ax"] == 7
    assert proc.utask.return_instances == [] and proc.utask.depth == 0


@pytest.mark.parametrize("kernel", ["6.10", "6.11"])
def test_recursion_depth_70(kernel):
    proc = make_uretprobe_process(kernel)
    rec = RegsRecorder()
    uprobe_register(proc, "recurse", rec)
    assert proc.call("recurse", 70) == 70
    assert len(rec.seen) == MAX_URETPROBE_DEPTH == 64
    # the outer 64 frames (n = 70..7) were hijacked; they return innermost first
    assert [s["ax"] for s in rec.seen] == list(range(7, 71))
    assert set(rec.funcs) == {proc.program.resolve("recurse")}
    assert proc.dmesg == ["uprobe: omit uretprobe due to nestedness limit pid/tgid=1/1"] * 6
    assert proc.utask.depth == 0 and not proc.utask.return_instances
    # the limit is per live depth: the next call is probed again
    assert proc.call("recurse", 3) == 3 and len(rec.seen) == 67


# --- longjmp over probed frames ---------------------------------------------------------------

@pytest.mark.parametrize("kernel", ["6.10", "6.11"])
def test_longjmp_skipped_frames_run_no_handler(kernel):
    proc = make_uretprobe_process(kernel, record=True)
    recs = {name: RegsRecorder(name=name) for name in ("lj_outer", "lj_a", "lj_b")}
    for name, rec in recs.items():
        uprobe_register(proc, name, rec)
    assert proc.call("lj_outer") == 1
    assert len(recs["lj_outer"].seen) == 1 and recs["lj_outer"].seen[0]["ax"] == 1
    assert recs["lj_a"].seen == [] and recs["lj_b"].seen == []
    assert proc.utask.return_instances == [] and proc.utask.depth == 0
    skipped = [e for e in proc.trace.events if e.kind == "ri_popped" and e.note == "skipped by longjmp"]
    assert len(skipped) == 2


@pytest.mark.parametrize("kernel", ["6.10", "6.11"])
def test_longjmp_leftovers_dropped_at_next_call(kernel):
    proc = make_uretprobe_process(kernel, record=True)
    recs = {name: RegsRecorder(name=name) for name in ("lj_a", "lj_b")}
    for name, rec in recs.items():
        uprobe_register(proc, name, rec)
    assert proc.call("lj_outer") == 1
    assert proc.utask.depth == 2  # nobody returned through the trampoline
    assert proc.call("lj_outer") == 1
    # cleanup_return_instances dropped the two dead ones when lj_a was hit again
    dropped = [e for e in proc.trace.events if e.kind == "ri_popped" and e.note.startswith("dropped")]
    assert len(dropped) == 2
    assert proc.utask.depth == 2 and len(proc.utask.return_instances) == 2
    assert recs["lj_a"].seen == [] and recs["lj_b"].seen == []


# --- tail call: chained instances -------------------------------------------------------------

@pytest.mark.parametrize("kernel", ["6.10", "6.11"])
def test_tail_call_chained_instances(kernel):
    proc = make_uretprobe_process(kernel)
    caller, callee = RegsRecorder(name="caller"), RegsRecorder(name="callee")
    uprobe_register(proc, "tail_caller", caller)
    uprobe_register(proc, "tail_callee", callee)
    assert proc.call("tail_caller") == 7
    assert caller.funcs == [proc.program.resolve("tail_caller")]
    assert callee.funcs == [proc.program.resolve("tail_callee")]
    assert caller.seen[0]["ax"] == callee.seen[0]["ax"] == 7
    # both handlers saw the real return address, not the trampoline
    assert caller.seen[0]["ip"] == callee.seen[0]["ip"] == 0x7FFFF7FF0000
    assert proc.utask.depth == 0


def test_tail_call_instance_is_chained():
    proc = make_uretprobe_process("6.11")
    uprobe_register(proc, "tail_caller", RegsRecorder())
    inner = []
    uprobe_register(proc, "tail_callee", RegsRecorder())
    uprobe_register(proc, "tail_callee", UprobeConsumer(
        handler=lambda regs: inner.append([ri.chained for ri in proc.utask.return_instances]) or 0))
    proc.call("tail_caller")
    # at tail_callee's entry only tail_caller's instance is pending; the callee's is chained onto it
    assert inner == [[False]]


# --- a consumer that moves sp: sys_uretprobe returns by iret ----------------------------------

@pytest.mark.parametrize("kernel,moves", [("6.11", True), ("6.11", False), ("6.18", True), ("6.10", True)])
def test_consumer_moving_sp_takes_iret(kernel, moves):
    proc = make_uretprobe_process(kernel, record=True)

    class MoveSp(RegsRecorder):
        def _ret(self, regs, func):
            super()._ret(regs, func)
            if moves:
                regs.sp = regs.sp - 64

    rec = MoveSp()
    uprobe_register(proc, "sp_target", rec)
    proc.write_u64(DATA_BASE, 0xC0FFEE)
    proc.write_u64(DATA_BASE + 8, 0xBEEF)
    assert proc.call("sp_caller", DATA_BASE) == 5
    assert proc.read_u64(DATA_BASE + 16) == 0xC0FFEE  # rcx and r11 as the caller left them
    assert proc.read_u64(DATA_BASE + 24) == 0xBEEF
    assert rec.seen[0]["cx"] == 0xC0FFEE and rec.seen[0]["r11"] == 0xBEEF
    kinds = [e.kind for e in proc.trace.events]
    if kernel == "6.10":
        assert "syscalls" not in kinds
        return
    after = kinds[kinds.index("syscalls"):]
    ret_kind = next(k for k in after if k in ("iret", "sysret"))
    assert ret_kind == ("iret" if moves else "sysret")


# --- the uretprobe syscall from anywhere else -------------------------------------------------

@pytest.mark.parametrize("kernel", ["6.11", "6.16", "6.18"])
def test_direct_uretprobe_syscall_is_sigill(kernel):
    proc = make_uretprobe_process(kernel)
    rec = RegsRecorder()
    uprobe_register(proc, "sigill_outer", rec)
    with pytest.raises(ProcessKilled, match="SIGILL"):
        proc.call("sigill_outer")
    assert proc.signal == "SIGILL"
    assert rec.seen == []  # the pending instance's consumer did not run
    assert len(proc.utask.return_instances) == 1


@pytest.mark.parametrize("kernel", ["6.11", "6.18"])
def test_direct_uretprobe_syscall_without_xol_area_is_sigill(kernel):
    proc = make_uretprobe_process(kernel)
    assert proc.mm.xol_area is None  # uprobe_get_trampoline_vaddr() == UPROBE_NO_TRAMPOLINE_VADDR
    with pytest.raises(ProcessKilled, match="SIGILL"):
        proc.call("uretprobe_syscall_direct")


def test_uretprobe_syscall_is_enosys_on_610():
    proc = make_uretprobe_process("6.10")
    assert proc.call("uretprobe_syscall_direct") == (-38) & (2**64 - 1)


def test_syscall_number_history():
    assert __NR_uretprobe == 335
    assert [n for n, _ in URETPROBE_SYSCALL_HISTORY] == [462, 463, 467, 335]


def test_hijack_puts_trampoline_in_return_slot():
    proc = make_uretprobe_process("6.11")
    seen = {}

    def entry(regs):
        seen["ret_before"] = proc.read_u64(regs.sp)
        return 0

    uprobe_register(proc, "stepper_target", UprobeConsumer(handler=entry, ret_handler=lambda r, f: None))
    uprobe_register(proc, "stepper_target", CountingConsumer(ret=True))
    slots = {}
    orig = proc.arch_ops.arch_uretprobe_hijack_return_addr

    def spy(p, tramp, regs):
        out = orig(p, tramp, regs)
        slots["after"] = p.read_u64(regs.sp)
        slots["orig"] = out
        return out

    proc.arch_ops.arch_uretprobe_hijack_return_addr = spy
    try:
        assert proc.call("stepper_caller") == 0x42
    finally:
        proc.arch_ops.arch_uretprobe_hijack_return_addr = orig
    assert slots["after"] == proc.find_mapping("[uprobes]").start
    assert slots["orig"] == seen["ret_before"]
    assert proc.program.symbol_at(slots["orig"])[0] == "stepper_caller"


# --- bench events per hit on every kernel version ---------------------------------------------

EXPECTED = {
    # kernel: {bench: {event: per hit}}
    "6.10": {"uretprobe-nop": dict(exceptions=2, syscalls=0, iret=2, sysret=0),
             "uretprobe-push": dict(exceptions=2, syscalls=0, iret=2, sysret=0),
             "uretprobe-ret": dict(exceptions=3, syscalls=0, iret=3, sysret=0)},
    **{k: {"uretprobe-nop": dict(exceptions=1, syscalls=1, iret=1, sysret=1),
           "uretprobe-push": dict(exceptions=1, syscalls=1, iret=1, sysret=1),
           "uretprobe-ret": dict(exceptions=2, syscalls=1, iret=2, sysret=1)} for k in ("6.11", "6.16", "6.18", "7.3")},
}


@pytest.mark.parametrize("kernel", ALL)
@pytest.mark.parametrize("bench", ["uretprobe-nop", "uretprobe-push", "uretprobe-ret"])
def test_bench_events_per_hit(kernel, bench):
    ev = events_per_hit(bench, kernel=kernel)
    got = {k: ev.get(k, 0) for k in EXPECTED[kernel][bench]}
    assert got == EXPECTED[kernel][bench]
    assert ev["consumers"] == 1 and ev["ri_pushed"] == 1 and ev["ri_popped"] == 1


@pytest.mark.parametrize("kernel", ["6.10", "6.11"])
def test_cli_bench_uretprobe_nop_json(kernel, capsys):
    assert cli.main(["bench", "uretprobe-nop", "--mode", "emulated", "--json", "--kernel", kernel,
                     "--iterations", "200"]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    ev = result["events_per_hit"]
    if kernel == "6.10":
        assert ev["exceptions"] == 2 and ev.get("syscalls", 0) == 0
    else:
        assert ev["exceptions"] == 1 and ev["syscalls"] == 1 and ev["sysret"] == 1
    assert result["hits"] == 200


def test_after_the_last_detach_a_stray_int3_trampoline_call_is_still_claimed_on_6_10():
    # kernel/events/uprobes.c: remove_breakpoint() only sets MMF_RECALC_UPROBES; MMF_HAS_UPROBES stays
    # until find_active_uprobe() misses and recalculates. So uprobe_pre_sstep_notifier() still claims
    # the trampoline's int3, handle_swbp() finds bp_vaddr == the trampoline, and with no return
    # instance pending uprobe_handle_trampoline() sends SIGILL - not the SIGTRAP of an unclaimed int3.
    import uprobe_lab as ul

    proc = ul.new_process(kernel="6.10")
    consumer = ul.CountingConsumer(ret=True)
    probe = ul.attach(proc, "uprobe_target_nop", consumer)
    proc.call("uprobe_target_nop")
    ul.detach(proc, probe, consumer)
    assert proc.mm.has_uprobes  # not cleared eagerly
    tramp = proc.find_mapping("[uprobes]").start
    result = proc.run(tramp, tramp + 1)
    assert result.signal == "SIGILL"


# --- arch_uretprobe_hijack_return_addr when the stack cannot take the trampoline's address -------
# arch/x86/kernel/uprobes.c: nleft = copy_to_user(sp, &trampoline_vaddr, rasize); "if (likely(!nleft))"
# return the original; "if (nleft != rasize) { pr_err("return address clobbered: ..."); force_sig(SIGSEGV); }"
# and "return -1" either way. Worked out for a readable stack: all 8 bytes refused (read-only page) is
# -1 with no signal; a slot that straddles a writable page and a read-only one takes the first 4 bytes.
TRAMP_VADDR = 0x7FFFFFFFE000
RET_ADDR = 0x401234


def _hijack_at(sp, pages):
    from types import SimpleNamespace
    from uprobe_lab.x86.process import X86Process
    from uprobe_lab.x86.uretprobe import arch_uretprobe_hijack_return_addr

    proc = X86Process("6.18")
    for start, perms in pages:
        proc.map(f"/lab/stack-{perms}", start, 0x1000, perms)
    proc.write(sp, RET_ADDR.to_bytes(8, "little"))
    return proc, arch_uretprobe_hijack_return_addr(proc, TRAMP_VADDR, SimpleNamespace(sp=sp, ip=0x401000))


def test_a_hijack_that_cannot_write_at_all_gives_up_quietly():
    proc, orig = _hijack_at(0x10000100, [(0x10000000, "r--p")])
    assert orig == -1 and proc.signal is None and not proc.dmesg
    assert proc.read_u64(0x10000100) == RET_ADDR


def test_a_hijack_that_writes_part_of_the_address_kills_the_task():
    proc, orig = _hijack_at(0x10000FFC, [(0x10000000, "rw-p"), (0x10001000, "r--p")])
    assert orig == -1 and proc.signal == "SIGSEGV"
    assert proc.dmesg == ["return address clobbered: pid=1, %sp=0x10000ffc, %ip=0x401000"]
    assert proc.read(0x10000FFC, 8) == TRAMP_VADDR.to_bytes(8, "little")[:4] + RET_ADDR.to_bytes(8, "little")[4:]


def test_a_hijack_on_a_writable_stack_returns_the_original():
    proc, orig = _hijack_at(0x10000FF8, [(0x10000000, "rw-p"), (0x10001000, "r--p")])
    assert orig == RET_ADDR and proc.signal is None and proc.read_u64(0x10000FF8) == TRAMP_VADDR


def test_copy_to_user_stops_at_the_first_byte_it_cannot_write():
    """The shared copy_to_user: 8 bytes from 4 below a read-only page leave 4 not copied and write the
    first 4 (Unicorn alone would write all 8: it ignores page protections); every caller that asks for
    all bytes then sees a failure."""
    from uprobe_lab.x86.process import X86Process

    proc = X86Process("6.18")
    proc.map("/lab/rw", 0x10000000, 0x1000, "rw-p")
    proc.map("/lab/ro", 0x10001000, 0x1000, "r--p")
    word = bytes(range(1, 9))
    assert proc.copy_to_user_nleft(0x10000FFC, word) == 4 and not proc.copy_to_user(0x10000FFC, word)
    assert proc.read(0x10000FFC, 8) == word[:4] + bytes(4)
    assert proc.copy_to_user_nleft(0x10001000, word) == 8 and proc.read(0x10001000, 8) == bytes(8)
    assert proc.copy_to_user(0x10000FF8, word) and proc.read(0x10000FF8, 8) == word


def test_a_release_older_than_uretprobes_refuses_the_uretprobe_benches(capsys):
    """x86 had uprobes from 3.5 and uretprobes from 3.10: 3.5-3.9 get no uretprobe figure, from any of the paths."""
    from uprobe_lab import bench, cli, model
    from uprobe_lab.errors import LabError

    assert cli.main(["bench", "--mode", "model", "--kernel", "3.5", "uprobe-nop", "uretprobe-nop"]) == 0
    captured = capsys.readouterr()
    nop, ret = captured.out.splitlines()
    assert "model" in nop and "6.10" in nop
    assert ret.startswith("uretprobe-nop") and "kernel 3.5 has no uretprobes" in ret and "Linux 3.10" in ret
    assert "it has no uretprobes, which came in 3.10" in captured.err and "int3 return trampoline" not in captured.err
    assert cli.main(["bench", "--mode", "model", "--kernel", "3.10", "uretprobe-nop"]) == 0
    assert "M/s model" in capsys.readouterr().out
    with pytest.raises(LabError, match="kernel 3.9 has no uretprobes, so no uretprobe-ret: they came in Linux 3.10"):
        model.events_for("uretprobe-ret", kernel="3.9")
    assert bench.run_bench_on_cpus("uretprobe-nop", kernel="3.9", iterations=2)["refused"].endswith(
        "they came in Linux 3.10; give a release from 3.10 on, or a uprobe bench")
    assert "refused" not in bench.run_bench_on_cpus("uretprobe-nop", kernel="3.10", iterations=2)


def test_the_note_for_an_old_release_speaks_of_its_own_arch(capsys):
    from uprobe_lab import cli

    assert cli.main(["bench", "--mode", "model", "--arch", "arm64", "--kernel", "5.4", "uprobe-nop"]) == 0
    err = capsys.readouterr().err
    assert "on arm64 a hit traps on brk" in err and "nop5" not in err and "int3" not in err
    assert cli.main(["bench", "--mode", "model", "--kernel", "5.4", "uprobe-nop"]) == 0
    assert "(the int3 return trampoline and the stepped nop5 predate it)" in capsys.readouterr().err
