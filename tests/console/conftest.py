"""Fixtures of the console tests: one real broker for the console's tests, seeded with a
topic of known records and a group whose committed offset is below the end (tests that
change things make their own topics and groups), and ``running_console``."""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from odradek.testing._process import first_line
from tests.support.broker import READY_TIMEOUT_S, STOP_TIMEOUT_S, BrokerProcess

confluent_kafka = pytest.importorskip("confluent_kafka")

PRODUCED = 12  # records produced to partition 0 of the seeded topic
COMMITTED = 5  # the seeded group's committed offset there: lag = PRODUCED - COMMITTED


@dataclass(frozen=True)
class Seeded:
    bootstrap: str
    topic: str
    group: str
    json_offset: int  # the record with a JSON value and a header
    order_id: str  # a value inside that record's JSON


@pytest.fixture(scope="session")
def console_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("console") / "data").start()
    try:
        yield process
    finally:
        gc.collect()  # librdkafka handles in reference cycles close their sockets
        try:
            process.stop()
        finally:
            process.kill()


@pytest.fixture(scope="session")
def seeded(console_broker: BrokerProcess) -> Seeded:
    """A 2-partition topic (retention.ms set) with PRODUCED records on partition 0
    (record 3 has a JSON value and a header) and a group that committed COMMITTED
    there, then left."""
    from confluent_kafka.admin import AdminClient, NewTopic

    suffix = uuid.uuid4().hex[:8]
    topic, group = f"orders-{suffix}", f"billing-{suffix}"
    bootstrap = console_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    retention = NewTopic(topic, 2, 1, config={"retention.ms": "86400000"})
    for future in admin.create_topics([retention]).values():
        future.result(30)
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    order_id = f"order-{suffix}"
    for n in range(PRODUCED):
        if n == 3:
            value = json.dumps({"order": order_id, "amount": 42.5, "items": ["tea", "cups"]})
            producer.produce(
                topic,
                key=b"customer-7",
                value=value.encode(),
                partition=0,
                headers=[("trace-id", b"abc-123")],
            )
        else:
            producer.produce(topic, key=f"k{n}".encode(), value=f"plain {n}".encode(), partition=0)
    assert producer.flush(30) == 0
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    try:
        consumer.commit(
            offsets=[confluent_kafka.TopicPartition(topic, 0, COMMITTED)], asynchronous=False
        )
    finally:
        consumer.close()
    return Seeded(bootstrap, topic, group, 3, order_id)


class ConsoleProcess:
    """``odradek console`` as a subprocess on an ephemeral port, stopped by pid."""

    def __init__(self, bootstrap: str, log_path: Path, *extra: str) -> None:
        self.log_path = log_path
        with open(log_path, "ab") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "odradek",
                    "console",
                    "--bootstrap-server",
                    bootstrap,
                    "--listen",
                    "127.0.0.1:0",
                    *extra,
                ],
                stdout=subprocess.PIPE,
                stderr=log,
            )
        self.url = self._ready_url()

    def _ready_url(self) -> str:
        line = first_line(self.process, READY_TIMEOUT_S)
        if line.startswith("odradek console ready http://"):
            return line.split()[3]
        self.stop()
        raise RuntimeError(f"console did not start; log:\n{self.log_path.read_text()}")

    def stop(self) -> int:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                return self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait()
        return self.process.returncode


@contextmanager
def running_console(bootstrap: str, log_path: Path, *extra: str) -> Iterator[ConsoleProcess]:
    console = ConsoleProcess(bootstrap, log_path, *extra)
    try:
        yield console
    finally:
        console.stop()
