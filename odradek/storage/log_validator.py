"""Validation of client batches before a leader append (Kafka's LogValidator role).

How this works and why: a produce request's batches are checked on their 61-byte
headers only — size against ``max.message.bytes``, record count against the last
offset delta, codec, producer fields, control flag, timestamps against the broker
clock — so records stay opaque bytes on the hot path. Records are opened only to
recompress batches whose codec differs from a topic's ``compression.type``.

Recompression (``recompress``) is the one place the broker decompresses a client's
bytes, so it is where a compression bomb would land. It decompresses each batch
into at most ``expansion_limit`` bytes (see there for the rule), checks that the
records section holds exactly ``recordCount`` records with offset deltas 0..n-1
(``check_record_framing``), compresses that same section with the topic's codec
and refuses a result over ``max.message.bytes`` with MESSAGE_TOO_LARGE, as Kafka's
UnifiedLog does after recompression (RecordTooLargeException). Record bytes are not
re-encoded: a v2 record's encoding does not depend on the codec around it.

A compacted topic (``cleanup.policy`` with ``compact``) refuses records without a key
with INVALID_RECORD, as Kafka does: the cleaner could never tell which value is the
latest. That check has to open the records (decompressing compressed batches, bounded
the same way), so for compacted topics ``conversion`` sends the whole append to a
worker thread and marks what it returns as CheckedRecords, which the Log then trusts.

Pure functions of (bytes, config, clock reading), safe on any thread: the produce
handler runs ``convert_for_append`` on a worker thread when a batch needs
recompression, and the Log calls the header checks on its loop.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Final

from odradek.records import batch as batch_format
from odradek.records.batch import (
    ATTRIBUTES_POSITION,
    COMPRESSION_BY_NAME,
    COMPRESSION_MASK,
    COMPRESSION_NAMES,
    CONTROL_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    NO_COMPRESSION,
    NO_TIMESTAMP,
    SNAPPY,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    check_batch,
)
from odradek.records.compression import ExpansionLimitError, decompress_bounded
from odradek.records.errors import CorruptRecordError, RecordTooLargeError
from odradek.storage.errors import InvalidRecordError, InvalidTimestampError
from odradek.storage.log_config import LogConfig

# How far a batch's records may expand, as a multiple of the room max.message.bytes
# leaves for them (see expansion_limit).
RECOMPRESSION_EXPANSION: Final = 64
# Raw snappy's best case: a 3-byte copy tag stands for at most 64 bytes (21.3x).
SNAPPY_MAX_EXPANSION: Final = 22
# The smallest record: length, attributes, timestamp delta, offset delta, key
# length, value length and header count, one byte each.
MIN_RECORD_SIZE: Final = 7


def target_codec(config: LogConfig) -> int | None:
    """The codec a topic's compression.type imposes, or None for ``producer``."""
    return COMPRESSION_BY_NAME.get(config.compression_type.replace("uncompressed", "none"))


def validate_client_batches(
    view: memoryview,
    config: LogConfig,
    now_ms: int,
    *,
    check_time: bool,
    name: str,
    coordinator: bool = False,
) -> list[BatchHeader]:
    """Header checks only (records stay opaque); raw attribute tests, as this is hot.

    ``check_time`` is false for LogAppendTime topics, whose timestamps the broker sets.
    ``coordinator``: a coordinator's own write, whose batches may carry a producer id
    without a sequence (TxnOffsetCommit's transactional offsets).
    """
    if not len(view):
        raise InvalidRecordError(f"{name}: empty produce data")
    headers = []
    first = check_batch(view, 0)
    batches = (
        (first,)
        if first.batch_length + LOG_OVERHEAD == len(view)
        else batch_format.iter_batches(view)
    )
    for header in batches:
        size = header.batch_length + LOG_OVERHEAD
        attributes = header.attributes
        if size > config.max_message_bytes:
            raise RecordTooLargeError(
                f"batch of {size} bytes exceeds max.message.bytes={config.max_message_bytes}"
            )
        if attributes & CONTROL_MASK:
            raise InvalidRecordError("clients may not write control batches")
        count = header.record_count
        if count <= 0 or header.last_offset_delta != count - 1:
            raise InvalidRecordError(
                f"batch claims {count} records but last offset delta {header.last_offset_delta}"
            )
        if attributes & COMPRESSION_MASK > batch_format.ZSTD:
            raise InvalidRecordError(f"unknown compression codec {attributes & COMPRESSION_MASK}")
        if header.producer_id < 0:
            if attributes & TRANSACTIONAL_MASK:
                raise InvalidRecordError("transactional batch without a producer id")
        elif header.producer_epoch < 0 or (header.base_sequence < 0 and not coordinator):
            raise InvalidRecordError("idempotent batch without sequence or epoch")
        if check_time and not attributes & TIMESTAMP_TYPE_MASK:
            check_timestamps(header, config, now_ms)
        headers.append(header)
    return headers


