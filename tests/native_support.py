"""Shared by the native test files: whether this host can run native probes, and why not."""
from collections import namedtuple

import pytest

from uprobe_lab.native import NativeUnavailable, check_native_support

Uname = namedtuple("Uname", "sysname nodename release version machine")


def native_reason() -> str | None:
    try:
        check_native_support()
    except NativeUnavailable as e:
        return str(e)
    return None


NATIVE_REASON = native_reason()
native = pytest.mark.skipif(NATIVE_REASON is not None, reason=f"native mode unavailable: {NATIVE_REASON}")

