"""The optimised uprobe: twin of the optimisation half of arch/x86/kernel/uprobes.c, 6.18 and 7.3.

A probe on an optimisable nop is hit once through int3 like any other (the nop is emulated). Right
after that first hit ``arch_uprobe_optimize`` rewrites the site into a call to a trampoline in a
``[uprobes-trampoline]`` page within rel32 reach; the trampoline enters the kernel by ``syscall``
(``sys_uprobe``, number 336), which runs the consumers with the registers of the probe site and
returns by sysret. No exception, no emulation, no single-step.

* **6.18** optimises a 5-byte nop into ``call tramp``. The call pushes its return address at
  sp-8, inside the 128-byte red zone a leaf function may keep live data in: the hazard libbpf/usdt
  cited when it reverted its ``nop; nop5`` USDT sites (b0144b0, 2026-05-06).
* **7.3** (554ba38456da "uprobes/x86: Move optimized uprobe from nop5 to nop10"; 7.2.y stable from 7.2.6
  at the latest) optimises only the
  10-byte nop ``66 2e 0f 1f 84 00 00 00 00 00`` into ``lea -0x80(%rsp),%rsp; call tramp``; the
  trampoline returns with ``ret $0x80`` and sys_uprobe uses ip = return address - 10 and
  sp + 4*8 + 0x80, so the red zone survives. A nop5 stays on the int3 path (emulated), and 6.18
  refuses a probe on the nop10 altogether (0x2e is a CS prefix, refused by is_prefix_bad). Which
  site a kernel accepts is decided in x86.decode (can_optimize).

The site is rewritten while other threads may be executing it, so the write is staged with int3:
int3 on byte 0, sync every CPU, the other bytes, sync, byte 0, sync (6.18 ``int3_update``; 7.3
``int3_update_optimize`` / ``int3_update_unoptimize``, which restores only bytes 1..4 of the nop10
and leaves ``e8 rel32`` in bytes 5..9: a thread already past the lea must still find the call).
Each write and each sync is counted (``text_patches``, ``cpu_syncs``) and kept, with what a CPU
entering the site at that moment would decode, in ``patch_log(proc)``.

A forked child (``EmulatedProcess.fork``) inherits the rewritten site with the text, but 6.18 maps the
trampoline VM_DONTCOPY, so the child's call goes to an unmapped page (SIGSEGV, as the host shows); 7.3
(d9a48e77f6fe "uprobes/x86: Allow to copy uprobe trampolines on fork") copies it.

Also here, clearly apart from the merged forms: ``sys_uprobe_sigill``, the RFC/v1 behaviour for a
caller outside the trampoline (SIGILL instead of 6.18's -ENXIO / 7.3's -EPROTO).

What the lab leaves out: shadow stacks (shstk_pop/shstk_push), the mmap lock and its speculative
lookup, seccomp, the ``.mremap`` hook, compat tasks, the write verification callback (verify_insn) and the page-cache write path of ``uprobe_write``
(the lab writes the text directly and counts the write).
"""
from __future__ import annotations

import struct
import weakref
from dataclasses import dataclass

from .. import uprobes as core
from ..constants import PAGE_SIZE
from ..kernel import KernelVersion
from ..program import disasm, format_listing
from ..sites import CALL_INSN_SIZE, LEA_INSN_SIZE, LEA_RSP_MINUS_0X80, UPROBES_TRAMPOLINE, calls_uprobe_trampoline
from . import asm
from .constants import ENXIO, EPROTO, TASK_SIZE, UPROBE_SWBP_INSN, __NR_uprobe
from .decode import ARCH_UPROBE_FLAG_CAN_OPTIMIZE, ARCH_UPROBE_FLAG_OPTIMIZE_FAIL, NOP10_OPT_INSN_SIZE, ArchUprobe
from .traps import is_swbp_at

TRAMP_NAME = UPROBES_TRAMPOLINE
INT_MAX = 2**31 - 1
INT_MIN = -(2**31)
UPROBE_SYSCALL_ARGS_SIZE = 4 * 8  # struct uprobe_syscall_args { ax; r11; cx; retaddr; }

