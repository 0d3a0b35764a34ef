"""One hosted partition as a state machine: leader or follower, and its high watermark.

How this works and why (seeds/000 副本, Watermark; seeds/004 LEO/HW and leader
epochs; Kafka's Partition): a partition is NEW until the first metadata delta names
its role, then LEADER or FOLLOWER, moving between the two as deltas elect; an I/O
error of unknown effect makes it OFFLINE until a restart. Every role change goes
through ``_transition``, which checks ``LEGAL_TRANSITIONS``. A delta older than what
the partition knows (a lower leader epoch, or the same one with a lower partition
epoch) is ignored, as Kafka does.

On becoming leader in a new epoch the partition writes that epoch into the leader-epoch
cache at its log end (so OffsetForLeaderEpoch and followers' diverging-epoch checks see
it before anything is written in it), and forgets what it knew of its followers. The
high watermark is the minimum log end offset over the maximal ISR and never moves
back; since unknown followers hold it where it was (the checkpointed HW), **a new
leader exposes nothing above its HW until the ISR has fetched it** (seeds/000
"Watermark 滞后").

Who is in sync is replica/isr_state.py (``IsrTracking``, which ``Partition`` mixes
in): the follower records a follower's Fetch updates (``read`` from a replica id), the
ISR expansions and shrinks proposed through AlterPartition (replica/isr.py), the
pending proposal and the controller's answer, and ``maximal_isr``, the set the HW here
is computed over.

Consumers read from the leader, and (KIP-392, Fetch v11+) from a follower too, each
below its own HW with the same epoch checks; ``follower_progress`` is what the leader
offers replica/replica_selector.py to pick a follower in the consumer's rack.

Sans-IO: time comes in as ``now_ms``; proposals wait in an outbox (``take_proposal``);
waiters (purgatory.py) are completed in place. A follower is driven by the replica
fetcher through the ``FollowerLog`` methods at the end.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence

from odradek.replica.isr_state import IsrTracking
from odradek.replica.partition_state import (
    DEFAULT_LAG_TIME_MAX_MS,
    FOLLOWER,
    LEADER,
    LEGAL_TRANSITIONS,
    NEW,
    OFFLINE,
    UNKNOWN_OFFSET,
    NotFollowerError,
    PartitionError,
    PartitionState,
)
from odradek.replica.purgatory import (
    DelayedDeleteRecords,
    DelayedProduces,
    FetchWatchers,
    HighWatermarkWaiters,
    Waiter,
)
from odradek.replica.reads import (
    LATEST,
    MAX_TIMESTAMP,
    NOT_FOUND,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    FetchPosition,
    PartitionRead,
    RemoteFetch,
    diverging_epoch,
    lookup_offset,
)
from odradek.storage.errors import OffsetOutOfRangeError, StorageError
from odradek.storage.log import AppendInfo, Log
from odradek.storage.remote.metadata import TopicIdPartition

logger = logging.getLogger(__name__)


class Partition(IsrTracking):
    def __init__(
        self,
        topic: str,
        index: int,
        topic_id: str,
        log: Log,
        local_id: int,
        *,
        lag_time_max_ms: int = DEFAULT_LAG_TIME_MAX_MS,
    ) -> None:
        self.topic = topic
        self.index = index
        self.topic_id = topic_id
        self.log = log
        self.local_id = local_id
        self._init_isr_tracking(lag_time_max_ms)  # isr, pending, followers: isr_state.py
        self.state = NEW
        self.leader = -1
        self._leader_epoch = -1
        self.partition_epoch = -1
        self.replicas: tuple[int, ...] = ()
        self.leader_epoch_start_offset = UNKNOWN_OFFSET
        self.produces = DelayedProduces()
        self.deletes = DelayedDeleteRecords()
        self.fetches = FetchWatchers()
        self.hw_waiters = HighWatermarkWaiters()
        self._follower_reads_epoch = -1  # the leader epoch of the last logged follower read
        # Told the bytes of each follower append (ReplicationBytesIn, topic_stats.py).
        self.on_follower_append: Callable[[int], None] = _ignore

    def __repr__(self) -> str:
        return (
            f"Partition({self.topic}-{self.index} {self.state.value} epoch="
            f"{self._leader_epoch}/{self.partition_epoch} isr={list(self.isr)} "
            f"hw={self.log.high_watermark} leo={self.log.log_end_offset})"
        )

    # -- state --------------------------------------------------------------------------
    def _transition(self, target: PartitionState) -> None:
        assert target in LEGAL_TRANSITIONS[self.state], f"{self.state} -> {target}"
        if target is not self.state:
            logger.debug("%s-%d: %s -> %s", self.topic, self.index, self.state, target)
        self.state = target

    @property
    def leader_epoch(self) -> int:
        return self._leader_epoch

    @property
    def is_leader(self) -> bool:
        return self.state is LEADER

    def _is_stale(self, leader_epoch: int, partition_epoch: int) -> bool:
        if leader_epoch != self._leader_epoch:
            return leader_epoch < self._leader_epoch
        return partition_epoch < self.partition_epoch

    def become_leader(
        self,
        leader_epoch: int,
        partition_epoch: int,
        replicas: Sequence[int],
        isr: Sequence[int],
        now_ms: int,
    ) -> bool:
        """Lead from ``leader_epoch``; False (nothing done) for a stale or offline one."""
        if self.state is OFFLINE or self._is_stale(leader_epoch, partition_epoch):
            return False
        new_leader = self.state is not LEADER
        new_epoch = new_leader or leader_epoch > self._leader_epoch
        self._transition(LEADER)
        self.leader = self.local_id
        self._leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.replicas = tuple(replicas)
        self.isr = tuple(isr)
        self.pending = self._outbox = None  # the metadata wins over anything in flight
        end = self.log.log_end_offset
        self._reset_follower_states(new_leader, new_epoch, end, now_ms)
        if new_epoch:
            self.log.epoch_cache.assign(leader_epoch, end)
            self.leader_epoch_start_offset = end
            self.fetches.wake_all()  # fetches parked under the old role read again
        self.maybe_increment_high_watermark()
        return True

    def become_follower(
        self,
        leader_id: int,
        leader_epoch: int,
        partition_epoch: int,
        replicas: Sequence[int],
        isr: Sequence[int],
    ) -> bool:
        """Follow ``leader_id``; False for a stale or offline one. Produces waiting on
        this node's leadership fail with NOT_LEADER_OR_FOLLOWER."""
        if self.state is OFFLINE or self._is_stale(leader_epoch, partition_epoch):
            return False
        was_leader = self.state is LEADER
        self._transition(FOLLOWER)
        self.leader = leader_id
        self._leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.replicas = tuple(replicas)
        self.isr = tuple(isr)
        self.pending = self._outbox = None
        self.followers.clear()
        self.leader_epoch_start_offset = UNKNOWN_OFFSET
        if was_leader:
            self.produces.fail_all("NOT_LEADER_OR_FOLLOWER")
            self.deletes.fail_all("NOT_LEADER_OR_FOLLOWER")
            self.hw_waiters.fail_all("NOT_LEADER_OR_FOLLOWER")
        self.fetches.wake_all()
        return True

    def go_offline(self) -> None:
        """An I/O error left the log in an unknown state: stop serving it."""
        if self.state is not OFFLINE:
            self._transition(OFFLINE)
        self.produces.fail_all("KAFKA_STORAGE_ERROR")
        self.deletes.fail_all("KAFKA_STORAGE_ERROR")
        self.hw_waiters.fail_all("KAFKA_STORAGE_ERROR")
        self.fetches.wake_all()

    def stop(self, error: str = "NOT_LEADER_OR_FOLLOWER") -> None:
        """The partition is no longer hosted here: answer everything waiting on it."""
        self.produces.fail_all(error)
        self.deletes.fail_all(error)
        self.hw_waiters.fail_all(error)
        self.fetches.wake_all()

    # -- checks -------------------------------------------------------------------------
    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """KIP-320: a client's epoch older than ours is fenced, a newer one unknown."""
        if current_leader_epoch < 0 or current_leader_epoch == self._leader_epoch:
            return
        if current_leader_epoch < self._leader_epoch:
            raise PartitionError(
                "FENCED_LEADER_EPOCH",
                f"epoch {current_leader_epoch} is older than {self._leader_epoch}",
            )
        raise PartitionError(
            "UNKNOWN_LEADER_EPOCH",
            f"epoch {current_leader_epoch} is newer than {self._leader_epoch}",
        )

    def check_leader(self, current_leader_epoch: int = -1) -> None:
        """Epoch fencing first, then leadership, in Kafka's order."""
        if self.state is OFFLINE:
            raise PartitionError("KAFKA_STORAGE_ERROR", f"{self.topic}-{self.index} is offline")
        self.check_leader_epoch(current_leader_epoch)
        if self.state is not LEADER:
            raise PartitionError(
                "NOT_LEADER_OR_FOLLOWER", f"not the leader of {self.topic}-{self.index}"
            )

    # -- leader: produce ----------------------------------------------------------------
    def append_as_leader(
        self,
        records: bytes,
        acks: int,
        *,
        coordinator: bool = False,
        verification_guard: object | None = None,
    ) -> AppendInfo:
        """Validate and append client batches in this leader's epoch. acks=all needs
        ``min.insync.replicas`` in the (committed) ISR first: NOT_ENOUGH_REPLICAS."""
        self.check_leader()
        min_insync = self.log.config.min_insync_replicas
        if acks == -1 and len(self.isr) < min_insync:
            raise PartitionError(
                "NOT_ENOUGH_REPLICAS",
                f"ISR {list(self.isr)} is smaller than min.insync.replicas={min_insync}",
            )
        # StorageError, OSError
        info = self.log.append_as_leader(
            records,
            self._leader_epoch,
            coordinator=coordinator,
            verification_guard=verification_guard,
        )
        self.fetches.on_log_end()
        self.maybe_increment_high_watermark()
        return info

    def append_marker(
        self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool
    ) -> AppendInfo:
        """A transaction coordinator's COMMIT/ABORT marker, in this leader's epoch (Kafka
        appends it with acks=all: NOT_ENOUGH_REPLICAS below ``min.insync.replicas``)."""
        self.check_leader()
        min_insync = self.log.config.min_insync_replicas
        if len(self.isr) < min_insync:
            raise PartitionError(
                "NOT_ENOUGH_REPLICAS",
                f"ISR {list(self.isr)} is smaller than min.insync.replicas={min_insync}",
            )
        info = self.log.append_marker(
            producer_id, producer_epoch, coordinator_epoch, commit, self._leader_epoch
        )
        self.fetches.on_log_end()
        self.maybe_increment_high_watermark()
        return info

    def replication_result(self, required_offset: int) -> str | None:
        """acks=all: the answer if the HW has reached ``required_offset``, else None."""
        if self.state is not LEADER:
            return "NOT_LEADER_OR_FOLLOWER"
        if self.log.high_watermark < required_offset:
            return None
        if len(self.isr) < self.log.config.min_insync_replicas:
            return "NOT_ENOUGH_REPLICAS_AFTER_APPEND"
        return "NONE"

    def delay_produce(self, required_offset: int, waiter: Waiter[str]) -> None:
        self.produces.add(required_offset, waiter)

    # -- leader: high watermark (the ISR it is computed over: isr_state.py) ----------------
    def maybe_increment_high_watermark(self) -> bool:
        """HW = min log end offset over the maximal ISR, if that is higher; wakes waiters."""
        if self.state is not LEADER:
            return False
        new_hw = self.log.log_end_offset
        for replica in self.maximal_isr:
            if replica != self.local_id:
                follower = self.followers.get(replica)
                new_hw = min(new_hw, follower.log_end_offset if follower else UNKNOWN_OFFSET)
        if new_hw <= self.log.high_watermark:
            return False
        self.log.high_watermark = new_hw
        self._on_high_watermark()
        return True

    def _on_high_watermark(self) -> None:
        self.produces.complete_up_to(
            self.log.high_watermark, len(self.isr), self.log.config.min_insync_replicas
        )
        self.hw_waiters.complete_up_to(self.log.high_watermark)
        self.fetches.on_high_watermark()

    # -- leader: reads -------------------------------------------------------------------
    def read(
        self,
        position: FetchPosition,
        replica_id: int,
        broker_epoch: int,
        now_ms: int,
        *,
        max_bytes: int,
        min_one_batch: bool,
        leader_only: bool = True,
        isolation_level: int = READ_UNCOMMITTED,
    ) -> PartitionRead:
        """One partition of a Fetch. Followers (``replica_id`` >= 0) read to the log end
        and report their position; consumers read below the HW, read_committed ones
        below the last stable offset, with the aborted transactions that overlap what
        they read (the client skips those records). A consumer that may read from a
        follower (``leader_only`` False: Fetch v11+, KIP-392) is served by a follower
        too, below that follower's own HW, with the same epoch checks. An offset out
        of range there is OFFSET_OUT_OF_RANGE for a client that sent its leader epoch
        (KIP-320: it asks the leader next), and NOT_LEADER_OR_FOLLOWER for one that
        did not, which may be here on stale metadata and would otherwise reset its
        position (the KAFKA-14255 case): it refreshes its metadata and finds the leader."""
        follower = replica_id >= 0
        out_of_range = "OFFSET_OUT_OF_RANGE"
        if leader_only or follower:
            self.check_leader(position.current_leader_epoch)
        else:
            self._check_readable(position.current_leader_epoch)
            if self.state is FOLLOWER and position.current_leader_epoch < 0:
                out_of_range = "NOT_LEADER_OR_FOLLOWER"
        if follower:
            self._follower(replica_id)  # a replica of this partition, or an error
        log = self.log
        result = PartitionRead(
            high_watermark=log.high_watermark,
            last_stable_offset=log.last_stable_offset,
            log_start_offset=log.log_start_offset,
        )
        if position.last_fetched_epoch >= 0:
            try:
                diverging = diverging_epoch(log, position)
            except ValueError:  # no end offset known for that epoch
                result.error = out_of_range
                return result
            if diverging is not None:
                result.diverging_epoch = diverging
                return result
        end = log.log_end_offset
        if not log.log_start_offset <= position.fetch_offset <= end:
            result.error = out_of_range
            return result
        if follower:
            self.update_follower_fetch_state(
                replica_id, position.fetch_offset, broker_epoch, now_ms, position.log_start_offset
            )
        committed = isolation_level == READ_COMMITTED and not follower
        if position.fetch_offset < log.local_log_start_offset and log.config.remote_storage_enable:
            # Tiered storage (KIP-405): below the local log, the bytes are remote.
            if follower:  # Kafka's follower then rebuilds its start from remote storage
                result.error = "OFFSET_MOVED_TO_TIERED_STORAGE"
                return result
            tp = TopicIdPartition(uuid.UUID(str(self.topic_id)), self.topic, self.index)
            result.remote = RemoteFetch(
                tp, log, position.fetch_offset, max(max_bytes, 0), min_one_batch, committed
            )
            if committed:
                result.aborted = []  # filled in with the remote read's
            return result
        if follower:
            visible = None
        else:
            visible = log.last_stable_offset if committed else log.high_watermark
        try:
            info = log.read(
                position.fetch_offset,
                max(max_bytes, 0),
                max_offset=visible,
                min_one_batch=min_one_batch,
            )
        except OffsetOutOfRangeError:
            result.error = out_of_range
            return result
        result.ranges.extend(info.ranges)
        result.high_watermark = log.high_watermark
        result.last_stable_offset = log.last_stable_offset
        result.log_start_offset = log.log_start_offset
        if committed and info.ranges and visible is not None:
            # Every aborted transaction overlapping [fetch offset, LSO): a superset of
            # what the returned bytes need, which a client ignores past its data.
            result.aborted = [
                (txn.producer_id, txn.first_offset)
                for txn in log.collect_aborted_transactions(position.fetch_offset, visible)
            ]
        elif committed:
            result.aborted = []
        return result

    def _check_readable(self, current_leader_epoch: int) -> None:
        """A consumer read from any replica (KIP-392): epoch fencing as on the leader;
        a replica that neither leads nor follows (NEW) sends the client back to the
        leader with NOT_LEADER_OR_FOLLOWER. A follower logs its first such read in
        each leader epoch (the evidence that follower fetching is in use)."""
        if self.state is LEADER:
            self.check_leader(current_leader_epoch)
            return
        if self.state is OFFLINE:
            raise PartitionError("KAFKA_STORAGE_ERROR", f"{self.topic}-{self.index} is offline")
        self.check_leader_epoch(current_leader_epoch)
        if self.state is not FOLLOWER:
            raise PartitionError(
                "NOT_LEADER_OR_FOLLOWER", f"no replica of {self.topic}-{self.index} here yet"
            )
        if self._follower_reads_epoch != self._leader_epoch:
            self._follower_reads_epoch = self._leader_epoch
            logger.info(
                "%s-%d: serving consumer fetches as a follower of %d (leader epoch %d, "
                "high watermark %d)",
                self.topic,
                self.index,
                self.leader,
                self._leader_epoch,
                self.log.high_watermark,
            )

    def offset_for_timestamp(
        self, timestamp: int, current_leader_epoch: int, isolation_level: int | None
    ) -> tuple[int, int, int]:
        """ListOffsets: (timestamp, offset, leader epoch). A consumer (an isolation
        level given) sees up to the HW (read_committed: the last stable offset); a
        broker or a debug tool (None) up to the log end, as Kafka. A consumer asking
        for the latest offset, or for a record above the HW, of a leader whose HW has
        not reached the start of its epoch gets OFFSET_NOT_AVAILABLE: the records below
        that start may still be committed."""
        self.check_leader(current_leader_epoch)
        consumer = isolation_level is not None
        if not consumer:
            visible = self.log.log_end_offset
        elif isolation_level == READ_COMMITTED:
            visible = self.log.last_stable_offset
        else:
            visible = self.log.high_watermark
        lagging = consumer and self.leader_epoch_start_offset > visible
        if timestamp == LATEST and not lagging:
            return -1, visible, self._leader_epoch
        try:
            found = lookup_offset(self.log, timestamp, self.log.log_end_offset, self._leader_epoch)
        except ValueError as error:
            raise PartitionError("INVALID_REQUEST", str(error)) from None
        if (timestamp < 0 and timestamp not in (LATEST, MAX_TIMESTAMP)) or found[1] < visible:
            return found  # earliest, tiered, nothing found, or a committed record
        if lagging:
            raise PartitionError(
                "OFFSET_NOT_AVAILABLE",
                f"high watermark {visible} is below this epoch's start "
                f"{self.leader_epoch_start_offset}",
            )
        return NOT_FOUND

    def last_offset_for_leader_epoch(
        self, current_leader_epoch: int, requested_epoch: int
    ) -> tuple[int, int]:
        """OffsetForLeaderEpoch on the leader: (largest epoch <= requested, its end)."""
        self.check_leader(current_leader_epoch)
        if requested_epoch > self._leader_epoch:
            return -1, -1
        return self.end_offset_for_epoch(requested_epoch)

    def delay_delete_records(self, required_offset: int, waiter: Waiter[int | str]) -> None:
        self.deletes.add(required_offset, waiter)

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: advance the log start offset to ``offset`` (-1: the HW);
        returns the offset the replicas' low watermark must reach before the answer."""
        self.check_leader()
        log = self.log
        if not log.config.is_deleting:
            raise PartitionError(
                "POLICY_VIOLATION",
                f"records of {self.topic}-{self.index} cannot be deleted: "
                f"cleanup.policy={log.config.cleanup_policy}",
            )
        target = log.high_watermark if offset == -1 else offset
        if target < 0:
            raise PartitionError("OFFSET_OUT_OF_RANGE", f"offset {offset} is negative")
        try:
            log.increment_log_start_offset(target)
        except OffsetOutOfRangeError as error:
            raise PartitionError("OFFSET_OUT_OF_RANGE", str(error)) from None
        return target

    # -- FollowerLog (replica/interfaces.py): the fetcher drives a follower -------------
    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    def latest_epoch(self) -> int | None:
        return self.log.latest_epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self.log.end_offset_for_epoch(epoch)

    def _check_follower(self) -> None:
        if self.state is not FOLLOWER:
            raise NotFollowerError(f"{self.topic}-{self.index} is not a follower here")

    def append_as_follower(self, records: bytes | memoryview) -> None:
        self._check_follower()
        self.log.append_as_follower(records)
        self.on_follower_append(len(records))
        self.fetches.on_log_end()

    def truncate_to(self, offset: int) -> None:
        self._check_follower()
        if self.log.truncate_to(offset):
            logger.info("%s-%d: truncated to offset %d", self.topic, self.index, offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self._check_follower()
        self.log.truncate_fully_and_start_at(offset)
        logger.info("%s-%d: emptied, restarting at offset %d", self.topic, self.index, offset)

    def update_follower_high_watermark(self, leader_high_watermark: int) -> None:
        self._check_follower()
        before = self.log.high_watermark
        self.log.high_watermark = min(leader_high_watermark, self.log.log_end_offset)
        if self.log.high_watermark > before:
            self.fetches.on_high_watermark()

    def update_follower_log_start_offset(self, leader_log_start_offset: int) -> None:
        self._check_follower()
        target = min(leader_log_start_offset, self.log.high_watermark)
        if target > self.log.log_start_offset:
            try:
                self.log.increment_log_start_offset(target)
            except StorageError as error:  # raced a truncation: the next fetch retries
                logger.debug("%s-%d: %s", self.topic, self.index, error)


def _ignore(_size: int) -> None:
    """A partition outside a ReplicaManager counts nothing."""
