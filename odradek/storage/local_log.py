"""LocalLog: the segments of one partition that live on this broker's disk.

How this works and why: the files half of a partition's log, under the Log (log.py)
that owns the meaning of its offsets. A LocalLog is a list of LogSegments sorted by
base offset; only the last (active) one takes appends. It knows how to write batches
whose offsets are already final, roll to a new segment, read byte ranges for fetches,
walk batch headers, truncate from the end, remove whole segments from the front
(renamed ``.deleted`` first, unlinked after ``file.delete.delay.ms`` so in-flight
sendfile ranges stay valid), replace a run of segments by another one (the cleaner's
atomic swap), and flush (fsync up to a recovery point).

It does not know about producers, leader epochs, the high watermark or retention
policies; it never decides which offsets are visible. Its first segment's base offset
is the *local* log start: below it, data is either deleted or (with tiered storage)
in remote storage, which the Log decides.

Concurrency: every method runs on the event loop that owns the log; ``fsync`` of the
segments that ``prepare_flush`` returns may run on a worker thread.
"""

from __future__ import annotations

import bisect
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

from odradek.records.batch import NO_TIMESTAMP, BatchHeader
from odradek.records.file_range import FileRange
from odradek.storage.log_config import LogConfig
from odradek.storage.segment import BatchMeta, LogSegment

logger = logging.getLogger(__name__)

RELATIVE_OFFSET_MAX: Final = 0x7FFFFFFF  # index entries store offset - base as int32


