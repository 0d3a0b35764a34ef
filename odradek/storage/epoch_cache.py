"""The leader epoch cache: which leader epoch wrote which range of offsets.

How this works and why: every batch carries the epoch of the leader that appended it
(``partitionLeaderEpoch``). Remembering where each epoch *started* lets a follower
that comes back after a leader change ask the new leader "where did my last epoch end
on your side?" (OffsetsForLeaderEpoch, KIP-101/KIP-279) and truncate exactly the
records that diverged, instead of guessing from the high watermark. The cache is the
sorted list of (epoch, start offset) pairs; epoch ``e`` covers the offsets from its
start offset up to the next entry's start offset (or the log end for the latest).
It follows Kafka's LeaderEpochFileCache:

* ``assign`` is called for every appended batch and records an entry only when the
  batch's epoch is newer than the latest one. Epochs and start offsets are both
  strictly increasing; a new epoch whose start offset is not above the existing ones
  first removes the entries it conflicts with (so a later epoch starting at the same
  offset replaces the earlier one).
* log truncation (``truncate_from_end``) and retention (``truncate_from_start``) keep
  the cache in step with the log.

On-disk format: ``<partition dir>/leader-epoch-checkpoint`` in the checkpoint format
of ``checkpoint.py`` (version ``0``, entry count, one ``epoch startOffset`` line per
entry, oldest first). Every change to the entries rewrites the whole file atomically
and durably (temporary file, fsync, rename, fsync of the directory), in the order of
the changes, through the log's ``DeferredFiles``; the memory is the truth and the file
is only read when the log is opened. When it is written follows Kafka (KAFKA-15046,
KAFKA-16541):

* a new epoch (``assign``) is written before ``assign`` returns (``write_now``), so
  the file never lacks an epoch the log has — a missing entry would let
  OffsetsForLeaderEpoch answer a follower with an offset past the divergence, and the
  follower would keep records the leader does not have. New epochs come with leader
  changes, not with the records of an epoch, so this fsync is rare;
* truncation from the end or the start (``truncate_from_end``, ``truncate_from_start``,
  ``clear``) is queued and written by a worker: it happens at every retention pass and
  whenever a follower's log start follows the leader's, and it only ever removes
  entries or moves the first one up. A crash before it lands leaves a file with entries
  the log no longer has, which loading trims again (``truncate_from_end`` to the log
  end, ``truncate_from_start`` to the log start; log_loader.py), and a new epoch
  written later replaces the queued truncations (same file, newer full content).

Concurrency: single owner, the partition's log on the event loop; no locking needed
(the queued writes carry a copy of the entries).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from odradek.storage.checkpoint import (
    INT32_MAX,
    INT64_MAX,
    CheckpointError,
    checkpoint_bytes,
    entry_line,
    expect_fields,
    parse_int_field,
    read_checkpoint_lines,
)
from odradek.storage.deferred_files import DeferredFiles

UNDEFINED_EPOCH: Final = -1
UNDEFINED_EPOCH_OFFSET: Final = -1
LEADER_EPOCH_CHECKPOINT: Final = "leader-epoch-checkpoint"
LEADER_EPOCH_CHECKPOINT_VERSION: Final = 0


@dataclass(frozen=True, slots=True)
class EpochEntry:
    """Leader epoch ``epoch`` wrote the offsets from ``start_offset`` on."""

    epoch: int
    start_offset: int


class LeaderEpochCache:
    """The (epoch, start offset) history of one partition, persisted at ``path``."""

    def __init__(self, path: Path, files: DeferredFiles | None = None) -> None:
        """Load ``path`` if it exists; CheckpointError if it is malformed."""
        self._path = path
        self._files = files if files is not None else DeferredFiles()
        self._entries: list[EpochEntry] = _load(path)

    # -- queries ------------------------------------------------------------------

    @property
    def path(self) -> Path:
        return self._path

    @property
    def entries(self) -> list[EpochEntry]:
        """A copy of the entries, oldest first."""
        return list(self._entries)

    @property
    def latest_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    @property
    def latest_epoch(self) -> int | None:
        return self._entries[-1].epoch if self._entries else None

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch whose range contains ``offset``; None if it is below every entry."""
        index = self._last_starting_at_or_below(offset)
        return self._entries[index].epoch if index >= 0 else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Answer OffsetsForLeaderEpoch: (epoch, end offset) for ``requested_epoch``.

        The end offset of an epoch is the start offset of the next higher epoch we know
        (the log end for the latest epoch). The returned epoch is the largest known
        epoch <= the requested one, or the requested one itself if it predates them
        all. An epoch above everything we know is undefined.
        """
        if requested_epoch == UNDEFINED_EPOCH:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self.latest_epoch:
            return requested_epoch, log_end_offset
        higher = bisect.bisect_right(self._entries, requested_epoch, key=_epoch_of)
        if higher == len(self._entries):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        end_offset = self._entries[higher].start_offset
        if higher == 0:
            return requested_epoch, end_offset
        return self._entries[higher - 1].epoch, end_offset

    # -- mutations (each writes the file when the entries change) -----------------

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset`` if it is a new epoch.

        Called for every appended batch with its leader epoch and base offset. Returns
        True when an entry was added. Negative epochs (batches written without one)
        and epochs not above the latest are ignored.
        """
        assert 0 <= start_offset <= INT64_MAX, f"bad start offset {start_offset}"
        assert epoch <= INT32_MAX, f"epoch {epoch} outside int32"
        latest = self.latest_epoch
        if epoch < 0 or (latest is not None and epoch <= latest):
            return False
        # Only reachable after a truncation went wrong: entries at or above the new
        # start offset would break the ordering, so the new epoch supersedes them.
        kept = [entry for entry in self._entries if entry.start_offset < start_offset]
        self._replace([*kept, EpochEntry(epoch, start_offset)], durable_now=True)
        return True

    def truncate_from_end(self, end_offset: int) -> None:
        """The log was truncated to ``end_offset``: forget epochs starting at or after it."""
        assert end_offset >= 0, f"bad truncation offset {end_offset}"
        self._replace([entry for entry in self._entries if entry.start_offset < end_offset])

    def truncate_from_start(self, start_offset: int) -> None:
        """The log start moved up to ``start_offset``: drop the epochs wholly below it.

        The epoch containing ``start_offset`` is kept, now starting at ``start_offset``.
        """
        index = self._last_starting_at_or_below(start_offset)
        if index < 0:
            return
        first = EpochEntry(self._entries[index].epoch, start_offset)
        self._replace([first, *self._entries[index + 1 :]])

    def clear(self) -> None:
        """Forget every entry."""
        self._replace([])

    def flush(self) -> None:
        """Write the entries to ``path`` atomically and durably, before returning."""
        self._files.write_now(self._path, self._file_bytes())

    # -- helpers ------------------------------------------------------------------

    def _file_bytes(self) -> bytes:
        lines = [f"{entry.epoch} {entry.start_offset}" for entry in self._entries]
        return checkpoint_bytes(LEADER_EPOCH_CHECKPOINT_VERSION, lines)

    def _replace(self, entries: list[EpochEntry], *, durable_now: bool = False) -> None:
        if entries == self._entries:
            return
        self._entries = entries
        if durable_now:
            self.flush()
        else:
            self._files.write(self._path, self._file_bytes())

    def _last_starting_at_or_below(self, offset: int) -> int:
        """Index of the last entry with start_offset <= ``offset``; -1 if there is none."""
        return bisect.bisect_right(self._entries, offset, key=_start_of) - 1

    def __repr__(self) -> str:
        pairs = ", ".join(f"{e.epoch}@{e.start_offset}" for e in self._entries)
        return f"LeaderEpochCache({self._path}, [{pairs}])"


def _epoch_of(entry: EpochEntry) -> int:
    return entry.epoch


def _start_of(entry: EpochEntry) -> int:
    return entry.start_offset


def _load(path: Path) -> list[EpochEntry]:
    rows = read_checkpoint_lines(path, LEADER_EPOCH_CHECKPOINT_VERSION) or []
    entries: list[EpochEntry] = []
    for index, fields in enumerate(rows):
        entry = _parse_entry(path, index, fields)
        if entries and not _follows(entries[-1], entry):
            problem = f"entry {entry.epoch} {entry.start_offset} does not follow the one before"
            raise CheckpointError(path, problem, entry_line(index))
        entries.append(entry)
    return entries


def _parse_entry(path: Path, index: int, fields: Sequence[str]) -> EpochEntry:
    expect_fields(path, index, fields, 2)
    epoch = parse_int_field(path, index, fields[0], "epoch", 0, INT32_MAX)
    start_offset = parse_int_field(path, index, fields[1], "start offset", 0, INT64_MAX)
    return EpochEntry(epoch, start_offset)


def _follows(previous: EpochEntry, entry: EpochEntry) -> bool:
    return entry.epoch > previous.epoch and entry.start_offset > previous.start_offset
