"""The nop10 scheme (mainline 7.3; the 7.2.y stable kernels from 7.2.6): the optimised uprobe moved from nop5 to
nop10. The tests run the lab's 7.3 row; test_kernel_rules.py says which 7.2.y releases hit as it does.

Every byte list here was read from the kernel source, not from the lab: arch/x86/kernel/uprobes.c in a
mainline-tracking tree, analogdevicesinc/linux commit 7a6c9825d917f0428982af72a233a36dbf45cf8b
(554ba38456da "uprobes/x86: Move optimized uprobe from nop5 to nop10", queued on peterz/queue's perf/core
in July 2026, merged for 7.3; Debian's 7.2.13 and 7.3.4 kernels have it, tests/test_verify_x86_kernels.py). Quoted below as [7.3]. The 6.18 side is [6.18]: gregkh/linux commit
663efc5aac21f039c17383aed6861dda591ed6a0 of the same file.
"""
import json

import pytest

from uprobe_lab import cli
from uprobe_lab.arches import make_process
from uprobe_lab.bench import events_per_hit
from uprobe_lab.kernel import get_kernel
from uprobe_lab.program import disasm
from uprobe_lab.uprobes import CountingConsumer, UnprobeableInstruction, UprobeConsumer, uprobe_register, uprobe_unregister
from uprobe_lab.x86 import optimize
from uprobe_lab.x86.optimize import TRAMP_NAME, patch_log
from uprobe_lab.x86.redzone_programs import check_transparency, make_redzone_process, site_of
from uprobe_lab.x86.decode import ARCH_UPROBE_FLAG_CAN_OPTIMIZE, arch_uprobe_analyze_insn, can_optimize, insn_decode

K73, K618 = get_kernel("7.3"), get_kernel("6.18")
# [7.3] is_optimizable_nop10(): nop10_prefix[] = { 0x66, 0x2e, 0x0f, 0x1f, 0x84 }, insn->length == OPT_INSN_SIZE
# (10); the kernel bench's uprobe_target_nop10 is ".byte 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00"
NOP10 = bytes.fromhex("66 2e 0f 1f 84 00 00 00 00 00")
NOP5 = bytes.fromhex("0f 1f 44 00 00")
LEA = bytes.fromhex("48 8d 64 24 80")  # [7.3] static const u8 lea_rsp[] = { 0x48, 0x8d, 0x64, 0x24, 0x80 };
# [7.3] uprobe_trampoline_entry: push %rcx; push %r11; push %rax; mov $__NR_uprobe,%rax; syscall;
# pop %rax; pop %r11; pop %rcx; ret $REDZONE_SIZE (0x80); int3 - assembled by hand:
TRAMP_73 = bytes.fromhex("51 4153 50 48c7c050010000 0f05 58 415b 59 c28000 cc")
ENXIO, EPROTO, ENOSYS = 6, 71, 38


def probed(kernel="7.3", target="uprobe_target_nop10", consumer=None):
    proc = make_process("x86_64", kernel)
    consumer = consumer or CountingConsumer()
    uprobe = uprobe_register(proc, target, consumer)
    return proc, consumer, uprobe, proc.program.resolve(target)


# --- can_optimize -------------------------------------------------------------------------------

@pytest.mark.parametrize("hexbytes,ok", [
    ("662e0f1f840000000000", True),  # the nop10
    ("662e0f1f84e811223344", True),  # after an unoptimise: the call's bytes are the SIB and disp32
    ("2e660f1f840000000000", False),  # same length and meaning, prefixes swapped: not the form
    ("66660f1f840000000000", False),  # another 10-byte NOPW
    ("0f1f440000", False),  # the nop5: [7.3] emulated, never patched
    ("0f1f840000000000", False),  # x86_nops[8]
])
def test_can_optimize_on_73_is_only_the_nop10(hexbytes, ok):
    raw = bytes.fromhex(hexbytes)
    assert can_optimize(insn_decode(raw, 0x400000), 0x400000, K73) is ok


def test_can_optimize_on_73_refuses_a_page_crossing_nop10():
    # [7.3] "We can't do cross page atomic writes yet." PAGE_SIZE - (vaddr & ~PAGE_MASK) >= OPT_INSN_SIZE
    assert can_optimize(insn_decode(NOP10, 0x400FF6), 0x400FF6, K73)
    assert not can_optimize(insn_decode(NOP10, 0x400FF7), 0x400FF7, K73)


