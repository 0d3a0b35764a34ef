"""RaftMetadataWriter over a one-voter RaftDriver and a real DiskRaftLog, in process.

- before the driver runs, and until the leader's LeaderChange is applied (the claim),
  appends answer NOT_CONTROLLER; then an append returns with the change in the image;
- a restart publishes the newest snapshot and the log below its end at once, and the
  rest once the quorum commits it again; the image is the one before the restart;
- a log the pre-quorum single voter wrote (epoch-1 batches, no quorum-state, no
  LeaderChange) loads, and the first election's epoch is past every epoch in it;
- snapshots go through the node, two are kept, the log keeps what follows the older;
- a running loader handed a snapshot past what it applied resets to it, and the delta
  says what the snapshot no longer holds;
- a full disk (ENOSPC injected): a failed write is refused and not applied, as with the
  single voter; a failed fsync stops the quorum driver (not the single voter's cut back).
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from odradek.metadata.errors import ControllerError
from odradek.metadata.image import MetadataRecord
from odradek.metadata.loader import MetadataLoader
from odradek.metadata.raft_writer import RaftMetadataWriter
from odradek.metadata.snapshot import build_snapshot
from odradek.metadata.snapshotter import SnapshotPolicy
from odradek.metadata.writer import LocalMetadataWriter
from odradek.raft.config import RaftConfig
from odradek.raft.control_records import leader_change_entry
from odradek.raft.disk_log import DiskRaftLog, metadata_log_directory
from odradek.raft.driver import RaftDriver
from odradek.raft.election_store import FileElectionStore
from odradek.raft.log import SnapshotId
from odradek.raft.node import SnapshotLoaded
from odradek.raft.snapshots import FileSnapshotStore
from odradek.server.config import QuorumVoter
from odradek.server.metadata_log import seed_election_epoch
from odradek.storage.log_config import LogConfig
from odradek.storage.log_loader import open_log
from tests.storage.test_disk_full import DiskFull

CONFIG = RaftConfig(append_linger_ms=1)
SMALL_SEGMENTS = LogConfig(
    retention_ms=-1, retention_bytes=-1, segment_bytes=16 * 1024, max_message_bytes=2**20
)


def topic(index: int) -> list[MetadataRecord]:
    topic_id = str(uuid.UUID(int=index + 1))
    return [MetadataRecord("Topic", {"name": f"t{index}", "topic_id": topic_id})]


class Voter:
    """One node's metadata stack: log, writer, driver (started by ``start``)."""

    def __init__(self, directory: Path, policy: SnapshotPolicy | None = None) -> None:
        self.raft_log = DiskRaftLog.open(directory, SMALL_SEGMENTS)
        self.loader = MetadataLoader()
        self.snapshots = FileSnapshotStore(directory)
        self.writer = RaftMetadataWriter(
            self.raft_log, self.loader, self.snapshots, policy or SnapshotPolicy(10**9, 0)
        )
        self.writer.replay()
        store = FileElectionStore(directory, frozenset({1}), "c")
        seed_election_epoch(store, self.raft_log, self.snapshots)
        self.driver = RaftDriver(
            1,
            [QuorumVoter(1, "localhost", 0)],
            self.raft_log,
            store,
            self.snapshots,
            CONFIG,
            cluster_id="c",
            node_options={"control_entry": leader_change_entry},
        )
        self.writer.attach(self.driver)

    async def start(self) -> None:
        self.driver.start()
        for _ in range(500):
            if self.writer.caught_up():
                return
            await asyncio.sleep(0.01)
        raise AssertionError("the single voter never caught up")

    async def stop(self) -> None:
        await self.writer.wait_snapshot()
        await self.driver.shutdown()
        self.raft_log.close()


def test_claim_gates_writes_and_a_restart_gives_the_same_image(tmp_path: Path) -> None:
    directory = metadata_log_directory(tmp_path)

    async def first() -> object:
        voter = Voter(directory)
        with pytest.raises(ControllerError) as refused:
            await voter.writer.append(topic(0))
        assert refused.value.code == "NOT_CONTROLLER"
        await voter.start()
        assert voter.writer.is_active
        for index in range(20):
            offset = await voter.writer.append(topic(index))
            assert voter.loader.image.offset >= offset
            assert f"t{index}" in voter.loader.image.topics
        image = voter.loader.image
        await voter.stop()
        with pytest.raises(ControllerError) as stopped:
            await voter.writer.append(topic(99))
        assert stopped.value.code == "NOT_CONTROLLER"
        return image

    async def again() -> tuple[object, int]:
        voter = Voter(directory)
        await voter.start()
        image, epoch = voter.loader.image, voter.driver.epoch
        await voter.writer.append(topic(20))
        await voter.stop()
        return image, epoch

    before = asyncio.run(first())
    after, epoch = asyncio.run(again())
    assert after.topics == before.topics  # type: ignore[attr-defined]
    assert epoch == 2


