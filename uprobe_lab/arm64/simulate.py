"""Simulating a probed arm64 instruction in the BRK handler: twin of
arch/arm64/kernel/probes/simulate-insn.c (and the unmerged STP fp/lr simulation, arm64.stp).

What the lab leaves out: GCS, and PAC keys. Since 6.18 (47687aa4d9c9 "arm64: probes: Break ret out
from bl/blr", efb07ac534e2 "arm64: probes: Add GCS support to bl/blr/ret") the kernel has
simulate_br_blr and simulate_ret where the lab keeps the older simulate_br_blr_ret, and for a task with
GCS enabled a simulated bl/blr pushes the return address on the guarded control stack (update_lr,
push_user_gcs) and a simulated ret pops it and sends SIGSEGV on a mismatch (pop_user_gcs). The lab's
tasks run without GCS, where both forms do the same.
"""
from __future__ import annotations

from ..constants import MASK64
from . import stp as stp_sim
from .stp import sign_extend


def get_x_reg(regs, n: int) -> int:
    return 0 if n == 31 else regs.get(f"x{n}")  # register 31 reads as xzr here


def set_x_reg(regs, n: int, value: int) -> None:
    if n != 31:
        regs.set(f"x{n}", value)


def condition_check(cond: int, nzcv: int) -> bool:
    """``aarch32_opcode_cond_checks[cond](pstate)``: the kernel's table of __check_eq ... __check_al
    (arch/arm64/kernel/traps.c), which simulate_b_cond calls with ``regs->pstate & 0xffffffff``; it reads
    the N, Z, C, V flags (pstate bits 31..28), and 0b1111 "nv" behaves as 0b1110 "al"."""
    n, z, c, v = (nzcv >> 31) & 1, (nzcv >> 30) & 1, (nzcv >> 29) & 1, (nzcv >> 28) & 1
    base = cond >> 1
    result = [z == 1, c == 1, n == 1, v == 1, c == 1 and z == 0, n == v, n == v and z == 0, True][base]
    if cond & 1 and cond != 0xF:
        result = not result
    return result


def simulate_nop(proc, insn, addr, regs):
    regs.ip = regs.ip + 4  # arm64_skip_faulting_instruction()


def simulate_b_bl(proc, insn, addr, regs):
    disp = sign_extend((insn & 0x3FFFFFF) << 2, 27)
    if insn & (1 << 31):
        set_x_reg(regs, 30, addr + 4)
    regs.ip = (addr + disp) & MASK64


def simulate_b_cond(proc, insn, addr, regs):
    disp = 4
    if condition_check(insn & 0xF, regs.pstate):
        disp = sign_extend(((insn >> 5) & 0x7FFFF) << 2, 20)
    regs.ip = (addr + disp) & MASK64


def simulate_br_blr_ret(proc, insn, addr, regs):
    regs.ip = get_x_reg(regs, (insn >> 5) & 0x1F)  # pc first, in case of "blr lr"
    if ((insn >> 21) & 0x3) == 1:
        set_x_reg(regs, 30, addr + 4)


def simulate_cbz_cbnz(proc, insn, addr, regs):
    rt = insn & 0x1F
    value = get_x_reg(regs, rt) if insn & (1 << 31) else get_x_reg(regs, rt) & 0xFFFFFFFF
    taken = value != 0 if insn & (1 << 24) else value == 0
    disp = sign_extend(((insn >> 5) & 0x7FFFF) << 2, 20) if taken else 4
    regs.ip = (addr + disp) & MASK64


def simulate_tbz_tbnz(proc, insn, addr, regs):
    bit_pos = ((insn & (1 << 31)) >> 26) | ((insn >> 19) & 0x1F)
    bit = (get_x_reg(regs, insn & 0x1F) >> bit_pos) & 1
    taken = bit != 0 if insn & (1 << 24) else bit == 0
    disp = sign_extend(((insn >> 5) & 0x3FFF) << 2, 15) if taken else 4
    regs.ip = (addr + disp) & MASK64


def simulate_adr_adrp(proc, insn, addr, regs):
    imm = sign_extend(((insn >> 3) & 0x1FFFFC) | ((insn >> 29) & 0x3), 20)
    val = (imm << 12) + (addr & ~0xFFF) if insn & 0x80000000 else imm + addr
    set_x_reg(regs, insn & 0x1F, val & MASK64)
    regs.ip = regs.ip + 4


def simulate_stp_fp_lr_sp_64b(proc, insn, addr, regs):
    stp_sim.simulate_stp_fp_lr_sp_64b(proc, insn, addr, regs)


def simulate_ldr_literal(proc, insn, addr, regs):
    """Before CVE-2024-50099's fix (6.12; stable 6.1.114, 6.11.5) uprobes simulated ldr/ldrsw (literal)
    with a plain kernel load from the *user* address. With PAN (every ARMv8.1+ CPU, QEMU's max) that
    load faults outside the uaccess routines: the kernel oopses and the probed task dies. The lab
    models that outcome, not the oops itself."""
    load_addr = (addr + sign_extend(((insn >> 5) & 0x7FFFF) << 2, 20)) & MASK64
    proc.dmesg.append(f"Unable to handle kernel access to user memory outside uaccess routines at virtual "
                      f"address {load_addr:016x}")
    proc.force_sig("SIGSEGV", "kernel oops in simulate_ldr_literal(): a plain load from the user address "
                   "(CVE-2024-50099, fixed by refusing the probe)")


HANDLERS = {
    "simulate_nop": simulate_nop, "simulate_b_bl": simulate_b_bl, "simulate_b_cond": simulate_b_cond,
    "simulate_br_blr_ret": simulate_br_blr_ret, "simulate_cbz_cbnz": simulate_cbz_cbnz,
    "simulate_tbz_tbnz": simulate_tbz_tbnz, "simulate_adr_adrp": simulate_adr_adrp,
    "simulate_stp_fp_lr_sp_64b": simulate_stp_fp_lr_sp_64b,
    "simulate_ldr_literal": simulate_ldr_literal, "simulate_ldrsw_literal": simulate_ldr_literal,
}

