"""Records of ``__transaction_state``: Kafka's TransactionLogKey/Value, hand-encoded.

How this works and why: the transaction coordinator keeps one record per
transactional id in the compacted ``__transaction_state`` topic, the latest value of
each id being its state, so compaction keeps exactly what a new coordinator needs to
replay. Writing Kafka's own layout lets Kafka's tools (``kafka-dump-log.sh
--transaction-log-decoder``) read odradek's log and odradek read Kafka's.

Key (big-endian): ``version int16 (0), transactional_id string (int16 length + UTF-8)``.

Value (a null value is a tombstone: the id expired and was removed):

- v0: ``version int16 (0), producer_id int64, producer_epoch int16,
  transaction_timeout_ms int32, transaction_status int8,
  transaction_partitions nullable array(int32 count, -1 null) of
  [topic string, partition_ids array of int32], last_update_timestamp_ms int64,
  start_timestamp_ms int64``.
- v1, the first flexible version (what Kafka writes once ``transaction.version`` >= 1,
  the default of new clusters): the same fields with compact encodings (unsigned
  varint lengths + 1, 0 for null) and an empty tag section after each partitions
  entry, then the record's tagged fields: 0 PreviousProducerId int64 (default -1),
  1 NextProducerId int64 (default -1), 2 ClientTransactionVersion int16 (default 0).
  A tagged field equal to its default is not written. Unknown tags are skipped.

The status byte is Kafka's state id: Empty 0, Ongoing 1, PrepareCommit 2,
PrepareAbort 3, CompleteCommit 4, CompleteAbort 5. Dead (6) and PrepareEpochFence (7)
are in-memory states Kafka never writes, so a record holding them is malformed. The
partitions are null when the state is Empty. odradek writes v1 and reads both.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from odradek.protocol.bounds import LengthError, read_uvarint, uvarint_bytes

KEY_VERSION: Final = 0
VALUE_VERSION: Final = 1  # the flexible version current Kafka writes
WRITTEN_STATUSES: Final = frozenset(range(6))  # Empty .. CompleteAbort

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

TAG_PREVIOUS_PRODUCER_ID: Final = 0
TAG_NEXT_PRODUCER_ID: Final = 1
TAG_CLIENT_TRANSACTION_VERSION: Final = 2
# A sane bound on any count in a record (a partitions list, a tag section): a
# corrupted length must raise RecordFormatError, not allocate gigabytes.
MAX_COUNT: Final = 1 << 20


class RecordFormatError(ValueError):
    """A key or value that does not follow the schema."""


@dataclass(frozen=True, slots=True)
class TransactionValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    status: int
    # (topic, partition ids), or None (written for Empty); kept in the order written.
    partitions: tuple[tuple[str, tuple[int, ...]], ...] | None
    last_update_ms: int
    start_ms: int
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_transaction_version: int = 0


# -- writing ---------------------------------------------------------------------------
def _string(text: str) -> bytes:
    data = text.encode()
    return _I16.pack(len(data)) + data


def _compact_string(text: str) -> bytes:
    data = text.encode()
    return uvarint_bytes(len(data) + 1) + data


def encode_key(transactional_id: str) -> bytes:
    return _I16.pack(KEY_VERSION) + _string(transactional_id)


def encode_value(value: TransactionValue, version: int = VALUE_VERSION) -> bytes:
    """The value in ``version`` 0 or 1 (v0 drops the tagged fields)."""
    assert version in (0, 1), version
    assert value.status in WRITTEN_STATUSES, value.status
    out = bytearray(_I16.pack(version))
    out += _I64.pack(value.producer_id) + _I16.pack(value.producer_epoch)
    out += _I32.pack(value.timeout_ms) + _I8.pack(value.status)
    partitions = value.partitions
    if version == 0:
        if partitions is None:
            out += _I32.pack(-1)
        else:
            out += _I32.pack(len(partitions))
            for topic, ids in partitions:
                out += _string(topic) + _I32.pack(len(ids))
                out += b"".join(_I32.pack(i) for i in ids)
    else:
        if partitions is None:
            out += uvarint_bytes(0)
        else:
            out += uvarint_bytes(len(partitions) + 1)
            for topic, ids in partitions:
                out += _compact_string(topic) + uvarint_bytes(len(ids) + 1)
                out += b"".join(_I32.pack(i) for i in ids)
                out += uvarint_bytes(0)  # the entry's (empty) tag section
    out += _I64.pack(value.last_update_ms) + _I64.pack(value.start_ms)
    if version == 1:
        tags: list[tuple[int, bytes]] = []
        if value.previous_producer_id != -1:
            tags.append((TAG_PREVIOUS_PRODUCER_ID, _I64.pack(value.previous_producer_id)))
        if value.next_producer_id != -1:
            tags.append((TAG_NEXT_PRODUCER_ID, _I64.pack(value.next_producer_id)))
        if value.client_transaction_version != 0:
            tags.append(
                (TAG_CLIENT_TRANSACTION_VERSION, _I16.pack(value.client_transaction_version))
            )
        out += uvarint_bytes(len(tags))
        for tag, data in tags:
            out += uvarint_bytes(tag) + uvarint_bytes(len(data)) + data
    return bytes(out)


# -- reading ---------------------------------------------------------------------------
class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = bytes(data)
        self.position = 0

    def _take(self, fmt: struct.Struct) -> int:
        if self.position + fmt.size > len(self.data):
            raise RecordFormatError("record ends early")
        (value,) = fmt.unpack_from(self.data, self.position)
        self.position += fmt.size
        return int(value)

    def i8(self) -> int:
        return self._take(_I8)

    def i16(self) -> int:
        return self._take(_I16)

    def i32(self) -> int:
        return self._take(_I32)

    def i64(self) -> int:
        return self._take(_I64)

    def uvarint(self) -> int:
        try:
            value, self.position = read_uvarint(
                self.data, self.position, len(self.data), "the record"
            )
        except LengthError as error:
            raise RecordFormatError(str(error)) from None
        return value

    def raw(self, length: int) -> bytes:
        if length < 0 or self.position + length > len(self.data):
            raise RecordFormatError("field runs past the record")
        data = self.data[self.position : self.position + length]
        self.position += length
        return data

    def text(self, length: int) -> str:
        try:
            return self.raw(length).decode()
        except UnicodeDecodeError:
            raise RecordFormatError("string is not UTF-8") from None

    def string(self) -> str:
        length = self.i16()
        if length < 0:
            raise RecordFormatError("null where a string is required")
        return self.text(length)

    def compact_string(self) -> str:
        length = self.uvarint() - 1
        if length < 0:
            raise RecordFormatError("null where a string is required")
        return self.text(length)

    def count(self, value: int) -> int:
        if value > MAX_COUNT or value > len(self.data):
            raise RecordFormatError(f"count {value} is past any sane bound")
        return value

    def skip_tags(self) -> dict[int, bytes]:
        tags = {}
        for _ in range(self.count(self.uvarint())):
            tag = self.uvarint()
            tags[tag] = self.raw(self.uvarint())
        return tags

    def done(self) -> None:
        if self.position != len(self.data):
            raise RecordFormatError(f"{len(self.data) - self.position} bytes after the record")


def decode_key(data: bytes) -> str:
    """The transactional id of a key."""
    reader = _Reader(data)
    version = reader.i16()
    if version != KEY_VERSION:
        raise RecordFormatError(f"unknown transaction log key version {version}")
    transactional_id = reader.string()
    reader.done()
    return transactional_id


def decode_value(data: bytes) -> TransactionValue:
    reader = _Reader(data)
    version = reader.i16()
    if version not in (0, 1):
        raise RecordFormatError(f"unknown transaction log value version {version}")
    producer_id, epoch = reader.i64(), reader.i16()
    timeout_ms, status = reader.i32(), reader.i8()
    if status not in WRITTEN_STATUSES:
        raise RecordFormatError(f"transaction status {status} is never written")
    partitions: list[tuple[str, tuple[int, ...]]] | None = None
    if version == 0:
        count = reader.i32()
        if count >= 0:
            partitions = []
            for _ in range(reader.count(count)):
                topic = reader.string()
                length = reader.count(reader.i32())
                partitions.append((topic, tuple(reader.i32() for _ in range(length))))
    else:
        count = reader.uvarint() - 1
        if count >= 0:
            partitions = []
            for _ in range(reader.count(count)):
                topic = reader.compact_string()
                length = reader.count(reader.uvarint() - 1)
                ids = tuple(reader.i32() for _ in range(max(0, length)))
                reader.skip_tags()
                partitions.append((topic, ids))
    last_update_ms, start_ms = reader.i64(), reader.i64()
    tags = reader.skip_tags() if version == 1 else {}
    reader.done()
    return TransactionValue(
        producer_id,
        epoch,
        timeout_ms,
        status,
        None if partitions is None else tuple(partitions),
        last_update_ms,
        start_ms,
        previous_producer_id=_tag(tags, TAG_PREVIOUS_PRODUCER_ID, _I64, -1),
        next_producer_id=_tag(tags, TAG_NEXT_PRODUCER_ID, _I64, -1),
        client_transaction_version=_tag(tags, TAG_CLIENT_TRANSACTION_VERSION, _I16, 0),
    )


def _tag(tags: dict[int, bytes], tag: int, fmt: struct.Struct, default: int) -> int:
    data = tags.get(tag)
    if data is None:
        return default
    if len(data) != fmt.size:
        raise RecordFormatError(f"tagged field {tag} has {len(data)} bytes, not {fmt.size}")
    return int(fmt.unpack(data)[0])
