"""Fetched batches into records: columns handed out in slices, as either face's type."""

from __future__ import annotations

import gc

import pytest

from odradek.client._core.types import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_NOT_AVAILABLE,
    Message,
)
from odradek.client.consumer.fetch_decode import ConsumerRecord, decode_fetch, decode_fetched
from odradek.records.batch import GZIP, LOG_APPEND_TIME, ZSTD
from odradek.records.codec import Header, Record, encode_batch
from odradek.records.errors import CorruptRecordError


def fetch_response() -> bytes:
    """Offsets 10-14 (gzip, 11 compacted away), a control batch at 15, 16-18 with
    LogAppendTime and leader epoch 4, then a batch cut at the size limit."""
    first = encode_batch(
        [
            Record(10, 100, b"k0", b"v0", (Header("h", b"1"), Header("n", None))),
            Record(12, 102, None, b"v2"),
            Record(13, 103, b"k3", None),
            Record(14, 104, b"", b""),
        ],
        base_offset=10,
        compression=GZIP,
    )
    control = encode_batch(
        [Record(15, 105, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")],
        base_offset=15,
        is_control=True,
        is_transactional=True,
    )
    appended = encode_batch(
        [Record(16 + i, 106 + i, None, b"x" * (i * 100)) for i in range(3)],
        base_offset=16,
        timestamp_type=LOG_APPEND_TIME,
        max_timestamp=999,
        partition_leader_epoch=4,
        compression=ZSTD,
    )
    cut = encode_batch([Record(19, 109, None, b"cut")], base_offset=19)
    return first + control + appended + cut[:-3]


def test_records_are_handed_out_in_slices_with_positions() -> None:
    fetched = decode_fetch("t", 3, fetch_response(), 10, None)
    assert len(fetched) == 7 and fetched.next_offset == 19
    first = fetched.take(2, ConsumerRecord)
    assert fetched.position == 13 and len(fetched) == 5
    rest = fetched.take(100, ConsumerRecord)
    assert fetched.position == 19 and len(fetched) == 0
    assert fetched.take(5, ConsumerRecord) == []
    records = first + rest
    assert [r.offset for r in records] == [10, 12, 13, 14, 16, 17, 18]
    assert records[0] == ConsumerRecord(
        "t", 3, 10, 100, 0, b"k0", b"v0", (("h", b"1"), ("n", None)), -1
    )
    assert (records[2].key, records[2].value) == (b"k3", None)
    assert (records[3].key, records[3].value) == (b"", b"")
    assert [r.timestamp for r in records[4:]] == [999, 999, 999]
    assert [r.timestamp_type for r in records] == [0, 0, 0, 0, 1, 1, 1]
    assert [r.leader_epoch for r in records] == [-1, -1, -1, -1, 4, 4, 4]
    assert [r.serialized_value_size for r in records[4:]] == [0, 100, 200]
    assert records[2].serialized_value_size == -1 and records[1].serialized_key_size == -1


def test_a_fetch_starting_inside_a_batch_skips_the_records_before() -> None:
    records, next_offset = decode_fetched("t", 0, fetch_response(), 13, None)
    assert [r.offset for r in records] == [13, 14, 16, 17, 18]
    assert next_offset == 19
    records, next_offset = decode_fetched("t", 0, fetch_response(), 17, None)
    assert [r.offset for r in records] == [17, 18]


def test_control_batches_are_skipped_but_move_the_position_on() -> None:
    fetched = decode_fetch("t", 0, fetch_response(), 15, None)
    assert [r.offset for r in fetched.take(10, ConsumerRecord)] == [16, 17, 18]
    control = encode_batch(
        [Record(15, 105, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")],
        base_offset=15,
        is_control=True,
        is_transactional=True,
    )
    control_only = decode_fetch("t", 0, control, 15, None)
    assert len(control_only) == 0 and control_only.next_offset == 16


def test_messages_are_built_with_the_record_layout() -> None:
    fetched = decode_fetch("t", 3, fetch_response(), 10, None)
    messages = fetched.take(7, Message)
    assert all(type(m) is Message for m in messages)
    first, second, log_append = messages[0], messages[1], messages[4]
    assert (first.topic(), first.partition(), first.offset()) == ("t", 3, 10)
    assert (first.key(), first.value()) == (b"k0", b"v0")
    assert first.headers() == [("h", b"1"), ("n", None)]
    assert second.headers() is None  # confluent-kafka: None without headers
    assert first.timestamp() == (TIMESTAMP_CREATE_TIME, 100)
    assert log_append.timestamp() == (TIMESTAMP_LOG_APPEND_TIME, 999)
    assert log_append.leader_epoch() == 4 and first.leader_epoch() is None
    assert first.error() is None
    assert len(first) == 2 and len(messages[2]) == 0  # the value's size


def test_message_built_like_confluent_kafka() -> None:
    error = RuntimeError("boom")
    message = Message("t", 1, -1001, b"k", b"v", [("a", b"b")], (TIMESTAMP_CREATE_TIME, 5), error)
    assert message.error() is error and isinstance(message, Message)
    assert message.headers() == [("a", b"b")]
    assert message.timestamp() == (TIMESTAMP_CREATE_TIME, 5)
    unknown = Message("t", 1, 0, None, None, None, (TIMESTAMP_NOT_AVAILABLE, -1))
    assert unknown.timestamp() == (TIMESTAMP_NOT_AVAILABLE, -1)
    assert unknown.headers() is None and unknown.error() is None
    assert "t-1@0" in repr(unknown)


def test_buffered_records_are_not_objects_for_the_collector() -> None:
    """A decoded fetch holds columns (lists of bytes and ints), not a tracked object per
    record: the garbage collector has a handful of lists to look at, not thousands."""
    data = b"".join(
        encode_batch([Record(base + i, 1, None, b"v%d" % i) for i in range(100)], base_offset=base)
        for base in range(0, 1000, 100)
    )
    gc.collect()
    before = len(gc.get_objects())
    fetched = decode_fetch("t", 0, data, 0, None)
    assert len(fetched) == 1000
    assert len(gc.get_objects()) - before < 50


def test_corrupt_batch_is_an_error_naming_its_offset() -> None:
    good = encode_batch([Record(5, 1, None, b"value")], base_offset=5)
    bad = bytearray(good)
    bad[-7] = 0x7F  # inside the record: its value length
    with pytest.raises(CorruptRecordError, match="base offset 5"):
        decode_fetch("t", 0, bytes(bad), 5, None)
    with pytest.raises(CorruptRecordError):
        decode_fetch("t", 0, bytes(bad), 5, None, verify_crc=True)
