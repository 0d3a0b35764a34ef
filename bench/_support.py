"""Helpers shared by the bench scripts (``bench/run.py`` skips ``_`` modules).

Process plumbing only: reading a child's ready line without consuming what follows,
stopping a child by pid, and the machine's load average (printed by every bench,
since the numbers are only meaningful on a quiet machine).
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from collections.abc import Callable

READY_TIMEOUT_S = 30.0


def read_line(process: subprocess.Popen[bytes], what: str, log: Callable[[], str]) -> str:
    """The next stdout line of ``process``, within READY_TIMEOUT_S."""
    assert process.stdout is not None
    fd = process.stdout.fileno()
    deadline = time.monotonic() + READY_TIMEOUT_S
    buffer = b""
    while time.monotonic() < deadline and b"\n" not in buffer:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            chunk = os.read(fd, 1)  # byte by byte: nothing after the line is consumed
            if not chunk:
                break
            buffer += chunk
        elif process.poll() is not None:
            break
    if b"\n" not in buffer:
        raise RuntimeError(f"{what}: no answer; output so far {buffer!r}\n{log()}")
    return buffer.decode().strip()


def stop_process(process: subprocess.Popen[bytes] | None, timeout_s: float = 20.0) -> None:
    """SIGTERM, then SIGKILL after ``timeout_s``: every bench child is stopped by pid."""
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def load_average() -> tuple[float, float, float]:
    try:
        return os.getloadavg()
    except OSError:
        return (0.0, 0.0, 0.0)
