"""A follower's state built from remote storage (KIP-405's tier state machine).

How this works and why: a follower whose next offset is below its leader's local
log start gets OFFSET_MOVED_TO_TIERED_STORAGE — what it lacks exists only in remote
storage, and the leader will not send it. Fetching the remote part would only copy
to local disk what local retention is there to keep off it, so, as Kafka's
ReplicaFetcherTierStateMachine, the follower instead starts its log where the
leader's local log starts, with what a log there needs to know about everything
before it:

1. the leader's local log start L and its epoch (the fetcher asked: ListOffsets
   EARLIEST_LOCAL) — the follower's remote metadata is read up to its end first
   (``rlmm.ready``);
2. the remote segment holding L - 1 (COPY_SEGMENT_FINISHED, on the leader's
   lineage: the newest epoch not above the leader's) — normally the one ending
   there, since the leader deletes only copied segments; its end E + 1 is where the
   follower starts (>= L: a segment copied by a later leader may reach past L, and
   the leader holds those offsets locally). The RemoteStorageManager hands back its
   leader-epoch checkpoint and producer snapshot (taken at E + 1), off the loop;
3. the log emptied and restarted at E + 1, the epochs of the checkpoint assigned,
   the producer snapshot installed as the snapshot at E + 1 and loaded (so
   idempotent and transactional producers continue without OUT_OF_ORDER_SEQUENCE
   after a failover to this replica), the log start offset set to the remote log
   start and ``highest_offset_in_remote`` to what is copied (local retention may go
   on).

Then the fetcher fetches from E + 1 as usual. No segment holding L - 1 is known yet
(the metadata lags): False, and the fetcher asks again after a backoff.

Concurrency: on the event loop (the follower's log is the loop's); the two remote
fetches run on the default executor.
"""

from __future__ import annotations

import asyncio
import logging

from odradek.storage.log import Log
from odradek.storage.producer_state import snapshot_path
from odradek.storage.remote.metadata import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from odradek.storage.remote.metadata_manager import RemoteLogMetadataManager
from odradek.storage.remote.storage_manager import IndexType, RemoteStorageManager

logger = logging.getLogger(__name__)

FINISHED = (RemoteLogSegmentState.COPY_SEGMENT_FINISHED,)
READY_TIMEOUT_S = 10.0


def segment_ending_before(
    listed: list[RemoteLogSegmentMetadata], local_start: int, leader_epoch: int
) -> RemoteLogSegmentMetadata | None:
    """The finished segment holding ``local_start - 1`` on the leader's lineage: of
    those holding it, the one whose epoch at that offset is the newest not above
    ``leader_epoch`` (the newest copy on a tie)."""
    target = local_start - 1
    best: tuple[int, int, RemoteLogSegmentMetadata] | None = None
    for metadata in listed:
        if not metadata.start_offset <= target <= metadata.end_offset:
            continue
        # The epoch that wrote ``target`` in this segment: off the leader's lineage
        # when above the leader's epoch (an unclean election's loser wrote it).
        epoch = max(e for e, first in metadata.segment_leader_epochs.items() if first <= target)
        if epoch > leader_epoch:
            continue
        key = (epoch, metadata.event_timestamp_ms)
        if best is None or key > best[:2]:
            best = (*key, metadata)
    return None if best is None else best[2]


def parse_epoch_checkpoint(data: bytes) -> list[tuple[int, int]]:
    """(epoch, start offset) entries of a leader-epoch checkpoint file's bytes."""
    lines = data.decode("ascii").splitlines()
    if len(lines) < 2:
        raise ValueError("leader epoch checkpoint: no header")
    count = int(lines[1])
    entries = []
    for line in lines[2 : 2 + count]:
        epoch, start = line.split()
        entries.append((int(epoch), int(start)))
    if len(entries) != count:
        raise ValueError(f"leader epoch checkpoint: {len(entries)} entries of {count}")
    return entries


async def build_follower_state(
    rlmm: RemoteLogMetadataManager,
    rsm: RemoteStorageManager,
    tp: TopicIdPartition,
    log: Log,
    local_start: int,
    leader_epoch: int,
) -> bool:
    """Restart ``log`` at the end of the remote segment holding ``local_start - 1``
    (the leader's local start, normally) with that segment's state; False when that
    segment is not known (yet)."""
    if local_start <= log.log_end_offset:
        return True  # nothing to build: the follower already reaches the leader's disk
    # Bounded: the fetcher awaits this between rounds for all its partitions (a
    # TimeoutError is a failure it retries after a backoff).
    await asyncio.wait_for(rlmm.ready(tp), READY_TIMEOUT_S)
    listed = rlmm.list_remote_log_segments(tp, FINISHED)
    metadata = segment_ending_before(listed, local_start, leader_epoch)
    if metadata is None:
        logger.info(
            "%s: no remote segment ends at %d (leader epoch %d) yet; asking again later",
            tp,
            local_start - 1,
            leader_epoch,
        )
        return False
    loop = asyncio.get_running_loop()
    epochs_data = await loop.run_in_executor(
        None, rsm.fetch_index, metadata, IndexType.LEADER_EPOCH
    )
    snapshot = await loop.run_in_executor(
        None, rsm.fetch_index, metadata, IndexType.PRODUCER_SNAPSHOT
    )
    entries = parse_epoch_checkpoint(epochs_data)
    if local_start <= log.log_end_offset or log.closed:
        return True  # changed while we waited
    restart = metadata.end_offset + 1
    log.truncate_fully_and_start_at(restart)
    for epoch, start in entries:
        log.epoch_cache.assign(epoch, start)
    path = snapshot_path(log.directory, restart)
    path.write_bytes(snapshot)
    log.rebuild_producer_state()  # loads the newest snapshot at or below the end: this
    remote_start = min(m.start_offset for m in listed)
    log.log_start_offset = min(remote_start, restart)
    log.high_watermark = restart  # everything copied was below the leader's HW
    log.highest_offset_in_remote = max(m.end_offset for m in listed)
    logger.info(
        "%s: built from remote segment %d..%d (leader's local start %d): log restarts "
        "at %d (epochs %s, log start %d)",
        tp,
        metadata.start_offset,
        metadata.end_offset,
        local_start,
        restart,
        entries,
        log.log_start_offset,
    )
    return True
