"""Moving a replica between this broker's log dirs (AlterReplicaLogDirs, KIP-113).

How this works and why: Kafka's ReplicaAlterLogDirsThread treats the future log in the
target dir as a follower whose leader is the current log of the same partition. Here
one task (``LogDirMover.run``) does the same for every partition in
``LogManager.future_logs``: it reads batches from the current log as a follower's
fetch would and appends them to the future log with ``append_as_follower``, byte for
byte (offsets, epochs and CRCs unchanged), so the future log holds the same batches
and rebuilds the same epoch history and producer state as it goes. Its log start
offset follows the current one (DeleteRecords, retention), and a current log that
was truncated (a follower reconciling with its leader) is detected as a follower
detects divergence, by the end offset of the future's latest epoch in the current
log, and the future truncated to match.

Per partition a ``LogDirMove`` runs COPYING → FINISHING → DONE (or CANCELLED when an
AlterReplicaLogDirs names another dir or the partition leaves, FAILED on an I/O error
of the future log). COPYING copies at most ``chunk_bytes`` per step and at most
``replica.alter.log.dirs.io.max.bytes.per.second`` (the broker's alter-log-dirs
``ReplicationQuota``, replica/replication_quota.py: dynamic, Kafka's windowed rate; a
step copies nothing while the measured rate is above it);
once the future has caught up, FINISHING fsyncs it on a worker thread while appends
go on, then in one synchronous step of the event loop — so no append to the
partition can come between — copies the tail, swaps the logs
(``LogManager.futures.swap``, the crash-safe rename sequence of
storage/future_logs.py) and points the partition at the new log. A move left by a
crash resumes: its future log is loaded again at start-up and this task picks it up.

``plan`` is the sans-IO decision (positions in, one action out); ``LogDirMover`` does
the I/O. Time comes from an injected clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from odradek.storage.epoch_cache import UNDEFINED_EPOCH
from odradek.storage.errors import StorageError
from odradek.storage.future_logs import future_name_fits
from odradek.storage.log import Log

if TYPE_CHECKING:
    from odradek.replica.replica_manager import ReplicaManager
    from odradek.replica.replication_quota import ReplicationQuota
    from odradek.storage.log_manager import LogManager

logger = logging.getLogger(__name__)

DEFAULT_CHUNK_BYTES: Final = 1_048_576  # replica.fetch.max.bytes
IDLE_MS: Final = 100
QUOTA_WAIT_MS: Final = 50  # how soon to look again while the quota is exceeded

TopicPartition = tuple[str, int]


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


# -- the state machine ---------------------------------------------------------------
class MoveState(enum.Enum):
    COPYING = "Copying"
    FINISHING = "Finishing"
    DONE = "Done"
    CANCELLED = "Cancelled"
    FAILED = "Failed"


COPYING, FINISHING, DONE, CANCELLED, FAILED = (
    MoveState.COPYING,
    MoveState.FINISHING,
    MoveState.DONE,
    MoveState.CANCELLED,
    MoveState.FAILED,
)
LEGAL_TRANSITIONS: Final = {
    COPYING: frozenset({FINISHING, CANCELLED, FAILED}),
    FINISHING: frozenset({COPYING, DONE, CANCELLED, FAILED}),  # COPYING: fell behind again
    DONE: frozenset(),
    CANCELLED: frozenset(),
    FAILED: frozenset(),
}


@dataclass(frozen=True, slots=True)
class Positions:
    """What ``plan`` needs of one log."""

    start: int
    end: int
    high_watermark: int
    latest_epoch: int | None
    first_base: int  # base offset of the batch holding ``start`` (it may start below)


def positions(log: Log) -> Positions:
    start = log.log_start_offset
    first_base = start
    for header in log.iter_headers(start, start + 1):
        first_base = min(header.base_offset, start)
        break
    return Positions(start, log.log_end_offset, log.high_watermark, log.latest_epoch, first_base)


@dataclass(frozen=True, slots=True)
class Restart:
    """Empty the future log and start it again at ``offset`` (the current log start)."""

    offset: int


@dataclass(frozen=True, slots=True)
class Truncate:
    """The current log diverged: cut the future log back to ``offset``."""

    offset: int


@dataclass(frozen=True, slots=True)
class AdvanceStart:
    """The current log start moved up (DeleteRecords, retention): follow it."""

    offset: int


@dataclass(frozen=True, slots=True)
class Copy:
    """Copy batches from ``offset`` (the future log end)."""

    offset: int


@dataclass(frozen=True, slots=True)
class CaughtUp:
    """The future log holds every offset of the current one."""


Action = Restart | Truncate | AdvanceStart | Copy | CaughtUp


def plan(current: Positions, future: Positions, epoch_end: tuple[int, int] | None = None) -> Action:
    """The next thing to do for a future log. ``epoch_end`` is the current log's answer
    to OffsetForLeaderEpoch for ``future.latest_epoch`` (None when it has none)."""
    empty_past_base = future.end == future.start > current.first_base
    if future.end < current.first_base or current.start < future.start or empty_past_base:
        return Restart(current.start)  # no offset in common with the current log
    if future.latest_epoch is not None and epoch_end is not None:
        epoch, end = epoch_end
        if epoch == UNDEFINED_EPOCH:
            return Restart(current.start)
        if epoch != future.latest_epoch or end < future.end:
            cut = min(end, future.end)
            return Restart(current.start) if cut < future.start else Truncate(cut)
    if future.end > current.end:
        return Truncate(current.end)
    if current.start > future.start and future.end >= current.start:
        return AdvanceStart(current.start)
    if future.end < current.end:
        return Copy(future.end)
    return CaughtUp()


class LogDirMove:
    """One partition's move; ``_transition`` checks ``LEGAL_TRANSITIONS``."""

    def __init__(self, tp: TopicPartition, target: Path) -> None:
        self.tp = tp
        self.target = target
        self.state = COPYING
        self.copied_bytes = 0

    def _transition(self, target: MoveState) -> None:
        assert target in LEGAL_TRANSITIONS[self.state], f"{self.state} -> {target}"
        logger.debug("%s-%d move to %s: %s -> %s", *self.tp, self.target, self.state, target)
        self.state = target

    def __repr__(self) -> str:
        return f"LogDirMove({self.tp[0]}-{self.tp[1]} -> {self.target}, {self.state.value})"


