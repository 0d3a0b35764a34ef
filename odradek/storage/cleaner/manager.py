"""LogCleaner: which compacted log to clean next, and the cleaning driven off the loop.

How this works and why (Kafka's LogCleanerManager and LogCleaner, seeds/000
"Compaction"): every log whose ``cleanup.policy`` includes ``compact`` is split at its
*first dirty offset* — what the last clean reached, kept per partition in each log
dir's ``cleaner-offset-checkpoint`` — into a clean head and a dirty tail. The dirty
part that may be cleaned ends at the *first uncleanable offset*: the base of the
active segment, of the segment holding the last stable offset (open transactions and
records above the high watermark are never cleaned), and of the first segment with
records younger than ``min.compaction.lag.ms``. A log is eligible when its dirty
ratio (cleanable bytes / clean + cleanable bytes) exceeds
``min.cleanable.dirty.ratio``, when its first dirty segment is older than
``max.compaction.lag.ms``, or when a tombstone or marker it kept has reached its
delete horizon; the dirtiest goes first, one clean per log at a time, up to
``log.cleaner.threads`` at once.

A clean (cleaner/clean.py) snapshots what it needs on the event loop — the segments,
the aborted transactions, each producer's last batch — then builds the key map and
writes each group of segments into a ``.cleaned`` segment on a worker thread, reading
through duplicated descriptors so a segment the loop deletes meanwhile cannot hand
its descriptor number to another file. Back on the loop, each group is swapped in
(swap.py: ``.cleaned`` -> ``.swap`` -> the old segments ``.deleted`` -> final names)
only if the log is still open, was not truncated since the snapshot, and still holds
those very segments; otherwise the result is thrown away and the next pass starts
over. The checkpoint then moves to where the key map ended.

Concurrency: ``run`` is a task on the loop that owns the logs; the CPU work runs on a
pool of ``log.cleaner.threads`` threads, throttled to
``log.cleaner.io.max.bytes.per.second``. ``stop`` aborts a running clean at its next
batch and waits for its thread before the logs are closed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

from odradek.records.errors import CodedError
from odradek.storage.checkpoint import (
    CLEANER_OFFSET_CHECKPOINT,
    CheckpointError,
    read_offset_checkpoint,
    write_offset_checkpoint,
)
from odradek.storage.errors import StorageError

if TYPE_CHECKING:
    from odradek.storage.log import Log
    from odradek.storage.segment import LogSegment

logger = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
LONG_MAX: Final = 2**63 - 1
# How long stopping waits for a clean to reach its next batch (then gives up on it).
STOP_WAIT_S: Final = 10.0


@dataclass(frozen=True, slots=True)
class CleanerSettings:
    """The broker's ``log.cleaner.*`` properties (Kafka's names and defaults)."""

    enable: bool = True
    threads: int = 1
    dedupe_buffer_size: int = 128 * 1024 * 1024
    io_buffer_load_factor: float = 0.9
    io_max_bytes_per_second: float = math.inf
    backoff_ms: int = 15_000


@dataclass(slots=True)
class LogToClean:
    """A compacted log's clean/dirty split at one moment."""

    tp: TopicPartition
    log: Log
    first_dirty: int
    first_uncleanable: int
    clean_bytes: int
    cleanable_bytes: int
    lag_due: bool  # max.compaction.lag.ms passed for its first dirty segment
    horizon_due: bool = False  # a kept tombstone or marker reached its delete horizon

    @property
    def ratio(self) -> float:
        total = self.clean_bytes + self.cleanable_bytes
        return self.cleanable_bytes / total if total else 0.0

    @property
    def eligible(self) -> bool:
        if self.horizon_due:
            return True
        if self.cleanable_bytes <= 0:
            return False
        return self.lag_due or self.ratio > self.log.config.min_cleanable_dirty_ratio


def _segment_start_time(segment: LogSegment) -> int | None:
    first = segment.first_batch_timestamp
    if first is not None and first >= 0:
        return first
    return None


