"""GroupCoordinator: groups and committed offsets, persisted in ``__consumer_offsets``.

How this works and why (seeds/000 Group Coordinator, 进度跟踪, 故障恢复): a group
belongs to partition ``abs(hash(group_id)) % offsets.topic.num.partitions`` of
``__consumer_offsets``, and the broker leading that partition is its coordinator.
The protocol logic is the sans-IO ``ClassicGroup`` (classic.py); this module is its
asyncio adapter: it turns parked JoinGroup/SyncGroup requests into futures, runs the
timers (one ticker for all groups), and writes what must survive a restart —
committed offsets and group metadata — as records in that partition, appended like
any produce with acks=all before the client hears "done". When a broker becomes
leader of a partition it replays the partition (``load``) and answers
COORDINATOR_LOAD_IN_PROGRESS until that is done; groups come back Stable with their
members, so clients that reconnect keep their assignment without a rebalance. A
damaged batch is skipped with an ERROR (loader.py says why later batches are still
used); a load that fails outright is retried, its groups answering
COORDINATOR_NOT_AVAILABLE meanwhile.
Consumer groups of the new protocol (KIP-848, consumer.py) share the offsets and
timers; their side of the coordinator is the ``ConsumerGroupCoordination`` mixin.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from odradek.coordinator.group.classic import (
    ClassicGroup,
    GroupSettings,
    GroupState,
    JoinRequest,
    JoinResult,
    SyncResult,
)
from odradek.coordinator.group.consumer import ConsumerGroup
from odradek.coordinator.group.consumer_coordinator import ConsumerGroupCoordination
from odradek.coordinator.group.consumer_model import ConsumerGroupSettings
from odradek.coordinator.group.loader import Damage
from odradek.coordinator.group.offset_coordinator import (
    CoordinatorError,
    OffsetCoordination,
)
from odradek.coordinator.group.records import (
    GroupKey,
    GroupValue,
    MemberValue,
    OffsetKey,
    OffsetValue,
    RecordFormatError,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    partition_for_group,
)
from odradek.coordinator.partition_writer import (
    PartitionWriteError,
    PartitionWriter,
    TopicCreator,
)
from odradek.metadata.image import MetadataImage
from odradek.records.codec import Record, encode_batch

if TYPE_CHECKING:
    from odradek.metadata.view import MetadataView

logger = logging.getLogger(__name__)

OFFSETS_TOPIC: Final = "__consumer_offsets"
TICK_S: Final = 0.05  # longest sleep of the ticker of all groups' deadlines
MIN_TICK_S: Final = 0.002  # shortest (a deadline a tick cannot clear must not spin)
LOAD_RETRY_MAX_S: Final = 30  # backoff cap of a partition whose load failed


@dataclass(frozen=True, slots=True)
class CoordinatorSettings:
    partitions: int = 50
    replication_factor: int = 3
    segment_bytes: int = 104_857_600
    metadata_max_bytes: int = 4096
    retention_ms: int = 7 * 24 * 3_600_000
    retention_check_interval_ms: int = 600_000
    group: GroupSettings = field(default_factory=GroupSettings)
    consumer: ConsumerGroupSettings = field(default_factory=ConsumerGroupSettings)


class GroupCoordinator(ConsumerGroupCoordination, OffsetCoordination):
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
        self.writer = writer
        self.topics = topics
        self.settings = settings
        self.clock = clock
        self.groups: dict[str, ClassicGroup] = {}
        self.consumer_groups: dict[str, ConsumerGroup] = {}  # KIP-848 groups (a disjoint id set)
        self.offsets: dict[str, dict[tuple[str, int], OffsetValue]] = {}
        self._owned: set[int] = set()
        self._loading: set[int] = set()
        self._failed: dict[int, str] = {}  # partitions whose load failed: why (retried)
        self._load_tasks: dict[int, asyncio.Task[None]] = {}
        self._ticker: asyncio.Task[None] | None = None
        self._loads: set[asyncio.Task[None]] = set()
        self._topic_ids: dict[str, uuid.UUID] = {}  # as of the last image (deletions)
        self._create_lock = asyncio.Lock()
        self._last_retention_ms = clock()

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> None:
        self._ticker = asyncio.create_task(self._tick_loop())

    async def stop(self) -> None:
        tasks = [t for t in (self._ticker, *self._loads) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for group in self.groups.values():
            group.mark_dead()
            self._deliver(group)
        self.drop_consumer_groups(None)

    # -- partitions of __consumer_offsets ---------------------------------------------
    def partition_for(self, group_id: str) -> int:
        return partition_for_group(group_id, self.settings.partitions)

    def on_metadata(self, image: MetadataImage) -> None:
        """Load partitions this broker now leads; drop groups of partitions it lost."""
        topic = image.topics.get(OFFSETS_TOPIC)
        led = set()
        if topic is not None:
            led = {
                p for p, state in topic.partitions.items() if state.leader == self.metadata.node_id
            }
        for partition in sorted(led - self._owned):
            self._owned.add(partition)
            self._loading.add(partition)
            task = asyncio.get_running_loop().create_task(self._load(partition))
            self._loads.add(task)
            task.add_done_callback(self._loads.discard)
            self._load_tasks[partition] = task
        for partition in self._owned - led:
            self._owned.discard(partition)
            self._loading.discard(partition)
            self._failed.pop(partition, None)
            loading = self._load_tasks.pop(partition, None)
            if loading is not None:
                loading.cancel()
            self._unload(partition)
        self._forget_deleted_topics(image)

    def _unload(self, partition: int) -> None:
        for group_id in [g for g in self.groups if self.partition_for(g) == partition]:
            group = self.groups.pop(group_id)
            group.mark_dead("NOT_COORDINATOR")
            self._deliver(group)
            self.offsets.pop(group_id, None)
        self.drop_consumer_groups(partition)

    async def _load(self, partition: int) -> None:
        """Load the partition; if that fails outright (an I/O error, a bug), its groups
        answer COORDINATOR_NOT_AVAILABLE and the load is retried with a backoff."""
        attempt = 0
        while partition in self._owned:
            try:
                await self._load_once(partition)
            except Exception as error:  # never a silent "Task exception was never retrieved"
                delay_s = min(LOAD_RETRY_MAX_S, 2**attempt)
                attempt += 1
                self._failed[partition] = f"{type(error).__name__}: {error}"
                self._loading.discard(partition)
                logger.error(
                    "cannot load %s-%d (%s); its groups get COORDINATOR_NOT_AVAILABLE; "
                    "retrying in %d s",
                    OFFSETS_TOPIC,
                    partition,
                    self._failed[partition],
                    delay_s,
                )
                await asyncio.sleep(delay_s)
                continue
            if self._failed.pop(partition, None) is not None:
                logger.info("loaded %s-%d after %d failures", OFFSETS_TOPIC, partition, attempt)
            return

    async def _load_once(self, partition: int) -> None:
        started = self.clock()
        try:
            batches = self.writer.read((OFFSETS_TOPIC, partition), 0)
        except PartitionWriteError:
            self._loading.discard(partition)
            return
        groups: dict[str, GroupValue | None] = {}
        offsets: dict[str, dict[tuple[str, int], OffsetValue]] = {}
        count = 0
        for item in batches:
            if isinstance(item, Damage):
                logger.error(
                    "%s-%d: %s: what it held is not replayed (those groups' offsets and "
                    "state fall back to what was written before it); restore the "
                    "directory from a replica or backup to get it back",
                    OFFSETS_TOPIC,
                    partition,
                    item.describe(),
                )
                continue
            for record in item:
                count += 1
                self._replay(record, groups, offsets)
            await asyncio.sleep(0)  # let other work run during long loads
        for group_id, value in groups.items():
            if value is not None and group_id not in self.groups:
                self.groups[group_id] = self._restore(group_id, value)
        for group_id, committed in offsets.items():
            self.offsets.setdefault(group_id, {}).update(committed)
        self._loading.discard(partition)
        if count:
            logger.info(
                "loaded %s-%d: %d records, %d groups in %d ms",
                OFFSETS_TOPIC,
                partition,
                count,
                sum(1 for v in groups.values() if v is not None),
                self.clock() - started,
            )

    @staticmethod
    def _replay(
        record: Record,
        groups: dict[str, GroupValue | None],
        offsets: dict[str, dict[tuple[str, int], OffsetValue]],
    ) -> None:
        if record.key is None:
            return
        try:
            key = decode_key(record.key)
            if isinstance(key, OffsetKey):
                committed = offsets.setdefault(key.group, {})
                if record.value is None:
                    committed.pop((key.topic, key.partition), None)
                else:
                    committed[(key.topic, key.partition)] = decode_offset_value(record.value)
            else:
                if record.value is None:
                    groups[key.group] = None
                    offsets.pop(key.group, None)
                else:
                    groups[key.group] = decode_group_value(record.value)
        except RecordFormatError as error:
            logger.warning(
                "skipping malformed %s record at %d: %s", OFFSETS_TOPIC, record.offset, error
            )

    def _restore(self, group_id: str, value: GroupValue) -> ClassicGroup:
        return ClassicGroup.restore(
            group_id,
            self.settings.group,
            clock=self.clock,
            new_member_id=new_member_id,
            protocol_type=value.protocol_type,
            generation_id=value.generation,
            protocol_name=value.protocol,
            leader_id=value.leader or "",
            members=list(value.members),
            state_timestamp_ms=value.state_timestamp,
        )

    def _check_owner(self, group_id: str) -> None:
        if not group_id:
            raise CoordinatorError("INVALID_GROUP_ID", "empty group id")
        partition = self.partition_for(group_id)
        if partition in self._failed:
            raise CoordinatorError("COORDINATOR_NOT_AVAILABLE", self._failed[partition])
        if partition in self._loading:
            raise CoordinatorError("COORDINATOR_LOAD_IN_PROGRESS")
        if partition not in self._owned:
            raise CoordinatorError("NOT_COORDINATOR")

    async def ensure_offsets_topic(self) -> bool:
        """Create __consumer_offsets on first use; True once it exists."""
        if OFFSETS_TOPIC in self.metadata.image.topics:
            return True
        async with self._create_lock:
            if OFFSETS_TOPIC in self.metadata.image.topics:
                return True
            brokers = max(1, len(self.metadata.image.brokers))
            error = await self.topics.create_topic(
                OFFSETS_TOPIC,
                self.settings.partitions,
                min(self.settings.replication_factor, brokers),
                {
                    "cleanup.policy": "compact",
                    "compression.type": "producer",
                    "segment.bytes": str(self.settings.segment_bytes),
                },
            )
            if error is not None and error != "TOPIC_ALREADY_EXISTS":
                logger.warning("cannot create %s: %s", OFFSETS_TOPIC, error)
                return False
            return True

    # -- group protocol ------------------------------------------------------------------
    def _group(self, group_id: str, create: bool) -> ClassicGroup | None:
        if not self.take_empty_consumer_group(group_id, convert=create):
            raise CoordinatorError(
                "GROUP_ID_NOT_FOUND", f"Group {group_id} is not a classic group."
            )
        group = self.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            if not create:
                return None
            group = ClassicGroup(
                group_id, self.settings.group, clock=self.clock, new_member_id=new_member_id
            )
            self.groups[group_id] = group
        return group

    async def join(self, group_id: str, request: JoinRequest) -> JoinResult:
        self._check_owner(group_id)
        # Only a new member (no member id) creates a group, as in Kafka; a join that
        # fails at once leaves no empty group behind for ListGroups to show.
        created = self._group(group_id, create=False) is None
        group = self._group(group_id, create=not request.member_id)
        if group is None:
            return JoinResult("UNKNOWN_MEMBER_ID", member_id=request.member_id)
        waiter: asyncio.Future[JoinResult | SyncResult] = asyncio.get_running_loop().create_future()
        immediate = group.join(request, waiter)
        await self._after(group)
        if immediate is not None:
            if created and not group.members and not group.pending_member_ids:
                self.groups.pop(group_id, None)
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
        self._check_owner(group_id)
        group = self._group(group_id, create=False)
        if group is None:
            return SyncResult("UNKNOWN_MEMBER_ID")
        waiter: asyncio.Future[JoinResult | SyncResult] = asyncio.get_running_loop().create_future()
        immediate = group.sync(
            generation_id,
            member_id,
            group_instance_id,
            protocol_type,
            protocol_name,
            assignments,
            waiter,
        )
        await self._after(group)
        if immediate is not None:
            return immediate
        result = await waiter
        assert isinstance(result, SyncResult)
        return result

    async def heartbeat(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> str:
        self._check_owner(group_id)
        group = self._group(group_id, create=False)
        if group is None:
            return "UNKNOWN_MEMBER_ID"
        error = group.heartbeat(generation_id, member_id, group_instance_id)
        await self._after(group)
        return error

    async def leave(self, group_id: str, members: Sequence[tuple[str, str | None]]) -> list[str]:
        self._check_owner(group_id)
        group = self._group(group_id, create=False)
        if group is None:
            return ["UNKNOWN_MEMBER_ID" for _ in members]
        errors = [group.leave(member_id, instance_id) for member_id, instance_id in members]
        await self._after(group)
        return errors

    async def _after(self, group: ClassicGroup) -> None:
        """Persist what the group asks to persist, then answer parked requests."""
        if group.take_persist_request():
            try:
                await self._append(group.group_id, [self._group_record(group)])
            except CoordinatorError as error:
                logger.warning("could not persist group %s: %s", group.group_id, error)
        self._deliver(group)

    @staticmethod
    def _deliver(group: ClassicGroup) -> None:
        for waiter, result in group.drain():
            assert isinstance(waiter, asyncio.Future)
            if not waiter.done():
                waiter.set_result(result)

    def _group_record(self, group: ClassicGroup) -> tuple[bytes, bytes | None]:
        key = encode_group_key(GroupKey(group.group_id))
        if group.state is GroupState.DEAD:
            return key, None
        members = tuple(
            MemberValue(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.rebalance_timeout_ms,
                m.session_timeout_ms,
                m.metadata_for(group.protocol_name) if group.protocol_name else b"",
                m.assignment,
            )
            for m in group.members.values()
        )
        value = GroupValue(
            group.protocol_type or "",
            group.generation_id,
            group.protocol_name,
            group.leader_id or None,
            group.state_timestamp_ms,
            members,
        )
        return key, encode_group_value(value)

    def _next_tick_s(self) -> float:
        """Seconds until the earliest deadline of any group, between MIN_TICK_S and TICK_S:
        a session ends when it is due rather than up to a tick later (a deadline set while
        the ticker sleeps waits at most TICK_S)."""
        now = self.clock()
        earliest = now + int(TICK_S * 1000)
        for group in self.groups.values():
            deadline = group.next_deadline_ms()
            if deadline is not None and deadline < earliest:
                earliest = deadline
        for consumer in self.consumer_groups.values():
            deadline = consumer.next_deadline_ms()
            if deadline is not None and deadline < earliest:
                earliest = deadline
        # +1 ms: the clock counts whole milliseconds, so "due" is reached a bit after.
        return min(TICK_S, max(MIN_TICK_S, (earliest - now + 1) / 1000))

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(self._next_tick_s())
            now = self.clock()
            for group in list(self.groups.values()):
                deadline = group.next_deadline_ms()
                if deadline is not None and deadline <= now:
                    group.tick()
                    try:
                        await self._after(group)
                    except Exception:  # one group's failure must not stop the timers
                        logger.exception("timer of group %s failed", group.group_id)
            self.tick_consumer_groups(now)
            if now - self._last_retention_ms >= self.settings.retention_check_interval_ms:
                self._last_retention_ms = now
                await self.expire_offsets()

    # -- appends to __consumer_offsets ------------------------------------------------------
    async def _append(self, group_id: str, records: Iterable[tuple[bytes, bytes | None]]) -> None:
        partition = self.partition_for(group_id)
        now = self.clock()
        encoded = [Record(i, now, key, value) for i, (key, value) in enumerate(records)]
        if not encoded:
            return
        try:
            await self.writer.append((OFFSETS_TOPIC, partition), encode_batch(encoded))
        except PartitionWriteError as error:
            raise CoordinatorError(
                "NOT_COORDINATOR"
                if error.code == "NOT_LEADER_OR_FOLLOWER"
                else "COORDINATOR_NOT_AVAILABLE",
                str(error),
            ) from None

    async def delete_groups(self, group_ids: Sequence[str]) -> dict[str, str]:
        results = {}
        for group_id in group_ids:
            try:
                self._check_owner(group_id)
            except CoordinatorError as error:
                results[group_id] = error.code
                continue
            consumer = self.consumer_groups.get(group_id)
            if consumer is not None and not consumer.is_empty:
                results[group_id] = "NON_EMPTY_GROUP"
                continue
            group = self._group(group_id, create=False)
            if group is None and consumer is None and group_id not in self.offsets:
                results[group_id] = "GROUP_ID_NOT_FOUND"
                continue
            if group is not None and group.state is not GroupState.EMPTY:
                results[group_id] = "NON_EMPTY_GROUP"
                continue
            records = [
                (encode_offset_key(OffsetKey(group_id, t, p)), None)
                for t, p in self.offsets.get(group_id, {})
            ]
            records.append((encode_group_key(GroupKey(group_id)), None))
            try:
                await self._append(group_id, records)
            except CoordinatorError as error:
                results[group_id] = error.code
                continue
            if group is not None:
                group.mark_dead()
                self._deliver(group)
            self.groups.pop(group_id, None)
            if consumer is not None:
                self.consumer_groups.pop(group_id).mark_dead()
            self.offsets.pop(group_id, None)
            results[group_id] = "NONE"
        return results

    # -- listing -------------------------------------------------------------------------
    def list_groups(self) -> list[ClassicGroup]:
        return [
            g
            for g in self.groups.values()
            if g.state is not GroupState.DEAD and self.partition_for(g.group_id) in self._owned
        ]

    def describe(self, group_id: str) -> ClassicGroup | None:
        self._check_owner(group_id)
        if group_id in self.consumer_groups:
            return None  # DescribeGroups before v6 shows a consumer group as Dead (Kafka)
        return self._group(group_id, create=False)


def new_member_id(client_id: str) -> str:
    return f"{client_id}-{uuid.uuid4()}"
