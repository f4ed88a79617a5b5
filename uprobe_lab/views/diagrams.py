"""The course's diagrams, one per mechanism, written as SVG text from what the lab itself does: every byte,
address and register shown is read from a process the lab runs (the probed bytes, the XOL slot, the
trampolines' code, each stage of the nop5 rewrite, the BRK and STP words), so a diagram cannot drift from the
model. ``python -m uprobe_lab.views.diagrams`` writes them into ``notebooks/diagrams/``, beside the chapters
that show them (a relative link then resolves in JupyterLab and on the site alike).

Each file carries its alt text twice: ``<title>`` (the short name) and ``<desc>`` (the whole picture in words,
for a screen reader), and ``ALT`` holds the alt text the notebooks give the image.
"""
from __future__ import annotations

import sys
from pathlib import Path

from ..arm64.process import Arm64Process
from ..arm64.programs import bench_program
from ..kernel import KERNELS
from ..arches import make_process
from ..program import disasm
from ..uprobes import CountingConsumer, uprobe_register
from ..x86.constants import __NR_uprobe, __NR_uretprobe
from ..sites import LEA_RSP_MINUS_0X80
from ..x86.optimize import REDZONE_SIZE, uprobe_trampoline_code
from ..x86.redzone_programs import check_transparency
from ..x86.uretprobe import uretprobe_trampoline
from .nop5 import patch_run
from .svg_drawing import (HEAD_SIZE, LANE_GAP, LINE, MARGIN, SANS, SIZE, SLIDE, TITLE_SIZE, TITLE_Y, Box, Sequence,
                          Svg, stack_panel, stack_panel_width, text_width, wrap)

OUT = Path(__file__).resolve().parents[2] / "notebooks" / "diagrams"


def code_lines(code: bytes, arch: str, vaddr: int | None = None, width: int = 12) -> list[str]:
    """Bytes and instruction, one line each, as the lab's disassembler reads them; each line starts with its
    address unless ``vaddr`` is None (a box whose head gives the address)."""
    return [(f"{addr:x}: " if vaddr is not None else "") + f"{raw.hex(' '):<{width}} {text}"
            for addr, raw, text in disasm(code, arch, vaddr or 0)]


# --- the mechanisms -------------------------------------------------------------------------------------


def int3_hit() -> Svg:
    """The x86-64 breakpoint path, for the bench's probe on ``push %rbp`` (emulated) on 6.18."""
    proc = make_process("x86_64", "6.18")
    probe = uprobe_register(proc, "uprobe_target_push", CountingConsumer())
    vaddr, orig = probe.vaddr, probe.insn[:1]
    (_, _, text), = disasm(orig, "x86_64", vaddr)
    boxes = [
        Box("user", "the probed instruction", [f"{vaddr:x}: cc  int3", f"(was {orig.hex()}  {text})"], "#BP trap"),
        Box("kernel", "exc_int3", [
            "pt_regs saved on entry", "(idtentry: PUSH_AND_CLEAR_REGS)", "uprobe_pre_sstep_notifier",
            "-> handle_swbp"]),
        Box("kernel", "handle_swbp: which probe?", [
            "bp_vaddr = ip - 1", "  (uprobe_get_swbp_addr)", "the return trampoline?", "  -> chapter 02",
            "find_active_uprobe_rcu(bp_vaddr)", "none, but int3 there: SIGTRAP"]),
        # the kernel's second half beside its first: wide and short, it ends above a slide's page bar
        Box("kernel", "handler_chain: the consumers", [
            "each consumer's ->handler(regs)", "a ->ret_handler too: prepare_uretprobe",
            "then arch_uprobe_optimize (nop5)"], col=1),
        Box("kernel", "emulate or step out of line?", [
            f"{text}: arch_uprobe_skip_sstep emulates", "  store rbp at sp-8; sp -= 8; ip += 1",
            "ret, mov, ...: pre_ssout -> XOL slot"], "iret", col=1),
        Box("user", "the program goes on", [f"{vaddr + 1:x}: mov rbp, rsp", "one exception per hit"]),
    ]
    desc = (f"A uprobe hit on x86-64, kernel 6.18. The probed push rbp at {vaddr:#x} now begins with int3 (0xcc); "
            "the CPU traps (#BP) into exc_int3, which saves pt_regs and calls handle_swbp. handle_swbp computes "
            "the breakpoint address as ip minus 1, checks for the return trampoline, finds the uprobe (an int3 "
            "with no uprobe becomes SIGTRAP), runs each consumer's handler in handler_chain (preparing a return "
            "probe if one has a ret_handler), then either emulates the instruction in the kernel (push rbp: store "
            "rbp below sp, sp minus 8, ip plus 1) or sets up an out-of-line single step. It returns to user "
            "space by iret at the next instruction: one exception per hit.")
    seq = Sequence("A breakpoint hit: trap, lookup, consumers, emulate, return", desc, ["user", "kernel"], boxes)
    seq.draw()
    return seq.finish()


