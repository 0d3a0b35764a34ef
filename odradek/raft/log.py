"""The replicated log as the consensus core sees it: an injected ``RaftLog``.

How this works and why: the core decides *what* goes into the log and *when* it may be
truncated; the log only stores. A log entry is one record batch identified by
``(offset, epoch)``: the epoch of the leader that appended it. Two logs that hold an
entry with the same offset and epoch hold the same entries up to it (Raft's log
matching), which is why followers are checked with ``(fetch offset, last fetched
epoch)`` and repaired with ``end_offset_for_epoch`` (the leader-epoch cache's lookup).

Entries below ``start_offset`` live only in a snapshot; ``start_epoch`` is the epoch of
the entry just below it (the snapshot's epoch), 0 for an empty log. ``flushed_offset``
is the end of the durable prefix: the leader counts only its flushed end towards the
high watermark, and a crash loses everything above it.

A disk-backed metadata log implements ``RaftLog`` on top of ``storage.Log`` and its
``epoch_cache``: ``end_offset_for_epoch`` is the cache's end-offset lookup (with the
snapshot's ``(start_offset, start_epoch)`` as its floor), ``truncate_to`` is the log's
truncation plus the cache's truncation, ``delete_before`` moves the log start offset
(deleting whole segments), ``reset_to`` deletes everything and restarts the log at the
snapshot's end, and ``flush`` fsyncs up to the end.

``MemoryRaftLog`` is the in-memory implementation the simulation and the unit tests
use; ``crash()`` models a power cut honestly by keeping only the flushed prefix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

NO_EPOCH = -1
NO_OFFSET = -1


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One batch of the metadata log. ``control`` marks Kafka's control batches."""

    offset: int
    epoch: int
    payload: bytes
    control: bool = False

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
    def end_offset(self) -> int: ...
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
        """The epoch of the entry at ``offset`` (``start_offset - 1`` gives start_epoch)."""
        ...

    def append(self, entries: list[LogEntry]) -> None: ...
    def read(self, start_offset: int, max_bytes: int) -> list[LogEntry]:
        """Entries from ``start_offset``; at least one if any exists, then up to max_bytes."""
        ...

    def truncate_to(self, offset: int) -> None: ...
    def flush(self) -> None: ...
    def delete_before(self, snapshot_id: SnapshotId) -> None:
        """Drop entries below the snapshot's end (they live in the snapshot now). The end
        may lie past ``flushed_offset`` on a leader (committed by the majority before its
        own fsync); the flushed offset then moves up to it, the snapshot being durable."""
        ...

    def reset_to(self, snapshot_id: SnapshotId) -> None:
        """Drop every entry and restart the log at the snapshot's end (durably)."""
        ...


class MemoryRaftLog:
    """RaftLog in a list; ``crash()`` keeps only what was flushed."""

    def __init__(self) -> None:
        self._entries: list[LogEntry] = []
        self._start_offset = 0
        self._start_epoch = 0
        self._flushed_offset = 0
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
        return self._start_offset + len(self._entries)

    @property
    def last_fetched_epoch(self) -> int:
        return self._epoch_starts[-1][0]

    @property
    def flushed_offset(self) -> int:
        return self._flushed_offset

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch | None:
        found: int | None = None
        for index, (known_epoch, _) in enumerate(self._epoch_starts):
            if known_epoch > epoch:
                break
            found = index
        if found is None:
            return None
        if found + 1 < len(self._epoch_starts):
            end = self._epoch_starts[found + 1][1]
        else:
            end = self.end_offset
        return OffsetAndEpoch(end, self._epoch_starts[found][0])

    def epoch_at(self, offset: int) -> int:
        if offset == self._start_offset - 1:
            return self._start_epoch
        assert self._start_offset <= offset < self.end_offset, (offset, self._start_offset)
        return self._entries[offset - self._start_offset].epoch

    def entry_at(self, offset: int) -> LogEntry:
        assert self._start_offset <= offset < self.end_offset, offset
        return self._entries[offset - self._start_offset]

    def append(self, entries: list[LogEntry]) -> None:
        for entry in entries:
            assert entry.offset == self.end_offset, (entry.offset, self.end_offset)
            assert entry.epoch >= self.last_fetched_epoch, (entry.epoch, self.last_fetched_epoch)
            if entry.epoch > self._epoch_starts[-1][0]:
                self._epoch_starts.append((entry.epoch, entry.offset))
            self._entries.append(entry)

    def read(self, start_offset: int, max_bytes: int) -> list[LogEntry]:
        assert start_offset >= self._start_offset, (start_offset, self._start_offset)
        result: list[LogEntry] = []
        size = 0
        for entry in self._entries[start_offset - self._start_offset :]:
            if result and size + entry.size_bytes > max_bytes:
                break
            result.append(entry)
            size += entry.size_bytes
        return result

    def truncate_to(self, offset: int) -> None:
        assert self._start_offset <= offset <= self.end_offset, (offset, self._start_offset)
        del self._entries[offset - self._start_offset :]
        while len(self._epoch_starts) > 1 and self._epoch_starts[-1][1] >= offset:
            self._epoch_starts.pop()
        self._flushed_offset = min(self._flushed_offset, offset)

    def flush(self) -> None:
        self._flushed_offset = self.end_offset

    def delete_before(self, snapshot_id: SnapshotId) -> None:
        end = snapshot_id.end_offset
        assert self._start_offset <= end <= self.end_offset, (end, self.end_offset)
        assert self.epoch_at(end - 1) == snapshot_id.epoch, snapshot_id
        del self._entries[: end - self._start_offset]
        self._start_offset = end
        self._start_epoch = snapshot_id.epoch
        later = [(epoch, start) for epoch, start in self._epoch_starts[1:] if start >= end]
        self._epoch_starts = [(snapshot_id.epoch, end), *later]
        self._flushed_offset = max(self._flushed_offset, end)  # the snapshot holds them

    def reset_to(self, snapshot_id: SnapshotId) -> None:
        self._entries = []
        self._start_offset = snapshot_id.end_offset
        self._start_epoch = snapshot_id.epoch
        self._flushed_offset = snapshot_id.end_offset
        self._epoch_starts = [(snapshot_id.epoch, snapshot_id.end_offset)]

    def crash(self) -> None:
        """A power cut: whatever was not flushed is gone."""
        self.truncate_to(self._flushed_offset)