def test_analyze_on_73_skips_the_prefix_checks_only_for_an_optimisable_nop10():
    # [7.3] arch_uprobe_analyze_insn: "No need to check instruction in uprobe_init_insn in case we are on
    # top of optimizable nop10" - otherwise is_prefix_bad() refuses INAT_PFX_CS
    auprobe = arch_uprobe_analyze_insn(NOP10, 0x400000, K73)
    assert ARCH_UPROBE_FLAG_CAN_OPTIMIZE in auprobe.flags and auprobe.action == "emulate"
    with pytest.raises(UnprobeableInstruction, match="CS segment prefix.*crosses a page"):
        arch_uprobe_analyze_insn(NOP10, 0x400FF8, K73)
    with pytest.raises(UnprobeableInstruction, match="CS segment prefix.*7.3 accepts this nop10"):
        arch_uprobe_analyze_insn(NOP10, 0x400000, K618)
    with pytest.raises(UnprobeableInstruction, match="no nop10 path; 7.3 refuses this one too, as it crosses a page"):
        arch_uprobe_analyze_insn(NOP10, 0x400FF8, K618)
    nop5 = arch_uprobe_analyze_insn(NOP5, 0x400000, K73)
    assert ARCH_UPROBE_FLAG_CAN_OPTIMIZE not in nop5.flags and nop5.action == "emulate"


# --- events per hit: the acceptance lines ----------------------------------------------------------

def test_events_per_hit_nop5_and_nop10_on_618_and_73():
    e = events_per_hit("uprobe-nop5", kernel="7.3")
    assert e["exceptions"] == 1 and e["emulated"] == 1 and "syscalls" not in e
    e = events_per_hit("uprobe-nop10", kernel="7.3")
    assert "exceptions" not in e and e["syscalls"] == 1 and e["sysret"] == 1 and "iret" not in e
    e = events_per_hit("uretprobe-nop10", kernel="7.3")
    assert "exceptions" not in e and e["syscalls"] == 2 and e["sysret"] == 2
    e = events_per_hit("uprobe-nop5", kernel="6.18")
    assert "exceptions" not in e and e["syscalls"] == 1
    with pytest.raises(UnprobeableInstruction, match=r"CS segment prefix \(0x2e\)"):
        events_per_hit("uprobe-nop10", kernel="6.18")
    with pytest.raises(UnprobeableInstruction, match="crosses a page"):
        events_per_hit("uprobe-nop10-pagecross", kernel="7.3")


def _bench_json(capsys, kernel, *names):
    assert cli.main(["bench", *names, "--mode", "emulated", "--kernel", kernel, "--json", "--iterations", "300"]) == 0
    return {r["bench"]: r for r in json.loads(capsys.readouterr().out)}


def test_cli_acceptance_73_and_618(capsys):
    rows = _bench_json(capsys, "7.3", "uprobe-nop5", "uprobe-nop10", "usdt-nop10")
    ev = {b: (r["events_per_hit"].get("exceptions", 0), r["events_per_hit"].get("syscalls", 0)) for b, r in rows.items()}
    assert ev == {"uprobe-nop5": (1, 0), "uprobe-nop10": (0, 1), "usdt-nop10": (0, 1)}
    rows = _bench_json(capsys, "6.18", "uprobe-nop5", "uprobe-nop10", "usdt-nop10")
    assert (rows["uprobe-nop5"]["events_per_hit"].get("exceptions", 0), rows["uprobe-nop5"]["events_per_hit"]["syscalls"]) == (0, 1)
    refusal = rows["uprobe-nop10"]["refused"]
    assert "refused by this kernel (6.18) at attach" in refusal and "0x2e" in refusal
    assert "events_per_hit" not in rows["uprobe-nop10"]
    assert rows["usdt-nop10"]["events_per_hit"]["exceptions"] == 1  # 6.18's libbpf keeps it on the nop


# --- the staged patch and its undo, byte for byte -------------------------------------------------

