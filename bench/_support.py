"""Helpers shared by the bench scripts (``bench/run.py`` skips ``_`` modules).

Process plumbing: an ``odradek serve`` child on port 0 with a confluent-kafka admin
client, reading a child's ready line without consuming what follows, stopping a child
by pid, and the machine's load average (printed by every bench at start and end, since
the numbers are only meaningful on a quiet machine), and the common end of a bench run.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

READY_TIMEOUT_S = 30.0
BUSY_LOAD = 1.5  # a load average above this: other processes share the 2 cores


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


def show_load(values: tuple[float, float, float]) -> str:
    return " ".join(f"{value:.2f}" for value in values)


def warn_if_busy(load_start: tuple[float, float, float]) -> None:
    if max(load_start) > BUSY_LOAD:
        print(
            f"**The machine was busy at the start (load average above {BUSY_LOAD}): other "
            "processes share its 2 cores, so these numbers are slow and noisy.**\n",
            flush=True,
        )


def finish(name: str, started: float, errors: Sequence[str], misses: int, strict: bool) -> int:
    """Print the wall time, the load at the end and any errors; the exit status (1 on an
    error, or on a missed goal with ``--strict``)."""
    load_end = load_average()
    busy = (
        f" (above {BUSY_LOAD}: other processes were running)" if max(load_end) > BUSY_LOAD else ""
    )
    print(
        f"{name} bench wall time: {time.perf_counter() - started:.1f} s; "
        f"load average at end: {show_load(load_end)}{busy}",
        flush=True,
    )
    for error in errors:
        print(f"error: {error}", file=sys.stderr)
    if errors:
        return 1
    return 1 if strict and misses else 0


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
