"""Fixtures shared by the test files, and which tests a run selects.

``./lab test`` is the everyday loop: the slow kinds (pyproject.toml's markers: QEMU boots, the browser,
notebook runs, the site, and other slow tests) are left out. ``./lab test --all`` (and CI) runs them too.
A run that names its tests (a path, ``-m`` or ``-k``) gets what it names, slow or not.
"""
import signal

import pytest

SLOW_KINDS = ("qemu", "browser", "notebooks", "site", "slow")
# Longest first, so a parallel run starts them while there is other work to fill the second CPU.
FIRST = ("qemu", "browser", "notebooks", "site")


def pytest_addoption(parser):
    parser.addoption("--all", action="store_true", dest="run_all",
                     help=f"run the slow kinds too ({', '.join(SLOW_KINDS)}), not only the fast set")


def pytest_configure(config):
    """The Ctrl-C tests need Python's own SIGINT handler. A shell without job control starts a background
    job with SIGINT ignored (POSIX), and Python keeps an ignored SIGINT ignored: the suite's Ctrl-C tests
    would then skip or fail, and the stress test would wait for an interrupt that can never arrive. Put
    Python's handler back before collection (``needs_sigint`` is decided there)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def fast_set(config) -> bool:
    """Whether this run is the everyday fast set: no --all, and no path, -m or -k naming other tests."""
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: its controller decided
        return config.workerinput["uprobe_lab_fast_set"]
    return not (config.option.run_all or config.option.markexpr or config.option.keyword
                or config.args_source is not pytest.Config.ArgsSource.TESTPATHS)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    node.workerinput["uprobe_lab_fast_set"] = fast_set(node.config)


def _kind(item) -> str | None:
    return next((k for k in SLOW_KINDS if item.get_closest_marker(k)), None)


def pytest_collection_modifyitems(config, items):
    if fast_set(config):
        slow = [item for item in items if _kind(item)]
        if slow:
            config.hook.pytest_deselected(items=slow)
            items[:] = [item for item in items if not _kind(item)]
    else:
        items.sort(key=lambda item: FIRST.index(_kind(item)) if _kind(item) in FIRST else len(FIRST))


def pytest_terminal_summary(terminalreporter, config):
    if fast_set(config) and not hasattr(config, "workerinput"):
        terminalreporter.write_line(f"fast set: the slow kinds ({', '.join(SLOW_KINDS)}) were left out; "
                                    "./lab test --all runs everything")


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