def xol_step() -> Svg:
    """The bench's probe on ``ret``, stepped out of line in slot 1 of [uprobes] on 6.18."""
    proc = make_process("x86_64", "6.18")
    probe = uprobe_register(proc, "uprobe_target_ret", CountingConsumer())
    proc.call("producer_loop", 1, probe.vaddr)
    area = proc.mm.xol_area
    slot = area.slot_vaddr(1)
    copy = proc.read(slot, 16)
    boxes = [
        Box("user", "the probed ret", [f"{probe.vaddr:x}: cc  int3", "(was c3  ret)"], "#BP trap"),
        Box("kernel", "handle_swbp -> pre_ssout", [
            "consumers run (handler_chain)", "ret cannot be emulated:",
            "xol_get_insn_slot: slot 1", f"  {slot:x}: {copy[:4].hex(' ')} ...",
            "arch_uprobe_pre_xol:", f"  ip = {slot:x}; set TF"], "iret"),
        Box("[uprobes]", "the copy runs, one insn", [
            f"{slot:x}: c3  ret", "pops the return address:", "ip = the caller's next insn"], "#DB (TF)"),
        Box("kernel", "exc_debug -> handle_singlestep", [
            "arch_uprobe_post_xol:", "ret: no ip fixup needed", "(others: ip += vaddr - slot)",
            "clear TF, free the slot"], "iret"),
        Box("user", "back in the caller", ["two exceptions per hit", "(#BP, then #DB)"]),
    ]
    desc = (f"Single-stepping out of line on x86-64, kernel 6.18. The probed ret at {probe.vaddr:#x} begins with "
            f"int3; the #BP trap runs the consumers, then pre_ssout takes XOL slot 1 of the [uprobes] page at "
            f"{slot:#x} (slot 0 holds the return trampoline), where the kernel copied the original instruction "
            f"(c3 and the bytes after it), sets ip to the slot and sets the trap flag, and returns by iret. The CPU "
            "runs the copy of ret, which pops the return address, then raises #DB. exc_debug calls "
            "handle_singlestep and arch_uprobe_post_xol: ret needs no ip fix-up (other instructions get ip moved "
            "by the distance between the probe and the slot); TF is cleared, the slot freed, and iret returns to "
            "the caller. Two exceptions per hit.")
    seq = Sequence("Out of line: the XOL slot and one single step", desc, ["user", "kernel", "[uprobes]"], boxes)
    seq.draw()
    return seq.finish()


