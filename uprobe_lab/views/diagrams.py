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
from dataclasses import dataclass, field
from html import escape
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

OUT = Path(__file__).resolve().parents[2] / "notebooks" / "diagrams"
SANS, MONO = "DejaVu Sans, Arial, sans-serif", "DejaVu Sans Mono, Menlo, monospace"
CHAR_W = {SANS: 0.58, MONO: 0.61}  # average advance per font size unit, for fitting text in boxes
LANE_FILL = {"user": "#e8f0fe", "kernel": "#fdeee4", "[uprobes]": "#eaf6ea", "cpu": "#f3f3f3"}
LINE, HEAD = 16, 20  # px per text line, px for a box's head line


def text_width(text: str, size: float, font: str = MONO) -> float:
    return len(text) * size * CHAR_W[font]


@dataclass
class Box:
    """A box in a lane: a bold head line and monospace body lines."""

    lane: str
    head: str
    lines: list[str] = field(default_factory=list)
    arrow: str = ""  # the label on the arrow that leads to the next box
    x: float = 0
    y: float = 0
    w: float = 0

    @property
    def h(self) -> float:
        return HEAD + 10 + LINE * len(self.lines)


class Svg:
    def __init__(self, width: float, height: float, title: str, desc: str):
        self.width, self.height, self.title, self.desc = width, height, title, desc
        self.parts: list[str] = []
        self.fits: list[tuple[str, float]] = []  # (text, room): what must fit where it was put

    def text(self, x, y, s, size=12, font=MONO, weight="normal", anchor="start", color="#222", room=None):
        self.parts.append(f'<text x="{x:.0f}" y="{y:.0f}" font-family="{font}" font-size="{size}" '
                          f'font-weight="{weight}" text-anchor="{anchor}" fill="{color}" style="white-space:pre">{escape(s)}</text>')
        if room is not None:
            self.fits.append((s, room - text_width(s, size, font)))

    def rect(self, x, y, w, h, fill="#fff", stroke="#555", rx=6, dash=False):
        extra = ' stroke-dasharray="4 3"' if dash else ""
        self.parts.append(f'<rect x="{x:.0f}" y="{y:.0f}" width="{w:.0f}" height="{h:.0f}" rx="{rx}" '
                          f'fill="{fill}" stroke="{stroke}"{extra}/>')

    def arrow(self, x1, y1, x2, y2, label="", color="#333"):
        self.parts.append(f'<line x1="{x1:.0f}" y1="{y1:.0f}" x2="{x2:.0f}" y2="{y2:.0f}" stroke="{color}" '
                          f'stroke-width="1.6" marker-end="url(#head)"/>')
        if label:
            self.text((x1 + x2) / 2 + 6, (y1 + y2) / 2 + 4, label, size=11, font=SANS, weight="bold", color="#a33")

    def box(self, b: Box):
        self.rect(b.x, b.y, b.w, b.h, fill=LANE_FILL.get(b.lane, "#fff"))
        self.text(b.x + 8, b.y + 17, b.head, size=12, font=SANS, weight="bold", room=b.w - 16)
        for i, line in enumerate(b.lines):
            self.text(b.x + 8, b.y + HEAD + 14 + LINE * i, line, size=12, room=b.w - 16)

    def render(self) -> str:
        head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.width:.0f}" height="{self.height:.0f}" '
                f'viewBox="0 0 {self.width:.0f} {self.height:.0f}" role="img" aria-labelledby="title desc" '
                'xml:space="preserve">\n'
                f'<title id="title">{escape(self.title)}</title>\n<desc id="desc">{escape(self.desc)}</desc>\n'
                '<defs><marker id="head" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
                'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#333"/></marker></defs>\n'
                f'<rect width="100%" height="100%" fill="#ffffff"/>\n')
        return head + "\n".join(self.parts) + "\n</svg>\n"


