"""The x86 referee: its machine code, its generator, and (as root, with the uprobe PMU) a sample run.

The sample asks this host's kernel, so its expectations are the host's answers, not the lab's:
every judged instruction must agree, and a few single instructions are pinned to what a 6.18 host
was seen to do with them (each also reasoned from arch/x86/kernel/uprobes.c in the test's comment).
"""
import os
import platform
import tempfile

import capstone
import pytest

from uprobe_lab.errors import LabError
from uprobe_lab.kernel import get_kernel
from uprobe_lab.verify import verify
from uprobe_lab.verify import x86_gen as G
from uprobe_lab.verify import x86_harness as H
from uprobe_lab.x86.analyze import analyze_hex

from native_support import host_kernel_rules, kernel_at_least, require_bpf, require_native


@pytest.fixture
def referee_host():
    """Real uprobes on an x86-64 host as root; skipped elsewhere, and failed under UPROBE_LAB_REQUIRE_NATIVE=1
    when it is the lab that finds native mode unavailable."""
    if platform.machine() != "x86_64" or os.geteuid() != 0:
        pytest.skip("the referee needs an x86-64 host and root")
    require_native()


@pytest.fixture
def referee_bpf_host(referee_host):
    """Also bpf(2) and uprobe_multi links (6.6+). Only those decide: a program the kernel rejects fails the test."""
    if not kernel_at_least(6, 6):
        pytest.skip(f"uprobe_multi links need Linux 6.6; this is {os.uname().release}")
    require_bpf()


x86_host = pytest.mark.usefixtures("referee_host")
x86_bpf = pytest.mark.usefixtures("referee_bpf_host")

MD = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)


def listing(code: bytes, addr: int) -> list[str]:
    out = []
    for ins in MD.disasm(code, addr):
        if ins.mnemonic == "int3":
            break
        out.append(f"{ins.mnemonic} {ins.op_str}".strip())
    return out


def test_harness_routines_decode_as_written():
    image = H.build_image(bytes.fromhex("4801d8"), opmask=True)
    at = lambda addr: image[addr - H.CODE:]
    entry = listing(at(H.ENTRY), H.ENTRY)
    assert entry[6] == f"mov qword ptr [{H.SAVE_RSP:#x}], rsp"
    assert f"xrstor64 ptr [{H.TEMPLATE:#x}]" in entry and "kmovq k7, rax" in entry and "popfq" in entry
    assert entry[-2:] == [f"mov rsp, qword ptr [{H.IN_REGS + H.out_offset('rsp'):#x}]", f"jmp {H.SITE:#x}"]
    # every XSAVE/XRSTOR asks for x87..Hi16_ZMM and PKRU only: with edx:eax = -1 an AMX CPU's 8 KB of tile
    # data would overrun the next 4 KB area (seen: the template and the before-state overwritten)
    for code in (entry, listing(at(H.SIG_EXIT), H.SIG_EXIT), listing(at(H.SAVE_TEMPLATE), H.SAVE_TEMPLATE)):
        ext = [i for i, text in enumerate(code) if text.startswith(("xsave64", "xrstor64"))]
        assert ext
        for i in ext:  # each comes right after the bitmap or right after another XSAVE/XRSTOR
            assert code[i - 2 : i] == ["mov eax, 0x2ff", "mov edx, 0"] or i - 1 in ext, code[i - 2 : i + 1]
    handler = listing(at(H.SIG_HANDLER), H.SIG_HANDLER)
    assert "rep movsq qword ptr [rdi], qword ptr [rsi]" in handler
    assert f"mov qword ptr [rdx + 0xa8], {H.SIG_EXIT:#x}" in handler  # REG_RIP = gregs[16]
    assert handler[-2:] == ["and qword ptr [rdx + 0xb0], 0xfffffffffffffeff", "ret"]  # REG_EFL, TF cleared
    assert listing(at(H.SIG_EXIT), H.SIG_EXIT)[-2:] == ["mov eax, 1", "ret"]
    for pad in (H.PAD_BACK, H.PAD_FWD, H.RET_PAD):
        assert listing(at(pad), pad)[-1] == f"jmp {H.COMMON:#x}"


