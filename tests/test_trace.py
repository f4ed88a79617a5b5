"""The trace's counts as a table: what chapter 00 shows as the kernel's bill for one hit."""
import uprobe_lab as ul
from uprobe_lab.trace import EVENT_KINDS, Trace


def test_the_summary_lists_each_counted_kind_once_in_vocabulary_order_with_its_meaning():
    proc = ul.new_process(kernel="6.18")
    ul.attach(proc, "uprobe_target_ret", ul.CountingConsumer())
    proc.call("uprobe_target_ret")
    table = proc.trace.summary()
    counts = proc.trace.counts
    assert list(table.index) == [k for k in EVENT_KINDS if counts.get(k)]
    assert table.loc["exceptions", "count"] == 2 and table.loc["xol_steps", "count"] == 1  # int3 + #DB, one step
    assert table.loc["exc_db", "what it is"] == EVENT_KINDS["exc_db"]
    for shown in (table._repr_html_(), repr(table)):  # the whole meaning, not pandas' 50 characters and "..."
        assert EVENT_KINDS["exceptions"] in shown and "..." not in shown


def test_bills_side_by_side_fill_a_missing_kind_with_0_and_drop_a_kind_no_bill_counts():
    from uprobe_lab.trace import bills_table

    table = bills_table({"first hit": {"consumers": 1, "exceptions": 1, "iret": 0},
                         "second hit": {"syscalls": 1, "consumers": 1}})
    assert list(table.index) == ["exceptions", "syscalls", "consumers"]  # the vocabulary's order; iret counted 0
    assert table["first hit"].tolist() == [1, 0, 1] and table["second hit"].tolist() == [0, 1, 1]


def test_lines_add_up_each_steps_accesses_as_often_as_the_step_was_touched():
    trace = Trace()
    lookup = ((("mm_lock_seq", "read"), 1), (("trc_reader_nesting", "per-task"), 2))
    chain = ((("trc_reader_nesting", "per-task"), 1),)
    for step in (lookup, chain, lookup, ()):
        trace.touch(step, cpu=0)
    assert trace.lines == {("mm_lock_seq", "read"): 2, ("trc_reader_nesting", "per-task"): 5}
    assert list(trace.lines) == [("mm_lock_seq", "read"), ("trc_reader_nesting", "per-task")]  # first touched first
    trace.clear()
    assert trace.lines == {}
