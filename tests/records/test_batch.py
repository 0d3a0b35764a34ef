"""The 61-byte header view: parsing, validation and in-place stamping."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek.records import batch as b
from odradek.records.codec import Record, decode_batch, encode_batch
from odradek.records.errors import CorruptRecordError


def sample(**kwargs: object) -> bytes:
    base = int(kwargs.get("base_offset", 0))  # type: ignore[call-overload]
    records = [Record(base, 1_000, b"k", b"v"), Record(base + 1, 1_005, None, b"w")]
    return encode_batch(records, **kwargs)  # type: ignore[arg-type]


def test_header_fields_match_what_was_encoded() -> None:
    data = sample(
        base_offset=40,
        partition_leader_epoch=7,
        producer_id=99,
        producer_epoch=3,
        base_sequence=12,
        is_transactional=True,
        compression=b.GZIP,
    )
    header = b.check_batch(data)
    assert (header.base_offset, header.last_offset, header.next_offset) == (40, 41, 42)
    assert header.partition_leader_epoch == 7
    assert header.record_count == 2 and header.size == len(data)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (99, 3, 12)
    assert header.last_sequence == 13
    assert header.is_transactional and not header.is_control
    assert header.compression == b.GZIP and header.timestamp_type == b.CREATE_TIME
    assert (header.base_timestamp, header.max_timestamp) == (1_000, 1_005)


def test_last_sequence_wraps_like_kafka() -> None:
    data = sample(producer_id=1, producer_epoch=0, base_sequence=0x7FFFFFFF)
    assert b.check_batch(data).last_sequence == 0


@given(st.integers(0, 2**62), st.integers(-1, 2**31 - 1))
def test_stamping_offset_and_epoch_keeps_the_crc_valid(offset: int, epoch: int) -> None:
    data = bytearray(sample())
    b.stamp(data, 0, offset, epoch)
    header = b.check_batch(data)
    assert (header.base_offset, header.partition_leader_epoch) == (offset, epoch)
    prefix = b.stamped_prefix(b.check_batch(sample()), offset, epoch)
    assert prefix == bytes(data[:16])


def test_log_append_time_rewrites_timestamp_and_crc() -> None:
    data = bytearray(sample())
    b.set_log_append_time(data, 0, len(data), 5_000)
    header = b.check_batch(data)
    assert header.timestamp_type == b.LOG_APPEND_TIME and header.max_timestamp == 5_000
    assert [r.timestamp for r in decode_batch(data).records] == [5_000, 5_000]


def test_truncated_header_wrong_magic_and_short_length_are_corrupt() -> None:
    data = sample()
    with pytest.raises(CorruptRecordError, match="truncated"):
        b.parse_header(data[:60])
    with pytest.raises(CorruptRecordError, match="remain"):
        b.parse_header(data[:-1])
    wrong_magic = bytearray(data)
    wrong_magic[b.MAGIC_POSITION] = 1
    with pytest.raises(CorruptRecordError, match="magic 1"):
        b.parse_header(wrong_magic)
    short = bytearray(data)
    struct.pack_into(">i", short, 8, 10)
    with pytest.raises(CorruptRecordError, match="minimum"):
        b.parse_header(short)


def test_iter_batches_walks_concatenated_batches() -> None:
    data = sample(base_offset=0) + sample(base_offset=2)
    assert [h.base_offset for h in b.iter_batches(data)] == [0, 2]
    with pytest.raises(CorruptRecordError):
        list(b.iter_batches(data + b"\x00" * 5))
