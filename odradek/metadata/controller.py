"""The controller: validates cluster changes and commits them to ``__cluster_metadata``.

How this works and why: the controller is the only writer of the metadata log.
Requests that change the cluster (create/delete topics, add partitions, alter
configs, register a broker, allocate producer ids) are validated against the current
image, turned into records, appended as one batch, fsynced, and only then applied to
the image and announced to listeners (the broker, which creates or deletes logs). A
crash before the fsync loses the change but the client got no success either; after
it, replay on restart rebuilds exactly the same image.

Today there is one voter (this node, in combined mode), so "committed" means
"durable on this node"; the controller-quorum issue replaces ``_commit`` with Raft
replication without changing the rest.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from odradek.metadata.image import (
    BROKER_RESOURCE,
    PRODUCER_ID_BLOCK_SIZE,
    TOPIC_RESOURCE,
    ImageReplay,
    MetadataImage,
    MetadataRecord,
)
from odradek.records.codec import Record, decode_batch, encode_batch
from odradek.storage.errors import CommittedDataCorruptError, LogConfigError, StorageError
from odradek.storage.log import Log
from odradek.storage.log_config import LogConfig

logger = logging.getLogger(__name__)

METADATA_TOPIC: Final = "__cluster_metadata"
CONTROLLER_EPOCH: Final = 1  # single voter; the quorum issue makes this a Raft epoch
MAX_TOPIC_NAME_LENGTH: Final = 249
# Kafka's controller limit (KAFKA-17870): one request may not create more partitions
# than this, which also keeps a hostile count from building billions of assignments.
MAX_PARTITIONS_PER_REQUEST: Final = 10_000
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
INTERNAL_TOPICS: Final = frozenset({"__consumer_offsets", "__transaction_state"})

Listener = Callable[[MetadataImage, MetadataImage], None]


class ControllerError(Exception):
    """A rejected change; ``code`` is the Kafka error name, the message is for clients."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class NewTopic:
    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignments: Mapping[int, Sequence[int]] | None = None
    configs: Mapping[str, str | None] | None = None


def validate_topic_name(name: str) -> None:
    if not name or name in (".", ".."):
        raise ControllerError("INVALID_TOPIC_EXCEPTION", f"topic name {name!r} is illegal")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise ControllerError(
            "INVALID_TOPIC_EXCEPTION",
            f"topic name is {len(name)} characters, longer than {MAX_TOPIC_NAME_LENGTH}",
        )
    if not _LEGAL_TOPIC.match(name):
        raise ControllerError(
            "INVALID_TOPIC_EXCEPTION",
            f"topic name {name!r} contains characters other than ASCII alphanumerics, "
            "'.', '_' and '-'",
        )


