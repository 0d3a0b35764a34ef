"""SASL benchmark: SCRAM-SHA-256 / SCRAM-SHA-512 authentications per second.

Run: ``.venv/bin/python bench/sasl.py [--seconds S] [--concurrency N]`` (``--quick``:
2 s per mechanism). About 15 s by default.

What is measured, and how:

- Broker: ``python -m odradek serve`` with one SASL_PLAINTEXT listener on
  127.0.0.1:0 enabling SCRAM-SHA-256 and SCRAM-SHA-512, in a fresh temporary
  directory (deleted at the end), log level WARNING. The user's credentials (4096
  iterations, Kafka's minimum and default) are written with ``odradek storage format
  --add-scram`` before the start, as an operator bootstraps users.
- Client: odradek's own client connection (``BrokerConnection`` with SASL
  credentials), in this process, one asyncio loop. One authentication = a new TCP
  connection, ApiVersions, SaslHandshake v1 and the two SaslAuthenticate round trips
  of SCRAM (client-first / server-first, client-final / server-final, the broker's
  signature checked), then close. ``--concurrency`` connections authenticate at once
  (default 1: sequential).
- Reported per mechanism: full handshakes per second (wall clock), and the broker
  process's CPU time per handshake (utime + stime from /proc, before and after), the
  broker's own cost. The client's share is mostly PBKDF2 (4096 HMAC iterations per
  handshake, in the client; the broker stores the derived keys and computes only a
  few HMACs), so on 2 shared cores the client bounds the rate.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._support import (
    REPO,
    load_average,
    read_line,
    show_load,
    stop_process,
    warn_if_busy,
)
from odradek.client._core.connection import BrokerAddress, BrokerConnection
from odradek.client._core.sasl import SaslCredentials

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
ITERATIONS = 4096
USER, PASSWORD = "bench", "bench-secret"
VERSIONS = {18: (0, 3), 17: (1, 1), 36: (0, 2)}


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc (clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def format_with_scram(workdir: Path) -> None:
    properties = workdir / "server.properties"
    properties.write_text(f"log.dirs={workdir / 'data'}\n")
    odradek = [sys.executable, "-m", "odradek", "storage"]
    cluster_id = subprocess.run(
        [*odradek, "random-uuid"], capture_output=True, check=True, text=True, cwd=REPO
    ).stdout.strip()
    scram = [
        f"--add-scram={m}=[name={USER},password={PASSWORD},iterations={ITERATIONS}]"
        for m in MECHANISMS
    ]
    subprocess.run(
        [*odradek, "format", "-t", cluster_id, "-c", str(properties), *scram],
        capture_output=True,
        check=True,
        cwd=REPO,
    )


def start_broker(workdir: Path) -> tuple[subprocess.Popen[bytes], str, Path]:
    log_path = workdir / "odradek.log"
    format_with_scram(workdir)
    log = open(log_path, "ab")  # noqa: SIM115 - kept by the child
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "odradek",
            "serve",
            "--data-dir",
            str(workdir / "data"),
            "--log-level",
            "WARNING",
            "--override=listeners=SASL_PLAINTEXT://127.0.0.1:0",
            f"--override=sasl.enabled.mechanisms={','.join(MECHANISMS)}",
        ],
        stdout=subprocess.PIPE,
        stderr=log,
        cwd=REPO,
    )
    log.close()
    line = read_line(process, "odradek serve", lambda: log_path.read_text(errors="replace"))
    if not line.startswith("odradek ready "):
        stop_process(process)
        raise RuntimeError(f"odradek serve said {line!r}")
    return process, line.split()[2].split("://", 1)[1], log_path


async def authenticate_once(host: str, port: int, credentials: SaslCredentials) -> None:
    connection = BrokerConnection(
        BrokerAddress(-1, host, port),
        client_id="bench-sasl",
        request_timeout_s=30,
        client_versions=VERSIONS,
        sasl=credentials,
    )
    await connection.connect()  # ApiVersions + SaslHandshake + SaslAuthenticate x2
    await connection.close()


async def measure(
    bootstrap: str, mechanism: str, seconds: float, concurrency: int
) -> tuple[int, float]:
    host, port_text = bootstrap.rsplit(":", 1)
    credentials = SaslCredentials(mechanism, USER, PASSWORD)
    count = 0
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal count
        while time.perf_counter() < deadline:
            await authenticate_once(host, int(port_text), credentials)
            count += 1

    await authenticate_once(host, int(port_text), credentials)  # warm up (imports, codecs)
    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return count, time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=6.0, help="per mechanism")
    parser.add_argument("--concurrency", type=int, default=1, help="handshakes at once")
    parser.add_argument("--quick", action="store_true", help="2 s per mechanism")
    args = parser.parse_args(argv)
    seconds = 2.0 if args.quick else args.seconds
    load_start = load_average()
    print(f"load average at start: {show_load(load_start)}", flush=True)
    warn_if_busy(load_start)
    workdir = Path(tempfile.mkdtemp(prefix="bench-sasl-"))
    process = None
    started = time.perf_counter()
    try:
        process, bootstrap, _ = start_broker(workdir)
        print(
            "| mechanism | iterations | concurrency | handshakes | seconds | handshakes/s "
            "| broker CPU ms/handshake |\n|---|---|---|---|---|---|---|",
            flush=True,
        )
        for mechanism in MECHANISMS:
            cpu_before = cpu_seconds(process.pid)
            count, elapsed = asyncio.run(measure(bootstrap, mechanism, seconds, args.concurrency))
            cpu = cpu_seconds(process.pid) - cpu_before
            print(
                f"| {mechanism} | {ITERATIONS} | {args.concurrency} | {count} | {elapsed:.2f} "
                f"| {count / elapsed:.1f} | {cpu * 1000 / max(count, 1):.2f} |",
                flush=True,
            )
    finally:
        stop_process(process)
        shutil.rmtree(workdir, ignore_errors=True)
    print(
        f"sasl bench wall time: {time.perf_counter() - started:.1f} s; "
        f"load average at end: {show_load(load_average())}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
