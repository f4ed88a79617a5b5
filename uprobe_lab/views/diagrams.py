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
from functools import lru_cache
from html import escape
from pathlib import Path

from matplotlib.font_manager import FontProperties
from matplotlib.textpath import TextToPath

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
LANE_FILL = {"user": "#e8f0fe", "kernel": "#fdeee4", "[uprobes]": "#eaf6ea", "cpu": "#f3f3f3"}
# A slide shows a diagram in a box of SLIDE px at 1280x720 (the lecture's paged.css), scaled to fit: one drawn
# within that box, with no text under SIZE, shows every word at 16 px or more, enough to read from the back.
SLIDE = (1184, 640)
SIZE, HEAD_SIZE, TITLE_SIZE = 16, 17, 21  # body lines and notes; a box's bold head; the title
LINE, HEAD, PAD = 21, 25, 9  # px per body line; px for a box's head line; a box's inner margin
LANE_GAP = 40  # the least room between two lanes (more when an arrow's label needs it)
MARGIN = 14  # left and right of the lanes
TITLE_Y, LANE_Y, TOP = 26, 58, 74  # the title's and the lane names' baselines; the first box's top


@lru_cache(maxsize=None)
def text_width(text: str, size: float, font: str = MONO, bold: bool = False) -> float:
    """How wide ``text`` is drawn, from the DejaVu font's own metrics (the first font each family names)."""
    prop = FontProperties(family=font.split(",")[0], size=size, weight="bold" if bold else "normal")
    return TextToPath().get_text_width_height_descent(text, prop, ismath=False)[0]


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
        return HEAD + PAD + LINE * len(self.lines)

    @property
    def bottom(self) -> float:
        return self.y + self.h

    def width_needed(self) -> float:
        return 2 * PAD + max([text_width(self.head, HEAD_SIZE, SANS, True)] +
                             [text_width(line, SIZE) for line in self.lines])


class Svg:
    def __init__(self, width: float, height: float, title: str, desc: str):
        self.width, self.height, self.title, self.desc = width, height, title, desc
        self.parts: list[str] = []
        self.fits: list[tuple[str, float]] = []  # (text, room): what must fit where it was put

    def text(self, x, y, s, size=SIZE, font=MONO, weight="normal", anchor="start", color="#222", room=None):
        self.parts.append(f'<text x="{x:.0f}" y="{y:.0f}" font-family="{font}" font-size="{size}" '
                          f'font-weight="{weight}" text-anchor="{anchor}" fill="{color}" style="white-space:pre">{escape(s)}</text>')
        if room is not None:
            self.fits.append((s, room - text_width(s, size, font, weight == "bold")))

    def rect(self, x, y, w, h, fill="#fff", stroke="#555", rx=6, dash=False):
        extra = ' stroke-dasharray="4 3"' if dash else ""
        self.parts.append(f'<rect x="{x:.0f}" y="{y:.0f}" width="{w:.0f}" height="{h:.0f}" rx="{rx}" '
                          f'fill="{fill}" stroke="{stroke}"{extra}/>')

    def line(self, points, color="#333"):
        """A line through ``points`` with an arrow head at the last."""
        path = " ".join(f"{x:.0f},{y:.0f}" for x, y in points)
        self.parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="1.8" '
                          'marker-end="url(#head)"/>')

    def label(self, x, y, s, anchor="middle"):
        """An arrow's label."""
        self.text(x, y, s, size=SIZE, font=SANS, weight="bold", anchor=anchor, color="#a33")

    def box(self, b: Box):
        self.rect(b.x, b.y, b.w, b.h, fill=LANE_FILL.get(b.lane, "#fff"))
        self.text(b.x + PAD, b.y + 19, b.head, size=HEAD_SIZE, font=SANS, weight="bold", room=b.w - 2 * PAD)
        for i, line in enumerate(b.lines):
            self.text(b.x + PAD, b.y + HEAD + 16 + LINE * i, line, room=b.w - 2 * PAD)

    def render(self) -> str:
        head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.width:.0f}" height="{self.height:.0f}" '
                f'viewBox="0 0 {self.width:.0f} {self.height:.0f}" role="img" aria-labelledby="title desc" '
                'xml:space="preserve">\n'
                f'<title id="title">{escape(self.title)}</title>\n<desc id="desc">{escape(self.desc)}</desc>\n'
                '<defs><marker id="head" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
                'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#333"/></marker></defs>\n'
                f'<rect width="100%" height="100%" fill="#ffffff"/>\n')
        return head + "\n".join(self.parts) + "\n</svg>\n"


