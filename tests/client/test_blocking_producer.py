"""The blocking Producer's own paths: produce() from the caller's thread (several at
once), records whose topic is not known yet, errors at produce() and in callbacks."""

from __future__ import annotations

import sys
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from odradek.client import KafkaException, Producer  # noqa: E402
from tests.client.test_producer import TIMEOUT_S, consume, new_topic  # noqa: E402
from tests.support.broker import BrokerProcess, running_broker  # noqa: E402


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("blocking-producer") / "data") as process:
        yield process


def test_threads_producing_at_once_keep_their_own_order(kafka: BrokerProcess) -> None:
    topic = new_topic(kafka.bootstrap, 3)
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 2, "batch.size": 4000})
    threads, per_thread = 4, 1500
    reports: list[tuple[Any, Any]] = []

    def run(number: int) -> None:
        for sequence in range(per_thread):
            producer.produce(
                topic,
                b"%d-%d" % (number, sequence),
                # a few records to an explicit partition, the rest keyless (sticky)
                partition=number % 3 if sequence % 7 == 0 else -1,
                on_delivery=lambda error, message: reports.append((error, message)),
            )

    workers = [threading.Thread(target=run, args=(n,)) for n in range(threads)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # threads take turns often: appends and sends interleave
    try:
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    finally:
        sys.setswitchinterval(interval)
    assert producer.flush(TIMEOUT_S) == 0
    assert len(producer) == 0
    producer.close()
    assert len(reports) == threads * per_thread
    assert all(error is None for error, _ in reports)
    placed = {(m.partition(), m.offset()) for _, m in reports}
    assert len(placed) == threads * per_thread  # every record its own offset

    got = consume(kafka.bootstrap, topic, 3, threads * per_thread)
    assert sorted(m.value() for m in got) == sorted(m.value() for _, m in reports)
    for partition in range(3):
        seen: dict[int, int] = {}
        for message in (m for m in got if m.partition() == partition):
            number, sequence = map(int, message.value().split(b"-"))
            assert sequence > seen.get(number, -1), "a thread's records out of order"
            seen[number] = sequence


def test_records_for_a_topic_not_known_yet_stay_in_order(kafka: BrokerProcess) -> None:
    """The first records wait for metadata on the loop (the broker creates the topic);
    the ones produced meanwhile queue behind them instead of overtaking."""
    topic = f"auto-{uuid.uuid4().hex[:10]}"
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 1})
    offsets: list[int] = []
    count = 5000
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads take turns often: the handover is raced
    try:
        for number in range(count):
            producer.produce(
                topic,
                b"%d" % number,
                partition=0,
                on_delivery=lambda error, message: offsets.append(message.offset()),
            )
    finally:
        sys.setswitchinterval(interval)
    assert producer.flush(TIMEOUT_S) == 0
    producer.close()
    assert offsets == list(range(count))
    got = consume(kafka.bootstrap, topic, 1, count)
    assert [int(m.value()) for m in got] == list(range(count))


def test_bad_arguments_raise_or_fail_the_delivery(kafka: BrokerProcess) -> None:
    topic = new_topic(kafka.bootstrap, 1)
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    producer.list_topics(topic)
    with pytest.raises(TypeError, match="value"):
        producer.produce(topic, 12345)
    with pytest.raises(TypeError, match="header value"):
        producer.produce(topic, b"v", headers=[("h", 1.5)])
    assert len(producer) == 0
    failed: list[Any] = []
    producer.produce(topic, b"v", partition=7, on_delivery=lambda e, m: failed.append((e, m)))
    assert len(producer) == 1  # until its report is served
    producer.produce(topic, "text", key="key", headers={"h": "v"})
    assert producer.flush(TIMEOUT_S) == 0
    producer.close()
    [(error, message)] = failed
    assert isinstance(error, KafkaException) and "UNKNOWN_TOPIC_OR_PARTITION" in str(error)
    assert (message.partition(), message.value(), message.error()) == (7, b"v", error)
    [message] = consume(kafka.bootstrap, topic, 1, 1)
    assert (message.key(), message.value(), message.headers()) == (b"key", b"text", [("h", b"v")])


def test_a_batch_the_broker_rejects_fails_every_callback(kafka: BrokerProcess) -> None:
    topic = new_topic(kafka.bootstrap, 1)
    # the client's own limit (message.max.bytes) raised so the broker is what refuses
    producer = Producer(
        {"bootstrap.servers": kafka.bootstrap, "linger.ms": 50, "message.max.bytes": 4 << 20}
    )
    reports: list[tuple[Any, Any]] = []

    def report(error: Any, message: Any) -> None:
        reports.append((error, message))

    producer.produce(topic, b"x" * 1_100_000, key=b"big", on_delivery=report)  # > 1 MiB
    assert producer.flush(TIMEOUT_S) == 0
    producer.produce(topic, b"small", on_delivery=report)
    assert producer.flush(TIMEOUT_S) == 0
    producer.close()
    (error, message), (ok, small) = reports
    assert error is not None and message.error() is error
    assert message.key() == b"big" and message.offset() < 0
    assert ok is None and small.offset() == 0
