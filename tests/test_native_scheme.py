"""The host kernel as referee for the optimised-uprobe schemes (6.18's nop5, 7.3's nop10).

``detect_scheme`` asks this host's kernel (syscall 336 off the trampoline; a real uprobe on the bench's
nop5 and nop10, hit twice, read back through /proc/self/mem) and the tests check that the emulated
kernel it names gives the same answers. On a 6.18 host: ENXIO, the nop5 becomes a call, the nop10 is
refused at attach (errno 524); on a 7.3 host (or 7.2.6 on): EPROTO, the nop10 becomes lea; call, the nop5 stays int3.
"""
import pytest

from native_support import native
from uprobe_lab.arches import make_process
from uprobe_lab.native import run_native_benches
from uprobe_lab.native.scheme import classify, detect_scheme
from uprobe_lab.uprobes import CountingConsumer, UnprobeableInstruction, uprobe_register
from uprobe_lab.usdt import ENOSYS, ENXIO, EPROTO
from uprobe_lab.x86 import optimize


def test_classify_without_a_host():
    assert classify(-ENXIO, True, False, True)[0] == "6.18"
    assert classify(-EPROTO, False, True, False)[0] == "7.3"  # the newest version of the nop10 scheme
    assert classify(-ENOSYS, False, False, True)[0] == "6.16"
    like, why = classify(-ENXIO, False, True, False)
    assert like is None and "does not model" in why


def emulated_answers(kernel: str) -> dict:
    """The same three questions asked of the emulated kernel."""
    proc = make_process("x86_64", kernel)
    ret = proc.call("uprobe_syscall_probe") - (1 << 64)
    answers = {"syscall_336": ret}
    for name, key in (("uprobe_target_nop5", "nop5"), ("uprobe_target_nop10", "nop10")):
        try:
            uprobe_register(proc, name, CountingConsumer())
        except UnprobeableInstruction:
            answers[f"{key}_refused"], answers[f"{key}_rewritten"] = True, False
            continue
        site = proc.program.resolve(name)
        proc.call("producer_loop", 2, site)
        answers[f"{key}_refused"], answers[f"{key}_rewritten"] = False, optimize.is_optimized(proc, site)
    return answers


@native
def test_host_behaves_like_a_modelled_kernel_and_the_emulator_agrees():
    host = detect_scheme()
    assert host.behaves_like is not None, host.summary
    emu = emulated_answers(host.behaves_like)
    assert emu["syscall_336"] == host.syscall_336
    assert emu["nop5_rewritten"] == host.nop5_rewritten
    assert emu["nop10_rewritten"] == host.nop10_rewritten
    assert emu["nop10_refused"] == (host.nop10_refused is not None)


@native
def test_native_nop10_bench_on_this_host():
    rows = {r["bench"]: r for r in run_native_benches(["uprobe-nop5", "uprobe-nop10", "usdt-nop10"],
                                                       iterations=2000, repeats=2)}
    if detect_scheme().behaves_like == "7.3":  # the nop10 scheme: classify names its newest version
        assert rows["uprobe-nop10"]["optimized"] and rows["uprobe-nop10"]["site_bytes"].startswith("488d642480e8")
        assert rows["usdt-nop10"]["optimized"] and rows["usdt-nop10"]["usdt_probe"].startswith("+1")
    else:  # 6.18 and older refuse the probe at attach: the 0x2e prefix
        assert "refused by this kernel" in rows["uprobe-nop10"]["refused"] and "524" in rows["uprobe-nop10"]["refused"]
        assert "mops" not in rows["uprobe-nop10"]
        assert rows["usdt-nop10"]["usdt_probe"].startswith("+0")  # libbpf keeps it on the nop: still measured
        assert rows["usdt-nop10"]["hits"] == 4000 and not rows["usdt-nop10"]["optimized"]
