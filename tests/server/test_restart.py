"""Crash and restart: every acknowledged write survives kill -9; a clean stop keeps all state.

(a) an idempotent confluent-kafka producer (acks=all) streams while the broker is
killed; every record it was told was delivered is there after restart, exactly once,
in order, at the offset it was acknowledged with. (b) SIGTERM exits 0 and a restart
keeps topics, topic ids, configs, offsets and producer state (a retried idempotent
batch is still recognised). (c) kill -9 and restart recovers the logs and serves.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from odradek.records.codec import encode_batch, new_records
from tests.server.test_protocol import (
    assert_clean_log,
    assert_serves,
    batch,
    init_producer_id,
    list_offset,
    make_topic,
    metadata,
    produce,
    read_all,
)
from tests.support.broker import BrokerProcess
from tests.support.wire import WireClient

PRODUCER_SCRIPT = textwrap.dedent(
    """
    import sys
    from confluent_kafka import Producer

    bootstrap, topic, partitions, out_path = sys.argv[1:5]
    partitions = int(partitions)
    out = open(out_path, "w", buffering=1)

    def delivered(error, message):
        if error is None:
            out.write(f"{message.key().decode()} {message.partition()} {message.offset()}\\n")

    producer = Producer({
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 2,
        "batch.num.messages": 50,
        "message.timeout.ms": 60000,
        "retry.backoff.ms": 50,
    })
    i = 0
    while True:
        try:
            producer.produce(topic, key=f"k{i:08d}".encode(), value=b"v" * 100,
                             partition=i % partitions, on_delivery=delivered)
            i += 1
        except BufferError:
            producer.poll(0.01)
        producer.poll(0)
    """
)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


def wait_for_lines(path: Path, count: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and path.read_bytes().count(b"\n") >= count:
            return
        time.sleep(0.02)
    lines = path.read_bytes().count(b"\n") if path.exists() else 0
    raise AssertionError(f"only {lines} deliveries after {timeout_s}s")


def test_kill_9_during_idempotent_acks_all_stream_loses_no_acknowledged_record(
    restartable: BrokerProcess, tmp_path: Path, data_dir: Path
) -> None:
    broker = restartable.start()
    partitions = 2
    with WireClient(broker.bootstrap) as client:
        # Small segments: the crash lands after several rolls, so recovery starts from a
        # checkpointed recovery point with older segments trusted as they are.
        topic = make_topic(
            client, "crash-stream", partitions=partitions, configs={"segment.bytes": "65536"}
        )
    script = tmp_path / "producer.py"
    script.write_text(PRODUCER_SCRIPT)
    acks_path = tmp_path / "acks.txt"
    child = subprocess.Popen(
        [sys.executable, str(script), broker.bootstrap, topic, str(partitions), str(acks_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for_lines(acks_path, 3000)
        broker.kill()  # mid-stream: the producer is still sending
        time.sleep(0.3)  # delivery reports already received get written
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
        _, stderr = child.communicate(timeout=30)
    assert child.returncode == -signal.SIGKILL, stderr.decode()

    acked: dict[int, dict[int, str]] = {p: {} for p in range(partitions)}
    for line in acks_path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 3:  # a line cut by the kill is ignored
            key, partition, offset = parts[0], int(parts[1]), int(parts[2])
            acked[partition][offset] = key
    assert sum(len(a) for a in acked.values()) >= 3000

    assert len(list((data_dir / f"{topic}-0").glob("*.log"))) > 2
    broker.start()
    assert "unclean shutdown" in broker.log()
    seen: set[str] = set()
    total = 0
    with WireClient(broker.bootstrap) as client:
        for partition in range(partitions):
            records = read_all(client, topic, partition)
            keys = [r.key.decode() for r in records if r.key is not None]
            offsets = [r.offset for r in records]
            assert offsets == list(range(len(records))), "offsets are dense from 0"
            assert keys == sorted(keys), "records are in production order"
            assert len(set(keys)) == len(keys), "no duplicates"
            seen.update(keys)
            total += len(keys)
            by_offset = {r.offset: r.key.decode() for r in records if r.key is not None}
            for offset, key in acked[partition].items():
                assert by_offset.get(offset) == key, (partition, offset, key)
    assert len(seen) == total  # each key went to exactly one partition
    assert_serves(broker.bootstrap)
    assert_clean_log(broker)


def idempotent_batch(producer_id: int, epoch: int, sequence: int, values: list[bytes]) -> bytes:
    return encode_batch(
        new_records(values),
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
    )


def test_clean_restart_keeps_topics_configs_offsets_and_producer_state(
    restartable: BrokerProcess,
) -> None:
    broker = restartable.start()
    configs = {
        "max.message.bytes": "3000",
        "message.timestamp.type": "LogAppendTime",
        "retention.ms": "86400000",
    }
    with WireClient(broker.bootstrap) as client:
        topic = make_topic(client, "durable", partitions=3, configs=configs)
        plain = make_topic(client, "plain")
        before = {t.name: t for t in metadata(client, [topic, plain]).topics}
        producer_id, epoch = init_producer_id(client)
        first = idempotent_batch(producer_id, epoch, 0, [b"i0", b"i1", b"i2"])
        second = idempotent_batch(producer_id, epoch, 3, [b"i3", b"i4"])
        assert produce(client, topic, 0, batch([b"plain-0"])).base_offset == 0
        assert produce(client, topic, 0, first).base_offset == 1
        assert produce(client, topic, 0, second).base_offset == 4
        assert produce(client, topic, 2, batch([b"p2"])).base_offset == 0
        assert produce(client, plain, 0, batch([b"x"] * 10)).base_offset == 0
        records_before = read_all(client, topic, 0)

    assert broker.stop() == 0
    assert "Traceback" not in broker.log()
    broker.start()

    with WireClient(broker.bootstrap) as client:
        described = metadata(client, [topic, plain])
        assert [(b.node_id, b.port) for b in described.brokers] == [(1, broker.port)]
        after = {t.name: t for t in described.topics}
        for name in (topic, plain):
            assert after[name].error_code == ErrorCode.none
            assert after[name].topic_id == before[name].topic_id
            assert len(after[name].partitions) == len(before[name].partitions)
        # Offsets and data.
        assert read_all(client, topic, 0) == records_before
        assert list_offset(client, topic, 0, -1).offset == 6
        assert list_offset(client, topic, 2, -1).offset == 1
        assert list_offset(client, plain, 0, -1).offset == 10
        # Configs set at create time still apply.
        too_big = produce(client, topic, 1, batch([b"z" * 4000]))
        assert too_big.error_code == ErrorCode.message_too_large
        stamped = produce(client, topic, 1, batch([b"small"]))
        assert stamped.error_code == ErrorCode.none and stamped.log_append_time is not None
        # Producer state: retries of the last batches are recognised, not re-appended.
        retry = produce(client, topic, 0, second)
        assert (retry.error_code, retry.base_offset) == (ErrorCode.none, 4)
        older = produce(client, topic, 0, first)
        assert (older.error_code, older.base_offset) == (ErrorCode.none, 1)
        assert list_offset(client, topic, 0, -1).offset == 6
        gap = produce(client, topic, 0, idempotent_batch(producer_id, epoch, 9, [b"gap"]))
        assert gap.error_code == ErrorCode.out_of_order_sequence_number
        following = produce(client, topic, 0, idempotent_batch(producer_id, epoch, 5, [b"i5"]))
        assert (following.error_code, following.base_offset) == (ErrorCode.none, 6)
        # Producer ids are never handed out twice.
        assert init_producer_id(client)[0] != producer_id
    assert broker.stop() == 0
    assert_clean_log(broker)


def test_kill_9_then_restart_recovers_and_serves(restartable: BrokerProcess) -> None:
    broker = restartable.start()
    with WireClient(broker.bootstrap) as client:
        topic = make_topic(client, "recover", partitions=2)
        producer_id, epoch = init_producer_id(client)
        for i in range(20):
            assert produce(client, topic, i % 2, batch([f"r{i}".encode()])).error_code == 0
        last = idempotent_batch(producer_id, epoch, 0, [b"idem"])
        assert produce(client, topic, 0, last).base_offset == 10
    broker.kill()
    broker.start()
    log = broker.log()
    assert "unclean shutdown" in log
    assert f"recovered {topic}-0" in log and f"recovered {topic}-1" in log
    with WireClient(broker.bootstrap) as client:
        values = [r.value for r in read_all(client, topic, 0)]
        assert values == [f"r{i}".encode() for i in range(0, 20, 2)] + [b"idem"]
        assert len(read_all(client, topic, 1)) == 10
        # Producer state was rebuilt from the log: the retry is recognised.
        retry = produce(client, topic, 0, last)
        assert (retry.error_code, retry.base_offset) == (ErrorCode.none, 10)
        assert list_offset(client, topic, 0, -1).offset == 11
        assert produce(client, topic, 1, batch([b"more"])).base_offset == 10
        # Producer ids come from blocks committed before use: none is handed out twice.
        assert init_producer_id(client)[0] > producer_id
    assert_serves(broker.bootstrap)
    assert broker.stop() == 0
    assert_clean_log(broker)


def test_restart_after_topic_creation_without_data(restartable: BrokerProcess) -> None:
    """Topics created but never written, then kill -9: still there, still empty."""
    broker = restartable.start()
    with WireClient(broker.bootstrap) as client:
        topic = make_topic(client, "empty", partitions=4)
    broker.kill()
    broker.start()
    with WireClient(broker.bootstrap) as client:
        (described,) = metadata(client, [topic], allow_auto_topic_creation=False).topics
        assert described.error_code == ErrorCode.none and len(described.partitions) == 4
        assert all(read_all(client, topic, p) == [] for p in range(4))
    assert broker.stop() == 0
    assert_clean_log(broker)


def test_torn_tails_after_kill_9_are_cut_on_restart(
    restartable: BrokerProcess, data_dir: Path
) -> None:
    """A crash mid-write leaves half a batch at the end of a log: recovery truncates it."""
    broker = restartable.start()
    with WireClient(broker.bootstrap) as client:
        topic = make_topic(client, "torn")
        for i in range(5):
            produce(client, topic, 0, batch([f"t{i}".encode()]))
    broker.kill()
    segment = data_dir / f"{topic}-0" / "00000000000000000000.log"
    metadata_segment = data_dir / "__cluster_metadata-0" / "00000000000000000000.log"
    half = batch([b"half-written" * 10])[:40]
    for path in (segment, metadata_segment):
        with path.open("ab") as file:
            file.write(half)
    broker.start()
    assert f"recovered {topic}-0" in broker.log()
    with WireClient(broker.bootstrap) as client:
        assert [r.value for r in read_all(client, topic, 0)] == [f"t{i}".encode() for i in range(5)]
        assert produce(client, topic, 0, batch([b"after"])).base_offset == 5
        # The metadata log was cut too and still takes new records.
        again = make_topic(client, "after-torn")
        names = {t.name for t in metadata(client, None).topics}
        assert {topic, again} <= names
    assert broker.stop() == 0
    broker.start()
    with WireClient(broker.bootstrap) as client:
        names = {t.name for t in metadata(client, None).topics}
        assert {topic, again} <= names
        assert len(read_all(client, topic, 0)) == 6
    assert broker.stop() == 0
    assert_clean_log(broker)
