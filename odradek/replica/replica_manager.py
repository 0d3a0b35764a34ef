"""ReplicaManager: the partitions this broker hosts, appends with acks, fetch waits.

How this works and why: the broker acts on metadata deltas (metadata/delta.py) — a
partition newly assigned to this node gets a Partition backed by a storage Log, one
whose state changed is updated, and only the logs of topics the delta says were
deleted (or partitions it moved away from here) are deleted; a partition no delta
names is not looked at. Nothing is created or deleted before the metadata has caught
up (``catch_up``): an image that lags does not know topics created since, and must
not decide that their logs are garbage. At catch-up the whole image is applied once,
and a log on disk it does not know is set aside (renamed, kept), never deleted.
A Partition knows whether it leads, its leader epoch and ISR, and keeps the
high watermark: the smallest log end offset in the ISR (seeds/004). With a single
replica the ISR is the leader alone, so the HW follows the log end offset as soon as
an append returns; the replication issue adds followers' fetch positions here.

Fetch long polling (the purgatory of seeds/000): a fetch that finds fewer than
``min_bytes`` parks a future on each partition it reads; an append to any of them
wakes it, and it reads again until ``max_wait_ms`` runs out.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from odradek.metadata.delta import MetadataDelta, between
from odradek.metadata.image import MetadataImage, PartitionImage, TopicImage
from odradek.storage.errors import StorageError
from odradek.storage.log import AppendInfo, Log
from odradek.storage.log_config import LogConfig
from odradek.storage.log_manager import LogManager
from odradek.storage.log_validator import conversion
from odradek.storage.partition_metadata import check_topic_id

logger = logging.getLogger(__name__)


class PartitionError(Exception):
    """An error for one partition in a request; ``code`` is the Kafka error name."""

    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(message or code)
        self.code = code


@dataclass(slots=True)
class Partition:
    topic: str
    index: int
    topic_id: str
    log: Log
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    waiters: set[asyncio.Future[None]] = field(default_factory=set)

    def is_leader(self, node_id: int) -> bool:
        return self.leader == node_id

    def update_high_watermark(self) -> None:
        """HW = min LEO over the ISR; with only the leader in sync, the leader's LEO."""
        self.log.high_watermark = self.log.log_end_offset

    def wake_waiters(self) -> None:
        for waiter in self.waiters:
            if not waiter.done():
                waiter.set_result(None)
        self.waiters.clear()


