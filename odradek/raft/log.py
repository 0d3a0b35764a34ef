"""The replicated log as the consensus core sees it: an injected ``RaftLog``.

How this works and why: the core decides *what* goes into the log and *when* it may be
truncated; the log only stores. A log entry is one record batch: it takes ``count``
consecutive offsets from ``offset`` (a batch of N records takes N offsets, as in
Kafka) and carries ``epoch``, the epoch of the leader that appended it. Two logs that
hold an entry with the same offset and epoch hold the same entries up to it (Raft's log
matching), which is why followers are checked with ``(fetch offset, last fetched
epoch)`` and repaired with ``end_offset_for_epoch`` (the leader-epoch cache's lookup).

Entry boundaries: the offsets a log talks about — a fetch position, a truncation point,
a snapshot's end, an epoch's start or end, ``start_offset``, ``end_offset``, the high
watermark — are always the first offset of an entry (or the log end), never an offset
inside one; implementations assert it. Only ``epoch_at`` answers for any offset (the
entry holding it). ``RaftNode.append`` returns an entry's *last* offset, committed once
the high watermark is past it.

Entries below ``start_offset`` live only in a snapshot; ``start_epoch`` is the epoch of
the entry just below it (the snapshot's epoch), 0 for an empty log. ``flushed_offset``
is the end of the durable prefix: the leader counts only its flushed end towards the
high watermark, and a crash loses everything above it.

Production payload contract (what ``DiskRaftLog`` stores and the wire layer sends):

* ``payload`` is one complete Kafka v2 record batch whose record count is ``count``
  (its lastOffsetDelta is ``count - 1``); ``control`` is its control attribute bit.
* The leader's log stamps baseOffset = ``entry.offset`` and partitionLeaderEpoch =
  ``entry.epoch`` into the batch when appending (``append(..., leader=True)``). Both
  fields lie before the CRC, so the batch stays valid and nothing is re-encoded.
* Followers store the leader's bytes unchanged (``append(..., leader=False)``: the
  header already says ``entry.offset`` and ``entry.epoch``), so replicas are
  byte-identical.
* ``read`` returns the stamped bytes. The wire layer concatenates the payloads of the
  entries it is given into a Fetch response's records and splits a response back into
  entries by walking batch headers: ``LogEntry(header.base_offset,
  header.partition_leader_epoch, batch bytes, header.is_control, header.last_offset_delta
  + 1)``. It must check each batch's CRC while splitting: a peer's bad bytes are the
  peer's fault, not an assertion in the log.
* The core's own entries are control batches: the LeaderChange a new leader appends
  is built by the ``control_entry`` callable given to ``RaftNode``
  (``odradek.raft.control_records.leader_change_entry`` in production).

The simulation and most unit tests use opaque payloads instead (the core never looks
inside one); ``MemoryRaftLog(stamp_batches=True)`` follows the contract above exactly,
which is how the disk log's tests compare the two.

A disk-backed metadata log (``odradek.raft.disk_log.DiskRaftLog``) implements
``RaftLog`` on top of ``storage.Log`` and its ``epoch_cache``: ``end_offset_for_epoch``
is the cache's end-offset lookup (with the snapshot's ``(start_offset, start_epoch)`` as
its floor), ``truncate_to`` is the log's truncation plus the cache's truncation,
``delete_before`` moves the log start offset (deleting whole segments), ``reset_to``
deletes everything and restarts the log at the snapshot's end, and ``flush`` fsyncs up
to the end.

``MemoryRaftLog`` is the in-memory implementation the simulation and the unit tests
use; ``crash()`` models a power cut honestly by keeping only the flushed prefix.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from odradek.records.batch import parse_header, stamp

NO_EPOCH = -1
NO_OFFSET = -1


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One batch of the metadata log: offsets ``offset .. offset + count - 1``.

    ``control`` marks Kafka's control batches (the LeaderChange a new leader appends).
    """

    offset: int
    epoch: int
    payload: bytes
    control: bool = False
    count: int = 1

    def __post_init__(self) -> None:
        assert self.count >= 1, f"an entry takes at least one offset: {self.count}"

    @property
    def next_offset(self) -> int:
        """The offset just past this entry (the next entry's offset)."""
        return self.offset + self.count

    @property
    def last_offset(self) -> int:
        return self.offset + self.count - 1

    @property
    def size_bytes(self) -> int:
        return len(self.payload) + ENTRY_OVERHEAD_BYTES


# A v2 batch header is 61 bytes; counting it keeps max_bytes honest for tiny payloads.
ENTRY_OVERHEAD_BYTES = 61


@dataclass(frozen=True, slots=True, kw_only=True, order=True)
class SnapshotId:
    """A snapshot holds every entry below ``end_offset``; ``epoch`` is the last one's epoch."""

    end_offset: int = NO_OFFSET
    epoch: int = NO_EPOCH

    @property
    def present(self) -> bool:
        return self.end_offset >= 0


@dataclass(frozen=True, slots=True)
class OffsetAndEpoch:
    offset: int
    epoch: int


