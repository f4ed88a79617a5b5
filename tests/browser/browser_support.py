"""What the browser tests share besides fixtures: a free port for a server, and stopping one."""
from __future__ import annotations

import socket
import subprocess


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_server(proc: subprocess.Popen, log) -> None:
    """Stop a server we started, however the test went: politely, then by force."""
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()
