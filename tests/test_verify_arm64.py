"""The arm64 referee: its encoders, guest and cases, the lab's side, and a real kernel booted once.

The boot needs qemu-system-aarch64 and Debian's arm64 kernel package (fetched with apt-get
download into ~/.cache/uprobe_lab); where either cannot be had the module's boot tests skip and
say why. CI installs qemu-system-arm (.ci/run).
"""
import shutil
import struct
from dataclasses import replace

import pytest
from unicorn import UC_ARCH_ARM64, UC_HOOK_INTR, UC_MODE_ARM, Uc
from unicorn import arm64_const as A

from uprobe_lab.arm64 import asm
from uprobe_lab.kernel import kernel_for_release
from uprobe_lab.program import disasm
from uprobe_lab.verify import arm64 as V
from uprobe_lab.verify import arm64_cases as C
from uprobe_lab.verify import arm64_enc as enc
from uprobe_lab.verify import arm64_guest as G
from uprobe_lab.verify import arm64_judge as J
from uprobe_lab.verify import arm64_layout as L

ENCODINGS = [
    (asm.movz(0, 0x2000, shift=16), "mov x0, #0x20000000"),
    (enc.movk(1, 0x40, 16), "movk x1, #0x40, lsl #16"),
    (enc.movn(0, 99), "mov x0, #-0x64"),
    (enc.mrs(1, "tpidr_el0"), "mrs x1, tpidr_el0"),
    (enc.msr("nzcv", 0), "msr nzcv, x0"),
    (asm.ldr_imm(0, 30, 256), "ldr x0, [x30, #0x100]"),
    (asm.str_imm(1, 0, 248), "str x1, [x0, #0xf8]"),
    (enc.ldr_w(1, 1, 0), "ldr w1, [x1]"),
    (enc.str_w(24, 7, 0), "str w24, [x7]"),
    (enc.ldr_q(0, 30, 272), "ldr q0, [x30, #0x110]"),
    (enc.str_q(1, 0, 288), "str q1, [x0, #0x120]"),
    (enc.ldrb_reg(4, 23, 1), "ldrb w4, [x23, x1]"),
    (enc.ldr_w_reg(2, 21, 1), "ldr w2, [x21, x1]"),
    (enc.ldr_x_reg(3, 2, 1), "ldr x3, [x2, x1]"),
    (enc.str_x_reg(3, 23, 1), "str x3, [x23, x1]"),
    (enc.ldrb_post(2, 1), "ldrb w2, [x1], #1"),
    (enc.strb_post(5, 3), "strb w5, [x3], #1"),
    (enc.sub_imm(4, 1, 1), "sub x4, x1, #1"),
    (enc.sub_w_imm(2, 2, 48), "sub w2, w2, #0x30"),
    (enc.cmp_reg(19, 20), "cmp x19, x20"),
    (enc.cmp_w_reg(2, 3), "cmp w2, w3"),
    (enc.cmp_w_imm(2, 9), "cmp w2, #9"),
    (enc.lsl_imm(5, 5, 4), "lsl x5, x5, #4"),
    (enc.lsr_imm(5, 4, 4), "lsr x5, x4, #4"),
    (enc.and_0xf(5, 4), "and x5, x4, #0xf"),
    (enc.orr_reg(1, 19, 2), "orr x1, x19, x2"),
    (enc.madd(24, 24, 10, 2), "madd x24, x24, x10, x2"),
]


@pytest.mark.parametrize("word,text", ENCODINGS, ids=[t for _, t in ENCODINGS])
def test_guest_encoders_match_capstone(word, text):
    assert disasm(asm.b(word), "arm64", 0x1000)[0][2] == text


def test_every_guest_and_case_word_decodes():
    """The whole /init text and every case page (code part) decode as instructions, the udf/MOPS
    forms (Capstone 5 has no FEAT_MOPS) and the brk #1000 filler excepted."""
    elf = G.build_init()
    code = elf[0x80: L.FINISH - G.INIT_BASE]
    listing = disasm(code.rstrip(b"\0"), "arm64", G.INIT_BASE + 0x80)
    assert len(listing) * 4 == len(code.rstrip(b"\0")) - (len(code.rstrip(b"\0")) % 4)
    for i, case in enumerate(C.all_cases()):
        if case.cls in ("udf", "mops"):
            continue
        assert disasm(asm.b(case.word), "arm64")[0][2], case


