"""The nop5 optimisation (6.18): twin of the optimisation half of arch/x86/kernel/uprobes.c.

A probe on a 5-byte nop is hit once through int3 like any other (the nop is emulated). Right after
that first hit ``arch_uprobe_optimize`` rewrites the site into ``call <trampoline>``; the trampoline
lives in a ``[uprobes-trampoline]`` page within rel32 reach and enters the kernel by ``syscall``
(``sys_uprobe``, number 336), which runs the consumers with the registers of the probe site and
returns by sysret. No exception, no emulation, no single-step.

The site is rewritten while other threads may be executing it, so the write is staged with int3
(``int3_update``): int3 on byte 0, sync every CPU, bytes 1..4, sync, byte 0, sync. Each write and
each sync is counted (``text_patches``, ``cpu_syncs``) and kept, with what a CPU entering the site
at that moment would decode, in ``patch_log(proc)``.

Also here, clearly apart from the merged form:

* ``sys_uprobe_sigill``: the RFC/v1 behaviour for a caller outside the trampoline (SIGILL instead
  of the merged -ENXIO);
* the **nop10 red-zone scheme from development trees (2026), not in any release**: selected with
  ``X86Process(NOP10_DEV_TREE)``. A nop10 site ``66 2e 0f 1f 84 00 00 00 00 00`` becomes
  ``lea -0x80(%rsp),%rsp; call tramp``, the trampoline returns with ``ret $0x80`` and sys_uprobe
  uses ip = return address - 10 and skips 4*8 + 128 bytes of stack, so the 128-byte red zone of a
  leaf function survives. Released 6.18 refuses a probe on that site (0x2e is a CS segment prefix);
  the scheme's own analysis of a nop10 site is in x86.decode (nop10_analyze_insn).

What the lab leaves out: shadow stacks (shstk_pop/shstk_push), the mmap lock and its speculative
lookup, seccomp, the ``.mremap`` hook, compat tasks, and the page-cache write path of
``uprobe_write`` (the lab writes the text directly and counts the write).
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass

from .. import uprobes as core
from ..constants import PAGE_SIZE
from ..kernel import KernelVersion
from ..program import disasm, format_listing
from ..sites import CALL_INSN_SIZE, UPROBES_TRAMPOLINE, calls_uprobe_trampoline
from . import asm
from .constants import ENXIO, TASK_SIZE, UPROBE_SWBP_INSN, __NR_uprobe
from .decode import (ARCH_UPROBE_FLAG_CAN_OPTIMIZE, ARCH_UPROBE_FLAG_NOP10, ARCH_UPROBE_FLAG_OPTIMIZE_FAIL,
                     NOP10_OPT_INSN_SIZE, ArchUprobe)
from .traps import is_swbp_at

TRAMP_NAME = UPROBES_TRAMPOLINE
INT_MAX = 2**31 - 1
INT_MIN = -(2**31)
UPROBE_SYSCALL_ARGS_SIZE = 4 * 8  # struct uprobe_syscall_args { ax; r11; cx; retaddr; }

# --- the development-tree nop10 scheme (not released) -------------------------------------
REDZONE_SIZE = 0x80

# A kernel from a development tree: 6.18 plus the nop10 red-zone scheme. Not a release.
NOP10_DEV_TREE = KernelVersion("6.18+nop10-dev", True, True, True, True, nop10_redzone=True)


# --- the trampoline page --------------------------------------------------------------------

def uprobe_trampoline_code(nop10: bool = False) -> bytes:
    """uprobe_trampoline_entry as merged: save rcx/r11/rax, syscall 336, restore, ret, int3 (SLS).

    ``nop10=True`` gives the dev-tree variant that returns with ``ret $0x80`` to undo the
    ``lea -0x80(%rsp),%rsp`` at the site.
    """
    saves = asm.push("rcx") + asm.push("r11") + asm.push("rax")
    restores = asm.pop("rax") + asm.pop("r11") + asm.pop("rcx")
    ret = asm.ret_imm16(REDZONE_SIZE) if nop10 else asm.RET
    return saves + asm.mov_imm_sx("rax", __NR_uprobe) + asm.SYSCALL + restores + ret + asm.INT3


def in_uprobe_trampoline(proc, ip: int) -> bool:
    mapping = proc.mapping_at(ip)
    return mapping is not None and mapping.name == TRAMP_NAME


def is_reachable_by_call(vtramp: int, vaddr: int) -> bool:
    delta = vaddr + CALL_INSN_SIZE - vtramp
    return INT_MIN <= delta <= INT_MAX


def _overlaps(proc, start: int) -> list:
    return [m for m in proc.mappings if start < m.end and m.start < start + PAGE_SIZE]


def _hole_upward(proc, low: int, high: int) -> int | None:
    """vm_unmapped_area, bottom-up: the lowest free page in [low, high) (no stack guard gap modelled)."""
    addr = -(-low // PAGE_SIZE) * PAGE_SIZE
    while addr + PAGE_SIZE <= high:
        hit = _overlaps(proc, addr)
        if not hit:
            return addr
        addr = max(m.end for m in hit)
    return None


def _hole_topdown(proc, low: int, high: int) -> int | None:
    """vm_unmapped_area, top-down: the highest free page in [low, high)."""
    addr = (high - PAGE_SIZE) & ~(PAGE_SIZE - 1)
    while addr >= low:
        hit = _overlaps(proc, addr)
        if not hit:
            return addr
        addr = (min(m.start for m in hit) - PAGE_SIZE) & ~(PAGE_SIZE - 1)
    return None


def find_nearest_trampoline(proc, vaddr: int) -> int | None:
    """Twin of find_nearest_trampoline(): the free page closest to the call's end, within ±2 GB."""
    call_end = vaddr + CALL_INSN_SIZE
    high = _hole_upward(proc, call_end, min(call_end + INT_MAX, TASK_SIZE))
    low = _hole_topdown(proc, max(call_end + INT_MIN, PAGE_SIZE), call_end)
    if high is None or low is None:
        return low if high is None else high
    return low if call_end - low < high - call_end else high


