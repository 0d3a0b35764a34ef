"""Log: one partition's log as the layers above see it (Kafka's UnifiedLog).

How this works and why: the Log owns what a partition's offsets mean — the log start
offset <= high watermark <= log end offset, the last stable offset, leader epochs and
producer state — and keeps its bytes in a LocalLog (local_log.py: the segments on this
broker's disk, rolling, reads, truncation, the atomic segment swap, flushing). The
local log may start above the log start offset: that gap is what tiered storage keeps
remotely (``local_log_start_offset``).

An append as leader validates each batch's header and CRC, checks idempotent
producers' sequences, assigns offsets by rewriting the 16-byte prefix of each batch
(base offset, length, leader epoch, all outside the CRC), and writes prefix + original
bytes with one ``pwritev``. Records are decoded only when the topic demands it (a
compression type other than ``producer``). Transactions (open ones, markers, the last
stable offset, aborted lists from the ``.txnindex`` files) are kept by transactions.py.

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

import logging
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
from odradek.storage import retention
from odradek.storage.deferred_files import DeferredFiles
from odradek.storage.epoch_cache import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, LeaderEpochCache
from odradek.storage.errors import (
    InvalidRecordError,
    OffsetOutOfRangeError,
    UnexpectedAppendOffsetError,
)
from odradek.storage.local_log import LocalLog
from odradek.storage.log_config import LogConfig
from odradek.storage.log_validator import (
    CheckedRecords,
    check_keys,
    recompress,
    target_codec,
    validate_client_batches,
)
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
        self.local = LocalLog(
            directory, config, segments, recovery_point=recovery_point, clock=clock
        )
        self.directory = directory
        self.config = config
        self._target_codec = target_codec(config)  # None: keep the producer's codec
        self._log_append_time = config.uses_log_append_time
        self.clock = clock
        # A tiered log keeps its start below the local one (remote storage holds the
        # gap); any other log starts where its disk does.
        local_start = self.local.start_offset
        self.log_start_offset = (
            log_start_offset if config.remote_storage_enable else max(log_start_offset, local_start)
        )
        # Tiered storage: the last offset copied to remote storage (-1: none), set by
        # the RemoteLogManager; local retention never passes it.
        self.highest_offset_in_remote = -1
        # The checkpointed log start, until the topic's own config arrives (the logs
        # load with the broker defaults): a tiered topic's starts below its disk's.
        self._checkpointed_start: int | None = log_start_offset
        self._high_watermark = self.log_start_offset
        self.epoch_cache = epoch_cache
        self.producer_state = producer_state
        self.transactions = TransactionTracker()
        # The queue of small-file writes the epoch cache and producer state share.
        self.files: DeferredFiles = producer_state.files

    # -- identity and offsets --------------------------------------------------------
    @property
    def name(self) -> str:
        return self.directory.name

    @property
    def segments(self) -> list[LogSegment]:
        return self.local.segments

    @property
    def active_segment(self) -> LogSegment:
        return self.local.active_segment

    @property
    def log_end_offset(self) -> int:
        return self.local.log_end_offset

    @property
    def local_log_start_offset(self) -> int:
        """The first offset on this broker's disk (>= log start offset; below it,
        remote storage when the topic is tiered)."""
        return max(self.log_start_offset, self.local.start_offset)

    @property
    def size(self) -> int:
        return self.local.size

    @property
    def recovery_point(self) -> int:
        return self.local.recovery_point

    @property
    def unflushed_messages(self) -> int:
        return self.local.unflushed_messages

    @property
    def last_flush_ms(self) -> int:
        return self.local.last_flush_ms

    @property
    def pending_deletions(self) -> list[tuple[int, LogSegment]]:
        return self.local.pending_deletions

    @property
    def closed(self) -> bool:
        return self.local.closed

    @closed.setter
    def closed(self, value: bool) -> None:
        self.local.closed = value

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, offset: int) -> None:
        """Set by the replication layer; clamped to [log start offset, log end offset]."""
        self._high_watermark = min(max(offset, self.log_start_offset), self.log_end_offset)
        self.transactions.on_high_watermark(self._high_watermark)

    def segment_for(self, offset: int) -> LogSegment | None:
        return self.local.segment_for(offset)

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
        if self.config.is_compacted and not coordinator and not isinstance(records, CheckedRecords):
            check_keys(view, headers, self.config, name=self.name)
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
        self._append(metas, buffers, len(view), now_ms, max_timestamp, record_count)
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
        self._append([meta], [data], len(data), now_ms, now_ms, 1)
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
        self._append(metas, [view], len(view), self.clock(), max_timestamp, record_count)
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
        metas: list[BatchMeta],
        buffers: list[bytes | memoryview],
        size: int,
        now_ms: int,
        max_timestamp: int,
        record_count: int,
    ) -> None:
        """Write batches whose offsets are final; the caller updates epochs and producers."""
        first, last = metas[0].base_offset, metas[-1].last_offset
        if self.local.needs_roll(size, first, last, max_timestamp, now_ms):
            self.roll(first)
        self.local.append(metas, buffers, size, record_count, self.local.active_segment)
        if self.local.unflushed_messages >= self.config.flush_messages:
            self.flush()

    def roll(self, new_base_offset: int | None = None) -> LogSegment:
        """Start a new active segment at ``new_base_offset`` (default: the log end);
        a producer snapshot marks where the old one ended."""
        base = self.log_end_offset if new_base_offset is None else new_base_offset
        segment, had_data = self.local.roll(base)
        segments = self.local.segments
        self.producer_state.map_end_offset = segments[-2].next_offset if len(segments) > 1 else base
        if had_data:
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
        found = self.local.read(offset, max_bytes, limit, min_one_batch)
        if found is not None:
            file_range, first = found
            if file_range.length:
                result.ranges.append(file_range)
                result.first_batch_offset = first.base_offset
        return result

    def iter_headers(
        self, start_offset: int, end_offset: int | None = None
    ) -> Iterator[BatchHeader]:
        """Headers of batches ending at/after ``start_offset``, starting below ``end_offset``."""
        return self.local.iter_headers(start_offset, end_offset)

    def read_batches(self, start_offset: int, end_offset: int | None = None) -> Iterator[bytes]:
        """Raw bytes of each batch (tools, compaction, tests): not for the fetch path."""
        return self.local.read_batches(start_offset, end_offset)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= ``timestamp``."""
        return self.local.offset_for_timestamp(timestamp, self.log_start_offset)

    def max_timestamp_and_offset(self) -> tuple[int, int]:
        """(max timestamp, offset of the batch holding it): ListOffsets MAX_TIMESTAMP."""
        return self.local.max_timestamp_and_offset()

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
        segments = self.local.segments_from(start_offset)
        return collect_aborted(segments, start_offset, upper_bound_offset)

    def _active_txn_index(self, offset: int) -> TransactionIndex:
        return self.local.active_segment.txn_index  # where every append lands

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
        if offset <= self.local.start_offset:
            self.truncate_fully_and_start_at(offset)
            return True
        self.local.truncate_to(offset)
        self._after_truncation()
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop all data; the log restarts empty at ``offset``."""
        self.local.truncate_fully_and_start_at(offset)
        self.epoch_cache.clear()
        self.producer_state.delete_snapshots(above=-1)
        self.producer_state.reset(offset)
        self.log_start_offset = offset
        self._after_truncation()

    def _after_truncation(self) -> None:
        end = self.log_end_offset
        self.epoch_cache.truncate_from_end(end)
        self.log_start_offset = min(self.log_start_offset, end)  # start <= HW <= end
        self._high_watermark = min(self._high_watermark, end)
        self.rebuild_producer_state()

    def rebuild_producer_state(self) -> None:
        """Newest snapshot at or below the log end, then replay the headers after it."""
        end = self.log_end_offset
        state = self.producer_state
        state.delete_snapshots(above=end)
        state.load_latest_snapshot(end)
        start = max(state.map_end_offset, self.local_log_start_offset)
        if state.map_end_offset < self.local_log_start_offset:
            state.reset(self.local_log_start_offset)
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
        self.delete_segments(lambda segment, next_base: next_base <= self.log_start_offset)
        return True

    def delete_old_segments(self) -> int:
        """Apply the log start offset, retention.ms and retention.bytes (retention.py);
        returns the number of segments removed."""
        return retention.delete_old_segments(self)

    def delete_segments(self, predicate: Callable[[LogSegment, int], bool]) -> int:
        removed = self.local.delete_segments_from_start(predicate, self._high_watermark)
        if removed:
            first = self.local.start_offset
            if not self.config.remote_storage_enable:  # tiered: the remote start stays
                self.log_start_offset = max(self.log_start_offset, first)
            self.epoch_cache.truncate_from_start(self.log_start_offset)
            self.producer_state.delete_snapshots(below=first)
            logger.info(
                "%s: deleted %d segment(s); log start offset %d", self.name, len(removed), first
            )
        return len(removed)

    def purge_deleted_segments(self, force: bool = False) -> int:
        """Unlink segments whose delete delay has passed (all of them when ``force``)."""
        return self.local.purge_deleted_segments(force)

    def take_due_deletions(self, force: bool = False) -> list[LogSegment]:
        """Segments whose delete delay has passed, handed over for ``delete_files``.

        They are no longer part of the log, so the caller may close and unlink them
        on a worker thread.
        """
        return self.local.take_due_deletions(force)

    # -- flushing ------------------------------------------------------------------
    def prepare_flush(self) -> tuple[list[LogSegment], int]:
        """On the loop: write staged index entries; returns segments to fsync and the target."""
        return self.local.prepare_flush()

    @property
    def flush_barrier(self) -> int:
        """Taken with ``prepare_flush``: ``files.wait`` on it before ``mark_flushed``."""
        return self.files.last_seq

    def mark_flushed(self, target: int) -> None:
        self.local.mark_flushed(target)

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
        return self.local.flush_due

    # -- lifecycle -------------------------------------------------------------------
    def update_config(self, config: LogConfig) -> None:
        start, self._checkpointed_start = self._checkpointed_start, None
        if start is not None and start < self.log_start_offset:
            if config.remote_storage_enable and self.log_start_offset == self.local.start_offset:
                self.log_start_offset = start  # tiered: remote storage holds the gap
            else:  # the loader kept the epochs from there (log_loader.py)
                self.epoch_cache.truncate_from_start(self.log_start_offset)
        self.config = config
        self.local.config = config
        self._target_codec = target_codec(config)
        self._log_append_time = config.uses_log_append_time

    def close(self) -> None:
        """Write indexes, a producer snapshot at the log end, and close every file."""
        if self.closed:
            return
        self.local.write_indexes()
        self.producer_state.map_end_offset = self.log_end_offset
        self.producer_state.take_snapshot()
        self.files.drain()  # nothing may land in the directory after close
        try:
            self.files.sync_unsynced()  # a failure (full disk) still closes the files
        finally:
            self.local.close()

    def delete_files(self) -> None:
        """Close and remove every file of this log (the directory itself stays)."""
        self.files.drain()
        self.local.delete_files()

    def __repr__(self) -> str:
        return (
            f"Log({self.name}, start={self.log_start_offset}, hw={self._high_watermark}, "
            f"end={self.log_end_offset}, segments={len(self.local.segments)})"
        )


__all__ = [
    "HEADER_SIZE",
    "AppendInfo",
    "Log",
    "ReadInfo",
    "check_batch",
]
