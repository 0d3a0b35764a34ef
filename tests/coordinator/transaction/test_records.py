"""__transaction_state records: Kafka's exact bytes, round trips of both value
versions, and malformed input raising RecordFormatError (never anything else)."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek.coordinator.transaction.records import (
    RecordFormatError,
    TransactionValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)

I64 = st.integers(-(1 << 63), (1 << 63) - 1)
TOPICS = st.text(min_size=1, max_size=20)
PARTITIONS = st.lists(
    st.tuples(TOPICS, st.lists(st.integers(0, (1 << 31) - 1), max_size=5).map(tuple)),
    max_size=5,
).map(tuple)
VALUES = st.builds(
    TransactionValue,
    producer_id=I64,
    producer_epoch=st.integers(-1, 32767),
    timeout_ms=st.integers(-(1 << 31), (1 << 31) - 1),
    status=st.integers(0, 5),
    partitions=st.one_of(st.none(), PARTITIONS),
    last_update_ms=I64,
    start_ms=I64,
    previous_producer_id=I64,
    next_producer_id=I64,
    client_transaction_version=st.integers(-(1 << 15), (1 << 15) - 1),
)


@given(st.text(max_size=100))
def test_key_round_trip(transactional_id: str) -> None:
    assert decode_key(encode_key(transactional_id)) == transactional_id


@given(VALUES)
def test_value_v1_round_trip(value: TransactionValue) -> None:
    assert decode_value(encode_value(value)) == value


@given(VALUES)
def test_value_v0_round_trip_drops_tagged_fields(value: TransactionValue) -> None:
    decoded = decode_value(encode_value(value, version=0))
    assert decoded == TransactionValue(
        value.producer_id,
        value.producer_epoch,
        value.timeout_ms,
        value.status,
        value.partitions,
        value.last_update_ms,
        value.start_ms,
    )


@given(st.binary(max_size=80))
def test_garbage_raises_format_error_only(data: bytes) -> None:
    for decode in (decode_key, decode_value):
        with contextlib.suppress(RecordFormatError):
            decode(data)


def test_known_key_bytes() -> None:
    assert encode_key("txn") == bytes.fromhex("0000 0003") + b"txn"


ONGOING = TransactionValue(
    producer_id=1000,
    producer_epoch=2,
    timeout_ms=60_000,
    status=1,
    partitions=(("t", (0, 1)),),
    last_update_ms=5000,
    start_ms=4000,
    previous_producer_id=7,
)


def test_known_value_v1_bytes() -> None:
    # Kafka's TransactionLogValue v1 (flexible): compact array/string lengths are
    # N+1 varints, each partitions entry ends with an empty tag section, and the
    # record ends with its tagged fields (tag 0 PreviousProducerId, 8 bytes).
    expected = (
        bytes.fromhex("0001")  # version
        + bytes.fromhex("00000000000003e8")  # producer id
        + bytes.fromhex("0002")  # epoch
        + bytes.fromhex("0000ea60")  # timeout
        + bytes.fromhex("01")  # Ongoing
        + bytes.fromhex("02")  # one partitions entry
        + bytes.fromhex("02")
        + b"t"
        + bytes.fromhex("03000000000000000100")
        + bytes.fromhex("0000000000001388")  # last update
        + bytes.fromhex("0000000000000fa0")  # start
        + bytes.fromhex("0100080000000000000007")  # tagged fields
    )
    assert encode_value(ONGOING) == expected
    assert decode_value(expected) == ONGOING


def test_known_value_v0_bytes() -> None:
    expected = (
        bytes.fromhex("000000000000000003e800020000ea6001")
        + bytes.fromhex("000000010001")
        + b"t"
        + bytes.fromhex("000000020000000000000001")
        + bytes.fromhex("00000000000013880000000000000fa0")
    )
    assert encode_value(ONGOING, version=0) == expected
    decoded = decode_value(expected)
    assert decoded.partitions == ONGOING.partitions and decoded.previous_producer_id == -1


def test_empty_state_has_null_partitions() -> None:
    empty = TransactionValue(5, 0, 1000, 0, None, 1, -1)
    v1 = encode_value(empty)
    assert v1[2 + 8 + 2 + 4 + 1] == 0  # compact null array
    v0 = encode_value(empty, version=0)
    assert v0[2 + 8 + 2 + 4 + 1 : 2 + 8 + 2 + 4 + 1 + 4] == bytes.fromhex("ffffffff")
    assert decode_value(v1).partitions is None and decode_value(v0).partitions is None


@pytest.mark.parametrize(
    "data",
    [
        bytes.fromhex("0002") + bytes(40),  # unknown value version
        encode_value(ONGOING)[:-3],  # truncated
        encode_value(ONGOING) + b"\x00",  # trailing bytes
        encode_value(ONGOING)[:16] + b"\x06" + encode_value(ONGOING)[17:],  # Dead: never written
    ],
)
def test_malformed_values(data: bytes) -> None:
    with pytest.raises(RecordFormatError):
        decode_value(data)


def test_unknown_key_version() -> None:
    with pytest.raises(RecordFormatError):
        decode_key(bytes.fromhex("0001 0003") + b"txn")


def test_unknown_tags_are_skipped() -> None:
    data = encode_value(ONGOING)
    with_unknown = data[:-11] + bytes.fromhex("02000800000000000000070901ff")
    assert decode_value(with_unknown) == ONGOING
