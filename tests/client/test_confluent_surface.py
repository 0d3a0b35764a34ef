"""What confluent-kafka programs use, side by side with confluent-kafka on a real broker.

- librdkafka properties real programs set are accepted by ``Producer``/``Consumer``;
  the aliases land on odradek's setting (``queue.buffering.max.ms`` = ``linger.ms``,
  ``message.timeout.ms`` = ``delivery.timeout.ms``, ``message.max.bytes`` =
  ``max.request.size``) and the no-ops are listed in ``config.NO_OPS``.
- ``message.max.bytes`` and ``queue.buffering.max.messages`` refuse in ``produce()``
  as librdkafka does (KafkaException MSG_SIZE_TOO_LARGE, BufferError).
- ``OFFSET_*`` have librdkafka's values; ``list_topics`` answers what confluent-kafka's
  does; ``purge`` fails queued records with ``_PURGE_QUEUE``; ``produce_batch`` queues.
"""

from __future__ import annotations

import gc
import uuid
from collections.abc import Iterator
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

import odradek.client
from odradek.client import Consumer, KafkaError, KafkaException, Producer
from odradek.client._core.config import NO_OPS, ClientConfig
from tests.support.broker import BrokerProcess

TIMEOUT_S = 20.0
LIBRDKAFKA_PRODUCER = {
    "message.max.bytes": 2_000_000,
    "queue.buffering.max.ms": 25,
    "queue.buffering.max.messages": 50_000,
    "message.timeout.ms": 45_000,
    "debug": "broker,topic,msg",
    "statistics.interval.ms": 0,
    "socket.keepalive.enable": True,
    "api.version.request": True,
    "sticky.partitioning.linger.ms": 10,
    "compression.codec": "lz4",
    "queue.buffering.max.kbytes": 65_536,
    "topic.metadata.refresh.interval.ms": 60_000,
    "log_level": 3,
    "log.connection.close": False,
    "broker.address.family": "v4",
    "reconnect.backoff.ms": 50,
    "reconnect.backoff.max.ms": 5_000,
}
LIBRDKAFKA_CONSUMER = {
    "message.max.bytes": 2_000_000,
    "debug": "broker,topic,msg",
    "statistics.interval.ms": 0,
    "socket.keepalive.enable": True,
    "api.version.request": True,
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("confluent-surface") / "data").start()
    try:
        yield process
    finally:
        gc.collect()
        try:
            process.stop()
        finally:
            process.kill()


def new_topic(bootstrap: str, partitions: int = 3) -> str:
    topic = f"cs-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(TIMEOUT_S)
    return topic


def test_offset_constants_are_librdkafkas() -> None:
    for name in (
        "OFFSET_BEGINNING",
        "OFFSET_END",
        "OFFSET_STORED",
        "OFFSET_INVALID",
        "TIMESTAMP_NOT_AVAILABLE",
        "TIMESTAMP_CREATE_TIME",
        "TIMESTAMP_LOG_APPEND_TIME",
    ):
        assert getattr(odradek.client, name) == getattr(confluent_kafka, name), name
    assert KafkaError._PURGE_QUEUE == confluent_kafka.KafkaError._PURGE_QUEUE
    assert KafkaError._MSG_TIMED_OUT == confluent_kafka.KafkaError._MSG_TIMED_OUT
    assert KafkaError._TRANSPORT == confluent_kafka.KafkaError._TRANSPORT


def test_librdkafka_properties_accepted_and_aliases_honoured(broker: BrokerProcess) -> None:
    common = {"bootstrap.servers": broker.bootstrap}
    stats: list[str] = []
    theirs = confluent_kafka.Producer({**common, **LIBRDKAFKA_PRODUCER, "stats_cb": stats.append})
    theirs.flush(1)
    config = ClientConfig({**common, **LIBRDKAFKA_PRODUCER, "stats_cb": stats.append}, "producer")
    assert config["linger.ms"] == 25
    assert config["delivery.timeout.ms"] == 45_000
    assert config["max.request.size"] == 2_000_000
    assert config["queue.buffering.max.messages"] == 50_000
    assert config["compression.type"] == "lz4"
    assert config["buffer.memory"] == 65_536 * 1024
    assert config["metadata.max.age.ms"] == 60_000
    assert {"linger.ms", "delivery.timeout.ms", "max.request.size"} <= config.explicit
    producer = Producer({**common, **LIBRDKAFKA_PRODUCER, "stats_cb": stats.append})
    producer.close()
    group = {**common, "group.id": "g", **LIBRDKAFKA_CONSUMER, "stats_cb": stats.append}
    confluent_kafka.Consumer(group).close()
    Consumer(group).close()
    assert {"debug", "stats_cb", "statistics.interval.ms", "api.version.request"} <= set(NO_OPS)
    with pytest.raises(ValueError, match=r"no\.such\.property"):
        Producer({**common, "no.such.property": 1})


def test_message_max_bytes_refuses_in_produce_as_librdkafka(broker: BrokerProcess) -> None:
    topic = new_topic(broker.bootstrap)
    for make in (confluent_kafka.Producer, Producer):
        producer: Any = make({"bootstrap.servers": broker.bootstrap, "message.max.bytes": 10_000})
        with pytest.raises((KafkaException, confluent_kafka.KafkaException)) as raised:
            producer.produce(topic, b"x" * 20_000)
        assert raised.value.args[0].code() == 10  # MSG_SIZE_TOO_LARGE
        producer.produce(topic, b"x" * 9_000)
        assert producer.flush(TIMEOUT_S) == 0


