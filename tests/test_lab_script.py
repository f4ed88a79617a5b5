"""The ./lab script never deletes what it cannot make again offline: a .venv it cannot run is left alone."""
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_a_venv_whose_python_does_not_run_is_kept_and_the_way_out_named(tmp_path):
    shutil.copy(REPO / "lab", tmp_path / "lab")
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "python").write_text("not a program")  # no exec bit: cannot run for anyone
    (tmp_path / ".venv" / "wheels-i-built.tar").write_text("hours of compiling")
    done = subprocess.run(["bash", "lab", "test"], cwd=tmp_path, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1
    assert "exists but its python does not run" in done.stderr and "rm -rf .venv" in done.stderr
    assert (tmp_path / ".venv" / "wheels-i-built.tar").read_text() == "hours of compiling"
    assert (tmp_path / ".venv" / "bin" / "python").read_text() == "not a program"
