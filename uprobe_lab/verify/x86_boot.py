"""Fetch Debian's x86-64 kernels with apt, and boot one under qemu-system-x86_64 with this machine's files.

The kernels are downloaded as :mod:`.arm64_boot` downloads its arm64 one (a private apt state, nothing
installed) and only the kernel image and the modules the guest needs are unpacked. The guest's root is
this machine's own ``/``, shared read-only over 9p (virtio), so the guest runs the lab, its Python and
its packages exactly as they are here; an initramfs of busybox and the 9p modules mounts it, puts
/proc, /sys, /dev and a tmpfs /dev/shm (the guest's TMPDIR: this machine's /tmp, where a clone may
live, stays visible) over it, and runs one command there. QEMU runs in TCG mode (a
hypervisor whose guests must be paravirtualised, such as kvm-pvm, cannot boot a stock kernel), so the
guest's speed says nothing about a real machine: the referee judges behaviour only.
"""
from __future__ import annotations

import lzma
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..errors import LabError
from .arm64_boot import (CACHE, RefereeUnavailable, apt_options, apt_update, cache_lock, download, has_vmlinuz,
                         run_qemu, run_tool)
from .arm64_guest import cpio_newc

QEMU = "qemu-system-x86_64"
BUSYBOX = "/bin/busybox"
ARCH = "amd64"
# Each kernel line the referee boots, by the image package names Debian gives it (the newest is taken):
# 6.1: int3 return trampoline, nop5 stepped; 6.12: the uretprobe syscall; 6.16: every nop emulated; 6.18:
# the nop5 optimisation; 7.2: the nop10 optimisation in a stable line (from 7.2.6: the lab's 7.3 row); 7.3: mainline's nop10.
KERNEL_LINES = {
    "6.1": r"linux-image-6\.1\.0-(\d+)-amd64",
    "6.12": r"linux-image-6\.12\.(\d+)\+deb1[23]-amd64",
    "6.16": r"linux-image-6\.16\.(\d+)\+deb13-amd64",
    "6.18": r"linux-image-6\.18\.(\d+)\+deb13-amd64",
    "7.2": r"linux-image-7\.2\.(\d+)\+deb14-amd64",
    "7.3": r"linux-image-7\.3\.(\d+)\+deb1[34]-amd64",
}
# what the guest loads to mount its root: 6.1 builds virtio as modules, later kernels build it in
GUEST_MODULES = ("virtio_pci", "9pnet_virtio", "9p")
MODULE_DIRS = ("kernel/drivers/virtio", "kernel/net/9p", "kernel/fs/9p", "kernel/fs/netfs", "kernel/fs/fscache")
BEGIN, END = "UPROBE_LAB_GUEST BEGIN", "UPROBE_LAB_GUEST END"

INIT = f"""#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in $(cat /mods/order); do insmod /mods/$m || echo "insmod $m failed"; done
mkdir -p /host
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose host /host || echo "the 9p root did not mount"
mount -t proc proc /host/proc; mount -t sysfs sys /host/sys; mount -t devtmpfs dev /host/dev
mkdir -p /host/dev/shm; mount -t tmpfs shm /host/dev/shm
echo {BEGIN}
chroot /host /bin/sh -c "export TMPDIR=/dev/shm; cd \\"$(cat /cwd)\\" && $(cat /cmd)"
echo "{END} $?"
poweroff -f
"""


@dataclass
class Kernel:
    line: str  # the KERNEL_LINES key
    package: str
    version: str  # Debian's package version (its sublevel, which uname -r may not show)
    vmlinuz: Path
    modules: Path  # .../lib/modules/<release>


def newest_package(line: str) -> str:
    """The newest image package of a kernel line in the apt indexes (RefereeUnavailable if none)."""
    apt_update(arch=ARCH)
    names = run_tool(["apt-cache", *apt_options(ARCH), "pkgnames", "linux-image-"], "apt-cache pkgnames").split()
    pattern = re.compile(KERNEL_LINES[line] + "$")
    found = [(int(m.group(1) or 0), n) for n in names if (m := pattern.match(n))]
    if not found:
        raise RefereeUnavailable(f"no Debian amd64 kernel of the {line} line in the apt indexes ({KERNEL_LINES[line]})")
    return max(found)[1]


def _unpack(deb: Path, into: Path, patterns: list[str]) -> None:
    globs = " ".join(f"--wildcards '{p}'" for p in patterns)
    run_tool(["sh", "-c", f"dpkg-deb --fsys-tarfile '{deb}' | tar -x -C '{into}' {globs} 2>/dev/null; true"],
             f"unpacking {deb.name}")


def fetch_kernel(line: str) -> Kernel:
    """Download (once) and unpack the newest kernel of ``line``: its vmlinuz and the guest's modules."""
    with cache_lock():
        return _fetch_kernel(line)


