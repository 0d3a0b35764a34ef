"""RaftNode: the sans-IO KRaft replica that an asyncio adapter (or the simulation) drives.

How this works and why: the node never reads a clock, a socket or a global random
source. The driver feeds it:

* ``handle(inbound, now_ms)`` for every request or response that arrives;
* ``tick(now_ms)`` whenever ``next_deadline_ms()`` has passed (calling it early is
  harmless);

and both return the ``Outbound`` messages to send. Requests carry a fresh correlation
id; responses carry the request's, so the driver can route them back (a response to a
request from an old connection or an old incarnation must be dropped by the driver, as
TCP would). ``append`` (leader only) adds an entry of ``count`` offsets and returns
its last offset;
``poll_committed`` hands committed entries and snapshot loads to the state machine in
order; ``create_snapshot`` stores the state machine's snapshot and trims the log;
``resign`` hands leadership over before a shutdown; ``describe_quorum`` answers
DescribeQuorum.

A restarted node reads its election state (a node that was leader restarts Resigned in
that epoch: it may not lead the same epoch twice), its latest snapshot and the log after
it; the high watermark is relearned from the leader.

Durability: the leader flushes its appends ``controller.quorum.append.linger.ms`` after
the first unflushed one and counts only its flushed end towards the high watermark; a
follower flushes what it appended before it fetches again. By default the node calls
``log.flush()`` itself inside the step (the simulation's in-memory logs). With
``defer_flush`` it never does I/O: it raises a flush request that the driver takes with
``take_flush_request`` and carries out off the event loop (``prepare_flush`` on the
loop, the fsync on a worker thread, ``mark_flushed`` and ``tick`` back on the loop);
until then the high watermark and the follower's next fetch wait, and a truncation in
between voids the flush (the node asks again).

Long poll: a leader parks a valid fetch at its log end that carries a max wait, instead
of answering it empty, and answers it from a later step — new entries, a new high
watermark, a lost leadership, or the max wait (its deadline is part of
``next_deadline_ms``). A response may therefore leave the node in a step other than
the one that handled its request; it still carries the request's correlation id.
"""

from __future__ import annotations

import random as random_module
from collections.abc import Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from odradek.raft.config import RaftConfig
from odradek.raft.election import ControlEntryBuilder, ElectionHandlers, plain_control_entry
from odradek.raft.election_store import ElectionStore
from odradek.raft.leader_state import LeaderState, ReplicaProgress
from odradek.raft.log import LogEntry, RaftLog, SnapshotId
from odradek.raft.messages import (
    REQUEST_TYPES,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    EpochEndOffset,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Inbound,
    LeaderIdAndEpoch,
    Outbound,
    Request,
    Response,
    VoteRequest,
    VoteResponse,
)
from odradek.raft.replication import ReplicationHandlers
from odradek.raft.roles import (
    CandidateState,
    FollowerState,
    ProspectiveState,
    ResignedState,
    SilentLeader,
    UnattachedState,
    VotedState,
)
from odradek.raft.snapshots import SnapshotStore

# Offsets the leader accepts beyond its high watermark; past this the quorum is not
# keeping up and the caller must wait (Kafka bounds its append queue the same way).
MAX_UNCOMMITTED_ENTRIES = 10_000
# Bytes of committed entries one poll_committed() returns, so a long catch-up is handed
# to the state machine in bounded pieces.
POLL_MAX_BYTES = 1024 * 1024
# Role changes one step may chain (e.g. single voter: Unattached → Prospective →
# Candidate → Leader); more means two roles bounce between each other, a bug.
MAX_TRANSITIONS_PER_STEP = 8
# ``next_deadline_ms`` when no timer runs: later than any clock reading (the driver
# caps each sleep anyway, and messages and appends wake it).
NO_DEADLINE_MS = 2**62


class NotLeaderError(Exception):
    """append() on a node that is not the leader (the caller should find the leader)."""