def test_the_sweep_covers_every_decode_class_with_300_forms():
    cases = C.all_cases()
    classes = {c.cls for c in cases}
    assert len(cases) >= 300
    assert {"branch", "adr/adrp", "ldr-literal", "fp-ldr-literal", "prfm-literal", "exclusive", "atomic", "hint",
            "mrs", "msr", "simd-fp", "load-store", "stp-fp-lr", "udf", "exception", "pac-branch", "uretprobe"} <= classes
    assert len({c.word for c in cases if c.cls == "hint"}) == 128  # the whole HINT space
    # literal loads of every width: w, x, sw, prfm, s, d, q
    assert {c.word & 0xFF000000 for c in cases if "literal" in c.cls} == {
        0x18000000, 0x58000000, 0x98000000, 0xD8000000, 0x1C000000, 0x5C000000, 0x9C000000}


def test_a_case_starts_with_its_own_flags_and_vector_registers():
    """The init block (x0-x30, sp, nzcv, pad, v0, v1: 304 bytes) must not share bytes with the literal
    pool, which slot_code writes after it. Worked by hand: b.eq with Z clear falls through (pad 2),
    b.mi with N set branches forward (pad 3); the pad records the flags and v0 the case started with."""
    pool = range(L.LIT, L.LIT + len(L.literal_pool()))
    init = range(L.INIT, L.INIT + L.INIT_V1 + 16)
    assert not set(pool) & set(init)
    kernel = kernel_for_release("6.1.0-57-arm64")
    for word, nzcv, pad in ((0x54000040, 0, 2), (0x54000044, 0x8 << 28, 3), (0x54000042, 0x2 << 28, 3),
                            (0x5400004C, 0x8 << 28, 2)):  # b.eq, b.mi, b.cs, b.gt with N != V
        run = J.lab_run(C.Case("branch", word, nzcv=nzcv), 0, kernel, False)
        assert (run.values["nzcv"], run.values["pad"]) == (nzcv, pad), hex(word)
        assert run.values["v0"] == L.V0.hex()


def test_branch_outcomes_give_every_condition_both_ways():
    """Per b.cond condition, the sweep has a taken and a not-taken case, and cbz/cbnz/tbz/tbnz are
    taken backwards (to pad_back), so the sign extension of imm19/imm14 is judged."""
    from uprobe_lab.arm64.simulate import condition_check
    cases = C.all_cases()
    seen = {}
    for c in cases:
        if c.cls == "branch" and (c.word & 0xFF000010) == 0x54000000:
            seen.setdefault(c.word & 0xF, set()).add(condition_check(c.word & 0xF, c.nzcv))
    assert all(seen[cond] == {True, False} for cond in range(14)), seen
    kernel = kernel_for_release("6.1.0-57-arm64")
    n0 = len(cases) - len(C.branch_outcomes())
    back = [(i, c) for i, c in enumerate(cases) if i >= n0 and (c.word & 0xFF000010) != 0x54000000]
    assert len(back) == 6 and all(J.lab_run(c, i, kernel, False).values["pad"] == 1 for i, c in back)


def test_cpio_is_newc_with_console_and_trailer():
    blob = G.cpio_newc({"init": b"\x7fELF"})
    assert blob.startswith(b"070701") and b"dev/console\0" in blob and b"TRAILER!!!\0" in blob
    assert len(blob) % 4 == 0


def test_kernel_for_release_follows_each_rule_by_version():
    k61, k612, k613, k73 = (kernel_for_release(r) for r in ("6.1.0-57-arm64", "6.12.117+deb13-arm64", "6.13.2", "7.3.4"))
    assert (k61.arm64_simulate_nop, k612.arm64_simulate_nop, k613.arm64_simulate_nop) == (False, False, True)
    assert (k61.arm64_reject_mops, k612.arm64_reject_mops) == (False, True)
    assert k61.name.startswith("6.1 ") and not k61.uretprobe_syscall and k73.uretprobe_syscall
    assert not kernel_for_release("6.10.14").arm64_refuse_ldr_literal and (k612.arm64_refuse_ldr_literal, k73.arm64_refuse_ldr_literal) == (True, True)