# --- 7.3: the nop10 form ----------------------------------------------------------------------
REDZONE_SIZE = 0x80


def opt_insn_size(kernel: KernelVersion) -> int:
    """Bytes an optimised site spans: the call (6.18), or the lea and the call (7.3)."""
    return NOP10_OPT_INSN_SIZE if kernel.optimize_nop10 else CALL_INSN_SIZE


# --- the trampoline page --------------------------------------------------------------------

def uprobe_trampoline_code(nop10: bool = False) -> bytes:
    """uprobe_trampoline_entry: save rcx/r11/rax, syscall 336, restore, ret, int3 (SLS).

    ``nop10=True`` gives 7.3's, which returns with ``ret $0x80``: it pops the return address and
    then undoes the ``lea -0x80(%rsp),%rsp`` at the site.
    """
    saves = asm.push("rcx") + asm.push("r11") + asm.push("rax")
    restores = asm.pop("rax") + asm.pop("r11") + asm.pop("rcx")
    ret = asm.ret_imm16(REDZONE_SIZE) if nop10 else asm.RET
    return saves + asm.mov_imm_sx("rax", __NR_uprobe) + asm.SYSCALL + restores + ret + asm.INT3


def in_uprobe_trampoline(proc, ip: int) -> bool:
    mapping = proc.mapping_at(ip)
    return mapping is not None and mapping.name == TRAMP_NAME


def is_reachable_by_call(vtramp: int, vaddr: int, insn_size: int = CALL_INSN_SIZE) -> bool:
    """The call at the end of the optimised site (``insn_size`` bytes from ``vaddr``) reaches ``vtramp``."""
    delta = vaddr + insn_size - vtramp
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
    call_end = vaddr + opt_insn_size(proc.kernel)
    high = _hole_upward(proc, call_end, min(call_end + INT_MAX, TASK_SIZE))
    low = _hole_topdown(proc, max(call_end + INT_MIN, PAGE_SIZE), call_end)
    if high is None or low is None:
        return low if high is None else high
    return low if call_end - low < high - call_end else high


def get_uprobe_trampoline(proc, vaddr: int) -> int | None:
    """A reachable [uprobes-trampoline] page: an existing one if any, else a new one (never unmapped).

    6.18 keeps them on an hlist with hlist_add_head, so the newest reachable one wins; 7.3 (which
    dropped struct uprobe_trampoline) walks the mm's VMAs, so the lowest reachable one wins.
    """
    size = opt_insn_size(proc.kernel)
    tramps = sorted(proc.mm.tramps) if proc.kernel.optimize_nop10 else proc.mm.tramps
    for tramp in tramps:
        if is_reachable_by_call(tramp, vaddr, size):
            return tramp
    tramp = find_nearest_trampoline(proc, vaddr)
    if tramp is None:
        return None
    proc.map(TRAMP_NAME, tramp, PAGE_SIZE, "r-xp", uprobe_trampoline_code(proc.kernel.optimize_nop10),
             dontcopy=not proc.kernel.copy_uprobe_trampolines_on_fork)  # 6.18: VM_DONTCOPY|VM_IO
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


def int3_update_unoptimize(proc, vaddr: int, insn: bytes) -> None:
    """7.3: back from ``lea; call`` to the nop10, leaving the call's five bytes in place.

    1. int3 on byte 0 -> sync; 2. bytes 1..4 of the nop (``2e 0f 1f 84``) -> sync; 3. byte 0 -> sync.
    ``66 2e 0f 1f 84 e8 d0 d1 d2 d3`` is the nop10 again from byte 0 (the call's bytes are its SIB and
    disp32 operands), while a thread that had already run the lea and stopped at byte 5 still finds
    the call. The trampoline is the same on every re-optimisation, so those bytes never change.
    """
    size = NOP10_OPT_INSN_SIZE
    _stage(proc, vaddr, size, "start", "unoptimise: the site holds lea; call")
    _write(proc, vaddr, vaddr, bytes([UPROBE_SWBP_INSN]), size, "byte 0 = int3")
    _sync(proc, vaddr, size)
    _write(proc, vaddr, vaddr + 1, insn[1:LEA_INSN_SIZE], size,
           f"bytes 1..4 = {insn[1:LEA_INSN_SIZE].hex(' ')} (bytes 5..9 keep the call)")
    _sync(proc, vaddr, size)
    _write(proc, vaddr, vaddr, insn[:1], size, f"byte 0 = {insn[0]:02x}")
    _sync(proc, vaddr, size)