class BackPressureError(Exception):
    """Too much uncommitted log: the quorum is not keeping up with appends."""


@dataclass(frozen=True, slots=True)
class CommittedEntries:
    entries: tuple[LogEntry, ...]


@dataclass(frozen=True, slots=True)
class SnapshotLoaded:
    snapshot_id: SnapshotId
    payload: bytes


CommitEvent = CommittedEntries | SnapshotLoaded


@dataclass(frozen=True, slots=True)
class ReplicaDescription:
    """DescribeQuorum's ReplicaState."""

    replica_id: int
    log_end_offset: int
    last_fetch_timestamp: int
    last_caught_up_timestamp: int


@dataclass(frozen=True, slots=True)
class QuorumDescription:
    """DescribeQuorum's PartitionData."""

    error_code: ErrorCode
    leader_id: int
    leader_epoch: int
    high_watermark: int
    current_voters: tuple[ReplicaDescription, ...]
    observers: tuple[ReplicaDescription, ...]


class RaftNode(ElectionHandlers, ReplicationHandlers):
    def __init__(
        self,
        node_id: int,
        voters: Sequence[int] | frozenset[int],
        log: RaftLog,
        store: ElectionStore,
        snapshots: SnapshotStore,
        config: RaftConfig,
        random: random_module.Random,
        now_ms: int,
        cluster_id: str | None = None,
        control_entry: ControlEntryBuilder = plain_control_entry,
        defer_flush: bool = False,
    ) -> None:
        """``control_entry`` builds the payload (and offset count) of the LeaderChange
        entry a new leader appends: ``control_records.leader_change_entry`` for a disk
        log (a real control batch), the plain-text default for opaque payloads.
        ``defer_flush``: the node does not fsync; see ``take_flush_request``."""
        super().__init__(
            node_id,
            frozenset(voters),
            log,
            store,
            snapshots,
            config,
            random,
            cluster_id,
            defer_flush,
        )
        self._control_entry = control_entry
        self._load_snapshot_and_log()
        persisted = self.quorum.persisted
        deadline_ms = now_ms + self._election_timeout_ms()
        if len(self.voters) == 1 and self.is_voter:
            deadline_ms = now_ms  # alone: no one to wait for
        role: UnattachedState | VotedState | FollowerState | ResignedState
        if persisted.leader_id == node_id:
            role = ResignedState(persisted, deadline_ms, (), set(), now_ms)
        elif persisted.leader_id is not None and persisted.leader_id in self.voters:
            role = FollowerState(persisted, now_ms + config.fetch_timeout_ms)
        elif persisted.voted_id is not None:
            role = VotedState(persisted, deadline_ms)
        else:
            role = UnattachedState(persisted, deadline_ms)
        self.quorum.initialize(role)

    def _load_snapshot_and_log(self) -> None:
        latest = self.snapshots.latest()
        if latest is None:
            assert self.log.start_offset == 0, "log start moved without a snapshot"
            return
        log = self.log
        assert log.start_offset <= latest.end_offset, (log.start_offset, latest)
        consistent = log.end_offset >= latest.end_offset and (
            log.epoch_at(latest.end_offset - 1) == latest.epoch
        )
        if not consistent:
            # A fetched snapshot was completed but the crash came before the log reset.
            log.reset_to(latest)
        self.high_watermark = latest.end_offset
        self._applied_offset = latest.end_offset
        self._pending_snapshot = latest

    # --- observable state ---------------------------------------------------------------

    @property
    def role_name(self) -> str:
        return self.quorum.role.name

    @property
    def leader_id(self) -> int | None:
        return self.quorum.leader_id

    @property
    def is_leader(self) -> bool:
        return isinstance(self.quorum.role, LeaderState)

    @property
    def log_end_offset(self) -> int:
        return self.log.end_offset

    @property
    def high_watermark_current(self) -> bool:
        """Is ``high_watermark`` the quorum's, as of this epoch? A leader's once an entry
        of its own epoch committed; a follower's once a fetch response from its leader
        carried that established high watermark (a new leader answers -1 before). Before
        that it is only what this node knew last, e.g. its snapshot's end, and may lag
        what an earlier leader committed."""
        role = self.quorum.role
        if isinstance(role, LeaderState):
            return self.high_watermark > role.epoch_start_offset
        if isinstance(role, FollowerState):
            return role.high_watermark_known
        return False

    # --- the driver's interface -----------------------------------------------------------

    def handle(self, inbound: Inbound, now_ms: int) -> list[Outbound]:
        message = inbound.message
        if isinstance(message, REQUEST_TYPES) and not self._same_cluster(message.cluster_id):
            self._respond(inbound, _foreign_cluster_response(message))
        elif isinstance(message, VoteRequest):
            self._on_vote_request(inbound, message, now_ms)
        elif isinstance(message, VoteResponse):
            self._on_vote_response(inbound, message, now_ms)
        elif isinstance(message, FetchRequest):
            self._on_fetch_request(inbound, message, now_ms)
        elif isinstance(message, FetchResponse):
            self._on_fetch_response(inbound, message, now_ms)
        elif isinstance(message, FetchSnapshotRequest):
            self._on_fetch_snapshot_request(inbound, message, now_ms)
        elif isinstance(message, FetchSnapshotResponse):
            self._on_fetch_snapshot_response(inbound, message, now_ms)
        elif isinstance(message, BeginQuorumEpochRequest):
            self._on_begin_quorum_epoch_request(inbound, message, now_ms)
        elif isinstance(message, BeginQuorumEpochResponse):
            self._on_begin_quorum_epoch_response(inbound, message, now_ms)
        elif isinstance(message, EndQuorumEpochRequest):
            self._on_end_quorum_epoch_request(inbound, message, now_ms)
        elif isinstance(message, EndQuorumEpochResponse):
            self._on_end_quorum_epoch_response(inbound, message, now_ms)
        else:
            raise TypeError(f"not a quorum message: {type(message).__name__}")
        return self.tick(now_ms)

    def tick(self, now_ms: int) -> list[Outbound]:
        for _ in range(MAX_TRANSITIONS_PER_STEP):
            if not self._drive(now_ms):
                break
        else:
            raise AssertionError(f"node {self.node_id}: roles keep changing in one step")
        self._release_parked_fetches(now_ms)
        outbox, self._outbox = self._outbox, []
        return outbox

    def next_deadline_ms(self) -> int:
        """When ``tick`` next has something to do (node clock, ms)."""
        deadline = self._role_deadline_ms()
        parked = self._parked_deadline_ms()
        return deadline if parked is None else min(deadline, parked)

    def _role_deadline_ms(self) -> int:
        role = self.quorum.role
        if isinstance(role, UnattachedState):
            if self.is_voter:
                return role.election_deadline_ms
            return role.next_discovery_ms
        if isinstance(role, VotedState | ProspectiveState):
            return role.election_deadline_ms
        if isinstance(role, CandidateState):
            if role.backoff_until_ms is not None:
                return role.backoff_until_ms
            return role.election_deadline_ms
        if isinstance(role, ResignedState):
            deadlines = [role.election_deadline_ms]
            if role.unacknowledged:
                deadlines.append(role.next_resend_ms)
            return min(deadlines)
        if isinstance(role, FollowerState):
            return self._follower_deadline_ms(role)
        return self._leader_deadline_ms(role)

    def take_flush_request(self) -> bool:
        """(``defer_flush`` only.) True once when the log should be flushed: the
        driver then calls ``log.prepare_flush()``, runs the fsync off the event loop,
        calls ``log.mark_flushed`` and ``tick``. Until then a follower sends no fetch
        (fetch offsets name flushed entries) and the leader's high watermark counts only
        its flushed end; a truncation in between voids the flush, and the node asks
        again."""
        requested, self._flush_requested = self._flush_requested, False
        return requested

    def append(self, payload: bytes, now_ms: int, count: int = 1) -> int:
        """Append one entry (a record batch of ``count`` records, taking ``count``
        offsets) as leader; returns its **last** offset. The entry is committed once
        the high watermark is past that offset (``high_watermark > last offset``)."""
        assert count >= 1, count
        leader = self.quorum.role
        if not isinstance(leader, LeaderState):
            raise NotLeaderError(f"node {self.node_id} is {leader.name}, leader {self.leader_id}")
        if self.log.end_offset - self.high_watermark >= MAX_UNCOMMITTED_ENTRIES:
            raise BackPressureError(f"{MAX_UNCOMMITTED_ENTRIES} offsets await commit")
        entry = LogEntry(self.log.end_offset, self.epoch, payload, count=count)
        self.log.append([entry], leader=True)
        if leader.first_unflushed_append_ms is None:
            leader.first_unflushed_append_ms = now_ms
        return entry.last_offset

    def resign(self, now_ms: int) -> list[Outbound]:
        """Step down before a shutdown so the voters elect a successor at once."""
        if isinstance(self.quorum.role, LeaderState):
            self._resign(now_ms)
        return self.tick(now_ms)

    def poll_committed(self) -> list[CommitEvent]:
        """Committed entries (and snapshot loads) not yet handed over, in log order."""
        events: list[CommitEvent] = []
        if self._pending_snapshot is not None:
            snapshot_id = self._pending_snapshot
            events.append(SnapshotLoaded(snapshot_id, self.snapshots.read(snapshot_id)))
            self._pending_snapshot = None
            self._applied_offset = snapshot_id.end_offset
        assert self._applied_offset >= self.log.start_offset, "unapplied entries were deleted"
        if self._applied_offset < self.high_watermark:
            # Only what is committed is read: an entry above the high watermark may yet
            # be truncated, and a long uncommitted tail is not read to be thrown away.
            entries = self.log.read(
                self._applied_offset, POLL_MAX_BYTES, max_offset=self.high_watermark
            )
            assert entries and entries[0].offset == self._applied_offset
            # The high watermark is an entry boundary: no entry straddles it.
            assert entries[-1].next_offset <= self.high_watermark, (
                entries[-1],
                self.high_watermark,
            )
            self._applied_offset = entries[-1].next_offset
            events.append(CommittedEntries(tuple(entries)))
        return events

    def create_snapshot(
        self, end_offset: int, payload: bytes, delete_log: bool = True
    ) -> SnapshotId:
        """Store the state machine's snapshot of every entry below ``end_offset`` (which it
        has applied; an entry boundary) and, by default, delete the log below it."""
        assert end_offset <= self._applied_offset <= self.high_watermark, (
            end_offset,
            self._applied_offset,
            self.high_watermark,
        )
        assert end_offset > 0
        latest = self.snapshots.latest()
        if latest is not None and latest.end_offset >= end_offset:
            return latest
        assert self.log.is_boundary(end_offset), f"snapshot end {end_offset} is inside an entry"
        snapshot_id = SnapshotId(end_offset=end_offset, epoch=self.log.epoch_at(end_offset - 1))
        self.snapshots.create(snapshot_id, payload)
        if delete_log:
            self.log.delete_before(snapshot_id)
        self.snapshots.delete_before(snapshot_id)
        return snapshot_id

    def describe_quorum(self, now_ms: int) -> QuorumDescription:
        leader = self.quorum.role
        if not isinstance(leader, LeaderState):
            return QuorumDescription(ErrorCode.not_leader_or_follower, -1, self.epoch, -1, (), ())
        local = ReplicaDescription(self.node_id, self.log.end_offset, now_ms, now_ms)
        voters = [local, *(_describe(p) for p in leader.replicas.values())]
        return QuorumDescription(
            error_code=ErrorCode.none,
            leader_id=self.node_id,
            leader_epoch=self.epoch,
            high_watermark=self.high_watermark,
            current_voters=tuple(sorted(voters, key=lambda r: r.replica_id)),
            observers=tuple(_describe(p) for p in leader.observers.values()),
        )

    def _same_cluster(self, cluster_id: str | None) -> bool:
        """Kafka answers INCONSISTENT_CLUSTER_ID to a request naming another cluster (a
        request without one, from an older client, is accepted)."""
        return cluster_id is None or self.cluster_id is None or cluster_id == self.cluster_id

    # --- timers -----------------------------------------------------------------------

    def _drive(self, now_ms: int) -> bool:
        """Act on the current role's timers; True when the role changed (drive again)."""
        role = self.quorum.role
        if isinstance(role, UnattachedState | VotedState):
            if self.is_voter and now_ms >= role.election_deadline_ms:
                self._start_prospective(now_ms)
                return True
            if isinstance(role, UnattachedState) and not self.is_voter:
                self._drive_discovery(role, now_ms)
            return False
        if isinstance(role, ProspectiveState):
            return self._drive_prospective(role, now_ms)
        if isinstance(role, CandidateState):
            return self._drive_candidate(role, now_ms)
        if isinstance(role, ResignedState):
            if self.is_voter and now_ms >= role.election_deadline_ms:
                self._start_prospective(now_ms)
                return True
            if role.unacknowledged and now_ms >= role.next_resend_ms:
                self._send_end_quorum_epoch(role, now_ms)
            return False
        if isinstance(role, FollowerState):
            return self._drive_follower(role, now_ms)
        return self._drive_leader(role, now_ms)

    def _drive_discovery(self, role: UnattachedState, now_ms: int) -> None:
        if role.discovery_correlation_id is not None and now_ms < role.next_discovery_ms:
            return
        if now_ms >= role.next_discovery_ms:
            self._send_discovery_fetch(role, now_ms)

    def _drive_follower(self, role: FollowerState, now_ms: int) -> bool:
        resigned_at = role.leader_resigned_election_ms
        if self.is_voter:
            if resigned_at is not None and now_ms >= resigned_at:
                self._silent_leader = None  # it said it goes: nothing to infer
                self._start_prospective(now_ms)
                return True
            if now_ms >= role.fetch_deadline_ms:
                heard = role.last_fetch_success_ms
                if resigned_at is None and heard is not None:
                    self._silent_leader = SilentLeader(role.leader_id, self.epoch, heard)
                self._start_prospective(now_ms)
                return True
        if self.log.flushed_offset < self.log.end_offset:
            # Fetch offsets must name flushed entries (e.g. an old leader's lingering tail).
            self._flush_log()
            if self._awaiting_flush():
                return False
        in_flight = role.in_flight_correlation_id
        if (
            in_flight is not None
            and now_ms >= role.in_flight_sent_ms + self.config.request_timeout_ms
        ):
            role.in_flight_correlation_id = None  # given up; its late answer is ignored
            in_flight = None
        if in_flight is None and now_ms >= role.next_fetch_ms:
            destination = role.leader_id
            if not self.is_voter and now_ms >= role.fetch_deadline_ms:
                # An observer whose leader went quiet asks around for the new one.
                others = self._other_voters()
                destination = others[self._random.randrange(len(others))]
            self._send_fetch(role, destination, now_ms)
        return False

    def _follower_deadline_ms(self, role: FollowerState) -> int:
        deadlines = []
        if self.is_voter:
            deadlines.append(role.fetch_deadline_ms)
            if role.leader_resigned_election_ms is not None:
                deadlines.append(role.leader_resigned_election_ms)
        if role.in_flight_correlation_id is None:
            if not self._awaiting_flush():  # else the driver ticks once it flushed
                deadlines.append(role.next_fetch_ms)
        else:
            deadlines.append(role.in_flight_sent_ms + self.config.request_timeout_ms)
        # Nothing left (an observer waiting for its flush): the flush's tick wakes it.
        return min(deadlines) if deadlines else NO_DEADLINE_MS

    def _awaiting_flush(self) -> bool:
        return self._defer_flush and self.log.flushed_offset < self.log.end_offset

    def _check_quorum_window_ms(self) -> int:
        # Kafka gives the leader 1.5 fetch timeouts before it resigns for lack of quorum.
        return self.config.fetch_timeout_ms * 3 // 2

    def _drive_leader(self, leader: LeaderState, now_ms: int) -> bool:
        first_unflushed = leader.first_unflushed_append_ms
        if first_unflushed is not None and now_ms >= first_unflushed + self.config.append_linger_ms:
            self._flush_log()
            leader.first_unflushed_append_ms = None
        self._update_leader_high_watermark(leader)
        window_ms = self._check_quorum_window_ms()
        if (
            len(self.voters) > 1
            and now_ms >= leader.elected_ms + window_ms
            and not leader.quorum_reached_since(now_ms - window_ms)
        ):
            self._resign(now_ms)
            return True
        if now_ms >= leader.next_begin_resend_ms and leader.voters_not_fetched():
            self._send_begin_quorum_epoch(leader, now_ms)
        return False

    def _leader_deadline_ms(self, leader: LeaderState) -> int:
        deadlines = []
        if leader.first_unflushed_append_ms is not None:
            deadlines.append(leader.first_unflushed_append_ms + self.config.append_linger_ms)
        if leader.voters_not_fetched():
            deadlines.append(leader.next_begin_resend_ms)
        if len(self.voters) > 1:
            window_ms = self._check_quorum_window_ms()
            # The quorum is lost when the majority-th most recent fetch gets too old; the
            # leader itself is always recent.
            fetches = sorted((p.last_fetch_ms for p in leader.replicas.values()), reverse=True)
            oldest_needed = fetches[self.majority - 2] if self.majority >= 2 else 0
            deadlines.append(max(leader.elected_ms, oldest_needed) + window_ms + 1)
        # Nothing timed (a lone voter, all flushed): appends and requests wake the
        # driver. (A fixed 'elected + 1 h' here fell into the past after an hour of
        # leadership and the driver spun on it, starving the event loop.)
        return min(deadlines) if deadlines else NO_DEADLINE_MS


