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
and every later append is refused until a restart recovers it.

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
from typing import Final, Protocol

from odradek.metadata.errors import ControllerError
from odradek.metadata.image import MetadataImage, MetadataRecord
from odradek.metadata.loader import MetadataLoader
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


def read_committed_batches(log: Log) -> Iterator[tuple[int, list[MetadataRecord], object, int]]:
    """Every batch of ``log`` as (last offset, records, file, position), CRC-checked.

    A clean start trusts the flushed segments without re-reading them, so the CRC is
    checked here. Damage raises CommittedDataCorruptError naming the file and the
    position of the first bad batch.
    """
    for segment in log.segments:
        position = 0
        try:
            for header in segment.iter_headers(0):
                decoded = decode_batch(os.pread(segment.fd, header.size, header.position))
                records = [MetadataRecord.decode(r.key, r.value) for r in decoded.records]
                yield decoded.header.last_offset, records, segment.log_path, header.position
                position = header.position + header.size
        except (StorageError, ValueError, KeyError, TypeError) as error:
            raise CommittedDataCorruptError(
                segment.log_path, position, f"{type(error).__name__}: {error}"
            ) from None


def replay_log(log: Log, loader: MetadataLoader) -> MetadataImage:
    """Feed every batch of ``log`` to ``loader`` as one run (start-up).

    A batch that decodes but does not fit the image (an unknown record type, a
    partition of an unknown topic) is damage too, reported at that batch. Either way
    nothing is published: the image stays as it was, never a cluster missing what
    follows the damage.
    """
    run = loader.replay()
    for offset, records, path, position in read_committed_batches(log):
        try:
            run.apply(offset, records)
        except (ValueError, KeyError, TypeError) as error:
            raise CommittedDataCorruptError(
                path, position, f"{type(error).__name__}: {error}"
            ) from None
    return run.finish()


class LocalMetadataWriter:
    """The single voter's writer: append to the local metadata log, fsync, publish."""

    def __init__(self, log: Log, loader: MetadataLoader) -> None:
        self.log = log
        self.loader = loader
        # Set when a failed append could not be rolled back: the log's state is unknown.
        self._failed: str | None = None

    def replay(self) -> MetadataImage:
        image = replay_log(self.log, self.loader)
        self.log.high_watermark = self.log.log_end_offset
        return image

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
    "MetadataWriter",
    "read_committed_batches",
    "replay_log",
]