class RaftLog(Protocol):
    @property
    def start_offset(self) -> int: ...
    @property
    def start_epoch(self) -> int: ...
    @property
    def end_offset(self) -> int:
        """The last entry's ``next_offset`` (``start_offset`` when there is none)."""
        ...

    @property
    def last_fetched_epoch(self) -> int:
        """The epoch of the last entry (``start_epoch`` when there is none above start)."""
        ...

    @property
    def flushed_offset(self) -> int: ...
    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch | None:
        """The largest epoch ≤ ``epoch`` in the log and the offset where it ends (the start
        of the next larger epoch, or the log end). None when ``epoch`` is older than
        everything the log knows (it lies before the snapshot)."""
        ...

    def epoch_at(self, offset: int) -> int:
        """The epoch of the entry holding ``offset`` (any offset of it;
        ``start_offset - 1`` gives start_epoch)."""
        ...

    def is_boundary(self, offset: int) -> bool:
        """Is ``offset`` in [start, end] and not inside an entry? (Checks a peer's fetch
        offset before the log is asked to read from it.)"""
        ...

    def append(self, entries: Sequence[LogEntry], *, leader: bool = False) -> None:
        """Append entries at the end. ``leader``: this node appends them as leader and
        the log stamps offset and epoch into the payload; otherwise they are a
        leader's entries, stored unchanged."""
        ...

    def read(
        self, start_offset: int, max_bytes: int, *, max_offset: int | None = None
    ) -> list[LogEntry]:
        """Entries from ``start_offset`` (an entry boundary); at least one if any
        exists, then up to max_bytes. With ``max_offset`` (an entry boundary, e.g. the
        high watermark) only entries below it: nothing above it is read or decoded."""
        ...

    def truncate_to(self, offset: int) -> None:
        """Drop the entries from ``offset`` (an entry boundary) on."""
        ...

    def flush(self) -> None: ...
    def delete_before(self, snapshot_id: SnapshotId) -> None:
        """Drop entries below the snapshot's end (they live in the snapshot now). The end
        may lie past ``flushed_offset`` on a leader (committed by the majority before its
        own fsync); the flushed offset then moves up to it, the snapshot being durable."""
        ...

    def reset_to(self, snapshot_id: SnapshotId) -> None:
        """Drop every entry and restart the log at the snapshot's end (durably)."""
        ...


def stamped(entry: LogEntry) -> LogEntry:
    """``entry`` with baseOffset and partitionLeaderEpoch written into its batch."""
    header = parse_header(entry.payload)
    assert header.size == len(entry.payload), "the payload is one whole batch"
    assert header.record_count == entry.count == header.last_offset_delta + 1, (
        header.record_count,
        entry.count,
    )
    assert header.is_control == entry.control, (header.is_control, entry.control)
    if header.base_offset == entry.offset and header.partition_leader_epoch == entry.epoch:
        return entry
    payload = bytearray(entry.payload)
    stamp(payload, 0, entry.offset, entry.epoch)
    return LogEntry(entry.offset, entry.epoch, bytes(payload), entry.control, entry.count)


@dataclass(slots=True)
class MemoryPendingFlush:
    """MemoryRaftLog's half of a split flush (DiskRaftLog's PendingFlush): the end it
    covers, and the truncation generation it was prepared in."""

    target: int
    generation: int
    fsynced: bool = False

    def fsync(self) -> None:
        self.fsynced = True