def test_ldr_literal_refusal_follows_its_stable_backport():
    """CVE-2024-50099: refused from 6.12, in 6.1.y from 6.1.114 and 6.11.y from 6.11.5 (stable review
    mails 6.1.114-rc1 and 6.11.5-rc1 list 'arm64: probes: Remove broken LDR (literal) uprobe support')."""
    assert not kernel_for_release("6.1.113").arm64_refuse_ldr_literal
    assert kernel_for_release("6.1.0-57-arm64", "6.1.192-3").arm64_refuse_ldr_literal  # Debian's ABI string + version
    assert not kernel_for_release("6.11.4").arm64_refuse_ldr_literal
    assert kernel_for_release("6.11.5").arm64_refuse_ldr_literal and kernel_for_release("6.12.0").arm64_refuse_ldr_literal


def test_before_the_fix_a_probed_ldr_literal_kills_the_task():
    word = asm.ldr_lit(0, L.LIT - L.P)
    case = C.Case("t", word)
    old = kernel_for_release("6.1.100")
    assert J.verdict(case, J.lab_run(case, 0, old, True)).startswith("simulated")
    probed = J.lab_run(case, 0, old, True)
    assert probed.sig == 11 and probed.sig_pc == L.slot_base(0) + L.P
    assert _lab_verdicts(word, "6.12.0")[0] == "refused (errno 22)"


def _lab_verdicts(word, release):
    case = C.Case("t", word)
    kernel = kernel_for_release(release)
    un, pr = J.lab_run(case, 0, kernel, False), J.lab_run(case, 0, kernel, True)
    return J.verdict(case, pr), J.effect(un, pr, L.slot_base(0)), pr


def test_lab_steps_nop_before_6_13_and_simulates_it_after():
    assert _lab_verdicts(asm.NOP, "6.1.0-57-arm64")[0] == "stepped"
    assert _lab_verdicts(asm.NOP, "6.13.0")[0] == "simulated"


def test_lab_reproduces_the_fp_literal_bug():
    """ldr s1, #-4 stepped from XOL slot 1 reads slot 0: the brk #5 trampoline word (d42000a0),
    where unprobed it reads the 'b pad_back' word before it. Worked out from the layout by hand."""
    word = 0x1CFFFFE1  # ldr s1, #-4
    verdict, effect, probed = _lab_verdicts(word, "6.1.0-57-arm64")
    assert verdict == "stepped"
    assert effect == {"v1": "a00020d4" + "00" * 12}
    assert probed.xol_bytes[:8] == asm.b(asm.BRK64_OPCODE_UPROBES) + asm.b(word)
    assert J.known_bug(word)


def test_lab_refuses_brk5_with_enotsupp_and_delivers_xol_faults_at_the_probe():
    assert _lab_verdicts(asm.BRK64_OPCODE_UPROBES, "6.1.0-57-arm64")[0] == "refused (errno 524)"
    assert _lab_verdicts(asm.brk(0), "6.1.0-57-arm64")[0] == "refused (errno 22)"
    verdict, effect, probed = _lab_verdicts(0x0000DEAD, "6.1.0-57-arm64")  # udf: stepped, SIGILL
    assert verdict == "stepped" and probed.sig == 4 and effect == {}  # same signal, same pc as unprobed
    assert probed.sig_pc == L.slot_base(0) + L.P


def test_random_words_are_seeded_drawn_from_their_groups_and_never_loop():
    """A third each: any word, the load/store group (op0 x1x0) and the branch/exception/system group
    (op0 101x); the same seed gives the same words, another seed others; a branch into the entry code
    (which runs on into the probe again) is drawn again."""
    cases = C.random_cases(300, 7)
    assert cases == C.random_cases(300, 7) and [c.word for c in cases] != [c.word for c in C.random_cases(300, 8)]
    by_group = {g: [c for c in cases if c.cls == f"random {g}"] for g in C.GROUPS}
    assert {g: len(cs) for g, cs in by_group.items()} == {"uniform": 100, "load-store": 100, "branch": 100}
    assert all(c.word & 0x0A000000 == 0x08000000 for c in by_group["load-store"])
    assert all(c.word & 0x1C000000 == 0x14000000 for c in by_group["branch"])
    assert len({c.nzcv for c in cases}) == 16
    assert C.direct_branch_offset(asm.b_imm(-0x100)) == -0x100 and C.direct_branch_offset(asm.tbz(4, 1, -8)) == -8
    assert C.loops_back(asm.b_imm(-0x100)) and C.loops_back(asm.cbz(5, 0)) and not C.loops_back(asm.b_imm(-4))
    assert not any(C.loops_back(c.word) for c in C.random_cases(3000, 1))


