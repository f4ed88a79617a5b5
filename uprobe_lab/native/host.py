"""What the host kernel did to this process: its mappings and the bytes inside them.

Reads go through /proc/self/mem first: the kernel reads the page for us (FOLL_FORCE), so an
unmapped or unreadable address is an error, never a crash. The uprobe special mappings are VM_IO,
which that path refuses, so for them a second way is used: write(2) the bytes from the mapping
into a pipe. The kernel copies them with the same checks a user load would pass, and answers
EFAULT (instead of a SIGSEGV) if the page cannot be read.

Probe events, scratch directories and lecture copies outlive a run killed outright; the next run
removes them by the pid they carry, and only those of its own pid namespace (``pid_namespace``,
``ended_here``).
"""
from __future__ import annotations

import ctypes
import os

from ..arm64.constants import UPROBE_XOL_SLOT_BYTES as ARM64_XOL_SLOT_BYTES
from ..program import disasm, listing_lines
from ..sites import SPECIAL_MAPPINGS, UPROBES, Mapping, call_target, calls_uprobe_trampoline
from ..x86.constants import UPROBE_XOL_SLOT_BYTES as X86_XOL_SLOT_BYTES
from .arch import host_arch

XOL_SLOT_BYTES = {"x86_64": X86_XOL_SLOT_BYTES, "arm64": ARM64_XOL_SLOT_BYTES}


def kernel_release() -> str:
    return os.uname().release


def pid_namespace() -> str:
    """This process's pid namespace: the inode of /proc/self/ns/pid in hex (at most 8 digits), "" where /proc is
    not mounted. A pid names a process only inside its namespace, and tracefs, or a /tmp mounted into several
    containers, is shared by processes of many."""
    try:
        return format(os.stat("/proc/self/ns/pid").st_ino, "x")
    except OSError:
        return ""


def ended_here(namespace: str | None, pid: int) -> bool:
    """Whether process ``pid`` of pid namespace ``namespace`` (as ``pid_namespace`` gives it) has ended. Only a pid
    of this namespace can be looked up; one of another namespace, or of none known, is never taken for ended."""
    if not namespace or namespace != pid_namespace():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # running, another user's
        return False
    return False


def parse_maps(text: str | None = None) -> list[Mapping]:
    """/proc/self/maps (or ``text`` in its format) as Mapping rows."""
    if text is None:
        with open("/proc/self/maps") as f:
            text = f.read()
    rows = []
    for line in text.splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) < 5:
            continue
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        rows.append(Mapping(lo, hi, parts[1], parts[5].strip() if len(parts) > 5 else "", offset=int(parts[2], 16)))
    return rows


def special_mappings(maps: list[Mapping] | None = None) -> list[Mapping]:
    return [m for m in (parse_maps() if maps is None else maps) if m.name in SPECIAL_MAPPINGS]


def read_mem(addr: int, n: int) -> bytes:
    """``n`` bytes at ``addr`` of this process through /proc/self/mem (OSError if not readable)."""
    with open("/proc/self/mem", "rb", buffering=0) as f:
        f.seek(addr)
        data = f.read(n)
    if len(data) != n:
        raise OSError(f"short read of /proc/self/mem at {addr:#x}: {len(data)} of {n} bytes")
    return data


def read_via_pipe(addr: int, n: int) -> bytes:
    """``n`` bytes at ``addr`` copied by write(2) into a pipe: EFAULT rather than a crash if unreadable."""
    r, w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
    out = bytearray()
    try:
        while len(out) < n:  # page-sized chunks: a pipe holds at least one page, so write never blocks
            k = min(4096, n - len(out))
            src = (ctypes.c_char * k).from_address(addr + len(out))  # no Python-side read happens here
            done = os.write(w, src)
            out += os.read(r, done)
        return bytes(out)
    finally:
        os.close(r)
        os.close(w)


