"""TLS benchmark: produce and consume throughput over an SSL listener beside PLAINTEXT.

Run: ``make bench`` (every bench script) or ``.venv/bin/python bench/tls.py [--quick]``.

What is measured, and how: one ``odradek serve`` with a PLAINTEXT and an SSL listener
(a certificate made for the run, EC P-256, TLS 1.3 as negotiated by default). For
each listener in turn (the order flips every round), confluent-kafka (librdkafka)
produces ``--megabytes`` of ``--record-size`` records to a fresh single-partition
topic (acks=all, lz4 off, linger 5 ms) and flushes; then a consumer assigned to the
partition reads them all from offset 0. Throughput is MB of record values per second;
the median of ``--rounds`` is reported with the SSL/PLAINTEXT ratio. What TLS costs
here: the broker encrypts and decrypts in Python's ssl (OpenSSL), and a fetch
response's record bytes are ``pread`` and encrypted instead of ``sendfile``d, so
consume is where the difference shows most; the client's TLS shares the same 2 cores.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._support import (
    REPO,
    finish,
    load_average,
    read_line,
    show_load,
    stop_process,
    warn_if_busy,
)
from tests.support.certs import make_certs


def start_broker(workdir: Path) -> tuple[subprocess.Popen[bytes], dict[str, str], Path]:
    certs = make_certs(workdir / "certs")
    log_path = workdir / "odradek.log"
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs.server.keystore_pem),
    }
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
            *(f"--override={k}={v}" for k, v in overrides.items()),
        ],
        stdout=subprocess.PIPE,
        stderr=log,
        cwd=REPO,
    )
    log.close()
    try:
        line = read_line(process, "odradek serve", lambda: log_path.read_text()[-4000:])
    except BaseException:
        stop_process(process)
        raise
    urls = {u.split("://", 1)[0]: u.split("://", 1)[1] for u in line.split()[2:]}
    return process, urls, certs.ca


def client_conf(listener: str, urls: dict[str, str], ca: Path) -> dict[str, Any]:
    conf: dict[str, Any] = {"bootstrap.servers": urls[listener]}
    if listener == "SSL":
        conf.update({"security.protocol": "ssl", "ssl.ca.location": str(ca)})
    return conf


def produce(conf: dict[str, Any], topic: str, count: int, payload: bytes) -> float:
    from confluent_kafka import Producer

    producer = Producer({**conf, "acks": "all", "linger.ms": 5, "batch.size": 1_000_000})
    producer.produce(topic, b"warm-up")  # topic auto-created, connections up: untimed
    producer.flush(30)
    started = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, payload)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(120):
        raise RuntimeError("produce: records left undelivered")
    return time.perf_counter() - started


def consume(conf: dict[str, Any], topic: str, count: int) -> float:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            **conf,
            "group.id": topic,
            "enable.auto.commit": False,
            "fetch.max.bytes": 52_428_800,
            "max.partition.fetch.bytes": 8_388_608,
            "queued.max.messages.kbytes": 262_144,
            # librdkafka >= 2.4 postpones a partition's next fetch by this much (default
            # 1000 ms) when its queue holds queued.min.messages: see bench/broker.py.
            "fetch.queue.backoff.ms": 10,
        }
    )
    # From the warm-up record: the clock starts when it arrives (connected, fetching).
    consumer.assign([TopicPartition(topic, 0, 0)])
    while not [m for m in consumer.consume(1, 10.0) if m.error() is None]:
        pass
    received = 0
    started = time.perf_counter()
    deadline = started + 300
    try:
        while received < count and time.perf_counter() < deadline:
            # Never ask for more than is left: consume() waits until it has them all.
            for message in consumer.consume(min(10_000, count - received), 1.0):
                if message.error() is None:
                    received += 1
    finally:
        elapsed = time.perf_counter() - started
        consumer.close()
    if received < count:
        raise RuntimeError(f"consume: {received} of {count} records")
    return elapsed


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="32 MB, 2 rounds")
    parser.add_argument("--megabytes", type=int, default=128)
    parser.add_argument("--record-size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--strict", action="store_true", help="(no goals: accepted)")
    args = parser.parse_args(argv)
    megabytes, rounds = (32, 2) if args.quick else (args.megabytes, args.rounds)
    count = megabytes * 1024 * 1024 // args.record_size
    payload = b"x" * args.record_size
    load_start = load_average()
    started = time.perf_counter()
    print(
        f"TLS bench: {megabytes} MB of {args.record_size}-byte records per run, "
        f"{rounds} rounds; load average at start: {show_load(load_start)}",
        flush=True,
    )
    warn_if_busy(load_start)
    results: dict[tuple[str, str], list[float]] = {}
    errors: list[str] = []
    with tempfile.TemporaryDirectory(prefix="odradek-bench-tls-") as tmp:
        process, urls, ca = start_broker(Path(tmp))
        try:
            for round_ in range(rounds):
                order = ["PLAINTEXT", "SSL"] if round_ % 2 == 0 else ["SSL", "PLAINTEXT"]
                for listener in order:
                    conf = client_conf(listener, urls, ca)
                    topic = f"bench-tls-{listener.lower()}-{uuid.uuid4().hex[:6]}"
                    produced = produce(conf, topic, count, payload)
                    consumed = consume(conf, topic, count)
                    results.setdefault((listener, "produce"), []).append(megabytes / produced)
                    results.setdefault((listener, "consume"), []).append(megabytes / consumed)
        except (RuntimeError, OSError) as error:
            errors.append(str(error))
        finally:
            stop_process(process)
    if not errors:
        print(f"{'':10} {'PLAINTEXT MB/s':>15} {'SSL MB/s':>10} {'SSL/PLAINTEXT':>14}")
        for what in ("produce", "consume"):
            plain = statistics.median(results[("PLAINTEXT", what)])
            tls = statistics.median(results[("SSL", what)])
            print(f"{what:10} {plain:15.1f} {tls:10.1f} {tls / plain:14.2f}")
    return finish("TLS", started, errors, 0, args.strict)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
