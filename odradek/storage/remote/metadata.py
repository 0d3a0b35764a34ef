"""KIP-405 remote log metadata: what a broker knows about a segment copied to remote storage.

How this works and why: tiered storage keeps old segments of a partition in a remote
store (a directory, S3) and serves them from there once they leave the local disk.
The store itself only holds bytes; what exists, and in which state, is kept apart in
a strongly ordered log (Kafka's internal topic ``__remote_log_metadata``), so the
store may be eventually consistent and every broker can rebuild the same view by
reading that log in order (metadata_cache.py). This module holds the value types of
that view, with Kafka's names:

* ``RemoteLogSegmentId`` — the partition (topic id, topic name, partition) and a
  random segment uuid. Every copy attempt gets a fresh uuid, even a retry of the same
  offsets, so a half-done attempt never collides with the next one.
* ``RemoteLogSegmentMetadata`` — offsets, sizes, the leader epochs the segment holds
  (``segment_leader_epochs``: epoch -> first offset of that epoch in the segment,
  ascending) and its ``RemoteLogSegmentState``.
* ``RemoteLogSegmentMetadataUpdate`` — a later state of one segment.
* ``RemotePartitionDeleteMetadata`` — the deletion of a whole partition's remote data.

State machines (Kafka's; illegal transitions raise ``IllegalStateTransitionError``).
A state may be repeated (a retried delete publishes DELETE_SEGMENT_STARTED again)::

    (new) -> COPY_SEGMENT_STARTED -> COPY_SEGMENT_FINISHED -> DELETE_SEGMENT_STARTED
                            \\________________________________/          |
                                                          DELETE_SEGMENT_FINISHED
    (new) -> DELETE_PARTITION_MARKED -> DELETE_PARTITION_STARTED -> DELETE_PARTITION_FINISHED

A copy that failed half-way (COPY_SEGMENT_STARTED) may go straight to
DELETE_SEGMENT_STARTED: that is how its leftovers are cleaned up. The ids of the
states are Kafka's (the int8 written in the records, see metadata_records.py).

Concurrency: immutable values; share them freely.
"""

from __future__ import annotations

import enum
import itertools
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from odradek.storage.errors import StorageError

INT32_MAX: Final = 2**31 - 1
INT64_MAX: Final = 2**63 - 1


class IllegalStateTransitionError(StorageError):
    """A state change the KIP-405 state machine does not allow."""


class RemoteLogSegmentState(enum.IntEnum):
    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3

    def is_valid_transition(self, target: RemoteLogSegmentState) -> bool:
        return target == self or target in _SEGMENT_TRANSITIONS[self]


_SEGMENT_TRANSITIONS: Final = {
    RemoteLogSegmentState.COPY_SEGMENT_STARTED: frozenset(
        {RemoteLogSegmentState.COPY_SEGMENT_FINISHED, RemoteLogSegmentState.DELETE_SEGMENT_STARTED}
    ),
    RemoteLogSegmentState.COPY_SEGMENT_FINISHED: frozenset(
        {RemoteLogSegmentState.DELETE_SEGMENT_STARTED}
    ),
    RemoteLogSegmentState.DELETE_SEGMENT_STARTED: frozenset(
        {RemoteLogSegmentState.DELETE_SEGMENT_FINISHED}
    ),
    RemoteLogSegmentState.DELETE_SEGMENT_FINISHED: frozenset(),
}


class RemotePartitionDeleteState(enum.IntEnum):
    DELETE_PARTITION_MARKED = 0
    DELETE_PARTITION_STARTED = 1
    DELETE_PARTITION_FINISHED = 2

    def is_valid_transition(self, target: RemotePartitionDeleteState) -> bool:
        return target == self or target == self + 1


def check_transition(
    current: RemoteLogSegmentState | RemotePartitionDeleteState | None,
    target: RemoteLogSegmentState | RemotePartitionDeleteState,
    what: object,
) -> None:
    """Raise IllegalStateTransitionError unless ``current -> target`` is allowed
    (``current`` None: the first record of ``what``, which must be the first state)."""
    if current is None:
        ok = target.value == 0
    else:
        ok = type(current) is type(target) and current.is_valid_transition(target)  # type: ignore[arg-type]
    if not ok:
        raise IllegalStateTransitionError(
            f"{what}: illegal state transition {current.name if current else 'none'} "
            f"-> {target.name}"
        )


