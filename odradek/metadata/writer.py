"""MetadataWriter: how the controller's records become committed, and the local one.

How this works and why: the controller only decides. It hands the records of one
change to a ``MetadataWriter`` and awaits the committed offset; the writer owns the
log, and once a batch is committed it hands it to the MetadataLoader, which builds
the image everyone (the controller too) reads. So the writer's contract is:

- ``append(records)`` returns the offset of the batch's last record once the batch is
  committed **and the loader has published it** (the controller's image then already
  holds the change), or raises ControllerError KAFKA_STORAGE_ERROR with nothing
  committed and nothing published.
- ``replay()`` feeds the loader what the log holds that is known to be committed, at
  start-up, as one loader run.

``LocalMetadataWriter`` is the single-voter case (combined mode, one node):
committed means appended to ``__cluster_metadata-0`` and fsynced. A write or fsync
that fails cuts the log back to where it was and syncs that, so a restart replays
exactly what clients saw; if even the cut fails the log's state on disk is unknown
and every later append is refused until a restart recovers it. It also writes the
metadata snapshots (snapshotter.py decides when): off the event loop, then it moves
the log start past the whole segments no kept snapshot needs; ``replay`` starts from
the newest snapshot that reads back whole and applies only the log after it.

A Raft-backed writer keeps this shape: ``append`` appends to the leader's log and
completes when the high watermark passes the batch (the Raft client's commit
listener having called ``loader.handle_commit`` for it, as every voter and broker
does for every batch); ``replay`` feeds what the persisted high watermark covers.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Final, Protocol

from odradek.metadata.errors import ControllerError
from odradek.metadata.image import MetadataImage, MetadataRecord
from odradek.metadata.loader import LoaderRun, MetadataLoader
from odradek.metadata.snapshot import SnapshotCorruptError, read_snapshot
from odradek.metadata.snapshotter import MetadataSnapshotter, SnapshotPolicy, write_snapshot
from odradek.raft.snapshots import FileSnapshotStore, snapshot_file_name
from odradek.records.codec import Record, decode_batch, encode_batch
from odradek.storage.errors import CommittedDataCorruptError, StorageError
from odradek.storage.log import Log

logger = logging.getLogger(__name__)

CONTROLLER_EPOCH: Final = 1  # single voter; the quorum issue makes this a Raft epoch


class MetadataWriter(Protocol):
    async def append(self, records: Sequence[MetadataRecord]) -> int:
        """Commit ``records`` as one batch; its last offset, once the loader published it.

        Raises ControllerError (KAFKA_STORAGE_ERROR; NOT_CONTROLLER for a Raft writer
        that lost leadership) with nothing committed.
        """
        ...

    def replay(self) -> MetadataImage:
        """Start-up: feed the loader every batch known committed; the loader's image."""
        ...

    @property
    def active_epoch(self) -> int:
        """The leader epoch in which this writer may write (it is the active
        controller), or -1: what the controller's in-memory state (broker sessions)
        belongs to."""
        ...


def read_committed_batches(
    log: Log, start_offset: int = 0
) -> Iterator[tuple[int, list[MetadataRecord], object, int]]:
    """Every batch of ``log`` ending at or after ``start_offset`` as (last offset,
    records, file, position), CRC-checked.

    A clean start trusts the flushed segments without re-reading them, so the CRC is
    checked here. Batches before ``start_offset`` (a snapshot holds them) are skipped
    by their headers alone. Damage raises CommittedDataCorruptError naming the file
    and the position of the first bad batch.
    """
    for segment in log.segments:
        if segment.next_offset <= start_offset:
            continue
        position = 0
        try:
            for header in segment.iter_headers(0):
                if header.last_offset < start_offset:
                    position = header.position + header.size
                    continue
                decoded = decode_batch(os.pread(segment.fd, header.size, header.position))
                if header.is_control:  # Raft's LeaderChange: checked, holds no metadata
                    position = header.position + header.size
                    continue
                records = [MetadataRecord.decode(r.key, r.value) for r in decoded.records]
                yield decoded.header.last_offset, records, segment.log_path, header.position
                position = header.position + header.size
        except (StorageError, ValueError, KeyError, TypeError) as error:
            raise CommittedDataCorruptError(
                segment.log_path, position, f"{type(error).__name__}: {error}"
            ) from None


