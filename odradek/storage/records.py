"""Full record codec for magic v2 batches: encode and decode records, headers, codecs.

How this works and why: the broker's produce and fetch paths never look inside a
batch (``batch.py`` reads only the 61-byte header), but tools, log compaction,
transaction markers and the Python client must see individual records. This module
is that second, slower path, kept separate so nothing on the hot path imports it.

Encoding writes each record into a reused scratch ``bytearray`` with a small zigzag
varint writer, prefixes it with its length, compresses the whole records section if
asked, then packs the header and the CRC32C of ``attributes..end``. Decoding checks
the header (and CRC) with ``batch.py``, decompresses the records section once, and
walks it with kio's native varint readers. Every bound is checked against the record
being read, so malformed bytes (truncated varints, lengths past the end, a record
count that does not match, invalid UTF-8 header keys, a bad compressed stream) raise
``CorruptRecordError`` naming the batch's base offset, never a stray IndexError.

Record layout (Kafka "Record"; varints are zigzag like protobuf sint32/sint64)::

    length          varint   bytes after this field
    attributes      int8     unused, 0
    timestampDelta  varlong  timestamp - baseTimestamp
    offsetDelta     varint   offset - baseOffset
    keyLength       varint   -1 = null key
    key             bytes
    valueLength     varint   -1 = null value
    value           bytes
    headersCount    varint
    headers         [keyLength varint, key utf-8, valueLength varint (-1 = null), value]

For LogAppendTime batches every record's timestamp is the batch's maxTimestamp.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final, TypeAlias

from crc32c import crc32c
from kio.serial.errors import SerialError
from kio.serial.readers import read_signed_varint, read_signed_varlong

from odradek.storage.batch import (
    COMPRESSION_NAMES,
    CONTROL_MASK,
    CREATE_TIME,
    HEADER_SIZE,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_COMPRESSION,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    check_batch,
    iter_batches,
    parse_header,
)
from odradek.storage.compression import compress, decompress
from odradek.storage.errors import CorruptRecordError

Buf: TypeAlias = bytes | bytearray | memoryview

INT32_MAX: Final = 2**31 - 1
INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1

# Control record types (the int16 after the version in a control record's key).
ABORT_MARKER: Final = 0
COMMIT_MARKER: Final = 1

# Encoding side of the header layout documented in batch.py: the fields before the
# CRC, then the CRC-covered fields attributes..recordCount.
_PREFIX = struct.Struct(">qiibI")  # baseOffset, batchLength, leaderEpoch, magic, crc
_CRC_COVERED = struct.Struct(">hiqqqhii")
_CONTROL_KEY = struct.Struct(">hh")  # version, type
_END_TXN_VALUE = struct.Struct(">hi")  # version, coordinator epoch


@dataclass(frozen=True, slots=True)
class Header:
    key: str
    value: bytes | None


@dataclass(frozen=True, slots=True)
class Record:
    offset: int  # absolute offset (base_offset + offset delta)
    timestamp: int  # ms; for LOG_APPEND_TIME batches, the batch's max_timestamp
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


@dataclass(frozen=True, slots=True)
class DecodedBatch:
    header: BatchHeader
    records: list[Record]


# -- encoding -------------------------------------------------------------------


def _put_varint(out: bytearray, value: int) -> None:
    """Append ``value`` zigzag-encoded as a varint (same bytes for varint and varlong)."""
    zigzag = value << 1 if value >= 0 else ((-value) << 1) - 1
    while zigzag >= 0x80:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)


def _put_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        out.append(1)  # zigzag(-1)
    else:
        _put_varint(out, len(data))
        out += data


def _encode_records(records: Sequence[Record], base_offset: int, base_timestamp: int) -> bytearray:
    out = bytearray()
    body = bytearray()
    previous = base_offset - 1
    for record in records:
        offset = record.offset
        if offset <= previous:
            raise ValueError(
                f"record offsets must be strictly increasing and >= base offset {base_offset}: "
                f"{offset} follows {previous}"
            )
        previous = offset
        offset_delta = offset - base_offset
        if offset_delta > INT32_MAX:
            raise ValueError(f"offset {offset} is too far from base offset {base_offset}")
        timestamp_delta = record.timestamp - base_timestamp
        if not INT64_MIN <= timestamp_delta <= INT64_MAX:
            raise ValueError(
                f"timestamp {record.timestamp} is too far from base timestamp {base_timestamp}"
            )
        body.clear()
        body.append(0)  # attributes
        _put_varint(body, timestamp_delta)
        _put_varint(body, offset_delta)
        _put_bytes(body, record.key)
        _put_bytes(body, record.value)
        _put_varint(body, len(record.headers))
        for header in record.headers:
            _put_bytes(body, header.key.encode())
            _put_bytes(body, header.value)
        _put_varint(out, len(body))
        out += body
    return out


def encode_batch(
    records: Sequence[Record],
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
    compression: int = NO_COMPRESSION,
    timestamp_type: int = CREATE_TIME,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    max_timestamp: int | None = None,
) -> bytes:
    """Encode ``records`` as one v2 batch; offsets are absolute and may have gaps.

    ``max_timestamp`` defaults to the largest record timestamp; pass the append time
    for LOG_APPEND_TIME batches. Raises ValueError for an empty or badly ordered
    ``records`` list, an unknown codec or timestamp type, or out-of-range fields.
    """
    if not records:
        raise ValueError("a record batch needs at least one record")
    if compression not in COMPRESSION_NAMES:
        raise ValueError(f"unknown compression codec {compression}")
    if timestamp_type not in (CREATE_TIME, LOG_APPEND_TIME):
        raise ValueError(f"unknown timestamp type {timestamp_type}")
    base_timestamp = records[0].timestamp
    if max_timestamp is None:
        max_timestamp = max(record.timestamp for record in records)
    section = _encode_records(records, base_offset, base_timestamp)
    payload = compress(compression, section) if compression != NO_COMPRESSION else section

    attributes = compression
    if timestamp_type == LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_MASK
    if is_control:
        attributes |= CONTROL_MASK
    try:
        covered = _CRC_COVERED.pack(
            attributes,
            records[-1].offset - base_offset,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            len(records),
        )
        crc = crc32c(payload, crc32c(covered))
        batch_length = HEADER_SIZE - LOG_OVERHEAD + len(payload)
        prefix = _PREFIX.pack(base_offset, batch_length, partition_leader_epoch, MAGIC_V2, crc)
    except struct.error as exc:
        raise ValueError(f"batch field out of range: {exc}") from exc
    return b"".join((prefix, covered, payload))


HeaderLike: TypeAlias = Header | tuple[str, bytes | None]
RecordLike: TypeAlias = (
    bytes
    | tuple[bytes | None, bytes | None]
    | tuple[bytes | None, bytes | None, Iterable[HeaderLike]]
    | None
)


def new_records(
    items: Iterable[RecordLike], *, base_offset: int = 0, timestamp: int | None = None
) -> list[Record]:
    """Convenience: records with consecutive offsets from ``base_offset``.

    Each item is a value, a ``(key, value)`` pair or a ``(key, value, headers)``
    triple whose headers are ``Header`` objects or ``(key, value)`` pairs.
    ``timestamp`` defaults to the current wall-clock time in milliseconds.
    """
    if timestamp is None:
        timestamp = time.time_ns() // 1_000_000
    records = []
    for offset, item in enumerate(items, base_offset):
        if not isinstance(item, tuple):
            records.append(Record(offset, timestamp, None, item))
        elif len(item) == 2:
            records.append(Record(offset, timestamp, item[0], item[1]))
        else:
            headers = tuple(h if isinstance(h, Header) else Header(*h) for h in item[2])
            records.append(Record(offset, timestamp, item[0], item[1], headers))
    return records


# -- decoding -------------------------------------------------------------------


def decode_batch(buf: Buf, position: int = 0, *, verify_crc: bool = True) -> DecodedBatch:
    """Decode the batch at ``position`` (header, CRC unless told not to, and records)."""
    header = check_batch(buf, position) if verify_crc else parse_header(buf, position)
    return DecodedBatch(header, list(iter_records(buf, header)))


def decode_batches(buf: Buf, *, verify_crc: bool = True) -> Iterator[DecodedBatch]:
    """Decode every batch in ``buf``; the batches must fill it exactly."""
    for header in iter_batches(buf, verify_crc):
        yield DecodedBatch(header, list(iter_records(buf, header)))


def _corrupt(header: BatchHeader, detail: str) -> CorruptRecordError:
    return CorruptRecordError(
        f"batch at base offset {header.base_offset} (position {header.position}): {detail}"
    )


def iter_records(buf: Buf, header: BatchHeader) -> Iterator[Record]:
    """Yield the records of a batch whose header was already parsed from ``buf``.

    Checks the records, not the CRC (``check_batch`` does that). Raises
    CorruptRecordError (lazily, while iterating) on malformed content.
    """
    start = header.position + HEADER_SIZE
    stop = header.position + header.size
    codec = header.compression
    count = header.record_count
    if count < 0:
        raise _corrupt(header, f"negative record count {count}")
    if codec != NO_COMPRESSION:
        try:
            data = decompress(codec, memoryview(buf)[start:stop])
        except CorruptRecordError as exc:
            raise _corrupt(header, str(exc)) from exc
        position, end = 0, len(data)
    elif isinstance(buf, bytes):
        data, position, end = buf, start, stop
    else:
        # kio's native readers want a read-only buffer; copy once.
        data = bytes(memoryview(buf)[start:stop])
        position, end = 0, len(data)

    base_offset = header.base_offset
    base_timestamp = header.base_timestamp
    log_append_time = header.timestamp_type == LOG_APPEND_TIME
    max_timestamp = header.max_timestamp
    read_varint = read_signed_varint
    read_varlong = read_signed_varlong
    index = 0
    try:
        for index in range(count):
            if position >= end:
                raise _corrupt(header, f"record count is {count} but only {index} records fit")
            length, size = read_varint(data, position)
            position += size
            record_end = position + length
            if length < 1 or record_end > end:
                raise _corrupt(header, f"record {index} has bad length {length}")
            position += 1  # attributes (unused)
            timestamp_delta, size = read_varlong(data, position)
            position += size
            offset_delta, size = read_varint(data, position)
            position += size

            key_length, size = read_varint(data, position)
            position += size
            if key_length == -1:
                key = None
            elif 0 <= key_length <= record_end - position:
                key = data[position : position + key_length]
                position += key_length
            else:
                raise _corrupt(header, f"record {index} has bad key length {key_length}")

            value_length, size = read_varint(data, position)
            position += size
            if value_length == -1:
                value = None
            elif 0 <= value_length <= record_end - position:
                value = data[position : position + value_length]
                position += value_length
            else:
                raise _corrupt(header, f"record {index} has bad value length {value_length}")

            header_count, size = read_varint(data, position)
            position += size
            headers: tuple[Header, ...] = ()
            if header_count:
                # Each header takes at least two bytes (two one-byte lengths).
                if not 0 < header_count <= (record_end - position) // 2:
                    raise _corrupt(header, f"record {index} has bad header count {header_count}")
                headers = tuple(
                    _read_headers(data, position, record_end, header_count, header, index)
                )
                position = record_end
            if position != record_end:
                raise _corrupt(
                    header,
                    f"record {index} declares {length} bytes but its fields "
                    f"end {position - record_end:+d} bytes from there",
                )

            yield Record(
                base_offset + offset_delta,
                max_timestamp if log_append_time else base_timestamp + timestamp_delta,
                key,
                value,
                headers,
            )
        if position != end:
            raise _corrupt(
                header, f"{end - position} bytes left after the declared {count} records"
            )
    except CorruptRecordError:
        raise
    except (SerialError, ValueError, IndexError, OverflowError) as exc:
        raise _corrupt(header, f"record {index} is malformed: {exc}") from exc


def _read_headers(
    data: bytes, position: int, record_end: int, count: int, batch: BatchHeader, index: int
) -> Iterator[Header]:
    """Yield ``count`` headers starting at ``position``; they must end at ``record_end``."""
    read_varint = read_signed_varint
    for _ in range(count):
        key_length, size = read_varint(data, position)
        position += size
        if not 0 <= key_length <= record_end - position:
            raise _corrupt(batch, f"record {index} has a header with bad key length {key_length}")
        try:
            key = str(data[position : position + key_length], "utf-8")
        except UnicodeDecodeError as exc:
            raise _corrupt(batch, f"record {index} has a header key that is not UTF-8") from exc
        position += key_length
        value_length, size = read_varint(data, position)
        position += size
        if value_length == -1:
            value = None
        elif 0 <= value_length <= record_end - position:
            value = data[position : position + value_length]
            position += value_length
        else:
            raise _corrupt(
                batch, f"record {index} has a header with bad value length {value_length}"
            )
        yield Header(key, value)
    if position != record_end:
        raise _corrupt(
            batch,
            f"record {index}'s headers end {position - record_end:+d} bytes from its length",
        )


# -- control records ------------------------------------------------------------


def decode_control_record(record: Record) -> tuple[int, int]:
    """(version, type) from a control record's key; type 0 = ABORT, 1 = COMMIT."""
    key = record.key
    if key is None or len(key) < _CONTROL_KEY.size:
        raise CorruptRecordError(f"control record at offset {record.offset} has a short key")
    version, control_type = _CONTROL_KEY.unpack_from(key)
    if version < 0:
        raise CorruptRecordError(
            f"control record at offset {record.offset} has negative version {version}"
        )
    return version, control_type


def encode_end_txn_marker(
    commit: bool, coordinator_epoch: int, *, offset: int = 0, timestamp: int = NO_TIMESTAMP
) -> Record:
    """The single record of a COMMIT/ABORT marker batch (encode it with is_control=True)."""
    return Record(
        offset,
        timestamp,
        _CONTROL_KEY.pack(0, COMMIT_MARKER if commit else ABORT_MARKER),
        _END_TXN_VALUE.pack(0, coordinator_epoch),
    )


def decode_end_txn_marker(record: Record) -> tuple[bool, int]:
    """(commit, coordinator epoch) of an end-transaction marker record."""
    _, control_type = decode_control_record(record)
    if control_type not in (ABORT_MARKER, COMMIT_MARKER):
        raise CorruptRecordError(
            f"control record at offset {record.offset} has type {control_type}, not a marker"
        )
    value = record.value
    if value is None or len(value) < _END_TXN_VALUE.size:
        raise CorruptRecordError(f"end-txn marker at offset {record.offset} has a short value")
    _, coordinator_epoch = _END_TXN_VALUE.unpack_from(value)
    return control_type == COMMIT_MARKER, coordinator_epoch
