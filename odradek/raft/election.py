"""Elections: pre-vote, vote, BeginQuorumEpoch, EndQuorumEpoch and resignation.

How this works and why (KIP-595 with KIP-996 pre-vote):

* A voter whose election timer fires becomes **Prospective** and asks the other voters
  "would you vote for me in epoch + 1?" (``pre_vote=True``). Nobody changes epoch or
  vote for a pre-vote, so a node cut off from the quorum cannot push epochs up and
  disturb a healthy leader when it comes back. A voter grants a pre-vote when it has no
  live leader (a follower that still hears from its leader refuses) and the prospective's
  log is at least as up to date as its own.
  The pre-vote's epoch is hypothetical, but the prospective's own (one less) is real: a
  node behind that epoch (a leader whose voter moved on in a failed election) adopts it,
  as Raft requires of any newer epoch; otherwise that voter could never rejoin.
* With a majority of pre-votes it becomes **Candidate**: bumps the epoch, votes for
  itself (persisted first) and asks for real votes. A voter grants at most one vote per
  epoch (persisted before answering), and only to a log at least as up to date as its
  own, compared by (last epoch, end offset). A request from a newer epoch moves the
  voter to that epoch first. A lost or timed-out election backs off exponentially
  (randomised, capped by ``controller.quorum.election.backoff.max.ms``).
* With a majority of votes it becomes **Leader**, appends a LeaderChange control entry
  in its epoch and tells the voters with BeginQuorumEpoch (resent to voters that have
  not fetched yet).
* A leader that shuts down (``resign``) or fails check-quorum becomes **Resigned** and
  sends EndQuorumEpoch with its preferred successors (most log first); the first of them
  starts an election at once, the others after a backoff by position, so the quorum does
  not wait for a fetch timeout.

Responses are matched to the ballot's requests by correlation id, so late or duplicated
responses from an earlier round are not counted twice or in the wrong round.
"""

from __future__ import annotations

from typing import Protocol

from kio.schema.errors import ErrorCode

from odradek.raft.core import NodeCore
from odradek.raft.leader_state import LeaderState
from odradek.raft.log import LogEntry
from odradek.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    Inbound,
    VoteRequest,
    VoteResponse,
)
from odradek.raft.roles import (
    CandidateState,
    FollowerState,
    ProspectiveState,
    ResignedState,
)


class ControlEntryBuilder(Protocol):
    def __call__(
        self,
        epoch: int,
        leader_id: int,
        voters: frozenset[int],
        granting_voters: frozenset[int],
    ) -> tuple[bytes, int]:
        """The LeaderChange control entry's payload and how many offsets it takes."""
        ...


def leader_change_payload(leader_id: int, voters: frozenset[int]) -> bytes:
    """The LeaderChange control entry's payload (Kafka's LeaderChangeMessage fields)."""
    voter_list = ",".join(str(voter) for voter in sorted(voters))
    return f"LeaderChange leaderId={leader_id} voters={voter_list}".encode()


def plain_control_entry(
    epoch: int, leader_id: int, voters: frozenset[int], granting_voters: frozenset[int]
) -> tuple[bytes, int]:
    """A plain-text LeaderChange of one offset: for logs whose payloads are opaque (the
    simulation, unit tests). A disk log needs ``control_records.leader_change_entry``."""
    return leader_change_payload(leader_id, voters), 1