def _fetch_kernel(line: str) -> Kernel:
    package = newest_package(line)
    debs = [download(package, ARCH)]
    if not has_vmlinuz(debs[0]):  # from 6.19 the image package is a stub over these three
        flavour = package[len("linux-image-"):]
        debs = [download(f"linux-{part}-{flavour}", ARCH) for part in ("binary", "modules", "base")]
    version = debs[0].name.split("_")[1]
    root = CACHE / "kernels" / debs[0].stem
    if not (root / "done").exists():
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        for deb in debs:
            _unpack(deb, root, ["*vmlinuz*", "*/modules/*/modules.builtin",
                                *(f"*/modules/*/{d}/*" for d in MODULE_DIRS)])
        (root / "done").touch()
    images = [p for p in root.rglob("vmlinuz*") if p.is_file()]
    mods = [p for p in root.rglob("modules/*") if p.is_dir() and p.parent.name == "modules"]
    if not images or not mods:
        raise RefereeUnavailable(f"{', '.join(d.name for d in debs)} hold no vmlinuz or no modules")
    return Kernel(line, package, version, images[0], mods[0])


def _module_bytes(path: Path) -> bytes:
    data = path.read_bytes()
    return lzma.decompress(data) if path.suffix == ".xz" else data


def module_order(moddir: Path, names=GUEST_MODULES) -> list[Path]:
    """The module files to insmod for ``names``, each after the modules its modinfo ``depends=`` names;
    a module the kernel builds in (``modules.builtin``) is skipped."""
    paths = {p.name.split(".ko")[0].replace("-", "_"): p for p in moddir.rglob("*.ko*")}
    listed = moddir / "modules.builtin"
    builtin = {Path(ln).name.split(".ko")[0].replace("-", "_")
               for ln in (listed.read_text().split() if listed.exists() else [])}
    order: list[Path] = []

    def visit(name: str) -> None:
        name = name.replace("-", "_")
        if name in builtin or (name in paths and paths[name] in order):
            return
        if name not in paths:
            raise RefereeUnavailable(f"module {name} is neither unpacked from {moddir} nor built in "
                                     f"(add its directory to x86_boot.MODULE_DIRS)")
        m = re.search(rb"depends=([^\0]*)\0", _module_bytes(paths[name]))
        for dep in filter(None, (m.group(1).decode().split(",") if m else [])):
            visit(dep)
        order.append(paths[name])

    for n in names:
        visit(n)
    return order


def guest_initramfs(kernel: Kernel, command: str, cwd: str) -> bytes:
    """busybox, the 9p modules (decompressed: busybox's insmod reads plain ELF) and the /init above."""
    if not Path(BUSYBOX).exists():
        raise RefereeUnavailable(f"{BUSYBOX} is missing: apt-get install busybox-static")
    order = module_order(kernel.modules)
    files = {"init": INIT.encode(), "bin/busybox": Path(BUSYBOX).read_bytes(), "cmd": command.encode(),
             "cwd": cwd.encode(), "mods/order": "\n".join(f"{p.name.split('.ko')[0]}.ko" for p in order).encode()}
    files.update({f"mods/{p.name.split('.ko')[0]}.ko": _module_bytes(p) for p in order})
    return cpio_newc(files, dirs=("dev", "proc", "sys", "bin", "mods"))


@dataclass
class GuestRun:
    output: str  # what the command printed between the markers
    status: int  # its exit status
    seconds: float
    console: str


def run_in_guest(kernel: Kernel, command: str, cwd: str, timeout: int = 900) -> GuestRun:
    """Boot ``kernel`` and run ``command`` (a shell command line) in ``cwd`` of this machine's files."""
    if shutil.which(QEMU) is None:
        raise RefereeUnavailable(f"{QEMU} is not installed: apt-get install qemu-system-x86")
    console, stderr, status, seconds = run_qemu(
        lambda initrd: [QEMU, "-accel", "tcg", "-cpu", "max", "-smp", "1", "-m", "2G", "-nographic", "-nic", "none",
                        "-no-reboot", "-kernel", str(kernel.vmlinuz), "-initrd", str(initrd),
                        # multidevs=remap: / spans several filesystems whose inode numbers would collide in the guest
                        "-virtfs", "local,path=/,mount_tag=host,security_model=none,readonly=on,multidevs=remap",
                        # no_timer_check: on a busy host TCG's timer ticks too late for the IO-APIC timer test,
                        # which panics ("IO-APIC + timer doesn't work!"); the guest needs no timer interrupts checked
                        "-append", "console=ttyS0 rdinit=/init quiet loglevel=3 panic=-1 no_timer_check"],
        guest_initramfs(kernel, command, cwd), f"{kernel.line} guest", timeout)
    m = re.search(rf"{BEGIN}\n(.*)\n?{END} (\d+)", console, re.S)
    if m is None:
        raise LabError(f"the {kernel.line} guest stopped early (qemu exit {status}); console tail: "
                       f"{console[-1500:]}{stderr[-400:]}")
    return GuestRun(m.group(1), int(m.group(2)), seconds, console)