def uretprobe() -> Svg:
    """The return-address hijack and both trampolines (6.10's int3, 6.11+'s syscall one), with the stack."""
    tramp = uretprobe_trampoline(KERNELS["6.18"])
    proc = make_process("x86_64", "6.18")
    probe = uprobe_register(proc, "uprobe_target_ret", CountingConsumer())
    proc.call("producer_loop", 1, probe.vaddr)  # the first hit maps [uprobes]
    slot0 = f"{proc.mm.xol_area.slot_vaddr(0):x}"
    boxes = [
        Box("user", "call func (return-probed)", ["[rsp] = return address R"], "#BP trap"),
        Box("kernel", "entry hit: prepare_uretprobe", [
            "arch_uretprobe_hijack_return_addr:", "  keep R in a return instance",
            "  [rsp] = slot 0 of [uprobes]"], "iret"),
        Box("user", "func runs, then ret", ["ret pops slot 0, not R"], "ret"),
        Box("[uprobes]", "slot 0 (6.11+): trampoline", [
            line + ("  (6.18+)" if line.endswith("int3") else "")
            for line in code_lines(tramp, "x86_64", width=20)], "syscall"),
        Box("kernel", f"sys_uretprobe ({__NR_uretprobe})", [
            "restore r11, rcx, rax", "uprobe_handle_trampoline:", "  the consumers", "rax's slot <- R",
            "write r11, rcx back", "return the function's rax"], "sysret"),
        Box("[uprobes]", "pop r11; pop rcx; ret", ["ret pops rax's slot: R"]),
    ]
    desc = (f"A return probe on x86-64. At the entry int3, arch_uretprobe_hijack_return_addr keeps the return "
            f"address R in a return instance and writes the address of slot 0 of the [uprobes] page ({slot0}) "
            "over it on the stack. When the function returns it lands in the trampoline. Before 6.11 slot 0 is a "
            "single int3: a second exception, handled by handle_swbp and handle_trampoline (renamed "
            "uprobe_handle_trampoline in 6.11), leaving by iret. "
            "Since 6.11 slot 0 holds push rax; push rcx; push r11; mov rax, 335; syscall; pop r11; pop rcx; ret "
            "(6.18 adds an int3 after the ret). syscall overwrites rcx and r11, so the trampoline saves them with "
            "rax on the stack: r11 at sp, rcx at sp+8, rax at sp+16. sys_uretprobe restores them into the "
            "registers the consumers see, runs the return consumers through uprobe_handle_trampoline, writes r11 "
            "and rcx back and puts R into "
            "rax's slot, and returns the function's rax by sysret; pop r11, pop rcx and ret then land at R.")
    seq = Sequence("A return probe: the hijack and the trampoline", desc, ["user", "kernel", "[uprobes]"], boxes)
    svg = seq.draw()
    x, y, w = seq.below("user")
    y = stack_panel(svg, x, y, "stack at the syscall (6.11+)", [
        ("sp+24", "the caller's frame"), ("sp+16", "saved rax -> R"), ("sp+8", "saved rcx"), ("sp+0", "saved r11")],
        w, notes=("rax's slot becomes R",))
    y = stack_panel(svg, x, y + 12, "6.10 and 32-bit: slot 0 is", [(slot0, "cc  int3")], w,
                    notes=("#BP -> handle_swbp ->", "handle_trampoline; iret",
                           "(6.11 renamed it", "uprobe_handle_trampoline)"))
    # the syscalls' numbers under sys_uretprobe, left of its sysret arrow, not under the stacks: the picture ends
    # above a slide's page bar
    x, below_kernel, w = seq.below("kernel")
    for i, line in enumerate(("syscall numbers:", f"uretprobe {__NR_uretprobe},", f"uprobe {__NR_uprobe}")):
        svg.text(x, below_kernel + 16 + LINE * i, line, font=SANS, room=w / 2 - 12)
    return seq.finish(y)