class ElectionHandlers(NodeCore):
    _control_entry: ControlEntryBuilder

    # --- starting elections -----------------------------------------------------

    def _start_prospective(self, now_ms: int) -> None:
        role = self.quorum.to_prospective(now_ms + self._election_timeout_ms())
        for voter in self._other_voters():
            request = VoteRequest(
                cluster_id=self.cluster_id,
                voter_id=voter,
                replica_epoch=self.epoch + 1,
                replica_id=self.node_id,
                last_offset_epoch=self.log.last_fetched_epoch,
                last_offset=self.log.end_offset,
                pre_vote=True,
            )
            role.ballot.pending[self._send(voter, request)] = voter

    def _start_candidate(self, now_ms: int) -> None:
        role = self.quorum.to_candidate(now_ms + self._election_timeout_ms())
        for voter in self._other_voters():
            request = VoteRequest(
                cluster_id=self.cluster_id,
                voter_id=voter,
                replica_epoch=self.epoch,
                replica_id=self.node_id,
                last_offset_epoch=self.log.last_fetched_epoch,
                last_offset=self.log.end_offset,
                pre_vote=False,
            )
            role.ballot.pending[self._send(voter, request)] = voter

    def _become_leader(self, now_ms: int) -> None:
        candidate = self.quorum.role
        assert isinstance(candidate, CandidateState)
        granting = frozenset({self.node_id, *candidate.ballot.granted})
        epoch_start_offset = self.log.end_offset
        leader = self.quorum.to_leader(epoch_start_offset, now_ms, self.high_watermark)
        self._failed_elections = 0
        self.predecessor, self._silent_leader = self._silent_leader, None
        payload, count = self._control_entry(self.epoch, self.node_id, self.voters, granting)
        entry = LogEntry(epoch_start_offset, self.epoch, payload, control=True, count=count)
        self.log.append([entry], leader=True)
        leader.first_unflushed_append_ms = now_ms
        self._send_begin_quorum_epoch(leader, now_ms)

    def _send_begin_quorum_epoch(self, leader: LeaderState, now_ms: int) -> None:
        for voter in leader.voters_not_fetched():
            request = BeginQuorumEpochRequest(
                cluster_id=self.cluster_id,
                voter_id=voter,
                leader_id=self.node_id,
                leader_epoch=self.epoch,
            )
            self._send(voter, request)
        leader.next_begin_resend_ms = now_ms + self.config.request_timeout_ms

    def _resign(self, now_ms: int) -> None:
        leader = self.quorum.role
        assert isinstance(leader, LeaderState)
        successors = leader.preferred_successors()
        self.quorum.to_resigned(now_ms + self._election_timeout_ms(), successors, now_ms)

    def _send_end_quorum_epoch(self, resigned: ResignedState, now_ms: int) -> None:
        for voter in sorted(resigned.unacknowledged):
            request = EndQuorumEpochRequest(
                cluster_id=self.cluster_id,
                leader_id=self.node_id,
                leader_epoch=self.epoch,
                preferred_candidates=resigned.preferred_successors,
            )
            self._send(voter, request)
        resigned.next_resend_ms = now_ms + self.config.request_timeout_ms

    # --- timers of the electing roles ---------------------------------------------

    def _drive_prospective(self, role: ProspectiveState, now_ms: int) -> bool:
        ballot = role.ballot
        if len(ballot.granted) >= self.majority:
            self._start_candidate(now_ms)
            return True
        lost = len(ballot.rejected) > len(self.voters) - self.majority
        if not lost and now_ms < role.election_deadline_ms:
            return False
        self._failed_elections += 1
        retry_ms = now_ms + self._election_backoff_ms() + self._election_timeout_ms()
        leader_id = role.election.leader_id
        if leader_id is not None and leader_id != self.node_id:
            # Pre-vote failed while we still know a leader: go back to fetching from it.
            self.quorum.to_follower(self.epoch, leader_id, retry_ms)
        else:
            self.quorum.to_unattached_same_epoch(retry_ms)
        return True

    def _drive_candidate(self, role: CandidateState, now_ms: int) -> bool:
        ballot = role.ballot
        if len(ballot.granted) >= self.majority:
            self._become_leader(now_ms)
            return True
        if role.backoff_until_ms is not None:
            if now_ms < role.backoff_until_ms:
                return False
            self._start_prospective(now_ms)
            return True
        lost = len(ballot.rejected) > len(self.voters) - self.majority
        if lost or now_ms >= role.election_deadline_ms:
            self._failed_elections += 1
            role.backoff_until_ms = now_ms + self._election_backoff_ms()
            return True
        return False

    # --- Vote -----------------------------------------------------------------------

    def _on_vote_request(self, inbound: Inbound, request: VoteRequest, now_ms: int) -> None:
        granted = False
        if request.voter_id >= 0 and request.voter_id != self.node_id:
            error = ErrorCode.invalid_voter_key  # KIP-853: addressed to another voter
        elif not self.is_voter or request.replica_id not in self.voters:
            error = ErrorCode.inconsistent_voter_set
        elif request.replica_id == self.node_id or request.last_offset < 0:
            error = ErrorCode.invalid_request
        elif request.replica_epoch < self.epoch:
            error = ErrorCode.fenced_leader_epoch
        else:
            error = ErrorCode.none
            if request.pre_vote:
                # A pre-vote names the epoch the prospective *would* use; its own epoch
                # is one less. If even that is newer than ours, we are the stale one
                # (say, a leader whose voter moved on in an election that failed):
                # catch up, or that voter could never find its way back to us.
                if request.replica_epoch - 1 > self.epoch:
                    self._become_unattached(request.replica_epoch - 1, now_ms)
                granted = self._can_grant_pre_vote(request, now_ms)
            else:
                if request.replica_epoch > self.epoch:
                    self._become_unattached(request.replica_epoch, now_ms)
                granted = self._can_grant_vote(request)
                if granted and self.quorum.role.election.voted_id is None:
                    self.quorum.to_voted(request.replica_id, now_ms + self._election_timeout_ms())
        leader = self._current_leader()
        response = VoteResponse(
            error_code=error,
            leader_id=leader.leader_id,
            leader_epoch=leader.leader_epoch,
            vote_granted=granted,
        )
        self._respond(inbound, response)

    def _can_grant_vote(self, request: VoteRequest) -> bool:
        """A real vote in our current epoch (the request's epoch by now)."""
        assert request.replica_epoch == self.epoch
        election = self.quorum.role.election
        if election.leader_id is not None:
            return False
        if election.voted_id is not None:
            return election.voted_id == request.replica_id
        return self._log_is_up_to_date(request.last_offset_epoch, request.last_offset)

    def _can_grant_pre_vote(self, request: VoteRequest, now_ms: int) -> bool:
        role = self.quorum.role
        if isinstance(role, LeaderState):
            return False
        if isinstance(role, FollowerState) and self._leader_is_live(role, now_ms):
            return False  # no election needed while we hear from our leader
        if request.replica_epoch == self.epoch:
            election = role.election
            if election.leader_id is not None:
                return False
            if election.voted_id is not None and election.voted_id != request.replica_id:
                return False
        return self._log_is_up_to_date(request.last_offset_epoch, request.last_offset)

    def _on_vote_response(self, inbound: Inbound, response: VoteResponse, now_ms: int) -> None:
        if response.leader_epoch > self.epoch:
            self._observe_leader(response.leader_epoch, response.leader_id, now_ms)
            return
        role = self.quorum.role
        if not isinstance(role, ProspectiveState | CandidateState):
            return
        voter = role.ballot.pending.pop(inbound.correlation_id, None)
        if voter is None or voter != inbound.source_id:
            return  # late, duplicated, or from an earlier round
        if response.error_code == ErrorCode.none and response.vote_granted:
            role.ballot.granted.add(voter)
        else:
            role.ballot.rejected.add(voter)

    # --- BeginQuorumEpoch -------------------------------------------------------------

    def _on_begin_quorum_epoch_request(
        self, inbound: Inbound, request: BeginQuorumEpochRequest, now_ms: int
    ) -> None:
        error = ErrorCode.none
        if request.voter_id >= 0 and request.voter_id != self.node_id:
            error = ErrorCode.invalid_voter_key  # KIP-853: addressed to another voter
        elif request.leader_epoch < self.epoch:
            error = ErrorCode.fenced_leader_epoch
        elif request.leader_id not in self.voters or request.leader_id == self.node_id:
            error = ErrorCode.inconsistent_voter_set
        elif request.leader_epoch > self.epoch:
            self._become_follower(request.leader_epoch, request.leader_id, now_ms)
        else:
            known = self.quorum.role.election.leader_id
            if known is None:
                self._become_follower(self.epoch, request.leader_id, now_ms)
            elif known != request.leader_id:
                error = ErrorCode.invalid_request  # two leaders claimed for one epoch
        leader = self._current_leader()
        response = BeginQuorumEpochResponse(
            error_code=error, leader_id=leader.leader_id, leader_epoch=leader.leader_epoch
        )
        self._respond(inbound, response)

    def _on_begin_quorum_epoch_response(
        self, inbound: Inbound, response: BeginQuorumEpochResponse, now_ms: int
    ) -> None:
        self._observe_leader(response.leader_epoch, response.leader_id, now_ms)

    # --- EndQuorumEpoch -------------------------------------------------------------

    def _on_end_quorum_epoch_request(
        self, inbound: Inbound, request: EndQuorumEpochRequest, now_ms: int
    ) -> None:
        error = ErrorCode.none
        if request.leader_epoch < self.epoch:
            error = ErrorCode.fenced_leader_epoch
        elif request.leader_id not in self.voters or request.leader_id == self.node_id:
            # Only another voter can have led; anyone else naming a future epoch would
            # move this node (even its leader) to that epoch and out of leadership.
            error = ErrorCode.inconsistent_voter_set
        else:
            if request.leader_epoch > self.epoch:
                self._observe_leader(request.leader_epoch, request.leader_id, now_ms)
            role = self.quorum.role
            if isinstance(role, FollowerState) and role.leader_id == request.leader_id:
                # The leader's order of successors wins over a guess made from its
                # NOT_LEADER_OR_FOLLOWER answers (they go out in the same step).
                at = now_ms + self._successor_delay_ms(request.preferred_candidates)
                known = role.leader_resigned_election_ms
                role.leader_resigned_election_ms = at if known is None else min(known, at)
        leader = self._current_leader()
        response = EndQuorumEpochResponse(
            error_code=error, leader_id=leader.leader_id, leader_epoch=leader.leader_epoch
        )
        self._respond(inbound, response)

    def _successor_delay_ms(self, preferred: tuple[int, ...]) -> int:
        """The best successor starts at once; the n-th waits retry backoff × 2^(n-1)."""
        if self.node_id not in preferred:
            return self._election_timeout_ms()
        position = preferred.index(self.node_id)
        if position == 0:
            return 0
        doublings = min(position - 1, 20)
        return min(self.config.election_backoff_max_ms, self.config.retry_backoff_ms << doublings)

    def _on_end_quorum_epoch_response(
        self, inbound: Inbound, response: EndQuorumEpochResponse, now_ms: int
    ) -> None:
        if self._observe_leader(response.leader_epoch, response.leader_id, now_ms):
            return
        role = self.quorum.role
        if isinstance(role, ResignedState) and response.leader_epoch == self.epoch:
            role.unacknowledged.discard(inbound.source_id)
