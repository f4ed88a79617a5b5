"""The course's diagrams: each one is a file beside the chapters, valid SVG with a title and a description for
a screen reader, shown by a chapter with alt text, drawn from what the lab does (the file is what
``uprobe_lab.views.diagrams`` writes now), and with every line of text inside its box."""
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from uprobe_lab.views import diagrams, svg_drawing

REPO = Path(__file__).resolve().parents[1]
SVG = "{http://www.w3.org/2000/svg}"


def notebook_images() -> dict[str, str]:
    """diagram file name -> the alt text a chapter gives it."""
    found = {}
    for path in sorted((REPO / "notebooks").glob("[0-9][0-9]*_*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] == "markdown":
                for alt, src in re.findall(r"!\[([^\]]*)\]\(diagrams/([\w.-]+\.svg)\)", "".join(cell["source"])):
                    found[src] = alt
    return found


@pytest.mark.parametrize("name", list(diagrams.DIAGRAMS))
def test_diagram_is_a_titled_svg_shown_with_alt_text(name):
    path = diagrams.OUT / f"{name}.svg"
    root = ET.parse(path).getroot()
    assert root.tag == f"{SVG}svg" and root.get("role") == "img"
    assert root.find(f"{SVG}title").text.strip() and len(root.find(f"{SVG}desc").text) > 200
    assert notebook_images().get(path.name) == diagrams.ALT[name]


@pytest.mark.parametrize("name", list(diagrams.DIAGRAMS))
def test_diagram_file_is_what_the_lab_draws_and_its_text_fits(name):
    drawing = diagrams.DIAGRAMS[name]()
    assert (diagrams.OUT / f"{name}.svg").read_text() == drawing.render(), "run python -m uprobe_lab.views.diagrams"
    assert [text for text, room in drawing.fits if room < 0] == []


@pytest.mark.parametrize("name", list(diagrams.DIAGRAMS))
def test_diagram_is_readable_on_a_slide(name):
    """A slide scales a diagram into svg_drawing.SLIDE px (at 1280x720); its smallest text must come out at 16 px or
    more there, and no text may be smaller than that in the drawing itself (a reader's JupyterLab shows it at its
    drawn size, or smaller in a narrow window)."""
    root = ET.parse(diagrams.OUT / f"{name}.svg").getroot()
    width, height = float(root.get("width")), float(root.get("height"))
    scale = min(svg_drawing.SLIDE[0] / width, svg_drawing.SLIDE[1] / height)
    sizes = [float(t.get("font-size")) for t in root.iter(f"{SVG}text") if (t.text or "").strip()]
    assert min(sizes) >= svg_drawing.SIZE, f"{name}: text of {min(sizes)} px"
    assert min(sizes) * scale >= 16, f"{name}: {width:.0f}x{height:.0f} is scaled by {scale:.2f} on a slide: " \
                                     f"its {min(sizes)} px text shows at {min(sizes) * scale:.1f} px"



@pytest.mark.parametrize("name", list(diagrams.DIAGRAMS))
def test_diagram_is_wide_and_short(name):
    """A slide shows a diagram under its heading and a line or two of text, and above the page bar: one drawn at
    most half as tall as it is wide ends there (tests/browser/test_slides_fit.py measures it on the slides)."""
    root = ET.parse(diagrams.OUT / f"{name}.svg").getroot()
    width, height = float(root.get("width")), float(root.get("height"))
    assert height <= width / 2, f"{name}: {width:.0f}x{height:.0f}"

def test_the_trampolines_and_the_patch_show_the_kernels_bytes():
    tramp = diagrams.uretprobe().render()
    steps = re.findall(r">[0-9a-f]{2}(?: [0-9a-f]{2})* +(push rax|push rcx|push r11|mov rax, 0x14f|syscall|pop r11|pop rcx|ret)<", tramp)
    assert steps == ["push rax", "push rcx", "push r11", "mov rax, 0x14f", "syscall", "pop r11", "pop rcx", "ret"]
    assert "48 c7 c0 4f 01 00 00 mov rax, 0x14f" in tramp and "sys_uretprobe (335)" in tramp  # 0x14f is 335
    # the listing is 6.18's: its trailing int3 (354492a0e1bc) is marked as 6.18's, not 6.11's
    assert re.search(r">cc +int3  \(6\.18\+\)<", tramp)
    # sys_uretprobe (6.11+) calls uprobe_handle_trampoline; 6.10's int3 path calls it handle_trampoline
    assert ">uprobe_handle_trampoline:<" in tramp and ">handle_trampoline; iret<" in tramp
    patch = diagrams.nop5_patch().render()
    cells = re.findall(r'text-anchor="middle"[^>]*>([0-9a-f]{2})<', patch)  # the site's byte cells
    rows = [" ".join(cells[i:i + 5]) for i in range(0, len(cells), 5)]
    assert rows[0] == "cc 1f 44 00 00"  # the probe's int3 on byte 0 of the nop5
    assert rows[2].startswith("cc ") and rows[2][3:] == rows[-1][3:] != rows[0][3:]  # the call's tail first
    assert rows[-1].startswith("e8 ")  # byte 0 last


def test_the_int3_hit_saves_pt_regs_in_x86s_entry_code():
    svg = diagrams.int3_hit().render()
    assert "kernel_entry" not in svg and "PUSH_AND_CLEAR_REGS" in svg  # kernel_entry is arm64's macro


def test_the_red_zone_diagram_marks_the_words_the_call_writes():
    # 6.18: call pushes the return address at rsp-8, the trampoline rcx, r11, rax below it: four red-zone words
    # overwritten; 7.3: lea -0x80(%rsp) first, so the same four words land at rsp-0x88..-0xa0, none in the red zone
    svg = diagrams.redzone().render()
    assert svg.count('fill="#fde0dd"') == 4 and svg.count('fill="#dff0d8"') == 4
    written = re.findall(r">(return address[^<]*|saved r\w+)<", svg)
    assert written == ["return address (the live value is gone)", "saved rcx", "saved r11", "saved rax",
                       "return address", "saved rcx", "saved r11", "saved rax"]


def test_the_diagrams_say_what_they_mean_in_words():
    # a slide shows a diagram without the chapter's text: a bare "aligned?" or "uprobe_ prefix" reads as a note
    stp, trampolines = diagrams.arm64_stp().render(), diagrams.uretprobe().render()
    assert "aligned?" not in stp and "16-byte aligned: SIGSEGV" in stp
    assert "v2 only:<" in stp and "v1 calls copy_to_user, unchecked" in stp  # v1 has no alignment check
    assert "uprobe_ prefix" not in trampolines and "uprobe_handle_trampoline)" in trampolines
