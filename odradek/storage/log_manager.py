"""LogManager: every partition log under ``log.dirs``, their checkpoints and housekeeping.

How this works and why: at start-up each log dir is locked (``.lock``, so two brokers
never share one), its checkpoint files are read, and every ``<topic>-<partition>``
directory is opened. If the dir holds no clean-shutdown marker the broker crashed, so
logs are recovered from their recovery points (log_loader.py); the marker is removed
while the broker runs and written back by a clean ``shutdown``. A background task
(``run``) applies retention, time-based flushes, checkpoint writes, delayed file
deletion and producer-id expiry; slow blocking work (fsync, deleting directories)
runs on worker threads so the event loop that owns the logs keeps serving. Each log's
producer snapshots and leader-epoch checkpoint are written in order by a pool of
``background.threads`` workers (deferred_files.py): a roll or a retention pass only
queues them, and a flush waits for them before it moves the recovery point.

Files per log dir (Kafka's names and text formats): ``meta.properties``,
``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``,
``replication-offset-checkpoint`` (high watermarks), ``cleaner-offset-checkpoint``
(where compaction reached, written by the cleaner: cleaner/manager.py), ``.kafka_cleanshutdown``,
``.lock``. Reserved directories (``__cluster_metadata-0``) are not opened here — their
owner opens them with the recovery point and shutdown state found here and attaches
the log, whose recovery point is then checkpointed and which is closed on shutdown
like the others. Deleted logs are renamed ``<topic>-<partition>.<id>-delete`` first and
removed in the background, so a crash mid-delete never resurrects half a log. A log the
metadata does not know (a "stray" log) is never deleted on that evidence alone: it is
renamed ``<topic>-<partition>.<id>-stray`` (as Kafka 3.7+ does), kept, and not loaded
again; an operator removes it, or renames it back once the metadata is repaired.

A partition being moved to another log dir (AlterReplicaLogDirs) also has a *future*
log there, ``<topic>-<partition>.<id>-future`` (``futures``, log_dir_moves.py; the swap
is storage/future_logs.py's): it is checkpointed with the other logs of its dir, loaded
again at start-up (and resumed by the replica layer) if its partition's current log is
here, discarded otherwise; ``recover_swaps`` first finishes any swap a crash interrupted.
``preferred_dirs`` remembers the dir asked for a partition not hosted yet.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import fcntl
import logging
import os
import re
import shutil
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from odradek.storage.checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    CheckpointError,
    read_offset_checkpoint,
    write_offset_checkpoint,
)
from odradek.storage.cleaner.manager import CleanerSettings, LogCleaner
from odradek.storage.errors import StorageError
from odradek.storage.future_logs import (
    parse_future_dir_name,
    parse_swap_dir_name,
    recover_swaps,
)
from odradek.storage.log import Log, wall_clock_ms
from odradek.storage.log_config import LogConfig
from odradek.storage.log_dir_moves import FutureLogs
from odradek.storage.log_loader import open_log
from odradek.storage.meta_properties import (  # re-exported: their home was this module
    META_PROPERTIES_FILE as META_PROPERTIES_FILE,
)
from odradek.storage.meta_properties import read_meta_properties as read_meta_properties
from odradek.storage.meta_properties import write_meta_properties as write_meta_properties
from odradek.storage.partition_metadata import check_topic_id, write_partition_metadata
from odradek.storage.segment import LogSegment

# Directories of a log dir that are not logs: the remote index cache and the
# single-node remote log metadata (storage/remote/reader.py, metadata_manager.py).
NON_LOG_DIRS: Final = frozenset({"remote-log-index-cache", "remote-log-metadata"})
logger = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE: Final = ".kafka_cleanshutdown"
LOCK_FILE: Final = ".lock"
DELETE_DIR_SUFFIX: Final = "-delete"
STRAY_DIR_SUFFIX: Final = "-stray"
_LOG_DIR_NAME = re.compile(r"^(?P<topic>[a-zA-Z0-9._-]+)-(?P<partition>[0-9]+)$")
_DELETED_DIR_NAME = re.compile(r"^.+-[0-9]+\.[0-9a-f]+-delete$")
_STRAY_DIR_NAME = re.compile(r"^.+-[0-9]+\.[0-9a-f]+-stray$")

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class LogManagerSettings:
    """Broker-level housekeeping intervals (Kafka's names and defaults)."""

    retention_check_interval_ms: int = 300_000  # log.retention.check.interval.ms
    flush_scheduler_interval_ms: int = 2**63 - 1  # log.flush.scheduler.interval.ms
    flush_offset_checkpoint_interval_ms: int = 60_000  # log.flush.offset.checkpoint.interval.ms
    flush_start_offset_checkpoint_interval_ms: int = 60_000
    high_watermark_checkpoint_interval_ms: int = 5_000  # replica.high.watermark.checkpoint...
    producer_id_expiration_ms: int = 86_400_000  # producer.id.expiration.ms
    producer_id_expiration_check_interval_ms: int = 600_000
    # How often the background task wakes; each job runs when its own interval is due.
    tick_ms: int = 1_000
    # Workers writing the logs' snapshots and epoch checkpoints (Kafka's pool for its
    # background jobs, among them the same writes, has this name and default).
    background_threads: int = 10  # Kafka's background.threads default (not yet a broker config)


@dataclass(frozen=True, slots=True)
class ReservedLogState:
    """What start-up found for a reserved log (the metadata log), which its owner opens."""

    log_dir: Path
    recovery_point: int
    clean: bool
    log_start_offset: int = 0  # moved by the owner (metadata snapshots)


def parse_log_dir_name(name: str) -> TopicPartition | None:
    match = _LOG_DIR_NAME.match(name)
    if match is None:
        return None
    return match["topic"], int(match["partition"])


@dataclass(frozen=True)
class _CheckpointRows:
    """One log dir's checkpoint contents, numbered in the order they were taken."""

    log_dir: Path
    taken: int
    recovery: dict[TopicPartition, int]
    starts: dict[TopicPartition, int]
    high_watermarks: dict[TopicPartition, int]


class LogManager:
    def __init__(
        self,
        log_dirs: list[Path],
        default_config: LogConfig | None = None,
        *,
        settings: LogManagerSettings | None = None,
        clock: Callable[[], int] = wall_clock_ms,
        reserved_dirs: frozenset[str] = frozenset(),
        cleaner: CleanerSettings | None = None,
    ) -> None:
        if not log_dirs:
            raise StorageError("log.dirs is empty")
        self.log_dirs = [Path(d) for d in log_dirs]
        self.default_config = default_config or LogConfig()
        self.settings = settings or LogManagerSettings()
        self.clock = clock
        # Partition directories owned by someone else (the metadata log).
        self.reserved_dirs = reserved_dirs
        # Their recovery points are kept in the same checkpoint as every other log's:
        # read at start-up (``reserved``), then taken from the log once it is attached.
        self.reserved: dict[str, ReservedLogState] = {}
        self._reserved_logs: dict[str, Log] = {}
        self.logs: dict[TopicPartition, Log] = {}
        self._log_dir_of: dict[TopicPartition, Path] = {}
        # AlterReplicaLogDirs: future logs (log_dir_moves.py), and the dirs wanted for
        # partitions not created yet.
        self.futures = FutureLogs(self)
        self.preferred_dirs: dict[TopicPartition, Path] = {}
        self._topic_configs: dict[str, LogConfig] = {}
        self._lock_fds: list[int] = []
        self._last_run: dict[str, int] = {}
        self._started_ms = clock()
        self.started = False
        self._file_writers = concurrent.futures.ThreadPoolExecutor(
            max_workers=max(1, self.settings.background_threads),
            thread_name_prefix="log-files",
        )
        # Checkpoint files are written both on the loop (a log deleted or renamed away)
        # and on a worker thread (the periodic write): one writer at a time (they share
        # the ``.tmp`` name), and a snapshot taken before one already written is dropped
        # rather than landing over it.
        self._checkpoint_lock = threading.Lock()
        self._checkpoint_taken = 0
        self._checkpoint_written: dict[Path, int] = {}
        # Compaction of cleanup.policy=compact logs (its task: ``cleaner.run``).
        self.cleaner = LogCleaner(
            lambda: self.logs,
            self.log_dirs,
            self._log_dir_of.get,
            cleaner or CleanerSettings(),
            clock,
        )

    # -- start-up ------------------------------------------------------------------
    def startup(self, topic_configs: Mapping[str, LogConfig] | None = None) -> None:
        """Lock the dirs and load every log, recovering the ones a crash left behind."""
        self.lock_dirs()
        self.load_logs(topic_configs)

    def lock_dirs(self) -> None:
        """Create and lock every log dir (the broker checks their identity before loading)."""
        for log_dir in self.log_dirs:
            log_dir.mkdir(parents=True, exist_ok=True)
            self._lock(log_dir)

    def load_logs(self, topic_configs: Mapping[str, LogConfig] | None = None) -> None:
        self._topic_configs.update(topic_configs or {})
        self._started_ms = self.clock()
        recover_swaps(self.log_dirs)
        for log_dir in self.log_dirs:
            self._load_dir(log_dir)
        self.futures.load_found()
        self.cleaner.load_checkpoints()
        self.started = True

    def _lock(self, log_dir: Path) -> None:
        fd = os.open(log_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise StorageError(f"log dir {log_dir} is in use by another process") from None
        self._lock_fds.append(fd)

    def _read_checkpoint(self, path: Path) -> dict[TopicPartition, int]:
        try:
            return read_offset_checkpoint(path)
        except CheckpointError as error:
            logger.warning("%s; treating as empty (logs will be recovered)", error)
            return {}

    def _load_dir(self, log_dir: Path) -> None:
        marker = log_dir / CLEAN_SHUTDOWN_FILE
        # A dir without checkpoints was never used (they are written at every start-up).
        clean = marker.exists() or not (log_dir / RECOVERY_POINT_CHECKPOINT).exists()
        recovery_points = self._read_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT)
        start_offsets = self._read_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT)
        high_watermarks = self._read_checkpoint(log_dir / REPLICATION_OFFSET_CHECKPOINT)
        children = sorted(p for p in log_dir.iterdir() if p.is_dir())
        partitions = []
        for child in children:
            if _DELETED_DIR_NAME.match(child.name):
                shutil.rmtree(child, ignore_errors=True)  # a delete that a restart interrupted
                continue
            if child.name in NON_LOG_DIRS:  # tiered storage's caches (storage/remote/)
                continue
            if child.name in self.reserved_dirs:
                reserved_tp = parse_log_dir_name(child.name)
                point = recovery_points.get(reserved_tp, 0) if reserved_tp else 0
                start = start_offsets.get(reserved_tp, 0) if reserved_tp else 0
                self.reserved[child.name] = ReservedLogState(log_dir, point, clean, start)
                continue
            if _STRAY_DIR_NAME.match(child.name):
                logger.warning(
                    "not loading %s: a stray log set aside earlier (remove it, or rename it "
                    "back to <topic>-<partition> if the metadata knows it again)",
                    child,
                )
                continue
            future_tp = parse_future_dir_name(child.name)
            if future_tp is not None:
                self.futures.found(
                    future_tp,
                    child,
                    recovery_points.get(future_tp, 0),
                    start_offsets.get(future_tp, 0),
                    high_watermarks.get(future_tp, 0),
                    clean,
                )
                continue
            if parse_swap_dir_name(child.name) is not None:  # recover_swaps left it
                logger.warning("not loading %s: a log dir swap it could not finish", child)
                continue
            tp = parse_log_dir_name(child.name)
            if tp is None:
                logger.warning("ignoring %s: not a <topic>-<partition> directory", child)
                continue
            partitions.append((tp, child))
        logger.info(
            "loading %d log(s) from %s (%s shutdown)",
            len(partitions),
            log_dir,
            "clean" if clean else "unclean",
        )
        for number, (tp, child) in enumerate(partitions, 1):
            log, stats = open_log(
                child,
                self.config_for(tp[0]),
                recovery_point=recovery_points.get(tp, 0),
                log_start_offset=start_offsets.get(tp, 0),
                clean_shutdown=clean,
                clock=self.clock,
                producer_id_expiration_ms=self.settings.producer_id_expiration_ms,
                background=self._file_writers.submit,
            )
            log.high_watermark = high_watermarks.get(tp, 0)
            self.logs[tp] = log
            self._log_dir_of[tp] = log_dir
            if stats.recovered_segments or stats.corruption:
                logger.info(
                    "recovered %s (%d/%d): %d segment(s), %d batches, %d bytes valid, "
                    "%d bytes truncated%s in %d ms",
                    child.name,
                    number,
                    len(partitions),
                    stats.recovered_segments,
                    stats.batches_recovered,
                    stats.bytes_recovered,
                    stats.bytes_truncated,
                    f" ({stats.corruption})" if stats.corruption else "",
                    stats.elapsed_ms,
                )
        marker.unlink(missing_ok=True)
        # From here on a crash must be noticed: the marker only returns on clean shutdown.
        self.write_checkpoints_for(log_dir)

    # -- logs ------------------------------------------------------------------------
    def config_for(self, topic: str) -> LogConfig:
        return self._topic_configs.get(topic, self.default_config)

    def set_topic_config(self, topic: str, config: LogConfig) -> None:
        self._topic_configs[topic] = config
        for (log_topic, _), log in [*self.logs.items(), *self.future_logs.items()]:
            if log_topic == topic:
                log.update_config(config)

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self.logs.get((topic, partition))

    def get_or_create_log(self, topic: str, partition: int, *, topic_id: str | None = None) -> Log:
        tp = (topic, partition)
        existing = self.logs.get(tp)
        if existing is not None:
            if topic_id is not None:  # a log found on disk, now claimed by the metadata
                check_topic_id(existing.directory, topic, topic_id)
                write_partition_metadata(existing.directory, topic_id)
            return existing
        counts = {d: 0 for d in self.log_dirs}
        for log_dir in self._log_dir_of.values():
            counts[log_dir] += 1
        preferred = self.preferred_dirs.pop(tp, None)  # AlterReplicaLogDirs asked first
        log_dir = preferred or min(self.log_dirs, key=lambda d: counts[d])
        directory = log_dir / f"{topic}-{partition}"
        log, _ = open_log(
            directory,
            self.config_for(topic),
            clock=self.clock,
            producer_id_expiration_ms=self.settings.producer_id_expiration_ms,
            background=self._file_writers.submit,
        )
        if topic_id is not None:
            try:
                write_partition_metadata(directory, topic_id)
            except OSError:
                log.close()  # e.g. a full disk: the next attempt opens it again
                raise
        self.logs[tp] = log
        self._log_dir_of[tp] = log_dir
        return log

    def delete_log(self, topic: str, partition: int) -> Path | None:
        """Close a log and rename its directory ``...-delete``; removal is asynchronous.
        A future log of the partition goes first (never a future without its log)."""
        return self._rename_away(topic, partition, DELETE_DIR_SUFFIX)

    def log_dir_of(self, topic: str, partition: int) -> Path | None:
        return self._log_dir_of.get((topic, partition))

    def replace_log(self, tp: TopicPartition, log: Log) -> None:
        """A log dir move swapped ``log`` in for ``tp``'s current log (log_dir_moves.py)."""
        self.logs[tp] = log
        self._log_dir_of[tp] = log.directory.parent

    @property
    def future_logs(self) -> dict[TopicPartition, Log]:
        return self.futures.logs

    def set_aside_stray_log(self, topic: str, partition: int) -> Path | None:
        """Close a log the metadata does not know and rename it ``...-stray``; keep its data."""
        return self._rename_away(topic, partition, STRAY_DIR_SUFFIX)

    def _rename_away(self, topic: str, partition: int, suffix: str) -> Path | None:
        """Close a log and move its directory out of the log name space, to
        ``<topic>-<partition>.<id><suffix>``; None if no such log is open."""
        tp = (topic, partition)
        self.futures.discard(topic, partition)  # never a future without its log
        log = self.logs.pop(tp, None)
        log_dir = self._log_dir_of.pop(tp, None)
        if log is None or log_dir is None:
            return None
        log.close()
        target = log_dir / f"{topic}-{partition}.{uuid.uuid4().hex}{suffix}"
        os.rename(log.directory, target)
        self.write_checkpoints_for(log_dir)
        return target

    # -- checkpoints -----------------------------------------------------------------
    def _logs_in(self, log_dir: Path) -> dict[TopicPartition, Log]:
        """The logs of ``log_dir``'s checkpoints: its current logs and future logs
        (a partition has at most one of the two in any one dir)."""
        logs = {
            tp: log for tp, log in list(self.logs.items()) if self._log_dir_of.get(tp) == log_dir
        }
        for tp, future in self.future_logs.items():
            if future.directory.parent == log_dir:
                logs[tp] = future
        return logs

    def attach_reserved_log(self, name: str, log_dir: Path, log: Log) -> None:
        """Checkpoint a reserved log's recovery point from now on, and close it on shutdown."""
        self._reserved_logs[name] = log
        self.reserved[name] = ReservedLogState(
            log_dir, log.recovery_point, False, log.log_start_offset
        )

    def _reserved_recovery_points(self, log_dir: Path) -> dict[TopicPartition, int]:
        points = {}
        for name, state in self.reserved.items():
            tp = parse_log_dir_name(name)
            if tp is None or state.log_dir != log_dir:
                continue
            log = self._reserved_logs.get(name)
            points[tp] = log.recovery_point if log is not None else state.recovery_point
        return points

    def _reserved_start_offsets(self, log_dir: Path) -> dict[TopicPartition, int]:
        starts = {}
        for name, state in self.reserved.items():
            tp = parse_log_dir_name(name)
            if tp is None or state.log_dir != log_dir:
                continue
            log = self._reserved_logs.get(name)
            start = log.log_start_offset if log is not None else state.log_start_offset
            if start > 0:
                starts[tp] = start
        return starts

    def _checkpoint_rows(self, log_dir: Path) -> _CheckpointRows:
        """What the three checkpoint files of ``log_dir`` hold now (taken on the loop)."""
        logs = self._logs_in(log_dir)
        self._checkpoint_taken += 1
        return _CheckpointRows(
            log_dir,
            self._checkpoint_taken,
            {tp: log.recovery_point for tp, log in logs.items()}
            | self._reserved_recovery_points(log_dir),
            {tp: log.log_start_offset for tp, log in logs.items() if log.log_start_offset > 0}
            | self._reserved_start_offsets(log_dir),
            {tp: log.high_watermark for tp, log in logs.items()},
        )

    def _write_rows(self, snapshots: list[_CheckpointRows]) -> None:
        """Write snapshots (any thread); one older than what a dir has is skipped."""
        with self._checkpoint_lock:
            for rows in snapshots:
                if rows.taken <= self._checkpoint_written.get(rows.log_dir, 0):
                    continue
                write_offset_checkpoint(rows.log_dir / RECOVERY_POINT_CHECKPOINT, rows.recovery)
                write_offset_checkpoint(rows.log_dir / LOG_START_OFFSET_CHECKPOINT, rows.starts)
                write_offset_checkpoint(
                    rows.log_dir / REPLICATION_OFFSET_CHECKPOINT, rows.high_watermarks
                )
                self._checkpoint_written[rows.log_dir] = rows.taken

    def write_checkpoints_for(self, log_dir: Path) -> None:
        self._write_rows([self._checkpoint_rows(log_dir)])

    def write_checkpoints(self) -> None:
        self._write_rows([self._checkpoint_rows(log_dir) for log_dir in self.log_dirs])

    # -- housekeeping ------------------------------------------------------------------
    def _due(self, job: str, interval_ms: int, now_ms: int) -> bool:
        last = self._last_run.get(job, self._started_ms)
        if now_ms - last >= interval_ms:
            self._last_run[job] = now_ms
            return True
        return False

    def cleanup_logs(self) -> int:
        """Retention and log-start-offset deletion for every log; returns segments deleted."""
        deleted = 0
        for log in list(self.logs.values()):
            deleted += log.delete_old_segments()
        return deleted

    async def flush_log(self, log: Log) -> None:
        """fsync a log on a worker thread; the loop keeps appending meanwhile."""
        segments, target = log.prepare_flush()
        barrier = log.flush_barrier

        def fsync_all() -> OSError | None:
            for segment in segments:
                try:
                    segment.fsync()
                except OSError as error:
                    if error.errno != errno.EBADF:  # EBADF: closed by a concurrent truncation
                        return error
            # The snapshots and checkpoints queued before are durable too (or dropped
            # after a logged failure: recovery does without them).
            log.files.wait(barrier)
            try:
                log.files.sync_unsynced()
            except OSError as error:
                return error
            return None

        failure = await asyncio.get_running_loop().run_in_executor(None, fsync_all)
        if failure is not None:
            # Not durable: the recovery point stays, so a crash recovers this data.
            logger.error("flushing %s failed: %s", log.name, _reason(failure))
        elif not log.closed:
            log.mark_flushed(target)

    async def run_once(self) -> None:
        """One pass of every housekeeping job that is due."""
        loop = asyncio.get_running_loop()
        now_ms = self.clock()
        settings = self.settings
        if self._due("retention", settings.retention_check_interval_ms, now_ms):
            self.cleanup_logs()
        if self._due("flush", min(settings.flush_scheduler_interval_ms, settings.tick_ms), now_ms):
            for log in list(self.logs.values()):
                if log.flush_due:
                    await self.flush_log(log)
        due = [segment for log in list(self.logs.values()) for segment in log.take_due_deletions()]
        if due:  # closing and unlinking can block: off the loop
            await loop.run_in_executor(None, _delete_segment_files, due)
        if self._due("expire", settings.producer_id_expiration_check_interval_ms, now_ms):
            for log in self.logs.values():
                log.producer_state.remove_expired(now_ms)
        checkpoint_interval = min(
            settings.flush_offset_checkpoint_interval_ms,
            settings.flush_start_offset_checkpoint_interval_ms,
            settings.high_watermark_checkpoint_interval_ms,
        )
        self.futures.release_due(now_ms)
        if self._due("checkpoint", checkpoint_interval, now_ms):
            # The offsets are read here, on the loop that changes the logs; the files
            # are written and fsynced on a worker thread.
            snapshots = [self._checkpoint_rows(log_dir) for log_dir in self.log_dirs]
            await loop.run_in_executor(None, self._write_rows, snapshots)
        for log_dir in self.log_dirs:
            leftovers = [p for p in log_dir.iterdir() if _DELETED_DIR_NAME.match(p.name)]
            for path in leftovers:
                await asyncio.get_running_loop().run_in_executor(None, shutil.rmtree, path, True)

    async def run(self) -> None:
        """Background housekeeping until cancelled."""
        while True:
            try:
                await self.run_once()
            except asyncio.CancelledError:
                raise
            except OSError as error:  # a full or failing disk: one line, tried again later
                logger.error("log housekeeping failed: %s", _reason(error))
            except Exception:  # a housekeeping failure must not stop the broker
                logger.exception("log housekeeping failed")
            await asyncio.sleep(self.settings.tick_ms / 1000)

    # -- shutdown ----------------------------------------------------------------------
    def shutdown(self) -> None:
        """Flush and close every log, write checkpoints and the clean-shutdown marker.

        If the logs were never (fully) loaded — a start refused by an identity check or
        failed half-way — nothing is written: empty checkpoints and a clean marker would
        tell the next start that logs it never recovered need no recovery. An I/O error
        (a full disk) does not stop the others from being closed; then no marker is
        written, so the next start recovers the logs, and StorageError says what failed.
        """
        loaded = self.started
        failures: list[str] = []
        self.futures.release_due(0, force=True)
        for log in [
            *self.logs.values(),
            *self.future_logs.values(),
            *self._reserved_logs.values(),
        ]:
            if log.closed:
                continue
            try:
                if loaded:
                    log.flush()
            except OSError as error:
                failures.append(f"{log.name}: {_reason(error)}")
            try:
                log.close()
            except OSError as error:
                failures.append(f"closing {log.name}: {_reason(error)}")
        if loaded:
            try:
                self.write_checkpoints()
                if not failures:
                    for log_dir in self.log_dirs:
                        (log_dir / CLEAN_SHUTDOWN_FILE).write_text("")
            except OSError as error:
                failures.append(f"checkpoints: {_reason(error)}")
        for fd in self._lock_fds:
            os.close(fd)
        self._lock_fds.clear()
        self._file_writers.shutdown(wait=True)
        self.started = False
        if failures:
            for failure in failures:
                logger.error("shutdown: %s", failure)
            raise StorageError(
                f"{len(failures)} log(s) or checkpoint(s) could not be written at shutdown "
                f"(first: {failures[0]}); no clean-shutdown marker was written, so the next "
                "start recovers the logs"
            )


def _reason(error: OSError) -> str:
    if error.strerror:
        return f"{error.strerror}: {error.filename}" if error.filename else error.strerror
    return str(error)


def _delete_segment_files(segments: list[LogSegment]) -> None:
    for segment in segments:
        segment.delete_files()
