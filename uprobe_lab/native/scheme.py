"""Which uprobe optimisation this host's kernel has, found by what it does, not by its version string.

Distribution kernels carry backports and odd version strings, so the lab asks the kernel three
questions on its own bench bytes, in this process:

1. syscall 336 from ordinary text (libbpf's probe_uprobe_syscall): -ENOSYS means no uprobe syscall
   (before 6.18), -ENXIO is 6.18's sys_uprobe, -EPROTO is 7.3's (and 7.2.y's from 7.2.6);
2. a uprobe on ``uprobe_target_nop5``, hit twice: did the nop5 become ``call [uprobes-trampoline]``
   (6.18's scheme)?
3. a uprobe on ``uprobe_target_nop10``: refused at attach (errno 524, the kernel's ENOTSUPP: 0x2e is
   a CS prefix, refused by is_prefix_bad), or, hit twice, did it become
   ``lea -0x80(%rsp),%rsp; call [uprobes-trampoline]`` (7.3's scheme)?

Every probe is detached before the next question and on any way out.
"""
from __future__ import annotations

import ctypes
import functools
from dataclasses import asdict, dataclass

from ..arches import make_process
from ..kernel import KERNELS, KernelVersion
from ..usdt import describe_syscall_result, emulated_syscall_336
from ..sites import LEA_RSP_MINUS_0X80, calls_uprobe_trampoline
from ..uprobes import ENOTSUPP
from .host import parse_maps
from .perf import UprobeEvent
from .support import check_native_support
from .code import NativeCode

HITS = 2


@dataclass(frozen=True)
class SchemeReport:
    syscall_336: int  # what syscall 336 returned from ordinary text (-errno)
    nop5_after: str  # the nop5 site's bytes after HITS hits (hex)
    nop5_rewritten: bool  # ... became call [uprobes-trampoline]
    nop10_refused: str | None  # why the probe on the nop10 was refused at attach, or None
    nop10_after: str | None  # the nop10 site's bytes after HITS hits (hex), if attached
    nop10_rewritten: bool  # ... became lea -0x80(%rsp),%rsp; call [uprobes-trampoline]
    behaves_like: str | None  # the modelled kernel this behaviour matches, None if none does
    summary: str

    def as_dict(self) -> dict:
        return asdict(self)


@functools.lru_cache(maxsize=None)
def modelled_scheme(kernel: KernelVersion) -> tuple[int, bool, bool]:
    """What a modelled version answers to the three questions: syscall 336 off the trampoline (the emulator
    runs it), is a probed nop5 rewritten, is a probed nop10 rewritten (else refused at attach)."""
    return emulated_syscall_336(make_process("x86_64", kernel)), kernel.optimize_nop5, kernel.optimize_nop10


def classify(syscall_336: int, nop5_rewritten: bool, nop10_rewritten: bool, nop10_refused: bool) -> tuple[str | None, str]:
    """(the newest modelled version whose answers these are, or None; a sentence) for the three questions."""
    said = f"syscall 336 off the trampoline gives {describe_syscall_result(syscall_336)}"
    seen = (syscall_336, nop5_rewritten, nop10_rewritten)
    like = [name for name, k in KERNELS.items() if modelled_scheme(k) == seen and nop10_refused != k.optimize_nop10]
    if not like:
        return None, (f"a mix the lab does not model: nop5 rewritten {nop5_rewritten}, nop10 rewritten "
                      f"{nop10_rewritten}, nop10 refused {nop10_refused}; {said}")
    name = like[-1]
    if nop10_rewritten:
        return name, f"{name}'s scheme: a probed nop10 becomes lea -0x80(%rsp),%rsp; call; a nop5 stays int3; {said}"
    if nop5_rewritten:
        return name, f"{name}'s scheme: a probed nop5 becomes a call; a nop10 is refused at attach; {said}"
    return name, (f"no uprobe syscall and no rewritten site: a kernel before 6.18 (the lab's {name} or older); "
                  f"{said}")


def _probe_and_hit(nc, name: str, n: int) -> tuple[bytes | None, str | None]:
    """(the site's n bytes after HITS hits, None) or (None, why the attach was refused)."""
    try:
        with UprobeEvent(nc.path, nc.offset(name)):
            nc.run(name, HITS)
            return nc.read(name, n), None
    except OSError as err:
        if err.errno == ENOTSUPP:
            return None, "errno 524 (ENOTSUPP): the kernel refused the instruction at attach"
        raise


def uprobe_syscall_result(nc) -> int:
    """Run the program's ``uprobe_syscall_probe`` natively: syscall 336 from ordinary text, -errno or >= 0."""
    return ctypes.CFUNCTYPE(ctypes.c_long)(nc.addr("uprobe_syscall_probe"))()


def detect_scheme(nc=None) -> SchemeReport:
    """Ask this host's kernel the three questions (NativeUnavailable if native probes are impossible)."""
    if nc is None:
        check_native_support()
        with NativeCode() as code:
            return detect_scheme(code)
    ret = uprobe_syscall_result(nc)
    nop5, _ = _probe_and_hit(nc, "uprobe_target_nop5", 5)
    # the snapshot is taken inside the probe's lifetime: reading it after detach would show the restored nop
    nop5_rewritten = nop5 is not None and calls_uprobe_trampoline(nop5, nc.addr("uprobe_target_nop5"), parse_maps())
    nop10, refused = _probe_and_hit(nc, "uprobe_target_nop10", 10)
    nop10_rewritten = (nop10 is not None and nop10[:5] == LEA_RSP_MINUS_0X80
                       and calls_uprobe_trampoline(nop10, nc.addr("uprobe_target_nop10"), parse_maps()))
    like, summary = classify(ret, nop5_rewritten, nop10_rewritten, refused is not None)
    return SchemeReport(ret, nop5.hex() if nop5 else "", nop5_rewritten, refused, nop10.hex() if nop10 else None,
                        nop10_rewritten, like, summary)