class ReplicaManager:
    def __init__(self, node_id: int, log_manager: LogManager) -> None:
        self.node_id = node_id
        self.log_manager = log_manager
        self.partitions: dict[tuple[str, int], Partition] = {}
        # Partitions answered with KAFKA_STORAGE_ERROR: ``offline`` ones had an I/O
        # error in their log (disk full, EIO) with its state on disk unknown, until a
        # restart recovers them; ``not_created`` ones are in the metadata but their log
        # could not be created here, until a later metadata change or restart does it.
        self.offline: dict[tuple[str, int], str] = {}
        self.not_created: dict[tuple[str, int], str] = {}
        self.closing = False  # shutdown: fetches stop long-polling
        self.caught_up = False  # set by catch_up(); deltas before it are not acted on

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
        topic id, so a re-created namesake is not touched), create or update the
        partitions whose state changed, retry logs that could not be created."""
        if not self.caught_up:
            return  # catch_up() applies the whole image once it is known complete
        for topic in delta.deleted_topics.values():
            for index in topic.partitions:
                self._remove((topic.name, index), str(topic.topic_id))
                self.not_created.pop((topic.name, index), None)
        wanted: dict[tuple[str, int], tuple[TopicImage, PartitionImage]] = {}
        for change in delta.partitions.values():
            key = (change.topic.name, change.new.partition)
            if self.node_id in change.new.replicas:
                wanted[key] = (change.topic, change.new)
            elif change.old is not None and self.node_id in change.old.replicas:
                self._remove(key, str(change.topic.topic_id))  # moved away from here
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
        for key, (topic, state) in wanted.items():
            try:
                self._ensure(key, topic, state)
            except (OSError, StorageError) as error:
                # The metadata is committed; the log is not here. Retried on the next
                # metadata change and at start-up; meanwhile clients get a storage error.
                reason = f"{key[0]}-{key[1]}: cannot create its log: {_reason(error)}"
                self.not_created[key] = reason
                logger.error("%s", reason)

    def check_loaded_logs(self, image: MetadataImage) -> None:
        """Start-up, before anything is committed: every log found on disk whose topic the
        metadata knows must carry that topic's id, else PartitionMetadataError (refusal)."""
        for topic_name, index in list(self.log_manager.logs):
            topic = image.topics.get(topic_name)
            if topic is not None and index in topic.partitions:
                log = self.log_manager.logs[(topic_name, index)]
                check_topic_id(log.directory, topic_name, str(topic.topic_id))

    def _ensure(self, key: tuple[str, int], topic: TopicImage, state: PartitionImage) -> None:
        partition = self.partitions.get(key)
        topic_id = str(topic.topic_id)
        if partition is not None and partition.topic_id != topic_id:
            self._remove(key)  # same name, new topic: the old one was deleted
            partition = None
        if partition is None:
            log = self.log_manager.get_or_create_log(key[0], key[1], topic_id=topic_id)
            partition = Partition(
                key[0],
                key[1],
                topic_id,
                log,
                state.leader,
                state.leader_epoch,
                state.replicas,
                state.isr,
            )
            self.partitions[key] = partition
        partition.leader = state.leader
        partition.leader_epoch = state.leader_epoch
        partition.replicas = state.replicas
        partition.isr = state.isr
        if partition.is_leader(self.node_id):
            partition.update_high_watermark()
        self.not_created.pop(key, None)

    def _remove(self, key: tuple[str, int], topic_id: str | None = None) -> None:
        """Drop a hosted partition and delete its log (only if it is ``topic_id``'s)."""
        partition = self.partitions.get(key)
        if partition is None or (topic_id is not None and partition.topic_id != topic_id):
            return
        del self.partitions[key]
        self.offline.pop(key, None)
        partition.wake_waiters()
        self.log_manager.delete_log(*key)

    # -- lookups -------------------------------------------------------------------
    def leader_partition(self, topic: str, index: int) -> Partition:
        key = (topic, index)
        partition = self.partitions.get(key)
        failure = self.offline.get(key) or self.not_created.get(key)
        if failure is not None:
            raise PartitionError("KAFKA_STORAGE_ERROR", failure)
        if partition is None:
            raise PartitionError(
                "UNKNOWN_TOPIC_OR_PARTITION", f"{topic}-{index} is not hosted here"
            )
        if not partition.is_leader(self.node_id):
            raise PartitionError("NOT_LEADER_OR_FOLLOWER", f"not the leader of {topic}-{index}")
        return partition

    # -- produce -------------------------------------------------------------------
    def append(self, topic: str, index: int, records: bytes, acks: int) -> AppendInfo:
        partition = self.leader_partition(topic, index)
        config: LogConfig = partition.log.config
        if acks == -1 and len(partition.isr) < config.min_insync_replicas:
            raise PartitionError(
                "NOT_ENOUGH_REPLICAS",
                f"ISR {list(partition.isr)} is smaller than min.insync.replicas="
                f"{config.min_insync_replicas}",
            )
        try:
            info = partition.log.append_as_leader(records, partition.leader_epoch)
        except StorageError as error:
            raise PartitionError(error.code, str(error)) from None
        except OSError as error:
            # Not a clean failure (a write that failed is cut back and raises
            # StorageError): a roll, an fsync or an index write. What reached the disk
            # is unknown, so the partition stops serving until a restart recovers it.
            reason = f"{topic}-{index} is offline: {_reason(error)}; restart to recover it"
            self.offline[(topic, index)] = reason
            partition.wake_waiters()
            logger.error("%s", reason)
            raise PartitionError("KAFKA_STORAGE_ERROR", reason) from None
        partition.update_high_watermark()
        partition.wake_waiters()
        return info

    def conversion(self, topic: str, index: int, records: bytes) -> Callable[[], bytes] | None:
        """Recompression to run on a worker thread before ``append``, or None (see
        log_validator.conversion); None too when the partition is not here (``append``
        reports that)."""
        partition = self.partitions.get((topic, index))
        if partition is None:
            return None
        log = partition.log
        return conversion(records, log.config, log.clock(), name=log.name)

    # -- fetch waits ------------------------------------------------------------------
    def stop_waiting(self) -> None:
        """Shutdown: wake every parked fetch so it answers now instead of at max_wait."""
        self.closing = True
        for partition in self.partitions.values():
            partition.wake_waiters()

    async def wait_for_data(self, partitions: Iterable[Partition], timeout_s: float) -> None:
        """Return when any of ``partitions`` gets an append, or after ``timeout_s``."""
        if timeout_s <= 0 or self.closing:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        watched = list(partitions)
        for partition in watched:
            partition.waiters.add(waiter)
        try:
            await asyncio.wait_for(asyncio.shield(waiter), timeout_s)
        except TimeoutError:
            pass
        finally:
            for partition in watched:
                partition.waiters.discard(waiter)


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