def optimized_insn(proc, vaddr: int, tramp: int) -> bytes:
    """The bytes an optimised site holds: ``call tramp`` (6.18), or ``lea -0x80(%rsp),%rsp; call tramp`` (7.3)."""
    if proc.kernel.optimize_nop10:
        return LEA_RSP_MINUS_0X80 + asm.call_rel32(vaddr + LEA_INSN_SIZE, tramp)
    return asm.call_rel32(vaddr, tramp)


def swbp_optimize(proc, auprobe, vaddr: int, tramp: int) -> None:
    int3_update(proc, vaddr, optimized_insn(proc, vaddr, tramp), optimize=True)


def swbp_unoptimize(proc, auprobe, vaddr: int) -> None:
    """Back to the original instruction (7.3: bytes 0..4 only, see int3_update_unoptimize)."""
    if proc.kernel.optimize_nop10:
        int3_update_unoptimize(proc, vaddr, auprobe.insn)
    else:
        int3_update(proc, vaddr, auprobe.insn[:CALL_INSN_SIZE], optimize=False)


def is_optimized(proc, vaddr: int) -> bool:
    """Twin of is_optimized(): the site holds ``call rel32`` (7.3: ``lea; call``, is_opt_insns) into a trampoline page."""
    if proc.kernel.optimize_nop10 and proc.read(vaddr, LEA_INSN_SIZE) != LEA_RSP_MINUS_0X80:
        return False
    return calls_uprobe_trampoline(proc.read(vaddr, opt_insn_size(proc.kernel)), vaddr, proc.mappings)


def should_optimize(proc, auprobe) -> bool:
    return (proc.kernel.uprobe_syscall and ARCH_UPROBE_FLAG_CAN_OPTIMIZE in auprobe.flags
            and ARCH_UPROBE_FLAG_OPTIMIZE_FAIL not in auprobe.flags)


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
    if should_optimize(proc, auprobe) and is_optimized(proc, vaddr):
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

def sys_uprobe(proc, regs, outside: str = "errno") -> int:
    """The uprobe syscall (336): consumers run with the probe site's registers.

    Called from anywhere but a trampoline page it fails: -ENXIO on 6.18, -EPROTO on 7.3 (libbpf's
    feature probe expects exactly the one its own kernel gives); ``outside="sigill"`` gives the RFC
    and early versions' SIGILL instead. Stack at entry (sp upwards): the trampoline's pushes ax,
    r11, cx, then the site call's return address. Consumers see ip = return address - the optimised
    site's size (5 or 10) and sp = entry sp + 4*8 (+ 0x80 on 7.3, undoing the lea): the probe site's
    own registers. Unless a consumer moved sp, the (possibly changed) registers go back on the stack,
    a moved ip replaces the return address, and the syscall returns by sysret into the trampoline;
    if a consumer moved sp, it returns by iret straight to the ip (past the site if ip is unchanged).
    """
    if not in_uprobe_trampoline(proc, regs.ip):
        if outside == "sigill":
            proc.force_sig("SIGILL", f"sys_uprobe called from {regs.ip:#x}, not from [uprobes-trampoline]")
            return -1
        return -EPROTO if proc.kernel.optimize_nop10 else -ENXIO
    insn_size = opt_insn_size(proc.kernel)
    skip = UPROBE_SYSCALL_ARGS_SIZE + (REDZONE_SIZE if proc.kernel.optimize_nop10 else 0)
    raw = proc.copy_from_user(regs.sp, UPROBE_SYSCALL_ARGS_SIZE)
    if raw is None:
        proc.force_sig("SIGILL", "sys_uprobe could not read the saved registers")
        return -1
    ax, r11, cx, retaddr = struct.unpack("<4Q", raw)
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
    args = struct.pack("<4Q", regs.ax, regs.r11, regs.cx, new_ret)
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
