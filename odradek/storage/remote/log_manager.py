"""RemoteLogManager: a broker's tiered storage tasks (KIP-405) — copy, expire, read.

How this works and why: a tiered topic (``remote.storage.enable``) keeps its old
segments in remote storage so the local disk only holds recent data. Once per
``remote.log.manager.task.interval.ms`` ``run_once`` visits every partition this
broker leads whose topic is tiered (``leaders()``, from the replica manager) and:

* copies, oldest first, each rolled (inactive) local segment whose last offset is
  below min(HW, LSO) (``Log.last_stable_offset``) and above what is already remote:
  COPY_SEGMENT_STARTED -> the RemoteStorageManager's copy of the ``.log``, its
  offset/time/txn indexes, the producer snapshot at the segment's end (the one the
  roll took; an empty one if it is gone) and the leader-epoch entries up to its end
  -> COPY_SEGMENT_FINISHED. Then ``log.highest_offset_in_remote`` moves, which is
  what lets local retention (storage/retention.py, by local.retention.*) delete the
  local copy; the log start offset stays at the remote start.
* expires remote segments, oldest first: those wholly below the log start offset
  (DeleteRecords), older than retention.ms, or while local+remote size exceeds
  retention.bytes (local: the segments not yet copied). The log start offset moves
  past a segment *before* its deletion starts, so no read is sent to it:
  DELETE_SEGMENT_STARTED -> delete -> DELETE_SEGMENT_FINISHED.
* cleans up leftovers of a copy or delete that died half-way (COPY_SEGMENT_STARTED
  or DELETE_SEGMENT_STARTED segments; a deposed leader's copy still in flight then
  ends in an event the metadata's state machine refuses, on every broker alike).

Replicas (the topic-based metadata manager, shared by every broker): a broker that
becomes leader first reads its partition's metadata to the end (``rlmm.ready``), so
``highest_offset_in_remote`` is what the previous leaders copied and copying resumes
after it; a local segment that straddles that offset (this replica rolled elsewhere)
is copied whole — an overlap the metadata cache serves, never a gap. On followed
tiered partitions each pass only moves ``highest_offset_in_remote`` to what the
metadata says is copied, so local retention trims followers as it trims the leader;
a follower missing what only remote storage holds builds its state from there
(follower_state.py).

When a tiered topic is deleted, ``delete_partition`` deletes each partition's remote
segments and metadata in the background.

A store or metadata failure never reaches produce: it is logged in one line and the
partition is tried again after a backoff doubling per failure, from one task
interval up to 32 of them.

``read`` serves a consumer fetch below the local log start (reader.py), and
``find_offset_for_timestamp`` a ListOffsets by timestamp there, on a thread pool of
``remote.log.reader.threads``; the fetch path awaits it, so the event loop
never blocks on remote I/O.

Concurrency: ``run_once`` and ``read`` run on the event loop that owns the logs; the
blocking steps (copies, deletes, metadata appends, reads) run on worker threads, with
what they need from the log (paths, epochs, offsets) gathered on the loop first.
Copies of one partition are sequential, partitions are visited one after another.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import tempfile
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TypeVar

from odradek.records.batch import NO_TIMESTAMP
from odradek.storage.checkpoint import checkpoint_bytes
from odradek.storage.epoch_cache import LEADER_EPOCH_CHECKPOINT_VERSION
from odradek.storage.errors import OffsetOutOfRangeError, StorageError
from odradek.storage.log import Log, wall_clock_ms
from odradek.storage.producer_state import snapshot_path
from odradek.storage.remote.metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from odradek.storage.remote.metadata_manager import RemoteLogMetadataManager
from odradek.storage.remote.reader import (
    RemoteIndexCache,
    RemoteRead,
    find_offset_for_timestamp,
    read_remote,
)
from odradek.storage.remote.storage_manager import LogSegmentData, RemoteStorageManager
from odradek.storage.segment import LogSegment

logger = logging.getLogger(__name__)

COPY_STARTED: Final = RemoteLogSegmentState.COPY_SEGMENT_STARTED
COPY_FINISHED: Final = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
DELETE_STARTED: Final = RemoteLogSegmentState.DELETE_SEGMENT_STARTED
DELETE_FINISHED: Final = RemoteLogSegmentState.DELETE_SEGMENT_FINISHED
MAX_BACKOFF_INTERVALS: Final = 32
READY_TIMEOUT_S: Final = 10.0

_T = TypeVar("_T")
Leaders = Callable[[], Iterable[tuple[TopicIdPartition, Log]]]


@dataclass(slots=True)
class _Backoff:
    failures: int = 0
    next_attempt_ms: int = 0


class RemoteLogManager:
    def __init__(
        self,
        rsm: RemoteStorageManager,
        rlmm: RemoteLogMetadataManager,
        *,
        broker_id: int,
        leaders: Leaders,
        followers: Leaders | None = None,
        index_cache_dir: Path,
        index_cache_bytes: int = 1 << 30,
        task_interval_ms: int = 30_000,
        reader_threads: int = 10,
        clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.rsm = rsm
        self.rlmm = rlmm
        self.broker_id = broker_id
        self.leaders = leaders
        self.followers = followers
        # Partitions led / followed whose metadata was read to its end (``ready``) since
        # the role began; the metadata consumer keeps them current from then on.
        self._led: set[TopicIdPartition] = set()
        self._followed: set[TopicIdPartition] = set()
        self._readable: set[TopicIdPartition] = set()  # metadata read to its end once
        self.task_interval_ms = task_interval_ms
        self.clock = clock
        self.indexes = RemoteIndexCache(index_cache_dir, rsm, index_cache_bytes)
        self._readers = ThreadPoolExecutor(reader_threads, thread_name_prefix="remote-reader")
        self._workers = ThreadPoolExecutor(2, thread_name_prefix="remote-copier")
        self._backoff: dict[TopicIdPartition, _Backoff] = {}
        self._empty_snapshot: Path | None = None
        self._deletions: set[asyncio.Task[None]] = set()

    # -- the tasks -------------------------------------------------------------------------
    async def run(self) -> None:
        """``run_once`` every task interval until cancelled."""
        self.rlmm.start()
        while True:
            await asyncio.sleep(self.task_interval_ms / 1000)
            await self.run_once()

    async def run_once(self) -> None:
        """One copy and expiration pass over every led tiered partition, and the
        followed ones' view of what is remote."""
        if self.followers is not None:
            for tp, log in list(self.followers()):
                self._led.discard(tp)
                await self._follow(tp, log)
        for tp, _ in list(self.leaders()):
            self._followed.discard(tp)
        for tp, log in list(self.leaders()):
            if not log.config.remote_storage_enable or log.closed:
                continue
            backoff = self._backoff.setdefault(tp, _Backoff())
            now = self.clock()
            if now < backoff.next_attempt_ms:
                continue
            try:
                if tp not in self._led:
                    # A new leader reads the partition's metadata to its end first,
                    # so it resumes where the last leader stopped copying.
                    await asyncio.wait_for(self.rlmm.ready(tp), self._ready_timeout_s)
                    self._led.add(tp)
                    self._readable.add(tp)
                await self.copy_segments(tp, log)
                await self.expire_segments(tp, log)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # the store, the metadata, a file gone under us
                backoff.failures += 1
                delay = self.task_interval_ms * min(
                    2 ** (backoff.failures - 1), MAX_BACKOFF_INTERVALS
                )
                backoff.next_attempt_ms = now + delay
                logger.warning(
                    "%s: remote log task failed (%d in a row, next try in %d ms): %s",
                    tp,
                    backoff.failures,
                    delay,
                    error,
                )
            else:
                backoff.failures, backoff.next_attempt_ms = 0, 0

    async def _follow(self, tp: TopicIdPartition, log: Log) -> None:
        """A follower: what the metadata says is copied may go by local retention."""
        if not log.config.remote_storage_enable or log.closed:
            return
        if tp not in self._followed:
            try:
                await asyncio.wait_for(self.rlmm.ready(tp), self._ready_timeout_s)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # TimeoutError too: the next pass asks again
                logger.debug("%s: remote metadata not ready: %s", tp, error)
                return
            self._followed.add(tp)
            self._readable.add(tp)
        listed = self.rlmm.list_remote_log_segments(tp, (COPY_FINISHED,))
        highest = max((m.end_offset for m in listed), default=-1)
        log.highest_offset_in_remote = max(log.highest_offset_in_remote, highest)

    async def _metadata_ready(self, tp: TopicIdPartition) -> None:
        """Before a remote read: the partition's metadata read to its end once (after a
        restart the caches start empty, and a read answered from them would be
        OFFSET_OUT_OF_RANGE, which sends a consumer to its reset policy). StorageError
        (KAFKA_STORAGE_ERROR, which clients retry) if that takes too long."""
        if tp in self._readable:
            return
        try:
            await asyncio.wait_for(self.rlmm.ready(tp), self._ready_timeout_s)
        except TimeoutError:
            raise StorageError(f"{tp}: remote log metadata not loaded yet") from None
        self._readable.add(tp)

    @property
    def _ready_timeout_s(self) -> float:
        """How long one pass waits for a partition's metadata (then: a failure, retried)."""
        return max(self.task_interval_ms / 1000, READY_TIMEOUT_S)

    async def _blocking(self, fn: Callable[..., _T], *args: object) -> _T:
        return await asyncio.get_running_loop().run_in_executor(self._workers, fn, *args)

    # -- copy ------------------------------------------------------------------------------
    async def copy_segments(self, tp: TopicIdPartition, log: Log) -> int:
        """Copy the eligible rolled segments in offset order; returns how many."""
        listed = await self._blocking(self.rlmm.list_remote_log_segments, tp)
        leftovers = [m for m in listed if m.state in (COPY_STARTED, DELETE_STARTED)]
        for metadata in leftovers:
            await self._blocking(self._delete, metadata)
        finished = [m for m in listed if m.state == COPY_FINISHED]
        highest = max((m.end_offset for m in finished), default=-1)
        log.highest_offset_in_remote = max(log.highest_offset_in_remote, highest)
        # The log starts no lower than what remote storage holds (nothing remote, e.g.
        # tiering just enabled: where the disk starts).
        floor = min((m.start_offset for m in finished), default=log.local.start_offset)
        if log.log_start_offset < floor <= log.high_watermark:
            log.increment_log_start_offset(floor)
        copied = 0
        while True:
            found = self._next_to_copy(log)
            if found is None or log.closed:
                return copied
            segment, next_base = found
            metadata, data = self._prepare_copy(tp, log, segment, next_base)
            barrier = log.files.last_seq  # the roll's producer snapshot is queued before
            await self._blocking(self._copy, log, barrier, metadata, data)
            log.highest_offset_in_remote = max(log.highest_offset_in_remote, metadata.end_offset)
            copied += 1
            logger.info(
                "%s: copied segment %d..%d to remote storage (%s)",
                tp,
                metadata.start_offset,
                metadata.end_offset,
                metadata.remote_log_segment_id.id,
            )

    def _copy(
        self, log: Log, barrier: int, metadata: RemoteLogSegmentMetadata, data: LogSegmentData
    ) -> None:
        """Worker thread: COPY_SEGMENT_STARTED -> copy -> COPY_SEGMENT_FINISHED."""
        log.files.wait(barrier)
        if not data.producer_snapshot_index.exists():
            data = _with_snapshot(data, self._empty_snapshot_path())
        self.rlmm.add_remote_log_segment_metadata(metadata)
        custom = self.rsm.copy_log_segment_data(metadata, data)
        self._update(metadata, COPY_FINISHED, custom)

    def _next_to_copy(self, log: Log) -> tuple[LogSegment, int] | None:
        """The oldest inactive segment above what is remote and wholly below min(HW, LSO)."""
        segments = log.segments
        bound = log.last_stable_offset
        for segment, following in itertools.pairwise(segments):
            next_base = following.base_offset
            if next_base > bound:
                return None
            # A segment holding offsets past what is remote; on a new leader whose
            # segments were rolled elsewhere than the old leader's, that one may also
            # hold copied offsets: it is copied again (an overlap, never a gap).
            if (
                next_base - 1 > log.highest_offset_in_remote
                and segment.size > 0
                and next_base > log.log_start_offset
            ):
                return segment, next_base
        return None

    def _prepare_copy(
        self, tp: TopicIdPartition, log: Log, segment: LogSegment, next_base: int
    ) -> tuple[RemoteLogSegmentMetadata, LogSegmentData]:
        """On the loop: the metadata and files of one copy (indexes written first)."""
        segment.write_indexes()
        base, end = segment.base_offset, next_base - 1
        entries = log.epoch_cache.entries
        upto = [e for e in entries if e.start_offset <= end]
        epochs: dict[int, int] = {}
        for entry in upto:
            if entry.start_offset <= base:
                epochs = {entry.epoch: base}
            else:
                epochs[entry.epoch] = entry.start_offset
        if not epochs:
            epochs = {0: base}  # no epoch recorded (a log written before epochs): epoch 0
        txn_path = segment.txn_index.path
        txn = txn_path if txn_path.exists() and txn_path.stat().st_size > 0 else None
        max_timestamp = segment.max_timestamp
        metadata = RemoteLogSegmentMetadata(
            RemoteLogSegmentId.generate(tp),
            base,
            end,
            max_timestamp if max_timestamp != NO_TIMESTAMP else self.clock(),
            self.broker_id,
            self.clock(),
            segment.size,
            epochs,
            txn_index_empty=txn is None,
        )
        lines = [f"{e.epoch} {e.start_offset}" for e in upto]
        data = LogSegmentData(
            segment.log_path,
            segment.offset_index.path,
            segment.time_index.path,
            txn,
            snapshot_path(log.directory, next_base),
            checkpoint_bytes(LEADER_EPOCH_CHECKPOINT_VERSION, lines),
        )
        return metadata, data

    def _empty_snapshot_path(self) -> Path:
        if self._empty_snapshot is None:
            with tempfile.NamedTemporaryFile(
                prefix="odradek-empty-", suffix=".snapshot", delete=False
            ) as f:
                self._empty_snapshot = Path(f.name)
        return self._empty_snapshot

    # -- expiration --------------------------------------------------------------------------
    async def expire_segments(self, tp: TopicIdPartition, log: Log) -> int:
        """Delete remote segments below the log start or past retention; returns how many."""
        listed = await self._blocking(self.rlmm.list_remote_log_segments, tp, (COPY_FINISHED,))
        config = log.config
        now = self.clock()
        remote_size = sum(m.segment_size_in_bytes for m in listed)
        local_size = sum(
            s.size for s in log.segments if s.base_offset > log.highest_offset_in_remote
        )
        excess = remote_size + local_size - config.retention_bytes
        doomed: list[RemoteLogSegmentMetadata] = []
        for metadata in listed:
            below_start = metadata.end_offset < log.log_start_offset
            by_time = (
                config.is_deleting
                and config.retention_ms >= 0
                and now - metadata.max_timestamp_ms > config.retention_ms
            )
            by_size = (
                config.is_deleting
                and config.retention_bytes >= 0
                and excess - metadata.segment_size_in_bytes >= 0
            )
            if not (below_start or by_time or by_size):
                break
            excess -= metadata.segment_size_in_bytes
            doomed.append(metadata)
        for metadata in doomed:
            # First the log start, so no fetch is sent to a segment being deleted.
            start = metadata.end_offset + 1
            if start > log.log_start_offset and start <= log.high_watermark:
                log.increment_log_start_offset(start)
            await self._blocking(self._delete, metadata)
            logger.info(
                "%s: deleted remote segment %d..%d; log start offset %d",
                tp,
                metadata.start_offset,
                metadata.end_offset,
                log.log_start_offset,
            )
        return len(doomed)

    # -- deleted partitions --------------------------------------------------------------------
    def delete_partition(self, tp: TopicIdPartition) -> None:
        """A tiered topic was deleted: delete its remote segments and metadata, in the
        background (a failure is logged; what is left stays in the store)."""
        task = asyncio.get_running_loop().create_task(self._delete_partition(tp))
        self._deletions.add(task)
        task.add_done_callback(self._deletions.discard)

    async def _delete_partition(self, tp: TopicIdPartition) -> None:
        try:
            listed = await self._blocking(self.rlmm.list_remote_log_segments, tp)
            for metadata in listed:
                await self._blocking(self._delete, metadata)
            await self._blocking(self.rlmm.remove_partition, tp)
            self._backoff.pop(tp, None)
            logger.info("%s: deleted %d remote segment(s) of the deleted topic", tp, len(listed))
        except Exception as error:  # the pool closed by a shutdown, the store failing
            logger.warning("%s: remote data of the deleted topic not deleted: %s", tp, error)

    # -- blocking steps (worker threads) ----------------------------------------------------
    def _update(
        self,
        metadata: RemoteLogSegmentMetadata,
        state: RemoteLogSegmentState,
        custom: bytes | None = None,
    ) -> None:
        self.rlmm.update_remote_log_segment_metadata(
            RemoteLogSegmentMetadataUpdate(
                metadata.remote_log_segment_id, self.clock(), custom, state, self.broker_id
            )
        )

    def _delete(self, metadata: RemoteLogSegmentMetadata) -> None:
        self._update(metadata, DELETE_STARTED)
        self.indexes.remove(metadata)
        self.rsm.delete_log_segment_data(metadata)
        self._update(metadata, DELETE_FINISHED)

    # -- reads -------------------------------------------------------------------------------
    async def read(
        self,
        tp: TopicIdPartition,
        log: Log,
        offset: int,
        max_bytes: int,
        min_one_batch: bool,
        committed: bool = False,
    ) -> RemoteRead:
        """Whole batches from ``offset`` (below the local log start) out of remote
        storage, on the reader pool, with the aborted transactions overlapping them
        when ``committed``. OffsetOutOfRangeError when not there."""
        if not log.log_start_offset <= offset < log.local_log_start_offset:
            raise OffsetOutOfRangeError(f"{tp}: offset {offset} is not in remote storage")
        await self._metadata_ready(tp)
        epoch = log.epoch_cache.epoch_for_offset(offset)
        if epoch is None:
            epoch = 0  # matches _prepare_copy for logs without epochs
        found = await asyncio.get_running_loop().run_in_executor(
            self._readers,
            read_remote,
            self.rlmm,
            self.rsm,
            self.indexes,
            tp,
            epoch,
            offset,
            max_bytes,
            min_one_batch,
            committed,
        )
        if found.aborted is not None and not found.complete:
            # Markers of transactions begun remotely may be in the local log.
            local = log.collect_aborted_transactions(log.local_log_start_offset, found.upper_bound)
            found.aborted.extend(a for a in local if a.first_offset < found.upper_bound)
        return found

    async def find_offset_for_timestamp(
        self, tp: TopicIdPartition, log: Log, timestamp: int
    ) -> tuple[int, int] | None:
        """ListOffsets by timestamp in the remote part: (offset, timestamp) of the first
        remote record at/after ``timestamp``, or None (the local log answers)."""
        await self._metadata_ready(tp)
        return await asyncio.get_running_loop().run_in_executor(
            self._readers,
            find_offset_for_timestamp,
            self.rlmm,
            self.rsm,
            self.indexes,
            tp,
            timestamp,
            log.log_start_offset,
        )

    async def stop_metadata(self) -> None:
        """Before ``close``, on the loop: stop the metadata manager's background work
        (a copy waiting on it fails at once, so ``close`` does not wait for it)."""
        await self.rlmm.stop()

    def close(self) -> None:
        """Stop the pools (waiting for running copies and reads) and the plugins."""
        self._workers.shutdown(wait=True, cancel_futures=True)
        self._readers.shutdown(wait=True, cancel_futures=True)
        self.rlmm.close()
        self.rsm.close()
        if self._empty_snapshot is not None:
            self._empty_snapshot.unlink(missing_ok=True)


def _with_snapshot(data: LogSegmentData, snapshot: Path) -> LogSegmentData:
    return LogSegmentData(
        data.log_segment,
        data.offset_index,
        data.time_index,
        data.transaction_index,
        snapshot,
        data.leader_epoch_index,
    )