def get_uprobe_trampoline(proc, vaddr: int) -> int | None:
    """A reachable [uprobes-trampoline] page: an existing one if any, else a new one (never unmapped).

    The kernel keeps them on an hlist with hlist_add_head, so the newest reachable one wins.
    """
    for tramp in proc.mm.tramps:
        if is_reachable_by_call(tramp, vaddr):
            return tramp
    tramp = find_nearest_trampoline(proc, vaddr)
    if tramp is None:
        return None
    proc.map(TRAMP_NAME, tramp, PAGE_SIZE, "r-xp", uprobe_trampoline_code(proc.kernel.nop10_redzone))
    proc.mm.tramps.insert(0, tramp)
    return tramp


# --- staged text patching --------------------------------------------------------------------

@dataclass
class PatchStage:
    """One step of a staged rewrite: the site's bytes afterwards and how a CPU entering it decodes them."""

    vaddr: int
    action: str  # "start", "write", "sync"
    what: str
    site: bytes
    listing: list  # [(addr, bytes, text)]

    def lines(self) -> list[str]:
        return ["  " + line for line in format_listing(self.listing)]

    def __str__(self) -> str:
        head = f"[{self.action:5}] {self.what}: {self.site.hex(' ')}"
        return "\n".join([head] + self.lines())


_PATCH_LOGS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def patch_log(proc) -> list[PatchStage]:
    """Every staged rewrite done in this process, stage by stage (oldest first)."""
    return _PATCH_LOGS.setdefault(proc, [])


def decode_site(raw: bytes, vaddr: int) -> list[tuple[int, bytes, str]]:
    """What a CPU that starts fetching at ``vaddr`` decodes in these bytes; undecodable bytes are (bad)."""
    out, off = [], 0
    while off < len(raw):
        insns = disasm(raw[off:], "x86_64", vaddr + off)
        if not insns:
            out.append((vaddr + off, raw[off : off + 1], "(bad)"))
            off += 1
            continue
        addr, b, text = insns[0]
        out.append((addr, b, text))
        off += len(b)
    return out


def _stage(proc, vaddr: int, size: int, action: str, what: str) -> None:
    site = proc.read(vaddr, size)
    patch_log(proc).append(PatchStage(vaddr, action, what, site, decode_site(site, vaddr)))


