"""Records of ``__consumer_offsets``: Kafka's key and value schemas, hand-encoded.

How this works and why: committed offsets and group metadata are records in the
compacted ``__consumer_offsets`` topic, keyed so that compaction keeps only the
latest value per (group, topic, partition) and per group. Using Kafka's own schemas
means Kafka's tools (and ``odradek dump-log --print-data-log``) can decode them.

Keys (big-endian, strings as int16 length + UTF-8):
- offset commit: ``version int16 (0|1), group, topic, partition int32``
- group metadata: ``version int16 (2), group``

Values (a null value is a tombstone: the offset or group was deleted):
- offset commit v3: ``version int16, offset int64, leader_epoch int32,
  metadata string, commit_timestamp int64`` (v1 also carried an expire timestamp)
- group metadata v3: ``version int16, protocol_type string, generation int32,
  protocol nullable string, leader nullable string, current_state_timestamp int64,
  members [member_id, group_instance_id nullable, client_id, client_host,
  rebalance_timeout int32, session_timeout int32, subscription bytes, assignment bytes]``
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

OFFSET_KEY_VERSION: Final = 1
GROUP_KEY_VERSION: Final = 2
OFFSET_VALUE_VERSION: Final = 3
GROUP_VALUE_VERSION: Final = 3

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class RecordFormatError(ValueError):
    """A key or value that does not follow the schema."""


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group: str


@dataclass(frozen=True, slots=True)
class OffsetValue:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int


@dataclass(frozen=True, slots=True)
class MemberValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    state_timestamp: int
    members: tuple[MemberValue, ...]


# -- writing ---------------------------------------------------------------------------
def _string(text: str | None) -> bytes:
    if text is None:
        return _I16.pack(-1)
    data = text.encode()
    return _I16.pack(len(data)) + data


def _bytes(data: bytes) -> bytes:
    return _I32.pack(len(data)) + data


def encode_offset_key(key: OffsetKey) -> bytes:
    return (
        _I16.pack(OFFSET_KEY_VERSION)
        + _string(key.group)
        + _string(key.topic)
        + _I32.pack(key.partition)
    )


def encode_group_key(key: GroupKey) -> bytes:
    return _I16.pack(GROUP_KEY_VERSION) + _string(key.group)


def encode_offset_value(value: OffsetValue) -> bytes:
    return (
        _I16.pack(OFFSET_VALUE_VERSION)
        + _I64.pack(value.offset)
        + _I32.pack(value.leader_epoch)
        + _string(value.metadata)
        + _I64.pack(value.commit_timestamp)
    )


def encode_group_value(value: GroupValue) -> bytes:
    out = bytearray(_I16.pack(GROUP_VALUE_VERSION))
    out += _string(value.protocol_type) + _I32.pack(value.generation)
    out += _string(value.protocol) + _string(value.leader) + _I64.pack(value.state_timestamp)
    out += _I32.pack(len(value.members))
    for m in value.members:
        out += _string(m.member_id) + _string(m.group_instance_id)
        out += _string(m.client_id) + _string(m.client_host)
        out += _I32.pack(m.rebalance_timeout_ms) + _I32.pack(m.session_timeout_ms)
        out += _bytes(m.subscription) + _bytes(m.assignment)
    return bytes(out)


# -- reading ---------------------------------------------------------------------------
class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.position = 0

    def _take(self, fmt: struct.Struct) -> int:
        if self.position + fmt.size > len(self.data):
            raise RecordFormatError("record ends early")
        (value,) = fmt.unpack_from(self.data, self.position)
        self.position += fmt.size
        return int(value)

    def i16(self) -> int:
        return self._take(_I16)

    def i32(self) -> int:
        return self._take(_I32)

    def i64(self) -> int:
        return self._take(_I64)

    def string(self) -> str | None:
        length = self.i16()
        if length < 0:
            return None
        end = self.position + length
        if end > len(self.data):
            raise RecordFormatError("string runs past the record")
        try:
            text = self.data[self.position : end].decode()
        except UnicodeDecodeError:
            raise RecordFormatError("string is not UTF-8") from None
        self.position = end
        return text

    def required_string(self) -> str:
        text = self.string()
        if text is None:
            raise RecordFormatError("null where a string is required")
        return text

    def bytes_(self) -> bytes:
        length = self.i32()
        if length < 0:
            return b""
        end = self.position + length
        if end > len(self.data):
            raise RecordFormatError("bytes run past the record")
        data = self.data[self.position : end]
        self.position = end
        return bytes(data)


def decode_key(data: bytes) -> OffsetKey | GroupKey:
    reader = _Reader(data)
    version = reader.i16()
    if version in (0, 1):
        return OffsetKey(reader.required_string(), reader.required_string(), reader.i32())
    if version == GROUP_KEY_VERSION:
        return GroupKey(reader.required_string())
    raise RecordFormatError(f"unknown key version {version}")


def decode_offset_value(data: bytes) -> OffsetValue:
    reader = _Reader(data)
    version = reader.i16()
    if version == 0:
        return OffsetValue(reader.i64(), -1, reader.string() or "", reader.i64())
    if version == 1:
        offset, metadata, timestamp = reader.i64(), reader.string() or "", reader.i64()
        reader.i64()  # expire timestamp, no longer used
        return OffsetValue(offset, -1, metadata, timestamp)
    if version in (2, 3):
        offset = reader.i64()
        epoch = reader.i32() if version == 3 else -1
        return OffsetValue(offset, epoch, reader.string() or "", reader.i64())
    raise RecordFormatError(f"unknown offset value version {version}")


def decode_group_value(data: bytes) -> GroupValue:
    reader = _Reader(data)
    version = reader.i16()
    if not 0 <= version <= GROUP_VALUE_VERSION:
        raise RecordFormatError(f"unknown group value version {version}")
    protocol_type = reader.required_string()
    generation = reader.i32()
    protocol, leader = reader.string(), reader.string()
    state_timestamp = reader.i64() if version >= 2 else -1
    members = []
    for _ in range(reader.i32()):
        member_id = reader.required_string()
        instance = reader.string() if version >= 3 else None
        client_id, client_host = reader.required_string(), reader.required_string()
        rebalance = reader.i32() if version >= 1 else -1
        session = reader.i32()
        subscription, assignment = reader.bytes_(), reader.bytes_()
        members.append(
            MemberValue(
                member_id,
                instance,
                client_id,
                client_host,
                rebalance if rebalance >= 0 else session,
                session,
                subscription,
                assignment,
            )
        )
    return GroupValue(protocol_type, generation, protocol, leader, state_timestamp, tuple(members))


def java_string_hash(text: str) -> int:
    """Java's String.hashCode (UTF-16 code units, 32-bit wrap-around), as a signed int."""
    units = text.encode("utf-16-be")
    value = 0
    for (unit,) in struct.iter_unpack(">H", units):
        value = (31 * value + unit) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def partition_for_group(group_id: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode) % offsets.topic.num.partitions``.

    Kafka's Utils.abs is ``n & 0x7fffffff`` (so the hash of Integer.MIN_VALUE maps to 0,
    unlike Math.abs).
    """
    return (java_string_hash(group_id) & 0x7FFFFFFF) % partitions
