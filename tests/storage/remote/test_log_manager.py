"""RemoteLogManager over a real Log and the filesystem backend, with a fake clock:
what is copied and in which order, only below the HW, retries after a store error,
local deletion only after the copy, remote deletion by retention, remote reads."""

from __future__ import annotations

import asyncio
import itertools
import logging
import uuid
from pathlib import Path
from typing import Any

import pytest

from odradek.storage.errors import OffsetOutOfRangeError
from odradek.storage.log import Log
from odradek.storage.log_config import LogConfig
from odradek.storage.log_loader import open_log
from odradek.storage.remote.filesystem import FileSystemRemoteStorageManager
from odradek.storage.remote.log_manager import RemoteLogManager
from odradek.storage.remote.metadata import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from odradek.storage.remote.metadata_manager import FileRemoteLogMetadataManager
from odradek.storage.remote.storage_manager import LogSegmentData, RemoteStorageError
from tests.storage.conftest import FakeClock, make_batch

TP = TopicIdPartition(uuid.UUID("0f4a5a4e-8f0b-4a0e-9a3c-6f1b2b3c4d5e"), "tiered", 0)
FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
INTERVAL = 1000


class FlakyStore(FileSystemRemoteStorageManager):
    """The filesystem backend, failing the next ``failures`` copies half-way."""

    failures = 0

    def copy_log_segment_data(
        self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData
    ) -> bytes | None:
        if self.failures:
            self.failures -= 1
            raise RemoteStorageError("store unavailable")
        return super().copy_log_segment_data(metadata, segment_data)


def new_log(tmp_path: Path, clock: FakeClock, **config: Any) -> Log:
    settings = {
        "segment_bytes": 1500,
        "index_interval_bytes": 200,
        "remote_storage_enable": True,
        "file_delete_delay_ms": 0,
        **config,
    }
    log, _ = open_log(tmp_path / "tiered-0", LogConfig(**settings), clock=clock)
    return log


def fill(log: Log, batches: int, epoch: int = 3) -> list[bytes]:
    for _ in range(batches):
        log.append_as_leader(make_batch(5, size=40), leader_epoch=epoch)
    log.high_watermark = log.log_end_offset
    return list(log.read_batches(0))


def new_manager(tmp_path: Path, clock: FakeClock, log: Log, store_cls: type = FlakyStore) -> Any:
    store = store_cls(tmp_path / "remote", fsync=False)
    rlmm = FileRemoteLogMetadataManager(tmp_path / "rlmm", fsync=False)
    return RemoteLogManager(
        store,
        rlmm,
        broker_id=1,
        leaders=lambda: [(TP, log)],
        index_cache_dir=tmp_path / "index-cache",
        index_cache_bytes=10_000,
        task_interval_ms=INTERVAL,
        reader_threads=2,
        clock=clock,
    )


def finished(rlm: RemoteLogManager) -> list[tuple[int, int]]:
    listed = rlm.rlmm.list_remote_log_segments(TP, (FINISHED,))
    return [(m.start_offset, m.end_offset) for m in listed]


def inactive_ranges(log: Log) -> list[tuple[int, int]]:
    segments = log.segments
    return [(a.base_offset, b.base_offset - 1) for a, b in itertools.pairwise(segments)]


def test_copies_rolled_segments_below_the_high_watermark_in_order(
    tmp_path: Path, clock: FakeClock
) -> None:
    log = new_log(tmp_path, clock)
    fill(log, 40)
    assert len(log.segments) >= 5
    ranges = inactive_ranges(log)
    log.high_watermark = ranges[2][1] + 1  # the third segment ends just below the HW
    rlm = new_manager(tmp_path, clock, log)
    asyncio.run(rlm.run_once())
    assert finished(rlm) == ranges[:3]
    assert log.highest_offset_in_remote == ranges[2][1]
    listed = rlm.rlmm.list_remote_log_segments(TP, (FINISHED,))
    assert all(m.segment_leader_epochs == {3: m.start_offset} for m in listed)
    log.high_watermark = log.log_end_offset
    asyncio.run(rlm.run_once())
    assert finished(rlm) == ranges  # never the active segment
    files = sorted(p.name for p in (tmp_path / "remote").rglob("*.log"))
    assert len(files) == len(ranges)
    rlm.close()