def test_generator_is_seeded_and_capstone_agrees_on_every_length():
    a, b = G.random_cases(300, 5), G.random_cases(300, 5)
    assert a == b and a != G.random_cases(300, 6)
    assert {c.cls for c in a} == set(G.CLASSES)
    for case in a + G.vex_sweep() + G.evex_sweep():
        ins = G.decode(case.insn + b"\xcc" * 16)
        assert ins.size == len(case.insn), case


def test_sweeps_cover_the_colliding_opcodes():
    vex = {(c.insn[1] & 0x1F, c.insn[2] & 3, c.insn[3]) for c in G.vex_sweep()}
    assert (1, 0, 0x77) in vex  # vzeroupper
    assert (1, 1, 0x74) in vex and (1, 1, 0x70) in vex  # vpcmpeqb, vpshufd
    assert (1, 0, 0x90) in vex  # kmovw k, k/m16 (VEX.L0.0F.W0 90)
    evex = {c.insn[4] for c in G.evex_sweep()}
    assert {0x6F, 0x7F, 0x70, 0xEB} <= evex


def test_unknown_arch_or_class_is_a_clear_error(monkeypatch):
    """Bad arguments are named before the host is asked: here the host check would refuse (as it does
    without root), so only the argument errors can come out."""
    from uprobe_lab.native import NativeUnavailable
    from uprobe_lab.verify import x86 as verify_x86

    def refuse(arch=None):
        raise NativeUnavailable("perf_event_open refused the uprobe (EPERM)")

    monkeypatch.setattr(verify_x86, "check_native_support", refuse)
    with pytest.raises(LabError, match="no referee"):
        verify("mips")
    with pytest.raises(LabError, match="unknown instruction class.*bogus"):
        verify("x86_64", sample=1, classes=["bogus"])
    with pytest.raises(LabError, match="unknown kernel '5.4'"):
        verify("x86_64", sample=1, kernel="5.4")
    with pytest.raises(LabError, match="unknown probe 'kprobe'"):
        verify("x86_64", sample=1, probe="kprobe")
    with pytest.raises(LabError, match="sample 100001: the x86 referee runs 0 to 100000"):
        verify("x86_64", sample=G.MAX_SAMPLE + 1)
    with pytest.raises(NativeUnavailable, match="EPERM"):  # good arguments reach the host check
        verify("x86_64", sample=1, classes=["nops"], kernel="6.18")


def test_a_case_the_host_gives_no_report_for_is_an_error_in_the_summary(monkeypatch, private_scratch):
    """Runs anywhere: the host check passes and the pool answers for every case but the second."""
    from uprobe_lab.verify import x86, x86_host

    monkeypatch.setattr(x86, "check_native_support", lambda arch=None: None)
    answer = lambda self, jobs: ((key, {"error": "boom"}) for key, _, _ in jobs if key != 1)
    monkeypatch.setattr(x86_host.HostPool, "run", answer)
    report = x86.verify_x86(sample=4, seed=3, classes=["1-byte"], sweeps=False, kernel="6.18")
    assert [v.host_error for v in report.verdicts] == ["boom", "the host returned no report for it", "boom", "boom"]
    assert report.as_dict()["classes"][0]["errors"] == 4 and report.as_dict()["judged"] == 0
    assert "error: the host returned no report for it" in report.format()


def test_a_6_19_host_is_judged_by_its_release_rules(monkeypatch, private_scratch):
    """With no --kernel the lab models the host's release, not only its modelled version: a 6.19 host has
    insn_is_nop (8a5c6cbfe4a3), so the lab steps pause (f3 90) there as the host would; 6.18 emulates it."""
    from uprobe_lab.verify import x86, x86_host

    monkeypatch.setattr(x86, "check_native_support", lambda arch=None: None)
    monkeypatch.setattr(x86.os, "uname", lambda: os.uname_result(("Linux", "h", "6.19.1", "#1", "x86_64")))
    monkeypatch.setattr(x86_host.HostPool, "run", lambda self, jobs: ((k, {"error": "no host"}) for k, _, _ in jobs))
    seen = []
    monkeypatch.setattr(x86, "judge", lambda case, host, kernel: seen.append(kernel) or x86.Verdict(case, "error"))
    report = x86.verify_x86(sample=2, seed=3, classes=["nops"], sweeps=False)
    assert report.kernel.startswith("6.19") and seen and all(k.insn_is_nop and k.optimize_nop5 for k in seen)
    assert analyze_hex("f390", seen[0])["action"] == "xol"
    assert analyze_hex("f390", get_kernel("6.18"))["action"] == "emulate"