def test_a_log_of_the_pre_quorum_single_voter_loads_in_a_later_epoch(tmp_path: Path) -> None:
    directory = metadata_log_directory(tmp_path)

    async def legacy() -> None:
        log, _ = open_log(directory, SMALL_SEGMENTS)
        writer = LocalMetadataWriter(log, MetadataLoader(), SnapshotPolicy(4096, 0))
        writer.replay()
        for index in range(200):
            await writer.append(topic(index))
        await writer.wait_snapshot()
        log.close()

    asyncio.run(legacy())
    assert not (directory / "quorum-state").exists()
    assert len(FileSnapshotStore(directory).list()) == 2  # the old writer snapshotted

    async def upgraded() -> int:
        voter = Voter(directory)
        await voter.start()
        assert {f"t{i}" for i in range(200)} <= set(voter.loader.image.topics)
        epoch = voter.driver.epoch
        await voter.writer.append(topic(200))
        await voter.stop()
        return epoch

    assert asyncio.run(upgraded()) == 2  # the old batches carry epoch 1


def test_snapshots_through_the_node_keep_two_and_the_log_after_the_older(tmp_path: Path) -> None:
    directory = metadata_log_directory(tmp_path)

    async def scenario() -> None:
        voter = Voter(directory, SnapshotPolicy(4096, 0))
        await voter.start()
        for index in range(300):
            await voter.writer.append(topic(index))
            await voter.writer.wait_snapshot()
        kept = voter.snapshots.list()
        assert len(kept) == 2
        assert voter.raft_log.start_offset > 0
        assert voter.raft_log.start_offset <= kept[0].end_offset
        image = voter.loader.image
        await voter.stop()

        voter = Voter(directory, SnapshotPolicy(4096, 0))
        await voter.start()
        assert voter.loader.image.topics == image.topics
        await voter.stop()

    asyncio.run(scenario())


def test_a_running_loader_resets_to_a_snapshot_past_what_it_applied(tmp_path: Path) -> None:
    directory = metadata_log_directory(tmp_path)
    raft_log = DiskRaftLog.open(directory, SMALL_SEGMENTS)
    loader = MetadataLoader()
    writer = RaftMetadataWriter(raft_log, loader, FileSnapshotStore(directory))
    for index in range(3):  # what this follower applied: t0, t1, t2
        loader.handle_commit(index, topic(index))
    writer.applied_end = 3
    deltas = []
    loader.subscribe(lambda delta, image: deltas.append(delta))
    # The leader's snapshot: t0 was deleted, t1 stays, t5 was created since.
    records = topic(1) + topic(5)
    payload = build_snapshot(records, 1_700_000_000_000, epoch=4)
    writer.handle_commit(SnapshotLoaded(SnapshotId(end_offset=100, epoch=4), payload))
    assert writer.applied_end == 100
    assert loader.image.offset == 99
    assert set(loader.image.topics) == {"t1", "t5"}
    (delta,) = deltas
    assert {t.name for t in delta.deleted_topics.values()} == {"t0", "t2"}
    assert {t.name for t in delta.created_topics.values()} == {"t5"}
    raft_log.close()


def test_a_failed_metadata_write_is_a_storage_error_and_is_not_applied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the single voter's: a write that fails (the segment cuts its partial batch)
    answers KAFKA_STORAGE_ERROR, nothing is applied, the controller carries on once
    there is room, and a restart sees what the clients saw."""
    directory = metadata_log_directory(tmp_path)
    disk = DiskFull(monkeypatch)

    async def scenario() -> None:
        voter = Voter(directory)
        await voter.start()
        await voter.writer.append(topic(0))
        image, end = voter.loader.image, voter.raft_log.end_offset
        disk.writes = True
        with pytest.raises(ControllerError) as refused:
            await voter.writer.append(topic(1))
        assert refused.value.code == "KAFKA_STORAGE_ERROR"
        assert "No space left on device" in str(refused.value)
        assert voter.loader.image is image and voter.raft_log.end_offset == end
        disk.writes = False
        await voter.writer.append(topic(2))
        await voter.stop()

        voter = Voter(directory)
        await voter.start()
        assert set(voter.loader.image.topics) == {"t0", "t2"}
        await voter.stop()

    asyncio.run(scenario())


def test_a_failed_metadata_fsync_stops_the_quorum_driver(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not the single voter's behaviour: the leader fsyncs inside the Raft tick, so a
    failed fsync stops the driver and every change answers KAFKA_STORAGE_ERROR until a
    restart; the change is not cut back (a restart may commit it)."""
    directory = metadata_log_directory(tmp_path)
    disk = DiskFull(monkeypatch)

    async def scenario() -> None:
        voter = Voter(directory)
        await voter.start()
        await voter.writer.append(topic(0))
        disk.sync_failures = 1
        for index in (1, 2):
            with pytest.raises(ControllerError) as refused:
                await voter.writer.append(topic(index))
            assert refused.value.code == "KAFKA_STORAGE_ERROR"
            assert "the metadata log failed" in str(refused.value)
        assert set(voter.loader.image.topics) == {"t0"}
        await voter.driver.shutdown()
        voter.raft_log.storage_log.close()

    asyncio.run(scenario())
