"""A LabError in a notebook shows as its message, as on the command line; a bug keeps its whole traceback."""
import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

pytestmark = pytest.mark.notebooks


def _run(*cells, allow_errors=True):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=allow_errors).execute()
    return [o for c in nb.cells for o in c.outputs if o.output_type == "error"]


def test_a_lab_error_is_its_message_and_a_bug_its_traceback():
    lab, bug = _run("import uprobe_lab as ul\nul.analyze('zz')", "1/0")
    assert lab.ename == "LabError" and "'zz' is not hex bytes" in lab.evalue
    assert lab.traceback == [f"LabError: {lab.evalue}", "(%tb prints where it was raised)"]
    assert bug.ename == "ZeroDivisionError" and len(bug.traceback) > 2  # IPython's own, frames and all


def test_tb_prints_where_a_lab_error_was_raised(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in
                                         ("import uprobe_lab as ul\nul.analyze('zz')", "%tb")])
    NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True).execute()
    shown = "".join(o.get("text", "") + "".join(o.get("traceback", [])) for o in nb.cells[1].outputs)
    assert "x86/analyze.py" in shown  # the frame that raised it


def test_a_lab_error_still_fails_a_headless_run():
    with pytest.raises(CellExecutionError, match="is not hex bytes"):
        _run("import uprobe_lab as ul\nul.analyze('zz')", allow_errors=False)
