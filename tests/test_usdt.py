"""USDT sites: their shapes, where libbpf probes them, reading them from an ELF, what a hit costs.

Sources: libbpf/usdt usdt.h - c9865d1 (2026-02-09) emitted ".byte 0x90, 0x0f, 0x1f, 0x44, 0x00, 0x0 /* nop,
nop5 */", b0144b0 (2026-05-06) reverted it ("Currently kernel implementation of this optimization can
corrupt red zone and corrupt application"), 9018f82 (2026-07-02) emits ".byte 0x90, 0x66, 0x2e, 0x0f, 0x1f,
0x84, 0x00, 0x00, 0x00, 0x00, 0x00 /* nop, nop10 */"; the note is type 3, owner "stapsdt", desc = pc, address
of _.stapsdt.base, semaphore, then provider, name and args as C strings. The 7.2 selftest
tools/testing/selftests/bpf/prog_tests/usdt.c (analogdevicesinc/linux 06dfa707bad1): nop1_nop10_combo[11] =
{ 0x90, 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0 }; a usdt_2 probe becomes "lea -0x80(%rsp), %rsp; call"
at addr_2 + 1 ({ 0x48, 0x8d, 0x64, 0x24, 0x80, 0xe8 }) with the nop left at addr_2; the page-crossing
subtest says libbpf keeps the probe on the preceding 1-byte nop.
"""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from uprobe_lab.arches import make_process
from uprobe_lab.bench import events_per_hit, usdt_cost_table, usdt_events
from uprobe_lab.errors import LabError
from uprobe_lab.uprobes import CountingConsumer
from uprobe_lab.usdt import (ENOSYS, ENXIO, EPROTO, LIBBPF_NOP5, LIBBPF_NOP10, USDT_SHAPES, attach_usdt,
                             demo_elf_bytes, long_nop_crosses_page, read_usdt_sites, site_shape,
                             usdt_probe_offset, write_demo_elf)

COMBO_NOP10 = bytes([0x90, 0x66, 0x2E, 0x0F, 0x1F, 0x84, 0, 0, 0, 0, 0])  # prog_tests/usdt.c nop1_nop10_combo
COMBO_NOP5 = bytes([0x90, 0x0F, 0x1F, 0x44, 0x00, 0x00])  # usdt.h c9865d1


def test_site_shapes_are_the_headers_bytes():
    assert USDT_SHAPES["nop"].site == b"\x90"
    assert USDT_SHAPES["nop,nop5"].site == COMBO_NOP5
    assert USDT_SHAPES["nop,nop10"].site == COMBO_NOP10
    assert site_shape(COMBO_NOP10 + b"\xc3") == "nop,nop10"
    assert site_shape(COMBO_NOP5 + b"\xc3") == "nop,nop5"
    assert site_shape(b"\x90\xc3") == "nop"
    assert site_shape(b"\xcc") == "other"


def test_long_nop_crossing_a_page():
    assert not long_nop_crosses_page(0x401FF5, "nop,nop10")  # nop10 at 0x401ff6..0x401fff
    assert long_nop_crosses_page(0x401FF6, "nop,nop10")
    assert long_nop_crosses_page(0x401FFB, "nop,nop5") and not long_nop_crosses_page(0x401FFA, "nop,nop5")
    assert not long_nop_crosses_page(0x401FFF, "nop")


@pytest.mark.parametrize("code,ret,libbpf,offset", [
    (COMBO_NOP10, -EPROTO, LIBBPF_NOP10, 1),  # 7.2 with its libbpf: the nop10
    (COMBO_NOP10, -ENXIO, LIBBPF_NOP10, 0),  # 6.18 kernel, 7.2 libbpf: ENXIO is not EPROTO, stay on the nop
    (COMBO_NOP5, -ENXIO, LIBBPF_NOP5, 1),  # 6.18 with its libbpf: the nop5
    (COMBO_NOP5, -EPROTO, LIBBPF_NOP5, 0),  # 7.2 kernel, 6.18 libbpf
    (COMBO_NOP5, -EPROTO, LIBBPF_NOP10, 0),  # not the combo 7.2's libbpf knows
    (COMBO_NOP10, -ENOSYS, LIBBPF_NOP10, 0),  # no uprobe syscall at all
    (b"\x90\xc3", -EPROTO, LIBBPF_NOP10, 0),
])
def test_libbpf_probe_offset(code, ret, libbpf, offset):
    assert usdt_probe_offset(code, 0x401000, ret, libbpf)[0] == offset