# -- the I/O --------------------------------------------------------------------------
def copy_batches(current: Log, future: Log, offset: int, max_bytes: int) -> int:
    """Append to ``future`` the batches ``current`` holds from ``offset`` (its end),
    one segment's read of at most ``max_bytes`` (at least one batch); returns bytes."""
    # The log start may lie inside the batch at ``offset``: the read names the start.
    info = current.read(max(offset, current.log_start_offset), max_bytes)
    copied = 0
    for file_range in info.ranges:
        data = os.pread(file_range.fd, file_range.length, file_range.position)
        if len(data) != file_range.length:
            raise StorageError(f"{current.name}: short read at {file_range.position}")
        future.append_as_follower(data)
        copied += len(data)
    return copied


def restart_future(current: Log, future: Log, offset: int) -> None:
    """Empty ``future`` and start it at the base of the batch holding ``offset`` (a log
    start offset may fall inside a batch; the copy then moves the start up)."""
    base = offset
    for header in current.iter_headers(offset):
        base = min(header.base_offset, offset)
        break
    future.truncate_fully_and_start_at(base)


class LogDirMover:
    """The one task that fills every future log and swaps it in (Kafka runs
    ``num.replica.alter.log.dirs.threads`` of them; one here, as all logs live on one
    event loop)."""

    def __init__(
        self,
        log_manager: LogManager,
        replicas: ReplicaManager,
        *,
        quota: ReplicationQuota | None = None,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        clock: Callable[[], int] = monotonic_ms,
    ) -> None:
        self.log_manager = log_manager
        self.replicas = replicas
        self.chunk_bytes = chunk_bytes
        self.clock = clock
        # replica.alter.log.dirs.io.max.bytes.per.second; None: unthrottled
        self.quota = quota
        self.moves: dict[TopicPartition, LogDirMove] = {}
        self.finished: dict[TopicPartition, LogDirMove] = {}  # the last move of each, ended
        self._wake = asyncio.Event()

    # -- requests ------------------------------------------------------------------
    def log_dir_named(self, path: str) -> Path | None:
        """The configured log dir ``path`` names (absolute; symlinks resolved)."""
        if not os.path.isabs(path):
            return None
        wanted = os.path.realpath(path)
        for log_dir in self.log_manager.log_dirs:
            if os.path.realpath(log_dir) == wanted:
                return log_dir
        return None

    def alter(self, topic: str, index: int, path: str) -> str:
        """AlterReplicaLogDirs for one partition: the Kafka error name (NONE when the
        move is under way, already done, or not needed)."""
        tp = (topic, index)
        target = self.log_dir_named(path)
        if target is None:
            return "LOG_DIR_NOT_FOUND"
        if not future_name_fits(topic, index):
            return "INVALID_TOPIC_EXCEPTION"
        if tp in self.replicas.offline or tp in self.replicas.not_created:
            return "KAFKA_STORAGE_ERROR"
        manager = self.log_manager
        current_dir = manager.log_dir_of(topic, index)
        if tp not in self.replicas.partitions or current_dir is None:
            # Created in that dir when the metadata assigns it here (Kafka's preferred
            # log dir); the answer says it is not here yet.
            manager.preferred_dirs[tp] = target
            return "REPLICA_NOT_AVAILABLE"
        future_dir = manager.futures.dir_of(tp)
        if future_dir == target:
            return "NONE"
        try:
            if future_dir is not None:  # a move elsewhere: cancelled for this one
                self._cancel(tp, f"now asked for {target}")
            if current_dir == target:
                return "NONE"
            manager.futures.create(topic, index, target)
        except OSError as error:
            logger.error("cannot move %s-%d to %s: %s", topic, index, target, error)
            return "KAFKA_STORAGE_ERROR"
        self.moves[tp] = LogDirMove(tp, target)
        logger.info("moving %s-%d from %s to %s", topic, index, current_dir, target)
        self._wake.set()
        return "NONE"

    def _cancel(self, tp: TopicPartition, why: str) -> None:
        move = self.moves.pop(tp, None)
        self.log_manager.futures.discard(*tp)
        if move is not None:
            move._transition(CANCELLED)
            self.finished[tp] = move
            logger.info("cancelled the move of %s-%d to %s: %s", *tp, move.target, why)

    # -- the task ------------------------------------------------------------------
    async def run(self) -> None:
        """Copy until cancelled; sleeps when nothing moves or the quota is exceeded."""
        while True:
            try:
                delay_ms = await self.run_once()
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug in one move must not stop every later one
                logger.exception("moving replicas between log dirs failed")
                delay_ms = IDLE_MS
            if delay_ms == 0:
                await asyncio.sleep(0)  # let appends and requests in between chunks
                continue
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay_ms / 1000)

    async def run_once(self) -> int:
        """One step of every move; returns how long to wait before the next (0: now)."""
        futures = self.log_manager.future_logs
        for tp in [tp for tp in self.moves if tp not in futures]:
            self.moves.pop(tp)  # discarded under us (the partition was deleted)
        for tp, future in futures.items():
            if tp not in self.moves:  # found at start-up: resumed
                self.moves[tp] = LogDirMove(tp, future.directory.parent)
        if not self.moves:
            return IDLE_MS
        if self.quota is not None and self.quota.is_quota_exceeded():
            return QUOTA_WAIT_MS
        busy = False
        for tp in list(self.moves):
            try:
                busy = await self.step(tp) or busy
            except (OSError, StorageError) as error:
                self._fail(tp, error)
        return 0 if busy else IDLE_MS

    async def step(self, tp: TopicPartition) -> bool:
        """Advance one move; True if it did work (more may follow at once)."""
        move = self.moves.get(tp)
        partition = self.replicas.partitions.get(tp)
        current = self.log_manager.logs.get(tp)
        future = self.log_manager.future_logs.get(tp)
        if move is None or future is None:
            return False
        if partition is None or current is None or tp in self.replicas.offline:
            return False  # not hosted (yet, or offline): the move waits
        if move.state is not COPYING:
            return False
        # Up to one chunk per step (none while the quota is exceeded); a copy that
        # catches up within it goes on to finish, so appends between steps cannot
        # hold it off.
        exceeded = self.quota is not None and self.quota.is_quota_exceeded()
        budget = 0 if exceeded else self.chunk_bytes
        copied = 0
        while True:
            action = self._next(current, future)
            if isinstance(action, CaughtUp):
                break
            if copied >= budget:
                return True
            done = self._apply(current, future, action, budget - copied)
            copied += done
            move.copied_bytes += done
            if self.quota is not None:
                self.quota.record(done)
            if isinstance(action, Copy) and not done:
                return False  # nothing readable: try again later
        move._transition(FINISHING)
        # fsync what is there off the loop; appends go on meanwhile
        await self.log_manager.flush_log(future)
        if self.moves.get(tp) is not move or self.log_manager.future_logs.get(tp) is not future:
            return True  # cancelled meanwhile
        return self._finish(move)

    def _next(self, current: Log, future: Log) -> Action:
        mine = positions(future)
        epoch_end = None
        if mine.latest_epoch is not None:
            epoch_end = current.end_offset_for_epoch(mine.latest_epoch)
        return plan(positions(current), mine, epoch_end)

    def _apply(self, current: Log, future: Log, action: Action, budget: int) -> int:
        """Do one action; returns the bytes copied."""
        future.high_watermark = min(current.high_watermark, future.log_end_offset)
        if isinstance(action, Restart):
            restart_future(current, future, action.offset)
        elif isinstance(action, Truncate):
            future.truncate_to(action.offset)
        elif isinstance(action, AdvanceStart):
            future.increment_log_start_offset(action.offset)
        elif isinstance(action, Copy):
            return copy_batches(current, future, action.offset, budget)
        return 0

    def _finish(self, move: LogDirMove) -> bool:
        """Synchronously (no append can come between): copy the tail, swap, repoint."""
        tp = move.tp
        current = self.log_manager.logs[tp]
        future = self.log_manager.future_logs[tp]
        while True:
            action = self._next(current, future)
            if isinstance(action, CaughtUp):
                break
            if not isinstance(action, Copy):  # truncated or moved under us: copy again
                self._apply(current, future, action, self.chunk_bytes)
                move._transition(COPYING)
                return True
            move.copied_bytes += self._apply(current, future, action, self.chunk_bytes)
        try:
            log = self.log_manager.futures.swap(*tp)
        except (OSError, StorageError) as error:
            # The disk holds a state start-up finishes (see future_logs.LogSwap); in
            # memory the old log may be half renamed: the partition stops until then.
            reason = (
                f"{tp[0]}-{tp[1]}: moving to {move.target} failed mid-swap: {error}; "
                "restart to finish it"
            )
            self.replicas.offline[tp] = reason
            partition = self.replicas.partitions.get(tp)
            if partition is not None:
                partition.go_offline()
            self.moves.pop(tp, None)
            move._transition(FAILED)
            self.finished[tp] = move
            logger.error("%s", reason)
            return False
        partition = self.replicas.partitions.get(tp)
        if partition is not None:
            partition.log = log
        self.moves.pop(tp, None)
        move._transition(DONE)
        self.finished[tp] = move
        logger.info(
            "moved %s-%d to %s (%d bytes copied, log end %d)",
            *tp,
            move.target,
            move.copied_bytes,
            log.log_end_offset,
        )
        return True

    def _fail(self, tp: TopicPartition, error: Exception) -> None:
        """The future log could not be written (its dir is full or failing): give the
        move up; the current log is untouched."""
        move = self.moves.pop(tp, None)
        try:
            self.log_manager.futures.discard(*tp)
        except OSError as discard_error:
            logger.error("discarding the future log of %s-%d: %s", *tp, discard_error)
        if move is not None:
            move._transition(FAILED)
            self.finished[tp] = move
        logger.error("moving %s-%d failed: %s", *tp, error)
