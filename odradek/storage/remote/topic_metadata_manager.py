"""TopicBasedRemoteLogMetadataManager: remote segment metadata shared through a topic.

How this works and why: KIP-405 keeps the life of every remote segment (COPY_SEGMENT_
STARTED, ..., DELETE_SEGMENT_FINISHED) in the internal topic ``__remote_log_metadata``
so that every replica of a tiered partition sees the same remote segments: a follower
that becomes leader continues copying where the old leader stopped, and a follower
knows which of its local segments are already remote. This manager is that, with the
same record format (metadata_records.py) Kafka's TopicBasedRemoteLogMetadataManager
writes, to the partition ``metadata_partition_for(topic id, partition)``.

* Publishing (the copier's ``add_``/``update_remote_log_segment_metadata``, from a
  worker thread): the event is produced to its metadata partition with acks=all, and
  the call returns only once this broker's own consumer has read it back and applied
  it to the cache, as Kafka waits: the listing the copier reads next always includes
  its own last event.
* Consuming: one task reads every metadata partition this broker was asked about
  (``ready``: the partitions of the user partitions it hosts, leader or follower)
  from its beginning (retention -1), applying each event to the
  RemoteLogMetadataCache of its user partition. ``ready(tp)`` waits until the
  metadata partition of ``tp`` is read up to the end it had when asked, so a new
  leader never copies from a half-read history.
* Lookups (the copier, the remote read path, the follower's tier state builder) are
  answered from the caches under a lock, on any thread; an unknown partition has no
  remote segments.

Events that break the state machine (an old leader's late event after a new
leader's) are logged and skipped; the cache stays as it was, the same on every
broker, since every broker applies the same events in the same order.

The Kafka client side (producer, consumer, creating the topic) is a
``MetadataTransport`` given by the broker (server/remote_metadata_transport.py), so
this module does no network I/O of its own and is tested with an in-memory one.

Concurrency: the consumer task and ``publish`` run on the broker's event loop (given
to ``start``); the synchronous Protocol methods are called from worker threads and
block on the loop (never call them on the loop itself).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Collection
from typing import Final, Protocol

from odradek.storage.errors import StorageError
from odradek.storage.remote.metadata import (
    RemoteLogMetadata,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)
from odradek.storage.remote.metadata_cache import RemoteLogMetadataCache
from odradek.storage.remote.metadata_records import (
    RemoteLogMetadataFormatError,
    deserialize,
    metadata_partition_for,
    serialize,
)

logger = logging.getLogger(__name__)

TOPIC: Final = "__remote_log_metadata"
PUBLISH_TIMEOUT_S: Final = 60.0
POLL_TIMEOUT_S: Final = 0.2
CLOSE_TIMEOUT_S: Final = 5.0


class MetadataTransport(Protocol):
    """The Kafka client side of ``__remote_log_metadata`` (server-provided)."""

    async def produce(self, partition: int, value: bytes) -> int:
        """Write one record (acks=all, creating the topic first if needed); its offset."""
        ...

    async def assign(self, partitions: Collection[int]) -> None:
        """Consume these partitions; new ones from their beginning."""
        ...

    async def poll(self, timeout_s: float) -> list[tuple[int, int, bytes]]:
        """Records read since the last poll: (partition, offset, value)."""
        ...

    async def end_offset(self, partition: int) -> int:
        """The partition's high watermark (0 if the topic does not exist yet)."""
        ...

    async def close(self) -> None: ...


