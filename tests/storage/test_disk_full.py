"""A full disk (ENOSPC injected into os.pwritev / os.fsync) gets error codes, not tracebacks.

In process, so it runs everywhere (tests/server/test_disk_full.py does the same with
a real full tmpfs when it can mount one):
- a metadata commit whose write or fsync fails raises KAFKA_STORAGE_ERROR, leaves the
  image as it was, and cuts the log back, so a replay rebuilds that same image; if
  even the cut fails, every later change is refused until a restart;
- CreateTopics/DeleteTopics report it per topic; the broker's other changes still work
  once the disk has room;
- a produce whose write fails gets KAFKA_STORAGE_ERROR and the log takes the next one;
  a failure whose effect on disk is unknown (a roll, an fsync) takes the partition
  offline (KAFKA_STORAGE_ERROR) instead of serving it;
- LogManager.shutdown on a full disk closes everything it can, writes no clean-shutdown
  marker, releases the locks and raises one StorageError.
"""

from __future__ import annotations

import asyncio
import errno
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from odradek.metadata.controller import Controller, ControllerError
from odradek.metadata.delta import between
from odradek.metadata.image import MetadataImage
from odradek.metadata.loader import MetadataLoader
from odradek.metadata.topic_changes import NewTopic
from odradek.metadata.writer import LocalMetadataWriter
from odradek.replica.replica_manager import PartitionError, ReplicaManager
from odradek.storage.errors import StorageError
from odradek.storage.log import Log
from odradek.storage.log_config import LogConfig
from odradek.storage.log_loader import open_log
from odradek.storage.log_manager import CLEAN_SHUTDOWN_FILE, LogManager, LogManagerSettings
from tests.support.brokers import register_unfenced

from .conftest import FakeClock, make_batch

DEFAULTS = {"num.partitions": 1, "default.replication.factor": 1}