def sequence(title: str, desc: str, lanes: list[str], boxes: list[Box], lane_w: float = 330,
             side_w: float = 0) -> tuple[Svg, float]:
    """Lanes side by side (user, kernel, ...), the boxes top to bottom in the order things happen, an arrow from
    each box to the next. Returns the drawing and the x where a side panel of ``side_w`` may go."""
    gap, top = 26, 64
    y = top
    for b in boxes:
        b.x, b.w, b.y = 16 + lanes.index(b.lane) * lane_w, lane_w - 24, y
        y += b.h + gap + (14 if b.arrow else 0)
    width = 16 + lane_w * len(lanes) + side_w
    svg = Svg(width, y + 4, title, desc)
    svg.text(16, 24, title, size=16, font=SANS, weight="bold", room=width - 32)
    for i, lane in enumerate(lanes):
        x = 16 + i * lane_w
        svg.rect(x - 6, 34, lane_w - 12, y - 34, fill="none", stroke="#bbb", rx=0, dash=True)
        svg.text(x + (lane_w - 24) / 2, 52, lane, size=13, font=SANS, weight="bold", anchor="middle", color="#555")
    for a, b in zip(boxes, boxes[1:]):
        x1 = a.x + a.w / 2
        x2 = b.x + b.w / 2
        if a.lane != b.lane:  # into the near edge of a box in another lane
            x2 = b.x + 24 if b.x > a.x else b.x + b.w - 24
        svg.arrow(x1, a.y + a.h, x2, b.y - 2, a.arrow)
    for b in boxes:
        svg.box(b)
    return svg, 16 + lane_w * len(lanes)


def code_lines(code: bytes, arch: str, vaddr: int, width: int = 12) -> list[str]:
    """Bytes and instruction, one line each, as the lab's disassembler reads them."""
    def decimal(text: str) -> str:  # a syscall number reads as the kernel's tables write it
        return f"{text} ({int(text.split(', ')[1], 16)})" if text.startswith("mov rax, 0x") else text
    return [f"{addr:x}: {raw.hex(' '):<{width}} {decimal(text)}" for addr, raw, text in disasm(code, arch, vaddr)]


def stack_panel(svg: Svg, x: float, y: float, head: str, rows: list[tuple[str, str]], w: float = 300,
                note: str = "") -> float:
    """A stack drawn as cells, highest address at the top: (address label, content). Returns its bottom."""
    svg.text(x, y, head, size=12, font=SANS, weight="bold", room=w)
    y += 8
    for addr, what in rows:
        svg.rect(x + 92, y, w - 92, 24, fill="#fff8d8", rx=0)
        svg.text(x + 86, y + 16, addr, size=11, anchor="end")
        svg.text(x + 100, y + 16, what, size=12, room=w - 108)
        y += 24
    if note:
        svg.text(x, y + 18, note, size=11, font=SANS, room=w)
        y += 18
    return y + 10


# --- the mechanisms -------------------------------------------------------------------------------------