def cleanable_range(log: Log, checkpoint: int | None, now_ms: int) -> tuple[int, int, bool]:
    """(first dirty offset, first uncleanable offset, max compaction lag due).

    A checkpoint outside [local log start, log end] — the log was truncated, or
    retention passed it — restarts from the local log start. Both offsets are segment
    bases (or the active segment's base), so the dirty range is whole segments.
    """
    start = log.local_log_start_offset
    segments = log.segments
    active = segments[-1]
    first_dirty = start
    if checkpoint is not None and start <= checkpoint <= log.log_end_offset:
        first_dirty = checkpoint
    bound = active.base_offset
    stable = min(log.last_stable_offset, log.high_watermark)
    holding = log.segment_for(stable)
    if holding is not None:
        bound = min(bound, holding.base_offset)
    config = log.config
    lag_due = False
    for segment in segments[:-1]:
        if segment.next_offset <= first_dirty or segment.base_offset >= bound:
            continue
        if (
            config.min_compaction_lag_ms > 0
            and segment.max_timestamp >= 0
            and now_ms - segment.max_timestamp < config.min_compaction_lag_ms
        ):
            bound = segment.base_offset  # too young: nothing from here on
            break
        started = _segment_start_time(segment)
        if (
            not lag_due
            and config.max_compaction_lag_ms < LONG_MAX
            and started is not None
            and now_ms - started > config.max_compaction_lag_ms
        ):
            lag_due = True
    first_dirty = min(first_dirty, bound)
    return first_dirty, bound, lag_due


def log_to_clean(
    tp: TopicPartition, log: Log, checkpoint: int | None, now_ms: int, horizon_ms: int | None
) -> LogToClean:
    first_dirty, first_uncleanable, lag_due = cleanable_range(log, checkpoint, now_ms)
    clean_bytes = cleanable_bytes = 0
    for segment in log.segments[:-1]:
        if segment.base_offset >= first_uncleanable:
            break
        if segment.base_offset < first_dirty:
            clean_bytes += segment.size
        else:
            cleanable_bytes += segment.size
    horizon_due = horizon_ms is not None and horizon_ms <= now_ms
    return LogToClean(
        tp,
        log,
        first_dirty,
        first_uncleanable,
        clean_bytes,
        cleanable_bytes,
        lag_due,
        horizon_due and first_uncleanable > log.local_log_start_offset,
    )


def filthiest(candidates: list[LogToClean]) -> LogToClean | None:
    """The eligible log with the highest dirty ratio (a due lag or horizon counts as
    eligible whatever the ratio)."""
    eligible = [c for c in candidates if c.eligible]
    if not eligible:
        return None
    return max(eligible, key=lambda c: (c.lag_due, c.ratio))


@dataclass(slots=True)
class CleanerStats:
    """What the cleaner did since start (logged after each clean; tests read it)."""

    cleans: int = 0
    aborted: int = 0
    failed: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_removed: int = 0
    by_partition: dict[TopicPartition, int] = field(default_factory=dict)


