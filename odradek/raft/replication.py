"""Log replication: Fetch and FetchSnapshot, on both the leader's and the follower's side.

How this works and why (KIP-595 pull replication, KIP-630 snapshots):

* A follower sends Fetch(fetch offset = its log end, last fetched epoch = the epoch of
  its last entry). One fetch is in flight at a time and only the response with its
  correlation id is used: a late response describes a log the follower may no longer
  have, and acting on it could truncate entries it has since acknowledged.
* The leader checks that pair against its own epoch history. If the follower's last
  epoch ends on the leader at or after the fetch offset, the follower's log is a prefix
  of the leader's (log matching): the fetch is valid, proves the follower holds (and has
  flushed) everything below the fetch offset, may raise the high watermark, and is
  answered with the entries from there. Otherwise the leader answers with a **diverging
  epoch**: its largest epoch ≤ the follower's and where that epoch ends. The follower
  truncates to the end of the last epoch both logs share — ``min(leader end, own end)``
  for that epoch, or the end of its own older epoch when it lacks it — and fetches
  again; a few rounds walk back over any uncommitted tail of old epochs. Truncation
  never goes below the follower's high watermark (asserted: committed entries are on the
  leader, so the common prefix always covers them).
* A fetch below the leader's log start (it was folded into a snapshot) is answered with
  the snapshot's id; the follower copies it with FetchSnapshot in chunks, installs it
  (its log restarts at the snapshot's end) and goes on fetching after it.
* Followers append, flush, and only then fetch again, so a fetch offset always names
  flushed entries (with a deferred flush they wait for it). They learn the high
  watermark from responses, never above their end.
* Long poll: a follower's fetch carries a max wait (``controller.quorum`` fetch max wait,
  at most half its fetch and request timeouts) and the high watermark it knows (Fetch
  v18, KIP-1166). The leader parks a valid fetch that would come back empty — at its
  log end, from a replica that knows its high watermark, which this very fetch did not
  move — one per replica, and answers it on the next append, high-watermark change,
  loss of leadership (with the error) or at the max wait. A parked fetch counted as the
  replica's progress when it arrived. A resigned leader's NOT_LEADER_OR_FOLLOWER naming
  itself is no news of a live leader (a prospective does not go back to following it).
* Observers (non-voters) fetch the same way but never count towards the high
  watermark. An observer whose leader stops answering asks a random voter, whose
  NOT_LEADER_OR_FOLLOWER answer names the current leader.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from odradek.raft.core import NodeCore
from odradek.raft.leader_state import MAX_PARKED_FETCHES, LeaderState, ParkedFetch
from odradek.raft.log import LogEntry, SnapshotId
from odradek.raft.messages import (
    EpochEndOffset,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Inbound,
    LeaderIdAndEpoch,
)
from odradek.raft.roles import FollowerState, SnapshotFetch, UnattachedState, VotedState

_NEVER = 2**62


class ReplicationHandlers(NodeCore):
    # --- leader side ------------------------------------------------------------------

    def _fetch_error(self, request_epoch: int) -> ErrorCode:
        error = self._error_for_epoch(request_epoch)
        if error == ErrorCode.none and not isinstance(self.quorum.role, LeaderState):
            error = ErrorCode.not_leader_or_follower
        return error

    def _on_fetch_request(self, inbound: Inbound, request: FetchRequest, now_ms: int) -> None:
        # A newer fetch from the same replica means it gave up on the parked one: answer
        # that one now (its answer is ignored) and consider this one.
        superseded = self._parked_fetches.pop(request.replica_id, None)
        if superseded is not None:
            self._respond(superseded.inbound, self._fetch_response(superseded.request, now_ms))
        hw_before = self.high_watermark
        response = self._fetch_response(request, now_ms, record=True)
        leader = self.quorum.role
        if (
            isinstance(leader, LeaderState)
            and request.max_wait_ms > 0
            and response.error_code == ErrorCode.none
            and not response.records
            and response.diverging_epoch.epoch < 0
            and not response.snapshot_id.present
            # KIP-1166: a replica that does not know our high watermark learns it now;
            # so does one whose own fetch just moved it.
            # (A leader whose own is not established yet answers -1: parked until it is.)
            and request.high_watermark >= response.high_watermark
            and self.high_watermark == hw_before
            and len(self._parked_fetches) < MAX_PARKED_FETCHES
        ):
            wait_ms = min(request.max_wait_ms, self.config.request_timeout_ms)
            deadline_ms = now_ms + wait_ms
            self._parked_fetches[request.replica_id] = ParkedFetch(
                inbound, request, leader, self.high_watermark, deadline_ms
            )
            self._parked_deadline_ms_min = min(self._parked_deadline_ms_min, deadline_ms)
            return
        self._respond(inbound, response)

    def _release_parked_fetches(self, now_ms: int) -> None:
        """Answer the parked fetches that have something to say: new entries, a new high
        watermark, a lost leadership (the answer carries the error), or max wait."""
        if not self._parked_fetches:
            return
        role = self.quorum.role
        state = (self.log.end_offset, self.high_watermark)
        if (
            role is self._parked_role
            and state == self._parked_state
            and now_ms < self._parked_deadline_ms_min
        ):
            return  # nothing changed since the last look (each step looks)
        for replica_id, parked in list(self._parked_fetches.items()):
            if (
                parked.leader is not role
                or self.log.end_offset > parked.request.fetch_offset
                or self.high_watermark != parked.high_watermark
                or now_ms >= parked.deadline_ms
            ):
                del self._parked_fetches[replica_id]
                self._respond(parked.inbound, self._fetch_response(parked.request, now_ms))
        self._parked_role, self._parked_state = role, state
        self._parked_deadline_ms_min = min(
            (parked.deadline_ms for parked in self._parked_fetches.values()), default=_NEVER
        )

    def _parked_deadline_ms(self) -> int | None:
        return self._parked_deadline_ms_min if self._parked_fetches else None

    def _fetch_response(
        self, request: FetchRequest, now_ms: int, *, record: bool = False
    ) -> FetchResponse:
        """The answer to ``request`` as of now; ``record``: it is the fetch's arrival (a
        valid one counts as the replica's progress; a parked one's release does not)."""
        error = self._fetch_error(request.current_leader_epoch)
        if error == ErrorCode.none and (
            request.fetch_offset < 0
            or request.last_fetched_epoch < 0
            or request.last_fetched_epoch > self.epoch
            or request.replica_id < 0
            or request.replica_id == self.node_id
        ):
            error = ErrorCode.invalid_request  # no honest replica sends this
        diverging = EpochEndOffset()
        snapshot_id = SnapshotId()
        records: tuple[LogEntry, ...] = ()
        leader = self.quorum.role
        if error == ErrorCode.none and isinstance(leader, LeaderState):
            known = self.log.end_offset_for_epoch(request.last_fetched_epoch)
            latest = self.snapshots.latest()
            if latest is not None and (
                request.fetch_offset < self.log.start_offset or known is None
            ):
                snapshot_id = latest
            elif known is None:
                # Older than our log and we have no snapshot: only a confused peer.
                error = ErrorCode.invalid_request
            elif known.epoch != request.last_fetched_epoch or request.fetch_offset > known.offset:
                diverging = EpochEndOffset(epoch=known.epoch, end_offset=known.offset)
            elif not self.log.is_boundary(request.fetch_offset):
                error = ErrorCode.invalid_request  # inside an entry: no honest replica
            else:
                if record:
                    self._record_valid_fetch(leader, request, now_ms)
                if request.fetch_offset < self.log.end_offset:
                    max_bytes = min(request.partition_max_bytes, self.config.fetch_max_bytes)
                    records = tuple(self.log.read(request.fetch_offset, max(max_bytes, 1)))
        # A new leader's high watermark is not the quorum's until an entry of its own
        # epoch commits (it may lag what the last leader committed): answer -1 until
        # then, as Kafka does, so no follower takes it for everything committed.
        established = isinstance(leader, LeaderState) and (
            self.high_watermark > leader.epoch_start_offset
        )
        return FetchResponse(
            error_code=error,
            high_watermark=self.high_watermark if established else -1,
            log_start_offset=self.log.start_offset,
            diverging_epoch=diverging,
            current_leader=self._current_leader(),
            snapshot_id=snapshot_id,
            records=records,
        )

    def _record_valid_fetch(self, leader: LeaderState, request: FetchRequest, now_ms: int) -> None:
        leader.record_fetch(request.replica_id, request.fetch_offset, self.log.end_offset, now_ms)
        if request.replica_id in self.voters:
            self._update_leader_high_watermark(leader)

    def _update_leader_high_watermark(self, leader: LeaderState) -> None:
        before = leader.high_watermark
        leader.update_high_watermark(self.log.flushed_offset)
        assert leader.high_watermark >= before, "leader high watermark went back"
        assert leader.high_watermark <= self.log.end_offset
        self.high_watermark = leader.high_watermark

    def _on_fetch_snapshot_request(
        self, inbound: Inbound, request: FetchSnapshotRequest, now_ms: int
    ) -> None:
        error = self._fetch_error(request.current_leader_epoch)
        size = -1
        chunk = b""
        if error == ErrorCode.none:
            found = self.snapshots.size(request.snapshot_id)
            if found is None:
                error = ErrorCode.snapshot_not_found
            elif not 0 <= request.position <= found:
                error = ErrorCode.position_out_of_range
            else:
                size = found
                max_bytes = max(1, min(request.max_bytes, self.config.snapshot_chunk_bytes))
                chunk = self.snapshots.read_chunk(request.snapshot_id, request.position, max_bytes)
        response = FetchSnapshotResponse(
            error_code=error,
            snapshot_id=request.snapshot_id,
            current_leader=self._current_leader(),
            size=size,
            position=request.position,
            unaligned_records=chunk,
        )
        self._respond(inbound, response)

    # --- follower side ----------------------------------------------------------------

    def _send_fetch(self, role: FollowerState, destination_id: int, now_ms: int) -> None:
        if role.snapshot_fetch is not None:
            snapshot_request = FetchSnapshotRequest(
                cluster_id=self.cluster_id,
                replica_id=self.node_id,
                max_bytes=self.config.snapshot_chunk_bytes,
                current_leader_epoch=self.epoch,
                snapshot_id=role.snapshot_fetch.snapshot_id,
                position=role.snapshot_fetch.position,
            )
            correlation_id = self._send(destination_id, snapshot_request)
        else:
            request = self._fetch_request(self._fetch_wait_ms())
            correlation_id = self._send(destination_id, request)
        role.in_flight_correlation_id = correlation_id
        role.in_flight_sent_ms = now_ms

    def _fetch_wait_ms(self) -> int:
        """The max wait a follower asks for: the configured one, but at most half the
        fetch timeout (a parked fetch must come back before the follower would call an
        election) and half the request timeout (before it gives the request up)."""
        config = self.config
        return min(
            config.fetch_max_wait_ms, config.fetch_timeout_ms // 2, config.request_timeout_ms // 2
        )

    def _fetch_request(self, max_wait_ms: int) -> FetchRequest:
        return FetchRequest(
            cluster_id=self.cluster_id,
            replica_id=self.node_id,
            replica_epoch=-1,
            current_leader_epoch=self.epoch,
            fetch_offset=self.log.end_offset,
            last_fetched_epoch=self.log.last_fetched_epoch,
            log_start_offset=self.log.start_offset,
            partition_max_bytes=self.config.fetch_max_bytes,
            max_wait_ms=max_wait_ms,
            high_watermark=self.high_watermark,
        )

    def _send_discovery_fetch(self, role: UnattachedState, now_ms: int) -> None:
        """Ask a random voter who leads (observers, and voters that lost track)."""
        candidates = self._other_voters()
        if not candidates:
            return
        destination = candidates[self._random.randrange(len(candidates))]
        # No max wait: the probe wants the leader's name, not entries.
        role.discovery_correlation_id = self._send(destination, self._fetch_request(0))
        role.next_discovery_ms = now_ms + self.config.request_timeout_ms

    def _claim_in_flight(self, inbound: Inbound) -> FollowerState | None:
        """The follower role, if ``inbound`` answers its in-flight request (now cleared)."""
        role = self.quorum.role
        if isinstance(role, UnattachedState | VotedState):
            if (
                isinstance(role, UnattachedState)
                and role.discovery_correlation_id == inbound.correlation_id
            ):
                role.discovery_correlation_id = None
            return None
        if not isinstance(role, FollowerState):
            return None
        if role.in_flight_correlation_id != inbound.correlation_id:
            return None
        role.in_flight_correlation_id = None
        return role

    def _on_fetch_response(self, inbound: Inbound, response: FetchResponse, now_ms: int) -> None:
        role = self._claim_in_flight(inbound)
        leader = response.current_leader
        # A leader that resigned names itself and says it does not lead (a parked fetch
        # is answered so when it steps down): that is no news of a live leader, and a
        # prospective must not go back to following it.
        resigned = (
            response.error_code == ErrorCode.not_leader_or_follower
            and leader.leader_id == inbound.source_id
        )
        if not resigned and self._observe_leader(leader.leader_epoch, leader.leader_id, now_ms):
            return
        if role is None or not self._from_our_leader(role, inbound, leader):
            if role is not None:
                role.next_fetch_ms = now_ms + self.config.retry_backoff_ms
            return
        if response.error_code != ErrorCode.none:
            role.next_fetch_ms = now_ms + self.config.retry_backoff_ms
            if (
                response.error_code == ErrorCode.not_leader_or_follower
                and role.leader_resigned_election_ms is None
            ):
                # Our leader of this epoch says it no longer leads (it resigned or
                # restarted): elect a successor after an election timeout rather than
                # the fetch timeout (its EndQuorumEpoch, if it sent one, names who
                # goes first; every follower starting at once would split the vote).
                role.leader_resigned_election_ms = now_ms + self._election_timeout_ms()
            return
        role.last_fetch_success_ms = now_ms
        role.fetch_deadline_ms = now_ms + self.config.fetch_timeout_ms
        role.next_fetch_ms = now_ms
        if response.diverging_epoch.epoch >= 0:
            self._truncate_to_common_prefix(response.diverging_epoch)
        elif response.snapshot_id.present:
            role.snapshot_fetch = SnapshotFetch(response.snapshot_id)
            self.snapshots.begin(response.snapshot_id)
        elif self._append_as_follower(response.records):
            known = self.high_watermark
            if response.high_watermark >= 0:  # -1: the leader's is not established yet
                new_high_watermark = min(response.high_watermark, self.log.end_offset)
                self.high_watermark = max(self.high_watermark, new_high_watermark)
                role.high_watermark_known = True
            wait_ms = self._fetch_wait_ms()
            if (
                not response.records
                and self.high_watermark == known
                and (wait_ms == 0 or now_ms - role.in_flight_sent_ms < wait_ms // 2)
            ):
                # Nothing new and not parked (a leader that does not long-poll, one with
                # no room to park, or one whose high watermark is not established yet):
                # do not spin; ask again after a backoff.
                role.next_fetch_ms = now_ms + self.config.retry_backoff_ms
        else:
            role.next_fetch_ms = now_ms + self.config.retry_backoff_ms

    def _from_our_leader(
        self, role: FollowerState, inbound: Inbound, leader: LeaderIdAndEpoch
    ) -> bool:
        return (
            inbound.source_id == role.leader_id
            and leader.leader_epoch == self.epoch
            and leader.leader_id == role.leader_id
        )

    def _truncate_to_common_prefix(self, diverging: EpochEndOffset) -> None:
        local = self.log.end_offset_for_epoch(diverging.epoch)
        if local is None:
            return  # the leader's epoch predates our snapshot: a confused peer; refetch
        if local.epoch == diverging.epoch:
            target = min(local.offset, diverging.end_offset)
        else:
            target = local.offset
        target = max(target, self.log.start_offset)
        if target >= self.log.end_offset:
            return
        assert target >= self.high_watermark, (
            f"node {self.node_id} would truncate committed entries: to {target}, "
            f"high watermark {self.high_watermark}"
        )
        self.log.truncate_to(target)

    def _append_as_follower(self, records: tuple[LogEntry, ...]) -> bool:
        """Append a valid batch of the leader's entries and flush; False if it is not one."""
        expected_offset = self.log.end_offset
        last_epoch = self.log.last_fetched_epoch
        for entry in records:
            if entry.offset != expected_offset or not last_epoch <= entry.epoch <= self.epoch:
                return False
            expected_offset = entry.next_offset
            last_epoch = entry.epoch
        if records:
            self.log.append(list(records))
            self._flush_log()  # fetch offsets must name flushed entries
        return True

    def _on_fetch_snapshot_response(
        self, inbound: Inbound, response: FetchSnapshotResponse, now_ms: int
    ) -> None:
        role = self._claim_in_flight(inbound)
        leader = response.current_leader
        resigned = (
            response.error_code == ErrorCode.not_leader_or_follower
            and leader.leader_id == inbound.source_id
        )
        if not resigned and self._observe_leader(leader.leader_epoch, leader.leader_id, now_ms):
            return
        if role is None or not self._from_our_leader(role, inbound, leader):
            return
        progress = role.snapshot_fetch
        role.next_fetch_ms = now_ms + self.config.retry_backoff_ms
        if progress is None:
            return
        if response.error_code == ErrorCode.snapshot_not_found:
            role.snapshot_fetch = None  # the leader moved on: ask with Fetch again
            return
        if (
            response.error_code != ErrorCode.none
            or response.snapshot_id != progress.snapshot_id
            or response.position != progress.position
            or (not response.unaligned_records and progress.position < response.size)
        ):
            return
        role.last_fetch_success_ms = now_ms
        role.fetch_deadline_ms = now_ms + self.config.fetch_timeout_ms
        role.next_fetch_ms = now_ms
        snapshot_id = progress.snapshot_id
        written = self.snapshots.write_chunk(
            snapshot_id, progress.position, response.unaligned_records
        )
        progress.position = written
        if written < response.size:
            return
        self.snapshots.complete(snapshot_id)
        self._install_snapshot(snapshot_id)
        role.snapshot_fetch = None

    def _install_snapshot(self, snapshot_id: SnapshotId) -> None:
        assert self.high_watermark <= snapshot_id.end_offset, (self.high_watermark, snapshot_id)
        self.log.reset_to(snapshot_id)
        self.high_watermark = snapshot_id.end_offset
        self._pending_snapshot = snapshot_id
        self._applied_offset = snapshot_id.end_offset
