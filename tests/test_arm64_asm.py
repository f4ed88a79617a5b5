"""Every arm64 encoder and every bench target checked against Capstone."""
import pytest

from uprobe_lab.arm64 import asm
from uprobe_lab.arm64.programs import bench_program
from uprobe_lab.program import disasm

CASES = [
    (asm.NOP, "nop"),
    (asm.RET, "ret"),
    (asm.BRK64_OPCODE_UPROBES, "brk #5"),
    (asm.stp(29, 30, 31, -16), "stp x29, x30, [sp, #-0x10]!"),
    (asm.stp(29, 30, 31, -16, "post"), "stp x29, x30, [sp], #-0x10"),
    (asm.stp(29, 30, 31, 16, "offset"), "stp x29, x30, [sp, #0x10]"),
    (asm.stp(29, 30, 31, -8, x=False), "stp w29, w30, [sp, #-8]!"),
    (asm.ldp(29, 30, 31, 16), "ldp x29, x30, [sp], #0x10"),
    (asm.mov_sp(29, 31), "mov x29, sp"),
    (asm.movz(0, 1, x=False), "mov w0, #1"),
    (asm.movz(8, 155), "mov x8, #0x9b"),
    (asm.mov_reg(19, 0), "mov x19, x0"),
    (asm.subs_imm(19, 19, 1), "subs x19, x19, #1"),
    (asm.cmp_imm(3, 7), "cmp x3, #7"),
    (asm.add_reg(1, 2, 3), "add x1, x2, x3"),
    (asm.eor_reg(4, 5, 6), "eor x4, x5, x6"),
    (asm.blr(20), "blr x20"),
    (asm.br(16), "br x16"),
    (asm.ret(1), "ret x1"),
    (asm.svc(0), "svc #0"),
    (asm.b_imm(-8), "b #0xff8"),
    (asm.b_imm(0x40, link=True), "bl #0x1040"),
    (asm.bcond("ne", -8), "b.ne #0xff8"),
    (asm.cbz(3, 8, x=False), "cbz w3, #0x1008"),
    (asm.cbz(3, 8, nonzero=True), "cbnz x3, #0x1008"),
    (asm.tbz(2, 33, 12, nonzero=True), "tbnz x2, #0x21, #0x100c"),
    (asm.adr(4, 0x1234), "adr x4, #0x2234"),
    (asm.adr(5, 0x3000, page=True), "adrp x5, #0x4000"),
    (asm.ldr_lit(1, 16), "ldr x1, #0x1010"),
    (asm.str_imm(1, 31, 16), "str x1, [sp, #0x10]"),
    (asm.ldr_imm(2, 31, 24), "ldr x2, [sp, #0x18]"),
]


@pytest.mark.parametrize("word,text", CASES, ids=[t for _, t in CASES])
def test_encoding_matches_capstone(word, text):
    assert disasm(asm.b(word), "arm64", 0x1000)[0][2] == text


def test_bench_targets_as_the_kernel_bench_compiles_them():
    prog = bench_program()
    text = lambda name: [t for _, _, t in prog.instructions(name)]
    assert text("uprobe_target_nop") == ["nop", "ret"]
    assert text("uprobe_target_ret") == ["ret"]
    assert text("uprobe_target_push") == [
        "stp x29, x30, [sp, #-0x10]!", "mov x29, sp", f"bl #{prog.resolve('opaque_noop_func'):#x}",
        "mov w0, #1", "ldp x29, x30, [sp], #0x10", "ret"]
    assert prog.instructions("uprobe_target_push")[0][1] == bytes.fromhex("fd7bbfa9")  # a9bf7bfd in memory


def test_bad_pair_offset_is_refused():
    with pytest.raises(ValueError, match="multiple of 8"):
        asm.stp(29, 30, 31, -12)