def test_optimise_stages_on_73():
    proc, _, _, site = probed()
    proc.call("producer_loop", 1, site)
    tramp = proc.mm.tramps[0]
    rel = (tramp - (site + 10)).to_bytes(4, "little", signed=True)  # [7.3] call at vaddr + LEA_INSN_SIZE
    opt = LEA + b"\xe8" + rel
    # [7.3] int3_update_optimize, its comments: 1) "cc 2e 0f 1f 84 00 00 00 00 00", sync;
    # 2) "cc [8d 64 24 80 e8 d0 d1 d2 d3]", sync; 3) "[48] 8d 64 24 80 e8 d0 d1 d2 d3", sync
    int3 = b"\xcc" + NOP10[1:]
    assert [(s.action, s.site) for s in patch_log(proc)] == [
        ("start", int3), ("sync", int3),
        ("write", b"\xcc" + opt[1:]), ("sync", b"\xcc" + opt[1:]),
        ("write", opt), ("sync", opt)]
    assert [t for _, _, t in patch_log(proc)[-1].listing] == ["lea rsp, [rsp - 0x80]", f"call {tramp:#x}"]
    assert all(s.listing[0][2] == "int3" for s in patch_log(proc)[:4])  # a CPU entering the site traps


def test_unoptimise_on_73_keeps_the_call_in_bytes_5_to_9():
    proc, consumer, uprobe, site = probed()
    proc.call("producer_loop", 2, site)
    opt = proc.read(site, 10)
    assert opt[:5] == LEA and optimize.is_optimized(proc, site)
    n = len(patch_log(proc))
    before = proc.trace.counts
    uprobe_unregister(proc, uprobe, consumer)
    spent = proc.trace.since(before)
    assert spent["text_patches"] == 3 and spent["cpu_syncs"] == 3
    call = opt[5:]
    # [7.3] int3_update_unoptimize: 2) "[cc] 8d 64 24 80 e8 d0 d1 d2 d3", sync; 3) "cc [2e 0f 1f 84] e8 d0 d1 d2 d3",
    # sync; 4) "[66] 2e 0f 1f 84 e8 d0 d1 d2 d3", sync - "Offset 5 still decodes as CALL for a thread that was
    # already there", while from offset 0 it is the nop10 again
    stages = patch_log(proc)[n:]
    assert [(s.action, s.site) for s in stages] == [
        ("start", opt), ("write", b"\xcc" + opt[1:]), ("sync", b"\xcc" + opt[1:]),
        ("write", b"\xcc" + NOP10[1:5] + call), ("sync", b"\xcc" + NOP10[1:5] + call),
        ("write", NOP10[:5] + call), ("sync", NOP10[:5] + call)]
    restored = proc.read(site, 10)
    assert disasm(restored, "x86_64", site)[0][1] == restored  # one 10-byte instruction from byte 0
    assert disasm(restored, "x86_64", site)[0][2].startswith("nop word ptr cs:")
    assert disasm(restored[5:], "x86_64", site + 5)[0][2].startswith("call")  # and the call from byte 5
    proc.call("producer_loop", 3, site)  # the program runs on through the restored nop
    assert consumer.hits == 2


def test_reregistering_after_an_unoptimise_reoptimises_with_the_same_call():
    proc, consumer, uprobe, site = probed()
    proc.call("producer_loop", 2, site)
    opt = proc.read(site, 10)
    uprobe_unregister(proc, uprobe, consumer)
    again = CountingConsumer()
    uprobe_register(proc, site, again)
    proc.call("producer_loop", 3, site)
    assert again.hits == 3 and proc.read(site, 10) == opt and len(proc.mm.tramps) == 1


# --- the trampoline, the stack, the exits -----------------------------------------------------------

def test_73_trampoline_bytes():
    proc, _, _, site = probed()
    proc.call("producer_loop", 1, site)
    tramp = proc.mm.tramps[0]
    assert proc.mapping_at(tramp).name == TRAMP_NAME
    assert proc.read(tramp, len(TRAMP_73)) == TRAMP_73 == optimize.uprobe_trampoline_code(nop10=True)
    assert [t for _, _, t in disasm(TRAMP_73, "x86_64")] == [
        "push rcx", "push r11", "push rax", "mov rax, 0x150", "syscall", "pop rax", "pop r11", "pop rcx",
        "ret 0x80", "int3"]


class Recorder(UprobeConsumer):
    def __init__(self, proc, act=None):
        self.proc, self.act, self.seen = proc, act, []
        super().__init__(handler=self._h, name="recorder")

    def _h(self, regs):
        self.seen.append(regs.as_dict())
        return self.act(regs) if self.act else 0