def replay_log(
    log: Log, loader: MetadataLoader, snapshots: FileSnapshotStore | None = None
) -> MetadataImage:
    """Feed the latest valid snapshot in ``snapshots`` and every batch of ``log``
    after it to ``loader`` as one run (start-up).

    A batch that decodes but does not fit the image (an unknown record type, a
    partition of an unknown topic) is damage too, reported at that batch. Either way
    nothing is published: the image stays as it was, never a cluster missing what
    follows the damage.
    """
    run = loader.replay()
    start = 0 if snapshots is None else apply_latest_snapshot(run, log, snapshots)
    return replay_batches(run, log, start)


def replay_batches(run: LoaderRun, log: Log, start_offset: int) -> MetadataImage:
    """Apply the batches of ``log`` from ``start_offset`` to ``run`` and publish it."""
    for offset, records, path, position in read_committed_batches(log, start_offset):
        try:
            run.apply(offset, records)
        except (ValueError, KeyError, TypeError) as error:
            raise CommittedDataCorruptError(
                path, position, f"{type(error).__name__}: {error}"
            ) from None
    return run.finish()


class MetadataSnapshotsUnusableError(CommittedDataCorruptError):
    """No snapshot can be used and the log no longer holds what they stood for."""


def apply_latest_snapshot(run: LoaderRun, log: Log, snapshots: FileSnapshotStore) -> int:
    """Apply the newest snapshot that reads back whole to ``run``; its end offset (0
    when there is none and the log starts at 0).

    A damaged snapshot is reported with one ERROR line and the next older one is
    tried. When no usable snapshot remains and the log no longer starts where it
    would have to (the snapshot's end, or 0), the metadata is gone:
    CommittedDataCorruptError names the newest snapshot and the log start.
    """
    damaged: list[Path] = []
    first_log_offset = log.log_start_offset
    for snapshot_id in reversed(snapshots.list()):
        path = log.directory / snapshot_file_name(snapshot_id)
        try:
            contents = read_snapshot(snapshots.read(snapshot_id), str(path))
        except (SnapshotCorruptError, OSError) as error:
            logger.error("metadata snapshot unusable, trying an older one or the log: %s", error)
            damaged.append(path)
            continue
        if snapshot_id.end_offset < first_log_offset:
            break  # the log after it is gone: it cannot be used either
        if snapshot_id.end_offset > log.log_end_offset:
            logger.warning(
                "%s ends at offset %d, beyond the metadata log's end %d; the log restarts "
                "at the snapshot's end",
                path.name,
                snapshot_id.end_offset,
                log.log_end_offset,
            )
            log.truncate_fully_and_start_at(snapshot_id.end_offset)
        run.apply_snapshot(snapshot_id.end_offset, contents.records)
        logger.info(
            "loaded metadata snapshot %s: %d records up to offset %d",
            path.name,
            len(contents.records),
            snapshot_id.end_offset - 1,
        )
        return snapshot_id.end_offset
    if first_log_offset == 0:
        return 0
    where = damaged[0] if damaged else log.directory
    raise MetadataSnapshotsUnusableError(
        where,
        0,
        f"no usable metadata snapshot ({len(damaged)} damaged, none valid ending at or "
        f"after offset {first_log_offset}) and the metadata log starts at offset "
        f"{first_log_offset}, not 0: the metadata below it is lost. Nothing was changed; "
        f"restore {log.directory} from a backup",
    )


