"""The unmerged STP fp/lr simulation (seed 001_a91640efe4f91e99.txt, Liao Chang, 2024).

Most arm64 function entries start with ``stp x29, x30, [sp, #imm]!``. Upstream single-steps it
out of line (BRK, step in the XOL slot, a second exception for the hardware step). The patch
simulates it in the BRK handler instead. Two forms were posted:

* v1 (``store="uaccess"``, <20240814080356.2639544-1-liaochang1@huawei.com>): one ``copy_to_user`` of fp
  and lr (16 bytes; with PAN it stores with two STTRs), with no sp alignment check; on a failed copy it
  sends SIGSEGV and returns before it moves sp or pc. Mark Rutland objected that two stores cannot give
  STP's single-copy atomicity and ordering (MTE, POE...).
* v2, the seed (``store="pin"``, the default): pin the user stack pages (get_user_pages_fast),
  map them into the kernel (kmap_local_page / vmap) and run a real ``stp`` there; it checks the new
  sp's alignment, and its SIGSEGV paths still move sp and pc.

v2 simulates only where the system has no MTE (``arm_uprobe_decode_special_insn``); v1 has no MTE check.
Review asked to go back to the v1 form; no version was merged. Costs are reported as events:
``pages_pinned`` for v2, one ``uaccess_copies`` of 16 ``uaccess_bytes`` for v1.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..constants import MASK64, PAGE_SIZE

STP_STORES = ("pin", "uaccess")


def sign_extend(value: int, sign_bit: int) -> int:
    """sign_extend64(value, sign_bit): bit ``sign_bit`` is the sign."""
    value &= (1 << (sign_bit + 1)) - 1
    return value - (1 << (sign_bit + 1)) if value >> sign_bit & 1 else value


@dataclass(frozen=True)
class PairFields:
    """The fields of a load/store pair word, as the decoders in arch/arm64/lib/insn.c read them."""

    word: int
    is_pair: bool
    form: str  # pre-index, post-index, signed offset, or "" when not a pair
    load: bool
    opc: int  # aarch64_insn_decode_ldst_size(): bits 31:30 (2 = 64-bit x registers)
    imm7: int
    rt: int
    rt2: int
    rn: int

    @property
    def offset(self) -> int:
        scale = 8 if self.opc == 2 else 4
        return sign_extend(self.imm7, 6) * scale


def pair_fields(word: int) -> PairFields:
    """Read the pair fields; ``is_pair`` for STP/LDP of general registers (bits 29:25 = 10100)."""
    is_pair = (word & 0x3E000000) == 0x28000000
    form = {1: "post-index", 2: "signed offset", 3: "pre-index"}.get((word >> 23) & 3, "no-allocate")
    return PairFields(word, is_pair, form if is_pair else "", bool(word & 0x00400000), (word >> 30) & 3,
                      (word >> 15) & 0x7F, word & 0x1F, (word >> 10) & 0x1F, (word >> 5) & 0x1F)


def aarch64_insn_is_stp_pre(word: int) -> bool:
    return (word & 0x7FC00000) == 0x29800000


def aarch64_insn_is_stp_fp_lr_sp_64b(word: int) -> bool:
    """Exactly ``stp x29, x30, [sp, #imm]!``: pre-index, 64-bit (opc 2), rt 29, rt2 30, rn sp."""
    f = pair_fields(word)
    return aarch64_insn_is_stp_pre(word) and f.opc == 2 and f.rt2 == 30 and f.rn == 31 and f.rt == 29


def why_not_stp_fp_lr(word: int) -> str:
    """'' when the word is the pattern, else the first field that differs (for the decode widget)."""
    f = pair_fields(word)
    if not aarch64_insn_is_stp_pre(word):
        if f.is_pair:
            kind = "ldp" if f.load else "stp"
            return f"{kind} {f.form}, not stp pre-index"
        return "not a store-pair instruction"
    if f.opc != 2:
        return f"opc={f.opc}: 32-bit w registers, not x registers (opc=2)"
    if f.rn != 31:
        return f"base register x{f.rn}, not sp"
    if (f.rt, f.rt2) != (29, 30):
        return f"registers x{f.rt}, x{f.rt2}, not x29, x30"
    return ""


def stack_align_check(proc, sp: int) -> bool:
    """IS_ALIGNED(sp, 16) or SCTLR_EL1.SA0 clear (``proc.sp_alignment_check``).

    The seed passes the *new* sp. The Arm ARM's STP checks the base register before the offset is
    added (``if n == 31 then CheckSPAlignment(); address = SP[];``, then ``address + offset``), so
    from an aligned sp ``stp x29, x30, [sp, #-8]!`` stores on hardware, where the seed sends SIGSEGV;
    the lab follows the seed."""
    return sp % 16 == 0 or not proc.sp_alignment_check


def gup_force_write_ok(mapping) -> bool:
    """Whether get_user_pages_fast(FOLL_WRITE | FOLL_FORCE) gets a page of this mapping: check_vma_flags
    (mm/gup.c) lets FOLL_FORCE write where VM_WRITE is clear if is_cow_mapping(), i.e. any private
    mapping - read-only or PROT_NONE too, by breaking COW as ptrace's pokes do. Only a shared mapping
    without write permission, or no mapping, fails."""
    return mapping is not None and ("w" in mapping.perms or mapping.perms.endswith("p"))


def simulate_stp_fp_lr_sp_64b(proc, word: int, addr: int, regs) -> None:
    """The patch's simulate_stp_fp_lr_sp_64b() (arch/arm64/kernel/probes/simulate-insn.c in both versions): store
    fp, lr as one pair below sp; sp = new_sp; pc += 4. ``proc.stp_store`` picks v2, the seed, or v1.

    v2 (the seed) checks the new sp's alignment and pins the pages; its SIGSEGV paths still update sp and
    pc ("goto done"). The pin passes FOLL_FORCE, so it stores into a private page the task may not write (a
    read-only or PROT_NONE guard page under the stack), where the stp itself, or v1's copy, fault.
    v1 makes one copy_to_user with no alignment check; when the copy fails it sends SIGSEGV and returns,
    leaving sp and pc where they were.
    """
    imm7 = (word >> 15) & 0x7F
    old_sp = regs.sp
    new_sp = (old_sp + (sign_extend(imm7, 6) << 3)) & MASK64
    fp, lr = regs.get("x29"), regs.get("x30")
    pair = fp.to_bytes(8, "little") + lr.to_bytes(8, "little")
    if proc.stp_store == "uaccess":
        # v1: copy_to_user((void __user *)new_sp, buf, sizeof(buf)), one call; it stores up to the first
        # byte it cannot write, and its two STTRs together are not one single-copy atomic pair
        if not proc.copy_to_user(new_sp, pair):
            proc.force_sig("SIGSEGV", f"stp x29, x30: cannot store to the user stack at {new_sp:#x}")
            return
    elif not stack_align_check(proc, new_sp):
        proc.force_sig("SIGSEGV", f"stp x29, x30: new sp {new_sp:#x} is not 16-byte aligned (SCTLR_EL1.SA0)")
    else:
        nr_pages = (old_sp >> 12) - (new_sp >> 12) + 1
        pages = [(new_sp & ~(PAGE_SIZE - 1)) + i * PAGE_SIZE for i in range(max(nr_pages, 0))]
        pinnable = nr_pages > 0 and all(gup_force_write_ok(proc.mapping_at(p)) for p in pages)
        if not pinnable:
            proc.force_sig("SIGSEGV", f"stp x29, x30: get_user_pages_fast() failed for {new_sp:#x}")
        else:
            proc.trace.emit("pages_pinned", nr_pages, ip=addr,
                            note="get_user_pages_fast + " + ("kmap_local_page" if nr_pages == 1 else "vmap"))
            proc.write(new_sp, pair)  # the kernel's own stp through the kernel mapping: one 16-byte store
    regs.sp = new_sp
    regs.ip = addr + 4