class Controller:
    def __init__(self, metadata_log: Log, node_id: int, defaults: Callable[[], Mapping[str, int]]):
        self.log = metadata_log
        self.node_id = node_id
        self.image = MetadataImage()
        self._defaults = defaults  # num.partitions, default.replication.factor (dynamic)
        self._listeners: list[Listener] = []
        self._lock = asyncio.Lock()
        # Set when a failed commit could not be rolled back: the log's state is unknown.
        self._failed: str | None = None

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    # -- replay ------------------------------------------------------------------
    def replay(self) -> MetadataImage:
        """Rebuild the image from every record in the log (start-up).

        Every batch's CRC is checked here, since a clean start trusts the flushed
        segments without re-reading them: damage raises CommittedDataCorruptError
        naming the file and the position of the first bad batch, and the image is
        left as it was (never a cluster missing what follows the damage).
        """
        replay = ImageReplay()
        for segment in self.log.segments:
            position = 0
            try:
                for header in segment.iter_headers(0):
                    decoded = decode_batch(os.pread(segment.fd, header.size, header.position))
                    records = [MetadataRecord.decode(r.key, r.value) for r in decoded.records]
                    replay.apply(records, decoded.header.last_offset)
                    position = header.position + header.size
            except (StorageError, ValueError, KeyError, TypeError) as error:
                raise CommittedDataCorruptError(
                    segment.log_path, position, f"{type(error).__name__}: {error}"
                ) from None
        self.log.high_watermark = self.log.log_end_offset
        self.image = replay.image()
        return self.image

    # -- commit ------------------------------------------------------------------
    async def _commit(self, records: Sequence[MetadataRecord]) -> MetadataImage:
        """Append and fsync ``records``; then (only then) advance the image.

        A write or fsync that fails (ENOSPC, EIO) raises ControllerError
        KAFKA_STORAGE_ERROR with the image unchanged, after cutting the log back to
        where it was and syncing that, so a restart replays exactly the image the
        clients saw: the change is absent, never half there. If even that cut fails,
        the log's state on disk is unknown: the controller refuses every later change
        (KAFKA_STORAGE_ERROR) until a restart recovers the log.
        """
        if not records:
            return self.image
        if self._failed is not None:
            raise ControllerError("KAFKA_STORAGE_ERROR", self._failed)
        now = self.log.clock()
        encoded = [Record(offset, now, *record.encode()) for offset, record in enumerate(records)]
        end = self.log.log_end_offset
        try:
            info = self.log.append_as_leader(encode_batch(encoded), CONTROLLER_EPOCH)
            segments, target = self.log.prepare_flush()

            def fsync_all() -> None:
                for segment in segments:
                    segment.fsync()

            await asyncio.get_running_loop().run_in_executor(None, fsync_all)
        except (OSError, StorageError) as error:
            raise self._roll_back(end, error) from None
        self.log.mark_flushed(target)
        self.log.high_watermark = self.log.log_end_offset
        previous = self.image
        self.image = previous.apply(records, info.last_offset)
        for listener in self._listeners:
            listener(previous, self.image)
        return self.image

    def _roll_back(self, end: int, error: Exception) -> ControllerError:
        """Cut the metadata log back to ``end`` after a failed commit; the error to raise."""
        cause = error.__cause__ if isinstance(error, StorageError) and error.__cause__ else error
        detail = getattr(cause, "strerror", None) or str(cause)
        try:
            self.log.truncate_to(end)  # frees space: works on a full disk
            active = self.log.active_segment  # the cut must be durable, not only the data
            active.write_indexes()
            active.fsync()
        except (OSError, StorageError) as again:
            self._failed = (
                f"the metadata log {self.log.directory} could not be written ({detail}) nor cut "
                f"back ({getattr(again, 'strerror', None) or again}); restart the broker once "
                "the disk has room"
            )
            logger.error("%s", self._failed)
            return ControllerError("KAFKA_STORAGE_ERROR", self._failed)
        logger.error(
            "metadata change not committed: writing %s failed (%s); the log is back at "
            "offset %d and the change was not applied",
            self.log.directory,
            detail,
            end,
        )
        return ControllerError(
            "KAFKA_STORAGE_ERROR", f"metadata change not committed: the metadata log: {detail}"
        )

    # -- brokers ---------------------------------------------------------------------
    async def register_broker(
        self, endpoints: Sequence[tuple[str, str, int]], rack: str | None
    ) -> None:
        async with self._lock:
            current = self.image.brokers.get(self.node_id)
            wanted = tuple(tuple(e) for e in endpoints)
            if current is not None and current.endpoints == wanted and current.rack == rack:
                return
            await self._commit(
                [
                    MetadataRecord(
                        "RegisterBroker",
                        {
                            "broker_id": self.node_id,
                            "endpoints": [list(e) for e in wanted],
                            "rack": rack,
                            "incarnation_id": str(uuid.uuid4()),
                        },
                    )
                ]
            )

    # -- topics ----------------------------------------------------------------------
    def _check_new_topic(self, topic: NewTopic, image: MetadataImage) -> list[MetadataRecord]:
        validate_topic_name(topic.name)
        if topic.name in image.topics:
            raise ControllerError("TOPIC_ALREADY_EXISTS", f"topic {topic.name!r} already exists")
        collision = topic.name.replace(".", "_")
        for existing in image.topics:
            if existing.replace(".", "_") == collision:
                raise ControllerError(
                    "INVALID_TOPIC_EXCEPTION",
                    f"topic {topic.name!r} collides with existing topic {existing!r}",
                )
        brokers = sorted(image.brokers)
        assignments = self._assignments(topic, brokers)
        configs = {k: v for k, v in (topic.configs or {}).items() if v is not None}
        try:
            LogConfig.from_properties(configs)
        except LogConfigError as error:
            raise ControllerError("INVALID_CONFIG", str(error)) from None
        topic_id = uuid.uuid4()
        records = [MetadataRecord("Topic", {"name": topic.name, "topic_id": str(topic_id)})]
        for name, value in sorted(configs.items()):
            records.append(_config_record(TOPIC_RESOURCE, topic.name, name, value))
        for partition, replicas in sorted(assignments.items()):
            records.append(_partition_record(topic_id, partition, replicas, 0))
        return records

    def _assignments(self, topic: NewTopic, brokers: list[int]) -> dict[int, list[int]]:
        if topic.assignments:
            if topic.num_partitions != -1 or topic.replication_factor != -1:
                raise ControllerError(
                    "INVALID_REQUEST",
                    "both partition assignments and partition count/replication factor given",
                )
            if sorted(topic.assignments) != list(range(len(topic.assignments))):
                raise ControllerError(
                    "INVALID_REPLICA_ASSIGNMENT", "partitions must be numbered 0..n-1"
                )
            result = {}
            for partition, replicas in topic.assignments.items():
                if not replicas or len(set(replicas)) != len(replicas):
                    raise ControllerError(
                        "INVALID_REPLICA_ASSIGNMENT",
                        f"partition {partition}: replicas {list(replicas)} empty or duplicated",
                    )
                unknown = [r for r in replicas if r not in brokers]
                if unknown:
                    raise ControllerError(
                        "INVALID_REPLICA_ASSIGNMENT",
                        f"partition {partition}: brokers {unknown} are not registered",
                    )
                result[partition] = list(replicas)
            return result
        defaults = self._defaults()
        partitions = topic.num_partitions
        if partitions == -1:
            partitions = defaults["num.partitions"]
        if partitions <= 0:
            raise ControllerError(
                "INVALID_PARTITIONS", f"number of partitions must be positive, got {partitions}"
            )
        factor = topic.replication_factor
        if factor == -1:
            factor = defaults["default.replication.factor"]
        if factor <= 0:
            raise ControllerError(
                "INVALID_REPLICATION_FACTOR", f"replication factor must be positive, got {factor}"
            )
        if factor > len(brokers):
            raise ControllerError(
                "INVALID_REPLICATION_FACTOR",
                f"replication factor {factor} is larger than the {len(brokers)} "
                "registered broker(s)",
            )
        return {
            p: [brokers[(p + r) % len(brokers)] for r in range(factor)] for p in range(partitions)
        }

    async def create_topics(
        self, topics: Sequence[NewTopic], validate_only: bool
    ) -> list[ControllerError | MetadataImage]:
        """Per topic: the image after creation (the current one if validate_only), or the error."""
        async with self._lock:
            if self._requested_partitions(topics) > MAX_PARTITIONS_PER_REQUEST:
                error = ControllerError(
                    "POLICY_VIOLATION", "Excessively large number of partitions per request."
                )
                return [error for _ in topics]
            results: list[ControllerError | list[MetadataRecord]] = []
            names = [t.name for t in topics]
            for topic in topics:
                if names.count(topic.name) > 1:
                    results.append(
                        ControllerError("INVALID_REQUEST", f"topic {topic.name!r} listed twice")
                    )
                    continue
                try:
                    results.append(self._check_new_topic(topic, self.image))
                except ControllerError as error:
                    results.append(error)
            records = [r for item in results if isinstance(item, list) for r in item]
            try:
                image = self.image if validate_only else await self._commit(records)
            except ControllerError as failure:  # storage: nothing of the request committed
                return [item if isinstance(item, ControllerError) else failure for item in results]
            return [item if isinstance(item, ControllerError) else image for item in results]

    def _requested_partitions(self, topics: Sequence[NewTopic]) -> int:
        default = self._defaults()["num.partitions"]
        total = 0
        for topic in topics:
            if topic.assignments:
                total += len(topic.assignments)
            elif topic.num_partitions > 0:
                total += topic.num_partitions
            elif topic.num_partitions == -1:
                total += default
        return total

    async def delete_topics(self, names: Sequence[str | uuid.UUID]) -> list[ControllerError | None]:
        """Delete topics given by name or by topic id (DeleteTopics v6)."""
        async with self._lock:
            results: list[ControllerError | None] = []
            records = []
            for name in names:
                if isinstance(name, uuid.UUID):
                    topic = self.image.topic_by_id(name)
                    missing = ControllerError("UNKNOWN_TOPIC_ID", f"topic id {name} not found")
                else:
                    topic = self.image.topics.get(name)
                    missing = ControllerError(
                        "UNKNOWN_TOPIC_OR_PARTITION", f"topic {name!r} not found"
                    )
                if topic is None:
                    results.append(missing)
                    continue
                records.append(MetadataRecord("RemoveTopic", {"topic_id": str(topic.topic_id)}))
                results.append(None)
            try:
                await self._commit(records)
            except ControllerError as failure:  # storage: no topic of the request deleted
                return [failure if result is None else result for result in results]
            return results

    async def create_partitions(
        self,
        topic_name: str,
        count: int,
        assignments: Sequence[Sequence[int]] | None,
        validate_only: bool,
    ) -> None:
        async with self._lock:
            topic = self.image.topics.get(topic_name)
            if topic is None:
                raise ControllerError(
                    "UNKNOWN_TOPIC_OR_PARTITION", f"topic {topic_name!r} not found"
                )
            current = len(topic.partitions)
            if count - current > MAX_PARTITIONS_PER_REQUEST:
                raise ControllerError(
                    "POLICY_VIOLATION", "Excessively large number of partitions per request."
                )
            if count <= current:
                raise ControllerError(
                    "INVALID_PARTITIONS",
                    f"topic {topic_name!r} has {current} partitions; {count} would not add any",
                )
            brokers = sorted(self.image.brokers)
            factor = len(next(iter(topic.partitions.values())).replicas) if topic.partitions else 1
            new = list(range(current, count))
            if assignments is not None:
                if len(assignments) != len(new):
                    raise ControllerError(
                        "INVALID_REPLICA_ASSIGNMENT",
                        f"{len(assignments)} assignments for {len(new)} new partitions",
                    )
                chosen = [list(a) for a in assignments]
                for replicas in chosen:
                    if (
                        not replicas
                        or len(set(replicas)) != len(replicas)
                        or any(r not in brokers for r in replicas)
                    ):
                        raise ControllerError(
                            "INVALID_REPLICA_ASSIGNMENT", f"invalid replicas {replicas}"
                        )
            else:
                if factor > len(brokers):
                    raise ControllerError(
                        "INVALID_REPLICATION_FACTOR",
                        "not enough brokers for the replication factor",
                    )
                chosen = [[brokers[(p + r) % len(brokers)] for r in range(factor)] for p in new]
            if validate_only:
                return
            await self._commit(
                [
                    _partition_record(topic.topic_id, p, r, 0)
                    for p, r in zip(new, chosen, strict=True)
                ]
            )

    # -- configs ---------------------------------------------------------------------
    async def alter_configs(
        self,
        resource_type: str,
        resource_name: str,
        changes: Mapping[str, str | None] | Callable[[Mapping[str, str]], Mapping[str, str | None]],
        validate_only: bool,
        *,
        replace: bool = False,
        validator: Callable[[Mapping[str, str]], None] | None = None,
    ) -> None:
        """Set (value) or delete (None) config keys of one resource; validated before commit.

        ``changes`` may be a function of the resource's current configs, called under
        the lock (IncrementalAlterConfigs APPEND/SUBTRACT); ``replace`` drops every key
        not in ``changes`` (legacy AlterConfigs); ``validator`` checks the resulting
        set and raises ControllerError (broker properties: the broker's own table).
        """
        async with self._lock:
            if resource_type == TOPIC_RESOURCE and resource_name not in self.image.topics:
                raise ControllerError(
                    "UNKNOWN_TOPIC_OR_PARTITION", f"topic {resource_name!r} not found"
                )
            current = dict(self.image.configs.get((resource_type, resource_name), {}))
            if callable(changes):
                changes = changes(current)
            merged = {} if replace else dict(current)
            for key, value in changes.items():
                if value is None:
                    merged.pop(key, None)
                else:
                    merged[key] = value
            if resource_type == TOPIC_RESOURCE:
                try:
                    LogConfig.from_properties(merged)
                except LogConfigError as error:
                    raise ControllerError("INVALID_CONFIG", str(error)) from None
            if validator is not None:
                validator(merged)
            if validate_only:
                return
            await self._commit(
                [
                    _config_record(resource_type, resource_name, key, merged.get(key))
                    for key in sorted(set(current) | set(merged))
                    if current.get(key) != merged.get(key)
                ]
            )

    # -- producer ids ------------------------------------------------------------------
    async def allocate_producer_ids(self) -> tuple[int, int]:
        """Reserve a block of producer ids: (first id, count)."""
        async with self._lock:
            first = self.image.next_producer_id
            await self._commit(
                [
                    MetadataRecord(
                        "ProducerIds",
                        {
                            "broker_id": self.node_id,
                            "next_producer_id": first + PRODUCER_ID_BLOCK_SIZE,
                        },
                    )
                ]
            )
            return first, PRODUCER_ID_BLOCK_SIZE


def _partition_record(
    topic_id: uuid.UUID, partition: int, replicas: Sequence[int], leader_epoch: int
) -> MetadataRecord:
    return MetadataRecord(
        "Partition",
        {
            "topic_id": str(topic_id),
            "partition": partition,
            "replicas": list(replicas),
            "isr": list(replicas),
            "leader": replicas[0],
            "leader_epoch": leader_epoch,
            "partition_epoch": 0,
        },
    )


def _config_record(
    resource_type: str, resource_name: str, name: str, value: str | None
) -> MetadataRecord:
    return MetadataRecord(
        "Config",
        {
            "resource_type": resource_type,
            "resource_name": resource_name,
            "name": name,
            "value": value,
        },
    )


__all__ = ["BROKER_RESOURCE", "Controller", "ControllerError", "NewTopic"]
