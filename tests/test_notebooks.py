"""Every notebook runs top to bottom headless, as a learner's 'Run All' would."""
import pytest

from notebook_runs import NOTEBOOKS, executed

pytestmark = [pytest.mark.notebooks, pytest.mark.xdist_group("notebooks")]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path):
    nb = executed(path.name)  # a cell's error fails the test with that error
    assert all(c.get("execution_count") for c in nb.cells if c.cell_type == "code" and c.source.strip())