def test_the_guest_maps_each_case_its_own_page_only():
    """The lab maps a case's page alone; cases.tab gives the guest that page's file offset, which its
    mmap of one SLOT takes, so a load or branch that leaves the page faults in both."""
    cases = C.all_cases()[:3]
    tab = G.build_tab(cases, V.probe_offsets(cases))
    rows = [tab[G.TAB_HEADER + i * G.DESC_SIZE: G.TAB_HEADER + (i + 1) * G.DESC_SIZE] for i in range(3)]
    assert [int.from_bytes(r[56:64], "little") for r in rows] == [0, L.SLOT, 2 * L.SLOT]
    code = G.build_init()
    want = b"".join(asm.b(w) for w in (asm.mov_reg(4, 0), asm.ldr_imm(0, 21, 0), asm.ldr_imm(5, 21, 56)))
    assert want in code


def test_arm64_sample_is_bounded():
    with pytest.raises(V.LabError, match="0 to 2000 random words"):
        V.verify_arm64(sample=C.MAX_SAMPLE + 1)


def test_an_alignment_fault_in_the_xol_slot_is_delivered_at_the_probe():
    """ldeora w30, w19, [x7] with x7 = 7: the atomic's alignment fault, stepped out of line, reaches the
    task at the probed address, as on Debian's 6.1 (seed 2 of the random sample found the lab reporting
    it inside [uprobes])."""
    verdict, effect, probed = _lab_verdicts(0xB8BE20F3, "6.1.0-57-arm64")
    assert verdict == "stepped" and probed.sig and effect == {}
    assert probed.sig_pc == L.slot_base(0) + L.P


def _signal_entry(elf, fault_pc):
    """/init's signal handler run in Unicorn for a SIGSEGV at ``fault_pc``: (its first syscall, the record's sig and
    sig_pc at that point)."""
    uc, ucontext = Uc(UC_ARCH_ARM64, UC_MODE_ARM), 0x50000000
    uc.mem_map(G.INIT_BASE, (G.DATA + G.DATA_SIZE - G.INIT_BASE + L.PAGE - 1) & ~(L.PAGE - 1))
    uc.mem_write(G.INIT_BASE, elf)
    uc.mem_map(L.SHARED, L.PAGE), uc.mem_map(ucontext, L.PAGE)
    uc.mem_write(ucontext + G.UC_PC, struct.pack("<Q", fault_pc))
    uc.reg_write(A.UC_ARM64_REG_X0, 11), uc.reg_write(A.UC_ARM64_REG_X2, ucontext)
    calls = []
    uc.hook_add(UC_HOOK_INTR, lambda uc, intno, _: (calls.append(uc.reg_read(A.UC_ARM64_REG_X8)), uc.emu_stop()))
    uc.emu_start(L.SIGNAL_ENTRY, 0, count=200)
    record = uc.mem_read(L.SHARED, L.REC_SIZE)
    return calls[0], *struct.unpack_from("<QQ", record, L.REC["sig"])


def test_a_fault_on_the_xol_read_leaves_the_record_to_the_case():
    """On a CPU with FEAT_PAN3 the [uprobes] page is execute-only and FINISH's load from it faults: the handler exits
    without recording that fault (the case's own signal, if it had one, stays), where it records any other fault
    and goes on to FINISH (whose first syscall opens /proc/self/maps)."""
    elf = G.build_init()
    xol_read = G.INIT_BASE + elf.index(asm.b(asm.ldp(1, 2, 5, 0, "offset")))
    assert _signal_entry(elf, xol_read) == (G.SYS["exit"], 0, 0)
    assert _signal_entry(elf, L.CODE + L.P) == (G.SYS["openat"], 11, L.CODE + L.P)


