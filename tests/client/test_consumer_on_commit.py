"""``on_commit``: the blocking Consumer reports commit outcomes as confluent-kafka does.

The same steps run with confluent-kafka's Consumer and ours on one broker, and what
each ``on_commit`` saw is compared: an asynchronous commit and auto-commit are
reported from a later poll() (error None, the committed offsets); an asynchronous
commit with nothing new reports _NO_OFFSET with the assignment at -1001; a
synchronous commit raises instead and is not reported.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import confluent_kafka
import pytest

import odradek.client
from odradek.testing import EmbeddedBroker

TIMEOUT_S = 20.0
CLIENTS = {"confluent": confluent_kafka, "odradek": odradek.client}


@pytest.fixture(scope="module")
def kafka(odradek_broker: EmbeddedBroker) -> EmbeddedBroker:
    """The session's broker (odradek.testing's pytest plugin), in this process: these
    tests only add their own uniquely named topics and groups."""
    return odradek_broker


@pytest.fixture(scope="module")
def topic(kafka: EmbeddedBroker) -> str:
    name = f"oc-{uuid.uuid4().hex[:8]}"
    producer = confluent_kafka.Producer({"bootstrap.servers": kafka.bootstrap})
    for i in range(10):
        producer.produce(name, b"v%d" % i, partition=0)
    assert producer.flush(TIMEOUT_S) == 0
    return name


def _consumer(module: Any, kafka: EmbeddedBroker, seen: list[Any], auto: bool) -> Any:
    def on_commit(error: Any, partitions: list[Any]) -> None:
        code = None if error is None else error.code()
        seen.append((code, [(p.topic, p.partition, p.offset) for p in partitions]))

    return module.Consumer(
        {
            "bootstrap.servers": kafka.bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": auto,
            "auto.commit.interval.ms": 300,
            "on_commit": on_commit,
        }
    )


def _read_all(consumer: Any, count: int) -> None:
    got, deadline = 0, time.monotonic() + TIMEOUT_S
    while got < count and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            got += 1
    assert got == count


def _poll_until(consumer: Any, seen: list[Any], count: int) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while len(seen) < count and time.monotonic() < deadline:
        consumer.poll(0.1)
    for _ in range(3):  # and nothing more arrives
        consumer.poll(0.1)


def _manual_commits(module: Any, kafka: EmbeddedBroker, topic: str) -> list[Any]:
    seen: list[Any] = []
    consumer = _consumer(module, kafka, seen, auto=False)
    try:
        consumer.subscribe([topic])
        _read_all(consumer, 10)
        consumer.commit(asynchronous=True)
        _poll_until(consumer, seen, 1)
        consumer.commit(asynchronous=True)  # nothing new
        _poll_until(consumer, seen, 2)
        with pytest.raises(module.KafkaException):
            consumer.commit(asynchronous=False)  # nothing new: raises, not reported
        _poll_until(consumer, seen, 2)  # and nothing more is reported
    finally:
        consumer.close()
    return [(None if code is None else int(code), parts) for code, parts in seen]


@pytest.mark.parametrize("name", list(CLIENTS))
def test_async_commits_are_reported_and_sync_ones_raise(
    kafka: EmbeddedBroker, topic: str, name: str
) -> None:
    assert _manual_commits(CLIENTS[name], kafka, topic) == [
        (None, [(topic, 0, 10)]),
        (-168, [(topic, 0, -1001)]),  # _NO_OFFSET
    ]


def test_auto_commit_is_reported_from_poll(kafka: EmbeddedBroker, topic: str) -> None:
    seen: list[Any] = []
    consumer = _consumer(odradek.client, kafka, seen, auto=True)
    try:
        consumer.subscribe([topic])
        _read_all(consumer, 10)
        _poll_until(consumer, seen, 1)
    finally:
        consumer.close()
    assert seen[0] == (None, [(topic, 0, 10)])
