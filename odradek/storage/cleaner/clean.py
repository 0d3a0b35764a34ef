"""One clean of one log: the key map, the rewritten segments, their installation.

How this works and why (seeds/000 "Compaction": the dirty segment map, deleting and
retaining events, replacing old segments): a clean first maps each key of the dirty
range [first dirty, first uncleanable) to its latest offset (``build_map``); records
of aborted transactions and control batches are not mapped, records without a key
neither. The map is bounded (``log.cleaner.dedupe.buffer.size``): it takes whole
segments, as many as fit, and the clean ends where the map ends. Then every segment
from the local log start up to that end is rewritten, in groups that fit one
segment (``groups``), keeping per batch:

- a data record whose key maps to a later offset: dropped (superseded);
- a record without a key: dropped (Kafka's cleaner does the same);
- a tombstone (null value): kept until its batch's delete horizon passed (KIP-534:
  the first clean that keeps a batch holding tombstones sets the horizon to now +
  ``delete.retention.ms`` in the batch — attribute bit 6, base timestamp = horizon —
  and a later clean past it drops the tombstone);
- a batch of an aborted transaction (its producer's ABORT marker names it): dropped
  whole;
- a COMMIT/ABORT marker: kept while records of its transaction remain, or its
  horizon (set like a tombstone's) has not passed; dropped after both;
- a batch left with no record: dropped, unless it is its producer's last batch in
  the producer state, which is kept empty (count 0, same offsets and sequence range)
  so idempotent retries are still recognised after the clean.

Retained records keep their offsets, timestamps, headers and the batch's producer
fields, codec and last offset delta; a batch that loses nothing and needs no new
horizon is copied byte for byte. Decompression is bounded by the same rule as
recompression (log_validator.expansion_limit).

Concurrency: ``prepare`` and ``install`` run on the event loop (they read and change
the log); ``build_map`` and ``clean_group`` run on a cleaner thread and read the
segments through duplicated descriptors (``_Source``) only, so the loop may close or
delete a segment meanwhile without its descriptor number reaching another file; an
``install`` after such a change is refused.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from odradek.records.batch import (
    CONTROL_MASK,
    DELETE_HORIZON_MASK,
    HEADER_SIZE,
    BatchHeader,
    check_batch,
    unpack_header,
)
from odradek.records.codec import Record, encode_batch, iter_records
from odradek.records.errors import CorruptRecordError
from odradek.storage.cleaner.swap import CLEANED_SUFFIX, replace_segments
from odradek.storage.log_validator import expansion_limit
from odradek.storage.segment import BatchMeta, LogSegment
from odradek.storage.transactions import decode_marker
from odradek.storage.txn_index import AbortedTxn

if TYPE_CHECKING:
    from odradek.storage.cleaner.manager import LogToClean
    from odradek.storage.log import Log

READ_CHUNK: Final = 1024 * 1024  # bytes read at once while scanning a segment


class CleanerAborted(Exception):
    """The broker is stopping: the clean ends at the next batch."""


class DedupeBufferTooSmallError(Exception):
    """One segment holds more keys than the map may: raise the config named."""


# What one key costs in the map: a 16-byte digest as a bytes object, an int offset
# and the dict's slot (measured on CPython 3.11: ~120 bytes; Kafka's array: 24).
MAP_ENTRY_BYTES: Final = 120


class OffsetMap:
    """Key digest -> latest offset, holding at most ``capacity`` keys: so many that
    ``log.cleaner.dedupe.buffer.size`` (times the load factor) bounds its real memory
    at MAP_ENTRY_BYTES per key. Keys are kept as 16-byte BLAKE2b digests, whatever
    their length (Kafka keeps 16-byte MD5 digests)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, capacity)
        self._offsets: dict[bytes, int] = {}

    @staticmethod
    def digest(key: bytes) -> bytes:
        return hashlib.blake2b(key, digest_size=16).digest()

    def put(self, key: bytes, offset: int) -> bool:
        """Map ``key`` to ``offset``; False (nothing changed) when the map is full and
        the key is new."""
        digest = self.digest(key)
        offsets = self._offsets
        if len(offsets) >= self.capacity and digest not in offsets:
            return False
        offsets[digest] = offset
        return True

    def get(self, key: bytes) -> int:
        return self._offsets.get(self.digest(key), -1)

    def __len__(self) -> int:
        return len(self._offsets)