def int3_hit() -> Svg:
    """The x86-64 breakpoint path, for the bench's probe on ``push %rbp`` (emulated) on 6.18."""
    proc = make_process("x86_64", "6.18")
    probe = uprobe_register(proc, "uprobe_target_push", CountingConsumer())
    vaddr, orig = probe.vaddr, probe.insn[:1]
    (_, _, text), = disasm(orig, "x86_64", vaddr)
    boxes = [
        Box("user", "the probed instruction", [f"{vaddr:x}: cc  int3", f"(was {orig.hex()}  {text})"], "#BP trap"),
        Box("kernel", "exc_int3", ["save pt_regs (kernel_entry)", "uprobe_pre_sstep_notifier", "-> handle_swbp"]),
        Box("kernel", "handle_swbp: which probe?", [
            "bp_vaddr = ip - 1 (uprobe_get_swbp_addr)", "the return trampoline? -> chapter 02",
            "find_active_uprobe(bp_vaddr)", "none, but int3 there: SIGTRAP"]),
        Box("kernel", "handler_chain: the consumers", [
            "each consumer's ->handler(regs)", "a ->ret_handler too: prepare_uretprobe",
            "then arch_uprobe_optimize (nop5)"]),
        Box("kernel", "emulate or step out of line?", [
            f"{text}: arch_uprobe_skip_sstep emulates", "  store rbp at sp-8; sp -= 8; ip += 1",
            "ret, mov, ...: pre_ssout -> XOL slot", "  (next diagram)"], "iret"),
        Box("user", "the program goes on", [f"{vaddr + 1:x}: mov rbp, rsp", "one exception per hit"]),
    ]
    desc = (f"A uprobe hit on x86-64, kernel 6.18. The probed push rbp at {vaddr:#x} now begins with int3 (0xcc); "
            "the CPU traps (#BP) into exc_int3, which saves pt_regs and calls handle_swbp. handle_swbp computes "
            "the breakpoint address as ip minus 1, checks for the return trampoline, finds the uprobe (an int3 "
            "with no uprobe becomes SIGTRAP), runs each consumer's handler in handler_chain (preparing a return "
            "probe if one has a ret_handler), then either emulates the instruction in the kernel (push rbp: store "
            "rbp below sp, sp minus 8, ip plus 1) or sets up an out-of-line single step. It returns to user "
            "space by iret at the next instruction: one exception per hit.")
    svg, _ = sequence("A breakpoint hit: trap, lookup, consumers, emulate, return", desc, ["user", "kernel"], boxes,
                      lane_w=380)
    return svg


