"""Native mode: the lab's bench bytes run on this host's kernel, probed through the uprobe PMU.

Public API (the CLI's ``bench --mode native`` calls ``run_native_benches``):

    run_native_benches(names=None, iterations=100_000, repeats=5, progress=None) -> list[dict]
    check_native_support(arch=None) -> str        # raises NativeUnavailable with the reason
    NativeUnavailable                              # Exception: print it and skip
    NativeCode, UprobeEvent, host_snapshot         # building blocks for the notebooks
    BENCH_NAMES

Only x86_64 has been measured; the arm64 row in ``arch.ARCHES`` is untested.
"""
from .bench import BENCH_NAMES, DEFAULT_ITERATIONS, DEFAULT_REPEATS, run_native_benches
from .code import NativeCode
from .errors import NativeUnavailable
from .support import check_native_support
from .host import host_snapshot
from .perf import UprobeEvent

__all__ = ["BENCH_NAMES", "DEFAULT_ITERATIONS", "DEFAULT_REPEATS", "NativeCode", "NativeUnavailable",
           "UprobeEvent", "check_native_support", "host_snapshot", "run_native_benches"]
