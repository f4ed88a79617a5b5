"""The process-level syscall API (set_syscall serves, replaces and removes syscalls on both arches) and the
syscalls the lab serves itself, checked against the host kernel where it can answer."""
import os

import pytest

from uprobe_lab.arches import make_process
from uprobe_lab.errors import LabError
from uprobe_lab.process import sys_getpgid
from uprobe_lab.x86.constants import __NR_getpgid as X86_GETPGID
from uprobe_lab.arm64.constants import __NR_getpgid as ARM64_GETPGID

ENOSYS = 38  # include/uapi/asm-generic/errno-base.h


@pytest.mark.parametrize("arch, nr", [("x86_64", X86_GETPGID), ("arm64", ARM64_GETPGID)])
def test_set_syscall_replaces_spies_and_removes(arch, nr):
    proc = make_process(arch, record=True)
    assert proc.call("getpgid_syscall") == 1  # the bench's syscall-count body, served by sys_getpgid
    seen = []

    def spy(p, regs):
        seen.append(regs.ip)
        return real(p, regs) + 41
    real = proc.set_syscall(nr, spy)
    assert real is sys_getpgid
    assert proc.call("getpgid_syscall") == 42 and len(seen) == 1
    assert proc.set_syscall(nr, None) is spy
    assert proc.call("getpgid_syscall") == (-ENOSYS) & (2**64 - 1)


def test_set_syscall_refuses_what_is_not_a_syscall():
    proc = make_process("x86_64")
    with pytest.raises(LabError, match="syscall number"):
        proc.set_syscall("336", sys_getpgid)
    with pytest.raises(LabError, match="handler"):
        proc.set_syscall(336, 1)


# --- futex(FUTEX_WAKE): the price benches' page-pin pair ---------------------------------------------
FUTEX_WAKE, FUTEX_WAKE_PRIVATE, FUTEX_WAKE_CLOCK_REALTIME = 1, 1 | 128, 1 | 256  # include/uapi/linux/futex.h
EINVAL, EFAULT = 22, 14
RW_PAGE, RO_PAGE, UNMAPPED = 0x10000000, 0x10002000, 0x10004000
# (case, word address in the lab's process); the host test maps the same shapes and asks its kernel
FUTEX_WORDS = [("rw anonymous page", RW_PAGE + 8), ("read-only anonymous page", RO_PAGE),
               ("unmapped page", UNMAPPED), ("misaligned word", RW_PAGE + 2),
               ("TASK_SIZE_MAX", 0x7FFFFFFFF000), ("above TASK_SIZE_MAX", 0x7FFFFFFFFFFC)]
# the kernel's answers worked out from get_futex_key (kernel/futex/core.c), not from the lab
FUTEX_EXPECTED = {
    FUTEX_WAKE_PRIVATE: {"rw anonymous page": 0, "read-only anonymous page": 0, "unmapped page": 0,
                         "misaligned word": -EINVAL, "TASK_SIZE_MAX": 0, "above TASK_SIZE_MAX": -EFAULT},
    FUTEX_WAKE: {"rw anonymous page": 0, "read-only anonymous page": -EFAULT, "unmapped page": -EFAULT,
                 "misaligned word": -EINVAL, "TASK_SIZE_MAX": -EFAULT, "above TASK_SIZE_MAX": -EFAULT},
    FUTEX_WAKE_CLOCK_REALTIME: {case: -ENOSYS for case, _ in FUTEX_WORDS},
}


def _futex_process():
    proc = make_process("x86_64", record=True)
    proc.map("rw", RW_PAGE, 0x1000, "rw-p")
    proc.map("ro", RO_PAGE, 0x1000, "r--p")
    return proc


def _lab_futex(proc, uaddr, op):
    from types import SimpleNamespace
    from uprobe_lab.x86.syscalls import sys_futex
    return sys_futex(proc, SimpleNamespace(di=uaddr, si=op, dx=1, ip=0x401000))


@pytest.mark.parametrize("op", sorted(FUTEX_EXPECTED))
def test_futex_wake_follows_get_futex_key(op):
    for case, uaddr in FUTEX_WORDS:
        proc = _futex_process()
        assert _lab_futex(proc, uaddr, op) == FUTEX_EXPECTED[op][case], case
        served = FUTEX_EXPECTED[op][case] == 0
        assert proc.trace.counts["futex_wakes"] == served, case
        assert proc.trace.counts["pages_pinned"] == (served and op == FUTEX_WAKE), case  # only a shared key pins