def read_any(addr: int, n: int) -> tuple[bytes | None, str]:
    """(bytes, how they were read) or (None, why not)."""
    try:
        return read_mem(addr, n), "/proc/self/mem"
    except OSError as e1:
        try:
            return read_via_pipe(addr, n), f"write(2) to a pipe (/proc/self/mem: {e1.strerror or e1})"
        except OSError as e2:
            return None, f"unreadable: /proc/self/mem {e1.strerror or e1}; write(2) {e2.strerror or e2}"


def _trim(code: bytes, arch: str, addr: int) -> bytes:
    """The code up to its first ``int3`` after a ``ret`` (how both trampolines end), else without trailing zeros."""
    end, seen_ret = 0, False
    for a, raw, text in disasm(code, arch, addr):
        end = a - addr + len(raw)
        if seen_ret and text == "int3":
            return code[:end]
        seen_ret = seen_ret or text.startswith("ret")
    return code.rstrip(b"\0")


def trampoline_report(m: Mapping, arch: str, reader=None) -> dict:
    """Bytes and listing of a special mapping's first slot; for [uprobes] also the other used slots.

    ``reader(addr, n) -> (bytes or None, how)`` reads the memory (default: this process, read_any).
    """
    size = min(m.end - m.start, 4096)
    page, how = (reader or read_any)(m.start, size)
    out = {**m.as_dict(), "read_via": how, "bytes": None, "listing": [], "slots": {}}
    if page is None:
        return out
    slot = XOL_SLOT_BYTES.get(arch, 128) if m.name == UPROBES else size
    first = _trim(page[:slot], arch, m.start)
    out["bytes"] = first.hex()
    out["listing"] = listing_lines(first, arch, m.start)
    if m.name == UPROBES:
        for i in range(1, size // slot):
            chunk = page[i * slot : (i + 1) * slot].rstrip(b"\0")
            if chunk:
                out["slots"][i] = chunk.hex()
    return out


def host_snapshot(site_addr: int, n: int = 5, arch: str | None = None) -> dict:
    """Everything a notebook shows about a probe site on this host, as plain data.

    Keys: kernel, arch, site_addr, site_bytes (hex), site_listing, optimized, call_target,
    mappings (the [uprobes] / [uprobes-trampoline] rows of /proc/self/maps) and trampolines
    (per mapping: bytes, listing, how it was read, and for [uprobes] the other used XOL slots).
    """
    arch = arch or host_arch()
    maps = parse_maps()
    site, how = read_any(site_addr, n)
    target = call_target(site, site_addr) if site else None
    specials = special_mappings(maps)
    return {
        "kernel": kernel_release(),
        "arch": arch,
        "site_addr": hex(site_addr),
        "site_bytes": site.hex() if site else None,
        "site_read_via": how,
        "site_listing": listing_lines(site, arch, site_addr) if site else [],
        "optimized": bool(site) and calls_uprobe_trampoline(site, site_addr, maps),
        "call_target": hex(target) if target is not None else None,
        "mappings": [m.as_dict() for m in specials],
        "trampolines": [trampoline_report(m, arch) for m in specials],
    }


def _cpuinfo() -> tuple[str, bool]:
    """(CPU model name, whether the CPU reports running under a hypervisor) from /proc/cpuinfo."""
    model, hypervisor = "", False
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and not model:
                    model = value.strip()
                elif key == "flags":
                    hypervisor = "hypervisor" in value.split()
                    break
    except OSError:
        pass
    return model, hypervisor


def host_description() -> dict:
    """What a native figure depends on: kernel, architecture, CPU model, CPU count, VM or bare metal."""
    uts = os.uname()
    model, hypervisor = _cpuinfo()
    return {
        "kernel": uts.release,
        "kernel_build": uts.version,
        "machine": uts.machine,
        "arch": host_arch(),
        "cpu_model": model or "unknown",
        "cpus": os.cpu_count(),
        "virtualized": hypervisor,
    }