def nop5_patch() -> Svg:
    """6.18's staged rewrite of a probed nop5 into ``call`` into [uprobes-trampoline], from the lab's patch log."""
    run = patch_run("6.18")
    stages = []
    for stage in run.stages:
        if stage.action == "start" and stages:
            break  # the rest is the unregister putting the nop back
        stages.append(stage)
    call = stages[-1].listing[0]
    tramp = int(call[2].split()[-1], 16)
    cell, row, x0, top = 50, 54, 12, 74
    cells_x = x0 + 70
    text_x = cells_x + 5 * cell + 12
    whats = [stage.what.replace(" (smp_text_poke_sync_each_cpu)", "").replace("optimise: ", "") for stage in stages]
    decodes = ["; ".join(text for _, _, text in stage.listing[:2]) + ("; ..." if len(stage.listing) > 2 else "")
               for stage in stages]
    text_w = max([text_width(t, SIZE, SANS) for t in whats] + [text_width(t, SIZE) for t in decodes])
    box = Box("[uprobes]", f"[uprobes-trampoline] at {tramp:x}", code_lines(uprobe_trampoline_code(), "x86_64",
                                                                            width=20))
    box.x, box.w = text_x + text_w + 44, box.width_needed()
    last_row = top + (len(stages) - 1) * row + 20  # the middle of the last stage's cells
    box.y = max(top, last_row + 24 - box.h)
    # the notes beside the trampoline, not under it: the picture as wide as a slide and short, above its page bar
    width, notes_x = SLIDE[0], box.x + box.w + 24
    notes = [*wrap(f"sys_uprobe ({__NR_uprobe}) runs the consumers and returns by sysret: no exception, no "
                   "emulation, no single step.", width - x0 - notes_x), "",
             *wrap("red: int3 (a CPU that enters traps and counts as a hit); green: the call", width - x0 - notes_x)]
    height = max(box.y + 16 + LINE * len(notes), box.y + box.h, top + len(stages) * row) + 12
    desc = (f"The nop5 optimisation on kernel 6.18, rewriting the probed nop5 at {run.site:#x}. The probe's int3 "
            "already holds byte 0 (cc 1f 44 00 00); every CPU is synced; bytes 1 to 4 get the call's offset "
            f"({stages[-1].site[1:].hex(' ')}) while byte 0 is still int3, so a CPU entering the site traps and "
            "is handled as a probe hit; sync; then byte 0 becomes e8, the call; sync. The call goes to "
            f"[uprobes-trampoline] at {tramp:#x}: push rcx; push r11; push rax; mov rax, {__NR_uprobe}; syscall; "
            "pop rax; pop r11; pop rcx; ret; int3. sys_uprobe runs the consumers and the program goes on after "
            "the call, with no exception.")
    title = "The nop5 -> call rewrite, stage by stage (6.18)"
    svg = Svg(width, height, title, desc)
    svg.text(x0, TITLE_Y, title, size=TITLE_SIZE, font=SANS, weight="bold", room=width - 2 * x0)
    svg.text(x0, 52, f"the site at {run.site:x}, byte 0 to byte 4, and what a CPU entering it decodes",
             font=SANS, room=width - 2 * x0)
    y = top
    for stage, what, decoded in zip(stages, whats, decodes):
        for i, byte in enumerate(stage.site):
            fill = "#fde0dd" if byte == 0xCC else ("#dff0d8" if stage.site[0] == 0xE8 else "#ffffff")
            svg.rect(cells_x + i * cell, y, cell - 4, 40, fill=fill, rx=3)
            svg.text(cells_x + i * cell + (cell - 4) / 2, y + 27, f"{byte:02x}", size=HEAD_SIZE, anchor="middle")
        svg.text(x0, y + 26, stage.action, size=HEAD_SIZE, font=SANS, weight="bold", room=cells_x - x0 - 6)
        svg.text(text_x, y + 16, what, font=SANS, room=text_w)
        svg.text(text_x, y + 37, decoded, room=text_w)
        y += row
    svg.box(box)
    svg.line([(text_x + text_w + 8, last_row), (box.x - 2, last_row)])
    svg.label((text_x + text_w + box.x) / 2, last_row - 8, "call")
    for i, line in enumerate(notes):
        svg.text(notes_x, box.y + 16 + LINE * i, line, font=SANS, room=width - notes_x - x0)
    return svg


