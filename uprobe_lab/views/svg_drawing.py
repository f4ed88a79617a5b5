"""The drawing the course's diagrams (:mod:`uprobe_lab.views.diagrams`) are made of: SVG text measured with the
DejaVu fonts' own metrics, boxes of a bold head and monospace lines, lanes of boxes in the order things happen,
and a stack drawn as cells. Each piece records what text must fit where it was put (``Svg.fits``)."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from html import escape

from matplotlib.font_manager import FontProperties
from matplotlib.textpath import TextToPath

SANS, MONO = "DejaVu Sans, Arial, sans-serif", "DejaVu Sans Mono, Menlo, monospace"
LANE_FILL = {"user": "#e8f0fe", "kernel": "#fdeee4", "[uprobes]": "#eaf6ea", "cpu": "#f3f3f3"}
# A slide shows a diagram in a box of SLIDE px at 1280x720, scaled to fit: the screen's width less the page's
# margins (the lecture's paged.css: 48 px each side; Voila's panel 10, the markdown 5) and paged.css's 640 px
# height. One drawn within that box, with no text under SIZE, shows every word at 16 px or more, enough to read
# from the back. The slide's heading and text take the top of the screen, so a diagram is drawn wide and short (at
# most half as tall as it is wide) to end above the page bar.
SLIDE = (1159, 640)
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


def wrap(text: str, width: float, size: float = SIZE, font: str = SANS) -> list[str]:
    """``text`` broken between words into lines each drawn within ``width`` (a longer word gets a line of its own)."""
    lines: list[str] = []
    for word in text.split():
        if lines and text_width(f"{lines[-1]} {word}", size, font) <= width:
            lines[-1] += f" {word}"
        else:
            lines.append(word)
    return lines


@dataclass
class Box:
    """A box in a lane: a bold head line and monospace body lines."""

    lane: str
    head: str
    lines: list[str] = field(default_factory=list)
    arrow: str = ""  # the label on the arrow that leads to the next box
    col: int = 0  # which of its lane's columns it is in: a lane of many boxes runs in two, across rather than down
    x: float = 0
    y: float = 0
    w: float = 0

    @property
    def h(self) -> float:
        return HEAD + PAD + LINE * len(self.lines)

    @property
    def bottom(self) -> float:
        return self.y + self.h

    @property
    def column(self) -> tuple[str, int]:
        return self.lane, self.col

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
    """Lanes side by side (user, kernel, ...), each in as many columns as its boxes name (``Box.col``), each
    column as wide as its widest box, and the boxes in the order things happen with an arrow from each to the
    next. A box in another column than the one before it starts beside that one, a head line lower, not below
    it: the picture grows across, as a slide does, more than down.

    Draw the boxes with ``draw()``, put panels into the room ``below(lane)`` leaves, then ``finish(bottom)``."""

    def __init__(self, title: str, desc: str, lanes: list[str], boxes: list[Box]):
        self.lanes, self.boxes = lanes, boxes
        self.columns = [(lane, col) for lane in lanes
                        for col in sorted({b.col for b in boxes if b.lane == lane} or {0})]
        self.gaps = [LANE_GAP] * (len(self.columns) - 1)  # each as wide as the labels drawn in it
        for a, b in zip(boxes, boxes[1:]):
            if a.arrow and a.column != b.column:
                i = self.label_gap(a, b)
                self.gaps[i] = max(self.gaps[i], text_width(a.arrow, SIZE, SANS, True) + 16)
        self.col_x, self.col_w, x = {}, {}, MARGIN
        for i, column in enumerate(self.columns):
            mine = [b.width_needed() for b in boxes if b.column == column]
            self.col_x[column] = x
            self.col_w[column] = max(mine + [text_width(column[0], HEAD_SIZE, SANS, True) + 2 * PAD])
            x += self.col_w[column] + (self.gaps[i] if i < len(self.gaps) else 0)
        self.width = x + MARGIN
        bottoms = {column: TOP - LINE for column in self.columns}  # how far down each column is taken
        prev = None
        for b in boxes:
            b.x, b.w = self.col_x[b.column], self.col_w[b.column]
            if prev is None:
                y = TOP
            elif prev.column == b.column:
                y = prev.bottom + LINE + (LINE if prev.arrow else 0)
            else:
                y = prev.y + HEAD + 8
                i, j = sorted((self.columns.index(prev.column), self.columns.index(b.column)))
                y = max([y] + [bottoms[c] + 8 for c in self.columns[i + 1:j]])  # the arrow passes under their boxes
            b.y = max(y, bottoms[b.column] + LINE)
            bottoms[b.column] = b.bottom
            prev = b
        self.bottoms = bottoms
        self.svg = Svg(self.width, 0, title, desc)
        self.svg.text(MARGIN, TITLE_Y, title, size=TITLE_SIZE, font=SANS, weight="bold", room=self.width - 32)

    def label_gap(self, a: Box, b: Box) -> int:
        """The gap an arrow from a to another column's b has its label in: the one beside b, on a's side."""
        i = self.columns.index(b.column)
        return i - 1 if i > self.columns.index(a.column) else i

    def below(self, lane: str) -> tuple[float, float, float]:
        """Where a panel may go in ``lane`` (its first column): x, the y under its last box, and the width."""
        return self.col_x[lane, 0], self.bottoms[lane, 0] + LINE, self.col_w[lane, 0]

    def draw(self) -> Svg:
        svg = self.svg
        for a, b in zip(self.boxes, self.boxes[1:]):
            if a.column == b.column:
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
        """The lanes' outlines behind everything (one around all of a lane's columns), down to ``bottom`` or the
        last box."""
        bottom = max([bottom] + [b.bottom for b in self.boxes]) + 10
        outlines = []
        for lane in self.lanes:
            mine = [c for c in self.columns if c[0] == lane]
            x, right = self.col_x[mine[0]], self.col_x[mine[-1]] + self.col_w[mine[-1]]
            outlines.append(f'<rect x="{x - 6:.0f}" y="36" width="{right - x + 12:.0f}" height="{bottom - 36:.0f}" '
                            'rx="0" fill="none" stroke="#bbb" stroke-dasharray="4 3"/>')
            outlines.append(f'<text x="{(x + right) / 2:.0f}" y="{LANE_Y}" font-family="{SANS}" '
                            f'font-size="{HEAD_SIZE}" font-weight="bold" text-anchor="middle" fill="#555" '
                            f'style="white-space:pre">{escape(lane)}</text>')
        self.svg.parts[1:1] = outlines  # after the title, under the boxes
        self.svg.height = bottom + 6
        return self.svg


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
