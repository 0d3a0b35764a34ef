"""Future logs: a partition's copy in another log dir, and the crash-safe swap to it.

How this works and why (KIP-113, Kafka's intra-broker replica movement): moving a
replica from log dir A to log dir B on the same broker builds a *future log*
``B/<topic>-<partition>.<id>-future`` beside the current ``A/<topic>-<partition>``.
The replica layer fills it (replica/log_dir_mover.py) with the current log's batches,
byte for byte; once it has caught up, appends to the partition stop for one step of
the event loop while ``LogSwap`` replaces the current log with it.

The swap is a sequence of durable steps (each rename followed by an fsync of the
parent directory), chosen so that every state a crash can leave on disk names exactly
one authoritative log:

1. ``prepared``: the future log gets the current log's high watermark, log start
   offset, producer state and leader-epoch history, is fsynced and closed, and the
   target dir's checkpoints are written with it (log start offset, high watermark).
   On disk: ``A/t-p`` + ``B/t-p.X-future`` — the current log rules; the future is
   loaded again at start-up and the copy resumes.
2. ``marked``: ``B/t-p.X-future`` → ``B/t-p.X-swap``. A ``-swap`` directory is a
   complete, durable copy taken while appends were blocked: from here on it rules.
   On disk: ``A/t-p`` + ``B/t-p.X-swap``; start-up (``recover_swaps``) retires A's.
3. ``retired``: ``A/t-p`` → ``A/t-p.Y-delete`` (removed in the background, as
   deletion does). On disk: ``B/t-p.X-swap``; start-up renames it ``B/t-p``.
4. ``promoted``: ``B/t-p.X-swap`` → ``B/t-p``. Only the new log remains.
5. ``reopened``: the log is opened again under its final name (paths in a ``Log``
   are fixed at open) and handed back with the high watermark carried over.

Kafka renames the future log to its final name before retiring the current one and
refuses to start if a crash left both; the ``-swap`` step lets start-up finish the
move instead. A future log never reaches step 2 before it holds every offset of the
current log, so "never both, never neither": a crash leaves the old log or the new.

The old log's files stay open after step 3 (fetch responses in flight may still
send from them); ``release_files`` closes them later without writing anything, since
its directory has moved.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

from odradek.storage.checkpoint import write_checkpoint_lines
from odradek.storage.epoch_cache import LEADER_EPOCH_CHECKPOINT, LEADER_EPOCH_CHECKPOINT_VERSION
from odradek.storage.errors import StorageError
from odradek.storage.log import Log, wall_clock_ms
from odradek.storage.log_config import LogConfig
from odradek.storage.log_loader import open_log
from odradek.storage.partition_metadata import read_partition_metadata, write_partition_metadata
from odradek.storage.producer_state import snapshot_path

logger = logging.getLogger(__name__)

FUTURE_DIR_SUFFIX: Final = "-future"
SWAP_DIR_SUFFIX: Final = "-swap"
DELETE_DIR_SUFFIX: Final = "-delete"
FUTURE_DIR_NAME: Final = re.compile(
    r"^(?P<topic>[a-zA-Z0-9._-]+)-(?P<partition>[0-9]+)\.[0-9a-f]+-future$"
)
SWAP_DIR_NAME: Final = re.compile(
    r"^(?P<topic>[a-zA-Z0-9._-]+)-(?P<partition>[0-9]+)\.[0-9a-f]+-swap$"
)
# Linux's NAME_MAX: Kafka refuses a move whose future directory name would not fit.
MAX_DIR_NAME: Final = 255
SWAP_STEPS: Final = ("prepared", "marked", "retired", "promoted", "reopened")

TopicPartition = tuple[str, int]


def future_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}.{uuid.uuid4().hex}{FUTURE_DIR_SUFFIX}"


def future_name_fits(topic: str, partition: int) -> bool:
    return len(future_dir_name(topic, partition)) <= MAX_DIR_NAME


def parse_future_dir_name(name: str) -> TopicPartition | None:
    match = FUTURE_DIR_NAME.match(name)
    return None if match is None else (match["topic"], int(match["partition"]))


def parse_swap_dir_name(name: str) -> TopicPartition | None:
    match = SWAP_DIR_NAME.match(name)
    return None if match is None else (match["topic"], int(match["partition"]))


def fsync_dir(path: Path) -> None:
    """Make the renames and creations inside ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _retire_name(directory: Path) -> Path:
    return directory.with_name(f"{directory.name}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}")


def create_future_log(
    log_dir: Path,
    current: Log,
    config: LogConfig,
    *,
    clock: Callable[[], int] = wall_clock_ms,
    producer_id_expiration_ms: int = 86_400_000,
) -> Log:
    """An empty future log in ``log_dir`` for ``current``'s partition, starting at the
    batch holding its log start offset (which may lie inside a batch: the copy moves
    the start up after), carrying its topic id (``partition.metadata``)."""
    topic, _, partition = current.directory.name.rpartition("-")
    directory = log_dir / future_dir_name(topic, int(partition))
    start = current.log_start_offset
    for header in current.iter_headers(start, start + 1):
        start = min(header.base_offset, start)
        break
    log, _ = open_log(
        directory,
        config,
        log_start_offset=start,
        clock=clock,
        producer_id_expiration_ms=producer_id_expiration_ms,
    )
    try:
        topic_id = read_partition_metadata(current.directory)
        if topic_id is not None:
            write_partition_metadata(directory, topic_id)
        fsync_dir(log_dir)
    except OSError:
        log.delete_files()
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return log