def test_futex_targets_differ_only_by_the_page_pin():
    from uprobe_lab.bench import events_per_hit
    per_hit = {name: events_per_hit(name, kernel="6.18") for name in ("futex-wake-private", "futex-wake-shared")}
    private, shared = per_hit["futex-wake-private"], per_hit["futex-wake-shared"]
    assert private.get("syscalls") == 1 and private.get("futex_wakes") == 1 and not private.get("pages_pinned")
    assert shared.get("pages_pinned") == 1
    assert {k: v for k, v in shared.items() if k != "pages_pinned"} == private
    proc = make_process("x86_64")
    assert proc.call("futex_wake_private") == 0 and proc.call("futex_wake_shared") == 0  # nobody waits


def _host_futex_answers():
    """The host kernel's answer for every (op, case) of FUTEX_WORDS, on pages mapped the same way."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    base = libc.mmap(None, 0x6000, 3, 0x22, -1, 0)  # PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS
    assert base and base != ctypes.c_void_p(-1).value
    try:
        assert libc.mprotect(ctypes.c_void_p(base + 0x2000), 0x1000, 1) == 0  # PROT_READ
        assert libc.munmap(base + 0x4000, 0x1000) == 0
        ctypes.memset(base, 0, 0x1000)  # fault the rw page in, as the lab's stack is
        moved = {RW_PAGE: base, RO_PAGE: base + 0x2000, UNMAPPED: base + 0x4000}
        answers = {}
        for op in FUTEX_EXPECTED:
            for case, uaddr in FUTEX_WORDS:
                page = uaddr & ~0xFFF
                host_addr = moved[page] + (uaddr - page) if page in moved else uaddr
                r = libc.syscall(ctypes.c_long(202), ctypes.c_void_p(host_addr), ctypes.c_long(op), ctypes.c_long(1),
                                 ctypes.c_void_p(0), ctypes.c_void_p(0), ctypes.c_long(0))
                answers[op, case] = r if r >= 0 else -ctypes.get_errno()
        return answers
    finally:
        libc.munmap(base, 0x6000)


@pytest.mark.skipif(os.uname().sysname != "Linux" or os.uname().machine != "x86_64",
                    reason="asks an x86-64 Linux kernel; this host is not one")
def test_host_kernel_answers_futex_wake_as_the_lab_does():
    host = _host_futex_answers()
    for op in FUTEX_EXPECTED:
        for case, uaddr in FUTEX_WORDS:
            assert _lab_futex(_futex_process(), uaddr, op) == host[op, case], (op, case)


# --- sysret or iret: do_syscall_64's "regs->ip >= TASK_SIZE_MAX" -----------------------------------
# TASK_SIZE_MAX = (1 << 47) - PAGE_SIZE = 0x7ffffffff000 with 4-level paging (asm/page_64_types.h). A
# syscall in the last two bytes of the top user page leaves ip = 0x7ffffffff000 = TASK_SIZE_MAX: iret.
# The same code one page lower leaves ip = 0x7fffffffe000, below it: sysret.
@pytest.mark.parametrize("page, exit_kind", [(0x7FFFFFFFE000, "iret"), (0x7FFFFFFFD000, "sysret")])
def test_sysret_needs_an_ip_below_task_size_max(page, exit_kind):
    proc = make_process("x86_64", record=True)
    code = bytes.fromhex("b879000000") + bytes.fromhex("0f05")  # mov $121 (getpgid), %eax; syscall
    start = page + 0x1000 - len(code)
    proc.map("/lab/top", page, 0x1000, "r-xp", b"\x90" * (0x1000 - len(code)) + code)
    result = proc.run(start, page + 0x1000)
    assert result.signal is None and result.ip == page + 0x1000
    assert proc.trace.counts["syscalls"] == 1 and proc.trace.counts[exit_kind] == 1
    other = {"iret": "sysret", "sysret": "iret"}[exit_kind]
    assert proc.trace.counts[other] == 0