class Sequence:
    """Lanes side by side (user, kernel, ...), each as wide as its widest box, and the boxes in the order things
    happen with an arrow from each to the next. A box in another lane than the one before it starts beside that
    one, a head line lower, not below it: the picture grows across, as a slide does, more than down.

    Draw the boxes with ``draw()``, put panels into the room ``below(lane)`` leaves, then ``finish(bottom)``."""

    def __init__(self, title: str, desc: str, lanes: list[str], boxes: list[Box]):
        self.lanes, self.boxes = lanes, boxes
        self.gaps = [LANE_GAP] * (len(lanes) - 1)  # each as wide as the labels drawn in it
        for a, b in zip(boxes, boxes[1:]):
            if a.arrow and a.lane != b.lane:
                i = self.label_gap(a, b)
                self.gaps[i] = max(self.gaps[i], text_width(a.arrow, SIZE, SANS, True) + 16)
        self.lane_x, self.lane_w, x = {}, {}, MARGIN
        for i, lane in enumerate(lanes):
            mine = [b.width_needed() for b in boxes if b.lane == lane]
            self.lane_x[lane], self.lane_w[lane] = x, max(mine + [text_width(lane, HEAD_SIZE, SANS, True) + 2 * PAD])
            x += self.lane_w[lane] + (self.gaps[i] if i < len(self.gaps) else 0)
        self.width = x + MARGIN
        bottoms = {lane: TOP - LINE for lane in lanes}  # how far down each lane is taken
        prev = None
        for b in boxes:
            b.x, b.w = self.lane_x[b.lane], self.lane_w[b.lane]
            if prev is None:
                y = TOP
            elif prev.lane == b.lane:
                y = prev.bottom + LINE + (LINE if prev.arrow else 0)
            else:
                y = prev.y + HEAD + 8
                between = lanes[min(lanes.index(prev.lane), lanes.index(b.lane)) + 1:
                                max(lanes.index(prev.lane), lanes.index(b.lane))]
                y = max([y] + [bottoms[lane] + 8 for lane in between])  # the arrow passes under their boxes
            b.y = max(y, bottoms[b.lane] + LINE)
            bottoms[b.lane] = b.bottom
            prev = b
        self.bottoms = bottoms
        self.svg = Svg(self.width, 0, title, desc)
        self.svg.text(MARGIN, TITLE_Y, title, size=TITLE_SIZE, font=SANS, weight="bold", room=self.width - 32)

    def label_gap(self, a: Box, b: Box) -> int:
        """The gap an arrow from a to another lane's b has its label in: the one beside b, on a's side."""
        i = self.lanes.index(b.lane)
        return i - 1 if i > self.lanes.index(a.lane) else i

    def below(self, lane: str) -> tuple[float, float, float]:
        """Where a panel may go in ``lane``: x, the y under its last box, and the lane's width."""
        return self.lane_x[lane], self.bottoms[lane] + LINE, self.lane_w[lane]

    def draw(self) -> Svg:
        svg = self.svg
        for a, b in zip(self.boxes, self.boxes[1:]):
            if a.lane == b.lane:
                x = a.x + a.w / 2
                svg.line([(x, a.bottom), (x, b.y - 2)])
                if a.arrow:
                    svg.label(x + 8, (a.bottom + b.y) / 2 + 6, a.arrow, anchor="start")
                continue
            right = b.x > a.x
            y = b.y + HEAD / 2 + 2
            end = b.x - 2 if right else b.x + b.w + 2
            if y <= a.bottom - 10:  # straight across from a's side
                svg.line([(a.x + a.w if right else a.x, y), (end, y)])
            else:  # down from a, then across
                svg.line([(a.x + a.w / 2, a.bottom), (a.x + a.w / 2, y), (end, y)])
            if a.arrow:
                gap = self.gaps[self.label_gap(a, b)]
                svg.label(end - gap / 2 if right else end + gap / 2, y - 7, a.arrow)
        for b in self.boxes:
            svg.box(b)
        return svg

    def finish(self, bottom: float = 0) -> Svg:
        """The lanes' outlines behind everything, down to ``bottom`` or the last box."""
        bottom = max([bottom] + [b.bottom for b in self.boxes]) + 10
        outlines = []
        for lane in self.lanes:
            x, w = self.lane_x[lane], self.lane_w[lane]
            outlines.append(f'<rect x="{x - 6:.0f}" y="36" width="{w + 12:.0f}" height="{bottom - 36:.0f}" rx="0" '
                            'fill="none" stroke="#bbb" stroke-dasharray="4 3"/>')
            outlines.append(f'<text x="{x + w / 2:.0f}" y="{LANE_Y}" font-family="{SANS}" font-size="{HEAD_SIZE}" '
                            f'font-weight="bold" text-anchor="middle" fill="#555" style="white-space:pre">'
                            f'{escape(lane)}</text>')
        self.svg.parts[1:1] = outlines  # after the title, under the boxes
        self.svg.height = bottom + 6
        return self.svg


