"""A local S3 endpoint for tests: moto's server on 127.0.0.1, one bucket, stopped by pid.

How this works and why: the S3 backend of tiered storage (odradek/storage/remote/s3.py)
must be tested against a real HTTP S3 API — ranged GETs, multipart uploads, 404s,
a server that goes away — without network access or credentials. ``moto_server``
(moto[server]) is such an endpoint in a child process. ``S3Server.start`` picks a free
port, starts it there, polls until it answers HTTP (a bounded wait), and creates a
bucket with an unsigned ``PUT /<bucket>`` (moto does not check signatures), so the
tests need no boto client. ``stop`` ends exactly that child (SIGTERM, then SIGKILL
after a grace period) by its pid — never by name: other engineers' moto servers may
run on the same machine.

Use the ``s3_server`` fixture (function scope: a test may stop its server), and
``S3Server.rsm_config()`` for the matching ``rsm.config.s3.*`` properties.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

START_TIMEOUT_S: Final = 30.0
STOP_GRACE_S: Final = 5.0
BUCKET: Final = "odradek-tiered"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _moto_server() -> str:
    binary = Path(sys.executable).with_name("moto_server")
    if not binary.exists():
        pytest.skip("moto_server is not installed (pip install 'moto[server]')")
    return str(binary)


class S3Server:
    def __init__(self, log_path: Path, bucket: str = BUCKET) -> None:
        self.port = _free_port()
        self.bucket = bucket
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> S3Server:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [_moto_server(), "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C of pytest does not reach it twice
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"moto_server exited with {self.process.returncode}")
            try:
                with urllib.request.urlopen(self.url + "/", timeout=1):
                    break
            except (OSError, urllib.error.URLError):
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"moto_server did not answer on {self.url}") from None
                time.sleep(0.1)
        request = urllib.request.Request(f"{self.url}/{self.bucket}", method="PUT")
        with urllib.request.urlopen(request, timeout=10):
            pass
        return self

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()

    def rsm_config(self, prefix: str = "rsm.config.") -> dict[str, str]:
        return {
            f"{prefix}s3.bucket": self.bucket,
            f"{prefix}s3.endpoint.url": self.url,
            f"{prefix}s3.region": "us-east-1",
            f"{prefix}s3.access.key.id": "testing",
            f"{prefix}s3.secret.access.key": "testing",
            f"{prefix}s3.allow.http": "true",
            # a stopped server must fail fast: one retry, short timeouts
            f"{prefix}s3.max.retries": "1",
            f"{prefix}s3.retry.timeout.ms": "2000",
            f"{prefix}s3.connect.timeout.ms": "1000",
            f"{prefix}s3.request.timeout.ms": "10000",
        }


@pytest.fixture
def s3_server(tmp_path: Path) -> Iterator[S3Server]:
    server = S3Server(tmp_path / "moto_server.log").start()
    try:
        yield server
    finally:
        with contextlib.suppress(OSError):
            server.stop()
