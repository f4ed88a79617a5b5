"""bench.events_table, the one events-per-hit table the chapters' views and notebooks show."""
from uprobe_lab.bench import events_table
from uprobe_lab.views.arm64 import STP_KINDS, stp_events
from uprobe_lab.views.nop5 import KINDS
from uprobe_lab.views.nop5 import events_table as nop5_events_table
from uprobe_lab.views.stepper import steplog_html


def _row(df, bench):
    return df.set_index("bench").loc[bench]


def test_x86_618_int3_and_optimised_nop5():
    df = events_table(["uprobe-ret", "uprobe-nop5"], kernels=("6.18",), kinds=("exceptions", "syscalls"))
    assert list(df.columns) == ["bench", "kernel", "exceptions", "syscalls"]
    assert list(df["kernel"]) == ["6.18", "6.18"]
    assert _row(df, "uprobe-ret")["exceptions"] == 2  # the int3, then the single-step trap of the XOL copy
    nop5 = _row(df, "uprobe-nop5")
    assert nop5["syscalls"] == 1 and nop5["exceptions"] == 0  # optimised: call + sys_uprobe, no int3


def test_arm64_stp_store_variants():
    pin = events_table(["uprobe-push"], "arm64", kinds=("pages_pinned",), stp="simulate", stp_store="pin")
    assert _row(pin, "uprobe-push")["pages_pinned"] == 1
    uaccess = events_table(["uprobe-push"], "arm64", kinds=("uaccess_copies", "uaccess_bytes"), stp="simulate",
                           stp_store="uaccess")
    # v1's one copy_to_user((void __user *)new_sp, buf, sizeof(buf)) of fp and lr
    assert (_row(uaccess, "uprobe-push")["uaccess_copies"], _row(uaccess, "uprobe-push")["uaccess_bytes"]) == (1, 16)


def test_default_kinds_are_the_counted_ones_and_default_kernel_is_named():
    df = events_table(["uprobe-nop5"])
    assert df["kernel"].tolist() == ["6.18"]
    assert "syscalls" in df.columns and "exceptions" not in df.columns


def test_rows_are_benches_then_kernels():
    df = nop5_events_table(kernels=("6.16", "6.18"), benches=("uprobe-nop5", "uretprobe-nop5"))
    assert list(zip(df["bench"], df["kernel"])) == [("uprobe-nop5", "6.16"), ("uprobe-nop5", "6.18"),
                                                  ("uretprobe-nop5", "6.16"), ("uretprobe-nop5", "6.18")]
    assert list(df.columns) == ["bench", "kernel", *KINDS]


def test_stp_events_keeps_its_index_and_columns():
    df = stp_events(("uprobe-push",))
    assert df.index.names == ["bench", "variant"] and list(df.columns) == STP_KINDS
    assert df.loc[("uprobe-push", "simulated-stp v2 (seed: pin pages)"), "pages_pinned"] == 1
    assert df.loc[("uprobe-push", "simulated-stp v1 (one copy_to_user)"), "uaccess_bytes"] == 16


def test_sys_uprobe_exits_sysret_unless_a_consumer_moved_sp():
    """[7.3] arch/x86/kernel/uprobes.c sys_uprobe: an unchanged sp returns by sysret through the trampoline (the
    leaf returns its red-zone value 5); a consumer that moved sp is returned to by iret, at site + 10 on the new
    stack, where the leaf reads the consumer's 0xBEEF."""
    from uprobe_lab.views.nop5 import sys_uprobe_exits

    rows = sys_uprobe_exits("7.3").to_dict("records")
    assert rows == [
        {"the consumer": "leaves sp alone", "the leaf's red-zone word": "0x5, its own", "syscalls": 1, "sysret": 1,
         "iret": 0},
        {"the consumer": "moves sp 16 down, 0xbeef below", "the leaf's red-zone word": "0xbeef, the consumer's",
         "syscalls": 1, "sysret": 0, "iret": 1},  # the words say where 0x5 and 0xbeef come from
    ]


def test_patch_run_widget_plays_its_stages_and_names_a_kernel_without_any():
    import ipywidgets as w

    from uprobe_lab.views.nop5 import patch_run

    run = patch_run("6.18")
    (play, slider), out = (box := run.widget()).children[0].children, box.children[1]
    assert isinstance(play, w.Play) and play.max == slider.max == len(run.stages) - 1
    play.value = 3  # what the Play button does, one stage per tick
    assert slider.value == 3 and out.value == steplog_html(run.text(3))  # monospace: a listing
    none = patch_run("6.16")  # 6.16 emulates the nop5 on every hit: nothing is rewritten
    assert none.stages == []
    (msg,) = none.widget().children
    assert "6.16 did not rewrite" in msg.value and "patch_run('6.18')" in msg.value
    assert str(none) == none.nothing_rewritten()


def test_stack_at_sys_uprobe_names_a_kernel_that_never_enters_it():
    import pytest

    from uprobe_lab.errors import LabError
    from uprobe_lab.views.nop5 import stack_at_sys_uprobe

    with pytest.raises(LabError, match="kernel 6.16 never enters sys_uprobe.*6.18"):
        stack_at_sys_uprobe("6.16")
