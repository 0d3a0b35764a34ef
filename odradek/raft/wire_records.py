"""Raft log entries ⇄ the record bytes of a Fetch response.

How this works and why: an entry's payload is one v2 record batch (the metadata
writer's batch); ``encode_entries`` concatenates them with baseOffset and
partitionLeaderEpoch stamped to the entry's offset and epoch (outside the CRC). A
payload that is not a batch (the core's LeaderChange marker, today a short text)
travels wrapped in a one-record batch marked with the ``odradek.raft.raw`` header and
comes out unwrapped, so every replica holds the same payload bytes. ``split_records``
walks batch headers: each batch is one entry (offset = base offset, epoch =
partitionLeaderEpoch, control bit, count = offsets it spans); a trailing partial batch
(a size-capped fetch) is left for the next fetch. Split from wire.py, which maps the
quorum messages themselves and calls these for a Fetch response's records: the byte
layout of batches is a concern of its own, tested on its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Final

from odradek.raft.log import LogEntry
from odradek.records.batch import (
    COMPRESSION_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    check_batch,
    stamp,
    unpack_header,
)
from odradek.records.codec import Header, Record, encode_batch, iter_records
from odradek.records.errors import CorruptRecordError

RAW_PAYLOAD_HEADER: Final = "odradek.raft.raw"
LEADER_CHANGE_CONTROL_KEY: Final = b"\x00\x00\x00\x02"  # control record version 0, type 2


def batch_header(payload: bytes) -> BatchHeader | None:
    """The v2 header of a payload that is exactly one batch, else None (the core's
    non-batch payloads; the driver asks too, to stamp and count what it appends)."""
    if len(payload) < HEADER_SIZE:
        return None
    try:
        header = unpack_header(payload)
    except CorruptRecordError:
        return None
    return header if header.size == len(payload) else None


def _wrap(entry: LogEntry) -> bytes:
    key = LEADER_CHANGE_CONTROL_KEY if entry.control else None
    record = Record(entry.offset, -1, key, entry.payload, (Header(RAW_PAYLOAD_HEADER, None),))
    return encode_batch(
        [record],
        base_offset=entry.offset,
        partition_leader_epoch=entry.epoch,
        is_control=entry.control,
    )


def encode_entry(entry: LogEntry) -> bytes:
    """One entry as the v2 batch that carries it (stamped with its offset and epoch)."""
    if batch_header(entry.payload) is None:
        return _wrap(entry)
    batch = bytearray(entry.payload)
    stamp(batch, 0, entry.offset, entry.epoch)
    return bytes(batch)


def encode_entries(entries: Iterable[LogEntry]) -> bytes:
    return b"".join(encode_entry(entry) for entry in entries)


@dataclasses.dataclass(frozen=True, slots=True)
class WireBatch:
    """One batch of a Fetch response: what becomes one LogEntry."""

    offset: int
    epoch: int
    payload: bytes
    control: bool
    count: int  # offsets the batch spans (lastOffsetDelta + 1)

    def entry(self) -> LogEntry:
        return LogEntry(self.offset, self.epoch, self.payload, self.control, self.count)


def split_batches(records: bytes | memoryview) -> list[WireBatch]:
    """The whole batches of ``records`` (CRC-checked; CorruptRecordError otherwise)."""
    view = memoryview(records)
    batches: list[WireBatch] = []
    position = 0
    while len(view) - position >= HEADER_SIZE:
        header = unpack_header(view, position)
        if position + header.size > len(view):
            break  # a partial batch at the end of a size-capped response
        check_batch(view, position)
        payload = bytes(view[position : position + header.size])
        if (
            header.record_count == 1
            and header.attributes & COMPRESSION_MASK == 0
            and header.size - HEADER_SIZE < 1 << 20
        ):
            payload = _unwrap(payload)
        batches.append(
            WireBatch(
                header.base_offset,
                header.partition_leader_epoch,
                payload,
                header.is_control,
                header.last_offset_delta + 1,
            )
        )
        position += header.batch_length + LOG_OVERHEAD
    return batches


def _unwrap(payload: bytes) -> bytes:
    """The original bytes of a wrapped non-batch payload; other batches stay whole."""
    records = list(iter_records(payload, unpack_header(payload)))
    if len(records) != 1:
        return payload
    (record,) = records
    if record.value is not None and any(h.key == RAW_PAYLOAD_HEADER for h in record.headers):
        return record.value
    return payload


def split_records(records: bytes | memoryview | None) -> tuple[LogEntry, ...]:
    if not records:
        return ()
    return tuple(batch.entry() for batch in split_batches(records))
