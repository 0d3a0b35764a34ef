"""RaftMetadataWriter: the controller's records committed through the KRaft quorum.

How this works and why: the controller decides, this writer has its records committed
(writer.py's ``MetadataWriter`` contract) and the MetadataLoader applies them, on every
voter alike. ``append`` encodes one v2 batch exactly as ``LocalMetadataWriter`` does and
hands it to ``RaftDriver.append``, which resolves once the high watermark passed it;
the driver hands committed entries to ``handle_commit`` (this writer is its commit
listener) before it resolves an append, and ``append`` additionally waits until the
loader has applied its batch, so the caller finds the change in the image.

The commit listener: data entries are decoded into ``MetadataRecord``s and published
through ``loader.handle_commit``; control entries (LeaderChange) are skipped, except
that they mark the claim (below). A ``SnapshotLoaded`` for a snapshot the loader
already holds (every start: the node hands over its latest snapshot first) is skipped;
on a fresh loader it starts the image; on a running node (a follower behind the
leader's log start) the loader resets to it (``reset_to_snapshot``: the image rebuilt
from the snapshot, the delta against the whole old image).

Controller gating (Kafka's "claim"): the active controller accepts writes only once
its loader has applied everything up to the start of its own epoch, that is once the
LeaderChange entry its election appended has been handed over (everything before it
was handed over first, in order). Before that, and on any node that is not the
leader, ``append`` raises ControllerError NOT_CONTROLLER, which clients retry after
refreshing metadata.

Start-up (``replay``): what is below the newest snapshot's end is known committed
(only committed state is ever snapshotted), so the newest snapshot that reads back
whole (or an older one when it is damaged, the log holding what follows each kept
one) and the log up to that end are published as one loader run, as before. The log
beyond it is only *checked* (every CRC, every record decoded and folded into a scratch
copy of the image), so damage still stops the broker with one line naming file and
position; it is published later, as the quorum commits it (on a single voter: as soon
as its LeaderChange commits).

Snapshots: the same decision as the single voter's (snapshotter.py); the payload is
built on a worker thread from the immutable image, then stored through
``RaftDriver.create_snapshot`` (``delete_log=False``), and the log start moves to the
end of the *older* retained snapshot once two are kept, so a damaged newest snapshot
still falls back to the older one plus the log.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from odradek.metadata.errors import ControllerError
from odradek.metadata.image import MetadataImage, MetadataRecord
from odradek.metadata.loader import LoaderRun, MetadataLoader
from odradek.metadata.snapshot import build_snapshot, read_snapshot
from odradek.metadata.snapshotter import MetadataSnapshotter, SnapshotPolicy
from odradek.metadata.writer import (
    apply_latest_snapshot,
    read_committed_batches,
)
from odradek.raft.driver import NotControllerError, RaftStepError
from odradek.raft.log import SnapshotId
from odradek.raft.node import BackPressureError, CommitEvent, CommittedEntries, SnapshotLoaded
from odradek.raft.snapshots import SNAPSHOTS_RETAINED, FileSnapshotStore, snapshot_file_name
from odradek.records.codec import Record, decode_batch, encode_batch
from odradek.storage.errors import CommittedDataCorruptError, StorageError

if TYPE_CHECKING:
    from odradek.raft.disk_log import DiskRaftLog
    from odradek.raft.driver import RaftDriver

logger = logging.getLogger(__name__)


class RaftMetadataWriter:
    """The controller's writer over a ``RaftDriver``; also the driver's commit listener."""

    def __init__(
        self,
        raft_log: DiskRaftLog,
        loader: MetadataLoader,
        snapshots: FileSnapshotStore,
        snapshot_policy: SnapshotPolicy | None = None,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        self.raft_log = raft_log
        self.loader = loader
        self.snapshots = snapshots
        self._clock_ms = clock_ms or raft_log.storage_log.clock
        self.snapshotter = MetadataSnapshotter(
            snapshot_policy or SnapshotPolicy(), self._clock_ms()
        )
        self.driver: RaftDriver | None = None
        # The offset just past the last entry handed to the loader (control entries too).
        self.applied_end = 0
        # The leader epoch whose LeaderChange has been applied on this node: writes are
        # accepted while this node leads that epoch.
        self._claimed_epoch = -1
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._snapshot_task: asyncio.Task[None] | None = None
        self._last_timestamp_ms = -1
        # Start-up: the image of everything the local log holds (committed or not yet
        # known to be), to check partition dirs before the quorum writes anything.
        self.local_image = loader.image

    def attach(self, driver: RaftDriver) -> None:
        """Become ``driver``'s commit listener (before ``driver.start``)."""
        self.driver = driver
        driver.set_listener(self.handle_commit)

    # -- start-up --------------------------------------------------------------------------
    def replay(self) -> MetadataImage:
        """Publish the newest usable snapshot and the log below the newest snapshot's end;
        check (never publish) the rest. Damage raises CommittedDataCorruptError."""
        log = self.raft_log.storage_log
        run = self.loader.replay()
        start = apply_latest_snapshot(run, log, self.snapshots)
        latest = self.snapshots.latest()
        committed_end = max(start, latest.end_offset if latest is not None else 0)
        check: LoaderRun | None = None
        for offset, records, path, position in read_committed_batches(log, start):
            try:
                if offset < committed_end:
                    run.apply(offset, records)
                    continue
                if check is None:
                    run.finish()
                    check = self.loader.replay()  # a scratch run: never finished
                check.apply(offset, records)
            except (ValueError, KeyError, TypeError) as error:
                raise CommittedDataCorruptError(
                    path, position, f"{type(error).__name__}: {error}"
                ) from None
        if check is None:
            run.finish()
        self.local_image = self.loader.image if check is None else check.preview()
        self.applied_end = max(committed_end, self.loader.image.offset + 1)
        # The log after the snapshot counts towards the next one, as if just committed.
        self.snapshotter.record_commit(sum(h.size for h in log.iter_headers(start)))
        return self.loader.image

    # -- the commit listener -----------------------------------------------------------------
    def handle_commit(self, event: CommitEvent) -> None:
        if isinstance(event, SnapshotLoaded):
            self._load_snapshot(event.snapshot_id, event.payload)
        else:
            assert isinstance(event, CommittedEntries)
            for entry in event.entries:
                if entry.next_offset <= self.applied_end:
                    continue  # published at start-up
                assert entry.offset == self.applied_end, (entry.offset, self.applied_end)
                if entry.control:
                    driver = self.driver
                    if driver is not None and driver.is_leader and entry.epoch == driver.epoch:
                        self._claimed_epoch = entry.epoch  # everything before it is applied
                else:
                    decoded = decode_batch(entry.payload)
                    records = [MetadataRecord.decode(r.key, r.value) for r in decoded.records]
                    self.loader.handle_commit(entry.last_offset, records)
                    self._last_timestamp_ms = decoded.header.max_timestamp
                    self.snapshotter.record_commit(len(entry.payload))
                self.applied_end = entry.next_offset
        self._wake_waiters()
        self.maybe_snapshot()

    def _load_snapshot(self, snapshot_id: SnapshotId, payload: bytes) -> None:
        if snapshot_id.end_offset <= self.applied_end:
            return  # the loader holds it (start-up read it, or later entries)
        contents = read_snapshot(payload, snapshot_file_name(snapshot_id))
        # Past what this node applied: the snapshot came from the leader (FetchSnapshot),
        # this node being behind the leader's log start.
        logger.info(
            "caught up by the leader's metadata snapshot %s (applied below offset %d before)",
            snapshot_file_name(snapshot_id),
            self.applied_end,
        )
        if self.loader.image.offset >= 0:
            self.loader.reset_to_snapshot(snapshot_id.end_offset, contents.records)
        else:
            run = self.loader.replay()
            run.apply_snapshot(snapshot_id.end_offset, contents.records)
            run.finish()
        self.applied_end = snapshot_id.end_offset

    def _wake_waiters(self) -> None:
        still = []
        for offset, future in self._waiters:
            if future.done():
                continue
            if self.applied_end > offset:
                future.set_result(None)
            else:
                still.append((offset, future))
        self._waiters = still

    # -- gating -----------------------------------------------------------------------------
    @property
    def is_active(self) -> bool:
        """Leader of the quorum, with its own epoch's start applied (the claim)."""
        driver = self.driver
        return (
            driver is not None
            and not driver.stopped
            and driver.is_leader
            and driver.epoch == self._claimed_epoch
        )

    @property
    def active_epoch(self) -> int:
        """The epoch this node leads with its claim made, or -1."""
        driver = self.driver
        return driver.epoch if driver is not None and self.is_active else -1

    def silent_predecessor(self) -> tuple[int, int] | None:
        """While active: the previous leader whose fetches timed out before this node
        was elected, and when this node last heard from it (monotonic ms, the
        controller's clock) — broker_heartbeats.py dates its broker's session from
        then. None after a resignation or when this node did not follow it."""
        driver = self.driver
        if driver is None or not self.is_active:
            return None
        silent = driver.predecessor
        return None if silent is None else (silent.node_id, silent.last_heard_ms)

    def caught_up(self) -> bool:
        """The loader applied everything the quorum is known to have committed."""
        driver = self.driver
        if driver is None or not driver.high_watermark_current:
            return False  # e.g. a restarted leader's HW is its snapshot's end until it leads
        return self.applied_end >= driver.high_watermark

    # -- append -----------------------------------------------------------------------------
    async def append(self, records: Sequence[MetadataRecord]) -> int:
        assert records, "an empty change is not written"
        driver = self.driver
        if driver is None or not self.is_active:
            leader = None if driver is None else driver.leader_id
            raise ControllerError(
                "NOT_CONTROLLER", f"node is not the active controller (leader: {leader})"
            )
        now = self._clock_ms()
        encoded = [Record(offset, now, *record.encode()) for offset, record in enumerate(records)]
        try:
            last_offset = await driver.append(encode_batch(encoded))
        except NotControllerError as error:
            raise ControllerError("NOT_CONTROLLER", str(error)) from None
        except BackPressureError as error:
            raise ControllerError(
                "NOT_CONTROLLER", f"the quorum is not keeping up: {error}"
            ) from None
        except RaftStepError as error:
            raise ControllerError("KAFKA_STORAGE_ERROR", str(error)) from None
        except (OSError, StorageError) as error:
            cause = (
                error.__cause__ if isinstance(error, StorageError) and error.__cause__ else error
            )
            detail = getattr(cause, "strerror", None) or str(cause)
            raise ControllerError(
                "KAFKA_STORAGE_ERROR", f"metadata change not committed: the metadata log: {detail}"
            ) from None
        await self._applied(last_offset)
        return last_offset

    async def _applied(self, offset: int) -> None:
        """Wait until the loader applied ``offset`` (the driver may resolve an append
        while a long hand-over is still in progress)."""
        if self.applied_end > offset:
            return
        driver = self.driver
        assert driver is not None
        if driver.listener_fault is not None:
            raise ControllerError(
                "KAFKA_STORAGE_ERROR", f"metadata not applied: {driver.listener_fault}"
            )
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((offset, future))
        await future

    # -- snapshots --------------------------------------------------------------------------
    def maybe_snapshot(self) -> None:
        """Start a snapshot of the applied image if one is due (on the event loop)."""
        now = self._clock_ms()
        driver = self.driver
        if driver is None or driver.stopped or not self.snapshotter.due(now):
            return
        image = self.loader.image  # immutable: the worker thread may read it
        end_offset = self.applied_end
        if end_offset <= 0 or image.offset < 0:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # start-up replay runs off the loop: the timer retries
        self.snapshotter.started()
        epoch = self.raft_log.epoch_at(end_offset - 1)
        timestamp = self._last_timestamp_ms if self._last_timestamp_ms >= 0 else now
        self._snapshot_task = loop.create_task(self._snapshot(image, end_offset, epoch, timestamp))

    async def _snapshot(
        self, image: MetadataImage, end_offset: int, epoch: int, timestamp_ms: int
    ) -> None:
        loop = asyncio.get_running_loop()
        ok = False
        try:
            payload = await loop.run_in_executor(
                None, lambda: build_snapshot(image.to_records(), timestamp_ms, epoch=epoch)
            )
            driver = self.driver
            assert driver is not None
            if driver.stopped:
                return
            snapshot_id = driver.create_snapshot(end_offset, payload, delete_log=False)
            logger.info(
                "wrote metadata snapshot %s (offsets below %d)",
                snapshot_file_name(snapshot_id),
                snapshot_id.end_offset,
            )
            self._trim_log()
            ok = True
        except (OSError, StorageError) as error:
            logger.error(
                "metadata snapshot at offset %d failed: %s (the log is kept; retried later)",
                end_offset,
                getattr(error, "strerror", None) or error,
            )
        finally:
            self.snapshotter.finished(self._clock_ms(), ok)

    def _trim_log(self) -> None:
        """The log must hold what follows every kept snapshot: once two are kept it may
        start at the older one's end."""
        kept = self.snapshots.list()
        if len(kept) < SNAPSHOTS_RETAINED:
            return
        older = kept[-SNAPSHOTS_RETAINED]
        log = self.raft_log
        if older.end_offset <= log.start_offset or older.end_offset > log.end_offset:
            return
        if (
            not log.is_boundary(older.end_offset)
            or log.epoch_at(older.end_offset - 1) != older.epoch
        ):
            return  # not this log's history (an old snapshot); leave the log as it is
        log.delete_before(older)

    async def wait_snapshot(self) -> None:
        """Let a snapshot being written finish (shutdown, tests)."""
        task = self._snapshot_task
        if task is not None and not task.done():
            await asyncio.shield(task)

    def fail_waiters(self, detail: str) -> None:
        for _, future in self._waiters:
            if not future.done():
                future.set_exception(ControllerError("NOT_CONTROLLER", detail))
        self._waiters = []


__all__ = ["RaftMetadataWriter"]
