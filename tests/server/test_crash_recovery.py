"""kill -9 at the sizes users run: more than one 4 MiB recovery chunk unflushed per partition.

Recovery reads a segment in 4 MiB chunks; before 7607b5f a batch straddling a chunk
end was judged corrupt and the log cut there (60,000 acknowledged records became
33,884; a group's committed offset went from 22,000 back to 13,662). These tests run
a real ``odradek serve`` with the default 1 GiB segments and no flush policy, so the
whole partition is in the page cache when it is killed and recovery re-reads all of
it: (a) 60,000 records from confluent-kafka (acks=all, idempotent, about 7 MB in one
partition), also with ``flush.messages=1``; (b) a group committing more than 4 MiB
into its ``__consumer_offsets`` partition. After kill -9 and a restart every
acknowledged record and the last committed offset are there.
"""

from __future__ import annotations

import gc
import re

import pytest
from confluent_kafka import Producer
from kio.schema.errors import ErrorCode

from tests.groups.wire import (
    OFFSETS_TOPIC,
    commit,
    coordinator_partition,
    fetch_offsets,
    find_coordinator,
    wait_for,
)
from tests.server.test_protocol import list_offset, make_topic, read_all
from tests.support.broker import BrokerProcess
from tests.support.wire import WireClient

RECORDS = 60_000
VALUE = b"v" * 100
CHUNK = 4 * 1024 * 1024
LATEST = -1


def produce_acknowledged(bootstrap: str, topic: str, count: int) -> dict[int, bytes]:
    """Produce ``count`` records (acks=all, idempotent); offset -> key of each acknowledged."""
    acknowledged: dict[int, bytes] = {}
    errors: list[str] = []

    def delivered(error: object, message: object) -> None:
        if error is not None:
            errors.append(str(error))
        else:
            acknowledged[message.offset()] = message.key()  # type: ignore[attr-defined]

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": 60_000,
        }
    )
    for i in range(count):
        while True:
            try:
                producer.produce(topic, VALUE, f"k{i:08d}".encode(), 0, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(60) == 0
    del producer
    gc.collect()
    assert not errors, errors[:3]
    return acknowledged


def recovered_line(broker: BrokerProcess, name: str) -> str:
    lines = [line for line in broker.log().splitlines() if f"recovered {name} " in line]
    assert lines, broker.log()
    return lines[-1]


@pytest.mark.parametrize("flush_messages", [None, 1], ids=["page-cache", "flush.messages=1"])
def test_kill_9_with_more_than_a_chunk_unflushed_keeps_every_acknowledged_record(
    restartable: BrokerProcess, flush_messages: int | None
) -> None:
    broker = restartable.start()
    configs = {} if flush_messages is None else {"flush.messages": str(flush_messages)}
    with WireClient(broker.bootstrap) as client:
        topic = make_topic(client, "crash-big", configs=configs)  # default 1 GiB segments
    acknowledged = produce_acknowledged(broker.bootstrap, topic, RECORDS)
    assert sorted(acknowledged) == list(range(RECORDS))
    segment = broker.data_dir / f"{topic}-0" / f"{0:020d}.log"
    size = segment.stat().st_size
    assert size > CHUNK + CHUNK // 2, size  # recovery crosses at least one chunk end

    broker.kill()
    broker.start()
    line = recovered_line(broker, f"{topic}-0")
    assert re.search(r" 0 bytes truncated", line), line
    with WireClient(broker.bootstrap) as client:
        latest = list_offset(client, topic, 0, LATEST)
        assert latest.error_code == ErrorCode.none
        assert latest.offset == RECORDS
        records = read_all(client, topic, 0)
    assert [r.offset for r in records] == list(range(RECORDS))
    assert all(r.key == acknowledged[r.offset] and r.value == VALUE for r in records)
    assert segment.stat().st_size == size
    assert "Traceback" not in broker.log()


def test_kill_9_keeps_a_group_offset_committed_past_4_mib(restartable: BrokerProcess) -> None:
    broker = restartable.start()
    group = "big-committer"
    metadata = "m" * 4000  # offset.metadata.max.bytes is 4096
    commits = 1_200  # ~4.9 MB of commit records in one __consumer_offsets partition
    with WireClient(broker.bootstrap) as client:
        topic = make_topic(client, "committed")
        find_coordinator(client, 4, [group])
        wait_for(
            lambda: fetch_offsets(client, 9, {group: [(topic, 0)]})[group][0] == ErrorCode.none,
            what="coordinator loaded",
        )
        for offset in range(1, commits + 1):
            result = commit(client, 9, group, {(topic, 0): offset}, metadata=f"{offset} {metadata}")
            assert result == {(topic, 0): ErrorCode.none}
    offsets_dir = broker.data_dir / f"{OFFSETS_TOPIC}-{coordinator_partition(group)}"
    size = (offsets_dir / f"{0:020d}.log").stat().st_size
    assert size > CHUNK + CHUNK // 8, size

    broker.kill()
    broker.start()

    def loaded() -> object:
        with WireClient(broker.bootstrap) as client:
            error, found = fetch_offsets(client, 9, {group: [(topic, 0)]})[group]
        return found if error == ErrorCode.none else None

    found = wait_for(loaded, timeout_s=30, what="offsets reloaded")
    assert found[(topic, 0)].offset == commits
    assert found[(topic, 0)].metadata == f"{commits} {metadata}"
    line = recovered_line(broker, offsets_dir.name)
    assert " 0 bytes truncated" in line, line
    assert "Traceback" not in broker.log()
