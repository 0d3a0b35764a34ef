"""confluent-kafka (librdkafka) against ``odradek serve``: produce, fetch, offsets, admin.

Consumers use ``assign()`` only — consumer groups are not implemented yet — with a
``group.id`` set (librdkafka wants one) and auto-commit off, so no group API is used.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from confluent_kafka import (  # noqa: E402
    OFFSET_BEGINNING,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic  # noqa: E402

from odradek.records.batch import CREATE_TIME, LOG_APPEND_TIME  # noqa: E402
from tests.interop.support import (  # noqa: E402
    BASE_TIMESTAMP,
    CLIENT_TIMEOUT_S,
    DELETE_TOPICS_KEY,
    DESCRIBE_CONFIGS_KEY,
    FIND_COORDINATOR_KEY,
    Sample,
    broker_supports,
    by_partition,
    codec,
    sample_records,
    stored_batches,
    wait_until,
)
from tests.support.broker import BrokerProcess  # noqa: E402

COMPRESSIONS = ["none", "gzip", "snappy", "lz4", "zstd"]
# Record-batch overhead of a one-record batch with a null key, no headers and a value
# of 2**14..2**20 bytes: 61 header bytes + 11 record framing bytes. A topic accepts a
# batch of at most max.message.bytes bytes (header included), as Kafka does.
ONE_RECORD_OVERHEAD = 72


def _common(bootstrap: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "socket.timeout.ms": 10_000,
        "socket.connection.setup.timeout.ms": 10_000,
        "topic.metadata.refresh.interval.ms": 60_000,
    }


def admin_client(bootstrap: str) -> AdminClient:
    return AdminClient(_common(bootstrap))


def create_topic(
    bootstrap: str, name: str, partitions: int = 1, config: dict[str, str] | None = None
) -> None:
    admin = admin_client(bootstrap)  # must outlive the futures
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})],
        operation_timeout=CLIENT_TIMEOUT_S,
        request_timeout=CLIENT_TIMEOUT_S,
    )
    assert futures[name].result(timeout=CLIENT_TIMEOUT_S) is None


@contextmanager
def consumer(bootstrap: str, **config: Any) -> Iterator[Consumer]:
    client = Consumer(
        {
            **_common(bootstrap),
            "group.id": "interop-unused-group",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            **config,
        }
    )
    try:
        yield client
    finally:
        client.close()


def consume(bootstrap: str, topic: str, partitions: int, count: int, **config: Any) -> list[Any]:
    """Exactly ``count`` messages read from the beginning of every partition."""
    with consumer(bootstrap, **config) as client:
        client.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        messages: list[Any] = []
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(messages) < count:
            assert time.monotonic() < deadline, f"only {len(messages)}/{count} messages arrived"
            message = client.poll(0.2)
            if message is None:
                continue
            assert message.error() is None, message.error()
            messages.append(message)
        # Nothing beyond what was produced.
        extra = client.poll(0.3)
        assert extra is None or extra.error() is not None, extra
        return messages


def produce(producer: Producer, topic: str, records: list[Sample]) -> list[Any]:
    """Produce in order; returns the delivery reports, failing on any delivery error."""
    reports: list[tuple[Any, Any]] = []
    for record in records:
        producer.produce(
            topic,
            key=record.key,
            value=record.value,
            partition=record.partition,
            headers=[*record.headers],
            timestamp=record.timestamp,
            on_delivery=lambda error, message: reports.append((error, message)),
        )
    assert producer.flush(CLIENT_TIMEOUT_S) == 0, "messages still queued after flush"
    errors = [error for error, _ in reports if error is not None]
    assert not errors, errors
    assert len(reports) == len(records)
    return [message for _, message in reports]


def assert_same_records(messages: list[Any], records: list[Sample]) -> None:
    """Byte-exact keys, values, headers and CreateTimes; offsets 0.. per partition."""
    got: dict[int, list[Any]] = {}
    for message in messages:
        got.setdefault(message.partition(), []).append(message)
    expected = by_partition(records)
    assert sorted(got) == sorted(expected)
    for partition, wanted in expected.items():
        received = got[partition]
        assert [m.offset() for m in received] == list(range(len(wanted)))
        assert [(m.key(), m.value()) for m in received] == [(r.key, r.value) for r in wanted]
        assert [m.headers() or [] for m in received] == [r.headers for r in wanted]
        assert [m.timestamp() for m in received] == [
            (TIMESTAMP_CREATE_TIME, r.timestamp) for r in wanted
        ]


# -- produce / fetch -----------------------------------------------------------------------


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_idempotent_producer_round_trip(
    interop_broker: BrokerProcess, bootstrap: str, topic_name: str, compression: str
) -> None:
    create_topic(bootstrap, topic_name, partitions=3)
    records = sample_records(partitions=3, per_partition=12)
    producer = Producer(
        {
            **_common(bootstrap),
            "enable.idempotence": True,
            "acks": "all",
            "compression.type": compression,
            "linger.ms": 20,
        }
    )
    reports = produce(producer, topic_name, records)
    # Delivery reports carry the offsets the broker assigned, in produce order.
    offsets: dict[int, list[int]] = {}
    for report in reports:
        offsets.setdefault(report.partition(), []).append(report.offset())
    assert offsets == {p: list(range(12)) for p in range(3)}

    assert_same_records(consume(bootstrap, topic_name, 3, len(records)), records)

    stored_codec = compression
    if compression == "lz4" and not broker_supports(FIND_COORDINATOR_KEY):
        # librdkafka enables its "LZ4" feature only when the broker advertises
        # FindCoordinator v0 (rdkafka_feature.c, a proxy for brokers >= 0.8.2) and
        # otherwise sends lz4 batches uncompressed. FindCoordinator arrives with
        # consumer groups; this expectation flips by itself then.
        stored_codec = "none"
    for partition in range(3):
        batches = stored_batches(interop_broker.data_dir, topic_name, partition)
        assert {b.compression for b in batches} == {codec(stored_codec)}
        # Idempotence is really on: every batch carries a producer id and sequences.
        assert all(b.producer_id >= 0 and b.base_sequence >= 0 for b in batches)
        assert len({b.producer_id for b in batches}) == 1
        assert all(b.timestamp_type == CREATE_TIME for b in batches)


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_plain_producer_each_acks_setting(bootstrap: str, topic_name: str, acks: str) -> None:
    create_topic(bootstrap, topic_name, partitions=2)
    records = sample_records(partitions=2, per_partition=6)
    producer = Producer(
        {**_common(bootstrap), "enable.idempotence": False, "acks": acks, "linger.ms": 5}
    )
    reports = produce(producer, topic_name, records)
    if acks == "0":
        # No response, so no offsets: librdkafka reports OFFSET_INVALID.
        assert {r.offset() for r in reports} in ({None}, {-1001})
    else:
        assert sorted(r.offset() for r in reports) == sorted(list(range(6)) * 2)
    assert_same_records(consume(bootstrap, topic_name, 2, len(records)), records)


def test_per_partition_order_under_pipelining(bootstrap: str, topic_name: str) -> None:
    """Many small batches in flight per partition (5 per connection) keep their order."""
    partitions, per_partition = 4, 300
    create_topic(bootstrap, topic_name, partitions=partitions)
    producer = Producer(
        {
            **_common(bootstrap),
            "enable.idempotence": True,
            "linger.ms": 0,
            "batch.num.messages": 7,
            "max.in.flight.requests.per.connection": 5,
        }
    )
    for i in range(partitions * per_partition):
        producer.produce(topic_name, value=b"%d" % i, partition=i % partitions)
        producer.poll(0)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    messages = consume(bootstrap, topic_name, partitions, partitions * per_partition)
    for partition in range(partitions):
        values = [int(m.value()) for m in messages if m.partition() == partition]
        assert values == list(range(partition, partitions * per_partition, partitions))


def test_keyed_messages_default_partitioner_null_key_and_value(
    bootstrap: str, topic_name: str
) -> None:
    create_topic(bootstrap, topic_name, partitions=3)
    producer = Producer({**_common(bootstrap), "linger.ms": 5})
    for i in range(30):
        producer.produce(topic_name, key=b"k%d" % (i % 5), value=b"v%d" % i)
    producer.produce(topic_name, key=None, value=None)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    messages = consume(bootstrap, topic_name, 3, 31)
    # Same key, same partition, in produce order.
    for k in range(5):
        same = [m for m in messages if m.key() == b"k%d" % k]
        assert len({m.partition() for m in same}) == 1
        assert [m.value() for m in same] == [b"v%d" % i for i in range(k, 30, 5)]
    nulls = [m for m in messages if m.key() is None]
    assert len(nulls) == 1 and nulls[0].value() is None


# -- sizes -----------------------------------------------------------------------------------


def test_900_kib_values_with_default_topic_config(bootstrap: str, topic_name: str) -> None:
    import os

    create_topic(bootstrap, topic_name)
    values = [os.urandom(900 * 1024) for _ in range(3)]
    producer = Producer({**_common(bootstrap), "linger.ms": 0})
    for value in values:
        producer.produce(topic_name, value=value, partition=0)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    messages = consume(bootstrap, topic_name, 1, 3)
    assert [m.value() for m in messages] == values


def test_batch_exactly_at_topic_max_message_bytes_is_accepted_one_byte_more_is_not(
    bootstrap: str, topic_name: str
) -> None:
    limit = 64 * 1024
    create_topic(bootstrap, topic_name, config={"max.message.bytes": str(limit)})
    producer = Producer({**_common(bootstrap), "linger.ms": 0})
    outcomes: list[tuple[Any, int]] = []
    for size in (limit - ONE_RECORD_OVERHEAD, limit - ONE_RECORD_OVERHEAD + 1):
        producer.produce(
            topic_name,
            value=b"x" * size,
            partition=0,
            on_delivery=lambda e, m: outcomes.append((e, len(m.value() or b""))),
        )
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
    (fits_error, _), (over_error, _) = outcomes
    assert fits_error is None
    assert over_error is not None and over_error.code() == KafkaError.MSG_SIZE_TOO_LARGE
    messages = consume(bootstrap, topic_name, 1, 1)
    assert len(messages[0].value()) == limit - ONE_RECORD_OVERHEAD


def test_message_over_default_max_message_bytes_is_rejected_by_the_broker(
    bootstrap: str, topic_name: str
) -> None:
    create_topic(bootstrap, topic_name)
    # Raise the client's own limit so the broker (default 1048588) is what refuses.
    producer = Producer({**_common(bootstrap), "message.max.bytes": 4 * 2**20, "linger.ms": 0})
    outcomes: list[Any] = []
    producer.produce(
        topic_name,
        value=b"y" * (1_100_000),
        partition=0,
        on_delivery=lambda e, m: outcomes.append(e),
    )
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    assert outcomes[0] is not None and outcomes[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
    with consumer(bootstrap) as client:
        low, high = client.get_watermark_offsets(
            TopicPartition(topic_name, 0), timeout=CLIENT_TIMEOUT_S, cached=False
        )
    assert (low, high) == (0, 0)


# -- timestamps and offsets ------------------------------------------------------------------


def test_log_append_time_topic(
    interop_broker: BrokerProcess, bootstrap: str, topic_name: str
) -> None:
    create_topic(bootstrap, topic_name, config={"message.timestamp.type": "LogAppendTime"})
    producer = Producer({**_common(bootstrap), "linger.ms": 0})
    reports: list[Any] = []
    before = int(time.time() * 1000)
    for i in range(3):
        producer.produce(
            topic_name,
            value=b"%d" % i,
            partition=0,
            timestamp=BASE_TIMESTAMP,
            on_delivery=lambda e, m: reports.append((e, m.timestamp())),
        )
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    after = int(time.time() * 1000)
    assert all(error is None for error, _ in reports)
    messages = consume(bootstrap, topic_name, 1, 3)
    for message in messages:
        kind, stamp = message.timestamp()
        assert kind == TIMESTAMP_LOG_APPEND_TIME
        assert before <= stamp <= after
    # The produce response's log_append_time reaches the delivery report.
    assert [r[1][0] for r in reports] == [TIMESTAMP_LOG_APPEND_TIME] * 3
    assert sorted(r[1][1] for r in reports) == sorted(m.timestamp()[1] for m in messages)
    batches = stored_batches(interop_broker.data_dir, topic_name, 0)
    assert {b.timestamp_type for b in batches} == {LOG_APPEND_TIME}


def test_offsets_for_times_and_watermarks(bootstrap: str, topic_name: str) -> None:
    create_topic(bootstrap, topic_name, partitions=2)
    producer = Producer({**_common(bootstrap), "linger.ms": 50})
    # Partition 0: one batch of 10 records 10 s apart; partition 1: 10 single batches.
    for i in range(10):
        producer.produce(topic_name, value=b"a", partition=0, timestamp=BASE_TIMESTAMP + i * 10_000)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    for i in range(10):
        producer.produce(topic_name, value=b"b", partition=1, timestamp=BASE_TIMESTAMP + i * 10_000)
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
    with consumer(bootstrap) as client:
        for partition in (0, 1):
            tp = TopicPartition(topic_name, partition)
            assert client.get_watermark_offsets(tp, timeout=CLIENT_TIMEOUT_S, cached=False) == (
                0,
                10,
            )
            queries = {
                BASE_TIMESTAMP - 1: 0,  # before everything: the first record
                BASE_TIMESTAMP: 0,
                BASE_TIMESTAMP + 1: 1,  # between records: the next one
                BASE_TIMESTAMP + 35_000: 4,
                BASE_TIMESTAMP + 90_000: 9,  # exactly the last
                BASE_TIMESTAMP + 90_001: -1,  # after everything: none (OFFSET_END)
            }
            for stamp, expected in queries.items():
                (found,) = client.offsets_for_times(
                    [TopicPartition(topic_name, partition, stamp)], timeout=CLIENT_TIMEOUT_S
                )
                assert found.error is None
                assert found.offset == expected, (partition, stamp)
        # A fresh, empty partition.
        assert client.get_watermark_offsets(
            TopicPartition(topic_name, 0), timeout=CLIENT_TIMEOUT_S, cached=False
        ) == (0, 10)


def test_consumer_seek_into_the_middle_of_a_compressed_batch(
    bootstrap: str, topic_name: str
) -> None:
    create_topic(bootstrap, topic_name)
    producer = Producer({**_common(bootstrap), "compression.type": "zstd", "linger.ms": 50})
    for i in range(20):
        producer.produce(topic_name, value=b"%d" % i, partition=0)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    with consumer(bootstrap) as client:
        client.assign([TopicPartition(topic_name, 0, 13)])
        values: list[tuple[Any, Any]] = []
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(values) < 7:
            assert time.monotonic() < deadline
            message = client.poll(0.2)
            if message is not None and message.error() is None:
                values.append((message.offset(), message.value()))
    assert values == [(i, b"%d" % i) for i in range(13, 20)]


def test_consumer_out_of_range_offset_resets_to_earliest(bootstrap: str, topic_name: str) -> None:
    create_topic(bootstrap, topic_name)
    producer = Producer(_common(bootstrap))
    producer.produce(topic_name, value=b"only", partition=0)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    with consumer(bootstrap, **{"auto.offset.reset": "earliest"}) as client:
        client.assign([TopicPartition(topic_name, 0, 50)])
        message = wait_until(
            lambda: m if (m := client.poll(0.2)) is not None and m.error() is None else None,
            what="a message after the offset reset",
        )
    assert (message.offset(), message.value()) == (0, b"only")


# -- admin -------------------------------------------------------------------------------------


def test_admin_create_list_describe_delete(bootstrap: str, topic_name: str) -> None:
    admin = admin_client(bootstrap)
    futures = admin.create_topics(
        [
            NewTopic(
                topic_name,
                num_partitions=4,
                replication_factor=1,
                config={"retention.ms": "3600000"},
            )
        ],
        operation_timeout=CLIENT_TIMEOUT_S,
    )
    futures[topic_name].result(timeout=CLIENT_TIMEOUT_S)

    metadata = admin.list_topics(timeout=CLIENT_TIMEOUT_S)
    assert topic_name in metadata.topics
    assert list(metadata.brokers) == [1]
    assert metadata.controller_id == 1 and metadata.cluster_id
    only = admin.list_topics(topic=topic_name, timeout=CLIENT_TIMEOUT_S)
    topic = only.topics[topic_name]
    assert topic.error is None
    assert sorted(topic.partitions) == [0, 1, 2, 3]
    for partition in topic.partitions.values():
        assert (partition.leader, partition.replicas, partition.isrs) == (1, [1], [1])

    # Creating it again fails with TOPIC_ALREADY_EXISTS; bad requests fail per topic.
    again = admin.create_topics([NewTopic(topic_name, 1, 1)], operation_timeout=CLIENT_TIMEOUT_S)
    with pytest.raises(KafkaException) as exists:
        again[topic_name].result(timeout=CLIENT_TIMEOUT_S)
    assert exists.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
    bad = admin.create_topics(
        [NewTopic(topic_name + "-bad", 1, 1, config={"cleanup.policy": "nonsense"})],
        operation_timeout=CLIENT_TIMEOUT_S,
    )
    with pytest.raises(KafkaException) as invalid:
        bad[topic_name + "-bad"].result(timeout=CLIENT_TIMEOUT_S)
    assert invalid.value.args[0].code() == KafkaError.INVALID_CONFIG
    validated = admin.create_topics(
        [NewTopic(topic_name + "-dry", 2, 1)],
        operation_timeout=CLIENT_TIMEOUT_S,
        validate_only=True,
    )
    validated[topic_name + "-dry"].result(timeout=CLIENT_TIMEOUT_S)
    assert topic_name + "-dry" not in admin.list_topics(timeout=CLIENT_TIMEOUT_S).topics

    if not broker_supports(DELETE_TOPICS_KEY):
        pytest.skip("DeleteTopics (API 20) is not implemented yet: delete not checked")
    deleted = admin.delete_topics([topic_name], operation_timeout=CLIENT_TIMEOUT_S)
    deleted[topic_name].result(timeout=CLIENT_TIMEOUT_S)
    wait_until(
        lambda: (
            True if topic_name not in admin.list_topics(timeout=CLIENT_TIMEOUT_S).topics else None
        ),
        what="the deleted topic to leave the metadata",
    )


def test_admin_describe_configs(bootstrap: str, topic_name: str) -> None:
    if not broker_supports(DESCRIBE_CONFIGS_KEY):
        pytest.skip("DescribeConfigs (API 32) is not implemented yet")
    create_topic(bootstrap, topic_name, config={"max.message.bytes": "12345"})
    admin = admin_client(bootstrap)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic_name)
    configs = admin.describe_configs([resource], request_timeout=CLIENT_TIMEOUT_S)[resource].result(
        timeout=CLIENT_TIMEOUT_S
    )
    assert configs["max.message.bytes"].value == "12345"
    assert configs["cleanup.policy"].value == "delete"


def test_librdkafka_all_topics_metadata_request_with_stray_bytes(
    bootstrap: str, topic_name: str
) -> None:
    """librdkafka >= 2.x writes the null topics array of an "all topics" Metadata v12
    request as 4 bytes instead of a 1-byte varint (librdkafka#5049); Kafka ignores the
    3 stray bytes after the last field, so odradek must too (AdminClient.list_topics()).
    These are the bytes confluent-kafka 2.16 sends, replayed without the client."""
    import struct

    from kio.schema.metadata.v12.response import MetadataResponse
    from kio.serial import entity_reader

    from tests.support.wire import WireClient

    create_topic(bootstrap, topic_name)
    payload = (
        struct.pack(">hhih", 3, 12, 42, 7) + b"rdkafka" + b"\x00"  # header v2, no tags
    ) + bytes.fromhex("00000000010000")  # body as librdkafka writes it
    with WireClient(bootstrap) as client:
        client.send_raw(struct.pack(">i", len(payload)) + payload)
        frame = client.read_frame()
    assert struct.unpack_from(">i", frame)[0] == 42
    response, _ = entity_reader(MetadataResponse)(frame, 5)  # correlation id + no tags
    assert topic_name in {t.name for t in response.topics}