class _Throttle:
    """``log.cleaner.io.max.bytes.per.second`` over the whole clean; checks the abort
    flag at every call (once per batch)."""

    def __init__(self, rate: float, abort: threading.Event) -> None:
        self.rate = rate
        self.abort = abort
        self.started = time.monotonic()
        self.done = 0

    def __call__(self, size: int) -> None:
        if self.abort.is_set():
            raise CleanerAborted
        self.done += size
        if self.rate == float("inf"):
            return
        ahead = self.done / self.rate - (time.monotonic() - self.started)
        if ahead > 0.001:
            self.abort.wait(ahead)


@dataclass(slots=True)
class _Source:
    """A segment as the cleaner thread reads it: a duplicated descriptor and the
    size it had when the clean was prepared."""

    segment: LogSegment
    fd: int
    size: int
    base_offset: int
    next_offset: int

    def batches(self) -> Iterator[tuple[BatchHeader, bytes]]:
        position = 0
        buffer = b""
        buffer_at = 0
        while position < self.size:
            if position + HEADER_SIZE > buffer_at + len(buffer):
                buffer = os.pread(self.fd, max(READ_CHUNK, HEADER_SIZE), position)
                buffer_at = position
            header = unpack_header(buffer, position - buffer_at, file_position=position)
            end = position + header.size
            if header.size < HEADER_SIZE or end > self.size:
                raise CorruptRecordError(
                    f"{self.segment.log_path.name}: bad batch at position {position}"
                )
            if end > buffer_at + len(buffer):
                buffer = os.pread(self.fd, max(READ_CHUNK, header.size), position)
                buffer_at = position
            data = buffer[position - buffer_at : end - buffer_at]
            header = check_batch(data)
            yield header, data
            position = end


@dataclass(slots=True)
class GroupResult:
    sources: list[_Source]
    cleaned: LogSegment | None


