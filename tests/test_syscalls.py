"""The process-level syscall API: set_syscall serves, replaces and removes syscalls on both arches."""
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
