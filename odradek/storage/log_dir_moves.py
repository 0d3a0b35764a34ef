"""FutureLogs: a LogManager's future logs — created, found at start-up, discarded,
swapped in, and the old logs' files closed later.

How this works and why: a partition moving to another of this broker's log dirs
(AlterReplicaLogDirs, KIP-113) has a future log there beside its current log
(storage/future_logs.py has the directory names and the crash-safe ``LogSwap``). The
LogManager owns the current logs and the checkpoints; this part of it owns the future
logs: ``found`` collects the ``-future`` dirs its start-up scan sees and ``load_found``
opens those whose current log is here (a move to resume) and renames the others
``-delete``; ``swap`` runs the LogSwap and puts the new log in the manager's place,
keeping the old one's files open for ``file.delete.delay.ms`` (fetch responses in
flight still send from them) before ``release_due`` closes them. Future logs are
checkpointed with the current logs of their dir (a partition has at most one of the
two in any one dir). All of it runs on the event loop that owns the logs.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from odradek.storage.future_logs import (
    DELETE_DIR_SUFFIX,
    FUTURE_DIR_SUFFIX,
    LogSwap,
    create_future_log,
    discard_future_log,
    release_files,
)
from odradek.storage.log import Log
from odradek.storage.log_loader import open_log

if TYPE_CHECKING:
    from odradek.storage.log_manager import LogManager

logger = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class FutureLogs:
    def __init__(self, manager: LogManager) -> None:
        self.manager = manager
        self.logs: dict[TopicPartition, Log] = {}
        self._retired: list[tuple[int, Log]] = []
        self._found: list[tuple[TopicPartition, Path, int, int, int, bool]] = []

    def dir_of(self, tp: TopicPartition) -> Path | None:
        future = self.logs.get(tp)
        return None if future is None else future.directory.parent

    # -- start-up ------------------------------------------------------------------
    def found(
        self,
        tp: TopicPartition,
        directory: Path,
        recovery_point: int,
        log_start_offset: int,
        high_watermark: int,
        clean: bool,
    ) -> None:
        """A ``-future`` dir seen while loading, with its dir's checkpointed offsets."""
        self._found.append((tp, directory, recovery_point, log_start_offset, high_watermark, clean))

    def load_found(self) -> None:
        """Open the future logs found at start-up whose current log is here; rename the
        others ``-delete`` (a move of a partition deleted meanwhile)."""
        manager = self.manager
        found, self._found = self._found, []
        for tp, directory, recovery_point, start, high_watermark, clean in found:
            current_dir = manager.log_dir_of(*tp)
            if current_dir is None or tp in self.logs or current_dir == directory.parent:
                stem = directory.name[: -len(FUTURE_DIR_SUFFIX)]
                os.rename(directory, directory.with_name(stem + DELETE_DIR_SUFFIX))
                logger.warning("discarding the future log %s: no current log to move", directory)
                continue
            log, _ = open_log(
                directory,
                manager.config_for(tp[0]),
                recovery_point=recovery_point,
                log_start_offset=start,
                clean_shutdown=clean,
                clock=manager.clock,
                producer_id_expiration_ms=manager.settings.producer_id_expiration_ms,
            )
            log.high_watermark = high_watermark
            self.logs[tp] = log
            logger.info(
                "resuming the move of %s-%d to %s at offset %d",
                *tp,
                directory.parent,
                log.log_end_offset,
            )
        if found:
            manager.write_checkpoints()

    # -- moves ---------------------------------------------------------------------
    def create(self, topic: str, partition: int, log_dir: Path) -> Log:
        """An empty future log of a hosted partition in ``log_dir`` (another of its dirs)."""
        tp = (topic, partition)
        manager = self.manager
        current = manager.logs[tp]
        assert tp not in self.logs and manager.log_dir_of(topic, partition) != log_dir
        future = create_future_log(
            log_dir,
            current,
            manager.config_for(topic),
            clock=manager.clock,
            producer_id_expiration_ms=manager.settings.producer_id_expiration_ms,
        )
        self.logs[tp] = future
        return future

    def discard(self, topic: str, partition: int) -> Path | None:
        """Close a future log and rename it ``-delete``; None if there is none."""
        future = self.logs.pop((topic, partition), None)
        if future is None:
            return None
        target = discard_future_log(future)
        self.manager.write_checkpoints_for(target.parent)
        return target

    def log_swap(self, topic: str, partition: int) -> LogSwap:
        """The swap of a partition's future log for its current one (tests run its
        steps one by one; ``swap`` runs them all)."""
        tp = (topic, partition)
        new_dir = self.logs[tp].directory.parent
        return LogSwap(
            self.manager.logs[tp],
            self.logs[tp],
            producer_id_expiration_ms=self.manager.settings.producer_id_expiration_ms,
            checkpoint=lambda: self.manager.write_checkpoints_for(new_dir),
        )

    def swap(self, topic: str, partition: int) -> Log:
        """Swap a caught-up future log in for the current one; the old log's files
        close after ``file.delete.delay.ms``. OSError or StorageError leave the disk in
        a state start-up finishes (see LogSwap); the future is forgotten either way."""
        tp = (topic, partition)
        manager = self.manager
        current = manager.logs[tp]
        old_dir = manager.log_dir_of(topic, partition)
        swap = self.log_swap(topic, partition)
        try:
            log = swap.run()
        finally:
            del self.logs[tp]
        manager.replace_log(tp, log)
        self._retired.append((manager.clock() + current.config.file_delete_delay_ms, current))
        if old_dir is not None:
            manager.write_checkpoints_for(old_dir)
        manager.write_checkpoints_for(log.directory.parent)
        return log

    def release_due(self, now_ms: int, force: bool = False) -> None:
        """Close the retired logs' files whose delay is over (all of them: ``force``)."""
        due = [log for when, log in self._retired if force or when <= now_ms]
        self._retired = [(w, log) for w, log in self._retired if not (force or w <= now_ms)]
        for log in due:
            release_files(log)
