"""confluent-kafka (librdkafka) transactions against one ``odradek serve``.

librdkafka's transactional producer and read_committed consumer were written by other
people against Kafka; each test here is something a Kafka user relies on (KIP-98):
a committed transaction is visible to read_committed consumers and an aborted one is
not (read_uncommitted sees both, never a control record); an open transaction holds
read_committed consumers at the last stable offset until it ends; a second producer
with the same transactional.id fences the first; the coordinator aborts a
transaction that outlives its timeout; offsets sent with the transaction are
committed with it, and only with it.
"""

from __future__ import annotations

import os
import pathlib
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from confluent_kafka import (  # noqa: E402
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tests.support.broker import BrokerProcess  # noqa: E402

CLIENT_TIMEOUT_S = 30.0
# The coordinator looks for timed-out transactions this often (Kafka: 10 s).
ABORT_SCAN_MS = 300


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(
        tmp_path_factory.mktemp("txn") / "data",
        [
            "--override",
            f"transaction.abort.timed.out.transaction.cleanup.interval.ms={ABORT_SCAN_MS}",
        ],
    ).start()
    try:
        yield process
    finally:
        import gc

        gc.collect()
        try:
            process.stop()
        finally:
            process.kill()


@pytest.fixture
def bootstrap(txn_broker: BrokerProcess) -> str:
    assert txn_broker.alive(), f"broker died; log:\n{txn_broker.log()[-4000:]}"
    return txn_broker.bootstrap


def _topic(bootstrap: str, partitions: int = 1) -> str:
    name = f"txn-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 1)])
    futures[name].result(CLIENT_TIMEOUT_S)
    return name


def _producer(bootstrap: str, txn_id: str, **extra: Any) -> Producer:
    config = {
        "bootstrap.servers": bootstrap,
        "transactional.id": txn_id,
        "socket.timeout.ms": 10_000,
        **extra,
    }
    return Producer(config)


def _consume_all(
    bootstrap: str,
    topic: str,
    isolation: str,
    *,
    partitions: int = 1,
    idle_s: float = 3.0,
    limit_s: float = 30.0,
) -> list[bytes]:
    """Every record value visible to a consumer with ``isolation``, read from the start
    of each partition until nothing new arrived for ``idle_s``."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:8]}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        values: list[bytes] = []
        deadline = time.monotonic() + limit_s
        last = time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - last < idle_s:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error():
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                continue
            values.append(message.value())
            last = time.monotonic()
        return values
    finally:
        consumer.close()


def test_commit_visible_abort_invisible(bootstrap: str) -> None:
    topic = _topic(bootstrap)
    producer = _producer(bootstrap, f"tx-{uuid.uuid4().hex[:8]}")
    producer.init_transactions(CLIENT_TIMEOUT_S)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, value=f"committed-{i}".encode())
    producer.commit_transaction(CLIENT_TIMEOUT_S)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, value=f"aborted-{i}".encode())
    producer.flush(CLIENT_TIMEOUT_S)
    producer.abort_transaction(CLIENT_TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(topic, value=b"last")
    producer.commit_transaction(CLIENT_TIMEOUT_S)

    committed = _consume_all(bootstrap, topic, "read_committed")
    assert committed == [f"committed-{i}".encode() for i in range(5)] + [b"last"]
    everything = _consume_all(bootstrap, topic, "read_uncommitted")
    assert everything == (
        [f"committed-{i}".encode() for i in range(5)]
        + [f"aborted-{i}".encode() for i in range(5)]
        + [b"last"]
    )


def test_open_transaction_holds_read_committed_at_lso(bootstrap: str) -> None:
    topic = _topic(bootstrap)
    plain = Producer({"bootstrap.servers": bootstrap})
    plain.produce(topic, value=b"before")
    plain.flush(CLIENT_TIMEOUT_S)
    producer = _producer(bootstrap, f"tx-{uuid.uuid4().hex[:8]}")
    producer.init_transactions(CLIENT_TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(topic, value=b"in-txn")
    producer.flush(CLIENT_TIMEOUT_S)
    plain.produce(topic, value=b"after")  # above the open transaction's first offset
    plain.flush(CLIENT_TIMEOUT_S)

    held = _consume_all(bootstrap, topic, "read_committed", idle_s=2.0)
    assert held == [b"before"]
    assert _consume_all(bootstrap, topic, "read_uncommitted", idle_s=2.0) == [
        b"before",
        b"in-txn",
        b"after",
    ]
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"lso-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
        }
    )
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), CLIENT_TIMEOUT_S)
        assert (low, high) == (0, 1)  # read_committed's end is the LSO
    finally:
        consumer.close()
    producer.commit_transaction(CLIENT_TIMEOUT_S)
    assert _consume_all(bootstrap, topic, "read_committed") == [b"before", b"in-txn", b"after"]


def test_second_producer_fences_the_first(bootstrap: str) -> None:
    topic = _topic(bootstrap)
    txn_id = f"tx-{uuid.uuid4().hex[:8]}"
    zombie = _producer(bootstrap, txn_id)
    zombie.init_transactions(CLIENT_TIMEOUT_S)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie")
    zombie.flush(CLIENT_TIMEOUT_S)

    successor = _producer(bootstrap, txn_id)
    successor.init_transactions(CLIENT_TIMEOUT_S)  # aborts the zombie's transaction
    successor.begin_transaction()
    successor.produce(topic, value=b"successor")
    successor.commit_transaction(CLIENT_TIMEOUT_S)

    with pytest.raises(KafkaException) as raised:
        zombie.produce(topic, value=b"zombie-2")
        zombie.commit_transaction(CLIENT_TIMEOUT_S)
    error = raised.value.args[0]
    assert error.fatal(), error
    assert _consume_all(bootstrap, topic, "read_committed") == [b"successor"]


def test_coordinator_aborts_a_timed_out_transaction(bootstrap: str) -> None:
    topic = _topic(bootstrap)
    producer = _producer(
        bootstrap,
        f"tx-{uuid.uuid4().hex[:8]}",
        **{"transaction.timeout.ms": 1500, "socket.timeout.ms": 1500},
    )
    producer.init_transactions(CLIENT_TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(topic, value=b"too-slow")
    producer.flush(CLIENT_TIMEOUT_S)
    time.sleep(1.5 + 3 * ABORT_SCAN_MS / 1000 + 1.0)
    # The coordinator aborted it: read_committed consumers are no longer held, and the
    # record is not among what they read.
    assert _consume_all(bootstrap, topic, "read_committed", idle_s=2.0) == []
    with pytest.raises(KafkaException):
        producer.commit_transaction(CLIENT_TIMEOUT_S)


def test_send_offsets_commit_with_the_transaction(bootstrap: str) -> None:
    source, sink = _topic(bootstrap), _topic(bootstrap)
    plain = Producer({"bootstrap.servers": bootstrap})
    for i in range(10):
        plain.produce(source, value=f"in-{i}".encode())
    plain.flush(CLIENT_TIMEOUT_S)
    group = f"ctp-{uuid.uuid4().hex[:8]}"

    def transform(commit: bool, count: int) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
            }
        )
        producer = _producer(bootstrap, f"ctp-{group}")
        try:
            producer.init_transactions(CLIENT_TIMEOUT_S)
            consumer.subscribe([source])
            taken: list[Any] = []
            deadline = time.monotonic() + CLIENT_TIMEOUT_S
            while len(taken) < count and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is not None and not message.error():
                    taken.append(message)
            assert len(taken) == count
            producer.begin_transaction()
            for message in taken:
                producer.produce(sink, value=message.value().replace(b"in", b"out"))
            last = taken[-1]
            producer.send_offsets_to_transaction(
                [TopicPartition(source, last.partition(), last.offset() + 1)],
                consumer.consumer_group_metadata(),
                CLIENT_TIMEOUT_S,
            )
            if commit:
                producer.commit_transaction(CLIENT_TIMEOUT_S)
            else:
                producer.abort_transaction(CLIENT_TIMEOUT_S)
        finally:
            consumer.close()

    transform(commit=False, count=4)  # aborted: neither output nor offsets
    transform(commit=True, count=10)  # starts over from offset 0
    assert _consume_all(bootstrap, sink, "read_committed") == [
        f"out-{i}".encode() for i in range(10)
    ]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    from confluent_kafka import ConsumerGroupTopicPartitions

    future = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
    offsets = {tp.partition: tp.offset for tp in future.result(CLIENT_TIMEOUT_S).topic_partitions}
    assert offsets == {0: 10}


def test_consume_transform_produce_survives_sigkill(bootstrap: str, tmp_path: pathlib.Path) -> None:
    """The transforming process is killed with SIGKILL four times mid-stream and started
    again; the sink, read with read_committed, holds each source record exactly once,
    and the group's committed offsets are the source's ends."""
    source, sink = _topic(bootstrap, partitions=2), _topic(bootstrap, partitions=2)
    total = 3000
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(total):
        plain.produce(source, key=str(i % 7).encode(), value=f"{i}".encode())
        if i % 500 == 0:
            plain.poll(0)
    plain.flush(CLIENT_TIMEOUT_S)
    group = f"ctp-kill-{uuid.uuid4().hex[:8]}"
    txn_id = f"ctp-kill-{group}"
    rng = random.Random(1302)

    def start() -> subprocess.Popen[bytes]:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.ctp_worker",
                bootstrap,
                source,
                sink,
                group,
                txn_id,
            ],
            stdout=subprocess.PIPE,
            stderr=open(tmp_path / "worker.log", "ab"),  # noqa: SIM115
        )
        assert process.stdout is not None
        assert process.stdout.readline().strip() == b"ready", (tmp_path / "worker.log").read_text()
        return process

    for _ in range(4):
        worker = start()
        try:
            time.sleep(rng.uniform(0.5, 2.0))
        finally:
            os.kill(worker.pid, signal.SIGKILL)
            worker.wait()
    worker = start()
    try:
        deadline = time.monotonic() + 120
        seen: list[bytes] = []
        while time.monotonic() < deadline:
            seen = _consume_all(bootstrap, sink, "read_committed", partitions=2, idle_s=2.0)
            if len(seen) >= total:
                break
    finally:
        worker.terminate()
        try:
            worker.wait(10)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
    assert sorted(seen, key=lambda v: int(v[4:])) == [f"out:{i}".encode() for i in range(total)]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    from confluent_kafka import ConsumerGroupTopicPartitions

    future = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
    offsets = {tp.partition: tp.offset for tp in future.result(CLIENT_TIMEOUT_S).topic_partitions}
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ends"})
    try:
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(source, p), CLIENT_TIMEOUT_S)[1]
            for p in range(2)
        }
    finally:
        consumer.close()
    assert offsets == ends
