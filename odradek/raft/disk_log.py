"""DiskRaftLog: the metadata log's ``RaftLog`` on ``storage.Log`` and its epoch cache.

How this works and why: ``__cluster_metadata-0`` is a partition directory like any other
(segments, indexes, ``leader-epoch-checkpoint``), so the consensus core's log reuses the
storage layer instead of a file format of its own. Each ``LogEntry`` is one v2 batch
(log.py's payload contract):

* a leader's data entry goes through ``Log.append_as_leader`` with the entry's epoch,
  which validates the batch (CRC, record count, size, timestamps) and stamps baseOffset
  and partitionLeaderEpoch in place; the assigned offset is asserted to be the entry's.
  The core's own control batches (LeaderChange) are stamped here and written with
  ``append_as_follower``, because the leader path refuses control batches from clients;
* a follower's entries (the leader's stamped bytes) go through ``append_as_follower``
  unchanged, so replicas are byte-identical;
* the epoch of a new epoch's first entry is written to the epoch cache *before* the
  batch (write-ahead): a crash can then leave the cache ahead of the log, which opening
  trims to the log end, but never a batch whose epoch the cache does not know;
* ``read`` walks batch headers from the segment holding the offset and preads whole
  batches, one pread per segment touched; entry sizes count as ``len(batch) + 61``,
  exactly as ``MemoryRaftLog`` counts them;
* ``end_offset_for_epoch`` is the epoch cache's lookup under the snapshot's
  ``(start_offset, start_epoch)`` floor; ``epoch_at`` is the cache's range lookup;
* ``delete_before`` moves the log start offset (whole segments below it are deleted
  by the storage log's start-offset deletion); ``reset_to`` deletes everything and
  restarts the log empty at the snapshot's end.

The log start and its epoch live in ``raft-log-start-checkpoint`` (checkpoint.py's
format: version 0, one ``startOffset startEpoch`` entry), written atomically and
durably *before* the segments change, so after a crash the intent is known: segments
wholly below the start are deleted again, and a log whose entries do not continue the
start (a ``reset_to`` cut short: the start is past the log end, inside a batch, or
followed by an older epoch) is wiped and restarted at the start, as the reset meant.

Reopening: ``open`` runs storage recovery (``open_log``: a torn tail after the
recovery point is cut at the last whole batch), trims the epoch cache to the recovered
log (and re-reads the tail's headers if the cache lacks the last batch's epoch), and
everything it kept counts as flushed: ``flushed_offset`` is the recovered end.
``recovery_point``/``clean_shutdown`` are what ``LogManager`` found for the directory;
the defaults (0, unclean) re-check every batch, which is always safe.

Concurrency: one owner, the event loop. ``flush`` fsyncs synchronously; the split
``prepare_flush()`` / ``PendingFlush.fsync()`` (on a worker thread) / ``mark_flushed``
lets the asyncio adapter fsync off the loop, as ``LocalMetadataWriter`` does. A
truncation between prepare and mark voids the pending flush (its target may now
name different, unsynced bytes).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from odradek.raft.log import LogEntry, OffsetAndEpoch, SnapshotId, end_offset_for_epoch, stamped
from odradek.records.batch import BatchHeader, parse_header
from odradek.storage.checkpoint import (
    INT32_MAX,
    INT64_MAX,
    expect_fields,
    parse_int_field,
    read_checkpoint_lines,
    write_checkpoint_lines,
)
from odradek.storage.deferred_files import fsync_directory
from odradek.storage.log import Log
from odradek.storage.log_config import LogConfig
from odradek.storage.log_loader import LoadStats, open_log
from odradek.storage.segment import LogSegment

logger = logging.getLogger(__name__)

METADATA_PARTITION_DIR: Final = "__cluster_metadata-0"
START_CHECKPOINT: Final = "raft-log-start-checkpoint"
START_CHECKPOINT_VERSION: Final = 0
# The metadata log is trimmed by snapshots only, never by retention; one batch may be
# a large change (8 MiB, as KRaft bounds its controller batches and server/metadata_log.py does).
METADATA_RAFT_LOG_CONFIG: Final = LogConfig(
    retention_ms=-1, retention_bytes=-1, segment_bytes=8 * 2**20, max_message_bytes=8 * 2**20
)


def metadata_log_directory(metadata_log_dir: Path) -> Path:
    """Where the metadata partition lives under ``metadata.log.dir``."""
    return metadata_log_dir / METADATA_PARTITION_DIR


@dataclass(slots=True)
class PendingFlush:
    """A flush prepared on the loop: ``fsync`` may run on a worker thread."""

    segments: list[LogSegment]
    target: int
    generation: int
    fsynced: bool = False

    def fsync(self) -> None:
        for segment in self.segments:
            segment.fsync()
        self.fsynced = True


class DiskRaftLog:
    """RaftLog over a storage ``Log``; build it with ``DiskRaftLog.open``."""

    def __init__(self, log: Log, start_offset: int, start_epoch: int) -> None:
        assert log.config.retention_ms < 0 and log.config.retention_bytes < 0, (
            "only snapshots trim the metadata log"
        )
        self._log = log
        self._start_offset = start_offset
        self._start_epoch = start_epoch
        # Bumped by every truncation: a flush prepared before one is void.
        self._generation = 0
        self.load_stats: LoadStats | None = None

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig = METADATA_RAFT_LOG_CONFIG,
        *,
        recovery_point: int = 0,
        clean_shutdown: bool = False,
        strict: bool = True,
    ) -> DiskRaftLog:
        """Open (creating) the log in ``directory`` (``metadata_log_directory(...)``),
        recovering a torn tail; ``strict`` refuses to cut below ``recovery_point``
        (CommittedDataCorruptError), as the metadata log must never lose flushed data."""
        directory.mkdir(parents=True, exist_ok=True)
        start_offset, start_epoch = _read_start(directory / START_CHECKPOINT)
        log, stats = open_log(
            directory,
            config,
            recovery_point=recovery_point,
            log_start_offset=start_offset,
            clean_shutdown=clean_shutdown,
            strict=strict,
        )
        if clean_shutdown:
            log.mark_flushed(log.log_end_offset)  # close() fsynced everything
        raft_log = cls(log, start_offset, start_epoch)
        raft_log.load_stats = stats
        raft_log._reconcile_start()
        raft_log._repair_epoch_cache()
        return raft_log

    # --- RaftLog: positions ----------------------------------------------------------

    @property
    def storage_log(self) -> Log:
        """The storage log (for LogManager's recovery-point checkpoints and tools)."""
        return self._log

    @property
    def start_offset(self) -> int:
        return self._start_offset

    @property
    def start_epoch(self) -> int:
        return self._start_epoch

    @property
    def end_offset(self) -> int:
        return self._log.log_end_offset

    @property
    def last_fetched_epoch(self) -> int:
        latest = self._log.epoch_cache.latest_epoch
        if latest is None or self.end_offset == self._start_offset:
            return self._start_epoch
        return max(latest, self._start_epoch)

    @property
    def flushed_offset(self) -> int:
        return max(self._log.recovery_point, self._start_offset)

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch | None:
        return end_offset_for_epoch(self._epoch_starts(), epoch, self.end_offset)

    def _epoch_starts(self) -> list[tuple[int, int]]:
        """(epoch, start) pairs: the snapshot floor, then the cache's later epochs."""
        pairs = [(self._start_epoch, self._start_offset)]
        for entry in self._log.epoch_cache.entries:
            if entry.epoch > self._start_epoch:
                assert entry.start_offset >= self._start_offset, (entry, self._start_offset)
                pairs.append((entry.epoch, entry.start_offset))
        return pairs

    def epoch_at(self, offset: int) -> int:
        if offset == self._start_offset - 1:
            return self._start_epoch
        assert self._start_offset <= offset < self.end_offset, (offset, self._start_offset)
        epoch = self._log.epoch_cache.epoch_for_offset(offset)
        if epoch is None or epoch < self._start_epoch:
            return self._start_epoch  # covered by the floor (the cache starts later)
        return epoch

    def is_boundary(self, offset: int) -> bool:
        if offset == self.end_offset:
            return True
        if not self._start_offset <= offset < self.end_offset:
            return False
        header = self._header_at(offset)
        return header is not None and header.base_offset == offset

    def _header_at(self, offset: int) -> BatchHeader | None:
        """The header of the batch holding ``offset``."""
        segment = self._log.segment_for(offset)
        return None if segment is None else segment.translate_offset(offset)

    def _assert_boundary(self, offset: int) -> None:
        assert self.is_boundary(offset), f"offset {offset} is inside an entry, not a boundary"

    # --- RaftLog: appends ---------------------------------------------------------------

    def append(self, entries: Sequence[LogEntry], *, leader: bool = False) -> None:
        if not entries:
            return
        expected = self.end_offset
        last_epoch = self.last_fetched_epoch
        for entry in entries:
            assert entry.offset == expected, (entry.offset, expected)
            assert entry.epoch >= last_epoch, (entry.epoch, last_epoch)
            expected, last_epoch = entry.next_offset, entry.epoch
        if leader:
            for entry in entries:
                self._append_as_leader(entry)
        else:
            self._append_as_follower(entries)

    def _append_as_leader(self, entry: LogEntry) -> None:
        header = parse_header(entry.payload)
        if header.size != len(entry.payload) or header.last_offset_delta + 1 != entry.count:
            raise ValueError(
                f"an entry of {entry.count} offsets must be one batch of {entry.count} records"
                f" (got {header.record_count} records, {len(entry.payload)} bytes)"
            )
        if header.is_control != entry.control:
            raise ValueError(f"control={entry.control} but the batch says {header.is_control}")
        self._assign_epoch(entry)
        try:
            if entry.control:
                self._log.append_as_follower(stamped(entry).payload)
            else:
                info = self._log.append_as_leader(entry.payload, entry.epoch)
                assert (info.first_offset, info.last_offset) == (entry.offset, entry.last_offset)
        finally:
            self._log.epoch_cache.truncate_from_end(self.end_offset)  # undo if nothing written

    def _append_as_follower(self, entries: Sequence[LogEntry]) -> None:
        for entry in entries:
            header = parse_header(entry.payload)
            assert header.size == len(entry.payload), "one whole batch per entry"
            assert (header.base_offset, header.partition_leader_epoch) == (
                entry.offset,
                entry.epoch,
            ), "a follower stores the leader's stamped bytes unchanged"
            assert header.last_offset_delta + 1 == entry.count, (header, entry.count)
            assert header.is_control == entry.control
        for entry in entries:
            self._assign_epoch(entry)
        try:
            self._log.append_as_follower(b"".join(entry.payload for entry in entries))
        finally:
            self._log.epoch_cache.truncate_from_end(self.end_offset)

    def _assign_epoch(self, entry: LogEntry) -> None:
        """Write-ahead: the cache knows a new epoch before its first batch is written."""
        self._log.epoch_cache.assign(entry.epoch, entry.offset)

    # --- RaftLog: reads -------------------------------------------------------------

    def read(
        self, start_offset: int, max_bytes: int, *, max_offset: int | None = None
    ) -> list[LogEntry]:
        """Batch headers are walked and the walk stops at the first batch at or past
        ``max_offset`` (the high watermark, for the state machine); only the batches
        kept are read whole, so nothing above it is read into an entry or decoded."""
        end = self.end_offset
        limit = end if max_offset is None else min(max_offset, end)
        assert self._start_offset <= start_offset <= end, (start_offset, self._start_offset, end)
        result: list[LogEntry] = []
        if start_offset >= limit:
            return result
        size = 0
        offset = start_offset
        segment = self._log.segment_for(offset)
        while segment is not None and offset < limit:
            first = segment.translate_offset(offset)
            if first is None:  # nothing here at or after offset: the next segment
                following = self._log.segment_for(segment.next_offset)
                segment = following if following is not segment else None
                continue
            if not result:
                assert first.base_offset == start_offset, f"{start_offset} is inside an entry"
            headers: list[BatchHeader] = []
            full = False
            for header in segment.iter_headers(first.position):
                if header.base_offset >= limit:
                    full = True
                    break
                assert header.next_offset <= limit, f"{limit} is inside an entry"
                cost = header.size + _ENTRY_OVERHEAD
                if (result or headers) and size + cost > max_bytes:
                    full = True
                    break
                headers.append(header)
                size += cost
            if headers:
                result.extend(_entries(segment, headers))
                offset = headers[-1].next_offset
            if full or segment.next_offset >= limit:
                break
            following = self._log.segment_for(segment.next_offset)
            segment = following if following is not segment else None
        return result

    # --- RaftLog: truncation, flushing, trimming ----------------------------------------

    def truncate_to(self, offset: int) -> None:
        assert self._start_offset <= offset <= self.end_offset, (offset, self._start_offset)
        self._assert_boundary(offset)
        self._generation += 1
        if offset == self.end_offset:
            return
        self._log.truncate_to(offset)  # the storage log trims its epoch cache too
        assert self.end_offset == offset, (self.end_offset, offset)

    def flush(self) -> None:
        pending = self.prepare_flush()
        pending.fsync()
        self.mark_flushed(pending)

    def prepare_flush(self) -> PendingFlush:
        """On the loop: write staged index entries; the segments to fsync and the target."""
        segments, target = self._log.prepare_flush()
        return PendingFlush(segments, target, self._generation)

    def mark_flushed(self, pending: PendingFlush) -> None:
        """On the loop, after ``pending.fsync()``: the flushed offset moves to its target
        (unless a truncation since ``prepare_flush`` voided it)."""
        assert pending.fsynced, "mark_flushed before the fsync"
        if pending.generation == self._generation:
            self._log.mark_flushed(pending.target)

    def delete_before(self, snapshot_id: SnapshotId) -> None:
        end = snapshot_id.end_offset
        assert self._start_offset <= end <= self.end_offset, (end, self.end_offset)
        self._assert_boundary(end)
        assert self.epoch_at(end - 1) == snapshot_id.epoch, snapshot_id
        if end == self._start_offset:
            return
        self._write_start(end, snapshot_id.epoch)  # durable before any segment goes
        self._set_start(end, snapshot_id.epoch)

    def reset_to(self, snapshot_id: SnapshotId) -> None:
        self._generation += 1
        self._write_start(snapshot_id.end_offset, snapshot_id.epoch)  # the intent, first
        self._wipe(snapshot_id.end_offset)
        self._start_epoch = snapshot_id.epoch

    def close(self) -> None:
        """Flush and close the files (a clean shutdown)."""
        if not self._log.closed:
            self.flush()
            self._log.close()

    # --- internals ----------------------------------------------------------------------

    def _set_start(self, start: int, epoch: int) -> None:
        """Move the start up to ``start``; whole segments below it are deleted."""
        log = self._log
        self._start_offset, self._start_epoch = start, epoch
        log.high_watermark = log.log_end_offset  # deletion stops at the storage HW
        log.increment_log_start_offset(start)  # trims the epoch cache from the start
        log.delete_old_segments()  # whole segments below the start (retention is off)
        log.purge_deleted_segments(force=True)  # nobody holds their bytes (read copies)

    def _wipe(self, start: int) -> None:
        """Delete every segment and restart the log empty at ``start``, durably."""
        log = self._log
        log.truncate_fully_and_start_at(start)
        fsync_directory(log.directory)
        log.active_segment.fsync()
        log.mark_flushed(start)
        self._start_offset = start

    def _write_start(self, start: int, epoch: int) -> None:
        path = self._log.directory / START_CHECKPOINT
        write_checkpoint_lines(path, START_CHECKPOINT_VERSION, [f"{start} {epoch}"])

    def _reconcile_start(self) -> None:
        """After open: make the segments agree with the checkpointed start (see the
        module docstring: a delete or a reset the crash cut short is finished)."""
        log = self._log
        start = self._start_offset
        end = log.log_end_offset
        if start > end or not self._continues_start(start):
            logger.warning(
                "%s: the log [%d, %d) does not continue its start %d (epoch %d): an interrupted "
                "reset; restarting the log empty at %d",
                log.name,
                log.segments[0].base_offset,
                end,
                start,
                self._start_epoch,
                start,
            )
            self._wipe(start)
            return
        if log.segments[0].base_offset > start:
            # Files below the start are gone (not by us: we write the start first). The
            # log can only start where its data does; the epoch below it is unknown, and
            # the node's snapshot check will reset the log if it does not match.
            logger.warning("%s: no data below %d; the log starts there", log.name, start)
            self._start_offset = log.segments[0].base_offset
        self._set_start(self._start_offset, self._start_epoch)

    def _continues_start(self, start: int) -> bool:
        """Does the log hold a batch boundary at ``start`` followed by epochs ≥ the
        start epoch?"""
        if start == self._log.log_end_offset:
            return True
        if start < self._log.segments[0].base_offset:
            return True  # handled by the caller
        header = self._header_at(start)
        return (
            header is not None
            and header.base_offset == start
            and header.partition_leader_epoch >= self._start_epoch
        )

    def _repair_epoch_cache(self) -> None:
        """The cache must know the last batch's epoch (it is written ahead of the data,
        but a cache file lost or rewritten by hand could lag): re-read the headers from
        the cache's latest epoch otherwise."""
        log = self._log
        if log.log_end_offset == self._start_offset:
            return
        last = self._header_at(log.log_end_offset - 1)
        assert last is not None
        cache = log.epoch_cache
        if cache.latest_epoch == last.partition_leader_epoch:
            return
        latest = cache.latest_entry
        from_offset = self._start_offset if latest is None else latest.start_offset
        logger.warning("%s: epoch cache behind the log; re-reading from %d", log.name, from_offset)
        for header in log.iter_headers(max(from_offset, self._start_offset)):
            cache.assign(header.partition_leader_epoch, header.base_offset)
        cache.truncate_from_start(self._start_offset)


# The header overhead MemoryRaftLog adds to every entry's size (log.py).
_ENTRY_OVERHEAD: Final = 61


def _entries(segment: LogSegment, headers: list[BatchHeader]) -> list[LogEntry]:
    """The batches of consecutive ``headers`` in ``segment``, read with one pread."""
    begin = headers[0].position
    data = os.pread(segment.fd, headers[-1].position + headers[-1].size - begin, begin)
    entries = []
    for header in headers:
        position = header.position - begin
        payload = data[position : position + header.size]
        assert len(payload) == header.size, "the segment ended inside a batch"
        entries.append(
            LogEntry(
                header.base_offset,
                header.partition_leader_epoch,
                payload,
                header.is_control,
                header.last_offset_delta + 1,
            )
        )
    return entries


def _read_start(path: Path) -> tuple[int, int]:
    rows = read_checkpoint_lines(path, START_CHECKPOINT_VERSION)
    if not rows:
        return 0, 0
    fields = rows[0]
    expect_fields(path, 0, fields, 2)
    start = parse_int_field(path, 0, fields[0], "start offset", 0, INT64_MAX)
    epoch = parse_int_field(path, 0, fields[1], "start epoch", 0, INT32_MAX)
    return start, epoch


__all__ = [
    "METADATA_PARTITION_DIR",
    "METADATA_RAFT_LOG_CONFIG",
    "DiskRaftLog",
    "PendingFlush",
    "metadata_log_directory",
]