def check_timestamps(header: BatchHeader, config: LogConfig, now_ms: int) -> None:
    """CreateTime bounds: ``message.timestamp.after.max.ms`` / ``before.max.ms``.

    The header bounds the batch: max timestamp against the future limit, the first
    record's timestamp against the past limit (records are not decoded).
    """
    if header.max_timestamp - now_ms > config.message_timestamp_after_max_ms:
        raise InvalidTimestampError(
            f"timestamp {header.max_timestamp} is more than "
            f"message.timestamp.after.max.ms ahead of the broker clock {now_ms}"
        )
    if (
        header.base_timestamp != NO_TIMESTAMP
        and now_ms - header.base_timestamp > config.message_timestamp_before_max_ms
    ):
        raise InvalidTimestampError(
            f"timestamp {header.base_timestamp} is more than "
            f"message.timestamp.before.max.ms behind the broker clock {now_ms}"
        )


def expansion_limit(config: LogConfig, target: int) -> int:
    """Most bytes a batch's records section may decompress to before recompression.

    The rule: the converted batch must fit ``max.message.bytes`` (Kafka refuses it
    with MESSAGE_TOO_LARGE otherwise), so its records may take ``room`` =
    max.message.bytes - 61 bytes once encoded with the topic's codec ``target``.

    * ``uncompressed``: exactly ``room``; anything longer can never be stored, so
      refusing it early refuses nothing Kafka would accept.
    * ``snappy``: 22 x ``room``; raw snappy cannot do better than 21.3:1 (a 3-byte
      copy tag writes at most 64 bytes), so this too refuses nothing storable.
    * ``lz4``, ``gzip``, ``zstd``: 64 x ``room`` (64 MiB at the default 1 MiB).
      These formats can reach 255:1, 1032:1 and 32768:1 on degenerate input, so
      the exact bound (32 GiB for zstd) would bound nothing; 64:1 is far above what
      record data compresses to in practice and above what clients batch by
      default (librdkafka caps a batch's uncompressed size at ``batch.size``,
      1,000,000 bytes; the Java producer sizes batches to 16 KiB *compressed*
      with a ratio estimate). Operators who raise max.message.bytes raise it too.

    The record count adds a precheck, not a larger bound: n records take at least
    7n bytes, so a batch whose count cannot fit the bound is refused before any
    decompression (in ``recompress``).

    Past the bound the answer is MESSAGE_TOO_LARGE, the code Kafka gives a batch
    that is over max.message.bytes after recompression (RecordTooLargeException):
    for ``uncompressed`` and ``snappy`` it is that very case found early, and for
    the others it says what happened (too large for this broker to convert). It is
    also the one answer that helps an honest client: the Java producer splits a
    batch refused with it and retries the halves, while CORRUPT_MESSAGE is
    retriable (the same bomb again, forever) and INVALID_RECORD just fails.
    """
    room = max(config.max_message_bytes - HEADER_SIZE, 0)
    if target == NO_COMPRESSION:
        return room
    if target == SNAPPY:
        return room * SNAPPY_MAX_EXPANSION
    return room * RECOMPRESSION_EXPANSION


