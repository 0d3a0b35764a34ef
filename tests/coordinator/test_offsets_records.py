"""__consumer_offsets key/value schemas and the group → partition mapping."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek.coordinator.group.records import (
    GroupKey,
    GroupValue,
    MemberValue,
    OffsetKey,
    OffsetValue,
    RecordFormatError,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
    java_string_hash,
    partition_for_group,
)

text = st.text(max_size=40)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)


def test_java_string_hash_matches_java() -> None:
    # Values of String.hashCode() in Java.
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert java_string_hash("\U0001f600") == 1772899  # a surrogate pair: two UTF-16 units


def test_partition_for_group_uses_kafkas_abs() -> None:
    # Utils.abs(Integer.MIN_VALUE) is 0 in Kafka (n & 0x7fffffff), not an error.
    assert partition_for_group("polygenelubricants", 50) == 0
    assert partition_for_group("hello", 50) == 99162322 % 50


def test_offset_key_known_bytes() -> None:
    key = encode_offset_key(OffsetKey("g", "t", 3))
    assert key == struct.pack(">hh", 1, 1) + b"g" + struct.pack(">h", 1) + b"t" + struct.pack(
        ">i", 3
    )
    assert decode_key(key) == OffsetKey("g", "t", 3)
    assert decode_key(encode_group_key(GroupKey("g"))) == GroupKey("g")


@given(text, text, st.integers(0, 2**31 - 1), int64, int32, text, int64)
def test_offset_round_trip(
    group: str, topic: str, partition: int, offset: int, epoch: int, metadata: str, timestamp: int
) -> None:
    assert decode_key(encode_offset_key(OffsetKey(group, topic, partition))) == OffsetKey(
        group, topic, partition
    )
    value = OffsetValue(offset, epoch, metadata, timestamp)
    assert decode_offset_value(encode_offset_value(value)) == value


members = st.builds(
    MemberValue,
    text,
    st.none() | text,
    text,
    text,
    st.integers(0, 2**31 - 1),
    st.integers(0, 2**31 - 1),
    st.binary(max_size=50),
    st.binary(max_size=50),
)


@given(text, int32, st.none() | text, st.none() | text, int64, st.lists(members, max_size=4))
def test_group_round_trip(
    protocol_type: str,
    generation: int,
    protocol: str | None,
    leader: str | None,
    timestamp: int,
    member_list: list[MemberValue],
) -> None:
    value = GroupValue(protocol_type, generation, protocol, leader, timestamp, tuple(member_list))
    assert decode_group_value(encode_group_value(value)) == value


@given(st.binary(max_size=80))
def test_garbage_is_a_format_error_not_a_crash(data: bytes) -> None:
    for decode in (decode_key, decode_offset_value, decode_group_value):
        with contextlib.suppress(RecordFormatError):
            decode(data)


def test_unknown_versions_are_rejected() -> None:
    with pytest.raises(RecordFormatError):
        decode_key(struct.pack(">h", 9))
    with pytest.raises(RecordFormatError):
        decode_offset_value(struct.pack(">h", 7))
