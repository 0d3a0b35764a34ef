"""TopicBasedRemoteLogMetadataManager over an in-memory ``__remote_log_metadata``
shared by several "brokers": a publish returns once applied, another broker sees it
after ``ready``, a new leader continues copying where the old one stopped (even
with other segment boundaries: an overlap, never a gap), a follower learns what is
copied, and an event breaking the state machine is skipped alike everywhere."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection
from pathlib import Path

import pytest

from odradek.storage.errors import StorageError
from odradek.storage.log import Log
from odradek.storage.remote.filesystem import FileSystemRemoteStorageManager
from odradek.storage.remote.log_manager import RemoteLogManager
from odradek.storage.remote.metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
)
from odradek.storage.remote.metadata_records import serialize
from odradek.storage.remote.topic_metadata_manager import TopicBasedRemoteLogMetadataManager
from tests.storage.conftest import FakeClock
from tests.storage.remote.test_log_manager import TP, fill, new_log

FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


class MemoryTopic:
    def __init__(self, partitions: int) -> None:
        self.partitions: list[list[bytes]] = [[] for _ in range(partitions)]
        self.appended = asyncio.Event()


class MemoryTransport:
    """One broker's producer and consumer over a MemoryTopic."""

    def __init__(self, topic: MemoryTopic) -> None:
        self.topic = topic
        self.positions: dict[int, int] = {}
        self.closed = False

    async def produce(self, partition: int, value: bytes) -> int:
        records = self.topic.partitions[partition]
        records.append(value)
        return len(records) - 1

    async def assign(self, partitions: Collection[int]) -> None:
        for p in partitions:
            self.positions.setdefault(p, 0)

    async def poll(self, timeout_s: float) -> list[tuple[int, int, bytes]]:
        out: list[tuple[int, int, bytes]] = []
        for p, position in self.positions.items():
            records = self.topic.partitions[p]
            out.extend((p, o, records[o]) for o in range(position, len(records)))
            self.positions[p] = len(records)
        if not out:
            await asyncio.sleep(0.001)
        return out

    async def end_offset(self, partition: int) -> int:
        return len(self.topic.partitions[partition])

    async def close(self) -> None:
        self.closed = True


def manager(topic: MemoryTopic, broker_id: int) -> TopicBasedRemoteLogMetadataManager:
    return TopicBasedRemoteLogMetadataManager(
        MemoryTransport(topic), num_partitions=len(topic.partitions), broker_id=broker_id
    )


def segment(start: int, end: int, broker: int = 1) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId.generate(TP), start, end, 0, broker, 0, 100, {0: start}
    )


def test_a_publish_returns_once_applied_and_other_brokers_see_it(tmp_path: Path) -> None:
    async def scenario() -> None:
        topic = MemoryTopic(5)
        one, two = manager(topic, 1), manager(topic, 2)
        one.start()
        two.start()
        started = segment(0, 99)
        # From a worker thread, as the copier calls it.
        await asyncio.to_thread(one.add_remote_log_segment_metadata, started)
        assert [m.state for m in one.list_remote_log_segments(TP)] == [
            RemoteLogSegmentState.COPY_SEGMENT_STARTED
        ]
        assert sum(map(len, topic.partitions)) == 1
        assert topic.partitions[one.partition_for(TP)]
        update = RemoteLogSegmentMetadataUpdate(started.remote_log_segment_id, 1, None, FINISHED, 1)
        await asyncio.to_thread(one.update_remote_log_segment_metadata, update)
        assert two.list_remote_log_segments(TP) == []  # not asked about TP yet
        await two.ready(TP)
        (seen,) = two.list_remote_log_segments(TP, (FINISHED,))
        assert (seen.start_offset, seen.end_offset) == (0, 99)
        assert two.remote_log_segment_metadata(TP, 0, 50) == seen
        assert two.highest_offset_for_epoch(TP, 0) == 99
        # A late event that breaks the state machine (COPY_SEGMENT_STARTED again for
        # a finished segment) is skipped by every broker alike.
        topic.partitions[one.partition_for(TP)].append(serialize(started))
        await one.ready(TP)
        await two.ready(TP)
        for m in (one, two):
            assert [x.state for x in m.list_remote_log_segments(TP)] == [FINISHED]
        await asyncio.to_thread(one.remove_partition, TP)
        await two.ready(TP)
        assert two.list_remote_log_segments(TP) == []
        await one.stop()
        await two.stop()

    asyncio.run(scenario())


def rlm_over(
    tmp_path: Path, clock: FakeClock, rlmm: TopicBasedRemoteLogMetadataManager, **roles: object
) -> RemoteLogManager:
    return RemoteLogManager(
        FileSystemRemoteStorageManager(tmp_path / "remote", fsync=False),
        rlmm,
        broker_id=rlmm.broker_id,
        leaders=roles.get("leaders", list),  # type: ignore[arg-type]
        followers=roles.get("followers"),  # type: ignore[arg-type]
        index_cache_dir=tmp_path / f"index-cache-{rlmm.broker_id}",
        index_cache_bytes=100_000,
        task_interval_ms=1000,
        reader_threads=2,
        clock=clock,
    )


