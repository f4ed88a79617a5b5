"""Fixtures shared by the test files."""
import signal

import pytest


def pytest_configure(config):
    """The Ctrl-C tests need Python's own SIGINT handler. A shell without job control starts a background
    job with SIGINT ignored (POSIX), and Python keeps an ignored SIGINT ignored: the suite's Ctrl-C tests
    would then skip or fail, and the stress test would wait for an interrupt that can never arrive. Put
    Python's handler back before collection (``needs_sigint`` is decided there)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


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
