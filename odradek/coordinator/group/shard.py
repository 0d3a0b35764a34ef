"""GroupShard: the groups and offsets of one ``__consumer_offsets`` partition.

How this works and why: the CoordinatorRuntime (coordinator/runtime.py) owns the
partitions this node leads and gives each a shard; this is the group coordinator's.
It holds the partition's classic groups (classic.py), KIP-848 consumer groups
(consumer.py; a disjoint id set) and committed offsets (offset_store.py), and meets
the runtime's ``CoordinatorShard`` Protocol:

- ``replay`` during a load: offset records go to the store (TxnOffsetCommit's,
  in transactional batches, through ``replay_transactional``, pending until their
  producer's marker reaches ``replay_end_transaction``); group records are kept
  by group id, last one winning (a tombstone deletes the group and its offsets), and
  ``on_loaded`` restores the classic groups from them — Stable with their members, so
  clients that reconnect keep their assignment without a rebalance. A malformed
  record is skipped with a warning. Consumer group membership is not persisted:
  after a move its members rejoin with epoch 0, as consumer_coordinator.py says;
- ``on_unloaded`` answers every parked JoinGroup/SyncGroup with NOT_COORDINATOR;
- ``tick`` runs the due group timers and, every ``offsets.retention.check.interval.ms``,
  offset expiry, as one write: the groups' records and the expired offsets'
  tombstones are appended together, and parked requests are answered after it.

Writes that change a classic group follow classic.py's rule — after every call the
owner persists if the group asks, then answers the waiters — through
``persist_and_deliver``: the group's record is the write's records, and the waiters
are answered once the append is done (a failed append is logged, as a group's state
is not rolled back: its members see the same error on their next request).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from odradek.coordinator.group.classic import ClassicGroup, GroupState
from odradek.coordinator.group.consumer import ConsumerGroup
from odradek.coordinator.group.offset_store import OffsetStore
from odradek.coordinator.group.records import (
    GroupKey,
    GroupValue,
    MemberValue,
    OffsetKey,
    RecordFormatError,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
)
from odradek.coordinator.runtime import CoordinatorError, CoordinatorResult
from odradek.records.codec import Record

if TYPE_CHECKING:
    from odradek.coordinator.group.coordinator import CoordinatorSettings

logger = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
T = TypeVar("T")


class GroupShard:
    def __init__(
        self, partition: int, settings: CoordinatorSettings, clock: Callable[[], int]
    ) -> None:
        self.partition = partition
        self.settings = settings
        self.clock = clock
        self.groups: dict[str, ClassicGroup] = {}
        self.consumer_groups: dict[str, ConsumerGroup] = {}
        self.offsets = OffsetStore()
        self._replayed_groups: dict[str, GroupValue | None] = {}
        self._next_retention_ms = clock() + settings.retention_check_interval_ms

    # -- CoordinatorShard ----------------------------------------------------------------
    def replay(self, record: Record) -> None:
        if record.key is None:
            return
        try:
            key = decode_key(record.key)
            if isinstance(key, OffsetKey):
                value = None if record.value is None else decode_offset_value(record.value)
                self.offsets.replay(key, value)
            elif record.value is None:
                self._replayed_groups[key.group] = None
                self.offsets.forget(key.group)
            else:
                self._replayed_groups[key.group] = decode_group_value(record.value)
        except RecordFormatError as error:
            logger.warning(
                "skipping malformed %s-%d record at %d: %s",
                OFFSETS_TOPIC,
                self.partition,
                record.offset,
                error,
            )

    def replay_transactional(self, producer_id: int, record: Record) -> None:
        """A TxnOffsetCommit record: pending in the store until its producer's marker."""
        if record.key is None:
            return
        try:
            key = decode_key(record.key)
            if isinstance(key, OffsetKey):
                value = None if record.value is None else decode_offset_value(record.value)
                self.offsets.replay_pending(producer_id, key, value)
        except RecordFormatError as error:
            logger.warning(
                "skipping malformed %s-%d transactional record at %d: %s",
                OFFSETS_TOPIC,
                self.partition,
                record.offset,
                error,
            )

    def replay_end_transaction(self, producer_id: int, commit: bool) -> None:
        self.offsets.end_transaction(producer_id, commit)

    def on_loaded(self) -> None:
        for group_id, value in self._replayed_groups.items():
            if value is not None and group_id not in self.groups:
                self.groups[group_id] = self.restore(group_id, value)
        self._replayed_groups.clear()

    def on_unloaded(self) -> None:
        for group in self.groups.values():
            group.mark_dead("NOT_COORDINATOR")
            deliver(group)
        self.groups.clear()
        for consumer in self.consumer_groups.values():
            consumer.mark_dead()
        self.consumer_groups.clear()

    def next_deadline_ms(self) -> int | None:
        earliest = self._next_retention_ms
        groups: list[ClassicGroup | ConsumerGroup] = [*self.groups.values()]
        for group in [*groups, *self.consumer_groups.values()]:
            deadline = group.next_deadline_ms()
            if deadline is not None and deadline < earliest:
                earliest = deadline
        return earliest

    def tick(self, now_ms: int) -> CoordinatorResult[None]:
        ticked = []
        records = []
        for group in list(self.groups.values()):
            deadline = group.next_deadline_ms()
            if deadline is not None and deadline <= now_ms:
                try:
                    group.tick()
                except Exception:  # one group's failure must not stop the timers
                    logger.exception("timer of group %s failed", group.group_id)
                    continue
                ticked.append(group)
                if group.take_persist_request():
                    records.append(self.group_record(group))
        for consumer in list(self.consumer_groups.values()):
            deadline = consumer.next_deadline_ms()
            if deadline is not None and deadline <= now_ms:
                try:
                    consumer.tick()
                except Exception:
                    logger.exception("timer of consumer group %s failed", consumer.group_id)
        expire = None
        if now_ms >= self._next_retention_ms:
            self._next_retention_ms = now_ms + self.settings.retention_check_interval_ms
            expired, expire = self.offsets.expire(
                now_ms - self.settings.retention_ms, self.has_members
            )
            records += expired

        def apply() -> None:
            if expire is not None and (count := expire()):
                logger.info("%s-%d: %d offsets expired", OFFSETS_TOPIC, self.partition, count)
            for group in ticked:
                deliver(group)

        def failed(error: CoordinatorError) -> None:
            logger.warning(
                "%s-%d: timers' records not written: %s", OFFSETS_TOPIC, self.partition, error
            )
            for group in ticked:
                deliver(group)

        return CoordinatorResult(None, records, apply, failed)

    # -- groups ----------------------------------------------------------------------------
    def classic(self, group_id: str, create: bool) -> ClassicGroup | None:
        """The classic group of this id (created if ``create``); GROUP_ID_NOT_FOUND
        while a consumer group with members holds the id (an empty one is converted)."""
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

    def take_empty_consumer_group(self, group_id: str, *, convert: bool) -> bool:
        """Whether the classic protocol may use this id: False while a consumer group with
        members holds it; an empty one is dropped when ``convert`` (it becomes classic)."""
        group = self.consumer_groups.get(group_id)
        if group is None:
            return True
        if not group.is_empty:
            return False
        if convert:
            logger.info("group %s: empty consumer group becomes a classic group", group_id)
            del self.consumer_groups[group_id]
            group.mark_dead()
        return True

    def has_members(self, group_id: str) -> bool:
        """Whether offset expiry must leave the group's offsets alone."""
        group = self.groups.get(group_id)
        if group is not None and group.state is not GroupState.EMPTY:
            return True
        consumer = self.consumer_groups.get(group_id)
        return consumer is not None and not consumer.is_empty

    def persist_and_deliver(self, group: ClassicGroup, response: T) -> CoordinatorResult[T]:
        """The write after a call on ``group``: its record if it asks to persist, and its
        waiters answered once that is written (or failed)."""
        records = [self.group_record(group)] if group.take_persist_request() else []

        def failed(error: CoordinatorError) -> T:
            logger.warning("could not persist group %s: %s", group.group_id, error)
            deliver(group)
            return response

        return CoordinatorResult(response, records, lambda: deliver(group), failed)

    def group_record(self, group: ClassicGroup) -> tuple[bytes, bytes | None]:
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

    def restore(self, group_id: str, value: GroupValue) -> ClassicGroup:
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


def deliver(group: ClassicGroup) -> None:
    """Answer the group's completed parked requests."""
    for waiter, result in group.drain():
        assert isinstance(waiter, asyncio.Future)
        if not waiter.done():
            waiter.set_result(result)


def new_member_id(client_id: str) -> str:
    return f"{client_id}-{uuid.uuid4()}"
