"""Shared state and helpers of a RaftNode (the handlers live in election.py and replication.py).

How this works and why: ``RaftNode`` is split by concern — elections, replication, the
public driver — and ``NodeCore`` holds what they share: the injected log, stores, config
and random source, the ``QuorumState``, the outbox of messages to send, and the few
helpers every handler needs (timer randomisation, correlation ids, "a peer told us about
a newer epoch"). Nothing here does I/O; messages accumulate in ``_outbox`` and the
public ``handle``/``tick`` return them.
"""

from __future__ import annotations

import random as random_module

from kio.schema.errors import ErrorCode

from odradek.raft.config import RaftConfig
from odradek.raft.election_store import ElectionStore
from odradek.raft.leader_state import ParkedFetch
from odradek.raft.log import RaftLog, SnapshotId
from odradek.raft.messages import (
    NO_LEADER,
    Inbound,
    LeaderIdAndEpoch,
    Message,
    Outbound,
)
from odradek.raft.quorum_state import QuorumState
from odradek.raft.roles import (
    CandidateState,
    FollowerState,
    ProspectiveState,
    SilentLeader,
    UnattachedState,
    VotedState,
)
from odradek.raft.snapshots import SnapshotStore

# Messages one handle()/tick() may emit: a leader of 5 voters sends at most a handful
# per step; far more means a loop, which the assertion turns into a loud bug.
OUTBOX_MAX_MESSAGES = 4096
# Exponent cap of the election backoff (2**20 * retry backoff exceeds any sane max).
BACKOFF_MAX_DOUBLINGS = 20