@dataclass
class CleanJob:
    """Everything one clean needs, taken on the loop (``prepare``)."""

    log: Log
    first_dirty: int
    first_uncleanable: int
    sources: list[_Source]
    aborted: list[AbortedTxn]
    producer_last_offsets: dict[int, int]
    map: OffsetMap
    now_ms: int
    limit: int
    throttle: _Throttle
    truncations: int
    earliest_horizon: int | None = None
    bytes_read: int = 0
    bytes_written: int = 0
    records_removed: int = 0
    # Producer id -> whether its transaction in progress (in offset order, across the
    # groups of this clean) kept any record: its marker must stay while it did.
    txn_has_data: dict[int, bool] = field(default_factory=dict)
    _aborted_by_producer: dict[int, list[AbortedTxn]] | None = None
    _closed: bool = field(default=False)

    @classmethod
    def prepare(
        cls,
        todo: LogToClean,
        *,
        dedupe_entries: int,
        now_ms: int,
        max_bytes_per_second: float,
        abort: threading.Event,
    ) -> CleanJob:
        log = todo.log
        sources = [
            _Source(s, os.dup(s.fd), s.size, s.base_offset, s.next_offset)
            for s in log.segments[:-1]
            if s.base_offset < todo.first_uncleanable
        ]
        last_offsets = {
            pid: entry.batches[-1].last_offset
            for pid, entry in log.producer_state.producers.items()
            if entry.batches
        }
        codec_limit = max(expansion_limit(log.config, codec) for codec in range(1, 5))
        return cls(
            log,
            todo.first_dirty,
            todo.first_uncleanable,
            sources,
            log.collect_aborted_transactions(log.local_log_start_offset, todo.first_uncleanable),
            last_offsets,
            OffsetMap(dedupe_entries),
            now_ms,
            codec_limit,
            _Throttle(max_bytes_per_second, abort),
            log.local.truncations,
        )

    # -- on a cleaner thread ------------------------------------------------------------
    def _aborted(self, header: BatchHeader) -> bool:
        if not header.is_transactional or header.is_control:
            return False
        if self._aborted_by_producer is None:
            by_producer: dict[int, list[AbortedTxn]] = {}
            for entry in self.aborted:
                by_producer.setdefault(entry.producer_id, []).append(entry)
            self._aborted_by_producer = by_producer
        return any(
            a.first_offset <= header.base_offset <= a.last_offset
            for a in self._aborted_by_producer.get(header.producer_id, ())
        )

    def build_map(self) -> int:
        """Map the dirty range's keys; returns the offset the map (and clean) ends at:
        where it filled up (possibly inside a segment, as Kafka does since 3.x), else
        the first uncleanable offset."""
        end = self.first_dirty
        for source in self.sources:
            if source.next_offset <= self.first_dirty:
                continue
            for header, data in source.batches():
                self.throttle(header.size)
                self.bytes_read += header.size
                if header.last_offset < self.first_dirty:
                    continue  # cleaned already
                if not (header.attributes & CONTROL_MASK or self._aborted(header)):
                    for record in iter_records(data, header, self.limit):
                        if record.offset < self.first_dirty or record.key is None:
                            continue
                        if self.map.put(record.key, record.offset):
                            continue
                        if not len(self.map):
                            raise DedupeBufferTooSmallError(
                                f"{self.log.name}: log.cleaner.dedupe.buffer.size holds no "
                                "key at all; raise it"
                            )
                        return max(record.offset, self.first_dirty)
                end = header.next_offset
            end = max(end, source.next_offset)
        return end

    def groups(self, end: int) -> list[list[_Source]]:
        """Consecutive sources below ``end`` grouped to fit one segment (size, index
        entries and int32 relative offsets)."""
        config = self.log.config
        groups: list[list[_Source]] = []
        current: list[_Source] = []
        size = 0
        for source in self.sources:
            if source.base_offset >= end:
                break
            fits = (
                current
                and size + source.size <= config.segment_bytes
                and source.next_offset - 1 - current[0].base_offset <= 0x7FFFFFFF
                and (size + source.size) // max(config.index_interval_bytes, 1) * 8
                < config.segment_index_bytes
            )
            if current and not fits:
                groups.append(current)
                current, size = [], 0
            current.append(source)
            size += source.size
        if current:
            groups.append(current)
        return groups

    def clean_group(self, group: list[_Source]) -> GroupResult:
        """Write the group's retained batches into a ``.cleaned`` segment."""
        log = self.log
        cleaned = LogSegment(
            log.directory,
            group[0].base_offset,
            index_interval_bytes=log.config.index_interval_bytes,
            max_index_bytes=log.config.segment_index_bytes,
            created_ms=self.now_ms,
            suffix=CLEANED_SUFFIX,
        )
        try:
            kept_markers: set[int] = set()
            for source in group:
                for header, data in source.batches():
                    self.throttle(header.size)
                    self.bytes_read += header.size
                    out = self._retain(header, data)
                    if out is None:
                        continue
                    if header.is_control:
                        kept_markers.add(header.base_offset)
                    meta = BatchMeta(
                        header.base_offset, header.last_offset, header.max_timestamp, len(out)
                    )
                    cleaned.append([meta], [out], len(out))
                    self.bytes_written += len(out)
            for entry in self.aborted:
                if entry.last_offset in kept_markers:
                    cleaned.txn_index.append(entry)
            cleaned.on_become_inactive()
            cleaned.write_indexes()
            cleaned.fsync()
        except BaseException:
            cleaned.delete_files()
            raise
        return GroupResult(group, cleaned)

    def _horizon(self, header: BatchHeader) -> tuple[bool, int]:
        """(horizon already set, horizon ms) — a new one is now + delete.retention.ms."""
        if header.attributes & DELETE_HORIZON_MASK:
            return True, header.base_timestamp
        return False, self.now_ms + self.log.config.delete_retention_ms

    def _note_horizon(self, horizon: int) -> None:
        """Remember the earliest horizon still to come: the manager cleans the log again
        when it passes. A kept batch whose horizon already passed (a marker whose
        transaction still has records) needs a dirty clean, not a timer."""
        if horizon <= self.now_ms:
            return
        if self.earliest_horizon is None or horizon < self.earliest_horizon:
            self.earliest_horizon = horizon

    def _retain(self, header: BatchHeader, data: bytes) -> bytes | None:
        """The bytes to keep for one batch, or None to drop it."""
        pid = header.producer_id
        if header.is_control:
            marker = decode_marker(data)
            has_data = self.txn_has_data.pop(pid, False)
            was_set, horizon = self._horizon(header)
            if marker is None or has_data or not was_set or horizon > self.now_ms:
                if was_set:
                    self._note_horizon(horizon)
                    return data
                self._note_horizon(horizon)
                return self._rewrite(header, list(iter_records(data, header, self.limit)), horizon)
            self.records_removed += header.record_count
            return None
        if self._aborted(header):
            self.records_removed += header.record_count
            return None
        records = list(iter_records(data, header, self.limit))
        kept = []
        tombstones = False
        was_set, horizon = self._horizon(header)
        for record in records:
            if record.key is None:
                continue
            latest = self.map.get(record.key)
            if latest > record.offset:
                continue
            if record.value is None:
                if was_set and horizon <= self.now_ms:
                    continue  # its delete horizon passed
                tombstones = True
            kept.append(record)
        self.records_removed += len(records) - len(kept)
        if kept and header.is_transactional:
            self.txn_has_data[pid] = True
        if tombstones:
            self._note_horizon(horizon)
        if len(kept) == len(records) and (not tombstones or was_set):
            return data  # nothing removed, nothing to stamp: the original bytes
        if not kept and (pid < 0 or self.producer_last_offsets.get(pid) != header.last_offset):
            return None  # not its producer's last batch: nothing to keep
        stamp = horizon if tombstones else None
        return self._rewrite(header, kept, stamp)

    def _rewrite(self, header: BatchHeader, records: list[Record], horizon: int | None) -> bytes:
        if horizon is not None:
            base_timestamp = horizon
        else:
            base_timestamp = records[0].timestamp if records else header.base_timestamp
        return encode_batch(
            records,
            base_offset=header.base_offset,
            partition_leader_epoch=header.partition_leader_epoch,
            compression=header.compression,
            timestamp_type=header.timestamp_type,
            producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            base_sequence=header.base_sequence,
            is_transactional=header.is_transactional,
            is_control=header.is_control,
            max_timestamp=header.max_timestamp,
            last_offset_delta=header.last_offset_delta,
            base_timestamp=base_timestamp,
            delete_horizon=horizon is not None,
        )

    # -- back on the loop ------------------------------------------------------------------
    def unchanged(self, sources: list[_Source]) -> bool:
        """Whether ``sources`` are still the log's segments as they were prepared."""
        log = self.log
        live = log.segments
        return (
            not log.closed
            and log.local.truncations == self.truncations
            and all(s.segment in live and not s.segment.deleted for s in sources)
            and all(s.segment.size == s.size for s in sources)
            and (not sources or sources[-1].segment is not live[-1])
        )

    def install(self, result: GroupResult) -> bool:
        """Swap the cleaned segment in, unless the log changed since ``prepare``."""
        log = self.log
        olds = [s.segment for s in result.sources]
        assert result.cleaned is not None
        if not self.unchanged(result.sources):
            result.cleaned.delete_files()
            return False
        replace_segments(log.local, result.cleaned, olds)
        return True

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for source in self.sources:
            os.close(source.fd)


def clean_log_now(
    log: Log,
    *,
    checkpoint: int | None = None,
    now_ms: int | None = None,
    dedupe_entries: int = 4 * 1024 * 1024,
    force: bool = True,
) -> int | None:
    """Clean ``log`` synchronously on the calling thread (tests, tools); returns the
    new first dirty offset, or None when nothing was cleanable (or, unless
    ``force``, the log was not eligible)."""
    from odradek.storage.cleaner.manager import log_to_clean

    now = log.clock() if now_ms is None else now_ms
    todo = log_to_clean(("", 0), log, checkpoint, now, now if force else None)
    if not force and not todo.eligible:
        return None
    job = CleanJob.prepare(
        todo,
        dedupe_entries=dedupe_entries,
        now_ms=now,
        max_bytes_per_second=float("inf"),
        abort=threading.Event(),
    )
    try:
        end = job.build_map()
        for group in job.groups(end):
            if not job.install(job.clean_group(group)):
                return None
    finally:
        job.close()
    return end