def _too_large(header: BatchHeader, config: LogConfig, target: int, detail: str) -> Exception:
    return RecordTooLargeError(
        f"batch of {header.record_count} records {detail}: recompressed to "
        f"{COMPRESSION_NAMES[target]} it cannot fit max.message.bytes="
        f"{config.max_message_bytes} (records may expand to at most "
        f"{expansion_limit(config, target)} bytes)"
    )


def recompress(
    view: memoryview, headers: list[BatchHeader], codec: int, config: LogConfig
) -> bytes:
    """Re-encode batches whose codec differs from the topic's compression.type.

    Memory stays within ``expansion_limit`` per batch plus the output; raises
    RecordTooLargeError (MESSAGE_TOO_LARGE) past the bound or when a converted batch
    exceeds max.message.bytes, CorruptRecordError for a bad compressed stream,
    InvalidRecordError for records that do not match the header.
    """
    from odradek.records.codec import frame_batch

    limit = expansion_limit(config, codec)
    out = bytearray()
    for header in headers:
        start, end = header.position, header.position + header.size
        if header.compression == codec:
            out += view[start:end]
            continue
        if header.record_count * MIN_RECORD_SIZE > limit:
            raise _too_large(header, config, codec, f"needs at least {MIN_RECORD_SIZE} bytes each")
        try:
            section = decompress_bounded(header.compression, view[start + HEADER_SIZE : end], limit)
        except ExpansionLimitError:
            raise _too_large(header, config, codec, "expands past the bound") from None
        except CorruptRecordError as exc:
            raise CorruptRecordError(f"batch at position {start}: {exc}") from None
        check_record_framing(section, header.record_count)
        converted = frame_batch(
            section,
            record_count=header.record_count,
            last_offset_delta=header.last_offset_delta,
            base_timestamp=header.base_timestamp,
            max_timestamp=header.max_timestamp,
            base_offset=header.base_offset,
            partition_leader_epoch=header.partition_leader_epoch,
            compression=codec,
            timestamp_type=header.timestamp_type,
            producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            base_sequence=header.base_sequence,
            is_transactional=header.is_transactional,
        )
        del section
        if len(converted) > config.max_message_bytes:
            raise RecordTooLargeError(
                f"batch recompressed to {COMPRESSION_NAMES[codec]} is {len(converted)} bytes, "
                f"over max.message.bytes={config.max_message_bytes}"
            )
        out += converted
    return bytes(out)


def conversion(
    records: bytes | memoryview, config: LogConfig, now_ms: int, *, name: str
) -> Callable[[], bytes] | None:
    """The recompression an append would do, as a call for a worker thread.

    None on the common path (compression.type ``producer``, or the batch already in
    the topic's codec): the batch is appended as it is, with no thread hop. Otherwise
    the call validates the headers and recompresses (bounded), and its result is what
    to append: ``Log.append_as_leader`` then finds nothing left to convert.
    """
    codec = target_codec(config)
    if config.is_compacted:
        return functools.partial(convert_for_append, records, config, codec, now_ms, name=name)
    if codec is None or len(records) <= ATTRIBUTES_POSITION + 1:
        return None
    if records[ATTRIBUTES_POSITION + 1] & COMPRESSION_MASK == codec:  # low byte of the int16
        return None
    return functools.partial(convert_for_append, records, config, codec, now_ms, name=name)


class CheckedRecords(bytes):
    """Batches ``convert_for_append`` validated (keys included) and converted."""


def convert_for_append(
    records: bytes | memoryview, config: LogConfig, codec: int | None, now_ms: int, *, name: str
) -> bytes:
    """Header checks, the key check of compacted topics, then ``recompress``: the
    thread-safe half of a converting append."""
    view = memoryview(records)
    headers = validate_client_batches(
        view, config, now_ms, check_time=not config.uses_log_append_time, name=name
    )
    if config.is_compacted:
        check_keys(view, headers, config, name=name)
    if codec is None or all(h.compression == codec for h in headers):
        return CheckedRecords(view)
    return CheckedRecords(recompress(view, headers, codec, config))


