"""An ``odradek serve`` child process: spawned, read until its ready line, stopped by pid.

How this works and why: ``serve`` prints one line, ``odradek ready
PLAINTEXT://127.0.0.1:40123 ...`` with the real ports, once its listeners accept, so a
child binds port 0 and the parent reads the address back instead of guessing a free
port. Its stderr goes to a log file (a pipe nobody drains would fill and stall the
broker), whose tail is the error when the child never gets ready. Stopping is SIGTERM
(a clean shutdown, exit 0), then SIGKILL after a timeout, always by the child's pid. A
``weakref.finalize`` kills the child when its owner is collected or the interpreter
exits, so a broker a test forgot to stop does not outlive the test process.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Final

READY_TIMEOUT_S: Final = 30.0
STOP_TIMEOUT_S: Final = 20.0
# The part of a failed child's log an error message quotes: enough for a traceback.
LOG_TAIL_CHARS: Final = 3000


class ServeProcess:
    """One ``python -m odradek serve`` child with ``args``; its stderr in ``log_path``."""

    def __init__(self, args: Sequence[str], log_path: Path) -> None:
        self.args = list(args)
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None
        self.urls: list[str] = []
        self._finalizer: weakref.finalize[..., ServeProcess] | None = None

    def launch(self) -> None:
        """Spawn the child without waiting (a quorum's nodes are ready only together)."""
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "odradek", "serve", *self.args],
                stdout=subprocess.PIPE,
                stderr=log,
                stdin=subprocess.DEVNULL,
            )
        self._finalizer = weakref.finalize(self, _kill, self.process)

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> list[str]:
        """The listener URLs of the ready line; the child is killed if none comes."""
        assert self.process is not None
        line = first_line(self.process, timeout_s)
        if not line.startswith("odradek ready "):
            self.kill()
            raise RuntimeError(f"odradek serve did not get ready: {self.log_tail()}")
        self.urls = line.split()[2:]
        return self.urls

    def log_tail(self) -> str:
        try:
            text = self.log_path.read_text(errors="replace").strip()
        except OSError:
            return "(no log)"
        return text[-LOG_TAIL_CHARS:] or "(empty log)"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM, wait for the clean exit, SIGKILL after ``timeout_s``; the exit status."""
        process = self.process
        if process is None:
            return None
        if process.poll() is None:
            os.kill(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                _kill(process)
        self._close(process)
        return process.returncode

    def kill(self) -> None:
        if self.process is not None:
            _kill(self.process)
            self._close(self.process)

    def _close(self, process: subprocess.Popen[bytes]) -> None:
        if process.stdout is not None:
            process.stdout.close()
        if self._finalizer is not None:
            self._finalizer.detach()


def first_line(process: subprocess.Popen[bytes], timeout_s: float) -> str:
    """The first line ``process`` writes to its stdout pipe (without the newline), or
    what came before it ended, closed stdout or ``timeout_s`` passed ("" if nothing):
    how a parent reads the ready line of a child that binds port 0."""
    assert process.stdout is not None
    fd = process.stdout.fileno()
    poller = select.poll()  # not select(): fine with descriptors above 1024
    poller.register(fd, select.POLLIN | select.POLLHUP)
    deadline = time.monotonic() + timeout_s
    buffer = b""
    while time.monotonic() < deadline and b"\n" not in buffer:
        if poller.poll(100):
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            buffer += chunk
        elif process.poll() is not None:
            break
    return buffer.split(b"\n", 1)[0].decode(errors="replace")


def _kill(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL by pid and reap; also the finaliser, so it must not reference the owner."""
    if process.poll() is None:
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
    if process.stdout is not None:
        process.stdout.close()