@dataclass(frozen=True, slots=True)
class TopicIdPartition:
    """A partition by topic id (its identity) and name (for people and paths)."""

    topic_id: uuid.UUID
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic_id}:{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentId:
    topic_id: uuid.UUID
    topic: str
    partition: int
    id: uuid.UUID

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return TopicIdPartition(self.topic_id, self.topic, self.partition)

    @classmethod
    def generate(cls, tp: TopicIdPartition) -> RemoteLogSegmentId:
        return cls(tp.topic_id, tp.topic, tp.partition, uuid.uuid4())

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}/{self.id}"


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadata:
    """One remote segment: offsets [start_offset, end_offset], its epochs and state.

    ``segment_leader_epochs`` maps each leader epoch in the segment to the first
    offset it wrote there; epochs and offsets both ascend, the first offset is
    ``start_offset`` and the last is at most ``end_offset``.
    """

    remote_log_segment_id: RemoteLogSegmentId
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_size_in_bytes: int
    segment_leader_epochs: Mapping[int, int]
    state: RemoteLogSegmentState = RemoteLogSegmentState.COPY_SEGMENT_STARTED
    custom_metadata: bytes | None = None
    txn_index_empty: bool = False
    _epochs: tuple[tuple[int, int], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        epochs = tuple(sorted(self.segment_leader_epochs.items()))
        object.__setattr__(self, "segment_leader_epochs", dict(epochs))
        object.__setattr__(self, "_epochs", epochs)
        where = f"remote segment {self.remote_log_segment_id}"
        if not 0 <= self.start_offset <= self.end_offset <= INT64_MAX:
            raise ValueError(f"{where}: offsets {self.start_offset}..{self.end_offset}")
        if not 0 <= self.segment_size_in_bytes <= INT32_MAX:
            raise ValueError(f"{where}: size {self.segment_size_in_bytes}")
        if not epochs:
            raise ValueError(f"{where}: no leader epochs")
        if epochs[0][1] != self.start_offset:
            raise ValueError(f"{where}: first epoch starts at {epochs[0][1]}, not its start")
        for (_, before), (epoch, offset) in itertools.pairwise(epochs):
            if not before < offset <= self.end_offset:
                raise ValueError(f"{where}: epoch {epoch} starts at {offset}, out of order")
        if epochs[0][0] < 0 or epochs[-1][0] > INT32_MAX:
            raise ValueError(f"{where}: epochs out of int32 range")

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self.remote_log_segment_id.topic_id_partition

    def epoch_ranges(self) -> list[tuple[int, int, int]]:
        """(epoch, first offset, last offset) of each epoch within this segment."""
        ends = [offset - 1 for _, offset in self._epochs[1:]] + [self.end_offset]
        return [(e, o, end) for (e, o), end in zip(self._epochs, ends, strict=True)]

    def create_with_update(
        self, update: RemoteLogSegmentMetadataUpdate
    ) -> RemoteLogSegmentMetadata:
        """This segment in the update's state (checked), broker and event time."""
        if update.remote_log_segment_id != self.remote_log_segment_id:
            raise ValueError(f"update of {update.remote_log_segment_id} applied to {self}")
        check_transition(self.state, update.state, self.remote_log_segment_id)
        return RemoteLogSegmentMetadata(
            self.remote_log_segment_id,
            self.start_offset,
            self.end_offset,
            self.max_timestamp_ms,
            update.broker_id,
            update.event_timestamp_ms,
            self.segment_size_in_bytes,
            self.segment_leader_epochs,
            update.state,
            update.custom_metadata if update.custom_metadata is not None else self.custom_metadata,
            self.txn_index_empty,
        )


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadataUpdate:
    remote_log_segment_id: RemoteLogSegmentId
    event_timestamp_ms: int
    custom_metadata: bytes | None
    state: RemoteLogSegmentState
    broker_id: int

    def __post_init__(self) -> None:
        if self.state == RemoteLogSegmentState.COPY_SEGMENT_STARTED:
            raise ValueError("an update cannot go back to COPY_SEGMENT_STARTED")

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self.remote_log_segment_id.topic_id_partition


@dataclass(frozen=True, slots=True)
class RemotePartitionDeleteMetadata:
    topic_id_partition: TopicIdPartition
    state: RemotePartitionDeleteState
    event_timestamp_ms: int
    broker_id: int


RemoteLogMetadata = (
    RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate | RemotePartitionDeleteMetadata
)