def test_xol_bytes_the_task_could_not_load_are_noted_not_compared():
    """A readable [uprobes] starts with slot 0's brk #5, so all-zero XOL bytes in a record are bytes the task could
    not load: the judge says so and judges the verdict and the effect; bytes read and different still disagree."""
    raw = bytearray(L.REC_SIZE)
    struct.pack_into("<Q", raw, L.REC["xol"], 0xFFFF0000)
    struct.pack_into("<Q", raw, L.REC["tag"], 1 << 32)
    assert J.parse_record(raw.hex())[2].xol_bytes == b""
    raw[L.REC["xol_bytes"]] = 0xA0
    assert J.parse_record(raw.hex())[2].xol_bytes == b"\xa0" + bytes(15)
    case, kernel = C.Case("add", 0x91000420), kernel_for_release("6.18.15")
    l_un, l_pr = J.lab_run(case, 0, kernel, False), J.lab_run(case, 0, kernel, True)
    unread = J.judge(0, case, l_un, replace(l_pr, xol_bytes=b""), l_un, l_pr)
    assert unread.agree and J.XOL_UNREAD in unread.notes
    read = J.judge(0, case, l_un, l_pr, l_un, l_pr)
    report = V.Report("pkg", "6.18.15+deb13-arm64", "6.18", 1.0, 1.0, [unread, read])
    assert f"{J.XOL_UNREAD}: not compared on 1 of 2 forms" in report.text()
    other = J.judge(0, case, l_un, replace(l_pr, xol_bytes=bytes(range(1, 17))), l_un, l_pr)
    assert not other.agree and J.XOL_UNREAD not in other.notes


# --- a real kernel ---------------------------------------------------------------------------

# Random words whose literal load reaches another case's page when they sit among the others: they check that
# the guest maps only its case's page of the cases file, as the lab does (else their effects differ).
CROSS_PAGE = (0x1C501518, 0x9C9F520E, 0x5C2514B5, 0x5CE8A8D9)  # ldr s24/q14/d21/d25 (literal)
SAMPLE, SEED = 300, 20260401


@pytest.fixture(scope="session")
def referee_report():
    from uprobe_lab.verify.arm64_boot import RefereeUnavailable
    if shutil.which("qemu-system-aarch64") is None:
        pytest.skip("qemu-system-aarch64 is not installed (apt-get install qemu-system-arm)")
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        pytest.skip("apt-get/dpkg-deb are missing: the referee fetches Debian's arm64 kernel with them")
    try:
        return V.verify_arm64(cases=C.all_cases() + [C.Case("cross-page", w) for w in CROSS_PAGE],
                              sample=SAMPLE, seed=SEED)
    except RefereeUnavailable as err:
        pytest.skip(f"no arm64 kernel to boot: {err}")


@pytest.mark.qemu
@pytest.mark.xdist_group("arm64-referee")  # one boot for all three
def test_real_kernel_agrees_with_the_lab_on_every_form(referee_report):
    done, total = referee_report.agreement
    assert total >= 300
    assert done == total, "\n" + referee_report.text()


@pytest.mark.qemu
@pytest.mark.xdist_group("arm64-referee")  # one boot for all three
def test_real_kernel_agrees_on_random_words_and_literals_that_leave_the_page(referee_report):
    random_ones = [j for j in referee_report.judged if j.case.cls.startswith("random ")]
    assert len(random_ones) == SAMPLE and (referee_report.sample, referee_report.seed) == (SAMPLE, SEED)
    assert [j.case for j in random_ones] == C.random_cases(SAMPLE, SEED)
    cross = [j for j in referee_report.judged if j.case.cls == "cross-page"]
    n = len(referee_report.judged)
    for j in cross:  # each sits where its literal (imm19 words from P) lands on another case's page
        imm = (j.case.word >> 5) & 0x7FFFF
        assert 0 <= j.index + ((imm - (1 << 19) if imm >> 18 else imm) * 4 + L.P) // L.SLOT < n
    assert [(j.kernel_verdict, j.agree) for j in cross] == [("stepped", True)] * 4


@pytest.mark.qemu
@pytest.mark.xdist_group("arm64-referee")  # one boot for all three
def test_real_kernel_shows_the_brk_and_xol_bytes_and_the_bug(referee_report):
    by_word = {j.case.word: j for j in referee_report.judged}
    assert by_word[0x1CFFFFE1].kernel_effect == {"v1": "a00020d4" + "00" * 12}  # the FP literal bug
    assert by_word[asm.BRK64_OPCODE_UPROBES].kernel_verdict == "refused (errno 524)"
    assert by_word[asm.stp(29, 30, 31, -16)].kernel_verdict == "stepped"  # the STP simulation was never merged
    uret = next(j for j in referee_report.judged if j.case.kind == "uretprobe")
    assert uret.kernel_effect == {"x9": "[uprobes]+0x0", "x30": "[uprobes]+0x0"}  # the LR hijack, seen by F


