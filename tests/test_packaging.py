"""What a learner installs: environment.yml (conda, Binder) gives everything ./lab gives, and the licence is shipped."""
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _name_and_spec(requirement: str) -> tuple[str, str]:
    name, spec = re.match(r"\s*([A-Za-z0-9_.-]+)\s*(.*)", requirement).groups()
    return name.lower().replace("_", "-"), spec.replace(" ", "")


def _environment_entries(path: Path) -> dict[str, str]:
    entries = {}
    for line in path.read_text().splitlines():
        m = re.match(r"\s*-\s+([A-Za-z0-9_.-][^#]*)", line)
        if m and m.group(1).strip() not in ("pip", "pip:"):
            name, spec = _name_and_spec(m.group(1).split("=")[0] if "python=" in m.group(1) else m.group(1))
            entries[name] = spec
    return entries


def test_environment_yml_has_every_dependency_and_extra_of_pyproject():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = list(project["dependencies"]) + [r for extra in project["optional-dependencies"].values() for r in extra]
    env = _environment_entries(REPO / "environment.yml")
    missing = [r for r in wanted if _name_and_spec(r)[0] not in env]
    assert not missing, f"environment.yml lacks {missing}"
    differ = [r for r in wanted if env[_name_and_spec(r)[0]] != _name_and_spec(r)[1]]
    assert not differ, f"environment.yml pins these differently from pyproject.toml: {differ}"
    assert "-e ." in (REPO / "environment.yml").read_text()


def test_binder_environment_is_the_conda_one_without_the_local_install():
    root = [l for l in (REPO / "environment.yml").read_text().splitlines() if not l.startswith("#")]
    binder = [l for l in (REPO / "binder/environment.yml").read_text().splitlines() if not l.startswith("#")]
    assert binder == [l for l in root if l.strip() != "- -e ."]
    assert "pip install --no-deps -e ." in (REPO / "binder/postBuild").read_text()


def test_licence_file_is_the_gpl_2_that_pyproject_names():
    assert tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["license"] == "GPL-2.0-only"
    text = (REPO / "LICENSE").read_text()
    assert "GNU GENERAL PUBLIC LICENSE" in text and "Version 2, June 1991" in text
    assert "END OF TERMS AND CONDITIONS" in text  # the full text, not a pointer to it


@pytest.mark.slow
def test_parallel_runs_keep_a_group_on_one_worker(tmp_path):
    """./lab test relies on --dist loadgroup: tests sharing a kernel boot or notebook runs must share a
    worker, or each worker repeats the boot. Some pytest releases silently break it (pytest-xdist 1386)."""
    (tmp_path / "test_grouped.py").write_text(
        "import os, pytest\n"
        "@pytest.mark.xdist_group('shared')\n"
        "@pytest.mark.parametrize('i', range(4))\n"
        "def test_grouped(i):\n"
        "    open(f'worker_{i}', 'w').write(os.environ['PYTEST_XDIST_WORKER'])\n"
        "@pytest.mark.parametrize('i', range(8))\n"
        "def test_free(i):\n"
        "    pass\n")
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2",
                          "--dist", "loadgroup", "test_grouped.py"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    workers = {(tmp_path / f"worker_{i}").read_text() for i in range(4)}
    assert len(workers) == 1, f"the group ran on {sorted(workers)}"


def test_every_file_the_package_reads_is_declared_package_data():
    """A file under uprobe_lab/ that is not Python ships in the wheel only if package-data names it (the lecture
    template, the recordings): a pip-installed lab would miss any other."""
    from fnmatch import fnmatch

    patterns = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["uprobe_lab"]
    files = subprocess.run(["git", "ls-files", "uprobe_lab"], cwd=REPO, capture_output=True, text=True,
                           check=True).stdout.split()
    data = [f.removeprefix("uprobe_lab/") for f in files if not f.endswith((".py", "README.md"))]
    assert data and [f for f in data if not any(fnmatch(f, p) for p in patterns)] == []