def discard_future_log(future: Log) -> Path:
    """Close a future log and rename it ``...-delete`` (removed in the background)."""
    future.close()
    target = _retire_name(future.directory)
    os.rename(future.directory, target)
    return target


def release_files(log: Log) -> None:
    """Close a retired log's files without writing anything: its directory was renamed
    (``-delete``), so nothing may be written or unlinked under its old paths."""
    for _, segment in log.pending_deletions:
        segment.close()
    for segment in log.segments:
        segment.close()
    log.closed = True


class LogSwap:
    """Replace ``current`` by ``future`` (same log end offset) in durable steps.

    ``steps()`` yields each step's name once it is done, so a test can stop after any
    of them as a crash would; ``run()`` does them all and returns the new log.
    """

    def __init__(
        self,
        current: Log,
        future: Log,
        *,
        producer_id_expiration_ms: int,
        checkpoint: Callable[[], None] = lambda: None,
    ) -> None:
        """``checkpoint`` writes the target dir's checkpoints with the prepared future
        in them (its log start offset and high watermark survive a crash after it)."""
        if future.log_end_offset != current.log_end_offset:
            raise StorageError(
                f"{future.name}: ends at {future.log_end_offset}, the current log at "
                f"{current.log_end_offset}: not caught up"
            )
        self.current = current
        self.future = future
        self.final_dir = future.directory.parent / current.directory.name
        self.swap_dir = future.directory.with_name(
            future.directory.name[: -len(FUTURE_DIR_SUFFIX)] + SWAP_DIR_SUFFIX
        )
        self.retired_dir = _retire_name(current.directory)
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.checkpoint = checkpoint
        self.result: Log | None = None

    def run(self) -> Log:
        for _ in self.steps():
            pass
        assert self.result is not None
        return self.result

    def steps(self) -> Iterator[str]:
        current, future = self.current, self.future
        end = current.log_end_offset
        high_watermark = current.high_watermark
        # 1. prepared: the future takes everything of the current log that is not in
        # its batches, then is made durable and closed.
        future.high_watermark = high_watermark
        if current.log_start_offset > future.log_start_offset:
            future.increment_log_start_offset(current.log_start_offset)
        log_start = future.log_start_offset
        producers = future.producer_state
        producers.producers = {pid: e.copy() for pid, e in current.producer_state.producers.items()}
        producers.map_end_offset = end
        future.flush()
        future.close()  # writes the indexes and a producer snapshot at the log end
        epochs = [f"{e.epoch} {e.start_offset}" for e in current.epoch_cache.entries]
        write_checkpoint_lines(
            future.directory / LEADER_EPOCH_CHECKPOINT, LEADER_EPOCH_CHECKPOINT_VERSION, epochs
        )
        _fsync_file(snapshot_path(future.directory, end))
        fsync_dir(future.directory)
        self.checkpoint()
        yield "prepared"
        # 2. marked: from here on the copy rules.
        os.rename(future.directory, self.swap_dir)
        fsync_dir(self.swap_dir.parent)
        yield "marked"
        # 3. retired: the old directory leaves the log name space; its files stay open.
        os.rename(current.directory, self.retired_dir)
        fsync_dir(self.retired_dir.parent)
        yield "retired"
        # 4. promoted
        os.rename(self.swap_dir, self.final_dir)
        fsync_dir(self.final_dir.parent)
        yield "promoted"
        # 5. reopened under the final name
        log, _ = open_log(
            self.final_dir,
            current.config,  # the topic's config now (the future's may be older)
            recovery_point=end,
            log_start_offset=log_start,
            clean_shutdown=True,
            clock=future.clock,
            producer_id_expiration_ms=self.producer_id_expiration_ms,
        )
        log.high_watermark = high_watermark
        # Loading drops an epoch that starts at the log end (a leader that has not
        # appended in it yet); the partition leads in it, so it is put back.
        for entry in current.epoch_cache.entries:
            log.epoch_cache.assign(entry.epoch, entry.start_offset)
        self.result = log
        yield "reopened"


def _fsync_file(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def recover_swaps(log_dirs: list[Path]) -> list[str]:
    """Start-up, before any log is loaded: finish every swap a crash interrupted.

    A ``-swap`` directory is a complete copy (step 2 above): any current directory of
    its partition is retired (``-delete``) and the copy takes the partition's name.
    Returns one line per action, for the log.
    """
    actions = []
    for log_dir in log_dirs:
        if not log_dir.is_dir():
            continue
        for child in sorted(log_dir.iterdir()):
            tp = parse_swap_dir_name(child.name)
            if tp is None or not child.is_dir():
                continue
            name = f"{tp[0]}-{tp[1]}"
            for other in log_dirs:
                current = other / name
                if current.is_dir():
                    retired = _retire_name(current)
                    os.rename(current, retired)
                    fsync_dir(other)
                    actions.append(f"retired {current} (now {retired.name})")
            os.rename(child, log_dir / name)
            fsync_dir(log_dir)
            actions.append(f"promoted {child} to {log_dir / name}")
    for action in actions:
        logger.info("finishing an interrupted log dir move: %s", action)
    return actions
