"""Opening a partition directory: find segments, recover what may be torn, rebuild state.

How this works and why (seeds/001 "Partition Recovery"): everything below the
recovery point was fsynced, so after a clean shutdown every segment is trusted and
only its indexes are sanity-checked. After a crash, each segment from the one holding
the recovery point onward is re-read batch by batch (length, magic, CRC32C, offsets
increasing); the first bad batch and everything after it — in that segment and in
any later one — is cut off, and the indexes are rebuilt. A write that was torn by the
crash therefore disappears, and every batch that was whole and acknowledged (written
to the page cache before the ack) survives a process kill.

Then the log end offset is known, so the leader epoch cache is trimmed to it and the
producer state is rebuilt from the newest snapshot plus the batch headers after it
(which also rebuilds the set of open transactions, transactions.py). The ``.txnindex``
of every segment that was re-read is deleted by its recovery and rebuilt from the
producer state at the first such segment and the markers after it, as Kafka's segment
recovery does.
Both files are written off the event loop after the fact (deferred_files.py), so a
crash can leave them behind the log, and loading is built for that: a snapshot that is
missing, older than the roll that made it, or torn only makes the replay longer (the
state is a function of the log); the epoch checkpoint may still hold entries a queued
truncation removed, which the trim to the log end and start drops, and after a crash
the epochs of every recovered segment are taken from its batches again (as Kafka's
segment recovery does), so the cache there matches what the batches say; below them
each entry is checked against the batch at its start offset, and a disagreement (a
truncation that never landed, then the log grown again) rebuilds the cache from every
batch.
A strict load (the metadata log, whose loss would empty the cluster) never cuts below
the recovery point: damage there raises CommittedDataCorruptError naming the file and
position, before any file is changed. Leftovers of interrupted operations
(``.deleted`` segments, ``.tmp`` files, orphan indexes) are removed first.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from odradek.records.errors import CorruptRecordError
from odradek.storage.checkpoint import CheckpointError
from odradek.storage.cleaner.swap import complete_swaps
from odradek.storage.deferred_files import DeferredFiles, Submit
from odradek.storage.epoch_cache import LEADER_EPOCH_CHECKPOINT, LeaderEpochCache
from odradek.storage.errors import CommittedDataCorruptError
from odradek.storage.index import IndexCorruptError
from odradek.storage.log import Log, wall_clock_ms
from odradek.storage.log_config import LogConfig
from odradek.storage.producer_state import ProducerStateManager
from odradek.storage.segment import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    RECOVERY_CHUNK_BYTES,
    TIME_INDEX_SUFFIX,
    LogSegment,
)
from odradek.storage.transactions import rebuild_txn_indexes
from odradek.storage.txn_index import TXN_INDEX_SUFFIX

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class LoadStats:
    segments: int = 0
    recovered_segments: int = 0
    batches_recovered: int = 0
    bytes_recovered: int = 0
    bytes_truncated: int = 0
    segments_dropped: int = 0
    corruption: str | None = None
    elapsed_ms: int = 0


def _base_offset(path: Path, suffix: str) -> int | None:
    stem = path.name[: -len(suffix)]
    return int(stem) if stem.isdigit() and len(stem) == 20 else None


def _remove_leftovers(directory: Path) -> set[int]:
    """Delete interrupted-operation files; return the base offsets of real segments.
    An interrupted cleaner swap is finished or rolled back first (cleaner/swap.py)."""
    complete_swaps(directory)
    for path in directory.iterdir():
        if path.name.endswith((DELETED_SUFFIX, ".tmp")):
            path.unlink(missing_ok=True)
    bases = set()
    for path in directory.glob(f"*{LOG_SUFFIX}"):
        base = _base_offset(path, LOG_SUFFIX)
        if base is not None:
            bases.add(base)
    for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
        for path in directory.glob(f"*{suffix}"):
            if _base_offset(path, suffix) not in bases:
                path.unlink(missing_ok=True)  # an index without its log
    return bases


def open_log(
    directory: Path,
    config: LogConfig,
    *,
    recovery_point: int = 0,
    log_start_offset: int = 0,
    clean_shutdown: bool = True,
    clock: Callable[[], int] = wall_clock_ms,
    producer_id_expiration_ms: int = 86_400_000,
    strict: bool = False,
    recovery_chunk_bytes: int = RECOVERY_CHUNK_BYTES,
    background: Submit | None = None,
) -> tuple[Log, LoadStats]:
    """Open (creating if needed) the log in ``directory``; recover it if not clean.

    ``strict`` is for a log that must never lose flushed data (the metadata log):
    damage below ``recovery_point`` — a bad batch, a cut or missing file, a gap
    between segments — raises CommittedDataCorruptError before anything is cut or
    deleted. A torn tail above the recovery point is still truncated.

    ``background`` runs the log's snapshot and checkpoint writes (an executor's
    ``submit``); None writes them at once on the caller.
    """
    started = time.monotonic()
    if strict and recovery_point > 0 and not any(directory.glob(f"*{LOG_SUFFIX}")):
        raise CommittedDataCorruptError(  # checked before anything is created
            directory / f"{0:020d}{LOG_SUFFIX}",
            0,
            f"no segment file, but offsets up to {recovery_point} were flushed "
            "(the recovery point): the log ends at offset 0; its files were deleted",
        )
    directory.mkdir(parents=True, exist_ok=True)
    stats = LoadStats()
    bases = sorted(_remove_leftovers(directory))
    # A segment whose offset index is missing is rebuilt (creating the segment makes one).
    missing_index = {b for b in bases if not (directory / f"{b:020d}{INDEX_SUFFIX}").exists()}
    segments = [_new_segment(directory, base, config, clock) for base in bases]
    if not segments:
        start = max(log_start_offset, 0)
        segments = [_new_segment(directory, start, config, clock)]
    # The segment holding the recovery point and all later ones may hold unflushed data.
    first_unflushed = 0
    for index, segment in enumerate(segments):
        if segment.base_offset <= recovery_point:
            first_unflushed = index
    kept: list[LogSegment] = []
    first_recovered: int | None = None  # base offset of the first segment re-read
    for index, segment in enumerate(segments):
        if stats.corruption is not None:
            segment.delete_files()  # everything after a corrupt batch is dropped
            stats.segments_dropped += 1
            continue
        needs_recovery = not clean_shutdown and index >= first_unflushed
        needs_recovery = needs_recovery or segment.base_offset in missing_index
        if not needs_recovery:
            try:
                segment.load()
            except (IndexCorruptError, CorruptRecordError) as error:
                logger.warning("%s: %s; rebuilding from the log", directory.name, error)
                needs_recovery = True
        if needs_recovery:
            if first_recovered is None:
                first_recovered = segment.base_offset
            following = segments[index + 1].base_offset if index + 1 < len(segments) else None
            result = segment.recover(
                next_segment_base=following,
                chunk_bytes=recovery_chunk_bytes,
                committed_offset=recovery_point if strict else 0,
            )
            stats.recovered_segments += 1
            stats.batches_recovered += result.batches
            stats.bytes_recovered += result.valid_bytes
            stats.bytes_truncated += result.truncated_bytes
            if result.corruption is not None:
                stats.corruption = f"{segment.log_path.name}: {result.corruption}"
        if kept and segment.size == 0 and stats.corruption is not None:
            segment.delete_files()  # a segment cut to nothing behind a corruption
            stats.segments_dropped += 1
            continue
        kept.append(segment)
    stats.segments = len(kept)
    if strict:
        _check_committed(kept, recovery_point)
    # A missing (or zero-byte) checkpoint after a crash is rebuilt from the batch headers too.
    epoch_path = directory / LEADER_EPOCH_CHECKPOINT
    epoch_file_missing = not epoch_path.exists() or epoch_path.stat().st_size == 0
    files = DeferredFiles(background)
    epoch_cache, rebuild_epochs = _open_epoch_cache(directory, files)
    rebuild_epochs = rebuild_epochs or (epoch_file_missing and not clean_shutdown)
    log_start_offset = _clamp_log_start(directory, log_start_offset, kept[-1].next_offset)
    producer_state = ProducerStateManager(directory, producer_id_expiration_ms, files)
    log = Log(
        directory,
        config,
        kept,
        log_start_offset=log_start_offset,
        recovery_point=recovery_point,
        epoch_cache=epoch_cache,
        producer_state=producer_state,
        clock=clock,
    )
    # The epochs are kept from the checkpointed log start, which the Log raises to its
    # local start unless it knows the topic is tiered: the topic's config arrives later
    # (Log.update_config), and a tiered log needs the epochs of its remote part.
    epochs_start = min(log.log_start_offset, log_start_offset)
    if rebuild_epochs:
        _assign_epochs(log, epochs_start)
    elif first_recovered is not None and not clean_shutdown:
        # The checkpoint may lag the log by queued truncations: from the first re-read
        # segment on, the batches say which epoch wrote what.
        start = max(first_recovered, log.log_start_offset)
        epoch_cache.truncate_from_end(start)
        _assign_epochs(log, start)
    epoch_cache.truncate_from_end(log.log_end_offset)
    epoch_cache.truncate_from_start(epochs_start)
    if not clean_shutdown and not rebuild_epochs and not _epochs_match_batches(log):
        # Below the re-read segments a truncation that had not landed left an entry
        # in the middle of another epoch's batches: the batches are the truth.
        logger.warning(
            "%s: the leader epoch checkpoint disagrees with the batches; rebuilding it",
            directory.name,
        )
        epoch_cache.clear()
        _assign_epochs(log, epochs_start)
        epoch_cache.truncate_from_start(epochs_start)
    if not clean_shutdown:
        # An emptied log (truncated fully, the clear not landed) keeps no epoch at its end.
        epoch_cache.truncate_from_end(log.log_end_offset)
    if first_recovered is not None:
        rebuild_txn_indexes(log, first_recovered)
    log.rebuild_producer_state()
    if not clean_shutdown:
        # Recovered data is now validated; it was already on disk, only maybe not synced.
        log.flush()
    stats.elapsed_ms = int((time.monotonic() - started) * 1000)
    return log, stats


def _clamp_log_start(directory: Path, log_start_offset: int, log_end_offset: int) -> int:
    """A checkpointed log start offset beyond the log end is clamped to the log end.

    Believed as it is, it would give the log a start above its end, and the next
    record an offset below the start, that no fetch could read.
    """
    if log_start_offset <= log_end_offset:
        return log_start_offset
    logger.warning(
        "%s: log-start-offset-checkpoint says %d, beyond the log end offset %d; "
        "clamping the log start offset to %d",
        directory.name,
        log_start_offset,
        log_end_offset,
        log_end_offset,
    )
    return log_end_offset


def _check_committed(segments: list[LogSegment], recovery_point: int) -> None:
    """Every offset below the recovery point is still there, in contiguous segments."""
    for before, after in itertools.pairwise(segments):
        if before.next_offset != after.base_offset and before.next_offset < recovery_point:
            raise CommittedDataCorruptError(
                before.log_path,
                before.size,
                f"the segment ends at offset {before.next_offset} but the next one starts "
                f"at {after.base_offset} (a segment file is missing)",
            )
    last = segments[-1]
    if last.next_offset < recovery_point:
        raise CommittedDataCorruptError(
            last.log_path,
            last.size,
            f"the log ends at offset {last.next_offset} but offsets up to {recovery_point} "
            "were flushed (the recovery point): the file was cut or deleted",
        )


def _epochs_match_batches(log: Log) -> bool:
    """Whether the batch at each epoch entry's start offset carries that epoch.

    One header read per entry (a partition has few): enough to see an entry that a
    queued truncation should have removed before the log grew again in older epochs.
    """
    for entry in log.epoch_cache.entries:
        # (entries below the local log start describe tiered storage's segments)
        if not log.local_log_start_offset <= entry.start_offset < log.log_end_offset:
            continue
        header = next(log.iter_headers(entry.start_offset), None)
        if header is None or header.partition_leader_epoch != entry.epoch:
            return False
    return True


def _assign_epochs(log: Log, start: int) -> None:
    for header in log.iter_headers(start):
        if header.partition_leader_epoch >= 0:
            log.epoch_cache.assign(header.partition_leader_epoch, header.base_offset)


def _open_epoch_cache(directory: Path, files: DeferredFiles) -> tuple[LeaderEpochCache, bool]:
    """The epoch cache; a damaged file is replaced by one rebuilt from batch headers."""
    path = directory / LEADER_EPOCH_CHECKPOINT
    try:
        return LeaderEpochCache(path, files), False
    except CheckpointError as error:
        logger.warning("%s; rebuilding the leader epoch cache from the log", error)
        path.unlink(missing_ok=True)
        return LeaderEpochCache(path, files), True


def _new_segment(
    directory: Path, base: int, config: LogConfig, clock: Callable[[], int]
) -> LogSegment:
    return LogSegment(
        directory,
        base,
        index_interval_bytes=config.index_interval_bytes,
        max_index_bytes=config.segment_index_bytes,
        created_ms=clock(),
    )
