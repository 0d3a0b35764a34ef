"""The remote segments of one partition, rebuilt from ``__remote_log_metadata`` in log order.

How this works and why: every broker that hosts a replica of a tiered partition reads
the partition's events from ``__remote_log_metadata`` (metadata_records.py) in offset
order and applies them here, so all brokers end up with the same view of which
segments exist remotely and which may be read. The log order is what makes the state
machine (metadata.py) checkable: an event that does not follow from the previous one
is refused (IllegalStateTransitionError) instead of silently reordering history.

What is kept:

* every segment not yet DELETE_SEGMENT_FINISHED, by segment uuid, in its latest
  state (COPY_SEGMENT_STARTED ones too: a copy that died half-way is listed, so the
  leader can find and delete its leftovers);
* per leader epoch, the COPY_SEGMENT_FINISHED segments that hold offsets of that
  epoch, keyed by the first offset of the epoch *within* the segment (a segment
  spanning epochs 3 and 4 is under both, each with its own offset range). Only these
  are served: ``segment_for`` looks a fetch offset up in the epoch the local leader
  epoch cache gives for it (the "lineage": after an unclean election two segments
  may hold the same offsets under different epochs, and only the one on the current
  lineage is right);
* per epoch, the highest offset ever copied (``highest_offset_for_epoch``). Deletes
  do not lower it: it tells the copier where to resume, and offsets deleted by
  retention must not be copied again.

A segment leaves the served set as soon as its deletion starts (DELETE_SEGMENT_STARTED:
its objects may be half gone) and the cache altogether once DELETE_SEGMENT_FINISHED.
If two finished segments claim the same first offset in an epoch (a re-upload), the
later one serves. DELETE_PARTITION_FINISHED empties the cache.

Concurrency: single owner (the metadata consumer); readers on other threads need a
lock held by that owner. All lookups are O(log n) per epoch except the listings.
"""

from __future__ import annotations

import bisect
import uuid
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field

from odradek.storage.remote.metadata import (
    RemoteLogMetadata,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
    check_transition,
)
from odradek.storage.remote.storage_manager import RemoteResourceNotFoundError

COPY_STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED
COPY_FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
DELETE_FINISHED = RemoteLogSegmentState.DELETE_SEGMENT_FINISHED
MAX_OVERLAP_LOOKBACK = 8


@dataclass(slots=True)
class _EpochSegments:
    """The finished segments of one epoch: first offset of the epoch in each -> uuid."""

    starts: list[int] = field(default_factory=list)  # sorted keys of ``by_start``
    by_start: dict[int, uuid.UUID] = field(default_factory=dict)
    highest_offset: int = -1

    def put(self, start: int, segment: uuid.UUID) -> None:
        if start not in self.by_start:
            bisect.insort(self.starts, start)
        self.by_start[start] = segment

    def remove(self, start: int, segment: uuid.UUID) -> None:
        if self.by_start.get(start) == segment:
            del self.by_start[start]
            del self.starts[bisect.bisect_left(self.starts, start)]

    def floors(self, offset: int) -> Iterator[uuid.UUID]:
        """Segments starting at or below ``offset``, nearest first (at most
        MAX_OVERLAP_LOOKBACK: a new leader whose segments rolled elsewhere copies one
        overlapping what the old leader copied, which may hold ``offset`` when the
        nearest start's segment ends below it)."""
        index = bisect.bisect_right(self.starts, offset)
        for i in range(index - 1, max(index - 1 - MAX_OVERLAP_LOOKBACK, -1), -1):
            yield self.by_start[self.starts[i]]