class NodeCore:
    def __init__(
        self,
        node_id: int,
        voters: frozenset[int],
        log: RaftLog,
        store: ElectionStore,
        snapshots: SnapshotStore,
        config: RaftConfig,
        random: random_module.Random,
        cluster_id: str | None,
        defer_flush: bool = False,
    ) -> None:
        assert voters, "a quorum needs at least one voter"
        self.node_id = node_id
        self.voters = voters
        self.log = log
        self.snapshots = snapshots
        self.config = config
        self.cluster_id = cluster_id
        self._random = random
        self.quorum = QuorumState(node_id, voters, store)
        self.high_watermark = 0
        self._outbox: list[Outbound] = []
        # The leader's long-poll: fetches at its log end, by replica id (replication.py).
        self._parked_fetches: dict[int, ParkedFetch] = {}
        # What the parked fetches were last checked against: role, (log end, HW).
        self._parked_role: object = None
        self._parked_state: tuple[int, int] | None = None
        self._parked_deadline_ms_min = 2**62
        # defer_flush: the node never fsyncs itself; it raises _flush_requested and the
        # driver runs the log's prepare_flush / fsync (worker thread) / mark_flushed.
        self._defer_flush = defer_flush
        self._flush_requested = False
        self._next_correlation_id = 0
        self._failed_elections = 0
        # The leader whose fetches timed out, until this node follows someone again;
        # handed to ``predecessor`` if this node wins the election that follows.
        self._silent_leader: SilentLeader | None = None
        self.predecessor: SilentLeader | None = None
        # Delivery to the state machine: the next offset to hand over, and a snapshot to
        # load first (at start-up, or after installing one from the leader).
        self._applied_offset = 0
        self._pending_snapshot: SnapshotId | None = None

    # --- small helpers -------------------------------------------------------------

    @property
    def epoch(self) -> int:
        return self.quorum.epoch

    @property
    def is_voter(self) -> bool:
        return self.node_id in self.voters

    @property
    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    def _flush_log(self) -> None:
        """Make the log durable up to its end: now, or (deferred) by the driver soon."""
        if self._defer_flush:
            self._flush_requested = True
        else:
            self.log.flush()

    def _other_voters(self) -> list[int]:
        return sorted(voter for voter in self.voters if voter != self.node_id)

    def _send(self, destination_id: int, message: Message) -> int:
        correlation_id = self._next_correlation_id
        self._next_correlation_id += 1
        self._emit(Outbound(destination_id, correlation_id, message))
        return correlation_id

    def _respond(self, inbound: Inbound, message: Message) -> None:
        self._emit(Outbound(inbound.source_id, inbound.correlation_id, message))

    def _emit(self, outbound: Outbound) -> None:
        assert len(self._outbox) < OUTBOX_MAX_MESSAGES, "runaway outbox"
        self._outbox.append(outbound)

    def _election_timeout_ms(self) -> int:
        timeout = self.config.election_timeout_ms
        return timeout + self._random.randint(0, timeout)

    def _election_backoff_ms(self) -> int:
        """Binary exponential backoff after ``_failed_elections`` lost elections."""
        doublings = min(self._failed_elections, BACKOFF_MAX_DOUBLINGS)
        cap = min(self.config.election_backoff_max_ms, self.config.retry_backoff_ms << doublings)
        return self._random.randint(0, max(cap, 1))

    def _current_leader(self) -> LeaderIdAndEpoch:
        leader_id = self.quorum.leader_id
        return LeaderIdAndEpoch(
            leader_id=NO_LEADER if leader_id is None else leader_id, leader_epoch=self.epoch
        )

    def _log_is_up_to_date(self, last_offset_epoch: int, last_offset: int) -> bool:
        """Raft's vote rule: the candidate's log ends at least where ours does,
        comparing (last epoch, end offset) in that order."""
        ours = (self.log.last_fetched_epoch, self.log.end_offset)
        return (last_offset_epoch, last_offset) >= ours

    # --- reacting to what peers tell us about epochs and leaders ------------------

    def _observe_leader(self, epoch: int, leader_id: int, now_ms: int) -> bool:
        """A peer reports ``epoch`` (and its leader, or NO_LEADER). Move to a newer epoch,
        or learn the leader of ours. Returns True when the role changed."""
        if epoch < self.epoch:
            return False
        known_leader = leader_id != NO_LEADER and leader_id in self.voters
        if epoch > self.epoch:
            if known_leader and leader_id != self.node_id:
                self._become_follower(epoch, leader_id, now_ms)
            else:
                self._become_unattached(epoch, now_ms)
            return True
        if not known_leader or leader_id == self.node_id:
            return False
        role = self.quorum.role
        current = role.election.leader_id
        if current is not None:
            # A second leader in one epoch would be a safety bug (or a lying peer).
            if current != leader_id:
                return False
            if isinstance(role, FollowerState):
                return False
        if isinstance(role, UnattachedState | VotedState | ProspectiveState | CandidateState):
            self._become_follower(epoch, leader_id, now_ms)
            return True
        return False

    def _become_follower(self, epoch: int, leader_id: int, now_ms: int) -> None:
        role = self.quorum.to_follower(epoch, leader_id, now_ms + self.config.fetch_timeout_ms)
        self._silent_leader = None
        self.predecessor = None
        # We just heard from (or about) the leader: count it as contact, so a pre-vote
        # arriving before our first fetch does not unseat a leader that was just elected.
        role.last_fetch_success_ms = now_ms
        self._failed_elections = 0

    def _leader_is_live(self, role: FollowerState, now_ms: int) -> bool:
        """KIP-996: a follower refuses pre-votes while its leader answers its fetches."""
        if role.leader_resigned_election_ms is not None or role.last_fetch_success_ms is None:
            return False
        return now_ms - role.last_fetch_success_ms < self.config.fetch_timeout_ms

    def _become_unattached(self, epoch: int, now_ms: int) -> None:
        self.quorum.to_unattached(epoch, now_ms + self._election_timeout_ms())

    def _error_for_epoch(self, request_epoch: int) -> ErrorCode:
        if request_epoch < self.epoch:
            return ErrorCode.fenced_leader_epoch
        if request_epoch > self.epoch:
            return ErrorCode.unknown_leader_epoch
        return ErrorCode.none