@pytest.mark.slow
@x86_host
def test_sample_agrees_with_the_host():
    report = verify("x86_64", sample=80, seed=20261130, sweeps=False)  # every class, ~10 s
    d = report.as_dict()
    assert d["judged"] >= 60, d
    assert not report.disagreements, report.format()


@pytest.mark.slow
@x86_bpf
def test_a_uprobe_multi_batch_gives_the_host_answers_a_perf_uprobe_gives():
    from uprobe_lab.verify.x86 import host_action
    from uprobe_lab.verify.x86_host import HostPool

    cases = G.random_cases(24, 77) + [G.make_case("VEX", bytes.fromhex(h), 0x202) for h in ("c5f877", "c5f9efc0")]
    answers = {}
    for probe in ("perf", "bpf"):
        with tempfile.TemporaryDirectory() as d:
            pool = HostPool(d, opmask=False, parallel=8, probe=probe)
            answers[probe] = {k: (host_action(r), r.get("xol_area"), r["runs"][-1]["signal"])
                              for k, r in pool.run((i, c.insn, c.flags) for i, c in enumerate(cases))}
    assert answers["perf"] == answers["bpf"]
    assert answers["bpf"][24][0] == "emulate" and answers["bpf"][25][0] == "reject"  # vzeroupper, vpxor


@pytest.mark.slow
@x86_bpf
def test_bpf_sample_agrees_with_the_lab():
    report = verify("x86_64", sample=150, seed=424242, sweeps=False, probe="bpf")
    assert report.as_dict()["judged"] >= 120 and not report.disagreements, report.format()


@x86_host
def test_host_kills_a_probed_syscall_followed_by_ret(tmp_path):
    from uprobe_lab.verify.x86_host import HostPool

    (_, report), = HostPool(str(tmp_path), opmask=False, parallel=1).run([(0, bytes.fromhex("0f05c3"), 0x202)])
    plain, probed = report["runs"][0], report["runs"][2]
    assert plain["signal"] is None and plain["regs"]["rip"] == H.RET_PAD  # the ret landed
    assert report["xol_area"] and probed["signal"] == "SIGSEGV"  # the ret ran in the slot; ip "fixed" wrong
    assert probed["sigaddr"] == probed["regs"]["rip"] != H.RET_PAD
    # the lab's run of it dies where the host's did: the ret's target moved by the probe address's distance
    # from the slot (default_post_xol_op's correction), a non-canonical address
    from uprobe_lab.verify.x86_lab import lab_runs

    lab = lab_runs(G.Case("syscall", bytes.fromhex("0f05c3"), "syscall; ret", 0x202), host_kernel_rules())
    assert (lab["action"], lab["xol_area"]) == ("xol", True)
    assert [(r["signal"], r["regs"]["rip"]) for r in (lab["unprobed"], lab["probed"])] \
        == [(r["signal"], r["regs"]["rip"]) for r in (plain, probed)]


CALL_NONCANONICAL = bytes.fromhex("ff159a2b0000")  # call [rip+0x2b9a]: DATA holds 0x2139e073cc643173 there


UNMAPPED = 0x2000_0000  # canonical, and nothing is mapped there


def _rel32(opcode: int, target: int) -> bytes:
    return bytes([opcode]) + (target - (H.SITE + 5)).to_bytes(4, "little", signed=True)


