"""Who is in sync: what a leader Partition knows of its followers, and its ISR changes.

How this works and why (seeds/001 ISR; seeds/004 LEO/HW; Kafka's Partition and
ReplicaState): replica/partition.py is the leader/follower state machine and the high
watermark; the bookkeeping that decides which replicas count as in sync is here, as
``IsrTracking``, the part of ``Partition`` that owns ``isr``, ``pending``, the proposal
outbox and ``followers`` (one ``FollowerState`` per replica of a led partition).

On becoming leader in a new epoch the partition forgets what it knew of its followers
(``_reset_follower_states``): each follower's log end offset is unknown until it
fetches, an in-sync one counts as caught up at that moment and one out of the ISR does
not. A follower's Fetch (``update_follower_fetch_state``) sets its log end offset to
the fetch offset and its "last caught up" time by Kafka's rule (the fetch offset
reached the leader's log end at that fetch, or at its previous one), then the HW is
recomputed.

ISR changes are proposals the owner sends through AlterPartition (replica/isr.py): a
follower that reached the HW and the start of this leader's epoch is proposed for the
ISR; ``maybe_shrink_isr`` proposes dropping followers not caught up for
``replica.lag.time.max.ms``. While one proposal is in flight no other is made, and the
HW is computed over ``maximal_isr`` (the larger set while expanding, the old set while
shrinking), so no record counts as committed on a set that may not be the ISR. The
controller's answer (``on_isr_outcome``) or a newer partition epoch in the metadata
replaces the pending state. ``follower_progress`` is what the leader offers
replica/replica_selector.py (KIP-392), ``low_watermark`` what DeleteRecords waits for.

A mixin, not an object the partition holds: every decision here reads the partition's
role, epochs, log end and HW, and an accepted change moves its partition epoch and HW,
so a separate object would need all of that passed in and handed back. The attributes
it reads from the partition are declared below; the ones it owns are set by
``_init_isr_tracking``. Sans-IO: time comes in as ``now_ms``; proposals wait in an
outbox (``take_proposal``) for the owner to send.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

from odradek.replica.interfaces import IsrOutcome, IsrProposal
from odradek.replica.partition_state import (
    LEADER,
    NOT_APPLIED,
    UNKNOWN_OFFSET,
    FollowerState,
    PartitionError,
    PartitionState,
)
from odradek.replica.purgatory import DelayedDeleteRecords
from odradek.replica.replica_selector import FollowerProgress
from odradek.storage.log import Log

# The partition's logger: these lines are about the partition (and name it), and
# operators reading or filtering a broker's log find them where they always were.
logger = logging.getLogger("odradek.replica.partition")


class IsrTracking:
    """Who is in sync with a led partition; mixed into ``Partition``."""

    # The partition's own state, read here (replica/partition.py sets it).
    topic: str
    index: int
    topic_id: str
    log: Log
    local_id: int
    state: PartitionState
    _leader_epoch: int
    partition_epoch: int
    replicas: tuple[int, ...]
    leader_epoch_start_offset: int
    deletes: DelayedDeleteRecords

    def _init_isr_tracking(self, lag_time_max_ms: int) -> None:
        self.lag_time_max_ms = lag_time_max_ms
        self.isr: tuple[int, ...] = ()  # committed: the metadata's, or an accepted proposal
        self.pending: IsrProposal | None = None  # in flight to the controller
        self._outbox: IsrProposal | None = None  # made, not yet taken by the owner
        self.followers: dict[int, FollowerState] = {}
        # Which brokers are alive (registered, unfenced): only their log start offsets
        # hold DeleteRecords back. Set by the owner from the metadata.
        self.is_alive: Callable[[int], bool] = lambda _: True

    def maybe_increment_high_watermark(self) -> bool:
        """The partition's HW rule (replica/partition.py), run after each change here."""
        raise NotImplementedError

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """The ISR the HW is computed over: committed, plus what an expansion adds."""
        if self.pending is None:
            return self.isr
        extra = tuple(r for r in self.pending.new_isr if r not in self.isr)
        return self.isr + extra

    def _reset_follower_states(
        self, new_leader: bool, new_epoch: bool, end: int, now_ms: int
    ) -> None:
        """Become leader: a record per follower, forgotten in a new epoch."""
        for replica in self.replicas:
            if replica == self.local_id:
                continue
            old = self.followers.get(replica)
            if old is None or new_epoch:
                # Kafka: an in-sync follower counts as caught up now; one out of the
                # ISR does not, so it cannot hold the HW back once it is shrunk away.
                caught_up = now_ms if replica in self.isr else 0
                if new_leader or old is None:
                    self.followers[replica] = FollowerState(last_caught_up_ms=caught_up)
                else:
                    old.last_fetch_leader_log_end_offset = end
                    old.last_fetch_ms = now_ms
                    old.last_caught_up_ms = caught_up
        for gone in [r for r in self.followers if r not in self.replicas]:
            del self.followers[gone]

    def update_follower_fetch_state(
        self,
        replica_id: int,
        fetch_offset: int,
        broker_epoch: int,
        now_ms: int,
        log_start_offset: int = UNKNOWN_OFFSET,
    ) -> bool:
        """A follower fetched from ``fetch_offset``: its log end offset. Returns whether
        the HW advanced; may leave an ISR expansion in the outbox."""
        follower = self._follower(replica_id)
        leader_end = self.log.log_end_offset
        if fetch_offset >= leader_end:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, now_ms)
        elif fetch_offset >= follower.last_fetch_leader_log_end_offset:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, follower.last_fetch_ms)
        follower.log_end_offset = fetch_offset
        moved_start = log_start_offset != follower.log_start_offset
        follower.log_start_offset = log_start_offset
        follower.last_fetch_leader_log_end_offset = leader_end
        follower.last_fetch_ms = now_ms
        if broker_epoch >= 0:
            follower.broker_epoch = broker_epoch
        self._maybe_expand_isr(replica_id, follower)
        if moved_start and len(self.deletes):
            self.deletes.complete_up_to(self.low_watermark())
        return self.maybe_increment_high_watermark()

    def _follower(self, replica_id: int) -> FollowerState:
        follower = self.followers.get(replica_id)
        if self.state is not LEADER or follower is None:
            raise PartitionError(
                "NOT_LEADER_OR_FOLLOWER",
                f"replica {replica_id} is not a follower of {self.topic}-{self.index} here",
            )
        return follower

    def _maybe_expand_isr(self, replica_id: int, follower: FollowerState) -> None:
        if self.pending is not None or self._outbox is not None or replica_id in self.isr:
            return
        end = follower.log_end_offset
        if end < self.log.high_watermark or end < self.leader_epoch_start_offset:
            return
        self._propose((*self.isr, replica_id))

    def maybe_shrink_isr(self, now_ms: int) -> bool:
        """Propose dropping ISR followers not caught up for ``replica.lag.time.max.ms``."""
        if self.state is not LEADER or self.pending is not None or self._outbox is not None:
            return False
        leader_end = self.log.log_end_offset
        lagging = {
            replica
            for replica in self.isr
            if replica != self.local_id and not self._caught_up(replica, leader_end, now_ms)
        }
        if not lagging:
            return False
        logger.info(
            "%s-%d: shrinking the ISR %s: %s not caught up for %d ms",
            self.topic,
            self.index,
            list(self.isr),
            sorted(lagging),
            self.lag_time_max_ms,
        )
        self._propose(tuple(r for r in self.isr if r not in lagging))
        return True

    def _caught_up(self, replica: int, leader_end: int, now_ms: int) -> bool:
        follower = self.followers.get(replica)
        if follower is None:
            return False
        return follower.is_caught_up(leader_end, now_ms, self.lag_time_max_ms)

    def _propose(self, new_isr: tuple[int, ...]) -> None:
        epochs = {
            r: self.followers[r].broker_epoch
            for r in new_isr
            if r != self.local_id and r in self.followers
        }
        proposal = IsrProposal(
            uuid.UUID(self.topic_id),
            self.index,
            self._leader_epoch,
            self.partition_epoch,
            new_isr,
            epochs,
        )
        self.pending = self._outbox = proposal

    def take_proposal(self) -> IsrProposal | None:
        """The ISR change to send with AlterPartition, once."""
        proposal, self._outbox = self._outbox, None
        return proposal

    def on_isr_outcome(self, proposal: IsrProposal, outcome: IsrOutcome) -> bool:
        """The controller answered ``proposal``; returns whether the HW advanced."""
        if self.pending is not proposal:
            return False  # superseded by the metadata
        if outcome.error != "NONE":
            if outcome.error in NOT_APPLIED:
                self.pending = None  # surely not applied: back to the committed ISR
            else:  # e.g. INVALID_UPDATE_VERSION: the metadata will bring the truth
                logger.info(
                    "%s-%d: ISR change to %s failed with %s; waiting for the metadata",
                    self.topic,
                    self.index,
                    list(proposal.new_isr),
                    outcome.error,
                )
            return False
        if outcome.leader_epoch != self._leader_epoch or (
            outcome.partition_epoch < self.partition_epoch
        ):
            return False  # an answer about another epoch: the metadata will settle it
        self.pending = None
        self.isr = tuple(outcome.isr)
        self.partition_epoch = outcome.partition_epoch
        return self.maybe_increment_high_watermark()

    def follower_progress(self, now_ms: int) -> list[FollowerProgress]:
        """What this leader knows of each follower, for the preferred read replica."""
        return [
            FollowerProgress(
                replica,
                state.log_start_offset,
                state.log_end_offset,
                now_ms - state.last_caught_up_ms,
            )
            for replica, state in self.followers.items()
        ]

    def low_watermark(self) -> int:
        """The smallest log start offset over this leader and its live followers (a
        follower that has not reported one holds it at -1)."""
        low = self.log.log_start_offset
        for replica, follower in self.followers.items():
            if self.is_alive(replica):
                low = min(low, follower.log_start_offset)
        return low