def test_local_segments_go_by_local_retention_only_once_copied(
    tmp_path: Path, clock: FakeClock
) -> None:
    log = new_log(tmp_path, clock, local_retention_bytes=0)
    fill(log, 40)
    ranges = inactive_ranges(log)
    assert log.delete_old_segments() == 0  # nothing is remote yet
    log.high_watermark = ranges[1][1] + 1
    rlm = new_manager(tmp_path, clock, log)
    asyncio.run(rlm.run_once())
    assert log.delete_old_segments() == 2  # exactly the two copied
    assert log.log_start_offset == 0  # the remote start
    assert log.local_log_start_offset == ranges[2][0]
    rlm.close()


def test_a_store_error_is_retried_with_backoff_and_its_leftover_deleted(
    tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    log = new_log(tmp_path, clock)
    fill(log, 20)
    rlm = new_manager(tmp_path, clock, log)
    rlm.rsm.failures = 1
    with caplog.at_level(logging.WARNING):
        asyncio.run(rlm.run_once())
    assert "store unavailable" in caplog.text
    assert finished(rlm) == []
    started = rlm.rlmm.list_remote_log_segments(TP)
    assert [m.state for m in started] == [RemoteLogSegmentState.COPY_SEGMENT_STARTED]
    clock.advance(INTERVAL // 2)
    asyncio.run(rlm.run_once())  # backing off: not tried
    assert rlm.rlmm.list_remote_log_segments(TP) == started
    clock.advance(INTERVAL)
    asyncio.run(rlm.run_once())
    assert finished(rlm) == inactive_ranges(log)
    listed = rlm.rlmm.list_remote_log_segments(TP)
    assert started[0].remote_log_segment_id not in [m.remote_log_segment_id for m in listed]
    rlm.close()


def test_remote_segments_expire_by_retention_bytes_and_move_the_log_start(
    tmp_path: Path, clock: FakeClock
) -> None:
    log = new_log(tmp_path, clock, local_retention_bytes=0)
    fill(log, 40)
    ranges = inactive_ranges(log)
    rlm = new_manager(tmp_path, clock, log)
    asyncio.run(rlm.run_once())
    log.delete_old_segments()
    remote = rlm.rlmm.list_remote_log_segments(TP, (FINISHED,))
    keep = sum(m.segment_size_in_bytes for m in remote[2:]) + log.size
    log.update_config(LogConfig(**{**_config(log), "retention_bytes": keep}))
    asyncio.run(rlm.run_once())
    assert finished(rlm) == ranges[2:]
    assert log.log_start_offset == ranges[2][0]
    assert len(list((tmp_path / "remote").rglob("*.log"))) == len(ranges) - 2
    rlm.close()


def test_remote_segments_expire_by_retention_ms(tmp_path: Path, clock: FakeClock) -> None:
    log = new_log(tmp_path, clock, local_retention_bytes=0, retention_ms=60_000)
    fill(log, 20)
    ranges = inactive_ranges(log)
    rlm = new_manager(tmp_path, clock, log)
    asyncio.run(rlm.run_once())
    assert finished(rlm) == ranges
    clock.advance(30_000)
    asyncio.run(rlm.run_once())
    assert finished(rlm) == ranges  # not old enough yet
    clock.advance(90_000)
    asyncio.run(rlm.run_once())
    assert finished(rlm) == []
    assert log.log_start_offset == ranges[-1][1] + 1
    assert len(log.segments) == 1  # the local copies below the new start went too
    rlm.close()


def test_reads_below_the_local_log_come_from_remote_storage(
    tmp_path: Path, clock: FakeClock
) -> None:
    log = new_log(tmp_path, clock, local_retention_bytes=0)
    original = fill(log, 40)
    rlm = new_manager(tmp_path, clock, log)
    asyncio.run(rlm.run_once())
    log.delete_old_segments()
    assert log.local_log_start_offset > 0

    async def read_all() -> bytes:
        out, offset = b"", 0
        while offset < log.local_log_start_offset:
            data = (await rlm.read(TP, log, offset, 700, True)).data
            assert data
            out += data
            offset = _next_offset(data)
        return out

    remote = asyncio.run(read_all())
    local = b"".join(log.read_batches(log.local_log_start_offset))
    assert remote + local == b"".join(original)
    # an offset inside a batch gets the whole batch
    middle = asyncio.run(rlm.read(TP, log, 7, 1, True))
    assert middle.data == original[1] and middle.aborted is None
    with pytest.raises(OffsetOutOfRangeError):
        asyncio.run(rlm.read(TP, log, log.local_log_start_offset, 100, True))
    rlm.close()


def test_read_committed_remote_reads_carry_the_aborted_transactions(
    tmp_path: Path, clock: FakeClock
) -> None:
    log = new_log(tmp_path, clock, local_retention_bytes=0)
    sequence = 0

    def send(producer_id: int, count: int = 5) -> None:
        nonlocal sequence
        batch = make_batch(
            count,
            size=40,
            producer_id=producer_id,
            producer_epoch=0,
            base_sequence=sequence if producer_id == 7 else 0,
            is_transactional=True,
        )
        log.append_as_leader(batch, leader_epoch=3)
        if producer_id == 7:
            sequence += count

    fill(log, 3)
    send(7)  # producer 7's transaction begins at offset 15 ...
    fill(log, 30)  # ... stays open across segment rolls ...
    log.append_marker(7, 0, 0, False, leader_epoch=3)  # ... and is aborted
    fill(log, 30)
    log.high_watermark = log.log_end_offset
    rlm = new_manager(tmp_path, clock, log)
    asyncio.run(rlm.run_once())
    log.delete_old_segments()
    assert log.local_log_start_offset > 200

    found = asyncio.run(rlm.read(TP, log, 15, 100, True, committed=True))
    assert found.aborted is not None
    assert [(a.producer_id, a.first_offset) for a in found.aborted] == [(7, 15)]
    before = asyncio.run(rlm.read(TP, log, 0, 100, True, committed=True))
    assert before.aborted == []  # offsets 0..4: no transaction overlaps them
    rlm.close()


def test_metadata_survives_a_restart_and_a_torn_tail(tmp_path: Path, clock: FakeClock) -> None:
    log = new_log(tmp_path, clock)
    fill(log, 20)
    rlm = new_manager(tmp_path, clock, log)
    asyncio.run(rlm.run_once())
    before = finished(rlm)
    rlm.close()
    (path,) = (tmp_path / "rlmm").iterdir()
    with path.open("ab") as f:
        f.write(b"\x00\x00\x01\x00torn")
    reopened = FileRemoteLogMetadataManager(tmp_path / "rlmm", fsync=False)
    assert [
        (m.start_offset, m.end_offset) for m in reopened.list_remote_log_segments(TP, (FINISHED,))
    ] == before
    reopened.close()
    assert not path.read_bytes().endswith(b"torn")


def _config(log: Log) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(log.config)


def _next_offset(data: bytes) -> int:
    import struct

    position, last = 0, -1
    while position < len(data):
        base, length = struct.unpack_from(">qi", data, position)
        (delta,) = struct.unpack_from(">i", data, position + 23)
        last = base + delta
        position += 12 + length
    return last + 1


def test_a_reloaded_tiered_log_keeps_its_remote_start_and_epochs(
    tmp_path: Path, clock: FakeClock
) -> None:
    """Logs load with the broker defaults; the topic's tiered config, applied after,
    puts the log start back at the remote start, with the epochs of the remote part."""
    log = new_log(tmp_path, clock, local_retention_bytes=0)
    fill(log, 20, epoch=3)
    log.append_as_leader(make_batch(5, size=40), leader_epoch=4)
    log.high_watermark = log.log_end_offset
    fill(log, 20, epoch=4)
    rlm = new_manager(tmp_path, clock, log)
    asyncio.run(rlm.run_once())
    log.delete_old_segments()
    local_start, end = log.local_log_start_offset, log.log_end_offset
    assert local_start > 100
    tiered = log.config
    log.close()
    rlm.close()

    reopened, _ = open_log(
        tmp_path / "tiered-0",
        LogConfig(),  # the broker defaults
        log_start_offset=0,
        recovery_point=end,
        clock=clock,
    )
    assert reopened.log_start_offset == local_start  # not known to be tiered yet
    reopened.update_config(tiered)
    assert (reopened.log_start_offset, reopened.local_log_start_offset) == (0, local_start)
    assert reopened.epoch_cache.epoch_for_offset(0) == 3
    reopened.high_watermark = end
    rlm = new_manager(tmp_path, clock, reopened)
    first = asyncio.run(rlm.read(TP, reopened, 0, 100, True))
    assert first.data
    rlm.close()
    reopened.close()


def test_a_reloaded_plain_log_drops_the_epochs_below_its_start(
    tmp_path: Path, clock: FakeClock
) -> None:
    log = new_log(tmp_path, clock, remote_storage_enable=False)
    fill(log, 20, epoch=3)
    log.append_as_leader(make_batch(5, size=40), leader_epoch=4)
    log.high_watermark = log.log_end_offset
    log.delete_segments(lambda segment, next_base: next_base <= 50)
    start, end = log.log_start_offset, log.log_end_offset
    log.close()
    reopened, _ = open_log(
        tmp_path / "tiered-0", LogConfig(), log_start_offset=0, recovery_point=end, clock=clock
    )
    reopened.update_config(LogConfig(segment_bytes=1500))
    assert reopened.log_start_offset == start
    assert reopened.epoch_cache.entries[0].start_offset == start
    reopened.close()


def test_a_deleted_partition_loses_its_remote_data(tmp_path: Path, clock: FakeClock) -> None:
    log = new_log(tmp_path, clock)
    fill(log, 20)
    rlm = new_manager(tmp_path, clock, log)

    async def copy_then_delete() -> None:
        await rlm.run_once()
        assert finished(rlm)
        rlm.delete_partition(TP)
        while rlm._deletions:
            await asyncio.sleep(0.01)

    asyncio.run(copy_then_delete())
    assert not list((tmp_path / "remote").rglob("*.log"))
    assert not list((tmp_path / "rlmm").iterdir())
    rlm.close()


def test_delete_records_and_local_retention_ms_on_a_tiered_log(
    tmp_path: Path, clock: FakeClock
) -> None:
    log = new_log(tmp_path, clock, local_retention_ms=60_000)
    fill(log, 40)
    ranges = inactive_ranges(log)
    rlm = new_manager(tmp_path, clock, log)
    asyncio.run(rlm.run_once())
    assert log.delete_old_segments() == 0  # copied, but not old enough locally
    clock.advance(61_000)
    assert log.delete_old_segments() == len(ranges)
    assert log.log_start_offset == 0
    log.increment_log_start_offset(ranges[2][0] + 1)  # DeleteRecords inside segment 3
    asyncio.run(rlm.run_once())
    assert finished(rlm) == ranges[2:]
    assert log.log_start_offset == ranges[2][0] + 1
    rlm.close()


def test_list_offsets_by_timestamp_below_the_local_log(tmp_path: Path, clock: FakeClock) -> None:
    log = new_log(tmp_path, clock, local_retention_bytes=0, index_interval_bytes=1)
    t0 = clock()
    for k in range(40):  # batch k: offsets 5k..5k+4, timestamps t0+1000k+i
        log.append_as_leader(make_batch(5, size=40, timestamp=t0 + 1000 * k), leader_epoch=3)
    log.high_watermark = log.log_end_offset
    rlm = new_manager(tmp_path, clock, log)
    asyncio.run(rlm.run_once())
    log.delete_old_segments()
    local_start = log.local_log_start_offset
    assert local_start > 40

    def find(timestamp: int) -> tuple[int, int] | None:
        return asyncio.run(rlm.find_offset_for_timestamp(TP, log, timestamp))

    assert find(t0 - 5) == (0, t0)
    assert find(t0 + 7002) == (37, t0 + 7002)
    assert find(t0 + 7005) == (40, t0 + 8000)  # between batches: the next record
    assert find(t0 + 1000 * 39) is None  # only in the local log
    rlm.close()
