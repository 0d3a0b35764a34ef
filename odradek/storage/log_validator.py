"""Validation of client batches before a leader append (Kafka's LogValidator role).

How this works and why: a produce request's batches are checked on their 61-byte
headers only — size against ``max.message.bytes``, record count against the last
offset delta, codec, producer fields, control flag, timestamps against the broker
clock — so records stay opaque bytes on the hot path. Records are decoded only to
recompress batches whose codec differs from a topic's ``compression.type``.

Pure functions of (bytes, config, clock reading); the Log calls them on its loop.
"""

from __future__ import annotations

from odradek.storage import batch as batch_format
from odradek.storage.batch import (
    COMPRESSION_BY_NAME,
    COMPRESSION_MASK,
    CONTROL_MASK,
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    check_batch,
)
from odradek.storage.errors import InvalidRecordError, InvalidTimestampError, RecordTooLargeError
from odradek.storage.log_config import LogConfig


def target_codec(config: LogConfig) -> int | None:
    """The codec a topic's compression.type imposes, or None for ``producer``."""
    return COMPRESSION_BY_NAME.get(config.compression_type.replace("uncompressed", "none"))


def validate_client_batches(
    view: memoryview, config: LogConfig, now_ms: int, *, check_time: bool, name: str
) -> list[BatchHeader]:
    """Header checks only (records stay opaque); raw attribute tests, as this is hot.

    ``check_time`` is false for LogAppendTime topics, whose timestamps the broker sets.
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
        elif header.base_sequence < 0 or header.producer_epoch < 0:
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


def recompress(view: memoryview, headers: list[BatchHeader], codec: int) -> bytes:
    """Re-encode batches whose codec differs from the topic's compression.type."""
    from odradek.storage.records import decode_batch, encode_batch

    out = bytearray()
    for header in headers:
        if header.compression == codec:
            out += view[header.position : header.position + header.size]
            continue
        decoded = decode_batch(view, header.position)
        out += encode_batch(
            decoded.records,
            base_offset=header.base_offset,
            partition_leader_epoch=header.partition_leader_epoch,
            compression=codec,
            timestamp_type=header.timestamp_type,
            producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            base_sequence=header.base_sequence,
            is_transactional=header.is_transactional,
            max_timestamp=header.max_timestamp,
        )
    return bytes(out)