class MemoryRaftLog:
    """RaftLog in a list; ``crash()`` keeps only what was flushed.

    ``prepare_flush`` / ``MemoryPendingFlush.fsync`` / ``mark_flushed`` split a flush as
    the disk log does (the simulation runs them apart in time, with truncations and
    crashes in between: a truncation voids a prepared flush).

    ``stamp_batches``: payloads are v2 batches, and leader appends are stamped as the
    production contract says (module docstring); the disk log's tests compare with it.
    """

    def __init__(self, *, stamp_batches: bool = False) -> None:
        self._stamp_batches = stamp_batches
        self._entries: list[LogEntry] = []
        self._offsets: list[int] = []  # each entry's first offset, for bisect
        self._start_offset = 0
        self._start_epoch = 0
        self._flushed_offset = 0
        self._generation = 0  # bumped by every truncation and reset
        # (epoch, start offset) of each epoch in the log; the first is the floor that the
        # snapshot (or the empty log) provides, the rest are the entries' epochs.
        self._epoch_starts: list[tuple[int, int]] = [(0, 0)]

    @property
    def start_offset(self) -> int:
        return self._start_offset

    @property
    def start_epoch(self) -> int:
        return self._start_epoch

    @property
    def end_offset(self) -> int:
        return self._entries[-1].next_offset if self._entries else self._start_offset

    @property
    def last_fetched_epoch(self) -> int:
        return self._epoch_starts[-1][0]

    @property
    def flushed_offset(self) -> int:
        return self._flushed_offset

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch | None:
        return end_offset_for_epoch(self._epoch_starts, epoch, self.end_offset)

    def epoch_at(self, offset: int) -> int:
        if offset == self._start_offset - 1:
            return self._start_epoch
        return self.entry_at(offset).epoch

    def entry_at(self, offset: int) -> LogEntry:
        """The entry holding ``offset``."""
        assert self._start_offset <= offset < self.end_offset, (offset, self._start_offset)
        return self._entries[bisect.bisect_right(self._offsets, offset) - 1]

    def is_boundary(self, offset: int) -> bool:
        if offset == self.end_offset:
            return True
        if not self._start_offset <= offset < self.end_offset:
            return False
        return self.entry_at(offset).offset == offset

    def _index_of(self, offset: int) -> int:
        """The index of the entry starting at ``offset`` (len for the end), asserted."""
        index = bisect.bisect_left(self._offsets, offset)
        assert offset == self.end_offset or (
            index < len(self._offsets) and self._offsets[index] == offset
        ), f"offset {offset} is inside an entry, not at a boundary"
        return index

    def append(self, entries: Sequence[LogEntry], *, leader: bool = False) -> None:
        for entry in entries:
            assert entry.offset == self.end_offset, (entry.offset, self.end_offset)
            assert entry.epoch >= self.last_fetched_epoch, (entry.epoch, self.last_fetched_epoch)
            if self._stamp_batches:
                if leader:
                    entry = stamped(entry)
                header = parse_header(entry.payload)
                assert (header.base_offset, header.partition_leader_epoch) == (
                    entry.offset,
                    entry.epoch,
                ), "a follower stores the leader's stamped bytes"
            if entry.epoch > self._epoch_starts[-1][0]:
                self._epoch_starts.append((entry.epoch, entry.offset))
            self._entries.append(entry)
            self._offsets.append(entry.offset)

    def read(
        self, start_offset: int, max_bytes: int, *, max_offset: int | None = None
    ) -> list[LogEntry]:
        assert start_offset >= self._start_offset, (start_offset, self._start_offset)
        result: list[LogEntry] = []
        size = 0
        limit = self.end_offset if max_offset is None else max_offset
        for entry in self._entries[self._index_of(start_offset) :]:
            if entry.offset >= limit:
                break
            assert entry.next_offset <= limit, f"{limit} is inside an entry"
            if result and size + entry.size_bytes > max_bytes:
                break
            result.append(entry)
            size += entry.size_bytes
        return result

    def truncate_to(self, offset: int) -> None:
        assert self._start_offset <= offset <= self.end_offset, (offset, self._start_offset)
        index = self._index_of(offset)
        del self._entries[index:]
        del self._offsets[index:]
        while len(self._epoch_starts) > 1 and self._epoch_starts[-1][1] >= offset:
            self._epoch_starts.pop()
        self._flushed_offset = min(self._flushed_offset, offset)
        self._generation += 1

    def flush(self) -> None:
        self._flushed_offset = self.end_offset

    def prepare_flush(self) -> MemoryPendingFlush:
        return MemoryPendingFlush(self.end_offset, self._generation)

    def mark_flushed(self, pending: MemoryPendingFlush) -> None:
        assert pending.fsynced, "mark_flushed before the fsync"
        if pending.generation == self._generation:
            assert pending.target <= self.end_offset
            self._flushed_offset = max(self._flushed_offset, pending.target)

    def delete_before(self, snapshot_id: SnapshotId) -> None:
        end = snapshot_id.end_offset
        assert self._start_offset <= end <= self.end_offset, (end, self.end_offset)
        assert self.epoch_at(end - 1) == snapshot_id.epoch, snapshot_id
        index = self._index_of(end)
        del self._entries[:index]
        del self._offsets[:index]
        self._start_offset = end
        self._start_epoch = snapshot_id.epoch
        later = [(epoch, start) for epoch, start in self._epoch_starts[1:] if start >= end]
        self._epoch_starts = [(snapshot_id.epoch, end), *later]
        self._flushed_offset = max(self._flushed_offset, end)  # the snapshot holds them

    def reset_to(self, snapshot_id: SnapshotId) -> None:
        self._entries = []
        self._offsets = []
        self._start_offset = snapshot_id.end_offset
        self._start_epoch = snapshot_id.epoch
        self._flushed_offset = snapshot_id.end_offset
        self._epoch_starts = [(snapshot_id.epoch, snapshot_id.end_offset)]
        self._generation += 1

    def crash(self) -> None:
        """A power cut: whatever was not flushed is gone."""
        self.truncate_to(self._flushed_offset)


def end_offset_for_epoch(
    epoch_starts: Sequence[tuple[int, int]], epoch: int, end_offset: int
) -> OffsetAndEpoch | None:
    """The lookup over (epoch, start offset) pairs, oldest first, the first being the
    floor: the largest epoch ≤ ``epoch`` and where it ends."""
    found = bisect.bisect_right(epoch_starts, epoch, key=lambda pair: pair[0]) - 1
    if found < 0:
        return None
    if found + 1 < len(epoch_starts):
        end = epoch_starts[found + 1][1]
    else:
        end = end_offset
    return OffsetAndEpoch(end, epoch_starts[found][0])
