"""The leader's view of its replicas and the high watermark rule.

How this works and why: a leader knows how far each replica has the log only from that
replica's valid Fetch requests (a fetch at offset N with a matching last epoch proves
the replica holds, flushed, the leader's entries below N). The high watermark is the
largest offset that a majority of *voters* hold, counting the leader's own flushed end;
observers are tracked for DescribeQuorum but never counted. Two rules keep it safe:

* it moves only once that majority offset is past the start of the leader's epoch (its
  LeaderChange entry): before that, entries from earlier epochs may look replicated
  on a majority and still be overwritten (Raft's figure-8 case);
* it never moves backwards on a leader, even if a replica is later seen further back.

Check-quorum: the leader also tracks when each voter last fetched; if it cannot show a
majority fetched within the fetch timeout, it must resign (it may be partitioned away
while the rest elect a new leader).

Long poll: a valid fetch at the leader's log end with a max wait is parked
(``ParkedFetch``, held by the node: replication.py) instead of answered empty; its
arrival already counted as the replica's progress and liveness.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from odradek.raft.election_store import ElectionState
from odradek.raft.messages import FetchRequest, Inbound

# Observers tracked for DescribeQuorum; the oldest-seen is forgotten beyond this, so a
# stream of probing clients cannot grow the leader's memory without bound.
MAX_TRACKED_OBSERVERS = 256
# Fetches the leader keeps parked at once: one per replica, and a bound on replica ids
# (a stream of made-up ids gets answered at once rather than held).
MAX_PARKED_FETCHES = 1024


@dataclass(slots=True)
class ParkedFetch:
    """A fetch at the leader's log end, held until there is news or max wait passes."""

    inbound: Inbound
    request: FetchRequest
    leader: LeaderState  # the leadership it was parked under; any other answers it
    high_watermark: int  # what the answer would have said
    deadline_ms: int


@dataclass(slots=True)
class ReplicaProgress:
    replica_id: int
    log_end_offset: int = -1  # -1: not heard from in this epoch
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1
    # The leader's end at this replica's previous fetch (for the caught-up time).
    leader_end_at_last_fetch: int = -1


@dataclass(slots=True)
class LeaderState:
    election: ElectionState
    local_id: int
    voters: frozenset[int]
    epoch_start_offset: int  # where this leader's LeaderChange entry is
    elected_ms: int
    high_watermark: int  # inherited from this node's last known HW; only moves up
    replicas: dict[int, ReplicaProgress] = field(default_factory=dict)
    observers: dict[int, ReplicaProgress] = field(default_factory=dict)
    # Voters that have not fetched in this epoch yet get BeginQuorumEpoch again then.
    next_begin_resend_ms: int = 0
    first_unflushed_append_ms: int | None = None
    name: str = "Leader"

    def __post_init__(self) -> None:
        for voter in self.voters:
            if voter != self.local_id:
                self.replicas[voter] = ReplicaProgress(voter)

    def record_fetch(
        self, replica_id: int, fetch_offset: int, leader_end: int, now_ms: int
    ) -> None:
        """A *valid* fetch from ``replica_id`` at ``fetch_offset``."""
        progress = self.replicas.get(replica_id)
        if progress is None:
            progress = self.observers.get(replica_id)
            if progress is None:
                if len(self.observers) >= MAX_TRACKED_OBSERVERS:
                    stalest = min(self.observers.values(), key=lambda p: p.last_fetch_ms)
                    del self.observers[stalest.replica_id]
                progress = self.observers[replica_id] = ReplicaProgress(replica_id)
        # A delayed duplicate of an older fetch must not move the replica back: what it
        # once proved the replica held, it still holds within this epoch.
        progress.log_end_offset = max(progress.log_end_offset, fetch_offset)
        if fetch_offset >= leader_end:
            progress.last_caught_up_ms = now_ms
        elif fetch_offset >= progress.leader_end_at_last_fetch >= 0:
            progress.last_caught_up_ms = max(progress.last_caught_up_ms, progress.last_fetch_ms)
        progress.last_fetch_ms = now_ms
        progress.leader_end_at_last_fetch = leader_end

    def update_high_watermark(self, local_flushed_offset: int) -> bool:
        """Recompute the HW from the voters' progress; True when it moved."""
        offsets = [local_flushed_offset]
        offsets.extend(progress.log_end_offset for progress in self.replicas.values())
        offsets.sort(reverse=True)
        majority_offset = offsets[len(self.voters) // 2]
        if majority_offset > self.epoch_start_offset and majority_offset > self.high_watermark:
            self.high_watermark = majority_offset
            return True
        return False

    def quorum_reached_since(self, since_ms: int) -> bool:
        """Did a majority of voters (the leader counts) fetch at or after ``since_ms``?"""
        recent = 1 + sum(1 for p in self.replicas.values() if p.last_fetch_ms >= since_ms)
        return recent > len(self.voters) // 2

    def voters_not_fetched(self) -> list[int]:
        return sorted(p.replica_id for p in self.replicas.values() if p.last_fetch_ms < 0)

    def preferred_successors(self) -> tuple[int, ...]:
        """Voters by how much of the log they have, most first (for EndQuorumEpoch)."""
        ranked = sorted(self.replicas.values(), key=lambda p: (-p.log_end_offset, p.replica_id))
        return tuple(p.replica_id for p in ranked)