def test_libbpf_keeps_a_page_crossing_nop10_on_the_nop():
    offset, why = usdt_probe_offset(COMBO_NOP10, 0x401FFC, -EPROTO, LIBBPF_NOP10)
    assert offset == 0 and "crosses a page" in why


@pytest.mark.parametrize("kernel,expected", [("6.16", -ENOSYS), ("6.18", -ENXIO), ("7.3", -EPROTO)])
def test_feature_probe_runs_in_the_emulated_kernel(kernel, expected):
    proc = make_process("x86_64", kernel)
    ret = proc.call("uprobe_syscall_probe")
    assert ret - (1 << 64) == expected


def test_attach_on_73_probes_the_nop10_and_optimises_it_like_the_selftest():
    proc = make_process("x86_64", "7.3")
    consumer = CountingConsumer()
    uprobe, offset, _ = attach_usdt(proc, "usdt_nop10", consumer)
    addr = proc.program.resolve("usdt_nop10")
    assert offset == 1 and uprobe.vaddr == addr + 1
    proc.call("usdt_nop10")
    proc.call("usdt_nop10")
    assert consumer.hits == 2
    assert proc.read(addr, 1) == b"\x90"  # "nop stays on addr_2 address"
    assert proc.read(addr + 1, 6) == bytes([0x48, 0x8D, 0x64, 0x24, 0x80, 0xE8])  # "lea_and_call"


def test_mismatched_libbpf_and_kernel_stay_on_the_nop():
    proc = make_process("x86_64", "6.18")
    uprobe, offset, why = attach_usdt(proc, "usdt_nop10", CountingConsumer(), LIBBPF_NOP10)
    assert offset == 0 and "-ENXIO" in why  # a nop10 probe would be refused by 6.18
    proc = make_process("x86_64", "7.3")
    _, offset, _ = attach_usdt(proc, "usdt_nop5", CountingConsumer(), LIBBPF_NOP5)
    assert offset == 0


def test_usdt_events_per_hit_by_kernel():
    table = {(b, k): events_per_hit(b, kernel=k) for b in ("usdt-nop", "usdt-nop5", "usdt-nop10", "usdt-nop10-pagecross")
             for k in ("6.16", "6.18", "7.3")}
    cost = {key: (e.get("exceptions", 0), e.get("syscalls", 0)) for key, e in table.items()}
    int3, call = (1, 0), (0, 1)
    assert cost == {
        ("usdt-nop", "6.16"): int3, ("usdt-nop", "6.18"): int3, ("usdt-nop", "7.3"): int3,
        ("usdt-nop5", "6.16"): int3, ("usdt-nop5", "6.18"): call, ("usdt-nop5", "7.3"): int3,
        ("usdt-nop10", "6.16"): int3, ("usdt-nop10", "6.18"): int3, ("usdt-nop10", "7.3"): call,
        ("usdt-nop10-pagecross", "6.16"): int3, ("usdt-nop10-pagecross", "6.18"): int3,
        ("usdt-nop10-pagecross", "7.3"): int3,
    }
    assert usdt_events("usdt-nop10", "7.3")["offset"] == 1 and usdt_events("usdt-nop10", "6.18")["offset"] == 0


# --- the ELF notes -------------------------------------------------------------------------------

def test_demo_elf_sites_read_with_pyelftools(tmp_path):
    path = write_demo_elf(tmp_path / "usdt_demo")
    sites = read_usdt_sites(path)
    assert [(s.provider, s.name, hex(s.addr), s.shape, s.crosses_page) for s in sites] == [
        ("uprobe_lab", "nop", "0x401000", "nop", False),
        ("uprobe_lab", "nop5", "0x401010", "nop,nop5", False),
        ("uprobe_lab", "nop10", "0x401020", "nop,nop10", False),
        ("uprobe_lab", "nop10_pagecross", "0x401ffc", "nop,nop10", True)]
    raw = demo_elf_bytes()
    for s in sites:  # file offsets point at the site's bytes in the file
        assert raw[s.file_offset:s.file_offset + len(USDT_SHAPES[s.shape].site)] == USDT_SHAPES[s.shape].site
    assert sites[0].args == "-4@%edi 8@%rsi" and sites[0].semaphore == 0


@pytest.mark.skipif(shutil.which("readelf") is None, reason="binutils readelf is not installed")
def test_demo_elf_notes_as_binutils_reads_them(tmp_path):
    path = write_demo_elf(tmp_path / "usdt_demo")
    out = subprocess.run(["readelf", "-n", path], capture_output=True, text=True, check=True).stdout
    assert out.count("NT_STAPSDT") == 4 and "Provider: uprobe_lab" in out and "Name: nop10_pagecross" in out
    assert "Location: 0x0000000000401ffc" in out


