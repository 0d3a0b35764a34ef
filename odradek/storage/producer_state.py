"""Producer state of one log: what idempotence needs to recognise retries.

How this works and why: an idempotent producer numbers its batches per partition
(producer id, epoch, base sequence). For each producer id the log remembers its
epoch and the sequence range and offsets of its last ``BATCHES_RETAINED`` batches
(5 = the most a producer may have in flight). A batch that matches one of those is a
retry of a write that already succeeded: the log answers with the original offsets
instead of appending again. A batch whose sequence does not follow the last one is
out of order; one from an older epoch is from a fenced (zombie) producer.

The state is a pure function of the log, so it can always be rebuilt by replaying
batch headers. Snapshots make that replay short: ``<offset>.snapshot`` holds the state
of every producer after all batches below ``offset``; load takes the newest snapshot
not beyond the log end and replays the headers after it.

Snapshot format (odradek's own, big-endian; the name follows Kafka's, the content
does not)::

    version int16 = 1 | crc32c uint32 of everything after it | count int32
    per producer: producerId int64, epoch int16, lastTimestamp int64,
                  coordinatorEpoch int32, currentTxnFirstOffset int64 (-1 = none),
                  batchCount int8, then batchCount × (firstSeq int32, lastSeq int32,
                  firstOffset int64, lastOffset int64, timestamp int64)

Snapshots are written at each segment roll, and deleted with the segments below them
and above a truncation point. The loop only builds a snapshot's bytes; the write
(temporary file, rename; fsynced by the next flush or close) and the deletions below
the log start go through the log's ``DeferredFiles``, in order, on a worker thread. A
deletion above a truncation point is done at once (``unlink_now``, which also drops a
queued write of that file): the log may grow past that offset again, and the old
snapshot would then be loaded for a log it does not describe. A snapshot may therefore
land on disk after the roll, or never (a crash first): recovery does not depend on
it, because the newest snapshot found at or below the log end is only a starting
point for the replay, and a damaged one is deleted in favour of an older one or of a
replay from the log start. While files are queued the directory is not the truth:
the list of snapshots and their contents are read through ``DeferredFiles.planned``.

Concurrency: owned by the log's event loop (the file operations it queues run on a
worker, see deferred_files.py).
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from crc32c import crc32c

from odradek.records.batch import NO_PRODUCER_EPOCH, NO_SEQUENCE, BatchHeader
from odradek.storage.deferred_files import DeferredFiles
from odradek.storage.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    StorageError,
)

BATCHES_RETAINED: Final = 5  # max.in.flight.requests.per.connection allowed with idempotence
SEQUENCE_MAX: Final = 0x7FFFFFFF
SNAPSHOT_SUFFIX: Final = ".snapshot"
SNAPSHOT_VERSION: Final = 1

_SNAPSHOT_HEAD = struct.Struct(">hIi")
_PRODUCER = struct.Struct(">qhqiqb")
_BATCH = struct.Struct(">iiqqq")


class SnapshotCorruptError(StorageError):
    """A snapshot that fails its checks; the caller deletes it and replays further back."""


@dataclass(slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(slots=True)
class ProducerEntry:
    producer_id: int
    epoch: int = NO_PRODUCER_EPOCH
    batches: list[BatchMetadata] = field(default_factory=list)
    last_timestamp: int = -1
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.epoch:
            return None
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None

    def copy(self) -> ProducerEntry:
        return ProducerEntry(
            self.producer_id,
            self.epoch,
            list(self.batches),
            self.last_timestamp,
            self.coordinator_epoch,
            self.current_txn_first_offset,
        )


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == SEQUENCE_MAX)


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


class ProducerStateManager:
    """Per-log producer table with validation, staging, snapshots and expiry."""

    def __init__(
        self,
        directory: Path,
        producer_id_expiration_ms: int = 86_400_000,
        files: DeferredFiles | None = None,
    ) -> None:
        self.directory = directory
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.files = files if files is not None else DeferredFiles()
        self.producers: dict[int, ProducerEntry] = {}
        # State reflects every batch below this offset.
        self.map_end_offset = 0
        # KIP-890 part 1: producer id -> the guard handed out when a leader started to
        # verify, with the transaction coordinator, that this partition is in the
        # producer's ongoing transaction. Any marker for the producer drops it, so an
        # append whose verification raced with the transaction's end finds its guard
        # gone instead of opening a transaction nobody will ever close.
        self.verification_guards: dict[int, object] = {}

    # -- validation (leader appends from clients) -----------------------------------
    def check(
        self,
        header: BatchHeader,
        staged: dict[int, ProducerEntry],
        verification_guard: object | None = None,
    ) -> BatchMetadata | None:
        """Validate a client batch against the current (or staged) entry.

        Returns the original batch's metadata when this batch is a retry of it.
        Raises InvalidProducerEpochError, OutOfOrderSequenceError, or InvalidTxnStateError
        for a non-transactional batch while the producer's transaction is open, or for a
        transactional batch that would open a transaction when ``verification_guard``
        (given when the leader verified the batch with the coordinator) is no longer
        the producer's guard.
        """
        producer_id = header.producer_id
        entry = staged.get(producer_id) or self.producers.get(producer_id)
        if entry is None or entry.epoch == NO_PRODUCER_EPOCH:
            self._check_verified(header, None, verification_guard)
            return None  # unknown producer (new, or expired/removed): any sequence starts it
        epoch, first_seq = header.producer_epoch, header.base_sequence
        if epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {producer_id} epoch {epoch} is older than current epoch {entry.epoch}"
            )
        duplicate = entry.find_duplicate(epoch, first_seq, header.last_sequence)
        if duplicate is not None:
            return duplicate
        if entry.current_txn_first_offset >= 0 and not header.is_transactional:
            raise InvalidTxnStateError(
                f"producer {producer_id} sent a non-transactional batch while its transaction "
                f"from offset {entry.current_txn_first_offset} is open"
            )
        self._check_verified(header, entry, verification_guard)
        if first_seq == NO_SEQUENCE:
            return None  # a coordinator's write (TxnOffsetCommit): no sequence to follow
        if epoch != entry.epoch:
            if first_seq != 0:
                raise OutOfOrderSequenceError(
                    f"producer {producer_id}: first sequence of new epoch {epoch} is "
                    f"{first_seq}, expected 0"
                )
        elif not in_sequence(entry.last_seq, first_seq):
            raise OutOfOrderSequenceError(
                f"producer {producer_id} epoch {epoch}: sequence {first_seq} does not "
                f"follow {entry.last_seq}"
            )
        return None

    def verification_guard(self, producer_id: int) -> object:
        """The producer's verification guard, made if it has none (KIP-890 part 1)."""
        return self.verification_guards.setdefault(producer_id, object())

    def transaction_open(self, producer_id: int, producer_epoch: int) -> bool:
        """Whether the producer's transaction in ``producer_epoch`` is open here (a
        batch of it needs no verification)."""
        entry = self.producers.get(producer_id)
        return (
            entry is not None
            and entry.current_txn_first_offset >= 0
            and entry.epoch == producer_epoch
        )

    def _check_verified(
        self, header: BatchHeader, entry: ProducerEntry | None, guard: object | None
    ) -> None:
        if guard is None or not header.is_transactional:
            return
        if entry is not None and entry.current_txn_first_offset >= 0:
            return  # continues the open transaction
        if self.verification_guards.get(header.producer_id) is not guard:
            raise InvalidTxnStateError(
                f"producer {header.producer_id}: the transaction this batch was verified "
                "for has ended; the batch would open a transaction the coordinator does "
                "not know"
            )

    # -- updates ------------------------------------------------------------------
    def stage(
        self,
        header: BatchHeader,
        staged: dict[int, ProducerEntry],
        coordinator_epoch: int | None = None,
    ) -> ProducerEntry:
        """Record an appended batch (offsets already assigned) into ``staged``.

        ``coordinator_epoch``: that of a transaction marker (a control batch).
        Returns the producer's staged entry.
        """
        producer_id = header.producer_id
        if header.is_control:
            self.verification_guards.pop(producer_id, None)
        entry = staged.get(producer_id)
        if entry is None:
            current = self.producers.get(producer_id)
            entry = current.copy() if current else ProducerEntry(producer_id)
            staged[producer_id] = entry
        _apply(entry, header)
        if coordinator_epoch is not None:
            entry.coordinator_epoch = coordinator_epoch
        return entry

    def commit(self, staged: dict[int, ProducerEntry], end_offset: int) -> None:
        self.producers.update(staged)
        self.map_end_offset = end_offset

    def replay(self, headers: Iterable[BatchHeader], end_offset: int) -> None:
        """Apply already-validated batches (follower appends, recovery)."""
        staged: dict[int, ProducerEntry] = {}
        for header in headers:
            if header.producer_id >= 0:
                self.stage(header, staged)
        self.commit(staged, end_offset)

    def remove_expired(self, now_ms: int) -> int:
        """Forget producers idle longer than producer.id.expiration.ms (no open txn)."""
        horizon = now_ms - self.producer_id_expiration_ms
        expired = [
            pid
            for pid, entry in self.producers.items()
            if entry.last_timestamp < horizon and entry.current_txn_first_offset < 0
        ]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    def reset(self, offset: int) -> None:
        self.producers.clear()
        self.verification_guards.clear()
        self.map_end_offset = offset

    # -- snapshots ----------------------------------------------------------------
    def snapshot_offsets(self) -> list[int]:
        """Offsets of the snapshots there are, counting queued writes and deletions."""
        offsets = set()
        paths = set(self.directory.glob(f"*{SNAPSHOT_SUFFIX}"))
        for path, data in self.files.planned(self.directory).items():
            if data is None:
                paths.discard(path)
            elif path.name.endswith(SNAPSHOT_SUFFIX):
                paths.add(path)
        for path in paths:
            with contextlib.suppress(ValueError):
                offsets.add(int(path.name[: -len(SNAPSHOT_SUFFIX)]))
        return sorted(offsets)

    def take_snapshot(self) -> Path:
        """Queue the current state as ``<map_end_offset>.snapshot`` (durable, atomic)."""
        path = snapshot_path(self.directory, self.map_end_offset)
        # Unsynced: fsynced by the log's next flush (before its recovery point moves)
        # or close; a snapshot lost to a power failure only lengthens the replay.
        self.files.write(path, self.snapshot_bytes(), sync=False)
        return path

    def snapshot_bytes(self) -> bytes:
        """The current state in the snapshot format (built on the loop, cheap)."""
        body = bytearray(struct.pack(">i", len(self.producers)))
        for entry in self.producers.values():
            body += _PRODUCER.pack(
                entry.producer_id,
                entry.epoch,
                entry.last_timestamp,
                entry.coordinator_epoch,
                entry.current_txn_first_offset,
                len(entry.batches),
            )
            for b in entry.batches:
                body += _BATCH.pack(
                    b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp
                )
        return struct.pack(">hI", SNAPSHOT_VERSION, crc32c(bytes(body))) + bytes(body)

    def load_snapshot(self, path: Path) -> None:
        """Replace the state with the snapshot's; SnapshotCorruptError if it is damaged."""
        planned = self.files.planned(self.directory)
        if path in planned:
            data = planned[path]
            if data is None:
                raise FileNotFoundError(f"{path}: deleted")
            producers = _decode_snapshot(path, data)
        else:
            producers = read_snapshot(path)
        self.producers = {entry.producer_id: entry for entry in producers}
        self.map_end_offset = int(path.name[: -len(SNAPSHOT_SUFFIX)])

    def delete_snapshots(self, *, below: int | None = None, above: int | None = None) -> None:
        for offset in self.snapshot_offsets():
            path = snapshot_path(self.directory, offset)
            if above is not None and offset > above:
                # Now, not queued: the log may grow past this offset again, and a snapshot
                # of the log before the truncation must not be there to be loaded.
                self.files.unlink_now(path)
            elif below is not None and offset < below:
                self.files.unlink(path)  # below the log start: never loaded again

    def load_latest_snapshot(self, not_after: int) -> None:
        """Load the newest readable snapshot at or below ``not_after``; reset if none.

        Damaged snapshots are deleted, falling back to older ones, because the state
        can always be rebuilt by replay from an earlier point.
        """
        for offset in reversed(self.snapshot_offsets()):
            if offset > not_after:
                continue
            path = snapshot_path(self.directory, offset)
            try:
                self.load_snapshot(path)
                return
            except (SnapshotCorruptError, OSError):
                self.files.unlink(path)
        self.reset(0)