def copied(rlm: RemoteLogManager) -> list[tuple[int, int]]:
    listed = rlm.rlmm.list_remote_log_segments(TP, (FINISHED,))
    return sorted((m.start_offset, m.end_offset) for m in listed)


def test_a_new_leader_continues_where_the_old_one_stopped(tmp_path: Path, clock: FakeClock) -> None:
    """Broker 1 leads and copies part of the log; broker 2 (a follower whose segments
    rolled elsewhere) learns what is copied, then leads and copies the rest."""

    async def scenario() -> None:
        topic = MemoryTopic(3)
        one_rlmm, two_rlmm = manager(topic, 1), manager(topic, 2)
        one_rlmm.start()
        two_rlmm.start()
        old: Log = new_log(tmp_path / "one", clock)
        new: Log = new_log(tmp_path / "two", clock, segment_bytes=2300)
        fill(old, 40)
        fill(new, 40)  # the same offsets and epochs, other segment boundaries
        end = old.log_end_offset
        old_ranges = [(s.base_offset, s.base_offset) for s in old.segments]
        assert old_ranges != [(s.base_offset, s.base_offset) for s in new.segments]
        old.high_watermark = old.segments[3].base_offset  # copy three segments only
        one = rlm_over(tmp_path, clock, one_rlmm, leaders=lambda: [(TP, old)])
        two = rlm_over(tmp_path, clock, two_rlmm, followers=lambda: [(TP, new)])
        await one.run_once()
        first = copied(one)
        assert len(first) == 3 and first[0][0] == 0
        await two.run_once()  # a follower: learns what is remote, copies nothing
        assert new.highest_offset_in_remote == first[-1][1]
        assert copied(two) == first

        # Leadership moves to broker 2: it copies the rest, from where 1 stopped.
        two.leaders, two.followers = (lambda: [(TP, new)]), None
        await two.run_once()
        after = copied(two)
        assert set(first) <= set(after)
        assert after[-1][1] == new.segments[-1].base_offset - 1  # up to the active one
        covered = -1
        for start, stop in after:  # contiguous: every offset once, overlaps allowed
            assert start <= covered + 1, (after, covered)
            covered = max(covered, stop)
        assert new.highest_offset_in_remote == covered
        assert len(set(after)) == len(after)  # nothing copied twice as such
        # Every copied offset is served by a remote segment holding it (epoch 3: fill).
        for offset in range(covered + 1):
            found = two_rlmm.remote_log_segment_metadata(TP, 3, offset)
            assert found is not None and found.start_offset <= offset <= found.end_offset
        assert end == new.log_end_offset
        await one_rlmm.stop()
        await two_rlmm.stop()
        one._workers.shutdown()
        two._workers.shutdown()

    asyncio.run(scenario())


def test_after_a_restart_a_remote_read_waits_for_the_metadata(
    tmp_path: Path, clock: FakeClock
) -> None:
    """The caches start empty after a restart: the first read below the local log
    reads the metadata partition to its end instead of answering out of range."""

    async def scenario() -> None:
        topic = MemoryTopic(3)
        before = manager(topic, 1)
        before.start()
        log = new_log(tmp_path / "one", clock, local_retention_bytes=0)
        fill(log, 40)
        rlm = rlm_over(tmp_path, clock, before, leaders=lambda: [(TP, log)])
        await rlm.run_once()
        log.delete_old_segments()
        assert log.local_log_start_offset > 0 == log.log_start_offset
        await before.stop()
        rlm._workers.shutdown()

        after = manager(topic, 1)  # the restarted broker: nothing read yet
        after.start()
        restarted = rlm_over(tmp_path / "restarted", clock, after, leaders=lambda: [(TP, log)])
        restarted.rsm = rlm.rsm
        restarted.indexes = rlm.indexes
        found = await restarted.read(TP, log, 0, 1 << 20, True)
        assert found.data  # served from remote storage
        await after.stop()
        restarted._workers.shutdown()
        restarted._readers.shutdown()
        rlm._readers.shutdown()

    asyncio.run(scenario())


def test_stop_fails_a_publish_that_waits_for_a_gone_leader() -> None:
    """Shutdown must not wait for a metadata partition whose leader is gone: a copy
    blocked publishing fails at once, and the clients get a bounded close."""

    class Hanging(MemoryTransport):
        async def produce(self, partition: int, value: bytes) -> int:
            await asyncio.Event().wait()  # the leader never answers
            raise AssertionError("unreachable")

    async def scenario() -> None:
        rlmm = TopicBasedRemoteLogMetadataManager(Hanging(MemoryTopic(3)), num_partitions=3)
        rlmm.start()
        blocked = asyncio.ensure_future(
            asyncio.to_thread(rlmm.add_remote_log_segment_metadata, segment(0, 9))
        )
        await asyncio.sleep(0.3)
        assert not blocked.done()
        started = time.monotonic()
        await rlmm.stop()
        with pytest.raises(StorageError, match="stopping"):
            await blocked
        assert time.monotonic() - started < 2
        with pytest.raises(StorageError):
            rlmm.add_remote_log_segment_metadata(segment(10, 19))

    asyncio.run(scenario())
