"""FetchService: a broker's Fetch — consumers and followers, long polls, KIP-392.

How this works and why (seeds/000 purgatory; KIP-392; Kafka's ReplicaManager.fetchMessages):
``fetch`` reads every partition of a Fetch through its hosted ``Partition`` (the
partition checks epochs and leadership, and a follower's read is what moves its
position and the HW), then long-polls until ``min_bytes`` arrive, an error or a
diverging epoch is to be reported, or ``max_wait_ms`` runs out. A parked fetch watches
the partitions it read (``FetchWatchers`` in purgatory.py): consumers wake when a HW
advances, followers when a log end does; a timer answers at the deadline, and a
broker shutting down (``closing``) answers at once with what there is. After a
follower's read the partition may have an ISR expansion to propose; it goes out
through the owner's ``_send_proposal``.

Fetch from the closest replica (KIP-392): a consumer Fetch v11+ carries the client's
rack; the leader asks ``replica.selector.class`` (replica/replica_selector.py) and,
if it prefers an in-sync follower, answers that partition at once with
``preferred_read_replica`` and no records. Such a consumer may then fetch from the
follower, which serves it below its own HW. ListOffsets stays with the leader.

Replication quotas (KIP-73, replica/replication_quota.py): a follower's read of a
throttled partition answers no records while ``leader.replication.throttled.rate`` is
exceeded and that follower is not in the ISR (so it does not count toward min_bytes),
and the bytes of throttled partitions a follower is sent count against the rate.

Tiered storage (KIP-405): a consumer read below a tiered partition's local log start
comes back from the partition as a ``RemoteFetch``; ``fetch`` then awaits the
RemoteLogManager's reads (its reader thread pool) and answers at once with their
bytes as ``MemoryRange``s, without long-polling (Kafka's remote-fetch purgatory).

A mixin of ``ReplicaManager`` (replica/replica_manager.py), split from it so the
manager keeps the metadata-driven roles and the produce path: the fetch path reads the
manager's hosted partitions, clock, selector and current image, declared below, and
sends ISR proposals through it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from odradek.metadata.image import MetadataImage
from odradek.records.file_range import MemoryRange
from odradek.replica.partition import Partition, PartitionError
from odradek.replica.reads import FetchParams, FetchPosition, FetchResults, PartitionRead
from odradek.replica.replica_selector import ReplicaSelector, preferred_read_replica
from odradek.replica.replication_quota import ReplicationQuota, leader_throttled, record_sent
from odradek.replica.topic_stats import BrokerTopicStats
from odradek.storage.errors import OffsetOutOfRangeError, StorageError
from odradek.storage.remote.log_manager import RemoteLogManager
from odradek.storage.remote.reader import RemoteRead

logger = logging.getLogger(__name__)


class FetchService:
    """A broker's Fetch over its hosted partitions; mixed into ``ReplicaManager``."""

    # The ReplicaManager's, read here (replica/replica_manager.py sets them).
    node_id: int
    clock: Callable[[], int]
    replica_selector: ReplicaSelector | None
    image: MetadataImage  # the last one applied: brokers' racks
    closing: bool  # shutdown: fetches stop long-polling
    leader_quota: ReplicationQuota | None  # KIP-73 (replication_quota.py)
    remote_log_manager: RemoteLogManager | None  # KIP-405: reads below the local log
    topic_stats: BrokerTopicStats  # BytesOut / ReplicationBytesOut (topic_stats.py)

    def hosted(self, topic: str, index: int) -> Partition:
        raise NotImplementedError

    def broker_alive(self, broker_id: int) -> bool:
        raise NotImplementedError

    def _send_proposal(self, partition: Partition) -> None:
        raise NotImplementedError

    async def fetch(self, params: FetchParams) -> FetchResults:
        """Read every partition of a Fetch; wait (long poll) until ``min_bytes`` are
        there, an error or a diverging epoch is to be reported, or ``max_wait_ms``."""
        deadline = self.clock() + params.max_wait_ms
        while True:
            results, watched, total, final = self._read_all(params)
            if any(read.remote for _, reads in results for _, read in reads):
                await self._read_remote(results)  # answered once the remote reads are in
                break
            remaining = deadline - self.clock()
            if final or total >= params.min_bytes or remaining <= 0 or not watched:
                break
            if self.closing:  # shutting down: answer with what there is
                break
            await self._wait(watched, params.from_follower, remaining / 1000)
        if params.from_follower:  # KIP-73 hook: the bytes sent count against the quota
            record_sent(self.leader_quota, results)
        self.topic_stats.record_fetch(results, params.from_follower)
        return results

    def _read_all(self, params: FetchParams) -> tuple[FetchResults, list[Partition], int, bool]:
        budget = params.max_bytes
        results: FetchResults = []
        watched: list[Partition] = []
        total, final = 0, False
        now = self.clock()
        for name, positions in params.topics:
            partitions: list[tuple[int, PartitionRead]] = []
            for index, position in positions:
                try:
                    partition = self.hosted(name, index)
                    preferred = self._preferred_read_replica(partition, position, params, now)
                    if preferred is not None:  # KIP-392: no records, go there instead
                        partitions.append((index, preferred))
                        final = True
                        continue
                    read = partition.read(
                        position,
                        params.replica_id,
                        params.replica_epoch,
                        now,
                        max_bytes=min(position.max_bytes, budget),
                        min_one_batch=total == 0,
                        leader_only=params.leader_only,
                        isolation_level=params.isolation_level,
                    )
                    if params.from_follower:  # KIP-73 hook: no records while over quota
                        read = leader_throttled(
                            self.leader_quota, name, index, partition.isr, params.replica_id, read
                        )
                    if params.from_follower:
                        self._send_proposal(partition)  # it may have rejoined the ISR
                except PartitionError as error:
                    read = PartitionRead(error.code)
                except StorageError as error:
                    read = PartitionRead(error.code)
                if read.error != "NONE" or read.diverging_epoch is not None:
                    final = True
                else:
                    total += read.size
                    budget -= read.size
                    watched.append(partition)
                partitions.append((index, read))
            results.append((name, partitions))
        return results, watched, total, final

    async def _read_remote(self, results: FetchResults) -> None:
        """Complete the reads below tiered partitions' local logs from remote storage
        (KIP-405; Kafka's remote-fetch purgatory): the RemoteLogManager reads on its
        reader pool while the loop serves other requests."""
        reads = [read for _, partitions in results for _, read in partitions if read.remote]
        # One remote read per request, as Kafka: the others answer no records now (their
        # clients ask again), so a response stays within its max bytes.
        for later in reads[1:]:
            later.remote = None
        reads = reads[:1]
        done = await asyncio.gather(
            *(self._read_one_remote(read) for read in reads), return_exceptions=True
        )
        for read, outcome in zip(reads, done, strict=True):
            read.remote = None
            if isinstance(outcome, OffsetOutOfRangeError):
                read.error = "OFFSET_OUT_OF_RANGE"
            elif isinstance(outcome, BaseException):
                logger.warning("remote read failed: %s", outcome)
                read.error = "KAFKA_STORAGE_ERROR"
            else:
                if outcome.data:
                    read.ranges = [MemoryRange(outcome.data)]
                if outcome.aborted is not None:
                    read.aborted = [(a.producer_id, a.first_offset) for a in outcome.aborted]

    async def _read_one_remote(self, read: PartitionRead) -> RemoteRead:
        remote = read.remote
        assert remote is not None
        if self.remote_log_manager is None:
            raise StorageError(f"{remote.tp}: tiered, but remote storage is disabled here")
        return await self.remote_log_manager.read(
            remote.tp,
            remote.log,
            remote.offset,
            remote.max_bytes,
            remote.min_one_batch,
            remote.committed,
        )

    def _preferred_read_replica(
        self, partition: Partition, position: FetchPosition, params: FetchParams, now: int
    ) -> PartitionRead | None:
        """KIP-392 on the leader: when the selector prefers a follower for this consumer
        (its rack), the answer that sends it there — watermarks, no records, as Kafka —
        else None (read here). Epochs are checked first, as for any read."""
        if self.replica_selector is None or params.leader_only or not partition.is_leader:
            return None
        partition.check_leader(position.current_leader_epoch)
        assert params.client_rack is not None  # leader_only otherwise
        chosen = preferred_read_replica(
            self.replica_selector,
            params.client_rack,
            position.fetch_offset,
            self.node_id,
            partition.log.log_end_offset,
            partition.isr,
            partition.follower_progress(now),
            self._rack_of,
            self.broker_alive,
        )
        if chosen is None:
            return None
        log = partition.log
        return PartitionRead(
            high_watermark=log.high_watermark,
            last_stable_offset=log.last_stable_offset,
            log_start_offset=log.log_start_offset,
            preferred_read_replica=chosen,
        )

    def _rack_of(self, broker_id: int) -> str | None:
        broker = self.image.brokers.get(broker_id)
        return broker.rack if broker is not None else None

    async def _wait(self, partitions: list[Partition], follower: bool, timeout_s: float) -> None:
        """Return when a watched partition moves (its HW for consumers, its log end for
        followers), or after ``timeout_s``. The task awaits the waiter the partitions
        complete, so a wake-up resumes it on the next loop iteration (``wait_for`` over
        ``shield`` took three); a timer completes the waiter at the deadline."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        for partition in partitions:
            partition.fetches.watch(waiter, follower=follower)
        timer = loop.call_later(timeout_s, _complete, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            for partition in partitions:
                partition.fetches.discard(waiter)


def _complete(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
