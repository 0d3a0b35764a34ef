"""GroupCoordinator: groups and committed offsets, persisted in ``__consumer_offsets``.

How this works and why (seeds/000 Group Coordinator, 进度跟踪, 故障恢复): a group
belongs to partition ``abs(hash(group_id)) % offsets.topic.num.partitions`` of
``__consumer_offsets``, and the broker leading that partition is its coordinator.
What follows leadership — loading a partition when this node becomes its leader (in
a leader epoch), unloading it when leadership goes, one serialized write queue per
partition whose records are appended (at the high watermark) before the state
changes and the client hears "done", the timers — is the ``CoordinatorRuntime``
(coordinator/runtime.py). A partition's groups and offsets are its ``GroupShard``
(shard.py; offsets in its ``OffsetStore``, offset_store.py). This module is the
facade the handlers call: it finds a group's partition, answers the partition's
state (COORDINATOR_LOAD_IN_PROGRESS while loading, COORDINATOR_NOT_AVAILABLE while a
failed load is retried, NOT_COORDINATOR elsewhere), and runs each request as a write
on the shard — the protocol logic itself is the sans-IO ``ClassicGroup``
(classic.py) and ``ConsumerGroup`` (consumer.py, consumer_coordinator.py). Parked
JoinGroup/SyncGroup requests are futures, awaited outside the write queue.
``__consumer_offsets`` is created on first use with its full replication factor
(internal_topic.py).
"""

from __future__ import annotations

import asyncio
import functools
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from odradek.coordinator.group import consumer_coordinator as consumers
from odradek.coordinator.group.classic import (
    ClassicGroup,
    GroupSettings,
    GroupState,
    JoinRequest,
    JoinResult,
    SyncResult,
)
from odradek.coordinator.group.consumer import ConsumerGroup
from odradek.coordinator.group.consumer_model import (
    ConsumerGroupSettings,
    HeartbeatRequest,
    HeartbeatResult,
)
from odradek.coordinator.group.offset_store import OffsetCommit, Results
from odradek.coordinator.group.records import (
    GroupKey,
    OffsetValue,
    encode_group_key,
    partition_for_group,
)
from odradek.coordinator.group.shard import OFFSETS_TOPIC, GroupShard, deliver
from odradek.coordinator.internal_topic import InternalTopic, InternalTopicCreator
from odradek.coordinator.partition_writer import PartitionWriter, TopicCreator
from odradek.coordinator.runtime import (
    CoordinatorError,
    CoordinatorResult,
    CoordinatorRuntime,
    TxnMarker,
)
from odradek.metadata.image import MetadataImage

if TYPE_CHECKING:
    from odradek.metadata.view import MetadataView

__all__ = ["OFFSETS_TOPIC", "CoordinatorError", "CoordinatorSettings", "GroupCoordinator"]

ResultWaiter = asyncio.Future[JoinResult | SyncResult]
DEFAULT_PARTITIONS: Final = 50


@dataclass(frozen=True, slots=True)
class CoordinatorSettings:
    partitions: int = DEFAULT_PARTITIONS
    replication_factor: int = 3
    segment_bytes: int = 104_857_600
    compression: int = 0  # offsets.topic.compression.codec (records.batch codec ids)
    metadata_max_bytes: int = 4096
    retention_ms: int = 7 * 24 * 3_600_000
    retention_check_interval_ms: int = 600_000
    group: GroupSettings = field(default_factory=GroupSettings)
    consumer: ConsumerGroupSettings = field(default_factory=ConsumerGroupSettings)


