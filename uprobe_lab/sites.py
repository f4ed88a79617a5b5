"""Probe sites as the emulator and the host both show them: mappings, the 6.18 call (7.3: lea and
call) into a trampoline page, and the names of the uprobe special mappings.

One definition each, used by the emulated process, the x86 optimisation, native mode and the
views. A leaf module: it imports nothing from the lab.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

UPROBES = "[uprobes]"  # the XOL area: slot 0 = the uretprobe trampoline, then out-of-line copies
UPROBES_TRAMPOLINE = "[uprobes-trampoline]"  # x86: what an optimised nop5 (6.18) or nop10 (7.3) calls
SPECIAL_MAPPINGS = (UPROBES, UPROBES_TRAMPOLINE)

CALL_INSN_OPCODE = 0xE8  # x86 call rel32
CALL_INSN_SIZE = 5
LEA_RSP_MINUS_0X80 = bytes.fromhex("488d642480")  # lea -0x80(%rsp),%rsp: 7.3's optimised nop10 starts so
LEA_INSN_SIZE = 5


@dataclass(frozen=True)
class Mapping:
    """One row of /proc/PID/maps."""

    start: int
    end: int
    perms: str  # e.g. "r-xp"
    name: str
    offset: int = 0  # file offset (0 for the emulator's anonymous and special mappings)
    dontcopy: bool = False  # VM_DONTCOPY: a forked child does not get this mapping (dup_mmap skips it)

    def __contains__(self, addr: int) -> bool:
        return self.start <= addr < self.end

    def line(self) -> str:
        return f"{self.start:08x}-{self.end:08x} {self.perms} {self.offset:08x} 00:00 0    {self.name}"

    def as_dict(self) -> dict:
        return {"name": self.name, "start": hex(self.start), "end": hex(self.end), "perms": self.perms}


def mapping_at(maps, addr: int) -> Mapping | None:
    for m in maps:  # a loop, not next() over a generator: every uaccess and syscall trampoline check asks
        if m.start <= addr < m.end:
            return m
    return None


def call_target(site: bytes, site_addr: int) -> int | None:
    """Where an x86 ``call rel32`` (e8) at ``site_addr`` goes, or None if the site is not one."""
    if len(site) < CALL_INSN_SIZE or site[0] != CALL_INSN_OPCODE:
        return None
    return site_addr + CALL_INSN_SIZE + struct.unpack("<i", site[1:CALL_INSN_SIZE])[0]


def calls_uprobe_trampoline(site: bytes, site_addr: int, maps) -> bool:
    """x86: the site holds ``call`` into a [uprobes-trampoline] mapping (6.18's optimised nop5), or
    ``lea -0x80(%rsp),%rsp; call`` into one (7.3's optimised nop10: pass all ten bytes)."""
    if site[:LEA_INSN_SIZE] == LEA_RSP_MINUS_0X80:
        site, site_addr = site[LEA_INSN_SIZE:], site_addr + LEA_INSN_SIZE
    target = call_target(site, site_addr)
    mapping = mapping_at(maps, target) if target is not None else None
    return mapping is not None and mapping.name == UPROBES_TRAMPOLINE


def site_state(site: bytes, site_addr: int, maps) -> str:
    """An x86 probe site in words, without addresses: ``int3``, ``call [uprobes-trampoline]`` (7.3:
    ``lea; call [uprobes-trampoline]``), ``call into an unmapped page`` (a forked child's
    optimised site on 6.18), or the bytes (pass ten: enough for a nop10)."""
    lea = site[:LEA_INSN_SIZE] == LEA_RSP_MINUS_0X80
    call, call_addr = (site[LEA_INSN_SIZE:], site_addr + LEA_INSN_SIZE) if lea else (site, site_addr)
    target = call_target(call, call_addr)
    if target is not None:
        mapping = mapping_at(maps, target)
        where = mapping.name if mapping is not None and mapping.name in SPECIAL_MAPPINGS else (
            "into an unmapped page" if mapping is None else "another mapping")
        return ("lea; " if lea else "") + f"call {where}"
    if site[:1] == b"\xcc":
        return "int3"
    return site.hex()