def _foreign_cluster_response(request: Request) -> Response:
    error = ErrorCode.inconsistent_cluster_id
    if isinstance(request, VoteRequest):
        return VoteResponse(error_code=error, leader_id=-1, leader_epoch=-1, vote_granted=False)
    if isinstance(request, BeginQuorumEpochRequest):
        return BeginQuorumEpochResponse(error_code=error, leader_id=-1, leader_epoch=-1)
    if isinstance(request, EndQuorumEpochRequest):
        return EndQuorumEpochResponse(error_code=error, leader_id=-1, leader_epoch=-1)
    if isinstance(request, FetchRequest):
        return FetchResponse(
            error_code=error,
            high_watermark=-1,
            log_start_offset=-1,
            diverging_epoch=EpochEndOffset(),
            current_leader=LeaderIdAndEpoch(),
            snapshot_id=SnapshotId(),
            records=(),
        )
    return FetchSnapshotResponse(
        error_code=error,
        snapshot_id=request.snapshot_id,
        current_leader=LeaderIdAndEpoch(),
        size=-1,
        position=-1,
        unaligned_records=b"",
    )


def _describe(progress: ReplicaProgress) -> ReplicaDescription:
    return ReplicaDescription(
        replica_id=progress.replica_id,
        log_end_offset=progress.log_end_offset,
        last_fetch_timestamp=progress.last_fetch_ms,
        last_caught_up_timestamp=progress.last_caught_up_ms,
    )