class RemoteLogMetadataCache:
    """Remote segment metadata of one partition, fed with its events in log order."""

    def __init__(self, topic_id_partition: TopicIdPartition | None = None) -> None:
        # None: take the partition of the first event (and refuse any other after it).
        self.topic_id_partition = topic_id_partition
        self.segments: dict[uuid.UUID, RemoteLogSegmentMetadata] = {}
        self.epochs: dict[int, _EpochSegments] = {}
        self.partition_delete_state: RemotePartitionDeleteState | None = None

    # -- feeding ------------------------------------------------------------------------
    def apply(self, message: RemoteLogMetadata) -> None:
        """Apply one event of ``__remote_log_metadata`` (the next in log order)."""
        if isinstance(message, RemoteLogSegmentMetadata):
            self.add_copy_in_progress_segment(message)
        elif isinstance(message, RemoteLogSegmentMetadataUpdate):
            self.update_remote_log_segment_metadata(message)
        else:
            self.update_remote_partition_delete_metadata(message)

    def _check_partition(self, tp: TopicIdPartition) -> None:
        if self.topic_id_partition is None:
            self.topic_id_partition = tp
        elif (tp.topic_id, tp.partition) != (
            self.topic_id_partition.topic_id,
            self.topic_id_partition.partition,
        ):
            raise ValueError(f"event of {tp} applied to the cache of {self.topic_id_partition}")

    def add_copy_in_progress_segment(self, metadata: RemoteLogSegmentMetadata) -> None:
        """A new segment (state COPY_SEGMENT_STARTED, with an id never seen before)."""
        self._check_partition(metadata.topic_id_partition)
        sid = metadata.remote_log_segment_id
        if sid.id in self.segments:
            raise ValueError(f"remote segment {sid} added twice")
        check_transition(None, metadata.state, sid)
        self.segments[sid.id] = metadata

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        """Move a known segment to the update's state (checked against the state machine)."""
        self._check_partition(update.topic_id_partition)
        sid = update.remote_log_segment_id
        current = self.segments.get(sid.id)
        if current is None:
            raise RemoteResourceNotFoundError(f"no remote segment {sid} to update")
        updated = current.create_with_update(update)
        if current.state == COPY_FINISHED and updated.state != COPY_FINISHED:
            self._unserve(current)
        if updated.state == DELETE_FINISHED:
            del self.segments[sid.id]
            return
        self.segments[sid.id] = updated
        if updated.state == COPY_FINISHED and current.state != COPY_FINISHED:
            self._serve(updated)

    def update_remote_partition_delete_metadata(
        self, metadata: RemotePartitionDeleteMetadata
    ) -> None:
        self._check_partition(metadata.topic_id_partition)
        check_transition(self.partition_delete_state, metadata.state, metadata.topic_id_partition)
        self.partition_delete_state = metadata.state
        if metadata.state == RemotePartitionDeleteState.DELETE_PARTITION_FINISHED:
            self.segments.clear()
            self.epochs.clear()

    def _serve(self, metadata: RemoteLogSegmentMetadata) -> None:
        for epoch, first, last in metadata.epoch_ranges():
            state = self.epochs.setdefault(epoch, _EpochSegments())
            state.put(first, metadata.remote_log_segment_id.id)
            state.highest_offset = max(state.highest_offset, last)

    def _unserve(self, metadata: RemoteLogSegmentMetadata) -> None:
        for epoch, first, _ in metadata.epoch_ranges():
            state = self.epochs.get(epoch)
            if state is not None:
                state.remove(first, metadata.remote_log_segment_id.id)

    # -- queries ------------------------------------------------------------------------
    def segment_for(self, leader_epoch: int, offset: int) -> RemoteLogSegmentMetadata | None:
        """The COPY_SEGMENT_FINISHED segment holding ``offset`` as written by ``leader_epoch``."""
        state = self.epochs.get(leader_epoch)
        if state is None:
            return None
        for segment in state.floors(offset):
            metadata = self.segments[segment]
            for epoch, first, last in metadata.epoch_ranges():
                if epoch == leader_epoch and first <= offset <= last:
                    return metadata
        return None

    def list_segments(
        self,
        leader_epoch: int | None = None,
        states: Collection[RemoteLogSegmentState] | None = None,
    ) -> list[RemoteLogSegmentMetadata]:
        """Tracked segments (any state but DELETE_SEGMENT_FINISHED, or only ``states``),
        holding offsets of ``leader_epoch`` if given, by start offset then end offset."""
        found = [
            metadata
            for metadata in self.segments.values()
            if (leader_epoch is None or leader_epoch in metadata.segment_leader_epochs)
            and (states is None or metadata.state in states)
        ]
        found.sort(key=lambda m: (m.start_offset, m.end_offset, m.event_timestamp_ms))
        return found

    def highest_offset_for_epoch(self, epoch: int) -> int | None:
        """The highest offset of ``epoch`` ever copied (COPY_SEGMENT_FINISHED), if any."""
        state = self.epochs.get(epoch)
        return None if state is None or state.highest_offset < 0 else state.highest_offset

    def earliest_offset(self) -> int | None:
        """The remote log start offset: the lowest start of a served segment, if any."""
        starts = [m.start_offset for m in self.segments.values() if m.state == COPY_FINISHED]
        return min(starts) if starts else None
