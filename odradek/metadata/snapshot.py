"""The bytes of a metadata snapshot (KIP-630's ``<offset>-<epoch>.checkpoint``).

How this works and why: a snapshot stands for every committed metadata record below
its end offset. Its payload is Kafka's layout, a sequence of v2 record batches:

1. a control batch holding one SnapshotHeader control record (control type 3; the
   value is kio's ``SnapshotHeaderRecord`` v0: version 0 and the append time of the
   last log record the snapshot contains);
2. data batches holding the image as metadata records (``MetadataImage.to_records``:
   key = record kind, value = JSON, exactly as in the log), each batch at most
   ``MAX_BATCH_BYTES``;
3. a control batch holding one SnapshotFooter control record (type 4, kio's
   ``SnapshotFooterRecord`` v0).

Batch base offsets count records within the snapshot (the header is offset 0), not
log offsets, as in Kafka; every batch carries the snapshot's epoch as its
partitionLeaderEpoch. ``read_snapshot`` checks every CRC, that offsets are
contiguous, that the header comes first and the footer last and nothing follows, so
a torn or flipped file is refused as a whole (SnapshotCorruptError, one line naming
the file) and the caller falls back to an older snapshot or to the log.

This module lives in ``metadata/`` rather than ``raft/``: the Raft layer treats a
snapshot payload as opaque bytes (``raft/snapshots.py``); what the bytes mean —
records of the metadata image — is the metadata layer's business. Nothing here does
I/O except ``read_snapshot_file``.
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from kio.schema.snapshot_footer_record.v0 import SnapshotFooterRecord
from kio.schema.snapshot_header_record.v0 import SnapshotHeaderRecord
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError
from kio.static.primitive import i16, i64

from odradek.metadata.image import MetadataRecord
from odradek.records.batch import BatchHeader, iter_batches
from odradek.records.codec import Record, decode_record_columns, encode_batch
from odradek.records.errors import CorruptRecordError
from odradek.storage.errors import StorageError

SNAPSHOT_HEADER_TYPE: Final = 3  # Kafka's ControlRecordType.SNAPSHOT_HEADER
SNAPSHOT_FOOTER_TYPE: Final = 4  # Kafka's ControlRecordType.SNAPSHOT_FOOTER
# Kafka's controller batches are bounded too (8 MiB); 1 MiB keeps one batch's decode
# cheap to hold in memory while a snapshot of 100,000 records is still ~15 batches.
MAX_BATCH_BYTES: Final = 2**20
_CONTROL_KEY: Final = struct.Struct(">hh")  # control record key: version, type
_write_header = entity_writer(SnapshotHeaderRecord)
_write_footer = entity_writer(SnapshotFooterRecord)
_read_header = entity_reader(SnapshotHeaderRecord)
_read_footer = entity_reader(SnapshotFooterRecord)


class SnapshotCorruptError(StorageError):
    """A snapshot file (or payload) that is not a whole, valid snapshot."""


@dataclass(frozen=True, slots=True)
class SnapshotContents:
    last_contained_timestamp: int  # the header's last_contained_log_timestamp
    epoch: int  # the batches' partitionLeaderEpoch
    records: list[MetadataRecord]
    batches: list[BatchHeader]  # positions within the payload (for dump-log)


def _control_record(offset: int, timestamp: int, control_type: int, value: bytes) -> Record:
    return Record(offset, timestamp, _CONTROL_KEY.pack(0, control_type), value)


def _entity_bytes(writer: object, entity: object) -> bytes:
    buffer = io.BytesIO()
    writer(buffer, entity)  # type: ignore[operator]
    return buffer.getvalue()


def build_snapshot(
    records: Sequence[MetadataRecord], last_contained_timestamp: int, *, epoch: int = 0
) -> bytes:
    """The payload of a snapshot holding ``records`` (see the module docstring)."""
    timestamp = max(last_contained_timestamp, 0)
    header = _entity_bytes(
        _write_header,
        SnapshotHeaderRecord(version=i16(0), last_contained_log_timestamp=i64(timestamp)),
    )
    parts = [
        encode_batch(
            [_control_record(0, timestamp, SNAPSHOT_HEADER_TYPE, header)],
            partition_leader_epoch=epoch,
            is_control=True,
        )
    ]
    offset = 1
    pending: list[Record] = []
    pending_bytes = 0
    for record in records:
        key, value = record.encode()
        # ~12 bytes of per-record framing besides key and value
        size = len(key) + len(value) + 12
        if pending and pending_bytes + size > MAX_BATCH_BYTES - 61:
            parts.append(
                encode_batch(pending, base_offset=pending[0].offset, partition_leader_epoch=epoch)
            )
            pending, pending_bytes = [], 0
        pending.append(Record(offset, timestamp, key, value))
        pending_bytes += size
        offset += 1
    if pending:
        parts.append(
            encode_batch(pending, base_offset=pending[0].offset, partition_leader_epoch=epoch)
        )
    footer = _entity_bytes(_write_footer, SnapshotFooterRecord(version=i16(0)))
    parts.append(
        encode_batch(
            [_control_record(offset, timestamp, SNAPSHOT_FOOTER_TYPE, footer)],
            base_offset=offset,
            partition_leader_epoch=epoch,
            is_control=True,
        )
    )
    return b"".join(parts)


def read_snapshot(data: bytes, name: str = "snapshot") -> SnapshotContents:
    """Decode and check a whole snapshot payload; SnapshotCorruptError names ``name``."""
    try:
        return _read(data)
    except SnapshotCorruptError as error:
        raise SnapshotCorruptError(f"{name}: {error}") from None
    except (CorruptRecordError, SerialError, ValueError, KeyError, TypeError) as error:
        raise SnapshotCorruptError(f"{name}: {type(error).__name__}: {error}") from None


def read_snapshot_file(path: Path) -> SnapshotContents:
    """``read_snapshot`` of a file; OSError for a file that cannot be read."""
    return read_snapshot(path.read_bytes(), str(path))


def _read(data: bytes) -> SnapshotContents:
    headers = list(iter_batches(data, True))  # checks length, magic and every CRC
    if len(headers) < 2:
        raise SnapshotCorruptError(f"{len(headers)} batch(es): no header and footer")
    expected = 0
    epoch = headers[0].partition_leader_epoch
    for header in headers:
        if header.partition_leader_epoch != epoch:
            raise SnapshotCorruptError(
                f"batch at position {header.position} has epoch "
                f"{header.partition_leader_epoch}, the snapshot's is {epoch}"
            )
        if header.base_offset != expected or header.last_offset_delta != header.record_count - 1:
            raise SnapshotCorruptError(
                f"batch at position {header.position} has offsets {header.base_offset}.."
                f"{header.last_offset}, expected to start at {expected}"
            )
        expected = header.last_offset + 1
    first, last = headers[0], headers[-1]
    timestamp = _control_value(data, first, SNAPSHOT_HEADER_TYPE, "header")
    _control_value(data, last, SNAPSHOT_FOOTER_TYPE, "footer")
    records: list[MetadataRecord] = []
    for header in headers[1:-1]:
        if header.is_control:
            raise SnapshotCorruptError(
                f"batch at position {header.position} is a control batch inside the snapshot"
            )
        columns = decode_record_columns(data, header)
        keys, values = columns.keys, columns.values
        if any(k is None for k in keys) or any(v is None for v in values):
            raise SnapshotCorruptError(
                f"batch at position {header.position} has a record without key or value"
            )
        # One JSON document per batch: a single C call instead of one per record.
        fields = json.loads(b"[" + b",".join(values) + b"]")  # type: ignore[arg-type]
        records.extend(
            MetadataRecord(key.decode(), value)  # type: ignore[union-attr]
            for key, value in zip(keys, fields, strict=True)
        )
    return SnapshotContents(timestamp, epoch, records, headers)


def _control_value(data: bytes, header: BatchHeader, control_type: int, what: str) -> int:
    """Check ``header`` is a control batch of one record of ``control_type``; for the
    header, its last contained timestamp."""
    if not header.is_control or header.record_count != 1:
        raise SnapshotCorruptError(
            f"batch at position {header.position} should be the snapshot {what} "
            "(one control record)"
        )
    columns = decode_record_columns(data, header)
    key, value = columns.keys[0], columns.values[0]
    if key is None or value is None or len(key) < _CONTROL_KEY.size:
        raise SnapshotCorruptError(f"the snapshot {what} record has no key or value")
    _, found = _CONTROL_KEY.unpack_from(key)
    if found != control_type:
        raise SnapshotCorruptError(
            f"batch at position {header.position} holds control type {found}, "
            f"not the snapshot {what} ({control_type})"
        )
    if control_type == SNAPSHOT_HEADER_TYPE:
        entity, _ = _read_header(memoryview(value), 0)
        return int(entity.last_contained_log_timestamp)
    _read_footer(memoryview(value), 0)
    return 0


__all__ = [
    "MAX_BATCH_BYTES",
    "SNAPSHOT_FOOTER_TYPE",
    "SNAPSHOT_HEADER_TYPE",
    "SnapshotContents",
    "SnapshotCorruptError",
    "build_snapshot",
    "read_snapshot",
    "read_snapshot_file",
]