class LocalLog:
    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        segments: list[LogSegment],
        *,
        recovery_point: int,
        clock: Callable[[], int],
    ) -> None:
        assert segments, "a log always has an active segment"
        self.directory = directory
        self.config = config
        self.clock = clock
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self.recovery_point = min(recovery_point, self.log_end_offset)
        self.unflushed_messages = 0
        self.last_flush_ms = clock()
        self.pending_deletions: list[tuple[int, LogSegment]] = []
        self.closed = False
        # Bumped by every truncation: work prepared against the segments before one
        # (a clean) must not be installed after it.
        self.truncations = 0

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
    def start_offset(self) -> int:
        """The local log start: the first local segment's base offset."""
        return self._segments[0].base_offset

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def size(self) -> int:
        return sum(s.size for s in self._segments)

    def segment_for(self, offset: int) -> LogSegment | None:
        index = bisect.bisect_right(self._bases, offset) - 1
        return self._segments[index] if index >= 0 else None

    def segments_from(self, offset: int) -> list[LogSegment]:
        """Segments that may hold ``offset`` or later ones (the first may start below)."""
        return self._segments[max(bisect.bisect_right(self._bases, offset) - 1, 0) :]

    def next_base_after(self, segment: LogSegment) -> int:
        """Where the segment after ``segment`` starts (the log end for the active one)."""
        index = bisect.bisect_left(self._bases, segment.base_offset)
        if index + 1 < len(self._bases):
            return self._bases[index + 1]
        return self.log_end_offset

    # -- appends -------------------------------------------------------------------
    def append(
        self,
        metas: list[BatchMeta],
        buffers: list[bytes | memoryview],
        size: int,
        record_count: int,
        segment: LogSegment,
    ) -> None:
        """Write batches whose offsets are final into ``segment`` (from ``segment_to_append``)."""
        assert not self.closed
        segment.append(metas, buffers, size)
        self.unflushed_messages += record_count

    def needs_roll(
        self, size: int, first_offset: int, last_offset: int, max_timestamp: int, now_ms: int
    ) -> bool:
        """Whether an append of ``size`` bytes must start a new segment (Kafka's rules)."""
        segment = self._segments[-1]
        if segment.size == 0:
            return segment.base_offset != first_offset  # a follower append past a gap
        # segment.ms is measured in record time when the segment has timestamps (as in
        # Kafka: incoming max timestamp minus the first batch's), else in wall time.
        started = segment.first_batch_timestamp
        if started is not None and started >= 0:
            age_ms = max_timestamp - started
        else:
            age_ms = now_ms - segment.created_ms
        config = self.config
        return (
            segment.size + size > config.segment_bytes
            or age_ms > config.segment_ms - config.segment_jitter_ms
            or segment.indexes_full
            or last_offset - segment.base_offset > RELATIVE_OFFSET_MAX
        )

    def roll(self, base: int) -> tuple[LogSegment, bool]:
        """Start a new active segment at ``base``; returns it and whether the old one
        held data (an empty active segment is replaced rather than kept behind)."""
        assert base >= self.log_end_offset
        old = self._segments[-1]
        had_data = old.size > 0
        if had_data:
            old.on_become_inactive()
        else:
            self._segments.pop()
            self._bases.pop()
            old.delete_files()
        segment = self.new_segment(base)
        self._segments.append(segment)
        self._bases.append(base)
        return segment, had_data

    def new_segment(self, base: int) -> LogSegment:
        return LogSegment(
            self.directory,
            base,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_bytes=self.config.segment_index_bytes,
            created_ms=self.clock(),
        )

    # -- reads -----------------------------------------------------------------------
    def read(
        self, offset: int, max_bytes: int, limit: int, min_one_batch: bool
    ) -> tuple[FileRange, BatchHeader] | None:
        """The byte range of whole batches from the batch holding ``offset``, below
        ``limit``; from a single segment, as Kafka does (the caller asks again)."""
        for segment in self.segments_from(offset):
            if segment.base_offset >= limit:
                break
            found = segment.read_with_first(offset, max_bytes, limit, min_one_batch)
            if found is not None:
                return found
        return None

    def iter_headers(
        self, start_offset: int, end_offset: int | None = None
    ) -> Iterator[BatchHeader]:
        """Headers of batches ending at/after ``start_offset``, starting below ``end_offset``."""
        for segment in self.segments_from(start_offset):
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

    def offset_for_timestamp(self, timestamp: int, start_offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record >= ``start_offset`` with timestamp
        >= ``timestamp``."""
        for segment in self._segments:
            if segment.max_timestamp < timestamp or segment.next_offset <= start_offset:
                continue
            found = segment.find_offset_by_timestamp(timestamp, start_offset)
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

    # -- truncation from the end -----------------------------------------------------
    def truncate_to(self, offset: int) -> None:
        """Remove every batch holding offsets >= ``offset``; ``offset`` must lie above
        the first segment's base (else ``truncate_fully_and_start_at``)."""
        assert offset > self._segments[0].base_offset
        self.truncations += 1
        while self._segments[-1].base_offset >= offset:
            segment = self._segments.pop()
            self._bases.pop()
            segment.delete_files()
        self._segments[-1].truncate_to(offset)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment; the log restarts empty at ``offset``."""
        self.truncations += 1
        for segment in self._segments:
            segment.delete_files()
        self._segments = [self.new_segment(offset)]
        self._bases = [offset]
        self.recovery_point = min(self.recovery_point, offset)

    # -- removal from the front and replacement --------------------------------------
    def delete_segments_from_start(
        self, predicate: Callable[[LogSegment, int], bool], upper_bound: int
    ) -> list[LogSegment]:
        """Remove leading inactive segments while ``predicate(segment, next base)``
        holds and the next base is <= ``upper_bound``; the files are renamed
        ``.deleted`` now and unlinked after ``file.delete.delay.ms``."""
        removed: list[LogSegment] = []
        while len(self._segments) > 1:
            segment, next_base = self._segments[0], self._bases[1]
            if next_base > upper_bound or not predicate(segment, next_base):
                break
            self._segments.pop(0)
            self._bases.pop(0)
            self._schedule_deletion(segment)
            removed.append(segment)
        if removed:
            self.recovery_point = max(self.recovery_point, self._segments[0].base_offset)
        return removed

    def replace_segments(self, new: LogSegment, old: list[LogSegment]) -> None:
        """Put ``new`` where the consecutive inactive segments ``old`` were (the
        cleaner's swap: the files are already renamed; ``old`` go to deletion)."""
        first = self._segments.index(old[0])
        assert self._segments[first : first + len(old)] == old, "old segments not consecutive"
        assert first + len(old) < len(self._segments), "the active segment is never replaced"
        assert new.base_offset == old[0].base_offset
        self._segments[first : first + len(old)] = [new]
        self._bases[first : first + len(old)] = [new.base_offset]
        for segment in old:
            if not segment.deleted:
                segment.rename_to_deleted()
            self.pending_deletions.append(
                (self.clock() + self.config.file_delete_delay_ms, segment)
            )

    def _schedule_deletion(self, segment: LogSegment) -> None:
        segment.rename_to_deleted()
        self.pending_deletions.append((self.clock() + self.config.file_delete_delay_ms, segment))

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

    def purge_deleted_segments(self, force: bool = False) -> int:
        """Unlink segments whose delete delay has passed (all of them when ``force``)."""
        due = self.take_due_deletions(force)
        for segment in due:
            segment.delete_files()
        return len(due)

    # -- flushing ------------------------------------------------------------------
    def prepare_flush(self) -> tuple[list[LogSegment], int]:
        """On the loop: write staged index entries; returns segments to fsync and the target."""
        target = self.log_end_offset
        segments = [s for s in self._segments if s.next_offset > self.recovery_point or s.size == 0]
        for segment in segments:
            segment.write_indexes()
        return segments, target

    def mark_flushed(self, target: int) -> None:
        self.recovery_point = max(self.recovery_point, min(target, self.log_end_offset))
        self.unflushed_messages = 0
        self.last_flush_ms = self.clock()

    @property
    def flush_due(self) -> bool:
        return (
            self.recovery_point < self.log_end_offset
            and self.clock() - self.last_flush_ms >= self.config.flush_ms
        )

    # -- lifecycle -------------------------------------------------------------------
    def write_indexes(self) -> None:
        for segment in self._segments:
            segment.write_indexes()

    def close(self) -> None:
        """Unlink pending deletions and close every segment's files."""
        try:
            self.purge_deleted_segments(force=True)
        finally:
            for segment in self._segments:
                segment.close()
            self.closed = True

    def delete_files(self) -> None:
        """Close and remove every file of this log (the directory itself stays)."""
        self.purge_deleted_segments(force=True)
        for segment in self._segments:
            segment.delete_files()
        self.closed = True