class GroupCoordinator:
    """Groups of the partitions of ``__consumer_offsets`` this node leads.

    It sees the cluster through ``metadata`` (the image and this node's id), writes and
    replays its partitions through ``writer`` and creates the topic through
    ``topics`` (partition_writer.py) — never through the broker.
    """

    def __init__(
        self,
        metadata: MetadataView,
        writer: PartitionWriter,
        topics: TopicCreator,
        settings: CoordinatorSettings,
        clock: Callable[[], int],
    ):
        self.metadata = metadata
        self.settings = settings
        self.clock = clock
        self.runtime = CoordinatorRuntime(
            OFFSETS_TOPIC,
            writer,
            lambda p: GroupShard(p, settings, clock),
            clock,
            compression=settings.compression,
        )
        self.offsets_topic = InternalTopicCreator(
            metadata,
            topics,
            InternalTopic(
                OFFSETS_TOPIC,
                settings.partitions,
                settings.replication_factor,
                "offsets.topic.replication.factor",
                {
                    "cleanup.policy": "compact",
                    "compression.type": "producer",
                    "segment.bytes": str(settings.segment_bytes),
                },
            ),
        )
        self._topic_ids: dict[str, uuid.UUID] = {}  # as of the last image (deletions)

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> None:
        self.runtime.start()

    async def stop(self) -> None:
        await self.runtime.stop()  # parked joins/syncs are answered

    # -- partitions of __consumer_offsets ---------------------------------------------
    def partition_for(self, group_id: str) -> int:
        return partition_for_group(group_id, self.settings.partitions)

    def on_leadership(self, partition: int, leader_epoch: int | None) -> None:
        """This node leads ``partition`` in ``leader_epoch`` (None: no longer)."""
        self.runtime.on_leadership(partition, leader_epoch)

    def on_metadata(self, image: MetadataImage) -> None:
        """Kafka's onPartitionsDeleted: the committed offsets of a deleted topic are
        deleted too, so a topic re-created under its name does not inherit them."""
        topic_ids = {name: topic.topic_id for name, topic in image.topics.items()}
        gone = {name for name, id_ in self._topic_ids.items() if topic_ids.get(name) != id_}
        self._topic_ids = topic_ids
        if not gone:
            return
        for partition, shard in self.runtime.active_shards():
            stale = shard.offsets.of_topics(gone)
            if stale:
                self.runtime.submit(partition, functools.partial(_delete_stale, stale=stale))

    async def ensure_offsets_topic(self) -> bool:
        """Create __consumer_offsets on first use; True once it exists."""
        return await self.offsets_topic.ensure() is None

    def _partition(self, group_id: str) -> int:
        """The group's partition if its shard serves now; else the CoordinatorError."""
        if not group_id:
            raise CoordinatorError("INVALID_GROUP_ID", "empty group id")
        partition = self.partition_for(group_id)
        self.runtime.shard(partition)
        return partition

    def _shard(self, group_id: str) -> GroupShard:
        return self.runtime.shard(self._partition(group_id))

    # -- group protocol ------------------------------------------------------------------
    async def join(self, group_id: str, request: JoinRequest) -> JoinResult:
        partition = self._partition(group_id)
        waiter: ResultWaiter = asyncio.get_running_loop().create_future()

        def op(shard: GroupShard) -> CoordinatorResult[JoinResult | None]:
            # Only a new member (no member id) creates a group, as in Kafka; a join that
            # fails at once leaves no empty group behind for ListGroups to show.
            created = shard.classic(group_id, create=False) is None
            group = shard.classic(group_id, create=not request.member_id)
            if group is None:
                return CoordinatorResult(
                    JoinResult("UNKNOWN_MEMBER_ID", member_id=request.member_id)
                )
            immediate = group.join(request, waiter)
            empty = not group.members and not group.pending_member_ids
            if immediate is not None and created and empty:
                shard.groups.pop(group_id, None)
            return shard.persist_and_deliver(group, immediate)

        immediate = await self.runtime.write(partition, op)
        if immediate is not None:
            return immediate
        result = await waiter
        assert isinstance(result, JoinResult)
        return result

    async def sync(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: Mapping[str, bytes],
    ) -> SyncResult:
        partition = self._partition(group_id)
        waiter: ResultWaiter = asyncio.get_running_loop().create_future()

        def op(shard: GroupShard) -> CoordinatorResult[SyncResult | None]:
            group = shard.classic(group_id, create=False)
            if group is None:
                return CoordinatorResult(SyncResult("UNKNOWN_MEMBER_ID"))
            immediate = group.sync(
                generation_id,
                member_id,
                group_instance_id,
                protocol_type,
                protocol_name,
                assignments,
                waiter,
            )
            return shard.persist_and_deliver(group, immediate)

        immediate = await self.runtime.write(partition, op)
        if immediate is not None:
            return immediate
        result = await waiter
        assert isinstance(result, SyncResult)
        return result

    async def heartbeat(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> str:
        def op(shard: GroupShard) -> CoordinatorResult[str]:
            group = shard.classic(group_id, create=False)
            if group is None:
                return CoordinatorResult("UNKNOWN_MEMBER_ID")
            error = group.heartbeat(generation_id, member_id, group_instance_id)
            return shard.persist_and_deliver(group, error)

        return await self.runtime.write(self._partition(group_id), op)

    async def leave(self, group_id: str, members: Sequence[tuple[str, str | None]]) -> list[str]:
        def op(shard: GroupShard) -> CoordinatorResult[list[str]]:
            group = shard.classic(group_id, create=False)
            if group is None:
                return CoordinatorResult(["UNKNOWN_MEMBER_ID" for _ in members])
            errors = [group.leave(member_id, instance_id) for member_id, instance_id in members]
            return shard.persist_and_deliver(group, errors)

        return await self.runtime.write(self._partition(group_id), op)

    async def consumer_heartbeat(
        self, group_id: str, request: HeartbeatRequest, *, require_member_id: bool
    ) -> HeartbeatResult:
        """ConsumerGroupHeartbeat; request-level failures raise CoordinatorError."""
        problem = consumers.check(group_id, request, require_member_id)
        if problem is not None:
            return HeartbeatResult("INVALID_REQUEST", problem, request.member_id)
        partition = self._partition(group_id)

        def op(shard: GroupShard) -> CoordinatorResult[HeartbeatResult]:
            image = self.metadata.image
            result = consumers.heartbeat(
                shard, group_id, request, image, require_member_id=require_member_id
            )
            return CoordinatorResult(result)

        return await self.runtime.write(partition, op)

    # -- offsets -------------------------------------------------------------------------
    async def commit_offsets(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        commits: Sequence[OffsetCommit],
        api_version: int = 9,
    ) -> Results:
        """Per (topic, partition): the error name; all-or-nothing per request otherwise.

        A commit with generation (member epoch) < 0 to a group that does not exist
        creates a simple group and is accepted whatever member id it carries, as in
        Kafka; one with a generation is GROUP_ID_NOT_FOUND (v9+) or ILLEGAL_GENERATION.
        """

        def op(shard: GroupShard) -> CoordinatorResult[Results]:
            consumer = shard.consumer_groups.get(group_id)  # generation_id: its member epoch
            group = shard.classic(group_id, create=False) if consumer is None else None
            if group is None and consumer is None:
                if generation_id >= 0:
                    error = "GROUP_ID_NOT_FOUND" if api_version >= 9 else "ILLEGAL_GENERATION"
                    return CoordinatorResult({(c.topic, c.partition): error for c in commits})
                group = shard.classic(group_id, create=True)  # a standalone consumer's group
            validator = consumer if consumer is not None else group
            assert validator is not None
            error = validator.validate_offset_commit(generation_id, member_id, group_instance_id)
            if error != "NONE":
                return CoordinatorResult({(c.topic, c.partition): error for c in commits})
            return shard.offsets.commit(
                group_id,
                commits,
                self.metadata.image,
                self.settings.metadata_max_bytes,
                self.clock(),
            )

        return await self.runtime.write(self._partition(group_id), op)

    async def txn_commit_offsets(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        commits: Sequence[OffsetCommit],
    ) -> Results:
        """TxnOffsetCommit (KIP-98, KIP-447): the offsets are written in a transactional
        batch of the producer and stay pending until its transaction's marker. A request
        naming a member (v3+) is checked against the group as an OffsetCommit would be;
        one without (generation -1) is accepted, and creates the group if need be."""

        def op(shard: GroupShard) -> CoordinatorResult[Results]:
            consumer = shard.consumer_groups.get(group_id)
            group = shard.classic(group_id, create=False) if consumer is None else None
            if group is None and consumer is None:
                if generation_id >= 0:
                    return CoordinatorResult(
                        {(c.topic, c.partition): "ILLEGAL_GENERATION" for c in commits}
                    )
                group = shard.classic(group_id, create=True)
            validator = consumer if consumer is not None else group
            assert validator is not None
            if generation_id >= 0 or member_id:
                error = validator.validate_offset_commit(
                    generation_id, member_id, group_instance_id
                )
                if error != "NONE":
                    return CoordinatorResult({(c.topic, c.partition): error for c in commits})
            return shard.offsets.txn_commit(
                group_id,
                (producer_id, producer_epoch),
                commits,
                self.metadata.image,
                self.settings.metadata_max_bytes,
                self.clock(),
            )

        return await self.runtime.write(self._partition(group_id), op)

    async def complete_transaction(
        self,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
    ) -> str:
        """WriteTxnMarkers for a ``__consumer_offsets`` partition: the marker goes through
        the partition's write queue (after the TxnOffsetCommit writes before it), and
        the producer's pending offsets are committed or dropped once it is written.
        Returns the Kafka error name for the marker's answer."""

        def op(shard: GroupShard) -> CoordinatorResult[str]:
            def apply() -> None:
                shard.offsets.end_transaction(producer_id, commit)

            return CoordinatorResult(
                "NONE",
                marker=TxnMarker(producer_id, producer_epoch, coordinator_epoch, commit),
                apply=apply,
            )

        try:
            return await self.runtime.write(partition, op)
        except CoordinatorError as error:
            if error.code == "NOT_COORDINATOR":
                return "NOT_LEADER_OR_FOLLOWER"
            if error.code in ("COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE"):
                return "NOT_ENOUGH_REPLICAS"  # retriable for the transaction coordinator
            return error.code

    def unstable_offsets(self, group_id: str) -> set[tuple[str, int]]:
        """The group's partitions whose offset waits for an open transaction's end."""
        return self._shard(group_id).offsets.unstable(group_id)

    def fetch_offsets(
        self,
        group_id: str,
        partitions: Sequence[tuple[str, int]] | None,
        member_id: str | None = None,
        member_epoch: int = -1,
    ) -> dict[tuple[str, int], OffsetValue | None]:
        """``member_id``/``member_epoch`` (OffsetFetch v9) are checked for consumer groups."""
        shard = self._shard(group_id)
        consumer = shard.consumer_groups.get(group_id)
        error = consumer.validate_offset_fetch(member_id, member_epoch) if consumer else "NONE"
        if error != "NONE":
            raise CoordinatorError(error)
        return shard.offsets.fetch(group_id, partitions)

    async def delete_offsets(self, group_id: str, partitions: Sequence[tuple[str, int]]) -> Results:
        def op(shard: GroupShard) -> CoordinatorResult[Results]:
            consumer = shard.consumer_groups.get(group_id)
            group = shard.classic(group_id, create=False) if consumer is None else None
            if group is None and consumer is None and not shard.offsets.of(group_id):
                raise CoordinatorError("GROUP_ID_NOT_FOUND")
            subscribed: set[str] = set()
            if consumer is not None and not consumer.is_empty:
                subscribed = consumer.subscribed_topics()
            elif group is not None and group.state is not GroupState.EMPTY:
                subscribed = group.subscribed_topics()
            return shard.offsets.delete(group_id, partitions, subscribed)

        return await self.runtime.write(self._partition(group_id), op)

    async def delete_groups(self, group_ids: Sequence[str]) -> dict[str, str]:
        results = {}
        for group_id in group_ids:
            try:
                delete = functools.partial(_delete_group, group_id=group_id)
                results[group_id] = await self.runtime.write(self._partition(group_id), delete)
            except CoordinatorError as error:
                results[group_id] = error.code
        return results

    # -- listing -------------------------------------------------------------------------
    def list_groups(self) -> list[ClassicGroup]:
        return [
            g
            for _, shard in self.runtime.active_shards()
            for g in shard.groups.values()
            if g.state is not GroupState.DEAD
        ]

    def list_consumer_groups(self) -> list[ConsumerGroup]:
        return [
            g
            for _, shard in self.runtime.active_shards()
            for g in shard.consumer_groups.values()
            if not g.dead
        ]

    def committed_offsets(self) -> Iterator[tuple[str, str, int, int]]:
        """(group, topic, partition, committed offset) of every group coordinated here
        (the offsets of loaded ``__consumer_offsets`` partitions; pending transactional
        ones are not committed yet): what a consumer-lag exporter reads."""
        for _, shard in self.runtime.active_shards():
            for group_id, offsets in list(shard.offsets.committed.items()):
                for (topic, partition), value in list(offsets.items()):
                    yield group_id, topic, partition, value.offset

    def describe(self, group_id: str) -> ClassicGroup | None:
        shard = self._shard(group_id)
        if group_id in shard.consumer_groups:
            return None  # DescribeGroups before v6 shows a consumer group as Dead (Kafka)
        return shard.classic(group_id, create=False)

    def describe_consumer_group(self, group_id: str) -> ConsumerGroup | ClassicGroup | None:
        """The group of this id, of either kind (ConsumerGroupDescribe tells them apart)."""
        return consumers.describe(self._shard(group_id), group_id)


def _delete_stale(
    shard: GroupShard, stale: dict[str, dict[tuple[str, int], OffsetValue]]
) -> CoordinatorResult[None]:
    return shard.offsets.delete_stale(stale)


def _delete_group(shard: GroupShard, group_id: str) -> CoordinatorResult[str]:
    """DeleteGroups of one group: tombstones for its offsets and its group record."""
    consumer = shard.consumer_groups.get(group_id)
    if consumer is not None and not consumer.is_empty:
        return CoordinatorResult("NON_EMPTY_GROUP")
    group = shard.classic(group_id, create=False)
    if group is None and consumer is None and not shard.offsets.has_group(group_id):
        return CoordinatorResult("GROUP_ID_NOT_FOUND")
    if group is not None and group.state is not GroupState.EMPTY:
        return CoordinatorResult("NON_EMPTY_GROUP")
    records = [*shard.offsets.delete_group(group_id), (encode_group_key(GroupKey(group_id)), None)]

    def apply() -> None:
        if group is not None:
            group.mark_dead()
            deliver(group)
        shard.groups.pop(group_id, None)
        if consumer is not None:
            shard.consumer_groups.pop(group_id).mark_dead()
        shard.offsets.forget(group_id)

    return CoordinatorResult("NONE", records, apply, lambda error: error.code)