class LogCleaner:
    """Compacts the logs ``logs()`` returns; ``dir_of`` names each one's log dir."""

    def __init__(
        self,
        logs: Callable[[], Mapping[TopicPartition, Log]],
        log_dirs: list[Path],
        dir_of: Callable[[TopicPartition], Path | None],
        settings: CleanerSettings,
        clock: Callable[[], int],
    ) -> None:
        self.logs = logs
        self.log_dirs = log_dirs
        self.dir_of = dir_of
        self.settings = settings
        self.clock = clock
        self.checkpoints: dict[Path, dict[TopicPartition, int]] = {}
        self.horizons: dict[TopicPartition, int] = {}  # earliest delete horizon kept
        self.in_progress: set[TopicPartition] = set()
        self.uncleanable: set[TopicPartition] = set()  # failed unexpectedly: not retried
        self.stats = CleanerStats()
        self._abort = threading.Event()
        self._wake = asyncio.Event()  # ends a worker's backoff sleep (stop, new settings)
        self._workers: list[asyncio.Task[None]] = []
        self._retired_pools: list[concurrent.futures.ThreadPoolExecutor] = []
        self._running = False
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._checkpoint_lock = threading.Lock()

    # -- checkpoints -------------------------------------------------------------------
    def load_checkpoints(self) -> None:
        """Read each dir's ``cleaner-offset-checkpoint``; a damaged one is logged and
        ignored (the next clean starts from each log's start: slower, never wrong)."""
        for log_dir in self.log_dirs:
            path = log_dir / CLEANER_OFFSET_CHECKPOINT
            try:
                self.checkpoints[log_dir] = read_offset_checkpoint(path)
            except FileNotFoundError:
                self.checkpoints[log_dir] = {}
            except (CheckpointError, OSError) as error:
                logger.warning("%s: %s; cleaning restarts from each log's start", path, error)
                self.checkpoints[log_dir] = {}

    def checkpoint_of(self, tp: TopicPartition) -> int | None:
        log_dir = self.dir_of(tp)
        if log_dir is None:
            return None
        return self.checkpoints.get(log_dir, {}).get(tp)

    def _set_checkpoint(self, tp: TopicPartition, offset: int) -> dict[TopicPartition, int] | None:
        log_dir = self.dir_of(tp)
        if log_dir is None:
            return None
        rows = self.checkpoints.setdefault(log_dir, {})
        rows[tp] = offset
        live = self.logs()
        for stale in [key for key in rows if key not in live]:
            del rows[stale]  # deleted partitions leave the file
        return dict(rows)

    def _write_checkpoint(self, log_dir: Path, rows: dict[TopicPartition, int]) -> None:
        with self._checkpoint_lock:
            write_offset_checkpoint(log_dir / CLEANER_OFFSET_CHECKPOINT, rows)

    # -- choosing ------------------------------------------------------------------------
    def grab_filthiest(self, now_ms: int) -> LogToClean | None:
        candidates = []
        for tp, log in self.logs().items():
            if (
                tp in self.in_progress
                or tp in self.uncleanable
                or log.closed
                or not log.config.is_compacted
            ):
                continue
            candidates.append(
                log_to_clean(tp, log, self.checkpoint_of(tp), now_ms, self.horizons.get(tp))
            )
        chosen = filthiest(candidates)
        if chosen is not None:
            self.in_progress.add(chosen.tp)
        return chosen

    # -- running ---------------------------------------------------------------------------
    async def run(self) -> None:
        """Clean until cancelled: up to ``threads`` logs at once (``update_settings``
        may change how many while it runs)."""
        if not self.settings.enable or self.settings.threads <= 0:
            return
        self._pool = concurrent.futures.ThreadPoolExecutor(
            self.settings.threads, thread_name_prefix="log-cleaner"
        )
        self._running = True
        for index in range(self.settings.threads):
            self._workers.append(asyncio.create_task(self._worker(index)))
        try:
            while self._workers:
                await asyncio.gather(*self._workers)
                self._workers = [w for w in self._workers if not w.done()]
        finally:
            self._running = False
            for worker in self._workers:
                worker.cancel()
            await asyncio.gather(*self._workers, return_exceptions=True)

    def update_settings(self, settings: CleanerSettings) -> None:
        """Dynamic ``log.cleaner.*`` changes (AlterConfigs on the broker): the rate,
        map size and backoff apply from the next clean; more threads start now, fewer
        end as their current clean ends (``log.cleaner.enable`` is read at start, as in
        Kafka)."""
        old, self.settings = self.settings, settings
        if not self._running or settings.threads <= old.threads:
            self._wake.set()  # idle workers re-read the settings
            self._wake = asyncio.Event()
            return
        previous, self._pool = (
            self._pool,
            concurrent.futures.ThreadPoolExecutor(
                settings.threads, thread_name_prefix="log-cleaner"
            ),
        )
        if previous is not None:
            previous.shutdown(wait=False)  # its running cleans finish first
            self._retired_pools.append(previous)
        for index in range(old.threads, settings.threads):
            self._workers.append(asyncio.create_task(self._worker(index)))

    async def _worker(self, index: int) -> None:
        while not self._abort.is_set() and index < self.settings.threads:
            todo = self.grab_filthiest(self.clock())
            if todo is None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.settings.backoff_ms / 1000)
                continue
            try:
                await self.clean(todo)
            except asyncio.CancelledError:
                raise
            except (CodedError, StorageError, OSError) as error:
                # Damage or a failing disk: one line (the log itself is untouched, the
                # partition keeps serving). Kafka marks such a partition uncleanable
                # rather than retrying forever.
                self._give_up(todo.tp)
                logger.error(
                    "cleaning %s-%d failed; it is not cleaned again until a restart: %s",
                    *todo.tp,
                    error,
                )
            except Exception:  # a bug: the traceback says where
                self._give_up(todo.tp)
                logger.exception("cleaning %s-%d failed; it is not cleaned again", *todo.tp)
            finally:
                self.in_progress.discard(todo.tp)

    def _give_up(self, tp: TopicPartition) -> None:
        self.stats.failed += 1
        self.uncleanable.add(tp)

    async def clean(self, todo: LogToClean) -> bool:
        """Clean one log; False when the log changed under the clean (thrown away)."""
        from odradek.storage.cleaner.clean import CleanerAborted, CleanJob

        loop = asyncio.get_running_loop()
        job = CleanJob.prepare(
            todo,
            dedupe_entries=self._map_entries(),
            now_ms=self.clock(),
            max_bytes_per_second=self.settings.io_max_bytes_per_second,
            abort=self._abort,
        )
        try:
            end = await loop.run_in_executor(self._pool, job.build_map)
            for group in job.groups(end):
                result = await loop.run_in_executor(self._pool, job.clean_group, group)
                if not job.install(result):
                    self.stats.aborted += 1
                    logger.info("%s: changed during cleaning; the clean is dropped", todo.log.name)
                    return False
        except CleanerAborted:
            self.stats.aborted += 1
            return False
        except Exception:
            if not job.unchanged(job.sources):
                # A segment was truncated or deleted under the clean: a race, not damage.
                self.stats.aborted += 1
                return False
            raise
        finally:
            job.close()
        self.stats.cleans += 1
        self.stats.bytes_read += job.bytes_read
        self.stats.bytes_written += job.bytes_written
        self.stats.records_removed += job.records_removed
        self.stats.by_partition[todo.tp] = self.stats.by_partition.get(todo.tp, 0) + 1
        if job.earliest_horizon is None:
            self.horizons.pop(todo.tp, None)
        else:
            self.horizons[todo.tp] = job.earliest_horizon
        rows = self._set_checkpoint(todo.tp, end)
        log_dir = self.dir_of(todo.tp)
        if rows is not None and log_dir is not None:
            await loop.run_in_executor(None, self._write_checkpoint, log_dir, rows)
        logger.info(
            "%s: cleaned up to %d: %d bytes read, %d written, %d records removed",
            todo.log.name,
            end,
            job.bytes_read,
            job.bytes_written,
            job.records_removed,
        )
        return True

    def _map_entries(self) -> int:
        """Keys one clean's map may hold: the shared buffer split between the threads,
        filled to the load factor, at what a key really costs in the map."""
        from odradek.storage.cleaner.clean import MAP_ENTRY_BYTES

        per_thread = self.settings.dedupe_buffer_size // max(1, self.settings.threads)
        return int(per_thread * self.settings.io_buffer_load_factor // MAP_ENTRY_BYTES)

    async def stop(self, task: asyncio.Task[None] | None) -> None:
        """Abort a running clean at its next batch and wait for ``task`` (``run``) to
        end — its threads done — before the logs may be closed."""
        self._abort.set()
        self._wake.set()
        if task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(task), STOP_WAIT_S)
            except TimeoutError:
                logger.warning("the log cleaner did not stop within %.0f s", STOP_WAIT_S)
            except Exception:  # its failure was logged; stopping goes on
                pass
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        for pool in [*self._retired_pools, *([self._pool] if self._pool else [])]:
            await asyncio.get_running_loop().run_in_executor(None, pool.shutdown, True)
