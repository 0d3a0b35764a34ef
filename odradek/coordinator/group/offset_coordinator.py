"""Committed offsets of the GroupCoordinator: commit, fetch, delete, expire.

How this works and why (seeds/000 进度跟踪): a group's committed offsets belong to the
group id, whatever its protocol (classic or KIP-848), and live in memory as the last
value per (topic, partition) replayed from, and appended to, the group's partition of
``__consumer_offsets`` — an offset key with a value commits, with no value (a
tombstone) deletes. Every change is appended with acks=all before memory changes and
before the client is answered, so a commit the client heard about survives a crash.
Offsets are deleted when asked (OffsetDelete, DeleteGroups), when their topic is
deleted (so a re-created topic does not inherit them), and when they expire
(``offsets.retention.minutes`` after the commit, for groups without members).

``GroupCoordinator`` (coordinator.py) inherits this mixin; it provides the attributes
and methods declared below.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.coordinator.group.classic import ClassicGroup, GroupState
from odradek.coordinator.group.consumer import ConsumerGroup
from odradek.coordinator.group.records import (
    OffsetKey,
    OffsetValue,
    encode_offset_key,
    encode_offset_value,
)
from odradek.metadata.image import MetadataImage

if TYPE_CHECKING:
    import uuid
    from collections.abc import Callable

    from odradek.coordinator.group.coordinator import CoordinatorSettings
    from odradek.metadata.view import MetadataView

logger = logging.getLogger(__name__)


class CoordinatorError(Exception):
    """A request-level error: ``code`` is the Kafka error name."""

    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(message or code)
        self.code = code


@dataclass(frozen=True, slots=True)
class OffsetCommit:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str | None


class OffsetCoordination:
    metadata: MetadataView
    clock: Callable[[], int]
    settings: CoordinatorSettings
    groups: dict[str, ClassicGroup]
    consumer_groups: dict[str, ConsumerGroup]
    offsets: dict[str, dict[tuple[str, int], OffsetValue]]
    _owned: set[int]  # partitions of __consumer_offsets this broker leads
    _topic_ids: dict[str, uuid.UUID]
    _loads: set[asyncio.Task[None]]

    def _check_owner(self, group_id: str) -> None:  # provided by GroupCoordinator
        raise NotImplementedError

    def partition_for(self, group_id: str) -> int:  # provided by GroupCoordinator
        raise NotImplementedError

    def _group(self, group_id: str, create: bool) -> ClassicGroup | None:  # GroupCoordinator
        raise NotImplementedError

    async def _append(  # provided by GroupCoordinator
        self, group_id: str, records: Iterable[tuple[bytes, bytes | None]]
    ) -> None:
        raise NotImplementedError

    async def commit_offsets(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        commits: Sequence[OffsetCommit],
        api_version: int = 9,
    ) -> dict[tuple[str, int], str]:
        """Per (topic, partition): the error name; all-or-nothing per request otherwise.

        A commit with generation (member epoch) < 0 to a group that does not exist
        creates a simple group and is accepted whatever member id it carries, as in
        Kafka; one with a generation is GROUP_ID_NOT_FOUND (v9+) or ILLEGAL_GENERATION.
        """
        self._check_owner(group_id)
        consumer = self.consumer_groups.get(group_id)  # generation_id is its member epoch
        group = self._group(group_id, create=False) if consumer is None else None
        if group is None and consumer is None:
            if generation_id >= 0:
                error = "GROUP_ID_NOT_FOUND" if api_version >= 9 else "ILLEGAL_GENERATION"
                return {(c.topic, c.partition): error for c in commits}
            group = self._group(group_id, create=True)  # a standalone consumer's group
        validator = consumer if consumer is not None else group
        assert validator is not None
        error = validator.validate_offset_commit(generation_id, member_id, group_instance_id)
        if error != "NONE":
            return {(c.topic, c.partition): error for c in commits}
        results: dict[tuple[str, int], str] = {}
        accepted: list[OffsetCommit] = []
        image = self.metadata.image
        for commit in commits:
            topic = image.topics.get(commit.topic)
            if topic is None or commit.partition not in topic.partitions:
                results[(commit.topic, commit.partition)] = "UNKNOWN_TOPIC_OR_PARTITION"
            elif (
                commit.metadata is not None
                and len(commit.metadata.encode()) > self.settings.metadata_max_bytes
            ):
                results[(commit.topic, commit.partition)] = "OFFSET_METADATA_TOO_LARGE"
            else:
                accepted.append(commit)
        now = self.clock()
        values = [
            (
                OffsetKey(group_id, c.topic, c.partition),
                OffsetValue(c.offset, c.leader_epoch, c.metadata or "", now),
            )
            for c in accepted
        ]
        try:
            await self._append(
                group_id, [(encode_offset_key(k), encode_offset_value(v)) for k, v in values]
            )
        except CoordinatorError as failure:
            results.update({(c.topic, c.partition): failure.code for c in accepted})
            return results
        committed = self.offsets.setdefault(group_id, {})
        for key, value in values:
            committed[(key.topic, key.partition)] = value
            results[(key.topic, key.partition)] = "NONE"
        return results

    def fetch_offsets(
        self,
        group_id: str,
        partitions: Sequence[tuple[str, int]] | None,
        member_id: str | None = None,
        member_epoch: int = -1,
    ) -> dict[tuple[str, int], OffsetValue | None]:
        """``member_id``/``member_epoch`` (OffsetFetch v9) are checked for consumer groups."""
        self._check_owner(group_id)
        consumer = self.consumer_groups.get(group_id)
        error = consumer.validate_offset_fetch(member_id, member_epoch) if consumer else "NONE"
        if error != "NONE":
            raise CoordinatorError(error)
        committed = self.offsets.get(group_id, {})
        if partitions is None:
            return dict(committed)
        return {tp: committed.get(tp) for tp in partitions}

    async def delete_offsets(
        self, group_id: str, partitions: Sequence[tuple[str, int]]
    ) -> dict[tuple[str, int], str]:
        self._check_owner(group_id)
        consumer = self.consumer_groups.get(group_id)
        group = self._group(group_id, create=False) if consumer is None else None
        committed = self.offsets.get(group_id)
        if group is None and consumer is None and not committed:
            raise CoordinatorError("GROUP_ID_NOT_FOUND")
        subscribed = set()
        if consumer is not None and not consumer.is_empty:
            subscribed = consumer.subscribed_topics()
        elif group is not None and group.state is not GroupState.EMPTY:
            subscribed = group.subscribed_topics()
        results = {}
        tombstones = []
        for topic, partition in partitions:
            if topic in subscribed:
                results[(topic, partition)] = "GROUP_SUBSCRIBED_TO_TOPIC"
            elif committed and (topic, partition) in committed:
                tombstones.append((topic, partition))
                results[(topic, partition)] = "NONE"
            else:
                results[(topic, partition)] = "NONE"
        await self._append(
            group_id, [(encode_offset_key(OffsetKey(group_id, t, p)), None) for t, p in tombstones]
        )
        for tp in tombstones:
            if committed is not None:
                committed.pop(tp, None)
        return results

    async def expire_offsets(self) -> int:
        """offsets.retention.minutes: drop offsets of empty groups committed long ago."""
        horizon = self.clock() - self.settings.retention_ms
        expired = 0
        for group_id, committed in list(self.offsets.items()):
            group = self.groups.get(group_id)
            if group is not None and group.state is not GroupState.EMPTY:
                continue
            consumer = self.consumer_groups.get(group_id)
            if consumer is not None and not consumer.is_empty:
                continue
            if self.partition_for(group_id) not in self._owned:
                continue
            old = [tp for tp, value in committed.items() if value.commit_timestamp < horizon]
            if not old:
                continue
            try:
                await self._append(
                    group_id, [(encode_offset_key(OffsetKey(group_id, t, p)), None) for t, p in old]
                )
            except CoordinatorError:
                continue
            for tp in old:
                committed.pop(tp, None)
            expired += len(old)
        return expired

    def _forget_deleted_topics(self, image: MetadataImage) -> None:
        """Kafka's onPartitionsDeleted: the committed offsets of a deleted topic are
        deleted too, so a topic re-created under its name does not inherit them."""
        topic_ids = {name: topic.topic_id for name, topic in image.topics.items()}
        gone = {name for name, id_ in self._topic_ids.items() if topic_ids.get(name) != id_}
        self._topic_ids = topic_ids
        if not gone:
            return
        stale = {
            group_id: {tp: value for tp, value in committed.items() if tp[0] in gone}
            for group_id, committed in self.offsets.items()
        }
        stale = {group_id: values for group_id, values in stale.items() if values}
        if stale:
            task = asyncio.get_running_loop().create_task(self._delete_stale_offsets(stale))
            self._loads.add(task)
            task.add_done_callback(self._loads.discard)

    async def _delete_stale_offsets(
        self, stale: dict[str, dict[tuple[str, int], OffsetValue]]
    ) -> None:
        for group_id, values in stale.items():
            committed = self.offsets.get(group_id, {})
            # Only what is still the value seen at deletion (not a newer commit).
            old = [tp for tp, value in values.items() if committed.get(tp) is value]
            if not old or self.partition_for(group_id) not in self._owned:
                continue
            try:
                await self._append(
                    group_id, [(encode_offset_key(OffsetKey(group_id, t, p)), None) for t, p in old]
                )
            except CoordinatorError as error:
                logger.warning("could not delete offsets of deleted topics: %s", error)
                continue
            for tp in old:
                if committed.get(tp) is values[tp]:
                    committed.pop(tp, None)