def xol_step() -> Svg:
    """The bench's probe on ``ret``, stepped out of line in slot 1 of [uprobes] on 6.18."""
    proc = make_process("x86_64", "6.18")
    probe = uprobe_register(proc, "uprobe_target_ret", CountingConsumer())
    proc.call("producer_loop", 1, probe.vaddr)
    area = proc.mm.xol_area
    slot = area.slot_vaddr(1)
    copy = proc.read(slot, 16)
    boxes = [
        Box("user", "the probed ret", [f"{probe.vaddr:x}: cc  int3 (was c3 ret)"], "#BP trap"),
        Box("kernel", "handle_swbp -> pre_ssout", [
            "consumers run (handler_chain)", "ret cannot be emulated:",
            "xol_get_insn_slot: slot 1", f"  {slot:x}: {copy[:4].hex(' ')} ...",
            "arch_uprobe_pre_xol:", f"  ip = {slot:x}; set TF"], "iret"),
        Box("[uprobes]", "the copy runs, one instruction", [
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
    svg, _ = sequence("Out of line: the XOL slot and one single step", desc, ["user", "kernel", "[uprobes]"], boxes,
                      lane_w=300)
    return svg


def uretprobe() -> Svg:
    """The return-address hijack and both trampolines (6.10's int3, 6.11+'s syscall one), with the stack."""
    tramp = uretprobe_trampoline(KERNELS["6.18"])
    proc = make_process("x86_64", "6.18")
    probe = uprobe_register(proc, "uprobe_target_ret", CountingConsumer())
    proc.call("producer_loop", 1, probe.vaddr)  # the first hit maps [uprobes]
    slot0 = f"{proc.mm.xol_area.slot_vaddr(0):x}"
    code = code_lines(tramp, "x86_64", 0, width=20)
    boxes = [
        Box("user", "call func (probed, with a return probe)", ["[rsp] = the return address R"], "#BP trap"),
        Box("kernel", "entry hit: prepare_uretprobe", [
            "arch_uretprobe_hijack_return_addr:", "  keep R in a return instance",
            "  [rsp] = slot 0 of [uprobes]"], "iret"),
        Box("user", "func runs, then ret", ["pops slot 0's address, not R"], "ret"),
        Box("[uprobes]", "slot 0 (6.11+): the syscall trampoline",
            [line.split(": ", 1)[1] for line in code], "syscall"),
        Box("kernel", "sys_uretprobe (335)", [
            "r11, rcx, rax <- the three saved slots", "return consumers (handle_trampoline)",
            "rax's slot <- R; r11, rcx written back", "return value: the function's rax"], "sysret"),
        Box("[uprobes]", "pop r11; pop rcx; ret", ["ret pops rax's slot: back at R"]),
    ]
    desc = (f"A return probe on x86-64. At the entry int3, arch_uretprobe_hijack_return_addr keeps the return "
            f"address R in a return instance and writes the address of slot 0 of the [uprobes] page ({slot0}) "
            "over it on the stack. When the function returns it lands in the trampoline. Before 6.11 slot 0 is a "
            "single int3: a second exception, handled by handle_swbp and uprobe_handle_trampoline, leaving by iret. "
            "Since 6.11 slot 0 holds push rax; push rcx; push r11; mov rax, 335; syscall; pop r11; pop rcx; ret "
            "(6.18 adds an int3 after the ret). syscall overwrites rcx and r11, so the trampoline saves them with "
            "rax on the stack: r11 at sp, rcx at sp+8, rax at sp+16. sys_uretprobe restores them into the "
            "registers the consumers see, runs the return consumers, writes r11 and rcx back and puts R into "
            "rax's slot, and returns the function's rax by sysret; pop r11, pop rcx and ret then land at R.")
    svg, x = sequence("A return probe: the hijack and the trampoline", desc, ["user", "kernel", "[uprobes]"],
                      boxes, lane_w=360, side_w=330)
    y = 74
    y = stack_panel(svg, x + 10, y, "stack at the syscall (6.11+)", [
        ("sp+24", "the caller's frame"), ("sp+16", "saved rax -> R"), ("sp+8", "saved rcx"), ("sp+0", "saved r11")],
        note="sys_uretprobe: rax's slot becomes R")
    y = stack_panel(svg, x + 10, y + 20, "6.10, and a 32-bit task: slot 0 is", [(slot0, "cc  int3")],
                    note="#BP -> handle_swbp -> handle_trampoline; iret")
    svg.text(x + 10, y + 20, f"syscall numbers: uretprobe {__NR_uretprobe}, uprobe {__NR_uprobe}", size=11,
             font=SANS, room=310)
    return svg


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
    cell, x0, top = 46, 20, 70
    width = 900
    rows = len(stages)
    height = top + rows * 58 + 270
    desc = (f"The nop5 optimisation on kernel 6.18, rewriting the probed nop5 at {run.site:#x}. The probe's int3 "
            "already holds byte 0 (cc 1f 44 00 00); every CPU is synced; bytes 1 to 4 get the call's offset "
            f"({stages[-1].site[1:].hex(' ')}) while byte 0 is still int3, so a CPU entering the site traps and "
            "is handled as a probe hit; sync; then byte 0 becomes e8, the call; sync. The call goes to "
            f"[uprobes-trampoline] at {tramp:#x}: push rcx; push r11; push rax; mov rax, {__NR_uprobe}; syscall; "
            "pop rax; pop r11; pop rcx; ret; int3. sys_uprobe runs the consumers and the program goes on after "
            "the call, with no exception.")
    svg = Svg(width, height, "The nop5 -> call rewrite, stage by stage (6.18)", desc)
    svg.text(16, 24, "The nop5 -> call rewrite, stage by stage (6.18)", size=16, font=SANS, weight="bold", room=860)
    svg.text(16, 46, f"the site at {run.site:x}, byte 0 to byte 4; what a CPU entering it now decodes", size=12,
             font=SANS, room=860)
    y = top
    for stage in stages:
        for i, byte in enumerate(stage.site):
            fill = "#fde0dd" if byte == 0xCC else ("#dff0d8" if stage.site[0] == 0xE8 else "#ffffff")
            svg.rect(x0 + 150 + i * cell, y, cell - 4, 34, fill=fill, rx=3)
            svg.text(x0 + 150 + i * cell + (cell - 4) / 2, y + 22, f"{byte:02x}", size=14, anchor="middle")
        svg.text(x0, y + 22, stage.action, size=12, font=SANS, weight="bold", room=140)
        what = stage.what.replace(" (smp_text_poke_sync_each_cpu)", "")
        svg.text(x0 + 150 + 5 * cell + 12, y + 14, what, size=11, font=SANS, room=width - 400)
        decoded = "; ".join(text for _, _, text in stage.listing[:2]) + ("; ..." if len(stage.listing) > 2 else "")
        svg.text(x0 + 150 + 5 * cell + 12, y + 30, decoded, size=11, room=width - 420)
        y += 58
    box = Box("[uprobes]", f"[uprobes-trampoline] at {tramp:x}: the call lands here",
              code_lines(uprobe_trampoline_code(), "x86_64", tramp, width=20))
    box.x, box.y, box.w = x0 + 150, y, 470
    svg.box(box)
    svg.arrow(x0 + 150 + cell * 0.5, y - 24, x0 + 150 + cell * 0.5, y - 2, "call")
    note_x = box.x + box.w + 20
    for i, line in enumerate(["sys_uprobe runs the consumers", "and returns by sysret:",
                              "no exception, no emulation,", "no single step.", "",
                              "red: int3 (a CPU that enters", "traps and counts as a hit);",
                              "green: the finished call"]):
        svg.text(note_x, y + 20 + 16 * i, line, size=12, font=SANS, room=width - note_x - 10)
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
                                                  f"(was {word:08x}  {stp_text})"], "BRK exception"),
        Box("kernel", "uprobe_brk_handler -> handle_swbp", ["consumers run (handler_chain)",
                                                            "arch_uprobe_skip_sstep: simulate"]),
        Box("kernel", "simulate_stp_fp_lr_sp_64b (seed 001)", [
            "new_sp = sp - 16 (16-byte aligned?)", "pin the stack page (v2) or", "copy_to_user (v1), then store:",
            "  [new_sp]     = x29 (fp)", "  [new_sp + 8] = x30 (lr)", f"sp = new_sp; pc = {sym.addr + 4:x}"], "eret"),
        Box("user", "the function goes on", [f"{sym.addr + 4:x}: mov x29, sp", "one exception per hit",
                                             "(upstream: step in XOL, two)"]),
    ]
    desc = (f"The arm64 STP simulation of seed 001 (never merged). The function entry stp x29, x30, [sp, #-0x10]! "
            f"(word {word:08x}) at {sym.addr:#x} is replaced by brk #5 ({brk:08x}). The BRK exception reaches "
            "handle_swbp, the consumers run, and instead of stepping the stp out of line the kernel simulates it: "
            "new sp is old sp minus 16, checked for 16-byte alignment; the seed pins the stack page (v1 used "
            "copy_to_user) and stores x29 at the new sp and x30 at new sp plus 8; sp becomes the new sp and pc "
            "moves 4 bytes on. The return by eret lands on mov x29, sp: one exception per hit, where upstream "
            "single-steps the stp in the XOL slot and takes two.")
    svg, x = sequence("arm64: simulating stp x29, x30, [sp, #-16]!", desc, ["user", "kernel"], boxes, lane_w=380,
                      side_w=330)
    stack_panel(svg, x + 10, 74, "the stack, before and after", [
        ("old sp", "the caller's frame"), ("new sp+8", "x30 (lr)"), ("new sp", "x29 (fp)")],
        note="higher addresses at the top")
    return svg


