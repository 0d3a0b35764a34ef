"""Metadata snapshots on disk: taken by the single voter's writer, used at restart.

In process (LocalMetadataWriter over a real log with small segments):
- after the byte bound a snapshot is written beside the log, at most two are kept,
  and once there are two the whole segments below the older one's end are gone, the
  log start offset moved and checkpointable;
- a restart (snapshot + the log after it) gives the image the live loader had, which
  is the image a full replay of every record gives;
- stopped between any two steps — a torn ``.part``, a snapshot not yet followed by the
  log trim, segments renamed ``.deleted`` but not unlinked with a stale log-start
  checkpoint — a restart gives the same image;
- a damaged newest snapshot falls back to the older one plus the log; when nothing
  usable is left the replay refuses with one line naming the snapshot.

Real broker (``odradek serve``): a metadata log grown past three segments and many
topics created with a low ``metadata.log.max.record.bytes.between.snapshots``: the old
segments are deleted, the restart starts from the snapshot with every topic and
config, and kill -9 at random moments while snapshots (of 20,000 topics, so each
takes a while) are being written loses no acknowledged topic.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from pathlib import Path

import pytest

from odradek.metadata.image import ImageReplay, MetadataImage, MetadataRecord
from odradek.metadata.loader import MetadataLoader
from odradek.metadata.snapshotter import SnapshotPolicy, write_snapshot
from odradek.metadata.writer import LocalMetadataWriter
from odradek.raft.snapshots import FileSnapshotStore
from odradek.records.codec import Record, encode_batch
from odradek.server.metadata_log import METADATA_LOG_CONFIG, METADATA_LOG_DIR
from odradek.storage.checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    read_offset_checkpoint,
    write_offset_checkpoint,
)
from odradek.storage.errors import CommittedDataCorruptError
from odradek.storage.log import Log
from odradek.storage.log_config import LogConfig
from odradek.storage.log_loader import open_log
from tests.server.test_admin_configs import configs_of, set_topic_configs
from tests.server.test_metadata_log import (
    grow_metadata_log,
    log_digests,
    serve_refused,
    topic_names,
)
from tests.server.test_protocol import create_topic, make_topic
from tests.support.broker import BrokerProcess
from tests.support.damage import flip
from tests.support.wire import WireClient

SMALL_SEGMENTS = LogConfig(
    retention_ms=-1, retention_bytes=-1, segment_bytes=16 * 1024, max_message_bytes=2**20
)
TOPIC_TYPE = 2
METADATA_TP = ("__cluster_metadata", 0)


def open_metadata_log(directory: Path, log_start: int = 0) -> Log:
    log, _ = open_log(directory, SMALL_SEGMENTS, log_start_offset=log_start, clean_shutdown=False)
    return log


def change(index: int) -> list[MetadataRecord]:
    """One controller-shaped change: topics come and go, configs are set over and over."""
    topic_id = str(uuid.UUID(int=index + 1))
    if index % 5 == 0:
        return [
            MetadataRecord("Topic", {"name": f"t{index}", "topic_id": topic_id}),
            MetadataRecord(
                "Partition",
                {
                    "topic_id": topic_id,
                    "partition": 0,
                    "replicas": [0],
                    "isr": [0],
                    "leader": 0,
                    "leader_epoch": 0,
                },
            ),
        ]
    if index % 5 == 1 and index > 20:
        return [MetadataRecord("RemoveTopic", {"topic_id": str(uuid.UUID(int=index - 20))})]
    return [
        MetadataRecord(
            "Config",
            {
                "resource_type": "broker",
                "resource_name": "",
                "name": f"k{index % 7}",
                "value": "x" * 50 + str(index),
            },
        )
    ]


async def commit_changes(
    writer: LocalMetadataWriter, count: int, first: int = 0
) -> list[MetadataRecord]:
    records = []
    for index in range(first, first + count):
        batch = change(index)
        await writer.append(batch)
        records.extend(batch)
    await writer.wait_snapshot()
    return records


def restart(directory: Path, log_start: int = 0) -> tuple[Log, MetadataImage]:
    log = open_metadata_log(directory, log_start)
    writer = LocalMetadataWriter(log, MetadataLoader(), SnapshotPolicy(4096, 0))
    image = writer.replay()
    return log, image


def full_replay(records: list[MetadataRecord]) -> MetadataImage:
    replay = ImageReplay()
    replay.apply(records, len(records) - 1)
    return replay.image()


@pytest.fixture
def written(tmp_path: Path) -> tuple[Path, MetadataImage, list[MetadataRecord]]:
    directory = tmp_path / METADATA_LOG_DIR

    async def run() -> tuple[MetadataImage, list[MetadataRecord]]:
        log = open_metadata_log(directory)
        writer = LocalMetadataWriter(log, MetadataLoader(), SnapshotPolicy(4096, 0))
        writer.replay()
        records = await commit_changes(writer, 600)
        image = writer.loader.image
        log.close()
        return image, records

    image, records = asyncio.run(run())
    return directory, image, records


def same_cluster(a: MetadataImage, b: MetadataImage) -> bool:
    """Equal images but for broker epochs and the offset, which count records."""
    return a.topics == b.topics and a.configs == b.configs and a.brokers == b.brokers


def test_snapshots_are_kept_two_and_the_log_below_the_older_is_deleted(
    written: tuple[Path, MetadataImage, list[MetadataRecord]],
) -> None:
    directory, image, records = written
    snapshots = FileSnapshotStore(directory).list()
    assert len(snapshots) == 2
    assert all(s.epoch == 1 for s in snapshots)
    segments = sorted(directory.glob("*.log"))
    first_base = int(segments[0].name.removesuffix(".log"))
    assert 0 < first_base <= snapshots[0].end_offset  # whole segments below it are gone
    assert not list(directory.glob("*.deleted")) and not list(directory.glob("*.part"))
    log, again = restart(directory)
    try:
        assert log.log_start_offset == first_base
        assert again == image  # snapshot + the log after it
        assert again.offset == len(records) - 1
        expected = full_replay(records)
        assert again == expected  # = every record replayed from offset 0
    finally:
        log.close()


def test_restart_after_stopping_between_steps_gives_the_same_image(
    written: tuple[Path, MetadataImage, list[MetadataRecord]],
) -> None:
    directory, image, _ = written
    store = FileSnapshotStore(directory)
    newest = store.latest()
    assert newest is not None
    # A snapshot torn before its rename: a .part never counts and is removed.
    (directory / f"{newest.end_offset + 5:020d}-{1:010d}.checkpoint.part").write_bytes(b"junk")
    log, again = restart(directory)
    assert again == image and not list(directory.glob("*.part"))
    log.close()


def test_snapshots_written_but_the_log_not_yet_trimmed_or_half_trimmed(tmp_path: Path) -> None:
    directory = tmp_path / METADATA_LOG_DIR

    async def run() -> tuple[Log, MetadataImage, MetadataImage]:
        log = open_metadata_log(directory)
        writer = LocalMetadataWriter(log, MetadataLoader(), SnapshotPolicy(10**9, 0))
        writer.replay()
        await commit_changes(writer, 300)
        middle = writer.loader.image
        await commit_changes(writer, 300, first=300)
        return log, middle, writer.loader.image

    log, middle, image = asyncio.run(run())
    store = FileSnapshotStore(directory)
    write_snapshot(store, middle, 1, 0)
    write_snapshot(store, image, 1, 0)
    log.flush()
    # Stopped after the snapshots, before the log was trimmed:
    log2, again = restart(directory)
    assert again == image
    log2.close()
    # Segments renamed .deleted but not unlinked, the log-start checkpoint not written:
    log.high_watermark = log.log_end_offset
    log.increment_log_start_offset(middle.offset + 1)
    assert list(directory.glob("*.deleted"))  # "crash" here: the files stay as they are
    log3, again = restart(directory, log_start=0)
    assert again == image and not list(directory.glob("*.deleted"))
    assert log3.log_start_offset > 0
    log3.close()


def test_a_damaged_newest_snapshot_falls_back_to_the_older_one(
    written: tuple[Path, MetadataImage, list[MetadataRecord]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    directory, image, _ = written
    older, newest = sorted(directory.glob("*.checkpoint"))
    flip(newest, newest.stat().st_size // 2)
    with caplog.at_level(logging.ERROR):
        log, again = restart(directory)
    log.close()
    assert again == image
    (line,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert str(newest) in line and "\n" not in line

    flip(older, 70)
    with pytest.raises(CommittedDataCorruptError) as raised:
        restart(directory)
    text = str(raised.value)
    assert str(newest) in text and "no usable metadata snapshot" in text and "\n" not in text


def test_an_empty_log_with_a_snapshot_restarts_at_its_end(tmp_path: Path) -> None:
    directory = tmp_path / METADATA_LOG_DIR
    directory.mkdir()
    image = full_replay(change(0))
    write_snapshot(FileSnapshotStore(directory), image, 1, 0)
    log, again = restart(directory)
    try:
        assert same_cluster(again, image) and again.offset == image.offset
        assert log.log_end_offset == image.offset + 1  # the next record follows the snapshot
    finally:
        log.close()


def test_the_time_bound_snapshots_a_change_once_the_interval_passed(tmp_path: Path) -> None:
    directory = tmp_path / METADATA_LOG_DIR
    now = [1_000_000]
    log, _ = open_log(directory, SMALL_SEGMENTS, clock=lambda: now[0])

    async def run() -> None:
        writer = LocalMetadataWriter(log, MetadataLoader(), SnapshotPolicy(10**9, 60_000))
        writer.replay()
        await commit_changes(writer, 3)
        now[0] += 59_999
        writer.maybe_snapshot()
        await writer.wait_snapshot()
        assert FileSnapshotStore(directory).list() == []
        now[0] += 1  # the broker's timer calls maybe_snapshot every second
        writer.maybe_snapshot()
        await writer.wait_snapshot()
        (snapshot,) = FileSnapshotStore(directory).list()
        assert snapshot.end_offset == writer.loader.image.offset + 1
        now[0] += 10**6  # no change since: no new snapshot, however long
        writer.maybe_snapshot()
        await writer.wait_snapshot()
        assert len(FileSnapshotStore(directory).list()) == 1
        # As in Kafka, a change after a quiet interval is snapshotted at once.
        await commit_changes(writer, 1, first=3)
        assert len(FileSnapshotStore(directory).list()) == 2

    try:
        asyncio.run(run())
    finally:
        log.close()


def change_topic(index: int) -> list[MetadataRecord]:
    topic_id = str(uuid.UUID(int=10**6 + index))
    return [
        MetadataRecord("Topic", {"name": f"offline-{index}", "topic_id": topic_id}),
        MetadataRecord(
            "Partition",
            {
                "topic_id": topic_id,
                "partition": 0,
                "replicas": [99],
                "isr": [99],
                "leader": 99,
                "leader_epoch": 0,
            },
        ),
    ]


def append_offline(data_dir: Path, records: list[MetadataRecord]) -> None:
    """Append controller-format batches of 100 records to a stopped broker's metadata log."""
    log, _ = open_log(data_dir / METADATA_LOG_DIR, METADATA_LOG_CONFIG)
    for first in range(0, len(records), 100):
        chunk = records[first : first + 100]
        encoded = [Record(i, 1_700_000_000_000, *r.encode()) for i, r in enumerate(chunk)]
        log.append_as_leader(encode_batch(encoded), 1)
    log.flush()
    end = log.log_end_offset
    log.close()
    points = read_offset_checkpoint(data_dir / RECOVERY_POINT_CHECKPOINT)
    points[METADATA_TP] = end
    write_offset_checkpoint(data_dir / RECOVERY_POINT_CHECKPOINT, points)