# where each branch's fetch faults: a non-canonical pointer (#GP on the branch, rip stays on SITE),
# DATA (mapped, not executable: rax points into it) and an unmapped canonical address
FAULTING = {bytes.fromhex("ff259a2b0000"): H.SITE, CALL_NONCANONICAL: H.SITE,
            bytes.fromhex("ffd0"): H.initial_gprs()["rax"], bytes.fromhex("ffe0"): H.initial_gprs()["rax"],
            _rel32(0xE8, UNMAPPED): UNMAPPED, _rel32(0xE9, UNMAPPED): UNMAPPED}
ORDINARY = [bytes.fromhex(h) for h in ("90", "4801d8", "ff1424", "c3", "48ffc1", "6690")]


@pytest.mark.slow
@pytest.mark.parametrize("probe", ["perf", "bpf"])
@x86_host
def test_every_case_of_a_run_gets_a_report_one_child_at_a_time(tmp_path, probe, request):
    """With one child at a time the next job waits for the last child to exit after it reported; the
    pool once took "no report pending" for "no job left" and returned after the first few cases."""
    from uprobe_lab.verify.x86_host import HostPool

    if probe == "bpf":
        request.getfixturevalue("referee_bpf_host")
    raws = [raw for pair in zip(FAULTING, ORDINARY) for raw in pair] * 2
    jobs = [(i, raw, 0x202) for i, raw in enumerate(raws)]
    reports = dict(HostPool(str(tmp_path), opmask=False, parallel=1, probe=probe).run(jobs))
    assert sorted(reports) == list(range(len(jobs)))
    assert not {k: r["error"] for k, r in reports.items() if "error" in r}
    for key, raw, _ in jobs:
        runs = reports[key]["runs"]
        assert len(runs) == 3, (raw.hex(), reports[key])
        if raw in FAULTING:  # the branch or the fetch at its target faults, and the harness recovers
            assert [(r["signal"], r["regs"]["rip"]) for r in runs] == [("SIGSEGV", FAULTING[raw])] * 3, raw.hex()
        else:
            assert [r["signal"] for r in runs] == [None] * 3, raw.hex()


def _intel_host() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("vendor_id") and "GenuineIntel" in line for line in f)
    except OSError:
        return False


def test_lab_probed_call_to_a_noncanonical_target_is_aborted_not_fixed_up():
    """Intel raises #GP on the call itself (rip on it, rsp as before, the return address left written
    below rsp); in the XOL slot that makes the step trapped, so handle_singlestep() calls
    arch_uprobe_abort_xol() (riprel_post_xol, ip = the probed address), not default_post_xol_op's
    UPROBE_FIX_CALL: the stack word keeps the slot's return address, slot + 6."""
    from uprobe_lab.verify.x86_lab import lab_runs

    report = lab_runs(G.make_case("RIP-relative", CALL_NONCANONICAL, 0x202), "6.18")
    below = H.STACK_TOP - 8 - H.DATA
    word = lambda state: int.from_bytes(state["mem"][below & ~0xFF][below & 0xFF :][:8], "little")
    plain, probed = report["unprobed"], report["probed"]
    for state in (plain, probed):
        assert state["signal"] == "SIGSEGV" and "non-canonical" in state["reason"]
        assert state["regs"]["rip"] == H.SITE and state["regs"]["rsp"] == H.STACK_TOP
        assert state["regs"]["rsi"] == H.initial_gprs()["rsi"]  # the scratch register is restored
    assert word(plain) == H.SITE + len(CALL_NONCANONICAL)
    assert report["action"] == "xol" and report["xol_area"]
    slot = word(probed) - len(CALL_NONCANONICAL)
    assert slot != H.SITE and slot >> 12 == 0x7FFFFFFFE  # a slot in the [uprobes] page