def redzone() -> Svg:
    """Where an optimised site's call and trampoline write, below a leaf function's rsp: 6.18's nop5 (inside the
    red zone) against 7.2's nop10 (below it), from the lab's own runs of the red-zone leaf."""
    clobbered = {k: check_transparency(leaf, k).redzone_changed
                 for k, leaf in (("6.18", "redzone_leaf_nop5"), ("7.2", "redzone_leaf_nop10"))}
    (_, lea, lea_text), = disasm(LEA_RSP_MINUS_0X80, "x86_64", 0)
    step = -int.from_bytes(lea[-1:], "little", signed=True)  # the lea's disp8: how far rsp moves first
    # the call's return address, then the trampoline's pushes (the nop5's and the nop10's trampolines push alike)
    pushed = ["return address"] + ["saved " + text.split()[1] for _, _, text in
                                   disasm(uprobe_trampoline_code(nop10=True), "x86_64", 0) if text.startswith("push")]
    writes = {"6.18": {-8 * (i + 1): what for i, what in enumerate(pushed)},
              "7.2": {-step - 8 * (i + 1): what for i, what in enumerate(pushed)}}
    rows = [0, *writes["6.18"], None, -REDZONE_SIZE, *writes["7.2"]]  # rsp, the red zone's ends, the words written
    def placed(kernel: str) -> str:
        return ", ".join(f"{what} at rsp{off:+#x}" for off, what in writes[kernel].items())
    desc = (f"A leaf function keeps a live value at rsp-8, in the red zone: the {REDZONE_SIZE} bytes below rsp that "
            "the System V ABI lets a leaf use without moving rsp. On 6.18 the optimised nop5 is a call, and the "
            f"call and the trampoline write {placed('6.18')}: inside the red zone, over the live value first (the "
            "lab's run of the leaf finds the words at "
            + ", ".join(f"rsp{o:+#x}" for o in sorted(clobbered['6.18'], reverse=True)) + " changed). On 7.2 the "
            f"optimised nop10 starts with {lea_text}, so they write {placed('7.2')}: below the red zone, and the "
            "trampoline's ret $0x80 moves rsp back; the lab's run finds no red-zone word changed.")
    title = "The red zone: where the optimised call writes (6.18 nop5, 7.2 nop10)"
    col_w, left, top = 330, 190, 78
    svg = Svg(left + 2 * col_w + 40, top + 24 * len(rows) + 46, title, desc)
    svg.text(16, 24, title, size=16, font=SANS, weight="bold", room=svg.width - 32)
    svg.text(16, 46, "the leaf's stack, higher addresses at the top; red: a red-zone word overwritten, green: "
             "written below it", size=12, font=SANS, room=svg.width - 32)
    for col, kernel in enumerate(("6.18", "7.2")):
        x = left + col * col_w
        head = "6.18: call (the nop5)" if kernel == "6.18" else f"7.2: {lea_text}; call (the nop10)"
        svg.text(x, top - 8, head, size=12, font=SANS, weight="bold", room=col_w - 10)
        for i, off in enumerate(rows):
            y = top + 24 * i
            if off is None:
                svg.text(x + 8, y + 16, "...", size=12, room=col_w - 20)
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
            svg.rect(x, y, col_w - 20, 24, fill=fill, rx=0)
            svg.text(x + 8, y + 16, what, size=12, room=col_w - 36)
    for i, off in enumerate(rows):
        if off is not None:
            svg.text(left - 8, top + 24 * i + 16, f"rsp{off:+#x}" if off else "rsp", size=11, anchor="end")
    band = top + 24 * rows.index(-8), top + 24 * (rows.index(-REDZONE_SIZE) + 1)
    svg.rect(6, band[0], 12, band[1] - band[0], fill="#fff8d8", rx=0)
    middle = (band[0] + band[1]) / 2
    svg.text(24, middle - 2, "red zone", size=12, font=SANS, weight="bold", room=96)
    svg.text(24, middle + 14, f"({REDZONE_SIZE} bytes)", size=11, font=SANS, room=96)
    svg.text(16, top + 24 * len(rows) + 30, "7.2's trampoline ends with ret $0x80: it pops the return address, "
             "then undoes the lea", size=12, font=SANS, room=svg.width - 32)
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
               "overwrite rsp-8 to rsp-32, inside the 128-byte red zone, the leaf's live value first; on 7.2 the "
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
