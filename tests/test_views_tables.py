"""Tables as chapter 03b shows them: errnos kept on one line, the model's basis whole, a refusal as a word."""
import re

import pandas as pd
import pytest

from uprobe_lab import bench
from uprobe_lab.errors import LabError
from uprobe_lab.views import nop5
from uprobe_lab.views.tables import unbroken


def test_the_errno_column_is_kept_on_one_line_and_no_other():
    table = nop5.libbpf_choices()
    html = unbroken(table, ["syscall 336 off the trampoline"]).to_html()
    column = list(table.columns).index("syscall 336 off the trampoline")
    rule = re.search(r"([^{}]*)\{\s*white-space: nowrap;\s*\}", html)
    styled = set(re.findall(r"_row(\d+)_col(\d+)", rule.group(1)))
    assert styled == {(str(row), str(column)) for row in range(len(table))}
    assert {"-ENXIO", "-EPROTO"} <= set(table["syscall 336 off the trampoline"])  # the cells it is about
    assert 'class="dataframe"' in html  # styled as every other table


def test_a_column_the_table_lacks_is_named_with_those_it_has():
    with pytest.raises(LabError, match="no column 'errno'.*give one of kernel, syscall 336"):
        unbroken(nop5.libbpf_choices(), ["errno"])


def test_the_model_predictions_show_a_refusal_as_a_word_and_each_basis_whole():
    table = nop5.model_predictions(("uprobe-nop5", "uprobe-nop10"), ("6.18", "7.3"))
    assert not table.isna().any().any()
    refused = table[(table["kernel"] == "6.18") & (table["bench"] == "uprobe-nop10")].iloc[0]
    reason = bench.refusal("uprobe-nop10", "x86_64", "6.18")
    assert refused["M/s (model)"] == "refused" and refused["80% interval"] == ""
    assert reason in refused["basis"] and len(refused["basis"]) > 90  # whole, where the chapter's table cut it
    priced = table[table["M/s (model)"] != "refused"]
    assert len(priced) == 3
    for _, row in priced.iterrows():
        low, high = (float(x) for x in row["80% interval"].split(" .. "))
        assert low <= float(row["M/s (model)"]) <= high
        assert row["basis"].startswith(("prediction", "priced from the published"))
    with pd.option_context("display.max_colwidth", 90):  # the chapter's setting: a styled table is not cut by it
        assert refused["basis"] in unbroken(table, ["bench", "80% interval"]).to_html()
