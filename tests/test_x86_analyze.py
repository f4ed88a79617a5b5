"""arch_uprobe_analyze_insn decides as the kernel does: emulate, single-step out of line, or refuse."""
import pytest

from uprobe_lab.kernel import get_kernel, kernel_for_release
from uprobe_lab.program import disasm
from uprobe_lab.uprobes import UnprobeableInstruction
from uprobe_lab.x86.analyze import analyze_hex, analyze_table
from uprobe_lab.x86.decode import arch_uprobe_analyze_insn

# (bytes, Capstone's text, action on 6.11, action on 6.16+)
TABLE = [
    ("90", "nop", "emulate", "emulate"),
    ("f390", "pause", "emulate", "emulate"),  # prefix* + 0x90
    ("6690", "nop", "emulate", "emulate"),
    ("0f1f440000", "nop dword ptr [rax + rax]", "xol", "emulate"),  # nop5: stepped until 6.16
    ("0f1f00", "nop dword ptr [rax]", "xol", "emulate"),
    ("0f1f840000000000", "nop dword ptr [rax + rax]", "xol", "emulate"),  # x86_nops[8]
    ("0f1f840000000001", "nop dword ptr [rax + rax + 0x1000000]", "xol", "xol"),  # not byte-identical
    # x86_nops[9..11]: the 0x2e (CS) prefix is_prefix_bad() refuses comes before any nop rule
    ("2e0f1f840000000000", "nop dword ptr cs:[rax + rax]", "reject", "reject"),
    ("662e0f1f840000000000", "nop word ptr cs:[rax + rax]", "reject", "reject"),
    ("66662e0f1f840000000000", "nop word ptr cs:[rax + rax]", "reject", "reject"),
    ("55", "push rbp", "emulate", "emulate"),
    ("4153", "push r11", "emulate", "emulate"),  # REX 0x41 form
    ("4853", "push rbx", "xol", "xol"),  # REX.W form is not the 0x41 form
    ("eb10", "jmp 0x400012", "emulate", "emulate"),
    ("e900010000", "jmp 0x400105", "emulate", "emulate"),
    ("e800010000", "call 0x400105", "emulate", "emulate"),
    ("7405", "je 0x400007", "emulate", "emulate"),
    ("0f8500010000", "jne 0x400106", "emulate", "emulate"),
    ("c3", "ret", "xol", "xol"),
    ("c20800", "ret 8", "xol", "xol"),
    ("4889e5", "mov rbp, rsp", "xol", "xol"),
    ("ffd0", "call rax", "xol", "xol"),
    ("ffe0", "jmp rax", "xol", "xol"),
    ("5d", "pop rbp", "xol", "xol"),
    ("b801000000", "mov eax, 1", "xol", "xol"),
    # function entries chapters 01 and 08 and the cheat sheet name: push of an immediate is not push_setup_xol_ops'
    # (register pushes only); endbr64 and a lea are stepped; a short jmp is emulated
    ("6a01", "push 1", "xol", "xol"),
    ("f30f1efa", "endbr64", "xol", "xol"),
    ("488d447f01", "lea rax, [rdi + rdi*2 + 1]", "xol", "xol"),
    ("eb00", "jmp 0x400002", "emulate", "emulate"),
    # exercise 01.1's: jrcxz is a conditional jump but not a jcc (is_cond_jmp_opcode: 70-7f), so it is stepped;
    # port I/O (e4-e7, ec-ef) is not in good_insns_64
    ("e305", "jrcxz 0x400007", "xol", "xol"),
    ("e460", "in al, 0x60", "reject", "reject"),
    ("cc", "int3", "reject", "reject"),
    ("cd80", "int 0x80", "reject", "reject"),
    ("cf", "iretd", "reject", "reject"),
    ("0f05", "syscall", "xol", "xol"),  # every 0f xx passes good_insns_64 (bit 0x0f is set)
    ("0f0b", "ud2", "xol", "xol"),
    ("0faee8", "lfence", "xol", "xol"),
    ("f4", "hlt", "reject", "reject"),
    ("fa", "cli", "reject", "reject"),
    ("fb", "sti", "reject", "reject"),
    ("f0ff00", "lock inc dword ptr [rax]", "reject", "reject"),
    ("2e8b00", "mov eax, dword ptr cs:[rax]", "reject", "reject"),
    ("3e8b00", "mov eax, dword ptr ds:[rax]", "reject", "reject"),
    ("648b00", "mov eax, dword ptr fs:[rax]", "xol", "xol"),  # fs/gs prefixes are fine
    ("8ed0", "mov ss, eax", "reject", "reject"),  # masks exceptions
    ("66eb00", "jmp 0x400003", "reject", "reject"),  # 0x66 branch
    ("488b0500000000", "mov rax, qword ptr [rip]", "xol", "xol"),  # operand rewritten to a scratch register
    # VEX/EVEX: the kernel tests the opcode byte after the prefix (OPCODE1) against the same tables.
    # Each row was asked of a 6.18 host by `python -m uprobe_lab verify` (host action in the comment).
    ("62f1fe486f00", "vmovdqu64 zmm0, zmmword ptr [rax]", "reject", "reject"),  # host: -ENOTSUPP (0x6f is outs)
    ("62f17c4858ca", "vaddps zmm1, zmm0, zmm2", "xol", "xol"),  # host: xol (0x58 is pop)
    ("c5f9efc0", "vpxor xmm0, xmm0, xmm0", "reject", "reject"),  # host: -ENOTSUPP (0xef is "out")
    ("c5f877", "vzeroupper", "emulate", "emulate"),  # host: emulated as ja (0x77): kernel bug
    ("c5fd74c1", "vpcmpeqb ymm0, ymm0, ymm1", "emulate", "emulate"),  # host: emulated as je: kernel bug
    ("c4e1f890c1", "kmovq k0, k1", "emulate", "emulate"),  # host: "nop" (0x90), optimised on 6.18
    # the rest of chapter 01's table of the bug
    ("c5f970ca11", "vpshufd xmm1, xmm2, 0x11", "emulate", "emulate"),  # 0x70: jo, its imm8 the offset
    ("c5f1e8c2", "vpsubsb xmm0, xmm1, xmm2", "emulate", "emulate"),  # 0xe8: call
    ("62f17d4870ca11", "vpshufd zmm1, zmm2, 0x11", "emulate", "emulate"),  # EVEX, 0x70: jo
    ("c5f0c2c201", "vcmpltps xmm0, xmm1, xmm2", "xol", "xol"),  # 0xc2: stepped with no ip fixup
    ("c5f9fec1", "vpaddd xmm0, xmm0, xmm1", "xol", "xol"),  # 0xfe: stepped, as it should be
    ("f20f78c10102", "insertq xmm0, xmm1, 1, 2", "reject", "reject"),  # host: -ENOEXEC (SSE4a, not in its map)
    ("660f79c1", "extrq xmm0, xmm1", "reject", "reject"),  # host: -ENOEXEC
]


