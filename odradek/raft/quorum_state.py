"""QuorumState: the only place where a node changes roles.

How this works and why: every role change goes through ``_switch``, which (1) asserts
that the change is in ``LEGAL_TRANSITIONS``, (2) asserts the election-state rules that
make elections safe — the epoch never decreases, and within one epoch a vote once cast
and a leader once known are never forgotten or changed — (3) writes the new election
state to the ``ElectionStore`` *before* (4) switching in memory, and (5) logs from → to.
Writing first means a crash can never leave a node acting on a vote or epoch that it
would not remember after restarting. An illegal transition is a bug in the node, so it
is an ``AssertionError``, never a handled case.

Epoch-changing transitions (to a higher epoch) always land in Unattached, Follower or
Candidate; Voted, Prospective, Leader and Resigned keep the epoch they start from.
"""

from __future__ import annotations

import logging

from odradek.raft.election_store import ElectionState, ElectionStore
from odradek.raft.leader_state import LeaderState
from odradek.raft.roles import (
    Ballot,
    CandidateState,
    FollowerState,
    ProspectiveState,
    ResignedState,
    UnattachedState,
    VotedState,
)

logger = logging.getLogger("odradek.raft")

Role = (
    UnattachedState
    | VotedState
    | ProspectiveState
    | CandidateState
    | LeaderState
    | FollowerState
    | ResignedState
)

_U, _V, _P, _C, _L, _F, _R = (
    UnattachedState,
    VotedState,
    ProspectiveState,
    CandidateState,
    LeaderState,
    FollowerState,
    ResignedState,
)
# from-role → roles it may become. Same-role transitions only go to a higher epoch.
LEGAL_TRANSITIONS: dict[type, frozenset[type]] = {
    _U: frozenset({_U, _V, _P, _F}),
    _V: frozenset({_U, _P, _F}),
    _P: frozenset({_U, _V, _C, _F}),
    _C: frozenset({_U, _P, _L, _F}),
    _L: frozenset({_U, _F, _R}),
    _F: frozenset({_U, _P, _F}),
    _R: frozenset({_U, _P, _F}),
}
# Transitions that must go to a strictly higher epoch.
_EPOCH_BUMPING = frozenset({(_U, _U), (_F, _F), (_P, _C)})


class QuorumState:
    def __init__(self, local_id: int, voters: frozenset[int], store: ElectionStore) -> None:
        self.local_id = local_id
        self.voters = voters
        self._store = store
        self._persisted = store.read()
        self._role: Role | None = None
        self.transitions = 0

    @property
    def persisted(self) -> ElectionState:
        return self._persisted

    @property
    def role(self) -> Role:
        assert self._role is not None, "QuorumState.initialize was not called"
        return self._role

    @property
    def epoch(self) -> int:
        return self.role.election.epoch

    @property
    def leader_id(self) -> int | None:
        return self.role.election.leader_id

    @property
    def is_voter(self) -> bool:
        return self.local_id in self.voters

    def initialize(self, role: Role) -> None:
        """The role a (re)started node begins in, built from the persisted state."""
        assert self._role is None
        assert role.election == self._persisted or role.election.epoch >= self._persisted.epoch
        if role.election != self._persisted:
            self._store.write(role.election)
            self._persisted = role.election
        self._role = role
        logger.info("node %d starts as %s %s", self.local_id, role.name, role.election)

    def _switch(self, new: Role) -> None:
        old = self.role
        legal = LEGAL_TRANSITIONS[type(old)]
        assert type(new) in legal, f"illegal transition {old.name} -> {new.name}"
        old_state, new_state = old.election, new.election
        assert new_state.epoch >= old_state.epoch, f"epoch went back: {old_state} -> {new_state}"
        if (type(old), type(new)) in _EPOCH_BUMPING:
            assert new_state.epoch > old_state.epoch, f"{old.name} -> {new.name} same epoch"
        if new_state.epoch == old_state.epoch:
            if old_state.voted_id is not None:
                assert new_state.voted_id == old_state.voted_id, f"{old_state} -> {new_state}"
            if old_state.leader_id is not None:
                assert new_state.leader_id == old_state.leader_id, f"{old_state} -> {new_state}"
        if new_state != self._persisted:
            self._store.write(new_state)  # durable before we act on it
            self._persisted = new_state
        self._role = new
        self.transitions += 1
        logger.info(
            "node %d: %s %s -> %s %s",
            self.local_id,
            old.name,
            old_state,
            new.name,
            new_state,
        )

    # The transitions, one per target role. The node decides *when*; these decide *what*
    # the new election state is.

    def to_unattached(self, epoch: int, election_deadline_ms: int) -> UnattachedState:
        assert epoch > self.epoch, (epoch, self.epoch)
        new = UnattachedState(ElectionState(epoch), election_deadline_ms)
        self._switch(new)
        return new

    def to_voted(self, candidate_id: int, election_deadline_ms: int) -> VotedState:
        current = self.role.election
        assert candidate_id in self.voters and candidate_id != self.local_id
        assert current.voted_id is None and current.leader_id is None, current
        election = ElectionState(current.epoch, voted_id=candidate_id)
        new = VotedState(election, election_deadline_ms)
        self._switch(new)
        return new

    def to_prospective(self, election_deadline_ms: int) -> ProspectiveState:
        assert self.is_voter
        new = ProspectiveState(self.role.election, election_deadline_ms, Ballot())
        new.ballot.granted.add(self.local_id)
        self._switch(new)
        return new

    def to_unattached_same_epoch(self, election_deadline_ms: int) -> UnattachedState | VotedState:
        """Back from a failed pre-vote (or a resignation) without a known live leader."""
        election = self.role.election
        new: UnattachedState | VotedState
        if election.voted_id is not None:
            new = VotedState(election, election_deadline_ms)
        else:
            new = UnattachedState(election, election_deadline_ms)
        self._switch(new)
        return new

    def to_candidate(self, election_deadline_ms: int) -> CandidateState:
        assert self.is_voter
        election = ElectionState(self.epoch + 1, voted_id=self.local_id)
        new = CandidateState(election, election_deadline_ms, Ballot())
        new.ballot.granted.add(self.local_id)
        self._switch(new)
        return new

    def to_leader(self, epoch_start_offset: int, now_ms: int, high_watermark: int) -> LeaderState:
        role = self.role
        assert isinstance(role, CandidateState)
        assert len(role.ballot.granted) > len(self.voters) // 2, role.ballot
        election = ElectionState(role.election.epoch, self.local_id, self.local_id)
        new = LeaderState(
            election=election,
            local_id=self.local_id,
            voters=self.voters,
            epoch_start_offset=epoch_start_offset,
            elected_ms=now_ms,
            high_watermark=high_watermark,
        )
        self._switch(new)
        return new

    def to_follower(self, epoch: int, leader_id: int, fetch_deadline_ms: int) -> FollowerState:
        assert leader_id != self.local_id and leader_id in self.voters, leader_id
        current = self.role.election
        assert epoch >= current.epoch
        voted_id = current.voted_id if epoch == current.epoch else None
        new = FollowerState(ElectionState(epoch, voted_id, leader_id), fetch_deadline_ms)
        self._switch(new)
        return new

    def to_resigned(
        self, election_deadline_ms: int, successors: tuple[int, ...], now_ms: int
    ) -> ResignedState:
        assert isinstance(self.role, LeaderState)
        new = ResignedState(
            election=self.role.election,
            election_deadline_ms=election_deadline_ms,
            preferred_successors=successors,
            unacknowledged=set(successors),
            next_resend_ms=now_ms,
        )
        self._switch(new)
        return new