def test_sys_uprobe_stack_layout_and_sysret_exit_on_73():
    proc = make_redzone_process("7.3")
    site = site_of("redzone_leaf_nop10")
    rec = Recorder(proc)
    uprobe_register(proc, site, rec)
    entry = {}

    def spy(p, regs):
        entry.update(sp=regs.sp, words=[p.read_u64(regs.sp + 8 * i) for i in range(4)], ax=regs.ax)
        return real(p, regs)
    real = proc.set_syscall(336, spy)
    assert proc.call("redzone_leaf_nop10", 7) == 7  # first hit: int3, then the rewrite
    before = proc.trace.counts
    assert proc.call("redzone_leaf_nop10", 9) == 9
    spent = proc.trace.since(before)
    assert "exceptions" not in spent and spent["syscalls"] == 1 and spent["sysret"] == 1 and "iret" not in spent
    at_int3, at_syscall = rec.seen[0], rec.seen[1]  # the first hit's registers came from the int3 path
    # [7.3] struct uprobe_syscall_args { ax; r11; cx; retaddr; } at regs->sp: the trampoline pushed rcx, r11,
    # rax, after the call at site + 5 pushed its return address, site + 10
    assert entry["words"] == [at_syscall["ax"], at_syscall["r11"], at_syscall["cx"], site + 10]
    assert entry["ax"] == 336
    # [7.3] regs->ip = args.retaddr - OPT_INSN_SIZE; regs->sp += sizeof(args) + REDZONE_SIZE
    assert at_syscall["ip"] == site == at_int3["ip"]
    assert at_syscall["sp"] == entry["sp"] + 32 + 0x80 == at_int3["sp"]
    assert check_transparency("redzone_leaf_nop10", "7.3").ok  # the leaf's red-zone value survived


def test_consumer_moving_sp_returns_by_iret_on_73():
    proc = make_redzone_process("7.3")
    site = site_of("redzone_leaf_nop10")

    def fake_return(regs):  # once optimised: return 0x77 from the leaf straight to its caller
        if optimize.is_optimized(proc, site):
            regs.ip, regs.sp, regs.ax = proc.read_u64(regs.sp), regs.sp + 8, 0x77
        return 0
    uprobe_register(proc, site, UprobeConsumer(handler=fake_return))
    assert proc.call("redzone_leaf_nop10", 5) == 5
    before = proc.trace.counts
    assert proc.call("redzone_leaf_nop10", 5) == 0x77
    spent = proc.trace.since(before)
    # [7.3] "Some of the uprobe consumers has changed sp, we can do nothing, just return via iret."
    assert spent["syscalls"] == 1 and spent["iret"] == 1 and "sysret" not in spent


def test_consumer_moving_sp_but_not_ip_resumes_after_the_site_by_iret():
    proc = make_redzone_process("7.3")
    site = site_of("redzone_leaf_nop10")  # the leaf: mov %rdi,-8(%rsp); nop10; mov -8(%rsp),%rax; ret

    def move_sp(regs):  # a new frame 16 bytes down: the return address, and a marker in its red-zone slot
        if optimize.is_optimized(proc, site):
            new_sp = regs.sp - 16
            proc.write_u64(new_sp, proc.read_u64(regs.sp))
            proc.write_u64(new_sp - 8, 0xBEEF)
            regs.sp = new_sp
        return 0
    uprobe_register(proc, site, UprobeConsumer(handler=move_sp))
    assert proc.call("redzone_leaf_nop10", 5) == 5
    before = proc.trace.counts
    # the marker comes back only if execution resumed at site + 10 on the moved stack: [7.3] "skip the
    # trampoline call": if (args.retaddr - OPT_INSN_SIZE == regs->ip) regs->ip += OPT_INSN_SIZE; then iret
    assert proc.call("redzone_leaf_nop10", 5) == 0xBEEF
    spent = proc.trace.since(before)
    assert spent["syscalls"] == 1 and spent["iret"] == 1 and "sysret" not in spent


# --- sys_uprobe off the trampoline: the errno libbpf's feature probe reads ---------------------------

