"""Full record codec for magic v2 batches: encode and decode records, headers, codecs.

How this works and why: the broker's produce and fetch paths never look inside a
batch (``batch.py`` reads only the 61-byte header), but tools, log compaction,
transaction markers and the Python client must see individual records. This module
is that second, slower path, kept separate so nothing on the hot path imports it.

Encoding appends each record to the records section (``append_record``: varints
below ``SMALL_VARINT_LIMIT`` come from a table, the record's length is computed
before it is written), then ``frame_batch`` compresses the whole section if asked and
packs the header and the CRC32C of ``attributes..end``. Decoding checks
the header (and CRC) with ``batch.py``, decompresses the records section once, and
walks it in one pass into parallel lists (``decode_record_columns``: one-byte varints
inline, longer ones with kio's native readers). Every bound is checked against the record
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
from typing import Final, NamedTuple, TypeAlias

from crc32c import crc32c
from kio.serial.errors import SerialError
from kio.serial.readers import read_signed_varint, read_signed_varlong

from odradek.records.batch import (
    COMPRESSION_NAMES,
    CONTROL_MASK,
    CREATE_TIME,
    DELETE_HORIZON_MASK,
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
from odradek.records.compression import compress, decompress
from odradek.records.errors import CorruptRecordError

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


def encode_varint(value: int) -> bytes:
    """``value`` as a zigzag varint (the same bytes serve varint and varlong fields)."""
    out = bytearray()
    _put_varint(out, value)
    return bytes(out)


# Encoded varints of -1 .. SMALL_VARINT_LIMIT - 1, at index value + 1: record lengths,
# key/value lengths and deltas are nearly always in this range (two bytes at most),
# so a record is encoded with table look-ups instead of a loop per varint.
SMALL_VARINT_LIMIT: Final = 8192
_SMALL_VARINTS: Final = tuple(encode_varint(value) for value in range(-1, SMALL_VARINT_LIMIT))
_NULL: Final = b"\x01"  # zigzag(-1): a null key or value
_NO_HEADERS: Final = b"\x00"
_ATTRIBUTES: Final = b"\x00"


def append_record(
    out: bytearray,
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]] = (),
) -> int:
    """Append one record (the layout above) to a records section; returns its size.

    The producer builds a batch's records section with this, one record at a time, so
    a batch is bytes from the start; ``frame_batch`` adds the header when it is sent.
    """
    small = _SMALL_VARINTS
    limit = SMALL_VARINT_LIMIT
    timestamp_bytes = (
        small[timestamp_delta + 1]
        if -1 <= timestamp_delta < limit
        else encode_varint(timestamp_delta)
    )
    offset_bytes = small[offset_delta + 1] if offset_delta < limit else encode_varint(offset_delta)
    if key is None:
        key_length, key = _NULL, b""
    else:
        size = len(key)
        key_length = small[size + 1] if size < limit else encode_varint(size)
    if value is None:
        value_length, value = _NULL, b""
    else:
        size = len(value)
        value_length = small[size + 1] if size < limit else encode_varint(size)
    header_bytes = _encode_headers(headers) if headers else _NO_HEADERS
    size = (
        1
        + len(timestamp_bytes)
        + len(offset_bytes)
        + len(key_length)
        + len(key)
        + len(value_length)
        + len(value)
        + len(header_bytes)
    )
    length = small[size + 1] if size < limit else encode_varint(size)
    out += b"".join(
        (
            length,
            _ATTRIBUTES,
            timestamp_bytes,
            offset_bytes,
            key_length,
            key,
            value_length,
            value,
            header_bytes,
        )
    )
    return len(length) + size


def _encode_headers(headers: Sequence[tuple[str, bytes | None]]) -> bytes:
    out = bytearray()
    _put_varint(out, len(headers))
    for name, data in headers:
        encoded = name.encode()
        _put_varint(out, len(encoded))
        out += encoded
        if data is None:
            out += _NULL
        else:
            _put_varint(out, len(data))
            out += data
    return bytes(out)


def _encode_records(records: Sequence[Record], base_offset: int, base_timestamp: int) -> bytearray:
    out = bytearray()
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
        append_record(
            out,
            offset_delta,
            timestamp_delta,
            record.key,
            record.value,
            [(header.key, header.value) for header in record.headers],
        )
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
    last_offset_delta: int | None = None,
    base_timestamp: int | None = None,
    delete_horizon: bool = False,
) -> bytes:
    """Encode ``records`` as one v2 batch; offsets are absolute and may have gaps.

    ``max_timestamp`` defaults to the largest record timestamp; pass the append time
    for LOG_APPEND_TIME batches. Raises ValueError for an empty or badly ordered
    ``records`` list, an unknown codec or timestamp type, or out-of-range fields.
    The log cleaner rewrites batches with fewer records: it keeps the original
    ``last_offset_delta`` (so a producer's sequence range survives; ``records`` may
    then be empty) and, for KIP-534's ``delete_horizon``, sets ``base_timestamp`` to
    the horizon (record timestamps are kept: their deltas are taken from it).
    """
    if not records and last_offset_delta is None:
        raise ValueError("a record batch needs at least one record")
    if base_timestamp is None:
        base_timestamp = records[0].timestamp if records else NO_TIMESTAMP
    if max_timestamp is None:
        max_timestamp = max(record.timestamp for record in records)
    if last_offset_delta is None:
        last_offset_delta = records[-1].offset - base_offset
    return frame_batch(
        _encode_records(records, base_offset, base_timestamp),
        record_count=len(records),
        last_offset_delta=last_offset_delta,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        compression=compression,
        timestamp_type=timestamp_type,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=is_transactional,
        is_control=is_control,
        delete_horizon=delete_horizon,
    )


def frame_batch(
    section: Buf,
    *,
    record_count: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
    compression: int = NO_COMPRESSION,
    timestamp_type: int = CREATE_TIME,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    delete_horizon: bool = False,
) -> bytes:
    """A v2 batch from an uncompressed records ``section`` (``append_record``'s output).

    Compresses the section if asked, then packs the header and its CRC. Raises
    ValueError for an unknown codec or timestamp type, or out-of-range fields.
    """
    if compression not in COMPRESSION_NAMES:
        raise ValueError(f"unknown compression codec {compression}")
    if timestamp_type not in (CREATE_TIME, LOG_APPEND_TIME):
        raise ValueError(f"unknown timestamp type {timestamp_type}")
    payload = compress(compression, section) if compression != NO_COMPRESSION else section

    attributes = compression
    if timestamp_type == LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_MASK
    if is_control:
        attributes |= CONTROL_MASK
    if delete_horizon:
        attributes |= DELETE_HORIZON_MASK
    try:
        covered = _CRC_COVERED.pack(
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            record_count,
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


def decode_batch(
    buf: Buf, position: int = 0, *, verify_crc: bool = True, limit: int | None = None
) -> DecodedBatch:
    """Decode the batch at ``position`` (header, CRC unless told not to, and records).

    ``limit``: most bytes the records may decompress to (ExpansionLimitError past it).
    """
    header = check_batch(buf, position) if verify_crc else parse_header(buf, position)
    return DecodedBatch(header, list(iter_records(buf, header, limit)))


def decode_batches(buf: Buf, *, verify_crc: bool = True) -> Iterator[DecodedBatch]:
    """Decode every batch in ``buf``; the batches must fill it exactly."""
    for header in iter_batches(buf, verify_crc):
        yield DecodedBatch(header, list(iter_records(buf, header)))


def _corrupt(header: BatchHeader, detail: str) -> CorruptRecordError:
    return CorruptRecordError(
        f"batch at base offset {header.base_offset} (position {header.position}): {detail}"
    )


def iter_records(buf: Buf, header: BatchHeader, limit: int | None = None) -> Iterator[Record]:
    """Yield the records of a batch whose header was already parsed from ``buf``.

    Checks the records, not the CRC (``check_batch`` does that). Raises
    CorruptRecordError on malformed content, when iteration starts (the batch is
    decoded in one pass by ``decode_record_columns``).
    """
    columns = decode_record_columns(buf, header, limit)
    for offset, timestamp, key, value, pairs in zip(*columns, strict=True):
        yield Record(
            offset,
            timestamp,
            key,
            value,
            tuple([Header(name, data) for name, data in pairs]) if pairs else (),
        )


class RecordColumns(NamedTuple):
    """The records of one batch as parallel lists (index i of each is record i)."""

    offsets: list[int]
    timestamps: list[int]  # ms; for LOG_APPEND_TIME batches, the batch's max_timestamp
    keys: list[bytes | None]
    values: list[bytes | None]
    headers: list[tuple[tuple[str, bytes | None], ...]]  # (key, value) pairs; () if none


def records_section(
    buf: Buf, header: BatchHeader, limit: int | None = None
) -> tuple[bytes, int, int]:
    """(data, start, end): the uncompressed records section is ``data[start:end]``.

    ``limit``: most bytes a compressed section may decompress to (ExpansionLimitError
    past it)."""
    start = header.position + HEADER_SIZE
    stop = header.position + header.size
    codec = header.compression
    if codec != NO_COMPRESSION:
        try:
            data = decompress(codec, memoryview(buf)[start:stop], limit)
        except CorruptRecordError as exc:
            raise _corrupt(header, str(exc)) from exc
        return data, 0, len(data)
    if isinstance(buf, bytes):
        return buf, start, stop
    # kio's native readers want a read-only buffer; copy once.
    data = bytes(memoryview(buf)[start:stop])
    return data, 0, len(data)


# A one-byte zigzag varint b (b < 0x80) is (b >> 1) ^ -(b & 1): looked up, not computed.
_ZIGZAG: Final = tuple((byte >> 1) ^ -(byte & 1) for byte in range(0x80))


def decode_record_columns(
    buf: Buf,
    header: BatchHeader,
    limit: int | None = None,
    section: tuple[bytes, int, int] | None = None,
) -> RecordColumns:
    """Decode every record of a batch whose header was already parsed from ``buf``.

    One pass, no per-record objects: the consumer builds its own record type from
    the columns, and ``iter_records`` builds ``Record``. This loop is the consumer's
    hot path, so varints of one byte (deltas, small lengths) come from a table, the
    two-byte lengths of records and values up to 8 KiB are decoded inline, longer
    varints by kio's native readers, and headers are looked at only when a record
    has some. Checks the records, not the CRC; raises CorruptRecordError on
    malformed content. ``section``: what ``records_section`` returned for this batch,
    if the caller already has it.
    """
    count = header.record_count
    if count < 0:
        raise _corrupt(header, f"negative record count {count}")
    data, position, end = section or records_section(buf, header, limit)
    base_offset = header.base_offset
    base_timestamp = header.base_timestamp
    offsets: list[int] = []
    timestamps: list[int] = []
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    with_headers: list[tuple[int, tuple[tuple[str, bytes | None], ...]]] = []
    add_offset = offsets.append
    add_timestamp = timestamps.append
    add_key = keys.append
    add_value = values.append
    zigzag = _ZIGZAG
    read_varint = read_signed_varint
    read_varlong = read_signed_varlong
    index = 0
    try:
        for index in range(count):
            if position >= end:
                raise _corrupt(header, f"record count is {count} but only {index} records fit")
            byte = data[position]
            if byte < 0x80:
                length = zigzag[byte]
                position += 1
            elif data[position + 1] < 0x80:
                byte = (byte & 0x7F) | (data[position + 1] << 7)
                length = (byte >> 1) ^ -(byte & 1)
                position += 2
            else:
                length, size = read_varint(data, position)
                position += size
            record_end = position + length
            if length < 1 or record_end > end:
                raise _corrupt(header, f"record {index} has bad length {length}")
            byte = data[position + 1]  # after the (unused) attributes byte
            if byte < 0x80:
                add_timestamp(base_timestamp + zigzag[byte])
                position += 2
            else:
                timestamp_delta, size = read_varlong(data, position + 1)
                add_timestamp(base_timestamp + timestamp_delta)
                position += 1 + size
            byte = data[position]
            if byte < 0x80:
                add_offset(base_offset + zigzag[byte])
                position += 1
            else:
                offset_delta, size = read_varint(data, position)
                add_offset(base_offset + offset_delta)
                position += size

            if data[position] == 1:  # zigzag(-1): null
                add_key(None)
                position += 1
            else:
                key_length, size = read_varint(data, position)
                position += size
                if key_length == -1:
                    add_key(None)
                elif 0 <= key_length <= record_end - position:
                    add_key(data[position : position + key_length])
                    position += key_length
                else:
                    raise _corrupt(header, f"record {index} has bad key length {key_length}")

            byte = data[position]
            if byte < 0x80:
                value_length = zigzag[byte]
                position += 1
            elif data[position + 1] < 0x80:
                byte = (byte & 0x7F) | (data[position + 1] << 7)
                value_length = (byte >> 1) ^ -(byte & 1)
                position += 2
            else:
                value_length, size = read_varint(data, position)
                position += size
            if value_length == -1:
                add_value(None)
            elif 0 <= value_length <= record_end - position:
                position += value_length
                add_value(data[position - value_length : position])
            else:
                raise _corrupt(header, f"record {index} has bad value length {value_length}")

            if data[position] != 0:  # headers (0: none)
                header_count, size = read_varint(data, position)
                position += size
                # Each header takes at least two bytes (two one-byte lengths).
                if 0 < header_count <= (record_end - position) // 2:
                    pairs = _read_headers(data, position, record_end, header_count, header, index)
                    with_headers.append((index, pairs))
                    position = record_end - 1
                elif header_count != 0:
                    raise _corrupt(header, f"record {index} has bad header count {header_count}")
                else:
                    position -= 1
            position += 1
            if position != record_end:
                raise _corrupt(
                    header,
                    f"record {index} declares {length} bytes but its fields "
                    f"end {position - record_end:+d} bytes from there",
                )
        if position != end:
            raise _corrupt(
                header, f"{end - position} bytes left after the declared {count} records"
            )
    except CorruptRecordError:
        raise
    except (SerialError, ValueError, IndexError, OverflowError) as exc:
        raise _corrupt(header, f"record {index} is malformed: {exc}") from exc
    headers: list[tuple[tuple[str, bytes | None], ...]] = [()] * count
    for index, pairs in with_headers:
        headers[index] = pairs
    if header.timestamp_type == LOG_APPEND_TIME:
        timestamps = [header.max_timestamp] * count
    return RecordColumns(offsets, timestamps, keys, values, headers)


def _read_headers(
    data: bytes, position: int, record_end: int, count: int, batch: BatchHeader, index: int
) -> tuple[tuple[str, bytes | None], ...]:
    """``count`` (key, value) headers from ``position``; they must end at ``record_end``."""
    read_varint = read_signed_varint
    pairs: list[tuple[str, bytes | None]] = []
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
        value: bytes | None
        if value_length == -1:
            value = None
        elif 0 <= value_length <= record_end - position:
            value = data[position : position + value_length]
            position += value_length
        else:
            raise _corrupt(
                batch, f"record {index} has a header with bad value length {value_length}"
            )
        pairs.append((key, value))
    if position != record_end:
        raise _corrupt(
            batch,
            f"record {index}'s headers end {position - record_end:+d} bytes from its length",
        )
    return tuple(pairs)


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
