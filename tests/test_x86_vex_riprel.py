"""x86 decode and out-of-line-step rules the host referee (``python -m uprobe_lab verify``) checks on a real kernel.

Expected values come from arch/x86/kernel/uprobes.c (v6.18: branch_setup_xol_ops, can_optimize,
riprel_analyze/riprel_pre_xol/riprel_post_xol, arch_uprobe_abort_xol) and were confirmed on a 6.18
host with tests/test_verify_x86.py; the bytes of each rewrite are worked out by hand below.
"""
import pytest

from uprobe_lab.kernel import KERNELS, get_kernel
from uprobe_lab.uprobes import CountingConsumer, uprobe_register
from uprobe_lab.x86.decode import ARCH_UPROBE_FLAG_CAN_OPTIMIZE, arch_uprobe_analyze_insn
from uprobe_lab.x86.process import X86Process
from uprobe_lab.x86.riprel import UPROBE_FIX_RIP_BX, UPROBE_FIX_RIP_DI, UPROBE_FIX_RIP_SI
from uprobe_lab.x86.xol_programs import riprel_process, riprel_run, syscall_run

VADDR = 0x400000


def analyze(hexbytes, kernel="6.18"):
    return arch_uprobe_analyze_insn(bytes.fromhex(hexbytes), VADDR, get_kernel(kernel))


@pytest.mark.parametrize("kernel", list(KERNELS))
def test_vex_opcode_byte_collides_with_branches_on_every_version(kernel):
    vzu = analyze("c5f877", kernel)  # vzeroupper: opcode byte 0x77 = ja
    assert (vzu.ops, vzu.branch_opc1, vzu.branch_offs) == ("branch", 0x77, 0)
    assert vzu.reason.startswith("KERNEL BUG")
    assert "0x77 for a one-byte jcc" in vzu.reason and vzu.note == "unfixed in every modelled kernel, 7.3 included"
    pshufd = analyze("c5f970ca11", kernel)  # vpshufd xmm1, xmm2, 0x11: "jo" with the imm8 as offset
    assert (pshufd.branch_opc1, pshufd.branch_offs) == (0x70, 0x11)
    psubsb = analyze("c5f1e8c2", kernel)  # vpsubsb: opcode byte 0xe8 = call, offset 0 (no immediate)
    assert (psubsb.ops, psubsb.branch_opc1, psubsb.branch_offs) == ("branch", 0xE8, 0)
    evex = analyze("62f17d4870ca11", kernel)  # vpshufd zmm1, zmm2, 0x11 (EVEX): the same bug
    assert (evex.ops, evex.branch_opc1, evex.branch_offs) == ("branch", 0x70, 0x11)
    assert "EVEX" in evex.reason


def test_a_vex_kmovq_passes_for_a_nop5_on_6_18():
    kmov = analyze("c4e1f890c1")  # 5 bytes, OPCODE1 0x90: insn_is_nop() says yes
    assert kmov.ops == "branch" and ARCH_UPROBE_FLAG_CAN_OPTIMIZE in kmov.flags


def test_vex_opcode_bytes_in_the_fixup_switch():
    vcmp = analyze("c5f0c2c201")  # vcmpps: OPCODE1 0xc2 is "ret imm16" to the fixup switch
    assert vcmp.ops == "default" and vcmp.fixups == 0  # no UPROBE_FIX_IP: ip stays in the slot
    assert vcmp.reason.startswith("KERNEL BUG")


def test_evex_is_judged_by_its_opcode_byte():
    assert analyze("62f17c4858ca").action == "xol"  # vaddps zmm: 0x58 (pop) is in good_insns_64
    for refused in ("62f17d48efc0", "62f1fe486f00"):  # vpxord (0xef: out), vmovdqu64 (0x6f: outs)
        with pytest.raises(Exception, match="good_insns"):
            analyze(refused)


def test_riprel_rewrite_bytes():
    # mov rax, [rip+0x10]: 48 8b 05 10 00 00 00 -> modrm 00 000 101 becomes 10 000 110 = 0x86 (rsi)
    mov = analyze("488b0510000000")
    assert mov.ixol[:7] == bytes.fromhex("488b8610000000") and mov.insn == bytes.fromhex("488b0510000000")
    assert mov.fixups & UPROBE_FIX_RIP_SI
    # mov rsi, [rip+0x10]: reg = 6, so rdi: REX.W 48 stays (no B), modrm 10 110 111 = 0xb7
    assert analyze("488b3510000000").ixol[:3] == bytes.fromhex("488bb7")
    assert analyze("488b3510000000").fixups & UPROBE_FIX_RIP_DI
    # REX.B is cleared: 49 8b 05 -> 48 8b 86
    assert analyze("498b0510000000").ixol[:3] == bytes.fromhex("488b86")
    # VEX3 vpaddd xmm0, xmm6(vvvv), [rip]: reg 0, vvvv names rsi (6) -> rdi; byte 1 |= 0x60
    vex = analyze("c4e149fe0510000000")
    assert vex.ixol[:5] == bytes.fromhex("c4e149fe87") and vex.fixups & UPROBE_FIX_RIP_DI
    # reg = rsi (6) and vvvv = rdi (7): rbx
    both = analyze("c4e141fe3510000000")
    assert both.fixups & UPROBE_FIX_RIP_BX and both.ixol[4] == 0x80 | (6 << 3) | 3