@pytest.mark.parametrize("kernel,expected", [("6.16", -ENOSYS), ("6.18", -ENXIO), ("7.3", -EPROTO)])
def test_uprobe_syscall_outside_a_trampoline(kernel, expected):
    # [6.18] "if (!in_uprobe_trampoline(regs->ip)) return -ENXIO;"  [7.3] "... return -EPROTO;"
    # libbpf (tools/lib/bpf/features.c probe_uprobe_syscall) tests exactly that errno: ENXIO in the 6.18 tree,
    # EPROTO since 8cae54c586 "libbpf: Detect uprobe syscall with new error" (7.2)
    proc = make_process("x86_64", kernel)
    consumer = CountingConsumer()
    uprobe_register(proc, "uprobe_target_nop5", consumer)
    ret = proc.call("uprobe_syscall_probe")
    assert ret - (1 << 64) == expected and consumer.hits == 0


# --- the red zone: the reason for the move ------------------------------------------------------------

def test_red_zone_on_73_and_618():
    assert not check_transparency("redzone_leaf_nop5", "6.18").ok  # the call's push lands in it
    assert check_transparency("redzone_leaf_nop5", "7.3").ok  # 7.3 leaves the nop5 on the int3 path
    report = check_transparency("redzone_leaf_nop10", "7.3")
    assert report.ok and bytes.fromhex(report.site_bytes)[:6] == LEA + b"\xe8"


# --- which nops 7.3 emulates: insn_is_nop() ---------------------------------------------------------

@pytest.mark.parametrize("hexbytes,on_618,on_73", [
    # [7.3] branch_setup_xol_ops: "if (insn_is_nop(insn)) goto setup;" and no "case 0x90"; insn_is_nop() is
    # arch/x86/lib/insn-eval.c from tip perf/core 8a5c6cbfe4a3 "x86/insn,uprobes,alternative: Unify insn_is_nop()"
    # (Oct 2025): "NOP, but not: REP NOP aka PAUSE", "'REX.b3 NOP' is 'xchg %r8,%rax' - not a nop", NOPL,
    # "MOV %reg, %reg" of native size, "LEA 0(%reg),%reg", "JMP +0". [6.18]: x86_nops[len] or "prefix* + nop".
    ("f390", "emulate", "xol"),  # pause
    ("4190", "emulate", "xol"),  # xchg %r8,%rax: 6.18 took it for a nop
    ("4889c0", "xol", "emulate"),  # mov %rax,%rax
    ("89c0", "xol", "xol"),  # mov %eax,%eax zero-extends: not native size
    ("488d4000", "xol", "emulate"),  # lea 0x0(%rax),%rax
    ("488d442400", "xol", "xol"),  # lea 0x0(%rsp),%rax: another register
    ("eb00", "emulate", "emulate"),  # jmp +0 (6.18 emulates it as a jmp)
    ("0f1f440000", "emulate", "emulate"),
    ("c4e1f890c1", "emulate", "xol"),  # kmovw: opcode byte 0x90 after a VEX prefix; insn_is_nop() ignores VEX
])
def test_nops_emulated_on_618_and_73(hexbytes, on_618, on_73):
    from uprobe_lab.x86.analyze import analyze_hex

    assert analyze_hex(hexbytes, K618)["action"] == on_618
    assert analyze_hex(hexbytes, K73)["action"] == on_73


def test_insn_is_nop_counts_rex_extended_registers():
    from uprobe_lab.x86.decode import insn_is_nop

    assert insn_is_nop(insn_decode(bytes.fromhex("4d8d4000")))  # lea 0x0(%r8),%r8
    assert not insn_is_nop(insn_decode(bytes.fromhex("4c8d4000")))  # lea 0x0(%rax),%r8
    assert not insn_is_nop(insn_decode(bytes.fromhex("440f1f00")))  # modrm_reg 0 + 8*REX.R: the kernel says no


def test_7_3_emulates_its_nop5_and_its_nop10_in_the_same_words():
    """branch_setup_xol_ops (6.19+, 8a5c6cbfe4a3) takes whatever insn_is_nop() recognises as a branch of offset 0:
    the nop5 on every hit, the nop10 on its first (can_optimize() spared it the generic checks)."""
    k = get_kernel("7.3")
    nop5 = arch_uprobe_analyze_insn(bytes.fromhex("0f1f440000"), 0x400000, k)
    nop10 = arch_uprobe_analyze_insn(bytes.fromhex("662e0f1f840000000000"), 0x400000, k)
    for auprobe in (nop5, nop10):
        assert (auprobe.ops, auprobe.branch_offs) == ("branch", 0)
        assert auprobe.reason.endswith("insn_is_nop() takes it for a nop: emulated as a jump of 0 (ip += its length)")
    assert "can_optimize() spares it the generic checks" in nop10.reason
