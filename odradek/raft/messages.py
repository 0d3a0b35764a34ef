"""The quorum's requests and responses as plain frozen data, one class per wire message.

How this works and why: the consensus core never sees bytes or sockets. Each message
here mirrors the partition-level fields of Kafka's schema of the same name (latest
version, as in ``kio.schema.<api>``) with the same field names and the same sentinels
(-1 for "none"), so an asyncio adapter converts a kio entity to one of these, and back,
field by field with no logic. The metadata partition is implied (KRaft has one), so the
topic/partition nesting is flattened away. Record batches travel as ``LogEntry``
tuples whose payloads are whole v2 batches already stamped with the entry's offset and
epoch (log.py's payload contract): the adapter concatenates them, and splits a
response's records back into entries by batch header.

``Inbound`` and ``Outbound`` are the envelopes: the peer's node id and the request's
correlation id (a response carries its request's id, as Kafka's response header does),
which is how a node ignores a late response to a request it has given up on.
"""

from __future__ import annotations

from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from odradek.raft.log import NO_EPOCH, NO_OFFSET, LogEntry, SnapshotId

NO_LEADER = -1
# Fetch v18's HighWatermark default: the replica does not report the HW it knows
# (older versions), so the leader cannot tell and parks as before KIP-1166.
HIGH_WATERMARK_NOT_REPORTED = 2**63 - 1
__all__ = ["NO_EPOCH", "NO_OFFSET", "SnapshotId"]  # re-exported: they are wire values too


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderIdAndEpoch:
    leader_id: int = NO_LEADER
    leader_epoch: int = NO_EPOCH


@dataclass(frozen=True, slots=True, kw_only=True)
class EpochEndOffset:
    """FetchResponse.DivergingEpoch: the leader's last epoch ≤ the follower's, and its end."""

    epoch: int = NO_EPOCH
    end_offset: int = NO_OFFSET


@dataclass(frozen=True, slots=True, kw_only=True)
class VoteRequest:
    cluster_id: str | None
    voter_id: int  # the addressee
    replica_epoch: int  # the candidate's epoch (for a pre-vote: the epoch it would use)
    replica_id: int  # the candidate
    last_offset_epoch: int
    last_offset: int  # the candidate's log end offset
    pre_vote: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class VoteResponse:
    error_code: ErrorCode
    leader_id: int
    leader_epoch: int
    vote_granted: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class BeginQuorumEpochRequest:
    cluster_id: str | None
    voter_id: int
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True, kw_only=True)
class BeginQuorumEpochResponse:
    error_code: ErrorCode
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True, kw_only=True)
class EndQuorumEpochRequest:
    cluster_id: str | None
    leader_id: int
    leader_epoch: int
    preferred_candidates: tuple[int, ...]  # best successor first


@dataclass(frozen=True, slots=True, kw_only=True)
class EndQuorumEpochResponse:
    error_code: ErrorCode
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchRequest:
    cluster_id: str | None
    replica_id: int  # ReplicaState.ReplicaId
    replica_epoch: int  # ReplicaState.ReplicaEpoch (unused by KRaft: -1)
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    log_start_offset: int
    partition_max_bytes: int
    # FetchRequest.MaxWaitMs: how long the leader may park a fetch it has nothing new
    # for (0: answer at once).
    max_wait_ms: int = 0
    # KIP-1166 (Fetch v18) FetchPartition.HighWatermark: the high watermark the replica
    # knows; -1 unknown, UNKNOWN_HIGH_WATERMARK_SUPPORT from a peer that cannot say.
    high_watermark: int = HIGH_WATERMARK_NOT_REPORTED


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchResponse:
    error_code: ErrorCode
    high_watermark: int
    log_start_offset: int
    diverging_epoch: EpochEndOffset
    current_leader: LeaderIdAndEpoch
    snapshot_id: SnapshotId
    records: tuple[LogEntry, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchSnapshotRequest:
    cluster_id: str | None
    replica_id: int
    max_bytes: int
    current_leader_epoch: int
    snapshot_id: SnapshotId
    position: int


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchSnapshotResponse:
    error_code: ErrorCode
    snapshot_id: SnapshotId
    current_leader: LeaderIdAndEpoch
    size: int
    position: int
    unaligned_records: bytes


Request = (
    VoteRequest
    | BeginQuorumEpochRequest
    | EndQuorumEpochRequest
    | FetchRequest
    | FetchSnapshotRequest
)
Response = (
    VoteResponse
    | BeginQuorumEpochResponse
    | EndQuorumEpochResponse
    | FetchResponse
    | FetchSnapshotResponse
)
Message = Request | Response
REQUEST_TYPES = (
    VoteRequest,
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchSnapshotRequest,
)


@dataclass(frozen=True, slots=True)
class Inbound:
    source_id: int
    correlation_id: int
    message: Message


@dataclass(frozen=True, slots=True)
class Outbound:
    destination_id: int
    correlation_id: int
    message: Message
