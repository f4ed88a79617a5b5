"""Fetch a Debian arm64 kernel with apt, and boot it under qemu-system-aarch64 with the referee's guest.

The kernel package is only downloaded (``apt-get download`` against a private apt state under
``~/.cache/uprobe_lab/apt-<arch>``, so the host's own apt configuration is left alone; the x86-64
referee of :mod:`.x86_boot` fetches its amd64 kernels the same way) and unpacked
with ``dpkg-deb``; nothing is installed. Debian builds everything the referee needs into the image
(PL011 console, initramfs, tmpfs, perf events, uprobes, the ``uprobe`` PMU). QEMU runs in TCG mode:
its speed says nothing about a real machine, so the referee judges behaviour only.
"""
from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

try:
    import fcntl
except ImportError:  # not POSIX: no referee can boot here, but the module still imports for the notebooks
    fcntl = None

from ..errors import LabError

CACHE = Path(os.environ.get("UPROBE_LAB_CACHE", Path.home() / ".cache" / "uprobe_lab"))
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
SUITES = [("debian", "bookworm"), ("debian-security", "bookworm-security"), ("debian", "bookworm-backports"),
          ("debian", "trixie"), ("debian", "trixie-backports"), ("debian", "sid"), ("debian", "experimental")]
QEMU = "qemu-system-aarch64"


class RefereeUnavailable(LabError):
    """QEMU, apt or the kernel package cannot be had here; the message says which and how to get it."""


def _apt_dir(arch: str = "arm64") -> Path:
    return CACHE / f"apt-{arch}"


def apt_options(arch: str = "arm64") -> list[str]:
    d = _apt_dir(arch)
    return ["-o", f"Dir::Etc::SourceList={d / 'sources.list'}", "-o", "Dir::Etc::SourceParts=-",
            "-o", "Dir::Etc::Preferences=-", "-o", f"Dir::Etc::PreferencesParts={d / 'preferences.d'}",
            "-o", f"Dir::State::Lists={d / 'lists'}", "-o", f"Dir::State::Status={d / 'dpkg-status'}",
            "-o", f"Dir::Cache={d / 'cache'}", "-o", f"APT::Architecture={arch}", "-o", f"APT::Architectures::={arch}",
            "-o", "Acquire::Languages=none", "-o", "APT::Sandbox::User=root"]


@contextmanager
def cache_lock():
    """Hold the cache for one fetch at a time: referees booting side by side (the test suite runs its kernel
    boots in parallel) share the private apt state, the downloaded packages and the unpacked kernels."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / "fetch.lock", "w") as lock:
        if fcntl is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def run_tool(cmd: list[str], what: str, timeout: int = 600) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise RefereeUnavailable(f"{cmd[0]} is not installed ({what}); on Debian: apt-get install apt dpkg") from None
    if out.returncode:
        raise RefereeUnavailable(f"{what} failed ({' '.join(cmd[:3])} ...): {out.stderr.strip()[-400:]}")
    return out.stdout


def apt_update(max_age_s: int = 24 * 3600, arch: str = "arm64") -> None:
    """Fetch the ``arch`` package indexes of SUITES into the private apt state (once a day at most)."""
    d = _apt_dir(arch)
    stamp = d / "updated"
    if stamp.exists() and time.time() - stamp.stat().st_mtime < max_age_s:
        return
    if not Path(KEYRING).exists():
        raise RefereeUnavailable(f"{KEYRING} is missing: apt-get install debian-archive-keyring")
    for sub in ("lists/partial", "cache/archives/partial", "preferences.d"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    (d / "dpkg-status").touch()
    (d / "sources.list").write_text("".join(
        f"deb [arch={arch} signed-by={KEYRING}] http://deb.debian.org/{archive} {suite} main\n"
        for archive, suite in SUITES))
    run_tool(["apt-get", *apt_options(arch), "-qq", "update"], f"apt-get update of the {arch} indexes")
    stamp.touch()


def fetch_kernel(package: str | None = None) -> tuple[Path, str]:
    """(path of the unpacked vmlinuz, package version) for an image package, default: bookworm's 6.1."""
    with cache_lock():
        apt_update()
        if package is None:
            package = _default_package()
        deb = download(package)
        if package.startswith("linux-image-") and not has_vmlinuz(deb):
            # from 6.19 Debian's image package is a stub: the kernel itself is in linux-binary-<flavour>
            deb = download("linux-binary-" + package[len("linux-image-"):])
        return unpack_deb(deb)


def has_vmlinuz(deb: Path) -> bool:
    return "vmlinuz" in run_tool(["dpkg-deb", "-c", str(deb)], f"listing {deb.name}")


def download(package: str, arch: str = "arm64") -> Path:
    """The .deb of ``package`` for ``arch``, downloaded once into the cache (apt_update first)."""
    debs = CACHE / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    have = sorted(debs.glob(f"{package}_*_{arch}.deb"))
    if not have:
        run_tool(["sh", "-c", f"cd {debs} && apt-get {' '.join(apt_options(arch))} -qq download {package}"],
             f"apt-get download {package}")
        have = sorted(debs.glob(f"{package}_*_{arch}.deb"))
    if not have:
        raise RefereeUnavailable(f"apt-get download {package} left no .deb in {debs}")
    return have[-1]