def arm64_stp() -> Svg:
    """The unmerged STP simulation: BRK on ``stp x29, x30, [sp, #-16]!`` and the stores it does itself."""
    proc = Arm64Process(stp="simulate")
    proc.load(bench_program())
    sym = proc.program.symbols["uprobe_target_push"]
    word = int.from_bytes(proc.read(sym.addr, 4), "little")
    (_, _, stp_text), = disasm(word.to_bytes(4, "little"), "arm64", sym.addr)
    uprobe_register(proc, "uprobe_target_push", CountingConsumer())
    brk = int.from_bytes(proc.read(sym.addr, 4), "little")
    (_, _, brk_text), = disasm(brk.to_bytes(4, "little"), "arm64", sym.addr)
    boxes = [
        Box("user", "the probed function entry", [f"{sym.addr:x}: {brk:08x}  {brk_text}",
                                                  f"(was {word:08x}", f"  {stp_text})"], "BRK exception"),
        Box("kernel", "uprobe_brk_handler -> handle_swbp", ["consumers run (handler_chain)", "arch_uprobe_skip_sstep: simulate"]),
        Box("kernel", "simulate_stp_fp_lr_sp_64b (seed 001)", [
            "new_sp = sp - 16; v2 only:", "not 16-byte aligned: SIGSEGV;", "pin the stack page (v2) or",
            "copy_to_user (v1), then store:", "  [new_sp]     = x29 (fp)",
            "  [new_sp + 8] = x30 (lr)", f"sp = new_sp; pc = {sym.addr + 4:x}"], "eret"),
        Box("user", "the function goes on", [f"{sym.addr + 4:x}: mov x29, sp", "one exception per hit",
                                             "(upstream: step in XOL, two)"]),
    ]
    desc = (f"The arm64 STP simulation of seed 001 (never merged). The function entry stp x29, x30, [sp, #-0x10]! "
            f"(word {word:08x}) at {sym.addr:#x} is replaced by brk #5 ({brk:08x}). The BRK exception reaches "
            "handle_swbp, the consumers run, and instead of stepping the stp out of line the kernel simulates it: "
            "new sp is old sp minus 16; the seed (v2) checks its 16-byte alignment and pins the stack page (v1 "
            "calls copy_to_user, unchecked) and stores x29 at new sp, x30 at new sp plus 8; sp becomes new sp, pc "
            "moves 4 bytes on. The return by eret lands on mov x29, sp: one exception per hit, where upstream "
            "single-steps the stp in the XOL slot and takes two.")
    seq = Sequence("arm64: simulating stp x29, x30, [sp, #-16]!", desc, ["user", "kernel"], boxes)
    svg = seq.draw()
    # the stack beside the stores that build it, not under the lanes: wide and short, it ends above a slide's page bar
    head, notes = "the stack, before and after", ("higher addresses at the top",)
    rows = [("old sp", "caller's frame"), ("new sp+8", "x30 (lr)"), ("new sp", "x29 (fp)")]
    x, w = seq.width - MARGIN + LANE_GAP, stack_panel_width(head, rows, notes)
    bottom = stack_panel(svg, x, boxes[2].y, head, rows, w, notes)
    svg.width = x + w + MARGIN
    return seq.finish(bottom)


def redzone() -> Svg:
    """Where an optimised site's call and trampoline write, below a leaf function's rsp: 6.18's nop5 (inside the
    red zone) against 7.3's nop10 (below it), from the lab's own runs of the red-zone leaf."""
    clobbered = {k: check_transparency(leaf, k).redzone_changed
                 for k, leaf in (("6.18", "redzone_leaf_nop5"), ("7.3", "redzone_leaf_nop10"))}
    (_, lea, lea_text), = disasm(LEA_RSP_MINUS_0X80, "x86_64", 0)
    step = -int.from_bytes(lea[-1:], "little", signed=True)  # the lea's disp8: how far rsp moves first
    # the call's return address, then the trampoline's pushes (the nop5's and the nop10's trampolines push alike)
    pushed = ["return address"] + ["saved " + text.split()[1] for _, _, text in
                                   disasm(uprobe_trampoline_code(nop10=True), "x86_64", 0) if text.startswith("push")]
    writes = {"6.18": {-8 * (i + 1): what for i, what in enumerate(pushed)},
              "7.3": {-step - 8 * (i + 1): what for i, what in enumerate(pushed)}}
    rows = [0, *writes["6.18"], None, -REDZONE_SIZE, *writes["7.3"]]  # rsp, the red zone's ends, the words written
    def placed(kernel: str) -> str:
        return ", ".join(f"{what} at rsp{off:+#x}" for off, what in writes[kernel].items())
    desc = (f"A leaf function keeps a live value at rsp-8, in the red zone: the {REDZONE_SIZE} bytes below rsp that "
            "the System V ABI lets a leaf use without moving rsp. On 6.18 the optimised nop5 is a call, and the "
            f"call and the trampoline write {placed('6.18')}: inside the red zone, over the live value first (the "
            "lab's run of the leaf finds the words at "
            + ", ".join(f"rsp{o:+#x}" for o in sorted(clobbered['6.18'], reverse=True)) + " changed). On 7.3 the "
            f"optimised nop10 starts with {lea_text}, so they write {placed('7.3')}: below the red zone, and the "
            "trampoline's ret $0x80 moves rsp back; the lab's run finds no red-zone word changed.")
    title = "The red zone: where the optimised call writes (6.18 nop5, 7.3 nop10)"
    col_w, left, top, cell = 440, 220, 96, 30
    svg = Svg(left + 2 * col_w + 12, top + cell * len(rows) + 52, title, desc)
    svg.text(12, TITLE_Y, title, size=TITLE_SIZE, font=SANS, weight="bold", room=svg.width - 24)
    svg.text(12, 52, "the leaf's stack, higher addresses at the top; red: a red-zone word overwritten, green: "
             "written below it", font=SANS, room=svg.width - 24)
    for col, kernel in enumerate(("6.18", "7.3")):
        x = left + col * col_w
        head = "6.18: call (nop5)" if kernel == "6.18" else f"7.3: {lea_text}; call (nop10)"
        svg.text(x, top - 10, head, size=HEAD_SIZE, font=SANS, weight="bold", room=col_w - 12)
        for i, off in enumerate(rows):
            y = top + cell * i
            if off is None:
                svg.text(x + 9, y + 20, "...", room=col_w - 30)
                continue
            inside = -REDZONE_SIZE <= off < 0
            what = writes[kernel].get(off, "")
            if off == 0:
                what = "its caller's return address"
            elif off == -8 and not what:
                what = "the leaf's live value, kept"
            elif off == -8:
                what += " (the live value is gone)"
            if inside:  # red: overwritten; the red zone's own colour: left alone
                fill = "#fde0dd" if off in clobbered[kernel] else "#fff8d8"
            else:  # green: what the call and the trampoline write below the red zone
                fill = "#f3f3f3" if off == 0 else ("#dff0d8" if what else "#ffffff")
            svg.rect(x, y, col_w - 20, cell, fill=fill, rx=0)
            svg.text(x + 9, y + 21, what, room=col_w - 38)
    for i, off in enumerate(rows):
        if off is not None:
            svg.text(left - 8, top + cell * i + 21, f"rsp{off:+#x}" if off else "rsp", anchor="end")
    band = top + cell * rows.index(-8), top + cell * (rows.index(-REDZONE_SIZE) + 1)
    svg.rect(8, band[0], 12, band[1] - band[0], fill="#fff8d8", rx=0)
    middle = (band[0] + band[1]) / 2
    svg.text(26, middle - 3, "red zone", size=HEAD_SIZE, font=SANS, weight="bold", room=104)
    svg.text(26, middle + 18, f"({REDZONE_SIZE} bytes)", font=SANS, room=104)
    svg.text(12, top + cell * len(rows) + 34, "7.3's trampoline ends with ret $0x80: it pops the return address, "
             "then undoes the lea", font=SANS, room=svg.width - 24)
    return svg