def test_queue_buffering_max_messages_raises_buffer_error(broker: BrokerProcess) -> None:
    topic = new_topic(broker.bootstrap)
    for make in (confluent_kafka.Producer, Producer):
        producer: Any = make(
            {
                "bootstrap.servers": broker.bootstrap,
                "queue.buffering.max.messages": 3,
                "queue.buffering.max.ms": 60_000,
            }
        )
        for _ in range(3):
            producer.produce(topic, b"v")
        with pytest.raises(BufferError):
            producer.produce(topic, b"v")
        assert producer.flush(TIMEOUT_S) == 0
        producer.produce(topic, b"v")  # room again once the reports were served
        assert producer.flush(TIMEOUT_S) == 0


def _shape(metadata: Any, topic: str) -> Any:
    partitions = metadata.topics[topic].partitions
    return (
        sorted(metadata.brokers),
        {b.id: (b.host, b.port) for b in metadata.brokers.values()},
        {
            p.id: (p.id, p.leader, list(p.replicas), list(p.isrs), p.error)
            for p in partitions.values()
        },
    )


def test_list_topics_answers_like_confluent_kafka(broker: BrokerProcess) -> None:
    topic = new_topic(broker.bootstrap, 4)
    common = {"bootstrap.servers": broker.bootstrap}
    reference = confluent_kafka.Producer(common).list_topics(topic, timeout=TIMEOUT_S)
    producer = Producer(common)
    consumer = Consumer({**common, "group.id": "list-topics"})
    try:
        for ours in (
            producer.list_topics(topic, timeout=TIMEOUT_S),
            consumer.list_topics(topic, timeout=TIMEOUT_S),
            consumer.list_topics(timeout=TIMEOUT_S),
        ):
            assert _shape(ours, topic) == _shape(reference, topic)
            assert ours.topics[topic].error is None
            assert ours.cluster_id == reference.cluster_id
            assert ours.controller_id == reference.controller_id
        everything = consumer.list_topics()
        assert topic in everything.topics
        missing = f"missing-{uuid.uuid4().hex[:6]}"
        theirs = confluent_kafka.Consumer({**common, "group.id": "x"})
        their_missing = theirs.list_topics(missing, timeout=TIMEOUT_S).topics[missing].error
        theirs.close()
        our_missing = consumer.list_topics(missing, timeout=TIMEOUT_S).topics[missing].error
        if their_missing is None:
            assert our_missing is None or our_missing.code() == 3
        else:
            assert our_missing is not None and our_missing.code() == their_missing.code()
    finally:
        producer.close()
        consumer.close()


def test_purge_fails_queued_records_with_purge_queue(broker: BrokerProcess) -> None:
    topic = new_topic(broker.bootstrap)
    for make in (confluent_kafka.Producer, Producer):
        producer: Any = make({"bootstrap.servers": broker.bootstrap, "linger.ms": 60_000})
        producer.produce(topic, b"first")  # the topic's metadata known: records queue
        assert producer.flush(TIMEOUT_S) == 0
        reports: list[Any] = []
        for index in range(5):
            producer.produce(
                topic,
                b"%d" % index,
                partition=index % 3,
                on_delivery=lambda e, m, reports=reports: reports.append(e),
            )
        producer.purge()
        assert producer.flush(TIMEOUT_S) == 0
        assert len(reports) == 5
        assert {e.code() for e in reports} == {KafkaError._PURGE_QUEUE}
    # records still waiting for their topic's metadata are purged too
    fresh = new_topic(broker.bootstrap)
    for index in range(3):
        producer.produce(fresh, b"%d" % index, on_delivery=lambda e, m: reports.append(e))
    producer.purge()
    assert producer.flush(TIMEOUT_S) == 0
    assert [e.code() for e in reports[-3:]] == [KafkaError._PURGE_QUEUE] * 3
    # ours goes on producing afterwards
    producer.produce(topic, b"after", on_delivery=lambda e, m: reports.append(e))
    assert producer.flush(TIMEOUT_S) == 0
    assert reports[-1] is None
    producer.close()


def test_produce_batch_queues_every_message(broker: BrokerProcess) -> None:
    topic = new_topic(broker.bootstrap)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    reports: list[Any] = []
    messages = [
        {"value": b"a", "key": b"k"},
        {"value": "b", "partition": 2},
        {"value": b"c", "callback": lambda e, m: reports.append(("own", m.value()))},
    ]
    queued = producer.produce_batch(topic, messages, on_delivery=lambda e, m: reports.append(e))
    assert queued == 3
    assert producer.flush(TIMEOUT_S) == 0
    producer.close()
    assert sorted(map(str, reports)) == sorted(["None", "None", "('own', b'c')"])


def test_sticky_partitioning_linger_zero_spreads_keyless_records(broker: BrokerProcess) -> None:
    topic = new_topic(broker.bootstrap, 6)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "sticky.partitioning.linger.ms": 0})
    placed: set[int] = set()
    for _ in range(60):
        producer.produce(topic, b"v", on_delivery=lambda e, m: placed.add(m.partition()))
    assert producer.flush(TIMEOUT_S) == 0
    producer.close()
    assert len(placed) > 1