@x86_bpf
def test_host_and_lab_agree_on_a_probed_call_to_a_noncanonical_target(tmp_path):
    if not _intel_host():
        pytest.skip("the lab models an Intel CPU's #GP on a call to a non-canonical target")
    from uprobe_lab.verify.x86 import judge
    from uprobe_lab.verify.x86_host import HostPool
    from uprobe_lab.verify.x86_lab import lab_runs

    case = G.make_case("RIP-relative", CALL_NONCANONICAL, 0x202)
    (_, host), = HostPool(str(tmp_path), opmask=False, parallel=1, probe="bpf").run([(0, case.insn, case.flags)])
    lab = lab_runs(case, "6.18")
    for run, state in ((host["runs"][0], lab["unprobed"]), (host["runs"][2], lab["probed"])):
        assert run["signal"] == state["signal"] == "SIGSEGV" and run["sigaddr"] == 0  # #GP: no address
        assert {r: run["regs"][r] for r in H.GPRS + ["rip"]} == {r: state["regs"][r] for r in H.GPRS + ["rip"]}
        assert run["mem"] == state["mem"]  # the same return address below rsp: SITE+6 / the slot's
    assert judge(case, host, "6.18").status == "agree"


def test_a_case_that_never_ends_is_an_error_not_a_hang(tmp_path, monkeypatch):
    """A forked child still running after CHILD_TIMEOUT_S dies of SIGALRM; its case comes back as an
    error beside the others' reports (no host needed: the children here only loop or report)."""
    import faulthandler
    import time

    from uprobe_lab.verify import x86_host

    monkeypatch.setattr(x86_host, "CHILD_TIMEOUT_S", 1)

    def child(job):
        while job.key == "loops":
            time.sleep(0.05)
        return {"ran": job.key}

    jobs = [x86_host.Job(key, b"\x90", 0, False, str(tmp_path / f"{key}.bin")) for key in ("loops", "ends")]
    faulthandler.dump_traceback_later(60, exit=True)  # should the child never be killed, end the test run
    try:
        got = dict(x86_host.HostPool(str(tmp_path), opmask=False, parallel=2)._run(jobs, child))
    finally:
        faulthandler.cancel_dump_traceback_later()
    assert got["ends"] == {"ran": "ends"}
    assert "died without a report" in got["loops"]["error"] and "1 s" in got["loops"]["error"]


def _children(pid: int) -> list[int]:
    """The live (not zombie) processes whose parent is ``pid``."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[1] == str(pid) and fields[0] != "Z":
            found.append(int(entry))
    return found


def _verify_running(scratch, *args):
    """``python -m uprobe_lab verify`` with its scratch directory in ``scratch``, once its children run."""
    import subprocess
    import sys
    import time

    env = {**os.environ, "UPROBE_LAB_NATIVE_DIR": str(scratch)}
    run = subprocess.Popen([sys.executable, "-m", "uprobe_lab", "verify", "--no-sweeps", *args], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (os.listdir(scratch) and _children(run.pid)):
        assert run.poll() is None and time.monotonic() < deadline, run.stderr.read() if run.poll() else "no start"
        time.sleep(0.05)
    return run, _children(run.pid)


@pytest.mark.slow
@x86_host
def test_sigterm_to_verify_leaves_no_directory_and_no_child(private_scratch):
    import signal

    run, children = _verify_running(private_scratch, "--sample", "3000")
    run.send_signal(signal.SIGTERM)
    _, err = run.communicate(timeout=60)
    assert run.returncode == 130 and err.endswith("interrupted\n"), err
    assert os.listdir(private_scratch) == [] and not [c for c in children if c in _children(1) or
                                                       os.path.exists(f"/proc/{c}/stat")]


@pytest.mark.slow
@x86_host
def test_verify_killed_hard_takes_its_children_and_the_next_run_removes_its_directory(private_scratch):
    import time

    run, children = _verify_running(private_scratch, "--sample", "3000")
    left = os.listdir(private_scratch)
    run.kill()
    run.communicate(timeout=60)
    deadline = time.monotonic() + 5
    while [c for c in children if os.path.exists(f"/proc/{c}/stat")] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [c for c in children if os.path.exists(f"/proc/{c}/stat")]  # SIGKILLed with their parent
    assert os.listdir(private_scratch) == left  # SIGKILL runs no cleanup
    assert verify("x86_64", sample=1, sweeps=False).verdicts
    assert os.listdir(private_scratch) == []