# -- a real broker ----------------------------------------------------------------------

LOW_BOUND = ["--override", "metadata.log.max.record.bytes.between.snapshots=4096"]


def snapshot_files(data_dir: Path) -> list[Path]:
    return sorted((data_dir / METADATA_LOG_DIR).glob("*.checkpoint"))


def wait_for(condition: object, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_broker_snapshots_deletes_old_segments_and_restarts_from_the_snapshot(
    tmp_path: Path,
) -> None:
    broker = BrokerProcess(tmp_path / "data", LOW_BOUND)
    try:
        broker.start()
        with WireClient(broker.bootstrap) as client:
            seed = make_topic(client, "seed")
        assert broker.stop() == 0
        end = grow_metadata_log(broker.data_dir, seed, 17 * 2**20, "86400000")  # 3 segments
        metadata_dir = broker.data_dir / METADATA_LOG_DIR
        assert (metadata_dir / f"{0:020d}.log").exists()

        broker.start()
        names = []
        with WireClient(broker.bootstrap) as client:
            for index in range(150):
                names.append(make_topic(client, f"many{index}-"))
            set_topic_configs(client, names[0], retention_ms="7200000")
        wait_for(lambda: not (metadata_dir / f"{0:020d}.log").exists())
        assert broker.stop() == 0
        assert 1 <= len(snapshot_files(broker.data_dir)) <= 2
        first = min(int(p.name.removesuffix(".log")) for p in metadata_dir.glob("*.log"))
        assert first > end - 100  # every grown segment is gone
        starts = read_offset_checkpoint(broker.data_dir / LOG_START_OFFSET_CHECKPOINT)
        assert starts[METADATA_TP] >= first

        started = time.monotonic()
        broker.start()
        print(f"restart from a snapshot: {time.monotonic() - started:.2f}s")
        assert "loaded metadata snapshot" in broker.log()
        assert {seed, *names} <= topic_names(broker.bootstrap)
        with WireClient(broker.bootstrap) as client:
            assert configs_of(client, TOPIC_TYPE, seed)["retention.ms"].value == "86400000"
            assert configs_of(client, TOPIC_TYPE, names[0])["retention.ms"].value == "7200000"
        assert "Traceback" not in broker.log()

        # Every snapshot damaged and the log below them gone: refused, one line, nothing
        # changed, and --truncate-damaged-metadata cannot help either.
        assert broker.stop() == 0
        for path in snapshot_files(broker.data_dir):
            flip(path, path.stat().st_size // 2)
        before = log_digests(broker.data_dir)
        for extra in ((), ("--truncate-damaged-metadata",)):
            line = serve_refused(broker.data_dir, *extra)
            assert "no usable metadata snapshot" in line and "restore" in line, line
        assert log_digests(broker.data_dir) == before
    finally:
        broker.stop()
        broker.kill()


def test_kill_9_while_snapshots_are_written_loses_no_acknowledged_topic(
    tmp_path: Path,
) -> None:
    # Every commit is a snapshot (bound of 1 byte), so kills land inside them.
    broker = BrokerProcess(
        tmp_path / "data",
        ["--override", "metadata.log.max.record.bytes.between.snapshots=1"],
    )
    rng = random.Random(7)
    acknowledged: set[str] = set()
    torn = 0
    try:
        # 20,000 topics (of another broker) make each snapshot take a while to write.
        broker.start()
        assert broker.stop() == 0
        append_offline(broker.data_dir, [r for i in range(20_000) for r in change_topic(i)])
        for _round in range(4):
            broker.start()
            assert acknowledged <= topic_names(broker.bootstrap)
            with WireClient(broker.bootstrap) as client:
                deadline = time.monotonic() + rng.uniform(0.3, 1.5)
                index = 0
                while time.monotonic() < deadline:
                    name = f"k{_round}-{index}"
                    index += 1
                    result = create_topic(client, name, 1, None)
                    if result.error_code == 0:
                        acknowledged.add(name)
            broker.kill()
            files = snapshot_files(broker.data_dir)
            assert files, "no snapshot was ever written"
            torn += len(list((broker.data_dir / METADATA_LOG_DIR).glob("*.part")))
        broker.start()
        assert acknowledged <= topic_names(broker.bootstrap)
        assert broker.log().count("wrote metadata snapshot") >= 4
        assert "Traceback" not in broker.log()
        # The .part exists only while the built payload is written and fsynced, a short
        # window; the unit tests above start from a torn .part directly.
        print(f"{len(acknowledged)} topics; kills that left a torn snapshot: {torn}")
    finally:
        broker.stop()
        broker.kill()