def _write(proc, site: int, at: int, data: bytes, size: int, what: str) -> None:
    proc.write(at, data)
    proc.trace.emit("text_patches", ip=at, note=what)
    _stage(proc, site, size, "write", what)


def _sync(proc, vaddr: int, size: int) -> None:
    proc.trace.emit("cpu_syncs", ip=vaddr)  # smp_text_poke_sync_each_cpu()
    _stage(proc, vaddr, size, "sync", "sync every CPU (smp_text_poke_sync_each_cpu)")


def int3_update(proc, vaddr: int, new: bytes, optimize: bool) -> None:
    """Rewrite a multi-byte site under other CPUs' feet, with int3 as the guard (twin of int3_update).

    1. int3 on byte 0 (skipped when optimising: the probe's int3 is already there) -> sync;
    2. every byte but the first -> sync; 3. byte 0 -> sync.
    """
    size = len(new)
    _stage(proc, vaddr, size, "start", "optimise: int3 already on byte 0" if optimize
           else "unoptimise: the site holds the call")
    if not optimize:
        _write(proc, vaddr, vaddr, bytes([UPROBE_SWBP_INSN]), size, "byte 0 = int3")
    _sync(proc, vaddr, size)
    _write(proc, vaddr, vaddr + 1, new[1:], size, f"bytes 1..{size - 1}")
    _sync(proc, vaddr, size)
    _write(proc, vaddr, vaddr, new[:1], size, f"byte 0 = {new[0]:02x}")
    _sync(proc, vaddr, size)


def optimized_insn(proc, auprobe, vaddr: int, tramp: int) -> bytes:
    """The bytes an optimised site holds: ``call tramp`` (nop5), or ``lea -0x80(%rsp),%rsp; call`` (nop10, dev)."""
    if ARCH_UPROBE_FLAG_NOP10 in auprobe.flags:
        lea = asm.lea_rsp_disp8(-REDZONE_SIZE)
        return lea + asm.call_rel32(vaddr + len(lea), tramp)
    return asm.call_rel32(vaddr, tramp)


def swbp_optimize(proc, auprobe, vaddr: int, tramp: int) -> None:
    int3_update(proc, vaddr, optimized_insn(proc, auprobe, vaddr, tramp), optimize=True)


def swbp_unoptimize(proc, auprobe, vaddr: int) -> None:
    """Back to the original instruction. The dev-tree nop10 variant restores bytes 0..4 only: bytes 5..9
    are written back unchanged, so the call stays there as the SIB/disp32 operands of the restored 10-byte nop."""
    if ARCH_UPROBE_FLAG_NOP10 in auprobe.flags:
        new = auprobe.insn[:5] + proc.read(vaddr + 5, 5)
    else:
        new = auprobe.insn[:CALL_INSN_SIZE]
    int3_update(proc, vaddr, new, optimize=False)


def is_optimized(proc, vaddr: int) -> bool:
    """Twin of is_optimized(): the site holds ``call rel32`` (after the dev-tree ``lea``) into a trampoline page."""
    call_at = vaddr
    if proc.kernel.nop10_redzone and proc.read(vaddr, 5) == asm.lea_rsp_disp8(-REDZONE_SIZE):
        call_at = vaddr + 5
    return calls_uprobe_trampoline(proc.read(call_at, CALL_INSN_SIZE), call_at, proc.mappings)


def should_optimize(proc, auprobe) -> bool:
    if not proc.kernel.optimize_nop5:
        return False
    if ARCH_UPROBE_FLAG_CAN_OPTIMIZE not in auprobe.flags or ARCH_UPROBE_FLAG_OPTIMIZE_FAIL in auprobe.flags:
        return False
    # the lab's model of the dev-tree scheme: its trampoline returns with ret $0x80, so only nop10 sites
    # (which moved sp down by 0x80) may call it; nop5 sites stay on the int3 path there
    return (ARCH_UPROBE_FLAG_NOP10 in auprobe.flags) == proc.kernel.nop10_redzone