# --- FEAT_HBC's BC.cond on a 7.3 kernel (2ccd8ff980b5, 7.1: simulated like b.cond) ---------------------

# bc.eq #8 (54000050: b.cond's 0x54, imm19 = 2, bit 4 set, cond eq), taken (Z set) and not taken, and b.eq #8 beside
# them; the ARM ARM's encoding, worked out by hand. A CPU without FEAT_HBC treats the BC.cond words as UNDEFINED,
# so the unprobed runs need QEMU's -cpu max of QEMU 8.2 or later (FEAT_HBC came in with QEMU 8.2).
HBC_CASES = [C.Case("bc.cond", 0x54000050, nzcv=0x4 << 28), C.Case("bc.cond", 0x54000050),
             C.Case("branch", 0x54000040, nzcv=0x4 << 28)]
HBC_PACKAGE = "linux-image-7.3.4+deb13-arm64"  # trixie-backports; the kernel itself is in linux-binary-*
QEMU_WITH_HBC = (8, 2)


HBC_6_12_PACKAGE = "linux-image-6.12.111+deb12-arm64-unsigned"  # bookworm-backports, after 6.12.92's backport
# trixie-backports' last 6.18 (it built 6.18.5, .9, .12, .15, then 6.19): before 6.18.34's backport, so it steps
# bc.cond
HBC_6_18_PACKAGE = "linux-image-6.18.15+deb13-arm64"
# ldr x0, [x2, x1]: a SIGSEGV of the case's own, stepped, then the XOL read's fault on a FEAT_PAN3 CPU (the guest must
# keep the first and survive the second)
FAULTING_LOAD = C.Case("load-store", enc.ldr_x_reg(0, 2, 1))


def _boot_with_hbc(package, cases):
    """Boot ``package`` under a QEMU whose -cpu max has FEAT_HBC: the host's if it is 8.2 or later, else
    bookworm-backports' qemu-system-arm unpacked into the lab's cache (bookworm's 7.2 has no FEAT_HBC). That QEMU
    (10.0) has FEAT_PAN3 too, which makes [uprobes] execute-only: a stepped case's XOL bytes go unread."""
    from uprobe_lab.verify import arm64_boot as B

    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        pytest.skip("apt-get/dpkg-deb are missing: the referee fetches Debian's arm64 kernel with them")
    try:
        version = B.qemu_version()
        qemu = B.QEMU if version is not None and version >= QEMU_WITH_HBC else B.fetch_backported_qemu()
        return V.verify_arm64(package=package, cases=cases, qemu=qemu)
    except B.RefereeUnavailable as err:
        pytest.skip(f"no QEMU with FEAT_HBC or no {package} to boot: {err}")


@pytest.fixture(scope="session", params=[HBC_PACKAGE, HBC_6_12_PACKAGE])
def bc_cond_report(request):
    """Debian's 7.3.4 and 6.12.111, which simulate bc.cond."""
    return _boot_with_hbc(request.param, HBC_CASES)


@pytest.fixture(scope="session")
def bc_cond_stepped_report():
    """Debian's 6.18.15, which steps bc.cond."""
    return _boot_with_hbc(HBC_6_18_PACKAGE, HBC_CASES + [FAULTING_LOAD])


@pytest.mark.qemu
def test_debian_7_3_and_6_12_stable_simulate_bc_cond_as_the_lab_does(bc_cond_report):
    """7.3 has 2ccd8ff980b5 from mainline (7.1), 6.12.111 from the 6.12.92 backport; the lab's rules for each
    release simulate it too."""
    assert bc_cond_report.release.startswith(("7.3.", "6.12."))
    assert [(j.case.word, j.kernel_verdict) for j in bc_cond_report.judged] == [
        (0x54000050, "simulated"), (0x54000050, "simulated"), (0x54000040, "simulated")]
    assert all(j.agree for j in bc_cond_report.judged), "\n" + bc_cond_report.text()


