"""Retention: which of a log's oldest segments go, by Kafka's delete policy.

How this works and why: retention only ever removes whole inactive segments from the
front of the log, and never one reaching past the high watermark (Log.delete_segments
enforces both). Three rules run in order, as in Kafka: segments wholly below the log
start offset (DeleteRecords moved it), then — when ``cleanup.policy`` includes
``delete`` — segments whose newest record is older than ``retention.ms``, then the
oldest segments while the log is larger than ``retention.bytes``. A segment's age is
its largest record timestamp (the file's mtime when it has none).

Tiered topics (``remote.storage.enable``, KIP-405): the rules here only trim the
*local* log, by ``local.retention.ms`` / ``local.retention.bytes`` (-2: the
retention.* value), and only segments wholly copied to remote storage (last offset <=
``log.highest_offset_in_remote``); the log start offset stays at the remote start
(Log.delete_segments). Remote segments go by retention.* in the RemoteLogManager's
expiration task (storage/remote/log_manager.py), which moves the log start offset;
the first rule then drops local segments below it.

Concurrency: runs on the event loop that owns the log.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from odradek.records.batch import NO_TIMESTAMP

if TYPE_CHECKING:
    from odradek.storage.log import Log
    from odradek.storage.segment import LogSegment


def delete_old_segments(log: Log) -> int:
    """Apply the three rules; returns the number of segments removed."""
    deleted = log.delete_segments(lambda segment, next_base: next_base <= log.log_start_offset)
    if not log.config.is_deleting:
        return deleted
    config = log.config
    tiered = config.remote_storage_enable
    if tiered:
        retention_ms = config.effective_local_retention_ms
        retention_bytes = config.effective_local_retention_bytes
        copied = log.highest_offset_in_remote

        def allowed(next_base: int) -> bool:  # only what remote storage already holds
            return next_base - 1 <= copied

    else:
        retention_ms, retention_bytes = config.retention_ms, config.retention_bytes

        def allowed(next_base: int) -> bool:
            return True

    now_ms = log.clock()
    if retention_ms >= 0:
        deleted += log.delete_segments(
            lambda segment, next_base: (
                allowed(next_base) and now_ms - segment_timestamp(segment) > retention_ms
            )
        )
    if retention_bytes >= 0:
        excess = log.size - retention_bytes

        def over_size(segment: LogSegment, next_base: int) -> bool:
            nonlocal excess
            if excess - segment.size < 0 or not allowed(next_base):
                return False
            excess -= segment.size
            return True

        deleted += log.delete_segments(over_size)
    return deleted


def segment_timestamp(segment: LogSegment) -> int:
    """A segment's age reference for retention.ms: its largest timestamp, else its mtime."""
    if segment.max_timestamp != NO_TIMESTAMP:
        return segment.max_timestamp
    return int(os.fstat(segment.fd).st_mtime * 1000) if segment.fd >= 0 else 0
