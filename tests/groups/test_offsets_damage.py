"""A damaged ``__consumer_offsets`` partition: the load finishes, says where, answers.

A batch below the recovery point (a clean shutdown, then a flipped byte) is not
checked by recovery; the coordinator's load finds it. It used to crash the loading
task ("Task exception was never retrieved") and leave the partition's groups
answering COORDINATOR_LOAD_IN_PROGRESS forever, so ``committed()`` timed out across
restarts. Now the damaged batch is skipped with an ERROR naming the file and position,
later batches are used, and the group's offsets fall back to what was committed before
the damaged batch.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from kio.schema.errors import ErrorCode

from odradek.records.batch import HEADER_SIZE, unpack_header
from tests.groups.conftest import GROUP_ARGS
from tests.groups.wire import (
    OFFSETS_TOPIC,
    commit,
    coordinator_partition,
    create_topic,
    fetch_offsets,
    find_coordinator,
    wait_for,
)
from tests.support.broker import BrokerProcess, running_broker
from tests.support.damage import flip
from tests.support.wire import WireClient

MAGIC_AT = 16  # byte of the magic in a v2 batch header


def segment_of(data_dir: Path, group: str) -> Path:
    partition = coordinator_partition(group)
    return data_dir / f"{OFFSETS_TOPIC}-{partition}" / "00000000000000000000.log"


def batch_positions(path: Path) -> list[int]:
    data = path.read_bytes()
    positions, position = [], 0
    while position < len(data):
        positions.append(position)
        position += unpack_header(data, position).size
    return positions


def committed(bootstrap: str, group: str, partitions: list[TopicPartition]) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        found = consumer.committed(partitions, timeout=15)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in found}


def error_lines(broker: BrokerProcess, since: int) -> list[str]:
    return [line for line in broker.log()[since:].splitlines() if " ERROR " in line]


def test_corrupt_commit_batch_is_skipped_and_the_rest_loads(tmp_path: Path) -> None:
    data_dir, group, topic = tmp_path / "data", "damaged-group", "damaged-topic"
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    with running_broker(data_dir, GROUP_ARGS) as broker:
        with WireClient(broker.bootstrap) as wire:
            create_topic(wire, topic, 2)
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
        try:
            # One batch per commit: p0 1, p1 100 | p0 2 .. p0 10 | p1 200.
            consumer.commit(
                offsets=[TopicPartition(topic, 0, 1), TopicPartition(topic, 1, 100)],
                asynchronous=False,
            )
            for offset in range(2, 11):
                consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
            consumer.commit(offsets=[TopicPartition(topic, 1, 200)], asynchronous=False)
        finally:
            consumer.close()
    segment = segment_of(data_dir, group)
    positions = batch_positions(segment)
    commits = positions[-11:]  # the 11 commit batches end the segment
    flip(segment, commits[4] + HEADER_SIZE + 3)  # inside the records of "p0 5"
    flip(segment, commits[10] + HEADER_SIZE + 3)  # inside the records of "p1 200"
    broker = BrokerProcess(data_dir, GROUP_ARGS)
    since = len(broker.log())  # the first run's lines are in the same file
    try:
        broker.start()
        # Later batches are used (p0 10), a skipped one falls back (p1 100), no hang.
        assert committed(broker.bootstrap, group, tps) == {0: 10, 1: 100}
        errors = error_lines(broker, since)
        assert len(errors) == 2, errors
        for error, position in zip(errors, (commits[4], commits[10]), strict=True):
            assert f"{segment} position {position}: " in error
            assert "CRC32C" in error and "Traceback" not in broker.log()
        # A commit made now (after the damage in the file) survives the next restart.
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
        try:
            consumer.commit(offsets=[TopicPartition(topic, 1, 300)], asynchronous=False)
        finally:
            consumer.close()
        assert broker.stop() == 0
        broker.start()
        assert committed(broker.bootstrap, group, tps) == {0: 10, 1: 300}
    finally:
        try:
            broker.stop()
        finally:
            broker.kill()
    assert "Task exception was never retrieved" not in broker.log()


def test_unreadable_header_resumes_at_the_next_indexed_batch(tmp_path: Path) -> None:
    """A header that cannot be read hides where the next batch starts: the load goes on
    at the next batch start the offset index knows (one per index.interval.bytes)."""
    data_dir, group = tmp_path / "data", "damaged-header-group"
    with running_broker(data_dir, GROUP_ARGS) as broker, WireClient(broker.bootstrap) as wire:
        find_coordinator(wire, 6, [group])
        topic = create_topic(wire, "damaged-header-topic", 2)
        commit(wire, 9, group, {(topic, 1): 77})
        for offset in range(1, 301):  # ~30 KB of one-commit batches: several index entries
            commit(wire, 9, group, {(topic, 0): offset})
    segment = segment_of(data_dir, group)
    positions = batch_positions(segment)
    damaged = positions[len(positions) // 4]
    flip(segment, damaged + MAGIC_AT)
    broker = BrokerProcess(data_dir, GROUP_ARGS)
    try:
        broker.start()
        with WireClient(broker.bootstrap) as wire:

            def loaded() -> Any:
                error, found = fetch_offsets(wire, 9, {group: [(topic, 0), (topic, 1)]})[group]
                return found if error == ErrorCode.none else None  # LOAD_IN_PROGRESS first

            found = wait_for(loaded, what="the partition to load")
        assert (found[(topic, 0)].offset, found[(topic, 1)].offset) == (300, 77)
        (error,) = error_lines(broker, 0)
        match = re.search(
            rf"{re.escape(str(segment))} position (\d+): .*magic.*"
            r"reading goes on at position (\d+)",
            error,
        )
        assert match is not None, error
        assert int(match[1]) == damaged
        assert int(match[2]) in positions and damaged < int(match[2]) < positions[-1]
    finally:
        try:
            broker.stop()
        finally:
            broker.kill()
