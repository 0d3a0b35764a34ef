"""Compacted topics refuse records without a key (INVALID_RECORD), as Kafka does.

The check opens compressed batches within the recompression bound, runs on a worker
thread through ``conversion`` (whose result the Log trusts) and again on the Log for
callers that append directly; coordinators' own writes are exempt (always keyed).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.records import batch as b
from odradek.records.codec import Record, encode_batch
from odradek.records.errors import RecordTooLargeError
from odradek.storage.errors import InvalidRecordError
from odradek.storage.log_config import LogConfig
from odradek.storage.log_loader import open_log
from odradek.storage.log_validator import CheckedRecords, conversion
from tests.support.bombs import bomb, raw_batch

from .conftest import FakeClock

NOW = 1_700_000_000_000
CODECS = [b.NO_COMPRESSION, b.GZIP, b.SNAPPY, b.LZ4, b.ZSTD]


def batch(keys: list[bytes | None], codec: int = b.NO_COMPRESSION) -> bytes:
    records = [Record(i, NOW, key, b"value") for i, key in enumerate(keys)]
    return encode_batch(records, compression=codec)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("policy", ["compact", "compact,delete"])
def test_keyless_record_refused_and_nothing_written(
    tmp_path: Path, clock: FakeClock, codec: int, policy: str
) -> None:
    log, _ = open_log(tmp_path / "t-0", LogConfig(cleanup_policy=policy), clock=clock)
    data = batch([b"a", b"b", None, b"d"], codec)
    with pytest.raises(InvalidRecordError, match="without a key \\(record 2"):
        log.append_as_leader(data, 0)
    convert = conversion(data, log.config, NOW, name=log.name)
    assert convert is not None, "compacted topics always check on a worker thread"
    with pytest.raises(InvalidRecordError):
        convert()
    assert log.log_end_offset == 0
    log.close()


@pytest.mark.parametrize("codec", CODECS)
def test_keyed_records_pass_the_worker_check_and_are_not_checked_twice(
    tmp_path: Path, clock: FakeClock, codec: int
) -> None:
    log, _ = open_log(tmp_path / "t-0", LogConfig(cleanup_policy="compact"), clock=clock)
    data = batch([b"a", b"b", b"c"], codec)
    convert = conversion(data, log.config, NOW, name=log.name)
    assert convert is not None
    checked = convert()
    assert isinstance(checked, CheckedRecords) and bytes(checked) == data
    info = log.append_as_leader(checked, 0)
    assert (info.first_offset, info.last_offset) == (0, 2)
    log.close()


def test_delete_policy_accepts_keyless_records_without_a_thread_hop(
    tmp_path: Path, clock: FakeClock
) -> None:
    log, _ = open_log(tmp_path / "t-0", LogConfig(), clock=clock)
    data = batch([None, None])
    assert conversion(data, log.config, NOW, name=log.name) is None
    assert log.append_as_leader(data, 0).last_offset == 1
    log.close()


def test_coordinator_writes_are_not_key_checked(tmp_path: Path, clock: FakeClock) -> None:
    log, _ = open_log(tmp_path / "t-0", LogConfig(cleanup_policy="compact"), clock=clock)
    assert log.append_as_leader(batch([None]), 0, coordinator=True).last_offset == 0
    log.close()


@pytest.mark.parametrize("codec", [b.GZIP, b.SNAPPY, b.LZ4, b.ZSTD])
def test_compression_bomb_on_a_compacted_topic_is_message_too_large(
    tmp_path: Path, clock: FakeClock, codec: int
) -> None:
    config = LogConfig(cleanup_policy="compact", max_message_bytes=64 * 1024)
    log, _ = open_log(tmp_path / "t-0", config, clock=clock)
    data = raw_batch(bomb(codec, 256 * 1024 * 1024), codec, record_count=1, timestamp=NOW)
    with pytest.raises(RecordTooLargeError):
        log.append_as_leader(data, 0)
    assert log.log_end_offset == 0
    log.close()


def test_truncated_records_are_invalid_not_a_crash(tmp_path: Path, clock: FakeClock) -> None:
    log, _ = open_log(tmp_path / "t-0", LogConfig(cleanup_policy="compact"), clock=clock)
    # A batch whose header claims three records but whose section holds garbage.
    data = raw_batch(b"\x7f" * 12, b.NO_COMPRESSION, record_count=3, timestamp=NOW)
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(data, 0)
    log.close()
