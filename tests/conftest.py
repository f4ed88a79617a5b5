"""Fixtures shared by the test files."""
import pytest


@pytest.fixture
def private_scratch(tmp_path, monkeypatch):
    """Native code files go to a directory of this test's own, so runs in other processes cannot
    make a leak check see (or hide) a scratch directory."""
    from uprobe_lab.native.code import ENV_DIR

    monkeypatch.setenv(ENV_DIR, str(tmp_path))
    return tmp_path


@pytest.fixture(scope="session")
def native_host():
    """What ``native_support.native`` asks for: skip (or, under UPROBE_LAB_REQUIRE_NATIVE=1, fail) the
    test unless this host can run native probes."""
    from native_support import require_native

    require_native()
