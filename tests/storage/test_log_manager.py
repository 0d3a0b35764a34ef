"""LogManager: start-up, clean and unclean restarts, checkpoints, housekeeping, deletion."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from odradek.storage.checkpoint import read_offset_checkpoint
from odradek.storage.errors import StorageError
from odradek.storage.log_config import LogConfig
from odradek.storage.log_manager import (
    CLEAN_SHUTDOWN_FILE,
    LogManager,
    LogManagerSettings,
    parse_log_dir_name,
    read_meta_properties,
    write_meta_properties,
)

from .conftest import FakeClock, make_batch


def manager(dirs: list[Path], clock: FakeClock, **config: object) -> LogManager:
    settings = LogManagerSettings(retention_check_interval_ms=1_000, tick_ms=1)
    return LogManager(dirs, LogConfig(**config), settings=settings, clock=clock)  # type: ignore[arg-type]


def test_dir_names_parse_like_kafka() -> None:
    assert parse_log_dir_name("my-topic-12") == ("my-topic", 12)
    assert parse_log_dir_name("__consumer_offsets-0") == ("__consumer_offsets", 0)
    assert parse_log_dir_name("nopartition") is None


def test_clean_restart_keeps_everything_and_writes_kafka_checkpoints(
    tmp_path: Path, clock: FakeClock
) -> None:
    lm = manager([tmp_path], clock, segment_bytes=500)
    lm.startup()
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    log = lm.get_or_create_log("orders", 0, topic_id="AAAAAAAAAAAAAAAAAAAAAA")
    for _ in range(20):
        log.append_as_leader(make_batch(timestamp=clock()), leader_epoch=1)
    log.high_watermark = 30
    lm.shutdown()
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert read_offset_checkpoint(tmp_path / "recovery-point-offset-checkpoint") == {
        ("orders", 0): 40
    }
    assert read_offset_checkpoint(tmp_path / "replication-offset-checkpoint") == {("orders", 0): 30}
    assert (
        (tmp_path / "orders-0" / "partition.metadata")
        .read_text()
        .endswith("AAAAAAAAAAAAAAAAAAAAAA\n")
    )

    again = manager([tmp_path], clock, segment_bytes=500)
    again.startup()
    log = again.get_log("orders", 0)
    assert log is not None and log.log_end_offset == 40 and log.high_watermark == 30
    assert len(log.segments) > 1
    again.shutdown()


def test_unclean_restart_recovers_and_cuts_a_torn_tail(
    tmp_path: Path, clock: FakeClock, caplog
) -> None:  # type: ignore[no-untyped-def]
    lm = manager([tmp_path], clock)
    lm.startup()
    log = lm.get_or_create_log("t", 0)
    for _ in range(5):
        log.append_as_leader(make_batch(timestamp=clock()), leader_epoch=0)
    segment_path = log.active_segment.log_path
    for segment in log.segments:  # simulate a crash: no close, no marker; then a torn write
        segment.write_indexes()
    with open(segment_path, "ab") as handle:
        handle.write(b"\x00\x00\x00\x00\x00\x00\x00\x05\x00\x00\x01")
    for fd in lm._lock_fds:  # the crashed process's locks die with it
        import os

        os.close(fd)
    lm._lock_fds.clear()

    caplog.set_level(logging.INFO)
    again = manager([tmp_path], clock)
    again.startup()
    recovered = again.get_log("t", 0)
    assert recovered is not None and recovered.log_end_offset == 10
    assert "recovered t-0" in caplog.text and "11 bytes truncated" in caplog.text
    again.shutdown()


def test_a_second_manager_cannot_share_a_log_dir(tmp_path: Path, clock: FakeClock) -> None:
    lm = manager([tmp_path], clock)
    lm.startup()
    with pytest.raises(StorageError, match="in use"):
        manager([tmp_path], clock).startup()
    lm.shutdown()


def test_corrupt_checkpoint_is_tolerated(tmp_path: Path, clock: FakeClock) -> None:
    lm = manager([tmp_path], clock)
    lm.startup()
    lm.get_or_create_log("t", 0).append_as_leader(make_batch(timestamp=clock()), 0)
    lm.shutdown()
    (tmp_path / "recovery-point-offset-checkpoint").write_text("garbage\n")
    again = manager([tmp_path], clock)
    again.startup()
    assert again.get_log("t", 0).log_end_offset == 2  # type: ignore[union-attr]
    again.shutdown()


def test_new_logs_spread_over_log_dirs(tmp_path: Path, clock: FakeClock) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    lm = manager(dirs, clock)
    lm.startup()
    for partition in range(4):
        lm.get_or_create_log("t", partition)
    assert len(list(dirs[0].glob("t-*"))) == 2 and len(list(dirs[1].glob("t-*"))) == 2
    lm.shutdown()


def test_delete_log_renames_then_background_removes(tmp_path: Path, clock: FakeClock) -> None:
    lm = manager([tmp_path], clock)
    lm.startup()
    lm.get_or_create_log("gone", 3).append_as_leader(make_batch(timestamp=clock()), 0)
    renamed = lm.delete_log("gone", 3)
    assert renamed is not None and renamed.name.startswith("gone-3.") and renamed.exists()
    assert lm.get_log("gone", 3) is None
    asyncio.run(lm.run_once())
    assert not renamed.exists()
    lm.shutdown()


def test_housekeeping_applies_retention_and_delayed_file_deletion(
    tmp_path: Path, clock: FakeClock
) -> None:
    lm = manager(
        [tmp_path], clock, segment_bytes=200, retention_ms=60_000, file_delete_delay_ms=5_000
    )
    lm.startup()
    log = lm.get_or_create_log("t", 0)
    for _ in range(6):
        log.append_as_leader(make_batch(timestamp=clock()), 0)
    log.high_watermark = log.log_end_offset
    segments_before = len(log.segments)
    assert segments_before >= 3
    clock.advance(61_000)
    log.append_as_leader(make_batch(timestamp=clock()), 0)
    log.high_watermark = log.log_end_offset
    asyncio.run(lm.run_once())
    assert len(log.segments) < segments_before
    assert log.log_start_offset == log.segments[0].base_offset > 0
    assert list(log.directory.glob("*.deleted"))
    clock.advance(5_001)
    asyncio.run(lm.run_once())
    assert not list(log.directory.glob("*.deleted"))
    lm.shutdown()


def test_time_based_flush_advances_the_recovery_point(tmp_path: Path, clock: FakeClock) -> None:
    lm = manager([tmp_path], clock, flush_ms=1_000)
    lm.startup()
    log = lm.get_or_create_log("t", 0)
    log.append_as_leader(make_batch(timestamp=clock()), 0)
    assert log.recovery_point == 0
    clock.advance(1_001)
    asyncio.run(lm.run_once())
    assert log.recovery_point == 2
    lm.shutdown()


def test_flush_messages_fsyncs_on_append(tmp_path: Path, clock: FakeClock) -> None:
    lm = manager([tmp_path], clock, flush_messages=2)
    lm.startup()
    log = lm.get_or_create_log("t", 0)
    log.append_as_leader(make_batch(1, timestamp=clock()), 0)
    assert log.recovery_point == 0
    log.append_as_leader(make_batch(1, timestamp=clock()), 0)
    assert log.recovery_point == 2
    lm.shutdown()


def test_meta_properties_round_trip(tmp_path: Path) -> None:
    write_meta_properties(tmp_path, {"cluster.id": "abc", "node.id": "1", "version": "1"})
    assert read_meta_properties(tmp_path) == {"cluster.id": "abc", "node.id": "1", "version": "1"}
    assert read_meta_properties(tmp_path / "missing") == {}


def test_checkpoints_written_by_the_housekeeper_and_a_delete_at_once_both_land(
    tmp_path: Path, clock: FakeClock
) -> None:
    """The housekeeper writes checkpoints on a worker thread while the loop deletes a
    log (which rewrites them too): both used one ``.tmp`` name, so one writer's rename
    found it gone (FileNotFoundError out of a metadata publisher, seen in a chaos run)."""
    import threading

    lm = manager([tmp_path], clock)
    lm.startup()
    for partition in range(60):
        lm.get_or_create_log("t", partition).append_as_leader(make_batch(timestamp=clock()), 0)
    failures: list[BaseException] = []
    done = threading.Event()

    def housekeeper() -> None:
        while not done.is_set():
            try:
                lm._write_rows([lm._checkpoint_rows(d) for d in lm.log_dirs])
            except BaseException as error:  # reported by the assert below
                failures.append(error)
                return

    thread = threading.Thread(target=housekeeper)
    thread.start()
    try:
        for partition in range(60):
            lm.delete_log("t", partition)
    finally:
        done.set()
        thread.join()
    assert failures == []
    lm.write_checkpoints()
    assert read_offset_checkpoint(tmp_path / "recovery-point-offset-checkpoint") == {}
    lm.shutdown()


def test_an_older_checkpoint_snapshot_never_lands_over_a_newer_one(
    tmp_path: Path, clock: FakeClock
) -> None:
    lm = manager([tmp_path], clock)
    lm.startup()
    lm.get_or_create_log("t", 0).append_as_leader(make_batch(timestamp=clock()), 0)
    lm.get_log("t", 0).flush()  # type: ignore[union-attr]
    older = lm._checkpoint_rows(tmp_path)  # taken while t-0 exists (the worker thread's)
    lm.delete_log("t", 0)  # the loop writes the newer one at once
    lm._write_rows([older])  # the worker thread's write arrives late: dropped
    assert read_offset_checkpoint(tmp_path / "recovery-point-offset-checkpoint") == {}
    lm.shutdown()
