"""Log: one partition's ordered segments, offsets, epochs and producer state.

How this works and why: a partition's log is a list of LogSegments sorted by base
offset; only the last (active) one takes appends. The log owns the offsets that the
layers above reason with — log start offset <= high watermark <= log end offset —
plus the recovery point (everything below it has been fsynced). An append as leader
validates each batch's header and CRC, checks idempotent producers' sequences,
assigns offsets by rewriting the 16-byte prefix of each batch (base offset, length,
leader epoch, all outside the CRC), and writes prefix + original bytes with one
``pwritev``. Records are decoded only when the topic demands it (a compression type
other than ``producer``). Transactions (open ones, markers, the last stable offset,
aborted lists from the ``.txnindex`` files) are kept by transactions.py.

Directory ``<topic>-<partition>/``: segments (segment.py), ``<offset>.snapshot``
(producer_state.py), ``leader-epoch-checkpoint`` (epoch_cache.py),
``partition.metadata`` (topic id, partition_metadata.py). Loading and recovery live in
log_loader.py, header validation and recompression in log_validator.py.

Concurrency: every method runs on the event loop that owns the log. ``flush`` has a
split form (``prepare_flush`` / ``LogSegment.fsync`` / ``files.wait(flush_barrier)`` /
``mark_flushed``) so the slow fsync can run on a worker thread while the loop keeps
appending. The small files (producer snapshots, the leader-epoch checkpoint) are written
and deleted through ``files`` (deferred_files.py): the loop builds their bytes, a
worker writes them in order, so a roll or a retention pass no longer waits for an
fsync. A flush waits for the files queued before it and fsyncs the snapshots, so the
recovery point never passes a snapshot or checkpoint that is not on disk; ``close``
drains and syncs them.
"""

from __future__ import annotations

import bisect
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from odradek.records import batch as batch_format
from odradek.records.batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    BatchHeader,
    check_batch,
    set_log_append_time,
    stamped_prefix,
)
from odradek.records.errors import CorruptRecordError
from odradek.records.file_range import FileRange
from odradek.storage.deferred_files import DeferredFiles
from odradek.storage.epoch_cache import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, LeaderEpochCache
from odradek.storage.errors import (
    InvalidRecordError,
    OffsetOutOfRangeError,
    UnexpectedAppendOffsetError,
)
from odradek.storage.log_config import LogConfig
from odradek.storage.log_validator import recompress, target_codec, validate_client_batches
from odradek.storage.producer_state import ProducerEntry, ProducerStateManager
from odradek.storage.segment import BatchMeta, LogSegment
from odradek.storage.transactions import (
    Marker,
    TransactionTracker,
    collect_aborted,
    disk_marker_of,
    marker_batch,
    markers_in,
)
from odradek.storage.txn_index import AbortedTxn, TransactionIndex

logger = logging.getLogger(__name__)

