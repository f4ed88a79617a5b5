"""The x86-64 kernels referee (uprobe_lab.verify.x86_kernels): Debian's kernels from 6.1 to 7.3, each
booted under QEMU and asked what the lab claims of it.

The recorded reports (data/x86_kernels_referee.json) are real kernels' answers: they are judged against
the emulator here without booting anything, and checked for the facts the course states per version.
The live test boots every line again where qemu-system-x86_64, busybox and the Debian archive are at
hand, and skips with the reason elsewhere.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from uprobe_lab.native.scheme import classify
from uprobe_lab.verify import x86_boot as B
from uprobe_lab.verify import x86_guest as G
from uprobe_lab.verify import x86_kernels as K

REPO = Path(__file__).resolve().parents[1]
ENOSYS, ENXIO, EPROTO = 38, 6, 71
UPROBES, TRAMPOLINE = "[uprobes]", "[uprobes-trampoline]"
# push rax; push rcx; push r11; mov rax, 335; syscall; pop r11; pop rcx; ret (6.11 ff474a78cef5); 6.18's
# 354492a0e1bc adds an int3 after the ret
URETPROBE_SYSCALL_TRAMPOLINE = "5051415348c7c04f0100000f05415b59c3"
# push rcx; push r11; push rax; mov rax, 336; syscall; pop rax; pop r11; pop rcx; ret $0x80; int3 (the nop10's)
NOP10_TRAMPOLINE = "5141535048c7c0500100000f0558415b59c28000cc"


@pytest.fixture(scope="module")
def recorded():
    return {r["line"]: r for r in K.load_recording()}


def _trampoline(snap: dict, name: str) -> str | None:
    return {t["name"]: t["bytes"] for t in snap["trampolines"]}.get(name)


def test_the_recording_has_every_line_on_its_own_release(recorded):
    assert set(recorded) == set(B.KERNEL_LINES)
    for line, r in recorded.items():
        assert r["release"].startswith(line + "."), (line, r["release"])
        assert set(r["snapshots"]) == set(G.BENCHES)


@pytest.mark.parametrize("line", list(B.KERNEL_LINES))
def test_every_recorded_answer_agrees_with_the_lab(recorded, line):
    verdicts = K.judge(recorded[line])
    assert len(verdicts) >= 20
    assert verdicts["same"].all(), "\n" + verdicts[~verdicts["same"]].to_string()


def test_syscall_336_tells_the_versions_apart(recorded):
    got = {line: r["scheme"]["syscall_336"] for line, r in recorded.items()}
    # 7.2 answers as 7.3 does: the nop10 scheme reached 7.2 (its sublevels 6 and 13 here), not only 7.3
    assert got == {"6.1": -ENOSYS, "6.12": -ENOSYS, "6.16": -ENOSYS, "6.18": -ENXIO, "7.2": -EPROTO, "7.3": -EPROTO}
    # the lab's reading of each kernel's raw answers (the recording's behaves_like is the lab's at record time)
    like = {line: classify(s["syscall_336"], s["nop5_rewritten"], s["nop10_rewritten"], s["nop10_refused"] is not None)[0]
            for line, s in ((line, r["scheme"]) for line, r in recorded.items())}
    assert like == {"6.1": "6.16", "6.12": "6.16", "6.16": "6.16", "6.18": "6.18", "7.2": "7.3", "7.3": "7.3"}


def test_the_return_trampoline_is_an_int3_before_6_11_then_the_syscall_then_an_int3_after_its_ret(recorded):
    slot0 = {line: _trampoline(r["snapshots"]["uretprobe-nop"], UPROBES) for line, r in recorded.items()}
    assert slot0["6.1"] == "cc"
    assert slot0["6.12"] == slot0["6.16"] == URETPROBE_SYSCALL_TRAMPOLINE
    assert slot0["6.18"] == slot0["7.2"] == slot0["7.3"] == URETPROBE_SYSCALL_TRAMPOLINE + "cc"


def test_nop5_is_stepped_then_emulated_then_optimised_then_emulated_again(recorded):
    nop5 = {line: r["snapshots"]["uprobe-nop5"] for line, r in recorded.items()}
    for line in ("6.1", "6.12"):  # stepped out of line: the XOL area appears
        assert nop5[line]["site_bytes"] == "cc1f440000" and UPROBES in {m["name"] for m in nop5[line]["mappings"]}
    for line in ("6.16", "7.2", "7.3"):  # emulated: int3 stays, no XOL area
        assert nop5[line]["site_bytes"] == "cc1f440000" and not nop5[line]["mappings"]
    for line in ("6.18",):  # rewritten into call [uprobes-trampoline]
        assert nop5[line]["optimized"] and nop5[line]["site_bytes"].startswith("e8")


def test_only_7_2_and_later_accept_and_rewrite_the_nop10(recorded):
    for line, r in recorded.items():
        snap = r["snapshots"]["uprobe-nop10"]
        if line in ("7.2", "7.3"):
            assert snap["site_bytes"] == "488d642480"  # lea -0x80(%rsp),%rsp, then the call
            assert _trampoline(snap, TRAMPOLINE) == NOP10_TRAMPOLINE
        else:
            assert snap["refused"] == G.REFUSED
        assert r["snapshots"]["uprobe-nop10-pagecross"]["refused"] == G.REFUSED  # never optimisable


def test_module_order_loads_dependencies_first(tmp_path):
    def ko(rel: str, depends: str) -> None:
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"\x7fELF...\0license=GPL\0depends=" + depends.encode() + b"\0intree=Y\0")

    ko("kernel/fs/9p/9p.ko", "netfs,9pnet")
    ko("kernel/net/9p/9pnet_virtio.ko", "9pnet,virtio_ring")
    ko("kernel/net/9p/9pnet.ko", "")
    ko("kernel/fs/netfs/netfs.ko", "")
    (tmp_path / "modules.builtin").write_text("kernel/drivers/virtio/virtio_pci.ko\nkernel/drivers/virtio/virtio_ring.ko\n")
    order = [p.name for p in B.module_order(tmp_path)]
    # virtio_pci and virtio_ring are built in here, as in Debian's 6.12 and later: nothing to load
    assert order == ["9pnet.ko", "9pnet_virtio.ko", "netfs.ko", "9p.ko"]
    (tmp_path / "modules.builtin").write_text("")
    with pytest.raises(B.RefereeUnavailable, match="virtio_pci is neither unpacked"):
        B.module_order(tmp_path)


def test_newest_package_takes_the_highest_sublevel_of_the_line(monkeypatch):
    names = "linux-image-6.12.100+deb12-amd64 linux-image-6.12.117+deb12-amd64 linux-image-6.12.99+deb12-amd64 " \
            "linux-image-6.12.117+deb12-cloud-amd64 linux-image-6.1.0-50-amd64 linux-image-6.1.0-9-amd64"
    monkeypatch.setattr(B, "apt_update", lambda **kw: None)
    monkeypatch.setattr(B, "run_tool", lambda cmd, what, timeout=600: names)
    assert B.newest_package("6.12") == "linux-image-6.12.117+deb12-amd64"
    assert B.newest_package("6.1") == "linux-image-6.1.0-50-amd64"
    with pytest.raises(B.RefereeUnavailable, match="7.3 line"):
        B.newest_package("7.3")


def test_initramfs_holds_init_busybox_command_and_modules(tmp_path, monkeypatch):
    busybox = tmp_path / "busybox"
    busybox.write_bytes(b"BUSYBOX")
    monkeypatch.setattr(B, "BUSYBOX", str(busybox))
    (tmp_path / "mods/kernel/fs/9p").mkdir(parents=True)
    (tmp_path / "mods/kernel/fs/9p/9p.ko").write_bytes(b"ELF\0depends=\0")
    (tmp_path / "mods/modules.builtin").write_text("kernel/drivers/virtio/virtio_pci.ko\nkernel/net/9p/9pnet_virtio.ko\n")
    kernel = B.Kernel("7.3", "linux-image-7.3.4+deb13-amd64", "7.3.4-1~bpo13+1", tmp_path / "vmlinuz", tmp_path / "mods")
    cpio = B.guest_initramfs(kernel, "echo hello", "/work/lab")
    for part in (b"init\0", b"bin/busybox\0", b"BUSYBOX", b"cmd\0", b"echo hello", b"/work/lab", b"mods/9p.ko\0",
                 b"TRAILER!!!"):
        assert part in cpio
    assert cpio.startswith(b"070701")


def test_a_missing_busybox_names_the_package(tmp_path, monkeypatch):
    monkeypatch.setattr(B, "BUSYBOX", str(tmp_path / "none"))
    kernel = B.Kernel("7.3", "p", "v", tmp_path / "vmlinuz", tmp_path)
    with pytest.raises(B.RefereeUnavailable, match="busybox-static"):
        B.guest_initramfs(kernel, "true", "/")


# --- real kernels ----------------------------------------------------------------------------

def _boot_and_report(line: str) -> dict:
    for tool, package in ((B.QEMU, "qemu-system-x86"), ("apt-get", "apt"), ("dpkg-deb", "dpkg")):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (apt-get install {package}): the referee boots Debian's kernels")
    if not shutil.os.path.exists(B.BUSYBOX):
        pytest.skip(f"{B.BUSYBOX} is missing (apt-get install busybox-static): the guest's init runs it")
    try:
        return K.boot_and_report(line)
    except B.RefereeUnavailable as err:
        pytest.skip(f"no {line} kernel to boot: {err}")


@pytest.mark.qemu
@pytest.mark.parametrize("line", list(B.KERNEL_LINES))
def test_real_kernel_agrees_with_the_lab(line):
    """One boot per kernel line, each its own test, so a parallel run spreads the boots over the CPUs."""
    report = _boot_and_report(line)
    assert report["line"] == line and report["release"].startswith(line + ".")
    verdicts = K.judge(report)
    assert verdicts["same"].all(), f"{report['release']}:\n" + verdicts[~verdicts["same"]].to_string()


@pytest.mark.slow
def test_the_guest_report_leaves_pandas_out(native_host):
    """Under TCG importing pandas costs a guest about a third of its run: the guest half never imports it."""
    src = ("import sys; from uprobe_lab.verify.x86_guest import guest_report; r = guest_report(); "
           "print(sorted(r), 'pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", src], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == "False" and "'snapshots']" in out.stdout, out.stdout


def test_summary_names_each_kernels_sites_and_answers(recorded):
    table = K.summary(list(recorded.values()))
    by_line = {line: table.iloc[i] for i, line in enumerate(recorded)}
    assert by_line["6.1"]["nop5 site"] == "int3, stepped in [uprobes]" and by_line["6.1"]["return trampoline"] == "int3"
    assert by_line["6.16"]["nop5 site"] == "int3, emulated" and by_line["6.12"]["return trampoline"] == "syscall 335"
    assert by_line["6.18"]["return trampoline"] == "syscall 335, int3 after the ret"
    assert by_line["6.18"]["nop5 site"] == "call [uprobes-trampoline]+0x0" and by_line["6.18"]["syscall 336"] == "-ENXIO"
    assert by_line["7.2"]["nop10 site"] == "lea -0x80(%rsp),%rsp; call [uprobes-trampoline]"
    assert by_line["7.3"]["syscall 336"] == "-EPROTO" and by_line["6.1"]["nop10 site"] == "refused"
    assert all(a.split("/")[0] == a.split("/")[1] for a in table["agree with the lab"])
    fork = table["forked child at the optimised site"]
    assert [fork[i] for i in range(len(table))] == ["no site optimised"] * 3 + [
        "SIGSEGV, its site: call into an unmapped page"] + ["exit 0, its site: lea; call [uprobes-trampoline]"] * 2


def test_a_forked_child_keeps_no_xol_area_and_on_618_no_trampoline(recorded):
    # __create_xol_area() maps [uprobes] VM_DONTCOPY on every line; 6.18's create_uprobe_trampoline() maps
    # [uprobes-trampoline] VM_DONTCOPY too, and d9a48e77f6fe (7.3; 7.2.y) lets fork copy it
    for line, r in recorded.items():
        ret = r["fork"]["uprobe_target_ret"]
        assert (ret["child maps"], ret["child"], ret["child hits"], ret["child maps after"]) == (
            "none", "exit 0", 2, UPROBES), line
    nop5 = recorded["6.18"]["fork"]["uprobe_target_nop5"]
    assert (nop5["parent maps"], nop5["child maps"], nop5["child"], nop5["child hits"]) == (TRAMPOLINE, "none",
                                                                                            "SIGSEGV", 0)
    for line in ("7.2", "7.3"):
        nop10 = recorded[line]["fork"]["uprobe_target_nop10"]
        assert (nop10["child maps"], nop10["child"], nop10["child hits"]) == (TRAMPOLINE, "exit 0", 2), line


def test_verify_kernels_command_judges_what_the_referee_returns(recorded, monkeypatch, tmp_path, capsys):
    from uprobe_lab.cli import main

    asked = []
    monkeypatch.setattr(K, "referee", lambda lines, progress=None: asked.append(lines) or [recorded["6.18"]])
    out = tmp_path / "record.json"
    assert main(["verify", "--kernels", "6.18", "--record", str(out)]) == 0
    assert asked == [("6.18",)]
    text = capsys.readouterr().out
    assert "6.18.15+deb13-amd64" in text and "42 of 42 answers agree across 1 kernels" in text
    assert K.load_recording(out) == [recorded["6.18"]]
    # an answer the lab does not share: exit status 2 and the row that differs
    wrong = {**recorded["6.18"], "scheme": {**recorded["6.18"]["scheme"], "syscall_336": -71}}
    monkeypatch.setattr(K, "referee", lambda lines, progress=None: [wrong])
    assert main(["verify", "--kernels"]) == 2
    assert "syscall 336 off the trampoline" in capsys.readouterr().out


def test_verify_kernels_says_why_it_cannot_boot(monkeypatch, capsys):
    from uprobe_lab.cli import main

    def unavailable(lines, progress=None):
        raise B.RefereeUnavailable("qemu-system-x86_64 is not installed: apt-get install qemu-system-x86")

    monkeypatch.setattr(K, "referee", unavailable)
    assert main(["verify", "--kernels", "7.3"]) == 1
    assert "apt-get install qemu-system-x86" in capsys.readouterr().err