class LocalMetadataWriter:
    """The single voter's writer: append to the local metadata log, fsync, publish."""

    def __init__(
        self, log: Log, loader: MetadataLoader, snapshot_policy: SnapshotPolicy | None = None
    ) -> None:
        self.log = log
        self.loader = loader
        # Set when a failed append could not be rolled back: the log's state is unknown.
        self._failed: str | None = None
        # Snapshots live beside the log (Kafka's layout); a leftover .part is removed here.
        self.snapshots = FileSnapshotStore(log.directory)
        self.snapshotter = MetadataSnapshotter(snapshot_policy or SnapshotPolicy(), log.clock())
        self._snapshot_task: asyncio.Task[None] | None = None
        self._last_timestamp_ms = -1  # of the last committed batch

    @property
    def active_epoch(self) -> int:
        return -1 if self._failed is not None else CONTROLLER_EPOCH

    def replay(self) -> MetadataImage:
        run = self.loader.replay()
        start = apply_latest_snapshot(run, self.log, self.snapshots)
        image = replay_batches(run, self.log, start)
        self.log.high_watermark = self.log.log_end_offset
        # The log after the snapshot counts towards the next one, as if just committed.
        self.snapshotter.record_commit(sum(h.size for h in self.log.iter_headers(start)))
        return image

    # -- snapshots ---------------------------------------------------------------------
    def maybe_snapshot(self) -> None:
        """Start a snapshot of the committed image if one is due (on the event loop)."""
        now = self.log.clock()
        if self._failed is not None or not self.snapshotter.due(now):
            return
        self.snapshotter.started()
        image = self.loader.image  # immutable: the worker thread may read it
        timestamp = self._last_timestamp_ms if self._last_timestamp_ms >= 0 else now
        self._snapshot_task = asyncio.get_running_loop().create_task(
            self._snapshot(image, timestamp)
        )

    async def _snapshot(self, image: MetadataImage, timestamp_ms: int) -> None:
        loop = asyncio.get_running_loop()
        ok = False
        try:
            snapshot_id, keep_from = await loop.run_in_executor(
                None, write_snapshot, self.snapshots, image, CONTROLLER_EPOCH, timestamp_ms
            )
            logger.info(
                "wrote metadata snapshot %s (offsets below %d)",
                snapshot_file_name(snapshot_id),
                snapshot_id.end_offset,
            )
            await self._delete_log_before(keep_from)
            ok = True
        except (OSError, StorageError) as error:
            logger.error(
                "metadata snapshot at offset %d failed: %s (the log is kept; retried later)",
                image.offset + 1,
                getattr(error, "strerror", None) or error,
            )
        finally:
            self.snapshotter.finished(self.log.clock(), ok)

    async def _delete_log_before(self, offset: int) -> None:
        """Move the log start to ``offset`` (a retained snapshot's end): whole segments
        below it are renamed ``.deleted`` here and unlinked on a worker thread."""
        log = self.log
        if log.closed or offset <= log.log_start_offset:
            return
        log.increment_log_start_offset(min(offset, log.high_watermark))
        doomed = log.take_due_deletions(force=True)
        if doomed:

            def unlink_all() -> None:
                for segment in doomed:
                    segment.delete_files()

            await asyncio.get_running_loop().run_in_executor(None, unlink_all)

    async def wait_snapshot(self) -> None:
        """Let a snapshot being written finish (shutdown, tests)."""
        task = self._snapshot_task
        if task is not None and not task.done():
            await asyncio.shield(task)

    async def append(self, records: Sequence[MetadataRecord]) -> int:
        assert records, "an empty change is not written"
        if self._failed is not None:
            raise ControllerError("KAFKA_STORAGE_ERROR", self._failed)
        now = self.log.clock()
        encoded = [Record(offset, now, *record.encode()) for offset, record in enumerate(records)]
        end = self.log.log_end_offset
        try:
            info = self.log.append_as_leader(encode_batch(encoded), CONTROLLER_EPOCH)
            segments, target = self.log.prepare_flush()

            def fsync_all() -> None:
                for segment in segments:
                    segment.fsync()

            await asyncio.get_running_loop().run_in_executor(None, fsync_all)
        except (OSError, StorageError) as error:
            raise self._roll_back(end, error) from None
        self.log.mark_flushed(target)
        self.log.high_watermark = self.log.log_end_offset  # one voter: durable = committed
        self.loader.handle_commit(info.last_offset, records)
        self._last_timestamp_ms = now
        self.snapshotter.record_commit(info.size)
        self.maybe_snapshot()
        return info.last_offset

    def _roll_back(self, end: int, error: Exception) -> ControllerError:
        """Cut the metadata log back to ``end`` after a failed append; the error to raise."""
        cause = error.__cause__ if isinstance(error, StorageError) and error.__cause__ else error
        detail = getattr(cause, "strerror", None) or str(cause)
        try:
            self.log.truncate_to(end)  # frees space: works on a full disk
            active = self.log.active_segment  # the cut must be durable, not only the data
            active.write_indexes()
            active.fsync()
        except (OSError, StorageError) as again:
            self._failed = (
                f"the metadata log {self.log.directory} could not be written ({detail}) nor cut "
                f"back ({getattr(again, 'strerror', None) or again}); restart the broker once "
                "the disk has room"
            )
            logger.error("%s", self._failed)
            return ControllerError("KAFKA_STORAGE_ERROR", self._failed)
        logger.error(
            "metadata change not committed: writing %s failed (%s); the log is back at "
            "offset %d and the change was not applied",
            self.log.directory,
            detail,
            end,
        )
        return ControllerError(
            "KAFKA_STORAGE_ERROR", f"metadata change not committed: the metadata log: {detail}"
        )


__all__ = [
    "CONTROLLER_EPOCH",
    "LocalMetadataWriter",
    "MetadataSnapshotsUnusableError",
    "MetadataWriter",
    "apply_latest_snapshot",
    "read_committed_batches",
    "replay_batches",
    "replay_log",
]
