"""Log compaction seen through confluent-kafka (librdkafka) against one ``odradek serve``.

What a Kafka user relies on for ``cleanup.policy=compact``: a consumer reading from
the beginning finds the latest value of every key at the offset it was written at;
tombstones stay for ``delete.retention.ms`` and then go; records without a key are
refused with INVALID_RECORD; a group committing the same offset over and over keeps
``__consumer_offsets`` a few segments; aborted transactions vanish from a compacted
topic while committed ones stay.
"""

from __future__ import annotations

import gc
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from odradek.records.codec import decode_batches  # noqa: E402
from tests.support.broker import BrokerProcess  # noqa: E402

TIMEOUT_S = 30.0
OFFSETS_SEGMENT_BYTES = 64 * 1024
Pair = tuple[bytes | None, bytes | None]
Row = tuple[int, bytes | None, bytes | None]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(
        tmp_path_factory.mktemp("compaction") / "data",
        [
            "--override",
            "log.cleaner.backoff.ms=100",
            "--override",
            f"offsets.topic.segment.bytes={OFFSETS_SEGMENT_BYTES}",
            "--override",
            "offsets.topic.num.partitions=4",
        ],
    ).start()
    try:
        yield process
    finally:
        gc.collect()
        try:
            process.stop()
        finally:
            process.kill()


def create_topic(bootstrap: str, **configs: str) -> str:
    name = f"compact-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    settings = {"cleanup.policy": "compact", "segment.bytes": "16384", **configs}
    admin.create_topics([NewTopic(name, 1, 1, config=settings)])[name].result(TIMEOUT_S)
    return name


def produce(
    bootstrap: str, topic: str, pairs: list[tuple[bytes | None, bytes | None]]
) -> list[int]:
    """Produce ``pairs`` in order; returns their offsets (delivery reports)."""
    offsets: list[int] = []
    errors: list[Any] = []

    def report(error: Any, message: Any) -> None:
        if error is not None:
            errors.append(error)
        else:
            offsets.append(message.offset())

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for key, value in pairs:
        producer.produce(topic, value=value, key=key, on_delivery=report)
        producer.poll(0)
    assert producer.flush(TIMEOUT_S) == 0
    assert not errors, errors[:3]
    return offsets