def read_snapshot(path: Path) -> list[ProducerEntry]:
    """Decode a snapshot file (tools); SnapshotCorruptError if it is damaged."""
    return _decode_snapshot(path, path.read_bytes())


def _apply(entry: ProducerEntry, header: BatchHeader) -> None:
    if header.producer_epoch != entry.epoch:
        entry.epoch = header.producer_epoch
        entry.batches.clear()
    entry.last_timestamp = header.max_timestamp
    if header.is_control:
        entry.current_txn_first_offset = -1  # a transaction marker ends the open txn
        return
    if header.is_transactional and entry.current_txn_first_offset < 0:
        entry.current_txn_first_offset = header.base_offset
    if header.base_sequence == NO_SEQUENCE:
        return
    entry.batches.append(
        BatchMetadata(
            header.base_sequence,
            header.last_sequence,
            header.base_offset,
            header.last_offset,
            header.max_timestamp,
        )
    )
    if len(entry.batches) > BATCHES_RETAINED:
        del entry.batches[0]


def _decode_snapshot(path: Path, data: bytes) -> list[ProducerEntry]:
    if len(data) < _SNAPSHOT_HEAD.size:
        raise SnapshotCorruptError(f"{path}: truncated")
    version, crc, count = _SNAPSHOT_HEAD.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise SnapshotCorruptError(f"{path}: unknown version {version}")
    if crc32c(data[6:]) != crc:
        raise SnapshotCorruptError(f"{path}: CRC mismatch")
    position = _SNAPSHOT_HEAD.size
    entries = []
    try:
        for _ in range(count):
            pid, epoch, last_ts, coordinator_epoch, txn_first, batch_count = _PRODUCER.unpack_from(
                data, position
            )
            position += _PRODUCER.size
            entry = ProducerEntry(pid, epoch, [], last_ts, coordinator_epoch, txn_first)
            for _ in range(batch_count):
                entry.batches.append(BatchMetadata(*_BATCH.unpack_from(data, position)))
                position += _BATCH.size
            entries.append(entry)
    except struct.error:
        raise SnapshotCorruptError(f"{path}: truncated entry") from None
    if position != len(data):
        raise SnapshotCorruptError(f"{path}: {len(data) - position} trailing bytes")
    return entries
