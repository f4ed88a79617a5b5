"""Asking the host in a process no earlier probe touched: the kernel keeps ``[uprobes]`` and
``[uprobes-trampoline]`` mapped until a process exits (and 7.3 hands the trampoline down on fork), so
a question about those mappings is asked in a new Python (:func:`in_new_python`) or, where starting
one is slow (a TCG guest), in a forked child of a process that holds none (:func:`in_forked_child`).
Both return the answer, a dict, sent back as JSON.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

from .errors import NativeUnavailable

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REFUSED = f"{NativeUnavailable.__module__}.{NativeUnavailable.__qualname__}: "  # a child's traceback's last line


def in_new_python(module: str, args: list[str], what: str, timeout: int = 120) -> dict:
    """``python -m module args`` with this package importable; its stdout, parsed as JSON. The child's
    NativeUnavailable is raised here as itself, any other failure as RuntimeError with the child's stderr."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [PACKAGE_ROOT, os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, env=env,
                         timeout=timeout)
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or [""])[-1]
        if last.startswith(REFUSED):  # a child may be refused what the trial open was not (a system-wide event)
            raise NativeUnavailable(last.removeprefix(REFUSED))
        raise RuntimeError(f"{what} failed in the child process:\n{out.stderr.strip()}")
    return json.loads(out.stdout)


def in_forked_child(what: str, ask, *args) -> dict:
    """``ask(*args)`` in a forked child, which leaves without the parent's cleanup; its answer comes back
    on a pipe. An exception in the child is raised here as RuntimeError, naming ``what``; a NativeUnavailable
    as itself."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            answer = ask(*args)
        except NativeUnavailable as err:  # said to the parent as the same refusal, with its way out
            answer = {"native_unavailable": str(err)}
        except BaseException as err:  # noqa: BLE001 - said to the parent, which raises it
            answer = {"error": f"{type(err).__name__}: {err}"}
        with os.fdopen(w, "w") as f:
            json.dump(answer, f)
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        text = f.read()
    os.waitpid(pid, 0)
    answer = json.loads(text) if text else {"error": "it died before it answered"}
    if "native_unavailable" in answer:
        raise NativeUnavailable(answer["native_unavailable"])
    if "error" in answer:
        raise RuntimeError(f"{what} failed in a forked child: {answer['error']}")
    return answer
