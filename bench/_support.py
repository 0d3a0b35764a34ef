"""Helpers shared by the bench scripts (``bench/run.py`` skips ``_`` modules).

Process plumbing: an ``odradek serve`` child on port 0 with a confluent-kafka admin
client, reading a child's ready line without consuming what follows, stopping a child
by pid, and the machine's load average (printed by every bench, since the numbers are
only meaningful on a quiet machine).
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

READY_TIMEOUT_S = 30.0


def read_line(
    process: subprocess.Popen[bytes],
    what: str,
    log: Callable[[], str],
    timeout_s: float = READY_TIMEOUT_S,
) -> str:
    """The next stdout line of ``process``, within ``timeout_s``."""
    assert process.stdout is not None
    fd = process.stdout.fileno()
    deadline = time.monotonic() + timeout_s
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


class OdradekBroker:
    """``python -m odradek serve`` on 127.0.0.1:0 in ``workdir``; stopped by pid."""

    def __init__(
        self,
        workdir: Path,
        extra_args: tuple[str, ...] | list[str] = (),
        *,
        data_dir: str = "data",
        ready_timeout_s: float = READY_TIMEOUT_S,
    ) -> None:
        self.log_path = workdir / "odradek.log"
        log = open(self.log_path, "ab")  # noqa: SIM115 - closed below, kept by the child
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "odradek",
                "serve",
                "--data-dir",
                str(workdir / data_dir),
                "--listen",
                "127.0.0.1:0",
                "--log-level",
                "WARNING",
                *extra_args,
            ],
            stdout=subprocess.PIPE,
            stderr=log,
            cwd=REPO,
        )
        log.close()
        self.admin: Any = None
        try:
            line = read_line(self.process, "odradek serve", self.log, ready_timeout_s)
            if not line.startswith("odradek ready "):
                raise RuntimeError(f"odradek serve said {line!r}\n{self.log()}")
            self.bootstrap = line.split()[2].split("://", 1)[1]
            from confluent_kafka.admin import AdminClient

            self.admin = AdminClient({"bootstrap.servers": self.bootstrap})
        except BaseException:
            self.stop()
            raise

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def create_topic(
        self, topic: str, partitions: int, config: dict[str, str] | None = None
    ) -> None:
        from confluent_kafka.admin import NewTopic

        new_topic = NewTopic(topic, partitions, 1, config=config or {})
        futures = self.admin.create_topics([new_topic], request_timeout=30)
        futures[topic].result(30)

    def stop(self) -> None:
        self.admin = None  # closes its connections now, not noisily after the broker's end
        stop_process(self.process)
