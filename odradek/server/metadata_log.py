"""The metadata log's place on disk: ``__cluster_metadata-0``, how it is opened, and
what a broker says when it is damaged or gone.

How this works and why: the composition root (broker.py) opens the metadata log before
anything else reads the cluster's state; these are the parts of that start-up that do
not depend on the broker — the directory name and log config the log is kept with
(also used by tests, benches and the chaos harness), opening it from its recovery
point with what recovery did logged, the one-line messages that stop a broker whose
flushed metadata is damaged or missing beside partition data, and seeding the first
election's epoch from a metadata log written before ``quorum-state`` existed.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Final

from odradek.metadata.controller import METADATA_TOPIC
from odradek.raft.disk_log import DiskRaftLog
from odradek.raft.election_store import QUORUM_STATE_FILE, ElectionState, FileElectionStore
from odradek.raft.snapshots import FileSnapshotStore
from odradek.storage.errors import CommittedDataCorruptError, StorageError
from odradek.storage.log_config import LogConfig

logger = logging.getLogger("odradek.server.broker")

METADATA_LOG_DIR: Final = f"{METADATA_TOPIC}-0"
# The metadata log is never truncated by retention: only a snapshot moves its start
# (metadata/snapshotter.py).
# One commit is one batch: a CreateTopics of 10,000 partitions (the per-request limit)
# is about 2 MB of records, over the 1 MiB topic default, so batches may be up to a
# segment (KRaft's controller batches are bounded at 8 MiB too).
METADATA_LOG_CONFIG: Final = LogConfig(
    retention_ms=-1, retention_bytes=-1, segment_bytes=8 * 2**20, max_message_bytes=8 * 2**20
)


class MetadataLogDamagedError(StorageError):
    """The flushed part of ``__cluster_metadata`` is damaged or gone: the broker stops."""


def open_metadata_log(
    directory: Path, recovery_point: int, clean: bool, *, strict: bool
) -> DiskRaftLog:
    """Open the Raft log of ``__cluster_metadata-0`` from its recovery point, logging
    what recovery did (segments re-read, a torn tail cut)."""
    raft_log = DiskRaftLog.open(
        directory,
        METADATA_LOG_CONFIG,
        recovery_point=recovery_point,
        clean_shutdown=clean,
        strict=strict,
    )
    stats = raft_log.load_stats
    assert stats is not None
    if stats.recovered_segments:
        logger.info(
            "recovered %s from offset %d: %d segment(s), %d batches, %d bytes in %d ms",
            METADATA_LOG_DIR,
            recovery_point,
            stats.recovered_segments,
            stats.batches_recovered,
            stats.bytes_recovered,
            stats.elapsed_ms,
        )
    if stats.corruption is not None:
        logger.warning(
            "%s: cut %d bytes after the last valid batch: %s",
            METADATA_LOG_DIR,
            stats.bytes_truncated,
            stats.corruption,
        )
    return raft_log


def missing_message(directory: Path, partitions: list[str]) -> str:
    shown = ", ".join(partitions[:3]) + (", ..." if len(partitions) > 3 else "")
    return (
        f"{directory} is missing or empty but {directory.parent} holds {len(partitions)} "
        f"partition(s) ({shown}); nothing was changed. Restore the metadata log from a "
        "backup, or start with --truncate-damaged-metadata to begin an empty cluster "
        "(the partitions are then set aside, not deleted)"
    )


def damaged_message(error: CommittedDataCorruptError, log_dir: Path) -> str:
    return (
        f"metadata log damaged where it was already flushed: {error}. Nothing was changed "
        f"(no partition in {log_dir} was touched). Restore {log_dir / METADATA_LOG_DIR} from "
        "a backup, or start with --truncate-damaged-metadata to keep only the metadata "
        f"before position {error.position} of {Path(str(error.path)).name} (partitions it no "
        "longer knows are then set aside, not deleted)"
    )


def seed_election_epoch(
    store: FileElectionStore, raft_log: DiskRaftLog, snapshots: FileSnapshotStore
) -> None:
    """A metadata log without ``quorum-state`` (written by the single voter before the
    quorum, or fresh): record the newest epoch it holds, so the first election's epoch
    exceeds every epoch in the log (a leader must never append in an epoch another
    leader's batches already use)."""
    if store.path.exists():
        return
    latest = snapshots.latest()
    epoch = max(raft_log.last_fetched_epoch, latest.epoch if latest is not None else 0)
    if epoch > 0:
        logger.info(
            "%s absent: the metadata log holds epochs up to %d; the first election is past it",
            QUORUM_STATE_FILE,
            epoch,
        )
        store.write(ElectionState(epoch=epoch))


__all__ = [
    "METADATA_LOG_CONFIG",
    "METADATA_LOG_DIR",
    "MetadataLogDamagedError",
    "damaged_message",
    "missing_message",
    "open_metadata_log",
    "seed_election_epoch",
]