DIAGRAMS = {"int3_hit": int3_hit, "xol_step": xol_step, "uretprobe_trampolines": uretprobe,
            "nop5_patch": nop5_patch, "redzone": redzone, "arm64_stp": arm64_stp}

ALT = {
    "int3_hit": "A uprobe hit on x86-64: the int3 traps into exc_int3, handle_swbp finds the probe, the consumers "
                "run, push rbp is emulated in the kernel and iret returns to the next instruction",
    "xol_step": "Out-of-line single-step: the int3 on ret traps, the kernel points ip at a copy of ret in XOL slot "
                "1 with the trap flag set, the copy runs, #DB comes back and post_xol returns to the caller",
    "uretprobe_trampolines": "A return probe: the entry hit swaps the return address for slot 0 of the uprobes page; the "
                             "syscall trampoline pushes rax, rcx, r11, calls uretprobe (335), pops r11 and rcx and "
                             "returns through rax's slot to the real return address",
    "nop5_patch": "The nop5 rewrite in stages: int3 on byte 0, sync, the call's offset in bytes 1 to 4, sync, e8 "
                  "on byte 0, sync; the call then enters the uprobes-trampoline page and the uprobe syscall",
    "redzone": "A leaf's stack below its rsp: on 6.18 the optimised nop5's call and the trampoline's pushes "
               "overwrite rsp-8 to rsp-32, inside the 128-byte red zone, the leaf's live value first; on 7.3 the "
               "nop10's lea moves rsp down 0x80 first, so they land below the red zone and the live value is kept",
    "arm64_stp": "arm64 STP simulation: brk #5 replaces the function entry stp of fp and lr; the kernel stores fp at the new "
                 "sp and lr above it, moves sp down 16 and pc on 4, and returns with one exception",
}


def write_all(out: Path = OUT) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, draw in DIAGRAMS.items():
        path = out / f"{name}.svg"
        path.write_text(draw().render())
        paths.append(path)
    return paths


if __name__ == "__main__":
    for p in write_all(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT):
        print(p)
