"""Why a native run cannot happen here, said once, with the way out.

Everything in uprobe_lab.native raises ``NativeUnavailable`` (never a bare OSError) for the
conditions a reader can meet on an ordinary machine, so a notebook or the CLI can print the
message and skip to the emulator instead of dying. It is a LabError, so whatever catches the
lab's errors (a chapter's helper falling back to a recording, the CLI) catches it too.
"""
from __future__ import annotations

import errno
import os

from ..errors import LabError
from .arch import ARCHES

EMULATOR = "uprobe_lab.bench.run_benches"  # the emulated benches as Python calls them; the CLI says --mode emulated
WAY_OUT = f"the emulator ({EMULATOR}) runs everywhere"


class NativeUnavailable(LabError):
    """Native measurement is impossible on this host; the message names the problem and the way out."""

    def said(self, emulated: str | None) -> str:
        """The message with the emulated mode named as a caller spells it (``--mode emulated`` on the command
        line), or, with None, left out where there is no emulated mode (``verify``)."""
        text = str(self)
        if emulated is not None:
            return text.replace(WAY_OUT, f"the emulated mode ({emulated}) runs everywhere")
        return text.replace(f", or {WAY_OUT}", "").replace(f"; {WAY_OUT}", "")


def not_linux(sysname: str) -> NativeUnavailable:
    return NativeUnavailable(
        f"native mode needs Linux (uprobes are a Linux kernel feature) but this is {sysname}; {WAY_OUT}"
    )


def unsupported_arch(arch: str, reason: str) -> NativeUnavailable:
    known = ", ".join(ARCHES)
    return NativeUnavailable(f"no native bench for {arch!r}: {reason} (architectures in the table: {known}); {WAY_OUT}")


def no_uprobe_pmu(type_path: str) -> NativeUnavailable:
    return NativeUnavailable(
        f"this kernel has no uprobe PMU ({type_path} is missing): it needs CONFIG_UPROBE_EVENTS=y and "
        f"Linux >= 4.17; use such a kernel, or {WAY_OUT}"
    )


CAP_SYS_ADMIN_BIT = 21  # include/uapi/linux/capability.h


def _sys_admin_state() -> str:
    """Whether CAP_SYS_ADMIN is in this process's effective set, from /proc/self/status."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    have = int(line.split()[1], 16) >> CAP_SYS_ADMIN_BIT & 1
                    return "CAP_SYS_ADMIN effective" if have else "without CAP_SYS_ADMIN"
    except OSError:
        pass
    return "capabilities unknown"


def permission_denied(err: OSError) -> NativeUnavailable:
    name = errno.errorcode.get(err.errno or 0, str(err.errno))
    who = f"uid {os.geteuid()}, {_sys_admin_state()}"
    return NativeUnavailable(
        f"perf_event_open refused the uprobe ({name}, running as {who}): current kernels need "
        f"CAP_SYS_ADMIN for uprobe perf events - since 6.16 and its stable backports (ba677dbe77af); "
        f"older kernels also accepted CAP_PERFMON or a low kernel.perf_event_paranoid. Run as root "
        f"(or grant CAP_SYS_ADMIN; in a container add --cap-add SYS_ADMIN), or {WAY_OUT}"
    )


def noexec(tried: list[tuple[str, str]]) -> NativeUnavailable:
    detail = "; ".join(f"{d} ({why})" for d, why in tried)
    return NativeUnavailable(
        f"no directory to put executable code in: {detail}. The bench bytes must be mapped PROT_EXEC "
        f"from a file, which a noexec mount forbids; set UPROBE_LAB_NATIVE_DIR to a directory on an "
        f"exec-capable file system, or {WAY_OUT}"
    )


def bpf_refused(err: OSError) -> NativeUnavailable:
    name = errno.errorcode.get(err.errno or 0, str(err.errno))
    return NativeUnavailable(
        f"bpf(2) refused the BPF consumer the native benches attach ({name}, running as uid {os.geteuid()}): "
        f"loading it needs CAP_BPF and CAP_PERFMON (root), and a kernel with CONFIG_BPF_SYSCALL and "
        f"CONFIG_BPF_EVENTS; run as root on such a kernel, or {WAY_OUT}"
    )
