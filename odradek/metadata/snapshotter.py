"""When to snapshot the metadata image, and writing one (KIP-630 on one node).

How this works and why: replaying ``__cluster_metadata`` from offset 0 at every start
grows with the cluster's whole history. So every node periodically writes its
committed image as a snapshot (``snapshot.py``) and may then delete the log below it;
a restart reads the newest snapshot plus the log after it.

``MetadataSnapshotter`` is the decision, sans-IO with the clock passed in: the
committed bytes since the last snapshot are counted, and a snapshot is due once they
reach ``metadata.log.max.record.bytes.between.snapshots`` (default 20 MiB), or once
``metadata.log.max.snapshot.interval.ms`` (default 1 h; 0 = never by time) has passed
since the last one and anything was committed meanwhile. One snapshot at a time; one
that failed (a full disk) is retried no sooner than ``RETRY_BACKOFF_MS`` later, with
its bytes still counted.

``write_snapshot`` is the I/O, run on a worker thread: the image is immutable, so
the event loop hands it over and keeps committing. The file goes through
``FileSnapshotStore`` (``.part`` → fsync → rename → fsync dir: a kill -9 at any point
leaves the old set of snapshots or the new one, and a leftover ``.part`` never
counts), then snapshots beyond the newest ``SNAPSHOTS_RETAINED`` are deleted. The
caller then moves the log start offset to the end of the *oldest retained*
snapshot (once two are retained), deleting the whole segments below it: the log
still holds what follows each retained snapshot, so a damaged newest snapshot falls
back to the older one.

A Raft-replicated node takes the same decision and payload: on its commit listener,
``record_commit(batch bytes)``; when ``due``, ``build_snapshot(image.to_records(),
timestamp, epoch=...)`` on a worker and ``RaftNode.create_snapshot(image.offset + 1,
payload)``; the Raft log then deletes below it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Final

from odradek.metadata.image import MetadataImage
from odradek.metadata.snapshot import build_snapshot
from odradek.raft.log import SnapshotId
from odradek.raft.snapshots import SNAPSHOTS_RETAINED, FileSnapshotStore

logger = logging.getLogger(__name__)

DEFAULT_MAX_BYTES_BETWEEN: Final = 20 * 2**20  # metadata.log.max.record.bytes.between.snapshots
DEFAULT_MAX_INTERVAL_MS: Final = 3_600_000  # metadata.log.max.snapshot.interval.ms
# After a failed snapshot (a full disk), wait this long before trying again rather than
# retrying at every commit.
RETRY_BACKOFF_MS: Final = 10_000


@dataclass(frozen=True, slots=True)
class SnapshotPolicy:
    max_bytes_between: int = DEFAULT_MAX_BYTES_BETWEEN
    max_interval_ms: int = DEFAULT_MAX_INTERVAL_MS  # 0: never by time


class MetadataSnapshotter:
    """The decision: committed bytes and time since the last snapshot (sans-IO)."""

    def __init__(self, policy: SnapshotPolicy, now_ms: int) -> None:
        self.policy = policy
        self.bytes_since = 0  # committed record bytes not in a snapshot yet
        self.last_snapshot_ms = now_ms
        self.in_flight = False
        self._taken = 0
        self._retry_at_ms = 0

    def record_commit(self, size_bytes: int) -> None:
        assert size_bytes >= 0
        self.bytes_since += size_bytes

    def due(self, now_ms: int) -> bool:
        if self.in_flight or self.bytes_since == 0 or now_ms < self._retry_at_ms:
            return False
        if self.bytes_since >= self.policy.max_bytes_between:
            return True
        interval = self.policy.max_interval_ms
        return interval > 0 and now_ms - self.last_snapshot_ms >= interval

    def started(self) -> None:
        """A snapshot of everything committed so far is being written."""
        assert not self.in_flight, "one snapshot at a time"
        self.in_flight = True
        self._taken, self.bytes_since = self.bytes_since, 0

    def finished(self, now_ms: int, ok: bool) -> None:
        assert self.in_flight
        self.in_flight = False
        if ok:
            self.last_snapshot_ms = now_ms
        else:
            self.bytes_since += self._taken
            self._retry_at_ms = now_ms + RETRY_BACKOFF_MS
        self._taken = 0


def write_snapshot(
    store: FileSnapshotStore, image: MetadataImage, epoch: int, timestamp_ms: int
) -> tuple[SnapshotId, int]:
    """Write ``image`` as snapshot ``(image.offset + 1, epoch)`` and drop old ones.

    Blocking (a worker thread's job). Returns the snapshot's id and the offset below
    which the log may go (0 while fewer than ``SNAPSHOTS_RETAINED`` exist). Raises
    OSError.
    """
    snapshot_id = SnapshotId(end_offset=image.offset + 1, epoch=epoch)
    payload = build_snapshot(image.to_records(), timestamp_ms, epoch=epoch)
    store.create(snapshot_id, payload)
    store.delete_before(snapshot_id)
    kept = store.list()
    # The log must hold what follows every kept snapshot (a damaged newest one falls
    # back to the older): it may start at the oldest kept one's end, once there are two.
    keep_from = kept[-SNAPSHOTS_RETAINED].end_offset if len(kept) >= SNAPSHOTS_RETAINED else 0
    return snapshot_id, keep_from


__all__ = [
    "RETRY_BACKOFF_MS",
    "MetadataSnapshotter",
    "SnapshotPolicy",
    "write_snapshot",
]
