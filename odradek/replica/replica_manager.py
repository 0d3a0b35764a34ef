"""ReplicaManager: the partitions this broker hosts, driven by metadata; produce.

How this works and why: the broker acts on metadata deltas (metadata/delta.py) — a
partition newly assigned to this node gets a Partition (replica/partition.py) backed
by a storage Log, and every partition whose state changed becomes leader or follower
in the image's epochs; only the logs of topics the delta says were deleted (or
partitions it moved away from here) are deleted; a partition no delta names is not
looked at. Nothing is created or deleted before the metadata has caught up
(``catch_up``): an image that lags does not know topics created since, and must not
decide that their logs are garbage. At catch-up the whole image is applied once, and a
log on disk it does not know is set aside (renamed, kept), never deleted.

Followers are fetched for by a ``ReplicaFetching`` (replica/fetcher.py; None on a
single node): new follower roles are added with their leader and epoch, partitions
that became leaders or left are removed. ISR proposals the partitions make go to an
``AlterPartitionManager`` (replica/isr.py; None on a single node, where the ISR is the
leader alone and never changes); ``isr_expiration`` is the periodic shrink check.

Produce is two-phase (review E.1): ``append_records`` appends and, for acks=all,
parks a waiter in the partition's purgatory until the HW passes the batch;
``await_replication`` then waits for all of a request's partitions at once, up to the
request's timeout (REQUEST_TIMED_OUT). With one replica the HW moves with the append,
so acks=all answers at once, as before. ``fetch`` (replica/fetch_service.py, the
FetchService the manager mixes in) reads every partition of a Fetch and long-polls
(seeds/000 purgatory) until ``min_bytes`` arrive or ``max_wait_ms`` runs out, and
answers a consumer of another rack with KIP-392's preferred read replica.
DeleteRecords is two-phase the same way: it waits for the live replicas' log start
offsets. ``wait_for_high_watermark`` is the coordinators' wait (a load serves once
the HW has passed what it replayed), woken by the HW advance like a produce.
ListOffsets and OffsetForLeaderEpoch are the partition's lookups (on the leader).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from odradek.metadata.delta import MetadataDelta, between
from odradek.metadata.image import MetadataImage, PartitionImage, TopicImage
from odradek.replica.fetch_service import FetchService
from odradek.replica.interfaces import (
    FetchStart,
    FollowerLog,
    IsrChannel,
    IsrOutcome,
    IsrProposal,
    ReplicaFetching,
    TopicPartition,
)
from odradek.replica.isr import AlterPartitionManager
from odradek.replica.partition import (
    DEFAULT_LAG_TIME_MAX_MS,
    FOLLOWER,
    Partition,
    PartitionError,
)
from odradek.replica.reads import epoch_at
from odradek.replica.replica_selector import ReplicaSelector
from odradek.replica.replication_quota import ReplicationQuota
from odradek.replica.topic_stats import BrokerTopicStats
from odradek.storage.errors import StorageError
from odradek.storage.log import AppendInfo
from odradek.storage.log_config import LogConfig
from odradek.storage.log_manager import LogManager
from odradek.storage.log_validator import conversion
from odradek.storage.partition_metadata import check_topic_id
from odradek.storage.remote.follower_state import build_follower_state
from odradek.storage.remote.log_manager import RemoteLogManager
from odradek.storage.remote.metadata import TopicIdPartition

__all__ = ["Partition", "PartitionError", "ProduceStatus", "ReplicaManager"]
# The coordinators' appends wait this long for the HW (offsets.commit.timeout.ms).
COORDINATOR_APPEND_TIMEOUT_MS = 5_000


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


@dataclass(slots=True)
class ProduceStatus:
    """One partition of a produce between its append and its answer."""

    info: AppendInfo
    error: str = "NONE"  # final once ``waiter`` is None
    waiter: asyncio.Future[str] | None = None  # acks=all, the HW not there yet
    partition: Partition | None = None


logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ProducerView:
    """One row of DescribeProducers."""

    producer_id: int
    epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int


class ReplicaManager(FetchService):
    def __init__(
        self,
        node_id: int,
        log_manager: LogManager,
        *,
        fetching: ReplicaFetching | None = None,
        isr_channel: IsrChannel | None = None,
        broker_epoch: Callable[[], int] = lambda: -1,
        isr_manager: AlterPartitionManager | None = None,
        lag_time_max_ms: int = DEFAULT_LAG_TIME_MAX_MS,
        clock: Callable[[], int] = monotonic_ms,
        replica_selector: ReplicaSelector | None = None,
        leader_quota: ReplicationQuota | None = None,
    ) -> None:
        """``isr_channel`` (with this broker's current ``broker_epoch``) makes the
        AlterPartitionManager, which ``isr_expiration`` runs; ``isr_manager`` gives one
        ready-made instead (tests). ``replica_selector`` (``replica.selector.class``)
        picks the replica a consumer with a rack should read from; None: the leader.
        ``leader_quota`` is leader.replication.throttled.rate (replication_quota.py)."""
        self.node_id = node_id
        self.log_manager = log_manager
        self.fetching = fetching
        if isr_manager is None and isr_channel is not None:
            isr_manager = AlterPartitionManager(isr_channel, node_id, broker_epoch)
        self.isr_manager = isr_manager
        self.lag_time_max_ms = lag_time_max_ms
        self.clock = clock
        self.replica_selector = replica_selector
        self.leader_quota = leader_quota  # KIP-73 (replication_quota.py)
        self.remote_log_manager: RemoteLogManager | None = None  # KIP-405, set by the broker
        self.partitions: dict[tuple[str, int], Partition] = {}
        # Partitions answered with KAFKA_STORAGE_ERROR: ``offline`` ones had an I/O
        # error in their log (disk full, EIO) with its state on disk unknown, until a
        # restart recovers them; ``not_created`` ones are in the metadata but their log
        # could not be created here, until a later metadata change or restart does it.
        self.offline: dict[tuple[str, int], str] = {}
        self.not_created: dict[tuple[str, int], str] = {}
        self.closing = False  # shutdown: fetches stop long-polling
        self.caught_up = False  # set by catch_up(); deltas before it are not acted on
        self.image = MetadataImage()  # the last one applied: which brokers are alive
        # Kafka's BrokerTopicMetrics (messages and bytes in, bytes out), read by /metrics.
        self.topic_stats = BrokerTopicStats()

    # -- reacting to metadata ------------------------------------------------------
    def catch_up(self, image: MetadataImage, topic_config: Callable[[str], LogConfig]) -> None:
        """The metadata has caught up with the committed log (start-up): host every
        partition ``image`` assigns here, and set aside logs it does not know."""
        self.caught_up = True
        self.apply_delta(between(MetadataImage(), image), image, topic_config)
        for (topic_name, index), log in list(self.log_manager.logs.items()):
            key = (topic_name, index)
            if key in self.partitions or key in self.not_created:
                continue
            # A log on disk the metadata does not know: maybe a topic deleted while
            # we were down, maybe metadata that lost records. Never delete on that
            # evidence alone: set it aside, keep the data, say where it went.
            target = self.log_manager.set_aside_stray_log(topic_name, index)
            logger.warning(
                "log %s-%d (%d bytes, offsets %d..%d) is not in the metadata: renamed "
                "to %s and kept, not deleted; remove it if the topic is really gone",
                topic_name,
                index,
                log.size,
                log.log_start_offset,
                log.log_end_offset,
                target,
            )

    def apply_delta(
        self,
        delta: MetadataDelta,
        image: MetadataImage,
        topic_config: Callable[[str], LogConfig],
    ) -> None:
        """Act on one published change: delete the logs of deleted topics (theirs by
        topic id, so a re-created namesake is not touched), make the partitions whose
        state changed leaders or followers, retry logs that could not be created, and
        start or stop fetching accordingly."""
        if not self.caught_up:
            return  # catch_up() applies the whole image once it is known complete
        self.image = image
        stops: list[TopicPartition] = []
        for topic in delta.deleted_topics.values():
            self.topic_stats.forget(topic.name)
            for index in topic.partitions:
                gone = self.partitions.get((topic.name, index))
                tiered = gone is not None and gone.log.config.remote_storage_enable
                if self._remove((topic.name, index), str(topic.topic_id)):
                    stops.append((topic.name, index))
                    if tiered and self.remote_log_manager is not None:  # KIP-405
                        tp = TopicIdPartition(uuid.UUID(str(topic.topic_id)), topic.name, index)
                        self.remote_log_manager.delete_partition(tp)
                self.not_created.pop((topic.name, index), None)
        wanted: dict[tuple[str, int], tuple[TopicImage, PartitionImage]] = {}
        for change in delta.partitions.values():
            key = (change.topic.name, change.new.partition)
            if self.node_id in change.new.replicas:
                wanted[key] = (change.topic, change.new)
            elif change.old is not None and self.node_id in change.old.replicas:
                if self._remove(key, str(change.topic.topic_id)):  # moved away from here
                    stops.append(key)
                self.not_created.pop(key, None)
        for key in [k for k in self.not_created if k not in wanted]:
            retry = _assigned(image, key, self.node_id)
            if retry is None:
                del self.not_created[key]
            else:
                wanted[key] = retry
        configured = {topic.name for topic, _ in wanted.values()}
        if delta.broker_configs_changed:  # topic defaults: every hosted topic
            configured.update(name for name, _ in self.partitions)
        else:
            hosted = {name for name, _ in self.partitions}
            configured.update(delta.topic_configs_changed() & hosted)
        for name in configured:
            self.log_manager.set_topic_config(name, topic_config(name))
        starts: dict[TopicPartition, FetchStart] = {}
        for key, (topic, state) in wanted.items():
            try:
                start, stop = self._ensure(key, topic, state)
            except (OSError, StorageError) as error:
                # The metadata is committed; the log is not here. Retried on the next
                # metadata change and at start-up; meanwhile clients get a storage error.
                reason = f"{key[0]}-{key[1]}: cannot create its log: {_reason(error)}"
                self.not_created[key] = reason
                logger.error("%s", reason)
                continue
            if start is not None:
                starts[key] = start
            elif stop:
                stops.append(key)
        if self.fetching is not None:
            if stops:
                self.fetching.remove_partitions(stops)
            if starts:
                self.fetching.add_partitions(starts)

    def check_loaded_logs(self, image: MetadataImage) -> None:
        """Start-up, before anything is committed: every log found on disk whose topic the
        metadata knows must carry that topic's id, else PartitionMetadataError (refusal)."""
        for topic_name, index in list(self.log_manager.logs):
            topic = image.topics.get(topic_name)
            if topic is not None and index in topic.partitions:
                log = self.log_manager.logs[(topic_name, index)]
                check_topic_id(log.directory, topic_name, str(topic.topic_id))

    def _ensure(
        self, key: tuple[str, int], topic: TopicImage, state: PartitionImage
    ) -> tuple[FetchStart | None, bool]:
        """Host ``key`` in the role ``state`` gives it; returns the fetch to start, if
        any, and whether a fetch must stop (it led, or lost its leader)."""
        partition = self.partitions.get(key)
        topic_id = str(topic.topic_id)
        if partition is not None and partition.topic_id != topic_id:
            self._remove(key)  # same name, new topic: the old one was deleted
            partition = None
        if partition is None:
            log = self.log_manager.get_or_create_log(key[0], key[1], topic_id=topic_id)
            partition = Partition(
                key[0], key[1], topic_id, log, self.node_id, lag_time_max_ms=self.lag_time_max_ms
            )
            partition.is_alive = self.broker_alive
            partition.on_follower_append = self.topic_stats.record_replication_in
            self.partitions[key] = partition
        self.not_created.pop(key, None)
        epochs = (state.leader_epoch, state.partition_epoch, state.replicas, state.isr)
        before = (partition.state, partition.leader, partition.leader_epoch)
        if state.leader == self.node_id:
            changed = partition.become_leader(*epochs, self.clock())
            return None, changed and before[0] is FOLLOWER
        if not partition.become_follower(state.leader, *epochs):
            return None, False
        if state.leader < 0:
            return None, before[0] is FOLLOWER  # no leader to fetch from
        if before == (FOLLOWER, state.leader, state.leader_epoch):
            return None, False  # the ISR or replicas changed: the fetch goes on
        return FetchStart(topic.topic_id, state.leader, state.leader_epoch), False

    def _remove(self, key: tuple[str, int], topic_id: str | None = None) -> bool:
        """Drop a hosted partition and delete its log (only if it is ``topic_id``'s)."""
        partition = self.partitions.get(key)
        if partition is None or (topic_id is not None and partition.topic_id != topic_id):
            return False
        del self.partitions[key]
        self.offline.pop(key, None)
        partition.stop()
        if self.fetching is not None:
            self.fetching.remove_partitions([key])
        self.log_manager.delete_log(*key)
        return True

    def broker_alive(self, broker_id: int) -> bool:
        broker = self.image.brokers.get(broker_id)
        return broker is not None and not broker.fenced

    # -- lookups -------------------------------------------------------------------
    def hosted(self, topic: str, index: int) -> Partition:
        """The partition, hosted and online, or the error that says why not."""
        key = (topic, index)
        partition = self.partitions.get(key)
        failure = self.offline.get(key) or self.not_created.get(key)
        if failure is not None:
            raise PartitionError("KAFKA_STORAGE_ERROR", failure)
        if partition is None:
            raise PartitionError(
                "UNKNOWN_TOPIC_OR_PARTITION", f"{topic}-{index} is not hosted here"
            )
        return partition

    def leader_partition(self, topic: str, index: int) -> Partition:
        partition = self.hosted(topic, index)
        partition.check_leader()
        return partition

    def follower_log(self, tp: TopicPartition) -> FollowerLog | None:
        """The replica fetcher's handle on a partition this node follows, else None."""
        partition = self.partitions.get(tp)
        if partition is None or partition.state is not FOLLOWER or tp in self.offline:
            return None
        return partition

    # -- produce -------------------------------------------------------------------
    def append(
        self,
        topic: str,
        index: int,
        records: bytes,
        acks: int,
        *,
        coordinator: bool = False,
        verification_guard: object | None = None,
    ) -> AppendInfo:
        """Append as the leader (phase one of a produce); PartitionError on failure.
        ``coordinator``: a coordinator's write to its own internal topic;
        ``verification_guard``: see ``verification_guard``."""
        partition = self.leader_partition(topic, index)
        info = self._guarded(
            partition,
            lambda: partition.append_as_leader(
                records, acks, coordinator=coordinator, verification_guard=verification_guard
            ),
        )
        if not info.duplicate:  # a recognised retry appends nothing
            self.topic_stats.record_append(topic, info.record_count, info.size)
        return info

    def verification_guard(
        self, topic: str, index: int, producer_id: int, producer_epoch: int
    ) -> tuple[object, bool]:
        """KIP-890 part 1, before a transactional produce: the producer's verification
        guard in this partition's log, and whether the coordinator must first confirm
        that the partition is in the producer's transaction (not when the transaction is
        already open here). PartitionError if this node does not lead the partition."""
        state = self.leader_partition(topic, index).log.producer_state
        return (
            state.verification_guard(producer_id),
            not state.transaction_open(producer_id, producer_epoch),
        )

    def drop_verification(self, topic: str, index: int, producer_id: int, guard: object) -> None:
        """A verification that failed: its guard goes (if still the producer's)."""
        partition = self.partitions.get((topic, index))
        if partition is not None:
            guards = partition.log.producer_state.verification_guards
            if guards.get(producer_id) is guard:
                del guards[producer_id]

    def _guarded(self, partition: Partition, append: Callable[[], AppendInfo]) -> AppendInfo:
        """Run a leader append: a StorageError becomes the PartitionError of its code;
        an OSError takes the partition offline."""
        try:
            return append()
        except StorageError as error:
            raise PartitionError(error.code, str(error)) from None
        except OSError as error:
            # Not a clean failure (a write that failed is cut back and raises
            # StorageError): a roll, an fsync or an index write. What reached the disk
            # is unknown, so the partition stops serving until a restart recovers it.
            topic, index = partition.topic, partition.index
            reason = f"{topic}-{index} is offline: {_reason(error)}; restart to recover it"
            self.offline[(topic, index)] = reason
            partition.go_offline()
            logger.error("%s", reason)
            raise PartitionError("KAFKA_STORAGE_ERROR", reason) from None

    def append_records(
        self,
        topic: str,
        index: int,
        records: bytes,
        acks: int,
        *,
        coordinator: bool = False,
        verification_guard: object | None = None,
    ) -> ProduceStatus:
        """Append, and for acks=all park a waiter until the HW passes the batch."""
        info = self.append(
            topic,
            index,
            records,
            acks,
            coordinator=coordinator,
            verification_guard=verification_guard,
        )
        partition = self.partitions[(topic, index)]
        status = ProduceStatus(info, partition=partition)
        if acks == -1:
            required = info.last_offset + 1
            result = partition.replication_result(required)
            if result is None:
                status.waiter = asyncio.get_running_loop().create_future()
                partition.delay_produce(required, status.waiter)
            else:
                status.error = result
        return status

    async def await_replication(self, statuses: Sequence[ProduceStatus], timeout_ms: int) -> None:
        """Phase two: wait for every parked partition together, up to ``timeout_ms``;
        each status ends with its error (REQUEST_TIMED_OUT for the ones still waiting).

        The task awaits the waiters themselves, one after another, and a timer answers
        the ones still open at the deadline: a waiter the HW completes wakes this task
        on the next loop iteration (``asyncio.wait`` took two, through its own waiter)."""
        parked = [(s, s.waiter) for s in statuses if s.waiter is not None]
        if not parked:
            return
        expired: set[asyncio.Future[str]] = set()

        def expire() -> None:
            for _, waiter in parked:
                if not waiter.done():
                    waiter.set_result("REQUEST_TIMED_OUT")
                    expired.add(waiter)

        timer = asyncio.get_running_loop().call_later(max(timeout_ms, 0) / 1000, expire)
        try:
            for status, waiter in parked:
                status.error = await waiter
                status.waiter = None
        finally:
            timer.cancel()
            for status, waiter in parked:
                if not waiter.done():  # this task was cancelled: nobody waits for it
                    waiter.cancel()
                status.waiter = None
                gone = waiter in expired or waiter.cancelled()
                if gone and status.partition is not None:
                    status.partition.produces.discard(waiter)

    async def append_at_high_watermark(
        self,
        topic: str,
        index: int,
        records: bytes,
        timeout_ms: int = COORDINATOR_APPEND_TIMEOUT_MS,
    ) -> AppendInfo:
        """A coordinator's acks=all append: returns once the HW passed it."""
        status = self.append_records(topic, index, records, -1, coordinator=True)
        await self.await_replication([status], timeout_ms)
        if status.error != "NONE":
            raise PartitionError(status.error, f"{topic}-{index}: append not replicated")
        return status.info

    async def write_marker(
        self,
        topic: str,
        index: int,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        timeout_ms: int = COORDINATOR_APPEND_TIMEOUT_MS,
    ) -> AppendInfo:
        """WriteTxnMarkers for one partition led here: append the control batch and
        return once the HW passed it (acks=all, as Kafka); PartitionError otherwise."""
        partition = self.leader_partition(topic, index)
        info = self._guarded(
            partition,
            lambda: partition.append_marker(producer_id, producer_epoch, coordinator_epoch, commit),
        )
        status = ProduceStatus(info, partition=partition)
        required = info.last_offset + 1
        result = partition.replication_result(required)
        if result is None:
            status.waiter = asyncio.get_running_loop().create_future()
            partition.delay_produce(required, status.waiter)
            await self.await_replication([status], timeout_ms)
            result = status.error
        if result != "NONE":
            raise PartitionError(result, f"{topic}-{index}: marker not replicated ({result})")
        return info

    async def wait_for_high_watermark(self, topic: str, index: int, offset: int) -> None:
        """Return once the partition's HW is at least ``offset``, woken by the advance
        itself (the partition's ``hw_waiters``); PartitionError if this node does not
        lead it, or stops leading it meanwhile (NOT_LEADER_OR_FOLLOWER, or the storage
        error that took it offline). Cancelling the caller forgets the waiter."""
        partition = self.leader_partition(topic, index)
        if partition.log.high_watermark >= offset:
            return
        waiter: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        partition.hw_waiters.add(offset, waiter)
        try:
            result = await waiter
        finally:
            partition.hw_waiters.discard(waiter)
        if result != "NONE":
            raise PartitionError(
                result, f"{topic}-{index}: {result} before the HW reached {offset}"
            )

    def describe_producers(self, topic: str, index: int) -> list[ProducerView]:
        """DescribeProducers: the active producers of a partition led here."""
        partition = self.leader_partition(topic, index)
        return [
            ProducerView(
                e.producer_id,
                e.epoch,
                e.last_seq,
                e.last_timestamp,
                e.coordinator_epoch,
                e.current_txn_first_offset,
            )
            for e in partition.log.producer_state.producers.values()
        ]

    def conversion(self, topic: str, index: int, records: bytes) -> Callable[[], bytes] | None:
        """Recompression to run on a worker thread before ``append``, or None (see
        log_validator.conversion); None too when the partition is not here (``append``
        reports that)."""
        partition = self.partitions.get((topic, index))
        if partition is None:
            return None
        log = partition.log
        return conversion(records, log.config, log.clock(), name=log.name)

    # -- ISR changes -----------------------------------------------------------------
    def _send_proposal(self, partition: Partition) -> None:
        proposal = partition.take_proposal()
        if proposal is None:
            return
        if self.isr_manager is None:  # nobody to ask: back to the committed ISR
            partition.on_isr_outcome(proposal, IsrOutcome("OPERATION_NOT_ATTEMPTED"))
            return

        def deliver(sent: IsrProposal, outcome: IsrOutcome) -> None:
            partition.on_isr_outcome(sent, outcome)

        self.isr_manager.submit(proposal, deliver)

    def maybe_shrink_isr(self) -> None:
        """Propose dropping lagging followers from every partition this node leads."""
        now = self.clock()
        for partition in self.partitions.values():
            if partition.is_leader and partition.maybe_shrink_isr(now):
                self._send_proposal(partition)

    async def isr_expiration(self) -> None:
        """Run ``maybe_shrink_isr`` every half ``replica.lag.time.max.ms``, as Kafka,
        and the AlterPartitionManager's sends meanwhile (the broker starts this task)."""
        if self.isr_manager is not None:
            self.isr_manager.start()
        try:
            while True:
                await asyncio.sleep(max(self.lag_time_max_ms, 2) / 2000)
                self.maybe_shrink_isr()
        finally:
            if self.isr_manager is not None:
                await self.isr_manager.close()

    # -- fetch (served by FetchService, replica/fetch_service.py) ------------------
    def stop_waiting(self) -> None:
        """Shutdown: wake every parked fetch so it answers now instead of at max_wait,
        and answer parked acks=all produces NOT_LEADER_OR_FOLLOWER (the client retries
        on the next leader) instead of holding the shutdown for their timeout."""
        self.closing = True
        for partition in self.partitions.values():
            partition.stop("NOT_LEADER_OR_FOLLOWER")

    # -- offsets -------------------------------------------------------------------
    def offset_for_timestamp(
        self,
        topic: str,
        index: int,
        timestamp: int,
        current_leader_epoch: int = -1,
        isolation_level: int | None = None,
    ) -> tuple[int, int, int]:
        """ListOffsets on the leader: (timestamp, offset, leader epoch)."""
        partition = self.hosted(topic, index)
        return partition.offset_for_timestamp(timestamp, current_leader_epoch, isolation_level)

    async def build_tier_state(self, tp: TopicPartition, local_start: int, epoch: int) -> bool:
        """KIP-405: a follower lacking what only remote storage holds restarts at its
        leader's local log start ``local_start`` (storage/remote/follower_state.py);
        the replica fetcher calls this on OFFSET_MOVED_TO_TIERED_STORAGE."""
        partition = self.partitions.get(tp)
        rlm = self.remote_log_manager
        if partition is None or rlm is None or partition.state is not FOLLOWER:
            return False
        log = partition.log
        if not log.config.remote_storage_enable:
            return False
        tip = TopicIdPartition(uuid.UUID(str(partition.topic_id)), tp[0], tp[1])
        return await build_follower_state(rlm.rlmm, rlm.rsm, tip, log, local_start, epoch)

    async def remote_offset_for_timestamp(
        self, topic: str, index: int, timestamp: int, local: tuple[int, int, int]
    ) -> tuple[int, int, int]:
        """Tiered storage (KIP-405): a ListOffsets by timestamp whose answer may lie
        below the local log, looked up in remote storage off the loop; ``local`` (the
        local log's answer) stands when the remote part has no record that recent."""
        partition = self.partitions.get((topic, index))
        if timestamp < 0 or self.remote_log_manager is None or partition is None:
            return local
        log = partition.log
        if not log.config.remote_storage_enable:
            return local
        if log.log_start_offset >= log.local_log_start_offset:
            return local
        tp = TopicIdPartition(uuid.UUID(str(partition.topic_id)), topic, index)
        try:
            found = await self.remote_log_manager.find_offset_for_timestamp(tp, log, timestamp)
        except StorageError as error:
            raise PartitionError("KAFKA_STORAGE_ERROR", str(error)) from None
        if found is None:
            return local
        offset, found_timestamp = found
        return found_timestamp, offset, epoch_at(log, offset, partition.leader_epoch)

    def last_offset_for_leader_epoch(
        self, topic: str, index: int, current_leader_epoch: int, requested_epoch: int
    ) -> tuple[int, int]:
        """OffsetForLeaderEpoch on the leader: (largest epoch <= requested, end offset)."""
        partition = self.hosted(topic, index)
        return partition.last_offset_for_leader_epoch(current_leader_epoch, requested_epoch)

    async def delete_records(
        self, wanted: Sequence[tuple[str, int, int]], timeout_ms: int
    ) -> list[tuple[int, str]]:
        """DeleteRecords, two-phase like produce: move each partition's log start, then
        wait until the live replicas' log starts (the low watermark) passed it, up to
        ``timeout_ms``. (low watermark, error name) per (topic, partition, offset)."""
        results: list[tuple[int, str]] = []
        waiting: list[tuple[int, Partition, asyncio.Future[int | str]]] = []
        for topic, index, offset in wanted:
            try:
                partition = self.hosted(topic, index)
                required = partition.delete_records_before(offset)
            except PartitionError as error:
                results.append((-1, error.code))
                continue
            low = partition.low_watermark()
            results.append((low, "NONE"))
            if low < required:
                waiter: asyncio.Future[int | str] = asyncio.get_running_loop().create_future()
                partition.delay_delete_records(required, waiter)
                waiting.append((len(results) - 1, partition, waiter))
        if waiting:
            await asyncio.wait([w for _, _, w in waiting], timeout=max(timeout_ms, 0) / 1000)
        for slot, partition, waiter in waiting:
            if not waiter.done():
                partition.deletes.discard(waiter)
                waiter.cancel()
                results[slot] = (-1, "REQUEST_TIMED_OUT")
            elif isinstance(outcome := waiter.result(), str):
                results[slot] = (-1, outcome)
            else:
                results[slot] = (outcome, "NONE")
        return results


def _assigned(
    image: MetadataImage, key: tuple[str, int], node_id: int
) -> tuple[TopicImage, PartitionImage] | None:
    topic = image.topics.get(key[0])
    state = topic.partitions.get(key[1]) if topic is not None else None
    if topic is None or state is None or node_id not in state.replicas:
        return None
    return topic, state


def _reason(error: BaseException) -> str:
    """An I/O error in a few words (``No space left on device: /path``), no traceback."""
    if isinstance(error, OSError) and error.strerror:
        return f"{error.strerror}: {error.filename}" if error.filename else error.strerror
    return str(error)