@pytest.mark.parametrize("raw,text,a611,a616", TABLE, ids=[r[0] for r in TABLE])
def test_classification(raw, text, a611, a616):
    (_, got_raw, got_text), = disasm(bytes.fromhex(raw), "x86_64", 0x400000)
    assert got_raw.hex() == raw and got_text == text  # the table itself is what it claims
    for kernel, expected in (("6.10", a611), ("6.11", a611), ("6.16", a616), ("6.18", a616)):
        assert analyze_hex(raw, get_kernel(kernel))["action"] == expected, kernel


def test_rejections_explain_themselves():
    with pytest.raises(UnprobeableInstruction, match="lock prefix"):
        arch_uprobe_analyze_insn(bytes.fromhex("f0ff00"), 0x400000, get_kernel())
    with pytest.raises(UnprobeableInstruction, match="good_insns"):
        arch_uprobe_analyze_insn(b"\xcc", 0x400000, get_kernel())
    with pytest.raises(UnprobeableInstruction, match="does not decode"):
        arch_uprobe_analyze_insn(bytes.fromhex("0f"), 0x400000, get_kernel())


def test_branch_offsets_and_fixups():
    k = get_kernel("6.18")
    jmp = arch_uprobe_analyze_insn(bytes.fromhex("eb10"), 0x400000, k)
    assert (jmp.ops, jmp.branch_opc1, jmp.branch_offs) == ("branch", 0xEB, 0x10)
    jne = arch_uprobe_analyze_insn(bytes.fromhex("0f8500010000"), 0x400000, k)
    assert jne.branch_opc1 == 0x75 and jne.branch_offs == 0x100  # near jcc checks the short jcc's condition
    call = arch_uprobe_analyze_insn(bytes.fromhex("ffd0"), 0x400000, k)
    assert call.fixups == 0x02  # UPROBE_FIX_CALL
    ret = arch_uprobe_analyze_insn(b"\xc3", 0x400000, k)
    assert ret.fixups == 0
    mov = arch_uprobe_analyze_insn(bytes.fromhex("4889e5"), 0x400000, k)
    assert mov.fixups == 0x01  # UPROBE_FIX_IP