def test_prelink_base_is_applied(tmp_path):
    raw = bytearray(demo_elf_bytes())
    path = tmp_path / "moved"
    # move .stapsdt.base's sh_addr by +0x10 as prelink would: every site moves by the same amount
    from elftools.elf.elffile import ELFFile
    import io
    sec = ELFFile(io.BytesIO(bytes(raw))).get_section_by_name(".stapsdt.base")
    shoff = int.from_bytes(raw[0x28:0x30], "little")
    idx = next(i for i in range(5) if int.from_bytes(raw[shoff + 64 * i + 16:shoff + 64 * i + 24], "little") == sec["sh_addr"])
    raw[shoff + 64 * idx + 16:shoff + 64 * idx + 24] = (sec["sh_addr"] + 0x10).to_bytes(8, "little")
    path.write_bytes(bytes(raw))
    assert read_usdt_sites(path)[1].addr == 0x401010 + 0x10


def test_read_errors_are_clear(tmp_path):
    with pytest.raises(LabError, match="cannot open"):
        read_usdt_sites(tmp_path / "missing")
    junk = tmp_path / "junk"
    junk.write_bytes(b"not an elf")
    with pytest.raises(LabError, match="not an ELF"):
        read_usdt_sites(junk)


def test_what_is_no_regular_file_is_named_without_waiting_for_it(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    held = os.open(fifo, os.O_RDWR)  # both ends held open, so a reader that does get in is never stuck
    try:
        os.write(held, b"x" * 64)
        with pytest.raises(LabError, match=f"^{fifo} is a FIFO, not a regular file; give the path of an ELF binary$"):
            read_usdt_sites(fifo)
    finally:
        os.close(held)
    with pytest.raises(LabError, match="^/dev/null is a device, not a regular file"):
        read_usdt_sites("/dev/null")


def test_cost_table_of_the_demo_elf(tmp_path):
    table = usdt_cost_table(write_demo_elf(tmp_path / "usdt_demo"))
    row = {r["usdt"]: r for r in table.to_dict("records")}
    assert row["uprobe_lab:nop10"]["7.3 probe"] == "+1" and row["uprobe_lab:nop10"]["7.3 per hit"] == "0 exc + 1 sys"
    assert row["uprobe_lab:nop10"]["6.18 per hit"] == "1 exc + 0 sys"
    assert row["uprobe_lab:nop5"]["6.18 per hit"] == "0 exc + 1 sys" and row["uprobe_lab:nop5"]["7.3 per hit"] == "1 exc + 0 sys"
    assert row["uprobe_lab:nop10_pagecross"]["7.3 probe"] == "+0"


def test_libbpf_choices_per_kernel():
    """Worked out by hand from usdt.h's has_nop_combo()/probe_uprobe_syscall(): 6.16 has no syscall 336 (ENOSYS),
    so both libbpfs probe the nop; 6.18 answers ENXIO, which only the 6.18 tree's libbpf wants, and only on its
    nop,nop5 combo; 7.3 answers EPROTO, which only the 7.3 tree's libbpf wants, and only on nop,nop10."""
    from uprobe_lab.views.nop5 import libbpf_choices
    table = libbpf_choices().set_index("kernel")
    assert list(table["syscall 336 off the trampoline"]) == ["-ENOSYS", "-ENXIO", "-EPROTO"]
    six18, seven3 = "libbpf of the 6.18 tree", "libbpf of the 7.3 tree"
    assert table.loc["6.16"].drop("syscall 336 off the trampoline").eq("+0").all()
    assert table.loc["6.18", f"{six18}: nop,nop5"] == "+1"
    assert table.loc["6.18", f"{six18}: nop,nop10"] == "+0"
    assert table.loc["6.18", f"{seven3}: nop,nop10"] == "+0"
    assert table.loc["7.3", f"{seven3}: nop,nop10"] == "+1"
    assert table.loc["7.3", f"{seven3}: nop,nop5"] == "+0"
    assert table.loc["7.3", f"{six18}: nop,nop5"] == "+0"


def test_demo_elf_never_overwrites_a_file_it_did_not_write(tmp_path):
    mine = tmp_path / "notes.txt"
    mine.write_text("precious")
    with pytest.raises(LabError, match="notes.txt"):
        write_demo_elf(mine)
    assert mine.read_text() == "precious"
    again = write_demo_elf(write_demo_elf(tmp_path / "usdt_demo"))  # its own file it may write again
    assert Path(again).read_bytes() == demo_elf_bytes()
    with pytest.raises(LabError, match="directory"):
        write_demo_elf(tmp_path)