class TopicBasedRemoteLogMetadataManager:
    def __init__(
        self,
        transport: MetadataTransport,
        *,
        num_partitions: int = 50,
        broker_id: int = -1,
        publish_timeout_s: float = PUBLISH_TIMEOUT_S,
    ) -> None:
        self.transport = transport
        self.num_partitions = num_partitions
        self.broker_id = broker_id
        self.publish_timeout_s = publish_timeout_s
        self._lock = threading.Lock()
        self._caches: dict[TopicIdPartition, RemoteLogMetadataCache] = {}
        self._assigned: set[int] = set()
        self._applied: dict[int, int] = {}  # metadata partition -> next offset to apply
        self._progress: asyncio.Condition | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._consumer: asyncio.Task[None] | None = None
        self._closing = threading.Event()  # set by ``stop``: blocked publishes give up

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> None:
        """Start the consumer task on the running loop."""
        self._loop = asyncio.get_running_loop()
        self._progress = asyncio.Condition()
        self._consumer = self._loop.create_task(self._consume())

    async def stop(self) -> None:
        """Publishes still waiting fail at once; the consumer and the clients stop
        (within CLOSE_TIMEOUT_S: the metadata partitions' leaders may be gone)."""
        self._closing.set()
        if self._consumer is not None:
            self._consumer.cancel()
            await asyncio.gather(self._consumer, return_exceptions=True)
            self._consumer = None
        try:
            await asyncio.wait_for(self.transport.close(), CLOSE_TIMEOUT_S)
        except TimeoutError:
            logger.warning("%s: clients not closed within %.0f s", TOPIC, CLOSE_TIMEOUT_S)

    def close(self) -> None:
        """The RemoteLogManager's close (from any thread): the caches go; ``stop`` ends
        the consumer and the clients on the loop."""
        with self._lock:
            self._caches.clear()

    def partition_for(self, tp: TopicIdPartition) -> int:
        return metadata_partition_for(tp.topic_id, tp.partition, self.num_partitions)

    # -- on the loop -------------------------------------------------------------------
    async def _track(self, partition: int) -> None:
        if partition not in self._assigned:
            self._assigned.add(partition)
            self._applied.setdefault(partition, 0)
            await self.transport.assign(sorted(self._assigned))

    async def _wait_applied(self, partition: int, offset: int) -> None:
        """Until the consumer applied everything below ``offset`` of ``partition``."""
        assert self._progress is not None, "start() first"
        async with self._progress:
            await self._progress.wait_for(lambda: self._applied.get(partition, 0) >= offset)

    async def ready(self, tp: TopicIdPartition) -> None:
        """Wait until ``tp``'s metadata partition is read up to its current end."""
        partition = self.partition_for(tp)
        await self._track(partition)
        end = await self.transport.end_offset(partition)
        await self._wait_applied(partition, end)

    async def publish(self, message: RemoteLogMetadata) -> None:
        """Produce ``message`` and wait until this broker's consumer applied it."""
        partition = self.partition_for(message.topic_id_partition)
        await self._track(partition)
        offset = await self.transport.produce(partition, serialize(message))
        await self._wait_applied(partition, offset + 1)

    async def _consume(self) -> None:
        assert self._progress is not None
        while True:
            try:
                records = await self.transport.poll(POLL_TIMEOUT_S)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # the broker starting, a leader moving
                logger.debug("%s: poll failed: %s", TOPIC, error)
                await asyncio.sleep(POLL_TIMEOUT_S)
                continue
            if not records:
                continue
            with self._lock:
                for partition, offset, value in records:
                    if offset < self._applied.get(partition, 0):
                        continue  # read again after a reassignment
                    self._apply(partition, offset, value)
                    self._applied[partition] = offset + 1
            async with self._progress:
                self._progress.notify_all()

    def _apply(self, partition: int, offset: int, value: bytes) -> None:
        """One event into its partition's cache (lock held); a bad one is skipped."""
        try:
            message = deserialize(value)
            tp = message.topic_id_partition
            cache = self._caches.get(tp)
            if cache is None:
                cache = self._caches[tp] = RemoteLogMetadataCache(tp)
            cache.apply(message)
        except (RemoteLogMetadataFormatError, StorageError, ValueError) as error:
            logger.warning("%s-%d offset %d: event skipped: %s", TOPIC, partition, offset, error)

    # -- the RemoteLogMetadataManager protocol (worker threads) ---------------------
    def _blocking_publish(self, message: RemoteLogMetadata) -> None:
        loop = self._loop
        if loop is None:
            raise StorageError(f"{TOPIC}: the metadata manager is not started")
        if self._closing.is_set():
            raise StorageError(f"{TOPIC}: the metadata manager is stopping")
        future = asyncio.run_coroutine_threadsafe(self.publish(message), loop)
        deadline = time.monotonic() + self.publish_timeout_s
        while True:
            try:
                future.result(0.1)
                return
            except TimeoutError:
                if self._closing.is_set() or time.monotonic() > deadline:
                    future.cancel()
                    why = "is stopping" if self._closing.is_set() else "timed out"
                    raise StorageError(f"{TOPIC}: publishing {why}") from None

    def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None:
        if metadata.state != RemoteLogSegmentState.COPY_SEGMENT_STARTED:
            raise ValueError(f"{metadata.remote_log_segment_id}: a new segment must be started")
        self._blocking_publish(metadata)

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        self._blocking_publish(update)

    def remote_log_segment_metadata(
        self, tp: TopicIdPartition, leader_epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        with self._lock:
            cache = self._caches.get(tp)
            return None if cache is None else cache.segment_for(leader_epoch, offset)

    def list_remote_log_segments(
        self, tp: TopicIdPartition, states: Collection[RemoteLogSegmentState] | None = None
    ) -> list[RemoteLogSegmentMetadata]:
        with self._lock:
            cache = self._caches.get(tp)
            return [] if cache is None else cache.list_segments(states=states)

    def highest_offset_for_epoch(self, tp: TopicIdPartition, leader_epoch: int) -> int | None:
        with self._lock:
            cache = self._caches.get(tp)
            return None if cache is None else cache.highest_offset_for_epoch(leader_epoch)

    def remove_partition(self, tp: TopicIdPartition) -> None:
        """DELETE_PARTITION_MARKED, _STARTED, _FINISHED (its segments are deleted by then)."""
        for state in (
            RemotePartitionDeleteState.DELETE_PARTITION_MARKED,
            RemotePartitionDeleteState.DELETE_PARTITION_STARTED,
            RemotePartitionDeleteState.DELETE_PARTITION_FINISHED,
        ):
            self._blocking_publish(
                RemotePartitionDeleteMetadata(tp, state, int(time.time() * 1000), self.broker_id)
            )