def check_keys(
    view: memoryview, headers: list[BatchHeader], config: LogConfig, *, name: str
) -> None:
    """Every record has a key (compacted topics); compressed batches are opened
    within ``expansion_limit``. InvalidRecordError names the first keyless record."""
    for header in headers:
        start, end = header.position + HEADER_SIZE, header.position + header.size
        section: bytes | memoryview = view[start:end]
        if header.compression != NO_COMPRESSION:
            limit = expansion_limit(config, header.compression)
            if header.record_count * MIN_RECORD_SIZE > limit:
                raise _too_large(header, config, header.compression, "too many records")
            try:
                section = decompress_bounded(header.compression, section, limit)
            except ExpansionLimitError:
                raise _too_large(
                    header, config, header.compression, "expands past the bound"
                ) from None
            except CorruptRecordError as exc:
                raise CorruptRecordError(f"batch at position {header.position}: {exc}") from None
        index = _first_keyless(section, header.record_count)
        if index is not None:
            raise InvalidRecordError(
                f"{name}: a compacted topic cannot accept a record without a key "
                f"(record {index} of its batch)"
            )


def _first_keyless(section: bytes | bytearray | memoryview, count: int) -> int | None:
    """Index of the first record whose key is null, walking ``count`` records."""
    position = 0
    try:
        for index in range(count):
            length, position = _varint(section, position)
            record_end = position + length
            if length < MIN_RECORD_SIZE - 1 or record_end > len(section):
                raise InvalidRecordError(f"record {index} has bad length {length}")
            field = position + 1  # after attributes
            _, field = _varint(section, field)  # timestamp delta
            _, field = _varint(section, field)  # offset delta
            key_length, _ = _varint(section, field)
            if key_length < 0:
                return index
            position = record_end
    except IndexError:
        raise InvalidRecordError(f"record {index} is truncated") from None
    return None


def check_record_framing(section: bytes | bytearray | memoryview, count: int) -> None:
    """The records section holds exactly ``count`` records with offset deltas 0..count-1.

    Reads each record's length, timestamp delta and offset delta (the rest of a
    record stays opaque, as on the uncompressed path). Raises InvalidRecordError.
    One-byte varints, nearly all of these fields, are read inline.
    """
    end = len(section)
    position = 0
    index = 0
    minimum = MIN_RECORD_SIZE - 1
    try:
        while position < end:
            if index == count:
                raise InvalidRecordError(
                    f"{end - position} bytes follow the {count} records the header declares"
                )
            byte = section[position]
            if byte < 0x80:
                length = (byte >> 1) ^ -(byte & 1)
                position += 1
            else:
                length, position = _varint(section, position)
            record_end = position + length
            if length < minimum or record_end > end:
                raise InvalidRecordError(f"record {index} has bad length {length}")
            field = position + 1  # after attributes: the timestamp delta
            if section[field] < 0x80:
                field += 1
            else:
                _, field = _varint(section, field)
            byte = section[field]
            delta = (byte >> 1) ^ -(byte & 1) if byte < 0x80 else _varint(section, field)[0]
            if delta != index:
                raise InvalidRecordError(f"record {index} has offset delta {delta}")
            position = record_end
            index += 1
    except IndexError:
        raise InvalidRecordError(f"record {index} is truncated") from None
    if index != count:
        raise InvalidRecordError(f"header declares {count} records but the batch holds {index}")


def _varint(data: bytes | bytearray | memoryview, position: int) -> tuple[int, int]:
    """(zigzag-decoded value, position after it); IndexError past the end."""
    byte = data[position]
    if byte < 0x80:
        return (byte >> 1) ^ -(byte & 1), position + 1
    raw = byte & 0x7F
    shift = 7
    while True:
        position += 1
        byte = data[position]
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (raw >> 1) ^ -(raw & 1), position + 1
        shift += 7
        if shift > 63:
            raise InvalidRecordError(f"varint longer than 10 bytes at byte {position}")