def arch_uprobe_optimize(proc, auprobe, vaddr: int) -> None:
    """After the first int3 hit: find or make a trampoline and rewrite the site into a call to it."""
    if not should_optimize(proc, auprobe):
        return
    if not is_swbp_at(proc, vaddr):  # someone else optimised or removed it meanwhile
        return
    tramp = get_uprobe_trampoline(proc, vaddr)
    if tramp is None:
        auprobe.flags.add(ARCH_UPROBE_FLAG_OPTIMIZE_FAIL)
        proc.dmesg.append(f"uprobe: no trampoline page within rel32 reach of {vaddr:#x}; stays on int3")
        return
    swbp_optimize(proc, auprobe, vaddr, tramp)


# --- breakpoints in text (6.18 overrides the generic set_swbp/set_orig_insn for optimised sites) ---

def set_swbp(proc, auprobe: ArchUprobe, vaddr: int) -> None:
    """Write int3 over the first byte (uprobe_write_opcode); keep an already optimised site."""
    if ARCH_UPROBE_FLAG_CAN_OPTIMIZE in auprobe.flags and is_optimized(proc, vaddr):
        return
    proc.write(vaddr, bytes([UPROBE_SWBP_INSN]))
    proc.trace.emit("text_patches", ip=vaddr, note="int3")


def set_orig_insn(proc, auprobe: ArchUprobe, vaddr: int) -> None:
    """Put the original instruction back: its first byte, or the whole site if it was optimised."""
    if ARCH_UPROBE_FLAG_CAN_OPTIMIZE in auprobe.flags and is_optimized(proc, vaddr):
        swbp_unoptimize(proc, auprobe, vaddr)
        return
    proc.write(vaddr, auprobe.insn[:1])
    proc.trace.emit("text_patches", ip=vaddr, note="original first byte")


# --- the uprobe syscall ----------------------------------------------------------------------

def sys_uprobe(proc, regs, outside: str = "enxio") -> int:
    """The uprobe syscall (336), merged form: consumers run with the probe site's registers.

    ``outside`` selects what happens when called from anywhere but a trampoline page: "enxio"
    (merged, "Return error from uprobe syscall when not called from trampoline") or "sigill"
    (RFC and early versions). With the dev-tree nop10 scheme, ip = return address - 10 and the
    red zone (128 bytes) is skipped as well.
    """
    if not in_uprobe_trampoline(proc, regs.ip):
        if outside == "sigill":
            proc.force_sig("SIGILL", f"sys_uprobe called from {regs.ip:#x}, not from [uprobes-trampoline]")
            return -1
        return -ENXIO
    dev = proc.kernel.nop10_redzone
    insn_size = NOP10_OPT_INSN_SIZE if dev else CALL_INSN_SIZE
    skip = UPROBE_SYSCALL_ARGS_SIZE + (REDZONE_SIZE if dev else 0)
    raw = proc.copy_from_user(regs.sp, UPROBE_SYSCALL_ARGS_SIZE)
    if raw is None:
        proc.force_sig("SIGILL", "sys_uprobe could not read the saved registers")
        return -1
    ax, r11, cx, retaddr = (int.from_bytes(raw[i : i + 8], "little") for i in range(0, 32, 8))
    ip = regs.ip  # in the trampoline, right after syscall
    # the registers of the probe site: what the consumers must see
    regs.ax, regs.r11, regs.cx = ax, r11, cx
    regs.ip = retaddr - insn_size
    regs.sp = regs.sp + skip
    sp = regs.sp
    core.handle_syscall_uprobe(proc, regs, regs.ip)
    if proc.signal:
        return -1
    if regs.sp != sp:  # a consumer moved sp: return straight there by iret
        if retaddr - insn_size == regs.ip:
            regs.ip = regs.ip + insn_size
        return regs.ax
    regs.sp = regs.sp - skip
    new_ret = regs.ip if retaddr - insn_size != regs.ip else retaddr  # a consumer may have moved ip
    args = b"".join(v.to_bytes(8, "little") for v in (regs.ax, regs.r11, regs.cx, new_ret))
    regs.ip = ip
    if not proc.copy_to_user(regs.sp, args):
        proc.force_sig("SIGILL", "sys_uprobe could not write the stack")
        return -1
    regs.r11 = regs.flags  # ensure sysret, see do_syscall_64()
    regs.cx = regs.ip
    return 0


def sys_uprobe_sigill(proc, regs) -> int:
    """sys_uprobe as in the RFC and early versions: a caller outside the trampoline gets SIGILL."""
    return sys_uprobe(proc, regs, outside="sigill")