EPOCH_CHECKPOINT_FILE: Final = "leader-epoch-checkpoint"
RELATIVE_OFFSET_MAX: Final = 0x7FFFFFFF  # index entries store offset - base as int32


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(slots=True)
class AppendInfo:
    """Result of an append; ``duplicate`` means an idempotent retry was recognised."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    record_count: int
    size: int
    duplicate: bool = False


@dataclass(slots=True)
class ReadInfo:
    """A fetch result: byte ranges to send, plus the offsets the response reports."""

    ranges: list[FileRange]
    first_batch_offset: int | None
    log_start_offset: int
    log_end_offset: int
    high_watermark: int

    @property
    def size(self) -> int:
        return sum(r.length for r in self.ranges)


class Log:
    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        segments: list[LogSegment],
        *,
        log_start_offset: int,
        recovery_point: int,
        epoch_cache: LeaderEpochCache,
        producer_state: ProducerStateManager,
        clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        assert segments, "a log always has an active segment"
        self.directory = directory
        self.config = config
        self._target_codec = target_codec(config)  # None: keep the producer's codec
        self._log_append_time = config.uses_log_append_time
        self.clock = clock
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self.log_start_offset = max(log_start_offset, segments[0].base_offset)
        self.recovery_point = min(recovery_point, self.log_end_offset)
        self._high_watermark = self.log_start_offset
        self.epoch_cache = epoch_cache
        self.producer_state = producer_state
        self.transactions = TransactionTracker()
        # The queue of small-file writes the epoch cache and producer state share.
        self.files: DeferredFiles = producer_state.files
        self.unflushed_messages = 0
        self.last_flush_ms = clock()
        self.pending_deletions: list[tuple[int, LogSegment]] = []
        self.closed = False

    # -- identity and offsets --------------------------------------------------------
    @property
    def name(self) -> str:
        return self.directory.name

    @property
    def segments(self) -> list[LogSegment]:
        return list(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def size(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, offset: int) -> None:
        """Set by the replication layer; clamped to [log start offset, log end offset]."""
        self._high_watermark = min(max(offset, self.log_start_offset), self.log_end_offset)
        self.transactions.on_high_watermark(self._high_watermark)

    def segment_for(self, offset: int) -> LogSegment | None:
        index = bisect.bisect_right(self._bases, offset) - 1
        return self._segments[index] if index >= 0 else None

    # -- appends ---------------------------------------------------------------------
    def append_as_leader(
        self,
        records: bytes | bytearray | memoryview,
        leader_epoch: int,
        *,
        coordinator: bool = False,
        verification_guard: object | None = None,
    ) -> AppendInfo:
        """Validate client batches, assign offsets from the log end, append.

        ``coordinator``: the batches are a coordinator's own writes to its internal
        topic (Kafka's AppendOrigin.COORDINATOR), whose transactional ones — the group
        coordinator's TxnOffsetCommit — carry a producer id and epoch but no sequence.
        ``verification_guard``: the producer's guard when the leader verified a
        transactional batch with its coordinator (producer_state.check)."""
        view = memoryview(records)
        now_ms = self.clock()
        headers = validate_client_batches(
            view,
            self.config,
            now_ms,
            check_time=not self._log_append_time,
            name=self.name,
            coordinator=coordinator,
        )
        if len(headers) == 1:  # what every produce request v3+ carries
            idempotent = headers[0].producer_id >= 0
        else:
            idempotent = any(h.producer_id >= 0 for h in headers)
        if idempotent:
            duplicate = self._check_producers(headers, verification_guard)
            if duplicate is not None:
                return duplicate
        if self._target_codec is not None and any(
            h.compression != self._target_codec for h in headers
        ):
            view = memoryview(recompress(view, headers, self._target_codec, self.config))
            headers = list(batch_format.iter_batches(view))
        append_time = now_ms if self._log_append_time else -1
        if append_time >= 0:
            copy = bytearray(view)
            for header in headers:
                set_log_append_time(copy, header.position, header.size, append_time)
                header.max_timestamp = append_time
                header.attributes |= batch_format.TIMESTAMP_TYPE_MASK
            view = memoryview(copy)
        # Offsets are assigned by writing a new 16-byte prefix in front of each
        # batch's original bytes (one pwritev; the batch itself is never copied).
        first_offset = next_offset = self.log_end_offset
        buffers: list[bytes | memoryview] = []
        metas = []
        max_timestamp = NO_TIMESTAMP
        record_count = 0
        for header in headers:
            position, size = header.position, header.batch_length + LOG_OVERHEAD
            buffers.append(stamped_prefix(header, next_offset, leader_epoch))
            buffers.append(view[position + 16 : position + size])
            header.base_offset = next_offset
            header.partition_leader_epoch = leader_epoch
            last_offset = next_offset + header.last_offset_delta
            metas.append(BatchMeta(next_offset, last_offset, header.max_timestamp, size))
            next_offset = last_offset + 1
            if header.max_timestamp > max_timestamp:
                max_timestamp = header.max_timestamp
            record_count += header.record_count
        self._append(headers, metas, buffers, len(view), now_ms, max_timestamp, record_count)
        self._assign_leader_epoch(leader_epoch, first_offset)
        if idempotent:
            self.transactions.apply(self.producer_state, headers, next_offset)
        else:
            self.producer_state.map_end_offset = next_offset
        return AppendInfo(
            first_offset,
            next_offset - 1,
            max_timestamp,
            append_time,
            self.log_start_offset,
            record_count,
            len(view),
        )

    def _check_producers(
        self, headers: list[BatchHeader], verification_guard: object | None
    ) -> AppendInfo | None:
        """Sequence/epoch checks; the original append's result if this is a retry."""
        staged: dict[int, ProducerEntry] = {}
        for header in headers:
            if header.producer_id < 0:
                continue
            duplicate = self.producer_state.check(header, staged, verification_guard)
            if duplicate is not None:
                if len(headers) != 1:
                    raise InvalidRecordError("a duplicate batch must be sent alone")
                return AppendInfo(
                    duplicate.first_offset,
                    duplicate.last_offset,
                    duplicate.timestamp,
                    -1,
                    self.log_start_offset,
                    header.record_count,
                    0,
                    duplicate=True,
                )
            self.producer_state.stage(header, staged)  # sequences of later batches
        return None

    def _assign_leader_epoch(self, leader_epoch: int, offset: int) -> None:
        latest = self.epoch_cache.latest_epoch
        if leader_epoch >= 0 and (latest is None or leader_epoch > latest):
            self.epoch_cache.assign(leader_epoch, offset)

    def append_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        leader_epoch: int,
    ) -> AppendInfo:
        """Append a COMMIT/ABORT control batch ending the producer's transaction (the
        checks and the format: transactions.marker_batch)."""
        now_ms, offset = self.clock(), self.log_end_offset
        marker = Marker(commit, coordinator_epoch)
        data = marker_batch(
            self.producer_state, producer_id, producer_epoch, marker, offset, leader_epoch, now_ms
        )
        header = batch_format.check_batch(data)
        meta = BatchMeta(offset, offset, now_ms, len(data))
        self._append([header], [meta], [data], len(data), now_ms, now_ms, 1)
        self._assign_leader_epoch(leader_epoch, offset)
        state, index_for = self.producer_state, self._active_txn_index
        self.transactions.apply(state, [header], offset + 1, lambda _: marker, index_for)
        return AppendInfo(offset, offset, now_ms, -1, self.log_start_offset, 1, len(data))

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> AppendInfo:
        """Append batches that already carry offsets and epochs (replication, recovery tools)."""
        view = memoryview(records)
        if not len(view):
            raise InvalidRecordError("empty append")
        headers = list(batch_format.iter_batches(view))
        expected = self.log_end_offset
        for header in headers:
            if header.base_offset < expected:
                raise UnexpectedAppendOffsetError(
                    f"{self.name}: batch offset {header.base_offset} below expected {expected}"
                )
            if header.last_offset_delta < 0:
                raise CorruptRecordError(f"{self.name}: negative last offset delta")
            expected = header.next_offset
        marker_of = markers_in(view, headers)
        metas = [BatchMeta(h.base_offset, h.last_offset, h.max_timestamp, h.size) for h in headers]
        max_timestamp = max(h.max_timestamp for h in headers)
        record_count = sum(h.record_count for h in headers)
        self._append(headers, metas, [view], len(view), self.clock(), max_timestamp, record_count)
        for header in headers:
            if header.partition_leader_epoch >= 0:
                self.epoch_cache.assign(header.partition_leader_epoch, header.base_offset)
        state, end = self.producer_state, self.log_end_offset
        self.transactions.apply(state, headers, end, marker_of, self._active_txn_index)
        return AppendInfo(
            headers[0].base_offset,
            headers[-1].last_offset,
            max(h.max_timestamp for h in headers),
            -1,
            self.log_start_offset,
            sum(h.record_count for h in headers),
            len(view),
        )

    def _append(
        self,
        headers: list[BatchHeader],
        metas: list[BatchMeta],
        buffers: list[bytes | memoryview],
        size: int,
        now_ms: int,
        max_timestamp: int,
        record_count: int,
    ) -> None:
        """Write batches whose offsets are final; the caller updates epochs and producers."""
        assert not self.closed
        segment = self._maybe_roll(
            size, metas[0].base_offset, metas[-1].last_offset, max_timestamp, now_ms
        )
        segment.append(metas, buffers, size)
        self.unflushed_messages += record_count
        if self.unflushed_messages >= self.config.flush_messages:
            self.flush()

    # -- rolling ---------------------------------------------------------------------
    def _maybe_roll(
        self, size: int, first_offset: int, last_offset: int, max_timestamp: int, now_ms: int
    ) -> LogSegment:
        segment = self._segments[-1]
        config = self.config
        if segment.size == 0:
            if segment.base_offset != first_offset:
                return self.roll(first_offset)  # a follower append that starts past a gap
            return segment
        # segment.ms is measured in record time when the segment has timestamps (as in
        # Kafka: incoming max timestamp minus the first batch's), else in wall time.
        started = segment.first_batch_timestamp
        if started is not None and started >= 0:
            age_ms = max_timestamp - started
        else:
            age_ms = now_ms - segment.created_ms
        if (
            segment.size + size > config.segment_bytes
            or age_ms > config.segment_ms - config.segment_jitter_ms
            or segment.indexes_full
            or last_offset - segment.base_offset > RELATIVE_OFFSET_MAX
        ):
            return self.roll(first_offset)
        return segment

    def roll(self, new_base_offset: int | None = None) -> LogSegment:
        """Start a new active segment at ``new_base_offset`` (default: the log end)."""
        base = self.log_end_offset if new_base_offset is None else new_base_offset
        assert base >= self.log_end_offset
        old = self._segments[-1]
        if old.size == 0:
            # An empty active segment is replaced rather than kept behind the new one.
            self._segments.pop()
            self._bases.pop()
            old.delete_files()
        else:
            old.on_become_inactive()
        self.producer_state.map_end_offset = self.log_end_offset if self._segments else base
        segment = LogSegment(
            self.directory,
            base,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_bytes=self.config.segment_index_bytes,
            created_ms=self.clock(),
        )
        self._segments.append(segment)
        self._bases.append(base)
        if old.size:
            # Queued after the new files exist: creating them while the worker fsyncs
            # the directory waited for that journal commit (roll p90 1.3 -> 7 ms).
            self.producer_state.take_snapshot()
        return segment

    # -- reads -----------------------------------------------------------------------
    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> ReadInfo:
        """Byte ranges of whole batches from the batch holding ``offset``.

        ``max_offset`` (exclusive; the HW for consumers, None for followers) bounds
        what is visible. Reads from a single segment, as Kafka does; the caller asks
        again from the next offset. OffsetOutOfRangeError outside [start, end].
        """
        end = self.log_end_offset
        if offset < self.log_start_offset or offset > end:
            raise OffsetOutOfRangeError(
                f"{self.name}: offset {offset} outside [{self.log_start_offset}, {end}]"
            )
        limit = end if max_offset is None else min(max_offset, end)
        result = ReadInfo([], None, self.log_start_offset, end, self._high_watermark)
        if offset >= limit:
            return result
        index = max(bisect.bisect_right(self._bases, offset) - 1, 0)
        for segment in self._segments[index:]:
            if segment.base_offset >= limit:
                break
            found = segment.read_with_first(offset, max_bytes, limit, min_one_batch)
            if found is not None:
                file_range, first = found
                if file_range.length:
                    result.ranges.append(file_range)
                    result.first_batch_offset = first.base_offset
                return result
        return result

    def iter_headers(
        self, start_offset: int, end_offset: int | None = None
    ) -> Iterator[BatchHeader]:
        """Headers of batches ending at/after ``start_offset``, starting below ``end_offset``."""
        index = max(bisect.bisect_right(self._bases, start_offset) - 1, 0)
        for segment in self._segments[index:]:
            if end_offset is not None and segment.base_offset >= end_offset:
                return
            first = segment.translate_offset(start_offset)
            if first is None:
                continue
            for header in segment.iter_headers(first.position):
                if end_offset is not None and header.base_offset >= end_offset:
                    return
                yield header

    def read_batches(self, start_offset: int, end_offset: int | None = None) -> Iterator[bytes]:
        """Raw bytes of each batch (tools, compaction, tests): not for the fetch path."""
        for header in self.iter_headers(start_offset, end_offset):
            segment = self.segment_for(header.base_offset)
            assert segment is not None
            yield os.pread(segment.fd, header.size, header.position)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= ``timestamp``."""
        for segment in self._segments:
            if segment.max_timestamp < timestamp or segment.next_offset <= self.log_start_offset:
                continue
            found = segment.find_offset_by_timestamp(timestamp, self.log_start_offset)
            if found is not None:
                return found
        return None

    def max_timestamp_and_offset(self) -> tuple[int, int]:
        """(max timestamp, offset of the batch holding it): ListOffsets MAX_TIMESTAMP."""
        best = (NO_TIMESTAMP, -1)
        for segment in self._segments:
            if segment.size and segment.max_timestamp > best[0]:
                best = (segment.max_timestamp, segment.offset_of_max_timestamp)
        return best

    # -- transactions (transactions.py) ---------------------------------------------
    @property
    def first_unstable_offset(self) -> int | None:
        """First offset of the oldest open transaction, or completed with marker >= HW."""
        first = self.transactions.first_unstable_offset
        return None if first is None else max(first, self.log_start_offset)

    @property
    def last_stable_offset(self) -> int:
        first = self.first_unstable_offset
        return self._high_watermark if first is None else min(first, self._high_watermark)

    def collect_aborted_transactions(
        self, start_offset: int, upper_bound_offset: int
    ) -> list[AbortedTxn]:
        """Aborted transactions overlapping [start, upper bound) (read_committed fetch)."""
        index = max(bisect.bisect_right(self._bases, start_offset) - 1, 0)
        return collect_aborted(self._segments[index:], start_offset, upper_bound_offset)

    def _active_txn_index(self, offset: int) -> TransactionIndex:
        return self._segments[-1].txn_index  # where every append lands

    # -- epochs ----------------------------------------------------------------------
    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (largest epoch <= ``epoch``, its end offset)."""
        found_epoch, offset = self.epoch_cache.end_offset_for(epoch, self.log_end_offset)
        if found_epoch == UNDEFINED_EPOCH:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        return found_epoch, offset

    @property
    def latest_epoch(self) -> int | None:
        return self.epoch_cache.latest_epoch

    # -- truncation --------------------------------------------------------------------
    def truncate_to(self, offset: int) -> bool:
        """Remove every batch holding offsets >= ``offset`` (follower reconciliation)."""
        if offset < 0:
            raise OffsetOutOfRangeError(f"{self.name}: cannot truncate to {offset}")
        if offset >= self.log_end_offset:
            # No batch to remove, but an epoch may start at the log end with no record
            # in it: this replica led that epoch and lost the lead before it appended.
            # A leader that never had that epoch answers a fetch naming it as the
            # last fetched epoch with a divergence at the end of the epoch before —
            # this very offset — so the entry must go here, or the follower sends the
            # same epoch again and truncates to the same offset for ever.
            self.epoch_cache.truncate_from_end(self.log_end_offset)
            return False
        if offset <= self._segments[0].base_offset:
            self.truncate_fully_and_start_at(offset)
            return True
        while self._segments[-1].base_offset >= offset:
            segment = self._segments.pop()
            self._bases.pop()
            segment.delete_files()
        self._segments[-1].truncate_to(offset)
        self._after_truncation()
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop all data; the log restarts empty at ``offset``."""
        for segment in self._segments:
            segment.delete_files()
        self._segments, self._bases = [], []
        self.epoch_cache.clear()
        self.producer_state.delete_snapshots(above=-1)
        self.producer_state.reset(offset)
        self._segments.append(
            LogSegment(
                self.directory,
                offset,
                index_interval_bytes=self.config.index_interval_bytes,
                max_index_bytes=self.config.segment_index_bytes,
                created_ms=self.clock(),
            )
        )
        self._bases.append(offset)
        self.log_start_offset = offset
        self._after_truncation()

    def _after_truncation(self) -> None:
        end = self.log_end_offset
        self.epoch_cache.truncate_from_end(end)
        self.log_start_offset = min(self.log_start_offset, end)  # start <= HW <= end
        self.recovery_point = min(self.recovery_point, end)
        self._high_watermark = min(self._high_watermark, end)
        self.rebuild_producer_state()

    def rebuild_producer_state(self) -> None:
        """Newest snapshot at or below the log end, then replay the headers after it."""
        end = self.log_end_offset
        state = self.producer_state
        state.delete_snapshots(above=end)
        state.load_latest_snapshot(end)
        start = max(state.map_end_offset, self.log_start_offset)
        if state.map_end_offset < self.log_start_offset:
            state.reset(self.log_start_offset)
        self.transactions.reset(state.producers.values(), start)
        self.transactions.apply(state, self.iter_headers(start), end, disk_marker_of(self))
        self.transactions.on_high_watermark(self._high_watermark)

    # -- retention and log start offset ------------------------------------------------
    def increment_log_start_offset(self, offset: int) -> bool:
        """DeleteRecords: advance the log start offset (never past the high watermark)."""
        if offset > self._high_watermark:
            raise OffsetOutOfRangeError(
                f"{self.name}: log start offset {offset} "
                f"beyond high watermark {self._high_watermark}"
            )
        if offset <= self.log_start_offset:
            return False
        self.log_start_offset = offset
        self.epoch_cache.truncate_from_start(offset)
        self._delete_segments(lambda segment, next_base: next_base <= self.log_start_offset)
        return True

    def delete_old_segments(self) -> int:
        """Apply retention.ms, retention.bytes and the log start offset; returns segments removed.

        Only whole, inactive segments below the high watermark are deleted.
        """
        deleted = self._delete_segments(
            lambda segment, next_base: next_base <= self.log_start_offset
        )
        if not self.config.is_deleting:
            return deleted
        now_ms = self.clock()
        retention_ms = self.config.retention_ms
        if retention_ms >= 0:
            deleted += self._delete_segments(
                lambda segment, next_base: now_ms - _segment_timestamp(segment) > retention_ms
            )
        retention_bytes = self.config.retention_bytes
        if retention_bytes >= 0:
            excess = self.size - retention_bytes

            def over_size(segment: LogSegment, next_base: int) -> bool:
                nonlocal excess
                if excess - segment.size < 0:
                    return False
                excess -= segment.size
                return True

            deleted += self._delete_segments(over_size)
        return deleted

    def _delete_segments(self, predicate: Callable[[LogSegment, int], bool]) -> int:
        count = 0
        while len(self._segments) > 1:
            segment, next_base = self._segments[0], self._bases[1]
            if next_base > self._high_watermark or not predicate(segment, next_base):
                break
            self._segments.pop(0)
            self._bases.pop(0)
            segment.rename_to_deleted()
            self.pending_deletions.append(
                (self.clock() + self.config.file_delete_delay_ms, segment)
            )
            count += 1
        if count:
            first = self._segments[0].base_offset
            self.log_start_offset = max(self.log_start_offset, first)
            self.epoch_cache.truncate_from_start(self.log_start_offset)
            self.producer_state.delete_snapshots(below=first)
            self.recovery_point = max(self.recovery_point, first)
            logger.info("%s: deleted %d segment(s); log start offset %d", self.name, count, first)
        return count

    def purge_deleted_segments(self, force: bool = False) -> int:
        """Unlink segments whose delete delay has passed (all of them when ``force``)."""
        due = self.take_due_deletions(force)
        for segment in due:
            segment.delete_files()
        return len(due)

    def take_due_deletions(self, force: bool = False) -> list[LogSegment]:
        """Segments whose delete delay has passed, handed over for ``delete_files``.

        They are no longer part of the log, so the caller may close and unlink them
        on a worker thread.
        """
        now_ms = self.clock()
        due = [s for t, s in self.pending_deletions if force or t <= now_ms]
        self.pending_deletions = [
            (t, s) for t, s in self.pending_deletions if not (force or t <= now_ms)
        ]
        return due

    # -- flushing ------------------------------------------------------------------
    def prepare_flush(self) -> tuple[list[LogSegment], int]:
        """On the loop: write staged index entries; returns segments to fsync and the target."""
        target = self.log_end_offset
        segments = [s for s in self._segments if s.next_offset > self.recovery_point or s.size == 0]
        for segment in segments:
            segment.write_indexes()
        return segments, target

    @property
    def flush_barrier(self) -> int:
        """Taken with ``prepare_flush``: ``files.wait`` on it before ``mark_flushed``."""
        return self.files.last_seq

    def mark_flushed(self, target: int) -> None:
        self.recovery_point = max(self.recovery_point, min(target, self.log_end_offset))
        self.unflushed_messages = 0
        self.last_flush_ms = self.clock()

    def flush(self) -> None:
        """fsync everything up to the log end, synchronously."""
        segments, target = self.prepare_flush()
        for segment in segments:
            segment.fsync()
        self.files.drain()
        self.files.sync_unsynced()
        self.mark_flushed(target)

    @property
    def flush_due(self) -> bool:
        return (
            self.recovery_point < self.log_end_offset
            and self.clock() - self.last_flush_ms >= self.config.flush_ms
        )

    # -- lifecycle -------------------------------------------------------------------
    def update_config(self, config: LogConfig) -> None:
        self.config = config
        self._target_codec = target_codec(config)
        self._log_append_time = config.uses_log_append_time

    def close(self) -> None:
        """Write indexes, a producer snapshot at the log end, and close every file."""
        if self.closed:
            return
        for segment in self._segments:
            segment.write_indexes()
        self.producer_state.map_end_offset = self.log_end_offset
        self.producer_state.take_snapshot()
        self.files.drain()  # nothing may land in the directory after close
        try:
            self.files.sync_unsynced()  # a failure (full disk) still closes the files
        finally:
            self.purge_deleted_segments(force=True)
            for segment in self._segments:
                segment.close()
            self.closed = True

    def delete_files(self) -> None:
        """Close and remove every file of this log (the directory itself stays)."""
        self.files.drain()
        self.purge_deleted_segments(force=True)
        for segment in self._segments:
            segment.delete_files()
        self.closed = True

    def __repr__(self) -> str:
        return (
            f"Log({self.name}, start={self.log_start_offset}, hw={self._high_watermark}, "
            f"end={self.log_end_offset}, segments={len(self._segments)})"
        )


def _segment_timestamp(segment: LogSegment) -> int:
    """A segment's age reference for retention.ms: its largest timestamp, else its mtime."""
    if segment.max_timestamp != NO_TIMESTAMP:
        return segment.max_timestamp
    return int(os.fstat(segment.fd).st_mtime * 1000) if segment.fd >= 0 else 0


__all__ = [
    "HEADER_SIZE",
    "AppendInfo",
    "Log",
    "ReadInfo",
    "check_batch",
]