# VEX2 (c5 RvvvvLpp): insn_get_prefixes fakes vex_prefix.bytes[2] = byte 1 & 0x7f, so riprel_analyze
# reads vvvv from it: reg2 = ((byte1 & 0x7f) >> 3 & 7) ^ 7. Then si unless reg or reg2 is 6, di unless
# reg or reg2 is 7, else bx; ModRM 00 reg 101 -> 10 reg rr. The two-byte prefix is copied unchanged.
VEX2_RIPREL = [
    # vmovaps xmm6, [rip+0x10]: vvvv 1111 -> reg2 0; reg 6 -> rdi: 10 110 111 = b7
    ("c5f8283510000000", "c5f828b710000000", UPROBE_FIX_RIP_DI),
    # vaddps xmm0, xmm6, [rip+0x10]: c8 & 7f = 0 1001 000 -> reg2 1 ^ 7 = 6; reg 0 -> rdi: 10 000 111 = 87
    ("c5c8580510000000", "c5c8588710000000", UPROBE_FIX_RIP_DI),
    # vaddps xmm6, xmm7, [rip+0x10]: c0 & 7f = 0 1000 000 -> reg2 0 ^ 7 = 7; reg 6 -> rbx: 10 110 011 = b3
    ("c5c0583510000000", "c5c058b310000000", UPROBE_FIX_RIP_BX),
    # vmovaps xmm14, [rip+0x10]: VEX.R (bit 7, clear) is not part of reg; the same rdi as xmm6
    ("c578283510000000", "c57828b710000000", UPROBE_FIX_RIP_DI),
]


@pytest.mark.parametrize("raw, ixol, fix", VEX2_RIPREL, ids=[r for r, _, _ in VEX2_RIPREL])
def test_vex2_riprel_scratch_register_avoids_its_vvvv(raw, ixol, fix):
    auprobe = analyze(raw)
    assert auprobe.ixol[:8] == bytes.fromhex(ixol)
    assert auprobe.fixups & (UPROBE_FIX_RIP_SI | UPROBE_FIX_RIP_DI | UPROBE_FIX_RIP_BX) == fix


def test_riprel_step_reads_the_same_memory_and_restores_the_scratch_register():
    code = bytes.fromhex("488b05f90f0000")  # mov rax, [rip+0xff9] -> 0x401000
    assert riprel_process(code).read(0x400000, 7) == code  # the library's program is this load at 0x400000
    plain, _ = riprel_run(False, code)
    probed, _ = riprel_run(True, code)
    assert probed.regs().si == plain.regs().si == 0x5151  # preset by riprel_run, restored by the fixup
    assert probed.regs().ax == plain.regs().ax == 0x1122334455667788
    assert probed.regs().si == 0x5151 and probed.trace.counts["xol_steps"] == 1


def test_a_fault_inside_the_xol_step_is_delivered_at_the_probed_address():
    proc = X86Process("6.18")
    proc.map("/lab/fault", 0x400000, 0x1000, "r-xp", bytes.fromhex("8b00c3"))  # mov eax, [rax]
    regs = proc.regs()
    regs.ax = 0xDEAD0000  # unmapped
    regs.flush()
    uprobe_register(proc, 0x400000, CountingConsumer())
    result = proc.run(0x400000, 0x400002)
    assert result.signal == "SIGSEGV" and result.ip == 0x400000
    assert proc.utask.active_uprobe is None


def test_a_stepped_syscall_traps_after_the_next_instruction_which_runs_in_the_slot():
    plain, _ = syscall_run(False)
    proc, result = syscall_run(True)
    assert result.stop == "until"
    slot = proc.find_mapping("[uprobes]").start + 128  # slot 1: slot 0 holds the uretprobe trampoline
    r = proc.regs()
    assert (plain.regs().cx, plain.regs().dx) == (0x400002, 0x400009)
    assert (r.cx, r.dx) == (slot + 2, slot + 9)  # rcx points into the slot, and the lea after it ran there
    assert r.r11 == 0x202 | 0x100  # r11 holds the flags of the step: IF and the kernel's TF (6.18 host)
    assert plain.regs().r11 == 0x202
    assert proc.trace.counts["exc_db"] == 1