def test_analyze_hex_errors():
    from uprobe_lab.errors import LabError
    with pytest.raises(LabError, match="not hex"):
        analyze_hex("zz", get_kernel())
    with pytest.raises(LabError, match="more than one instruction"):
        analyze_hex("90c3", get_kernel())


def test_analyze_table_gives_each_row_the_kernels_decision_in_brief():
    hexes = ["90", "f0 ff 00", "cc", "0f1f440000", "e8 00 00 00 00"]
    df = analyze_table(hexes, kernel="6.11")
    assert list(df.columns) == ["bytes", "mnemonic", "op_str", "length", "action", "reason"]
    assert list(df["bytes"]) == ["90", "f0 ff 00", "cc", "0f 1f 44 00 00", "e8 00 00 00 00"]
    assert list(df["action"]) == ["emulate", "reject", "reject", "xol", "emulate"]  # nop5 is emulated from 6.16 only
    assert list(df["reason"]) == [
        "prefix* + 0x90: emulated as a nop",  # 6.11: before x86_nops[] (6.16)
        "lock inc dword ptr [rax]: the lock prefix (0xf0) is refused by is_prefix_bad() (-ENOTSUPP)",
        "int3 (opcode cc) is not in the kernel's good_insns table",
        "single-stepped out of line, then ip += vaddr - xol_vaddr",
        "call rel32: emulated (push the return address, ip += offset)"]
    # analyze_hex keeps the whole verdict: the way out of a refusal, the site's life, the shadow-stack remark
    whole = [analyze_hex(h, get_kernel("6.11"))["reason"] for h in hexes]
    assert whole[2].endswith("pick a neighbouring instruction") and whole[1].endswith("probe another instruction")
    assert "the site is never rewritten" in whole[0] and "shadow stack" in whole[4]
    # a site rewritten after its first hit says so in the table too
    assert analyze_table(["0f1f440000"], kernel="6.18").loc[0, "reason"].endswith(
        "rewritten into call [uprobes-trampoline] after its first hit on 6.18")
    assert analyze_table(["0f1f440000"]).loc[0, "action"] == analyze_hex("0f1f440000", get_kernel())["action"]


def test_an_emulated_call_says_what_a_shadow_stack_task_gets():
    """abf08854d224 (7.2, perf-urgent-2026-07-05): the kernel pushes an emulated call's return address on the
    user shadow stack too; the lab's tasks have none, and analyze says both."""
    for kernel, has in ((get_kernel("7.3"), True), (kernel_for_release("7.2.0"), True), (get_kernel("6.18"), False)):
        reason = analyze_hex("e800010000", kernel)["reason"]
        assert "the lab's tasks have no shadow stack" in reason
        assert ("pushes the return address there too" in reason) is has
        assert ("does not push the return address there" in reason) is not has


# (bench whose probed site is these bytes, bytes, kernel): the analyzer's word on the site's life must match what
# the emulator's steady-state hit runs: a rewritten site is entered by the trampoline's syscall, any other by int3
LIVES = [("uprobe-nop5", "0f1f440000", "6.16"), ("uprobe-nop5", "0f1f440000", "6.18"),
         ("uprobe-nop5", "0f1f440000", "7.3"), ("uprobe-nop10", "662e0f1f840000000000", "7.3")]


@pytest.mark.parametrize("bench,raw,kernel", LIVES, ids=[f"{b}-{k}" for b, _, k in LIVES])
def test_reason_names_what_later_hits_run(bench, raw, kernel):
    from uprobe_lab import events_per_hit
    reason = analyze_hex(raw, get_kernel(kernel))["reason"]
    later = events_per_hit(bench, kernel=kernel)
    if later.get("syscalls"):
        assert later.get("exceptions", 0) == 0
        into = "lea -0x80(%rsp),%rsp; call" if len(raw) == 20 else "call"
        assert f"first hit (int3) emulates it, then the site is rewritten into {into} [uprobes-trampoline]" in reason
    else:
        assert later["exceptions"] == 1 and "every hit is an int3, then emulated: the site is never rewritten" in reason


def test_cli_names_the_rewrite_of_6_18s_nop5(capsys):
    """The line chapter 03b prints: 6.18 rewrites its nop5 into a call after the first hit (arch_uprobe_optimize
    in 6.18's arch/x86/kernel/uprobes.c), which 6.16 (no optimised uprobe) never does."""
    from uprobe_lab import cli
    assert cli.main(["analyze", "0f1f440000", "--kernel", "6.18"]) == 0
    assert "then the site is rewritten into call [uprobes-trampoline]" in capsys.readouterr().out
    assert cli.main(["analyze", "0f1f440000", "--kernel", "6.16"]) == 0
    assert "on 6.16 every hit is an int3, then emulated" in capsys.readouterr().out
