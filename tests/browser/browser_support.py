"""What the browser tests share besides fixtures: a free port for a server, and stopping one."""
from __future__ import annotations

import socket
import subprocess

from uprobe_lab import lecture


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_server(proc: subprocess.Popen, log) -> None:
    """Stop a server we started, however the test went (as ./lab lecture stops its own), and close its log."""
    lecture.stop_server(proc, timeout_s=20)
    log.close()
