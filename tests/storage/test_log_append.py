"""Append-path validation: every bad batch gets its Kafka error, nothing is written."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from odradek.records import batch as b
from odradek.records.codec import Record, decode_batches, encode_batch
from odradek.records.errors import CorruptRecordError, RecordTooLargeError
from odradek.storage.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTimestampError,
    OutOfOrderSequenceError,
)
from odradek.storage.log import Log
from odradek.storage.log_config import LogConfig
from odradek.storage.log_loader import open_log

from .conftest import FakeClock, make_batch


def new_log(tmp_path: Path, clock: FakeClock, **config: object) -> Log:
    log, _ = open_log(tmp_path / "t-0", LogConfig(**config), clock=clock)  # type: ignore[arg-type]
    return log


def all_records(log: Log) -> list[Record]:
    data = b"".join(log.read_batches(log.log_start_offset))
    return [r for batch in decode_batches(data) for r in batch.records]


def test_offsets_are_assigned_from_the_log_end_and_epoch_stamped(
    tmp_path: Path, clock: FakeClock
) -> None:
    log = new_log(tmp_path, clock)
    first = log.append_as_leader(make_batch(3, timestamp=clock()), leader_epoch=4)
    second = log.append_as_leader(make_batch(2, timestamp=clock()), leader_epoch=5)
    assert (first.first_offset, first.last_offset, second.first_offset) == (0, 2, 3)
    assert log.log_end_offset == 5
    headers = list(log.iter_headers(0))
    assert [h.partition_leader_epoch for h in headers] == [4, 5]
    assert [(e.epoch, e.start_offset) for e in log.epoch_cache.entries] == [(4, 0), (5, 3)]
    assert [r.offset for r in all_records(log)] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize(
    ("mutate", "error"),
    [
        (lambda d: d.__setitem__(70, d[70] ^ 0xFF), CorruptRecordError),
        (lambda d: d.__setitem__(b.MAGIC_POSITION, 1), CorruptRecordError),
        (lambda d: struct.pack_into(">i", d, 8, 10_000), CorruptRecordError),
    ],
)
def test_corrupt_batches_are_rejected(tmp_path: Path, clock: FakeClock, mutate, error) -> None:  # type: ignore[no-untyped-def]
    log = new_log(tmp_path, clock)
    data = bytearray(make_batch(timestamp=clock()))
    mutate(data)
    with pytest.raises(error):
        log.append_as_leader(data, leader_epoch=0)
    assert log.log_end_offset == 0 and log.size == 0


def test_rule_breaking_batches_are_rejected(tmp_path: Path, clock: FakeClock) -> None:
    log = new_log(tmp_path, clock, max_message_bytes=200)
    now = clock()
    with pytest.raises(RecordTooLargeError):
        log.append_as_leader(make_batch(2, size=300, timestamp=now), 0)
    control = encode_batch([Record(0, now, b"\x00\x00\x00\x01", b"")], is_control=True)
    with pytest.raises(InvalidRecordError, match="control"):
        log.append_as_leader(control, 0)
    with pytest.raises(InvalidRecordError, match="empty"):
        log.append_as_leader(b"", 0)
    gappy = encode_batch([Record(0, now, None, b"a"), Record(5, now, None, b"b")])
    with pytest.raises(InvalidRecordError, match="last offset delta"):
        log.append_as_leader(gappy, 0)
    txn_without_pid = make_batch(timestamp=now, is_transactional=True)
    with pytest.raises(InvalidRecordError, match="producer id"):
        log.append_as_leader(txn_without_pid, 0)
    assert log.log_end_offset == 0


def test_create_time_limits(tmp_path: Path, clock: FakeClock) -> None:
    log = new_log(tmp_path, clock, message_timestamp_before_max_ms=60_000)
    with pytest.raises(InvalidTimestampError, match="after"):
        log.append_as_leader(make_batch(timestamp=clock() + 3_600_001), 0)
    with pytest.raises(InvalidTimestampError, match="before"):
        log.append_as_leader(make_batch(timestamp=clock() - 60_001), 0)
    log.append_as_leader(make_batch(timestamp=clock() - 59_000), 0)


def test_log_append_time_topic_stamps_broker_time(tmp_path: Path, clock: FakeClock) -> None:
    log = new_log(tmp_path, clock, message_timestamp_type="LogAppendTime")
    info = log.append_as_leader(make_batch(2, timestamp=123), 0)
    assert info.log_append_time == clock()
    assert [r.timestamp for r in all_records(log)] == [clock(), clock()]
    header = next(log.iter_headers(0))
    assert header.timestamp_type == b.LOG_APPEND_TIME


def test_topic_compression_type_recompresses(tmp_path: Path, clock: FakeClock) -> None:
    log = new_log(tmp_path, clock, compression_type="zstd")
    log.append_as_leader(make_batch(3, timestamp=clock(), compression=b.GZIP), 0)
    header = next(log.iter_headers(0))
    assert header.compression == b.ZSTD
    assert len(all_records(log)) == 3


def test_idempotent_retry_is_a_duplicate_and_gaps_are_out_of_order(
    tmp_path: Path, clock: FakeClock
) -> None:
    log = new_log(tmp_path, clock)
    now = clock()

    def produce(seq: int, epoch: int = 0, count: int = 2) -> object:
        batch = make_batch(
            count, timestamp=now, producer_id=7, producer_epoch=epoch, base_sequence=seq
        )
        return log.append_as_leader(batch, 0)

    first = produce(0)
    produce(2)
    retry = produce(0)
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (
        first.first_offset,
        first.last_offset,
    )  # type: ignore[attr-defined]
    assert log.log_end_offset == 4
    with pytest.raises(OutOfOrderSequenceError):
        produce(9)
    with pytest.raises(OutOfOrderSequenceError, match="new epoch"):
        produce(5, epoch=1)
    produce(0, epoch=1)
    with pytest.raises(InvalidProducerEpochError):
        produce(4, epoch=0)
    assert log.log_end_offset == 6
