"""One class per quorum role; each holds the role's election state and its timers.

How this works and why: a node is always in exactly one role, and everything a role
needs (who it voted for, which votes it has, when its timer fires, which fetch is in
flight) lives in that role's object, so a role change drops the old role's volatile
state wholesale instead of leaving stale fields behind. Roles are created only by
``QuorumState`` (which checks the transition and persists the election state first);
the node reads and updates their timers and counters.

    Unattached   no leader known, no vote cast in this epoch; waits for its election timer
    Voted        unattached, but has voted in this epoch (for someone else)
    Prospective  KIP-996 pre-vote: asks whether a majority *would* vote, epoch unchanged
    Candidate    has bumped the epoch, voted for itself, asks for votes
    Leader       see leader_state.py
    Follower     knows the epoch's leader and fetches from it
    Resigned     was leader of this epoch and stepped down; waits for a successor

All deadlines are in the node's own clock (milliseconds, from ``now_ms``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from odradek.raft.election_store import ElectionState
from odradek.raft.log import SnapshotId


@dataclass(slots=True)
class UnattachedState:
    election: ElectionState
    election_deadline_ms: int
    # An observer, or a voter that has lost track of the leader, probes a voter with a
    # Fetch to learn who leads; at most one such probe is in flight.
    discovery_correlation_id: int | None = None
    next_discovery_ms: int = 0
    name: str = "Unattached"


@dataclass(slots=True)
class VotedState:
    election: ElectionState
    election_deadline_ms: int
    name: str = "Voted"

    def __post_init__(self) -> None:
        assert self.election.voted_id is not None


@dataclass(slots=True)
class Ballot:
    """The votes of one (pre-)election round; requests are matched by correlation id."""

    pending: dict[int, int] = field(default_factory=dict)  # correlation id -> voter
    granted: set[int] = field(default_factory=set)
    rejected: set[int] = field(default_factory=set)


@dataclass(slots=True)
class ProspectiveState:
    election: ElectionState
    election_deadline_ms: int
    ballot: Ballot
    name: str = "Prospective"


@dataclass(slots=True)
class CandidateState:
    election: ElectionState
    election_deadline_ms: int
    ballot: Ballot
    # Set once the election is lost: wait until then, then try again (as Prospective).
    backoff_until_ms: int | None = None
    name: str = "Candidate"


@dataclass(slots=True)
class SnapshotFetch:
    snapshot_id: SnapshotId
    position: int = 0


@dataclass(slots=True)
class FollowerState:
    election: ElectionState
    # No successful fetch by then → the leader is presumed gone (election).
    fetch_deadline_ms: int
    next_fetch_ms: int = 0
    in_flight_correlation_id: int | None = None
    in_flight_sent_ms: int = 0
    last_fetch_success_ms: int | None = None
    # A fetch response of this epoch carried the leader's established high watermark
    # (not -1): only then is this node's high watermark the quorum's.
    high_watermark_known: bool = False
    # Set by EndQuorumEpoch: the leader resigned; elect a successor at this time.
    leader_resigned_election_ms: int | None = None
    snapshot_fetch: SnapshotFetch | None = None
    name: str = "Follower"

    @property
    def leader_id(self) -> int:
        assert self.election.leader_id is not None
        return self.election.leader_id


@dataclass(frozen=True, slots=True)
class SilentLeader:
    """A leader this voter stopped hearing from: its fetches got no answer for
    ``controller.quorum.fetch.timeout.ms`` (not a resignation). ``last_heard_ms`` is
    this node's last successful fetch response from it (node clock). A node that wins
    the next election keeps it as its ``predecessor``: the metadata layer may date the
    silent leader's own broker session from then (broker_heartbeats.py)."""

    node_id: int
    epoch: int
    last_heard_ms: int


@dataclass(slots=True)
class ResignedState:
    election: ElectionState
    election_deadline_ms: int
    preferred_successors: tuple[int, ...]
    # Voters that have not acknowledged EndQuorumEpoch yet; resent every request timeout.
    unacknowledged: set[int]
    next_resend_ms: int
    name: str = "Resigned"