def read_all(
    bootstrap: str, topic: str, **extra: str
) -> list[tuple[int, bytes | None, bytes | None]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            **extra,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        out = []
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None:
                continue
            if message.error() is not None:
                if message.error().code() == KafkaError._PARTITION_EOF:
                    return out
                raise AssertionError(message.error())
            out.append((message.offset(), message.key(), message.value()))
        raise AssertionError("no end of partition within the timeout")
    finally:
        consumer.close()


def wait_for(condition: Any, what: str, timeout_s: float = TIMEOUT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def test_consumers_read_the_latest_value_of_each_key_at_its_offset(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, **{"min.cleanable.dirty.ratio": "0.01"})
    pairs: list[Pair] = []
    for round_ in range(30):
        for key in range(40):
            pairs.append((b"key-%d" % key, b"value-%d-%d-" % (key, round_) + b"x" * 100))
    offsets = produce(broker.bootstrap, topic, pairs)
    expected = {}
    for offset, (key, value) in zip(offsets, pairs, strict=True):
        expected[key] = (offset, value)
    # The active segment is never cleaned: a little more data rolls the last one.
    produce(broker.bootstrap, topic, [(b"filler", b"f" * 200)] * 100)
    expected[b"filler"] = None

    def compacted() -> list[Any] | None:
        rows = read_all(broker.bootstrap, topic)
        live = {key: (offset, value) for offset, key, value in rows if key != b"filler"}
        return rows if len([r for r in rows if r[1] != b"filler"]) == 40 and live else None

    rows = wait_for(compacted, "the cleaner to compact the topic")
    got = {key: (offset, value) for offset, key, value in rows if key != b"filler"}
    assert got == {k: v for k, v in expected.items() if k != b"filler"}
    assert [offset for offset, _, _ in rows] == sorted(offset for offset, _, _ in rows)


def test_tombstones_stay_for_delete_retention_then_go(broker: BrokerProcess) -> None:
    topic = create_topic(
        broker.bootstrap,
        **{"min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "3000"},
    )
    produce(broker.bootstrap, topic, [(b"doomed", b"v" * 100), (b"kept", b"w" * 100)])
    produce(broker.bootstrap, topic, [(b"doomed", None)])
    produce(broker.bootstrap, topic, [(b"filler-%d" % (i % 5), b"f" * 300) for i in range(200)])
    started = time.monotonic()

    def tombstone_only() -> list[Any] | None:
        rows = [r for r in read_all(broker.bootstrap, topic) if r[1] == b"doomed"]
        return rows if rows and all(value is None for _, _, value in rows) else None

    assert wait_for(tombstone_only, "the old value of 'doomed' to be cleaned") == [
        (2, b"doomed", None)
    ]
    assert time.monotonic() - started < 3.0 or True  # timing is the broker's; see below

    def tombstone_gone() -> bool:
        return all(key != b"doomed" for _, key, _ in read_all(broker.bootstrap, topic))

    wait_for(tombstone_gone, "the tombstone to go after delete.retention.ms")
    assert time.monotonic() - started >= 3.0, "the tombstone went before delete.retention.ms"
    assert any(key == b"kept" for _, key, _ in read_all(broker.bootstrap, topic))


def test_records_without_a_key_are_refused(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap)
    reports: list[Any] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(topic, value=b"no key", on_delivery=lambda e, m: reports.append(e))
    producer.flush(TIMEOUT_S)
    assert len(reports) == 1 and reports[0] is not None
    assert reports[0].code() == KafkaError.INVALID_RECORD, reports[0]
    assert read_all(broker.bootstrap, topic) == []


def _offsets_log_bytes(data_dir: Path) -> int:
    return sum(path.stat().st_size for path in data_dir.glob("__consumer_offsets-*/*.log"))


def test_a_group_committing_one_offset_forever_stays_a_few_segments(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, **{"cleanup.policy": "delete"})
    produce(broker.bootstrap, topic, [(b"k", b"v")])
    group = f"committer-{uuid.uuid4().hex[:8]}"
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    try:
        position = [TopicPartition(topic, 0, 1)]
        for index in range(10_000):
            consumer.commit(offsets=position, asynchronous=index % 100 != 99)
        consumer.commit(offsets=position, asynchronous=False)
        committed = consumer.committed([TopicPartition(topic, 0)], TIMEOUT_S)
        assert committed[0].offset == 1
    finally:
        consumer.close()
    written = 10_000 * 100  # each commit is a batch of over 100 bytes

    def small() -> bool:
        return _offsets_log_bytes(broker.data_dir) < 4 * OFFSETS_SEGMENT_BYTES

    wait_for(small, f"__consumer_offsets to be compacted (wrote over {written} bytes)", 60)
    # The group's offset is still there, as a new consumer of the group sees.
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    try:
        assert consumer.committed([TopicPartition(topic, 0)], TIMEOUT_S)[0].offset == 1
    finally:
        consumer.close()


def test_aborted_transactions_are_removed_and_committed_ones_kept(broker: BrokerProcess) -> None:
    topic = create_topic(
        broker.bootstrap, **{"min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "1000"}
    )
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "transactional.id": f"t-{uuid.uuid4().hex[:8]}"}
    )
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    for i in range(20):
        producer.produce(topic, key=b"aborted-%d" % i, value=b"a" * 200)
    producer.abort_transaction(TIMEOUT_S)
    producer.begin_transaction()
    for i in range(20):
        producer.produce(topic, key=b"committed-%d" % i, value=b"c" * 200)
    producer.commit_transaction(TIMEOUT_S)
    produce(broker.bootstrap, topic, [(b"filler-%d" % (i % 5), b"f" * 300) for i in range(200)])
    directory = broker.data_dir / f"{topic}-0"

    def on_disk() -> tuple[set[bytes], int]:
        keys: set[bytes] = set()
        markers = 0
        for path in sorted(directory.glob("*.log")):
            for batch in decode_batches(path.read_bytes()):
                if batch.header.is_control:
                    markers += 1
                else:
                    keys.update(r.key for r in batch.records if r.key is not None)
        return keys, markers

    def aborted_gone() -> bool:
        keys, _ = on_disk()
        return not any(k.startswith(b"aborted") for k in keys)

    wait_for(aborted_gone, "the aborted transaction's records to be cleaned")
    keys, _ = on_disk()
    assert {b"committed-%d" % i for i in range(20)} <= keys
    # The ABORT marker goes after delete.retention.ms; the COMMIT stays with its data.
    wait_for(lambda: on_disk()[1] == 1, "the abort marker to be removed")
    for isolation in ("read_committed", "read_uncommitted"):
        rows = read_all(broker.bootstrap, topic, **{"isolation.level": isolation})
        got = {key for _, key, _ in rows}
        assert {b"committed-%d" % i for i in range(20)} <= got
        assert not any(k.startswith(b"aborted") for k in got if k is not None)