@pytest.mark.qemu
def test_debian_6_18_15_steps_bc_cond_and_loses_its_branch_as_the_lab_does(bc_cond_stepped_report):
    """6.18.15 predates 6.18.34's backport of 2ccd8ff980b5 (docs/references.md): its decoder sees no branch in bc.eq
    and steps it out of line, and the step ends with pc = the probed address + 4, so the taken bc.eq falls through to
    the next instruction's pad; b.eq is simulated as ever. The faulting load keeps its own SIGSEGV."""
    report = bc_cond_stepped_report
    assert report.release.startswith("6.18.15")
    assert [(j.case.word, j.kernel_verdict) for j in report.judged] == [
        (0x54000050, "stepped"), (0x54000050, "stepped"), (0x54000040, "simulated"), (FAULTING_LOAD.word, "stepped")]
    taken, not_taken, _, load = report.judged
    assert taken.kernel_effect == {"pad": L.PAD_ID["fall"]} and "2ccd8ff980b5" in taken.kernel_bug
    assert not_taken.kernel_effect == {} and load.kernel_effect == {}
    assert all(j.agree for j in report.judged), "\n" + report.text()


def test_the_lab_steps_bc_cond_on_the_6_18_debian_booted_and_simulates_it_on_7_3():
    """The lab's side of the referee for the same words: Debian's 6.18.15 predates 6.18.34's backport."""
    for release, expected in (("6.18.15+deb13-arm64", "stepped"), ("7.3.4+deb13-arm64", "simulated")):
        verdict, _, _ = _lab_verdicts(0x54000050, release)
        assert verdict == expected, release


def test_the_lab_loses_a_taken_bc_cond_it_steps_and_says_why():
    """Stepped from the XOL slot (6.18.15), the taken bc.eq ends at pc = probed address + 4: the fall-through pad.
    Simulated (7.3.4), it reaches its target as unprobed."""
    taken = HBC_CASES[0]
    for release, expected in (("6.18.15+deb13-arm64", {"pad": L.PAD_ID["fall"]}), ("7.3.4+deb13-arm64", {})):
        kernel = kernel_for_release(release)
        un, pr = J.lab_run(taken, 0, kernel, False), J.lab_run(taken, 0, kernel, True)
        assert J.effect(un, pr, L.slot_base(0)) == expected, release
    assert "2ccd8ff980b5" in J.known_bug(taken.word) and not J.known_bug(0x54000040)


def test_a_word_the_two_cpus_run_differently_is_judged_on_its_verdict_only():
    """bc.hs (545aba92, seed 20260401's random branch 68) is UNDEFINED on QEMU 7.2's CPU (no FEAT_HBC) and a
    branch on Unicorn's: the unprobed runs end in SIGILL and SIGSEGV, so what the probe changed cannot be set
    side by side. The same verdict agrees, a different one does not, and the report names the case."""
    case = C.Case("random branch", 0x545ABA92)
    values = {"x0": 0}
    k_un = J.Run(dict(values), sig=4, sig_pc=0x10000100)
    brk = asm.BRK64_OPCODE_UPROBES
    k_pr = J.Run(dict(values), seen=brk, xol=0xFFFF0000, sig=4, sig_pc=0x10000100)
    l_un = J.Run(dict(values), sig=11, sig_pc=0x100B5850)
    l_pr = J.Run(dict(values), seen=brk, xol=0xFFFF0000, sig=11, sig_pc=0xFFFF0010)
    judged = J.judge(0, case, k_un, k_pr, l_un, l_pr)
    assert judged.cpu_differs and judged.kernel_effect == {} and judged.lab_effect != {}
    assert judged.agree
    simulated = J.judge(0, case, k_un, k_pr, l_un, J.Run(dict(values), seen=brk, sig=11, sig_pc=0x100B5850))
    assert simulated.lab_verdict == "simulated" and not simulated.agree
    same_cpu = J.judge(0, case, k_un, k_pr, J.Run(dict(values), sig=4, sig_pc=0x10000100), l_pr)
    assert not same_cpu.cpu_differs and not same_cpu.agree  # one CPU, different effects: a disagreement
    report = V.Report("pkg", "6.1.0-57-arm64", "6.1", 1.0, 1.0, [judged])
    assert "VERDICT ONLY bc.hs" in report.text() and "DISAGREE" not in report.text()
