"""Every hand encoding decodes, with Capstone, to the instruction it claims to be."""
import pytest

from uprobe_lab.program import disasm, format_listing, listing
from uprobe_lab.sites import LEA_RSP_MINUS_0X80
from uprobe_lab.x86 import asm
from uprobe_lab.x86.programs import bench_program

CASES = [
    (asm.NOP, "nop"), (asm.RET, "ret"), (asm.INT3, "int3"), (asm.SYSCALL, "syscall"),
    (asm.push("rbp"), "push rbp"), (asm.push("r11"), "push r11"), (asm.pop("rcx"), "pop rcx"),
    (asm.pop("r12"), "pop r12"), (asm.mov_rr("rbp", "rsp"), "mov rbp, rsp"),
    (asm.mov_rr("r12", "rsi"), "mov r12, rsi"), (asm.mov_imm32("rax", 1), "mov eax, 1"),
    (asm.mov_imm_sx("rax", 335), "mov rax, 0x14f"), (asm.mov_imm64("r9", 2**63), "movabs r9, 0x8000000000000000"),
    (asm.xor_rr32("rdi", "rdi"), "xor edi, edi"), (asm.dec("rbx"), "dec rbx"), (asm.inc("r10"), "inc r10"),
    (asm.call_reg("r12"), "call r12"), (LEA_RSP_MINUS_0X80, "lea rsp, [rsp - 0x80]"),
    (asm.ret_imm16(0x80), "ret 0x80"), (asm.mov_store_rsp_disp8("r9", -8), "mov qword ptr [rsp - 8], r9"),
    (asm.mov_load_rsp_disp8("rax", 16), "mov rax, qword ptr [rsp + 0x10]"),
    (asm.alu_rr("sub", "r8", "rcx"), "sub r8, rcx"), (asm.alu_rr("cmp", "rdi", "r15"), "cmp rdi, r15"),
    (asm.lea_disp8("rsi", "r10", -3), "lea rsi, [r10 - 3]"),
    (asm.call_rel32(0x400000, 0x400100), "call 0x400100"),
    (asm.X86_NOPS[5], "nop dword ptr [rax + rax]"), (asm.NOP10, "nop word ptr cs:[rax + rax]"),
]


@pytest.mark.parametrize("raw,text", CASES, ids=[t for _, t in CASES])
def test_encoding_matches_capstone(raw, text):
    (addr, got_raw, got_text), = disasm(raw, "x86_64", 0x400000)
    assert got_raw == raw and got_text == text


@pytest.mark.parametrize("length", range(1, asm.ASM_NOP_MAX + 1))
def test_kernel_nop_table_entries_are_single_nops(length):
    (_, raw, text), = disasm(asm.X86_NOPS[length], "x86_64")
    assert len(raw) == length and text.startswith("nop")


def test_bench_targets_are_the_kernel_bench_bytes():
    p = bench_program()
    code = lambda name: p.code[p.symbols[name].addr - p.base:][: p.symbols[name].size]
    assert code("uprobe_target_nop") == bytes.fromhex("90c3")
    push = code("uprobe_target_push")
    assert push[:5] == bytes.fromhex("554889e5e8") and push[9:] == bytes.fromhex("b8010000005dc3")
    call_target = p.symbols["uprobe_target_push"].addr + 9 + int.from_bytes(push[5:9], "little", signed=True)
    assert call_target == p.resolve("opaque_noop_func")
    assert code("uprobe_target_ret") == b"\xc3"
    assert code("uprobe_target_nop5") == bytes.fromhex("0f1f440000c3")
    cross = p.resolve("uprobe_target_nop5_pagecross")
    assert cross % 0x1000 == 0x1000 - 2  # the nop5 straddles a page boundary


def test_listing_and_symbols():
    p = bench_program()
    assert "uprobe_target_push" in p.listing()
    assert p.symbol_at(p.resolve("uprobe_target_push") + 4) == ("uprobe_target_push", 4)
    with pytest.raises(KeyError, match="no symbol 'nope'"):
        p.resolve("nope")
    with pytest.raises(ValueError, match="outside uprobe_target_nop"):
        p.resolve("uprobe_target_nop", 7)


def test_one_listing_format():
    code = bytes.fromhex("90c3")  # nop; ret
    assert listing(code, "x86_64", 0x10).splitlines() == [f"  10:  {'90':<30} nop", f"  11:  {'c3':<30} ret"]
    assert listing(code, "x86_64", 0x10, count=1) == f"  10:  {'90':<30} nop"
    word = bytes.fromhex("fd7bbfa9")  # stp x29, x30, [sp, #-16]! as it lies in memory
    assert format_listing([(0x400000, word, "stp")], words=True) == [f"400000:  {'a9bf7bfd':<30} stp"]


@pytest.mark.parametrize("name, op", [("futex_wake_private", "0x81"), ("futex_wake_shared", "1")])
def test_futex_targets_decode_as_the_call_they_claim(name, op):
    p = bench_program()
    sym = p.symbols[name]
    code = p.code[sym.addr - p.base:][: sym.size]
    assert [t for _, _, t in disasm(code, "x86_64", sym.addr)] == [
        "mov eax, 0xca", "mov rdi, rsp", f"mov esi, {op}", "mov edx, 1", "syscall", "ret"]  # futex(rsp, op, 1)


def test_the_long_kernel_nops_carry_a_cs_prefix_and_are_refused():
    """nops.h: BYTES_NOP9 = 0x2e,BYTES_NOP8; NOP10 = 0x66,NOP9; NOP11 = 0x66,NOP10 (ASM_NOP_MAX 11). The
    0x2e is a CS prefix, which is_prefix_bad() refuses in uprobe_init_insn, before branch_setup_xol_ops
    compares x86_nops[]; this project's 6.18.44 host answered -ENOTSUPP (524) for all three."""
    from uprobe_lab.kernel import get_kernel
    from uprobe_lab.uprobes import UnprobeableInstruction
    from uprobe_lab.x86.decode import arch_uprobe_analyze_insn

    assert asm.ASM_NOP_MAX == 11
    assert asm.X86_NOPS[9] == b"\x2e" + asm.X86_NOPS[8]
    assert asm.X86_NOPS[11] == b"\x66" + asm.X86_NOPS[10] == b"\x66\x66\x2e" + asm.X86_NOPS[8]
    for name in ("6.16", "6.18"):
        for length in (9, 10, 11):
            with pytest.raises(UnprobeableInstruction, match="CS segment"):
                arch_uprobe_analyze_insn(asm.X86_NOPS[length], 0x400000, get_kernel(name))
    assert arch_uprobe_analyze_insn(asm.X86_NOPS[10], 0x400000, get_kernel("7.3")).action == "emulate"  # nop10