def code_lines(code: bytes, arch: str, vaddr: int | None = None, width: int = 12) -> list[str]:
    """Bytes and instruction, one line each, as the lab's disassembler reads them; each line starts with its
    address unless ``vaddr`` is None (a box whose head gives the address)."""
    return [(f"{addr:x}: " if vaddr is not None else "") + f"{raw.hex(' '):<{width}} {text}"
            for addr, raw, text in disasm(code, arch, vaddr or 0)]


def stack_panel_width(head: str, rows: list[tuple[str, str]], notes: tuple[str, ...] = ()) -> float:
    """How wide :func:`stack_panel` needs to be for its words."""
    return max([text_width(head, SIZE, SANS, True)] + [text_width(note, SIZE, SANS) for note in notes] +
               [max(text_width(a, SIZE) for a, _ in rows) + 22 + text_width(what, SIZE) for _, what in rows])


def stack_panel(svg: Svg, x: float, y: float, head: str, rows: list[tuple[str, str]], w: float,
                notes: tuple[str, ...] = ()) -> float:
    """A stack drawn as cells, highest address at the top: (address label, content). Returns its bottom."""
    svg.text(x, y + 16, head, font=SANS, weight="bold", room=w)
    y += 26
    label_w = max(text_width(addr, SIZE) for addr, _ in rows) + 8
    for addr, what in rows:
        svg.rect(x + label_w, y, w - label_w, 28, fill="#fff8d8", rx=0)
        svg.text(x + label_w - 6, y + 20, addr, anchor="end")
        svg.text(x + label_w + 8, y + 20, what, room=w - label_w - 14)
        y += 28
    for note in notes:
        svg.text(x, y + 20, note, font=SANS, room=w)
        y += LINE
    return y + 8


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
            "bp_vaddr = ip - 1 (uprobe_get_swbp_addr)", "the return trampoline? -> chapter 02",
            "find_active_uprobe_rcu(bp_vaddr)", "none, but int3 there: SIGTRAP"]),
        Box("kernel", "handler_chain: the consumers", [
            "each consumer's ->handler(regs)", "a ->ret_handler too: prepare_uretprobe",
            "then arch_uprobe_optimize (nop5)"]),
        Box("kernel", "emulate or step out of line?", [
            f"{text}: arch_uprobe_skip_sstep emulates", "  store rbp at sp-8; sp -= 8; ip += 1",
            "ret, mov, ...: pre_ssout -> XOL slot"], "iret"),
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
                           "(6.11 renamed it", "uprobe_handle_trampoline)", "",
                           f"uretprobe {__NR_uretprobe}, uprobe {__NR_uprobe}"))
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
    box.x, box.w = text_x + text_w + 60, box.width_needed()
    last_row = top + (len(stages) - 1) * row + 20  # the middle of the last stage's cells
    box.y = max(top, last_row + 24 - box.h)
    notes = [f"sys_uprobe ({__NR_uprobe}) runs the consumers", "and returns by sysret: no exception,",
             "no emulation, no single step.", "",
             "red: int3 (a CPU that enters traps", "and counts as a hit); green: the call"]
    width = box.x + box.w + x0
    height = max(box.y + box.h + 16 + LINE * len(notes), top + len(stages) * row) + 12
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
        svg.text(box.x, box.y + box.h + 24 + LINE * i, line, font=SANS, room=width - box.x - x0)
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