def unpack_deb(deb: Path) -> tuple[Path, str]:
    """(vmlinuz, package version) from a linux-image .deb, unpacked once into the cache."""
    if not deb.exists():
        raise RefereeUnavailable(f"{deb} does not exist")
    version = deb.name.split("_")[1] if deb.name.count("_") >= 2 else deb.stem
    image = CACHE / "kernels" / deb.stem / "vmlinuz"
    if not image.exists():
        with tempfile.TemporaryDirectory() as tmp:
            run_tool(["sh", "-c", f"dpkg-deb --fsys-tarfile '{deb}' | tar -x -C {tmp} --wildcards '*vmlinuz*'"],
                 f"unpacking {deb.name} (it must hold /boot/vmlinuz-* or /usr/lib/modules/*/vmlinuz)")
            found = [p for p in Path(tmp).rglob("vmlinuz*") if p.is_file()]
            if not found:
                raise RefereeUnavailable(f"{deb.name} holds no vmlinuz")
            image.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(found[0]), image)
    return image, version


def _default_package() -> str:
    text = run_tool(["apt-cache", *apt_options(), "show", "linux-image-arm64"], "apt-cache show")
    for block in text.split("\n\n"):
        m = re.search(r"^Depends:.*?(linux-image-6\.1\.0-[0-9]+-arm64)\b", block, re.M)
        if m:
            return m.group(1)
    raise RefereeUnavailable("no bookworm 6.1 arm64 kernel in the apt indexes")


@dataclass
class BootResult:
    release: str
    lines: list[str]
    seconds: float
    console: str


def run_qemu(command, initramfs: bytes, what: str, timeout: int) -> tuple[str, str, int, float]:
    """Run QEMU (``command(initrd_path)`` gives its argv) with this initramfs until the guest powers off:
    (console text, stderr, exit status, seconds); a LabError with the console's tail if it overruns."""
    with tempfile.TemporaryDirectory() as tmp:
        initrd = Path(tmp, "initramfs.cpio")
        initrd.write_bytes(initramfs)
        start = time.monotonic()
        try:
            out = subprocess.run(command(initrd), capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as err:
            raise LabError(f"the {what} did not finish within {timeout} s; its console ended with: "
                           f"{(err.stdout or b'')[-600:].decode(errors='replace')}") from None
        seconds = time.monotonic() - start
    return (out.stdout.decode(errors="replace").replace("\r", ""), out.stderr.decode(errors="replace"), out.returncode,
            seconds)


def qemu_version(qemu: str = QEMU) -> tuple[int, int] | None:
    """(major, minor) of a qemu-system-aarch64, None if there is none or it does not run."""
    if shutil.which(qemu) is None:
        return None
    try:
        out = subprocess.run([qemu, "--version"], capture_output=True, text=True, timeout=30).stdout
    except OSError:
        return None
    m = re.search(r"version (\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else None


def fetch_backported_qemu(suite: str = "bookworm-backports") -> str:
    """A qemu-system-aarch64 from ``suite`` unpacked into the cache (not installed), for a question the host's QEMU
    cannot ask: bookworm's 7.2 has no FEAT_HBC in ``-cpu max`` (QEMU 8.2 on), so its CPU cannot run bc.cond."""
    if platform.machine() != "x86_64":
        raise RefereeUnavailable(f"the cached QEMU is Debian's amd64 build; this host is {platform.machine()}: "
                                 "install qemu-system-arm 8.2 or later")
    with cache_lock():
        apt_update(arch="amd64")
        unpacked = CACHE / "qemu" / suite
        binary = unpacked / "usr" / "bin" / QEMU
        if not binary.exists():
            debs = CACHE / "debs"
            debs.mkdir(parents=True, exist_ok=True)
            run_tool(["sh", "-c", f"cd {debs} && apt-get {' '.join(apt_options('amd64'))} -qq download "
                                  f"qemu-system-arm/{suite} qemu-system-data/{suite}"],
                     f"apt-get download qemu-system-arm/{suite}")
            unpacked.mkdir(parents=True, exist_ok=True)
            for name in ("qemu-system-arm", "qemu-system-data"):
                deb = max(debs.glob(f"{name}_*.deb"), key=lambda p: p.stat().st_mtime)
                run_tool(["dpkg-deb", "-x", str(deb), str(unpacked)], f"unpacking {deb.name}")
    if qemu_version(str(binary)) is None:
        raise RefereeUnavailable(f"{binary} does not run here (a library it needs is missing?): install "
                                 f"qemu-system-arm from {suite}")
    return str(binary)


def boot(image: Path, initramfs: bytes, timeout: int = 600, cpu: str = "max,pauth-impdef=on",
         qemu: str = QEMU) -> BootResult:
    """Boot the kernel with this initramfs under ``qemu``; the guest's output lines between BEGIN and END."""
    if shutil.which(qemu) is None:
        raise RefereeUnavailable(f"{qemu} is not installed: apt-get install qemu-system-arm")
    console, stderr, status, seconds = run_qemu(
        lambda initrd: [qemu, "-M", "virt", "-cpu", cpu, "-m", "512", "-nographic", "-nic", "none", "-no-reboot",
                        "-kernel", str(image), "-initrd", str(initrd),
                        "-append", "console=ttyAMA0 rdinit=/init quiet loglevel=1 panic=-1"],
        initramfs, "arm64 guest", timeout)
    if "UPROBE_LAB_REFEREE END" not in console:
        raise LabError(f"the arm64 guest stopped early (qemu exit {status}); console tail: {console[-1500:]}"
                       f"{stderr[-400:]}")
    body = console.split("UPROBE_LAB_REFEREE BEGIN\n", 1)[1].split("UPROBE_LAB_REFEREE END", 1)[0]
    release = body.split("\0", 1)[0].strip()
    return BootResult(release, re.findall(r"R ([0-9a-f]+)\n", body), seconds, console)