class DiskFull:
    """os.pwritev fails with ENOSPC while ``writes`` is set; os.fsync while ``syncs`` is
    set, or for the next ``sync_failures`` calls (a writeback error reported once)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.writes = False
        self.syncs = False
        self.sync_failures = 0
        real_pwritev, real_fsync = os.pwritev, os.fsync

        def pwritev(fd: int, buffers: Any, offset: int) -> int:
            if self.writes:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real_pwritev(fd, buffers, offset)

        def fsync(fd: int) -> None:
            if self.syncs or self.sync_failures > 0:
                self.sync_failures -= 1
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            real_fsync(fd)

        monkeypatch.setattr(os, "pwritev", pwritev)
        monkeypatch.setattr(os, "fsync", fsync)


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> DiskFull:
    return DiskFull(monkeypatch)


def open_metadata_log(path: Path) -> Log:
    log, _ = open_log(path, LogConfig(retention_ms=-1, retention_bytes=-1), clean_shutdown=False)
    return log


def local_controller(log: Log) -> Controller:
    loader = MetadataLoader()
    return Controller(LocalMetadataWriter(log, loader), loader, 1, lambda: DEFAULTS)


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[Controller]:
    log = open_metadata_log(tmp_path / "__cluster_metadata-0")
    controller = local_controller(log)
    controller.replay()
    asyncio.run(register_unfenced(controller, 1))
    yield controller
    log.close()


def metadata_log(controller: Controller) -> Log:
    assert isinstance(controller.writer, LocalMetadataWriter)
    return controller.writer.log


def replayed(path: Path) -> MetadataImage:
    log = open_metadata_log(path)
    try:
        return local_controller(log).replay()
    finally:
        log.close()


def create(controller: Controller, *names: str) -> list[ControllerError | MetadataImage]:
    return asyncio.run(controller.create_topics([NewTopic(n) for n in names], False))


@pytest.mark.parametrize("failing", ["write", "fsync"])
def test_failed_metadata_commit_is_a_storage_error_and_is_not_applied(
    controller: Controller, disk: DiskFull, failing: str
) -> None:
    (created,) = create(controller, "before")
    assert isinstance(created, MetadataImage)
    log = metadata_log(controller)
    image, end = controller.image, log.log_end_offset
    listened: list[MetadataImage] = []
    controller.add_listener(lambda _old, new: listened.append(new))

    def fill_disk() -> None:
        if failing == "write":
            disk.writes = True
        else:
            disk.sync_failures = 1  # the commit's fsync; the cut back is synced fine

    fill_disk()
    outcomes = create(controller, "lost-1", "lost-2")
    assert all(isinstance(o, ControllerError) for o in outcomes)
    assert {o.code for o in outcomes if isinstance(o, ControllerError)} == {"KAFKA_STORAGE_ERROR"}
    assert "No space left on device" in str(outcomes[0])
    fill_disk()
    (deleted,) = asyncio.run(controller.delete_topics(["before"]))
    assert isinstance(deleted, ControllerError) and deleted.code == "KAFKA_STORAGE_ERROR"
    assert controller.image is image and not listened  # nothing applied, nobody told
    assert log.log_end_offset == end  # cut back

    disk.writes = False
    replay = replayed(log.directory)
    assert set(replay.topics) == {"before"}  # a restart sees what the clients saw
    (again,) = create(controller, "after")  # room again: the controller carries on
    assert isinstance(again, MetadataImage) and set(again.topics) == {"before", "after"}
    assert set(replayed(log.directory).topics) == {"before", "after"}


def test_commit_that_cannot_be_cut_back_fences_the_controller(
    controller: Controller, disk: DiskFull, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk.syncs = True  # the commit's fsync fails, and so does the one after the cut
    (first,) = create(controller, "lost")
    assert isinstance(first, ControllerError) and "restart the broker" in str(first)
    disk.syncs = False
    (second,) = create(controller, "also-refused")
    assert isinstance(second, ControllerError) and second.code == "KAFKA_STORAGE_ERROR"
    assert "restart the broker" in str(second)
    with pytest.raises(ControllerError, match="restart the broker"):
        asyncio.run(controller.allocate_producer_ids())
    assert set(controller.image.topics) == set()


def manager(path: Path, clock: FakeClock) -> LogManager:
    return LogManager([path], LogConfig(), settings=LogManagerSettings(tick_ms=1), clock=clock)


@pytest.fixture
def replicas(tmp_path: Path, clock: FakeClock, controller: Controller) -> Iterator[ReplicaManager]:
    lm = manager(tmp_path / "logs", clock)
    lm.startup()
    replicas = ReplicaManager(1, lm)
    replicas.catch_up(controller.image, lambda _t: LogConfig())
    controller.add_listener(
        lambda old, new: replicas.apply_delta(between(old, new), new, lambda _t: LogConfig())
    )
    yield replicas
    for log in lm.logs.values():
        log.close()


def test_produce_write_failure_is_a_storage_error_and_the_log_stays_usable(
    replicas: ReplicaManager, controller: Controller, disk: DiskFull, clock: FakeClock
) -> None:
    create(controller, "t")
    assert replicas.append("t", 0, make_batch(timestamp=clock()), -1).first_offset == 0
    disk.writes = True
    with pytest.raises(PartitionError) as raised:
        replicas.append("t", 0, make_batch(timestamp=clock()), -1)
    assert raised.value.code == "KAFKA_STORAGE_ERROR"
    disk.writes = False
    assert replicas.append("t", 0, make_batch(timestamp=clock()), -1).first_offset == 2
    log = replicas.leader_partition("t", 0).log
    assert log.log_end_offset == 4 and log.active_segment.size == log.size


def test_produce_failure_of_unknown_effect_takes_the_partition_offline(
    replicas: ReplicaManager,
    controller: Controller,
    disk: DiskFull,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    create(controller, "t", "other")
    log = replicas.leader_partition("t", 0).log
    log.update_config(LogConfig(flush_messages=1))
    disk.sync_failures = 1  # flush.messages=1: the fsync after the write fails
    with pytest.raises(PartitionError) as raised:
        replicas.append("t", 0, make_batch(timestamp=clock()), -1)
    assert raised.value.code == "KAFKA_STORAGE_ERROR" and "offline" in str(raised.value)
    for _ in range(2):  # stays offline: what reached the disk is unknown until recovery
        with pytest.raises(PartitionError, match="offline"):
            replicas.append("t", 0, make_batch(timestamp=clock()), -1)
        with pytest.raises(PartitionError, match="offline"):
            replicas.leader_partition("t", 0)
    assert replicas.append("other", 0, make_batch(timestamp=clock()), -1).first_offset == 0


def test_partition_whose_log_cannot_be_created_answers_storage_error_until_created(
    replicas: ReplicaManager,
    controller: Controller,
    monkeypatch: pytest.MonkeyPatch,
    clock: FakeClock,
) -> None:
    import odradek.storage.log_manager as log_manager_module

    def full(directory: Path, topic_id: str) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(log_manager_module, "write_partition_metadata", full)
    (image,) = create(controller, "t")  # committed: the topic exists
    assert isinstance(image, MetadataImage) and "t" in image.topics
    with pytest.raises(PartitionError, match="cannot create its log: No space left"):
        replicas.append("t", 0, make_batch(timestamp=clock()), -1)
    monkeypatch.undo()
    create(controller, "next")  # the next metadata change creates it
    assert replicas.append("t", 0, make_batch(timestamp=clock()), -1).first_offset == 0


def test_shutdown_on_a_full_disk_closes_everything_and_writes_no_marker(
    tmp_path: Path, clock: FakeClock, disk: DiskFull
) -> None:
    lm = manager(tmp_path, clock)
    lm.startup()
    for name in ("a", "b"):
        lm.get_or_create_log(name, 0, topic_id=str(uuid.uuid4())).append_as_leader(
            make_batch(timestamp=clock()), 0
        )
    disk.syncs = True
    with pytest.raises(StorageError, match="no clean-shutdown marker was written") as raised:
        lm.shutdown()
    assert "\n" not in str(raised.value) and "No space left on device" in str(raised.value)
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert all(log.closed for log in lm.logs.values())
    disk.syncs = False
    again = manager(tmp_path, clock)  # the locks were released; the next start recovers
    again.startup()
    assert again.logs[("a", 0)].log_end_offset == 2
    again.shutdown()
