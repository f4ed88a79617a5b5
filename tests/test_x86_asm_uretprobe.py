"""The encoders the uretprobe test programs added to uprobe_lab.x86.asm, checked against Capstone."""
import pytest

from uprobe_lab.program import disasm
from uprobe_lab.x86 import asm
from uprobe_lab.x86.asm import REG64


def one(code: bytes) -> str:
    (insn,) = disasm(code)
    assert insn[1] == code, "Capstone decoded a different length"
    return insn[2]


BASES = ["rdi", "rsp", "rbp", "r12", "r13", "rbx"]  # plain, needing a SIB (rsp, r12), no mod-00 form (rbp, r13)
DISPS = [0, 8, -8, 0x78, 0x100, 0x1F8]  # disp8 of either sign, disp32
# The register reaches the encoding only through REX.R and ModRM.reg, which neither the base nor the
# displacement touches: every register once, and every base and displacement with a low and a high register
# (REX.R with and without REX.B) covers what the full 16 x 6 x 6 product would.
MOV_CASES = list(dict.fromkeys([(reg, "rdi", 8) for reg in REG64]
                               + [(reg, base, disp) for reg in ("rcx", "r14") for base in BASES for disp in DISPS]))


@pytest.mark.parametrize("reg,base,disp", MOV_CASES)
def test_mov_load_store(reg, base, disp):
    num = (lambda n: str(n) if n < 10 else hex(n))  # Capstone prints small displacements in decimal
    mem = f"qword ptr [{base} + {num(disp)}]" if disp > 0 else (
        f"qword ptr [{base} - {num(-disp)}]" if disp < 0 else f"qword ptr [{base}]")
    assert one(asm.mov_load(reg, base, disp)) == f"mov {reg}, {mem}"
    assert one(asm.mov_store(base, disp, reg)) == f"mov {mem}, {reg}"


def test_flags_and_arith():
    assert one(asm.PUSHFQ) == "pushfq"
    assert one(asm.POPFQ) == "popfq"


def test_existing_encoders_used_by_uretprobe_programs():
    assert one(asm.mov_imm64("rcx", 0xCCCCCCCC)) == "movabs rcx, 0xcccccccc"
    assert one(asm.mov_imm_sx("rax", 335)) == "mov rax, 0x14f"
    assert one(asm.mov_rr("rsp", "r15")) == "mov rsp, r15"
    assert one(asm.xor_rr32("rax", "rax")) == "xor eax, eax"
    assert one(asm.dec("rdi")) == "dec rdi"
