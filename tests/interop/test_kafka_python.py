"""kafka-python against ``odradek serve``: producer, assign()-only consumer, admin.

kafka-python compresses gzip with the standard library, but needs ``python-snappy``
for snappy, ``lz4`` for lz4 and ``zstandard`` for zstd (it does not use cramjam);
those codecs are skipped when the package is missing. It also refuses ``None`` header
values client-side, so its records carry only bytes header values.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

kafka = pytest.importorskip("kafka")

from kafka import KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402
from kafka import codec as kafka_codec  # noqa: E402
from kafka.admin import KafkaAdminClient, NewTopic  # noqa: E402
from kafka.errors import (  # noqa: E402
    InvalidConfigurationError,
    MessageSizeTooLargeError,
    TopicAlreadyExistsError,
)

from tests.interop.support import (  # noqa: E402
    BASE_TIMESTAMP,
    CLIENT_TIMEOUT_S,
    DELETE_TOPICS_KEY,
    Sample,
    assert_same_records,
    broker_supports,
    codec,
    sample_records,
    stored_batches,
    wait_until,
)
from tests.support.broker import BrokerProcess  # noqa: E402

TIMEOUT_MS = int(CLIENT_TIMEOUT_S * 1000)
# codec -> (available in this environment, the package kafka-python needs for it)
CODECS = {
    "gzip": (kafka_codec.has_gzip(), "standard library"),
    "snappy": (kafka_codec.has_snappy(), "python-snappy"),
    "lz4": (kafka_codec.has_lz4(), "lz4"),
    "zstd": (kafka_codec.has_zstd(), "zstandard"),
}


def _common(bootstrap: str) -> dict[str, Any]:
    return {"bootstrap_servers": bootstrap, "request_timeout_ms": TIMEOUT_MS}


@contextmanager
def admin_client(bootstrap: str) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(**_common(bootstrap))
    try:
        yield client
    finally:
        client.close()


def create_topic(
    bootstrap: str, name: str, partitions: int = 1, config: dict[str, str] | None = None
) -> None:
    with admin_client(bootstrap) as admin:
        admin.create_topics(
            [NewTopic(name, partitions, 1, topic_configs=config or {})], timeout_ms=TIMEOUT_MS
        )


@contextmanager
def producer(bootstrap: str, **config: Any) -> Iterator[KafkaProducer]:
    client = KafkaProducer(**_common(bootstrap), max_block_ms=TIMEOUT_MS, **config)
    try:
        yield client
    finally:
        client.close(timeout=CLIENT_TIMEOUT_S)


@contextmanager
def consumer(bootstrap: str, **config: Any) -> Iterator[KafkaConsumer]:
    client = KafkaConsumer(**_common(bootstrap), group_id=None, enable_auto_commit=False, **config)
    try:
        yield client
    finally:
        client.close()


def consume(bootstrap: str, topic: str, partitions: int, count: int) -> list[Any]:
    """Exactly ``count`` records from the beginning of every partition (assign only)."""
    with consumer(bootstrap) as client:
        client.assign([TopicPartition(topic, p) for p in range(partitions)])
        client.seek_to_beginning()
        records: list[Any] = []
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(records) < count:
            assert time.monotonic() < deadline, f"only {len(records)}/{count} records arrived"
            for batch in client.poll(timeout_ms=200).values():
                records.extend(batch)
        assert not any(client.poll(timeout_ms=300).values()), "more records than produced"
        return records


def produce(client: KafkaProducer, topic: str, records: list[Sample]) -> list[Any]:
    futures = [
        client.send(
            topic,
            key=r.key,
            value=r.value,
            headers=r.headers,
            partition=r.partition,
            timestamp_ms=r.timestamp,
        )
        for r in records
    ]
    client.flush(timeout=CLIENT_TIMEOUT_S)
    return [f.get(timeout=CLIENT_TIMEOUT_S) for f in futures]


@pytest.mark.parametrize("compression", [None, "gzip", "snappy", "lz4", "zstd"])
def test_round_trip_acks_all_each_codec(
    interop_broker: BrokerProcess, bootstrap: str, topic_name: str, compression: str | None
) -> None:
    if compression is not None and not CODECS[compression][0]:
        pytest.skip(
            f"kafka-python needs the {CODECS[compression][1]!r} package for {compression}; "
            "it is not installed (kafka-python does not use cramjam)"
        )
    create_topic(bootstrap, topic_name, partitions=3)
    records = sample_records(3, 8, none_header_values=False)
    with producer(bootstrap, acks="all", compression_type=compression, linger_ms=20) as client:
        metadata = produce(client, topic_name, records)
    assert sorted((m.partition, m.offset) for m in metadata) == [
        (p, o) for p in range(3) for o in range(8)
    ]
    assert_same_records(consume(bootstrap, topic_name, 3, len(records)), records)
    for partition in range(3):
        batches = stored_batches(interop_broker.data_dir, topic_name, partition)
        assert {b.compression for b in batches} == {codec(compression or "none")}
        # kafka-python 3 is idempotent by default (acks=all): producer id + sequences.
        assert all(b.producer_id >= 0 and b.base_sequence >= 0 for b in batches)


def test_non_idempotent_acks_1_and_large_values(bootstrap: str, topic_name: str) -> None:
    create_topic(bootstrap, topic_name)
    values = [os.urandom(900 * 1024), b"small", os.urandom(700 * 1024)]
    with producer(bootstrap, acks=1, enable_idempotence=False) as client:
        for value in values:
            client.send(topic_name, value=value, partition=0).get(timeout=CLIENT_TIMEOUT_S)
    assert [r.value for r in consume(bootstrap, topic_name, 1, 3)] == values


def test_message_over_topic_max_message_bytes(bootstrap: str, topic_name: str) -> None:
    create_topic(bootstrap, topic_name, config={"max.message.bytes": "10000"})
    with producer(bootstrap, acks=1, enable_idempotence=False) as client:
        client.send(topic_name, value=b"fits", partition=0).get(timeout=CLIENT_TIMEOUT_S)
        future = client.send(topic_name, value=b"z" * 20_000, partition=0)
        with pytest.raises(MessageSizeTooLargeError):
            future.get(timeout=CLIENT_TIMEOUT_S)
    assert [r.value for r in consume(bootstrap, topic_name, 1, 1)] == [b"fits"]


def test_offsets_api_and_log_append_time(bootstrap: str, topic_name: str) -> None:
    create_topic(bootstrap, topic_name, partitions=2)
    log_append = topic_name + "-lat"
    create_topic(bootstrap, log_append, config={"message.timestamp.type": "LogAppendTime"})
    with producer(bootstrap, linger_ms=20) as client:
        for i in range(6):
            client.send(topic_name, value=b"%d" % i, partition=0, timestamp_ms=BASE_TIMESTAMP + i)
        before = int(time.time() * 1000)
        sent = client.send(log_append, value=b"lat", partition=0, timestamp_ms=BASE_TIMESTAMP)
        appended = sent.get(timeout=CLIENT_TIMEOUT_S)
        client.flush(timeout=CLIENT_TIMEOUT_S)
        after = int(time.time() * 1000)
    assert before <= appended.timestamp <= after  # the broker's log_append_time
    tp0, tp1 = TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)
    with consumer(bootstrap) as client:
        assert client.beginning_offsets([tp0, tp1]) == {tp0: 0, tp1: 0}
        assert client.end_offsets([tp0, tp1]) == {tp0: 6, tp1: 0}
        found = client.offsets_for_times({tp0: BASE_TIMESTAMP + 3, tp1: BASE_TIMESTAMP})
        assert (found[tp0].offset, found[tp0].timestamp) == (3, BASE_TIMESTAMP + 3)
        assert found[tp1] is None
        assert client.offsets_for_times({tp0: BASE_TIMESTAMP + 99})[tp0] is None
    (record,) = consume(bootstrap, log_append, 1, 1)
    assert record.timestamp_type == 1  # LogAppendTime
    assert record.timestamp == appended.timestamp


def test_admin_create_list_describe_delete(bootstrap: str, topic_name: str) -> None:
    with admin_client(bootstrap) as admin:
        response = admin.create_topics(
            [NewTopic(topic_name, 3, 1, topic_configs={"segment.bytes": "1048576"})],
            timeout_ms=TIMEOUT_MS,
        )
        assert response is not None
        assert topic_name in admin.list_topics()
        (described,) = admin.describe_topics([topic_name])
        assert described["error_code"] == 0
        assert sorted(p["partition_index"] for p in described["partitions"]) == [0, 1, 2]
        assert {p["leader_id"] for p in described["partitions"]} == {1}
        # KIP-516: the same topic described by its id (Metadata v12 with topic_id).
        topic_id = described["topic_id"]
        (by_id,) = admin.describe_topics([uuid.UUID(str(topic_id))])
        assert by_id["name"] == topic_name
        cluster = admin.describe_cluster()
        assert cluster["controller_id"] == 1
        assert [b["broker_id"] for b in cluster["brokers"]] == [1]

        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([NewTopic(topic_name, 1, 1)], timeout_ms=TIMEOUT_MS)
        with pytest.raises(InvalidConfigurationError):
            admin.create_topics(
                [NewTopic(topic_name + "-x", 1, 1, topic_configs={"retention.ms": "soon"})],
                timeout_ms=TIMEOUT_MS,
            )
        admin.create_topics(
            [NewTopic(topic_name + "-dry", 1, 1)], timeout_ms=TIMEOUT_MS, validate_only=True
        )
        assert topic_name + "-dry" not in admin.list_topics()

        if not broker_supports(DELETE_TOPICS_KEY):
            pytest.skip("DeleteTopics (API 20) is not implemented yet: delete not checked")
        admin.delete_topics([topic_name], timeout_ms=TIMEOUT_MS)
        wait_until(
            lambda: True if topic_name not in admin.list_topics() else None,
            what="the deleted topic to leave the metadata",
        )
