"""What the parts of partition replication promise each other.

How this works and why: replication is four pieces built side by side — the
``Partition`` state machine and purgatories (replica/partition.py, purgatory.py,
replica_manager.py), the replica fetchers (replica/fetcher.py), the ISR changes a
leader proposes (replica/isr.py) and the controller that decides them (metadata/) —
and each sees the others only through the Protocols here, so none imports another's
internals and each can be tested with a fake of the rest:

- a follower ``Partition`` is a ``FollowerLog`` to the fetcher: the leader's batches
  are appended byte for byte, the log is truncated to the end of the last common leader
  epoch when the leader reports a diverging epoch (KIP-101/KIP-279, Fetch v12+
  ``diverging_epoch``), and the follower's high watermark follows the leader's;
- the ``ReplicaManager`` starts and stops fetching through ``ReplicaFetching`` when a
  metadata delta makes this node a follower of a partition (``FetchStart``: which
  leader, which epoch) or stops it being one;
- a leader proposes ISR changes to the active controller through ``IsrChannel``
  (AlterPartition, KIP-497: the partition epoch makes a stale proposal fail with
  INVALID_UPDATE_VERSION; KIP-903: each new ISR member's broker epoch is checked).

Error results are Kafka error names ("NONE" on success), as everywhere in odradek.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class FetchStart:
    """A partition this node now follows: the leader to fetch from, in its epoch."""

    topic_id: uuid.UUID
    leader_id: int
    leader_epoch: int


class FollowerLog(Protocol):
    """A follower replica as the fetcher drives it (``Partition`` implements it)."""

    topic: str
    index: int

    @property
    def leader_epoch(self) -> int: ...

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...

    def latest_epoch(self) -> int | None:
        """The leader epoch of the last batch in the log (None for an empty cache)."""
        ...

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch on this log: (the largest epoch <= ``epoch``, the offset
        where it ended), or (-1, -1) when no such epoch is known."""
        ...

    def append_as_follower(self, records: bytes | memoryview) -> None:
        """Append the leader's batches unchanged (offsets and epochs as the leader
        stamped them). Raises StorageError on bad data; the fetcher backs off."""
        ...

    def truncate_to(self, offset: int) -> None:
        """Drop everything at and after ``offset`` (reconciliation)."""
        ...

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Empty the log and restart it at ``offset`` (the leader's log start moved
        past this follower's log end: OFFSET_OUT_OF_RANGE below the leader's start)."""
        ...

    def update_follower_high_watermark(self, leader_high_watermark: int) -> None:
        """HW = min(the leader's HW, own log end offset); checkpointed like a leader's."""
        ...

    def update_follower_log_start_offset(self, leader_log_start_offset: int) -> None:
        """Follow the leader's log start offset (DeleteRecords, retention)."""
        ...


class ReplicaFetching(Protocol):
    """The replica fetcher manager as the ReplicaManager drives it."""

    def add_partitions(self, partitions: Mapping[TopicPartition, FetchStart]) -> None:
        """Fetch these from their leaders (a new leader or epoch replaces the old)."""
        ...

    def remove_partitions(self, partitions: Iterable[TopicPartition]) -> None:
        """Stop fetching these (this node leads them now, or no longer hosts them)."""
        ...

    async def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class IsrProposal:
    """A leader's wish for a partition's ISR (one AlterPartition partition entry)."""

    topic_id: uuid.UUID
    partition: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]
    # KIP-903: the broker epoch each new ISR member fetched with (-1: unknown)
    broker_epochs: Mapping[int, int]


@dataclass(frozen=True, slots=True)
class IsrOutcome:
    """The controller's answer to one proposal: the partition's state after it."""

    error: str  # "NONE", or e.g. INVALID_UPDATE_VERSION, FENCED_LEADER_EPOCH, INELIGIBLE_REPLICA
    leader_id: int = -1
    leader_epoch: int = -1
    partition_epoch: int = -1
    isr: tuple[int, ...] = ()


class IsrChannel(Protocol):
    """AlterPartition to the active controller (local in combined mode, an RPC otherwise)."""

    async def alter_partition(
        self, broker_id: int, broker_epoch: int, proposals: Sequence[IsrProposal]
    ) -> list[IsrOutcome]:
        """One outcome per proposal, in order; a request-level failure (NOT_CONTROLLER,
        STALE_BROKER_EPOCH, no controller reachable) is that error in every outcome."""
        ...
