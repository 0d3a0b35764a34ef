"""Which Fetch version each real client picks against a broker serving Fetch 4..17, and
that each still consumes with it.

A client sends the highest version both sides know (ApiVersions): the broker's 17
meets librdkafka 2.16's 16 (topic ids, KIP-516; the KIP-951 leader fields), kcat
1.7.1's 11 (its builtin librdkafka is 2.0.2), kafka-python 3.0's 12 (its fetcher stops
there: v13+ is on its to-do list) and aiokafka 0.14's 11. The version is read from
each client's own debug log, so the check is what went on the wire, not what the code
is thought to do.
"""

from __future__ import annotations

import asyncio
import logging
import re
import shutil
import subprocess
import time
from collections.abc import Iterator

import aiokafka
import confluent_kafka
import kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

VALUES = [b"v%d" % i for i in range(5)]


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def versions(self, pattern: str) -> set[int]:
        return {int(m.group(1)) for line in self.lines for m in re.finditer(pattern, line)}


@pytest.fixture
def lines() -> Iterator[_Lines]:
    """Debug records of the clients' loggers, kept while the test runs."""
    handler = _Lines()
    loggers = [logging.getLogger(name) for name in ("kafka", "aiokafka", "rdkafka-test")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.removeHandler(handler)
            logger.setLevel(level)


@pytest.fixture
def filled(bootstrap: str, topic_name: str) -> str:
    """``topic_name`` with one partition holding VALUES."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(30)
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    for value in VALUES:
        producer.produce(topic_name, value)
    assert producer.flush(30) == 0
    return topic_name


def test_confluent_kafka_fetches_by_topic_id(bootstrap: str, filled: str, lines: _Lines) -> None:
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{filled}",
            "auto.offset.reset": "earliest",
            "debug": "protocol",
        },
        logger=logging.getLogger("rdkafka-test"),
    )
    got: list[bytes | None] = []
    try:
        consumer.subscribe([filled])
        deadline = time.monotonic() + 60
        while len(got) < len(VALUES) and time.monotonic() < deadline:
            message = consumer.poll(1)
            if message is not None and message.error() is None:
                got.append(message.value())
    finally:
        consumer.close()
    assert got == VALUES
    used = lines.versions(r"Sent FetchRequest \(v(\d+)")
    assert used, "librdkafka logged no FetchRequest"
    # topic ids on the wire: librdkafka 2.16 stops at v16, so it meets the broker there
    assert min(used) >= 13, used
    assert used == {16}, used


def test_kafka_python_fetches_with_v12(bootstrap: str, filled: str, lines: _Lines) -> None:
    consumer = kafka.KafkaConsumer(
        filled, bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=30000
    )
    try:
        got = [message.value for message in consumer][: len(VALUES)]
    finally:
        consumer.close()
    assert got == VALUES
    assert lines.versions(r"FetchRequest\(version=(\d+)") == {12}


def test_aiokafka_fetches_with_v11(bootstrap: str, filled: str, lines: _Lines) -> None:
    async def consume() -> list[bytes | None]:
        consumer = aiokafka.AIOKafkaConsumer(
            filled, bootstrap_servers=bootstrap, auto_offset_reset="earliest"
        )
        await consumer.start()
        got: list[bytes | None] = []
        try:
            while len(got) < len(VALUES):
                got.append((await asyncio.wait_for(consumer.getone(), 30)).value)
        finally:
            await consumer.stop()
        return got

    assert asyncio.run(consume()) == VALUES
    assert lines.versions(r"FetchRequest_v(\d+)") == {11}


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_fetches_with_its_librdkafkas_version(bootstrap: str, filled: str) -> None:
    done = subprocess.run(
        ["kcat", "-b", bootstrap, "-C", "-t", filled, "-o", "beginning", "-e", "-d", "protocol"],
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert done.stdout.split() == VALUES
    used = {int(v) for v in re.findall(rb"Sent FetchRequest \(v(\d+)", done.stderr)}
    assert used == {11}, used  # librdkafka 2.0.2 knows Fetch up to v11
