"""Start and stop real ``odradek serve`` processes for integration tests.

Each broker binds port 0 and reports its real port on the ``odradek ready`` line;
every process a test starts is stopped by that test (SIGTERM, then SIGKILL by pid).
"""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from odradek.testing._process import first_line

READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20.0


class BrokerProcess:
    def __init__(
        self,
        data_dir: Path,
        extra_args: Sequence[str] = (),
        preexec_fn: Callable[[], None] | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.extra_args = list(extra_args)
        self.preexec_fn = preexec_fn  # run in the child before exec (e.g. setrlimit)
        self.process: subprocess.Popen[bytes] | None = None
        self.bootstrap = ""
        self.port = 0
        self.urls: dict[str, str] = {}
        self.metrics_url: str | None = None  # ``METRICS http://...`` (metrics.listener)
        self.log_path = data_dir.parent / f"{data_dir.name}-broker.log"

    def start(self, listen: str | None = "127.0.0.1:0") -> BrokerProcess:
        self.launch(listen)
        return self.wait_ready()

    def launch(self, listen: str | None = "127.0.0.1:0") -> BrokerProcess:
        """Spawn the process without waiting for it to be ready (a quorum's nodes are
        ready only once a majority runs: launch them all, then ``wait_ready``).
        ``listen=None``: no ``--listen`` (a controller-only node has no client listener)."""
        assert self.process is None or self.process.poll() is not None
        log = open(self.log_path, "ab")  # noqa: SIM115 - closed with the process
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "odradek",
                "serve",
                "--data-dir",
                str(self.data_dir),
                *(("--listen", listen) if listen is not None else ()),
                *self.extra_args,
            ],
            stdout=subprocess.PIPE,
            stderr=log,
            preexec_fn=self.preexec_fn,
        )
        log.close()
        return self

    def wait_ready(self) -> BrokerProcess:
        """Read the ready line: the first URL is the client listener; every URL is kept
        by listener name in ``urls`` (controller listeners come last); a ``METRICS
        <url>`` pair at the end (metrics.listener) goes to ``metrics_url``."""
        line = self._read_ready_line()
        tokens = line.split()[2:]
        self.metrics_url = None
        if "METRICS" in tokens:
            at = tokens.index("METRICS")
            self.metrics_url = tokens[at + 1]
            del tokens[at : at + 2]
        self.urls = {u.split("://", 1)[0]: u.split("://", 1)[1] for u in tokens}
        url = tokens[0]
        self.bootstrap = url.split("://", 1)[1]
        self.port = int(self.bootstrap.rsplit(":", 1)[1])
        return self

    def _read_ready_line(self) -> str:
        assert self.process is not None
        line = first_line(self.process, READY_TIMEOUT_S)
        if line.startswith("odradek ready "):
            return line
        self.kill()  # not ready: never left running, whatever it printed
        if line:
            raise RuntimeError(f"unexpected output: {line!r}")
        raise RuntimeError(f"broker did not become ready; log:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def stop(self) -> int:
        """SIGTERM and wait for a clean exit; returns the exit status."""
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else 0
        os.kill(self.process.pid, signal.SIGTERM)
        try:
            return self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def kill(self) -> None:
        """kill -9: the crash every acknowledged write must survive."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


@contextmanager
def running_broker(
    data_dir: Path,
    extra_args: Sequence[str] = (),
    preexec_fn: Callable[[], None] | None = None,
    listen: str | None = "127.0.0.1:0",
) -> Iterator[BrokerProcess]:
    """A started broker, stopped by pid when the block ends (SIGTERM, then SIGKILL).
    ``listen=None``: no ``--listen``, the listeners come from ``extra_args`` (a SASL
    or TLS listener: ``--override=listeners=SASL_PLAINTEXT://127.0.0.1:0``)."""
    broker = BrokerProcess(data_dir, extra_args, preexec_fn).start(listen)
    try:
        yield broker
    finally:
        gc.collect()  # client handles (librdkafka's) in reference cycles close their sockets
        try:
            broker.stop()
        finally:
            broker.kill()


def two_dir_broker(root: Path, *overrides: str) -> BrokerProcess:
    """A broker (not started) with ``log.dirs`` = ``root/d1,root/d2``."""
    d1, d2 = root / "d1", root / "d2"
    root.mkdir(parents=True, exist_ok=True)
    broker = BrokerProcess(d1, [f"--override={o}" for o in overrides])
    broker.data_dir = Path(f"{d1},{d2}")  # --data-dir is log.dirs: both dirs
    return broker
