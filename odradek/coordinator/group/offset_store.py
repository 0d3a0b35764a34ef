"""OffsetStore: the committed offsets of one ``__consumer_offsets`` partition's groups.

How this works and why (seeds/000 进度跟踪): a group's committed offsets belong to the
group id, whatever its protocol (classic or KIP-848), and live in memory as the last
value per (topic, partition) replayed from, and appended to, the group's partition —
an offset key with a value commits, with no value (a tombstone) deletes. The store is
sans-IO: each change is planned as a ``CoordinatorResult`` whose records the runtime
appends (acks=all, at the high watermark) and whose ``apply`` changes memory only
after the append succeeded, so a commit the client heard about survives a crash or a
leader change, and a failed one changes nothing. Offsets are deleted when asked
(OffsetDelete, DeleteGroups), when their topic is deleted (so a re-created topic does
not inherit them), and when they expire (``offsets.retention.minutes`` after the
commit, for groups without members). Membership checks are the caller's (the group
decides who may commit); the store checks only what concerns the offsets.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass

from odradek.coordinator.group.records import (
    OffsetKey,
    OffsetValue,
    encode_offset_key,
    encode_offset_value,
)
from odradek.coordinator.runtime import CoordinatorError, CoordinatorResult, KeyValue
from odradek.metadata.image import MetadataImage

TopicPartition = tuple[str, int]
Results = dict[TopicPartition, str]


@dataclass(frozen=True, slots=True)
class OffsetCommit:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str | None


def tombstones(group_id: str, partitions: Iterable[TopicPartition]) -> list[KeyValue]:
    return [(encode_offset_key(OffsetKey(group_id, t, p)), None) for t, p in partitions]


class OffsetStore:
    """Committed offsets, and the transactional ones still waiting for their marker.

    TxnOffsetCommit (KIP-98) writes offsets in a transactional batch of the producer;
    they are *pending* — invisible to OffsetFetch, which answers UNSTABLE_OFFSET_COMMIT
    for them when asked for stable offsets (KIP-447) — until the transaction
    coordinator's COMMIT marker lands in this partition (``end_transaction``), which
    makes them committed, or its ABORT, which drops them. A pending offset does not
    replace one committed by a plain OffsetCommit written after it (Kafka's rule):
    ``_serial`` orders the two by when each was written.
    """

    def __init__(self) -> None:
        self.committed: dict[str, dict[TopicPartition, OffsetValue]] = {}
        # producer id -> group -> (topic, partition) -> (value, serial)
        self.pending: dict[int, dict[str, dict[TopicPartition, tuple[OffsetValue, int]]]] = {}
        self._serial = 0  # counts writes, in log order
        self._written: dict[tuple[str, TopicPartition], int] = {}  # serial of committed ones

    # -- load ----------------------------------------------------------------------------
    def replay(self, key: OffsetKey, value: OffsetValue | None) -> None:
        committed = self.committed.setdefault(key.group, {})
        self._serial += 1
        self._written[(key.group, (key.topic, key.partition))] = self._serial
        if value is None:
            committed.pop((key.topic, key.partition), None)
        else:
            committed[(key.topic, key.partition)] = value

    def replay_pending(self, producer_id: int, key: OffsetKey, value: OffsetValue | None) -> None:
        """A TxnOffsetCommit record: pending until its producer's marker."""
        if value is None:
            return  # coordinators never write transactional tombstones
        self._serial += 1
        groups = self.pending.setdefault(producer_id, {})
        groups.setdefault(key.group, {})[(key.topic, key.partition)] = (value, self._serial)

    def end_transaction(self, producer_id: int, commit: bool) -> int:
        """The producer's marker: its pending offsets become committed (COMMIT) or are
        dropped (ABORT). Returns how many were committed."""
        groups = self.pending.pop(producer_id, None)
        if not commit or not groups:
            return 0
        count = 0
        for group_id, values in groups.items():
            committed = self.committed.setdefault(group_id, {})
            for tp, (value, serial) in values.items():
                if self._written.get((group_id, tp), 0) < serial:
                    committed[tp] = value
                    self._written[(group_id, tp)] = serial
                    count += 1
        return count

    def unstable(self, group_id: str) -> set[TopicPartition]:
        """The group's partitions with an offset pending in an open transaction."""
        return {tp for groups in self.pending.values() for tp in groups.get(group_id, {})}

    # -- views ---------------------------------------------------------------------------
    def has_group(self, group_id: str) -> bool:
        return group_id in self.committed

    def of(self, group_id: str) -> dict[TopicPartition, OffsetValue]:
        return self.committed.get(group_id, {})

    def fetch(
        self, group_id: str, partitions: Sequence[TopicPartition] | None
    ) -> dict[TopicPartition, OffsetValue | None]:
        committed = self.of(group_id)
        if partitions is None:
            return dict(committed)
        return {tp: committed.get(tp) for tp in partitions}

    # -- changes (each a CoordinatorResult for the runtime's write queue) -----------------
    def commit(
        self,
        group_id: str,
        commits: Sequence[OffsetCommit],
        image: MetadataImage,
        metadata_max_bytes: int,
        now_ms: int,
    ) -> CoordinatorResult[Results]:
        """OffsetCommit after the group accepted the member: per (topic, partition) the
        error name; the accepted ones all succeed or all fail with the append."""
        results: Results = {}
        values: list[tuple[OffsetKey, OffsetValue]] = []
        for c in commits:
            topic = image.topics.get(c.topic)
            if topic is None or c.partition not in topic.partitions:
                results[(c.topic, c.partition)] = "UNKNOWN_TOPIC_OR_PARTITION"
            elif c.metadata is not None and len(c.metadata.encode()) > metadata_max_bytes:
                results[(c.topic, c.partition)] = "OFFSET_METADATA_TOO_LARGE"
            else:
                value = OffsetValue(c.offset, c.leader_epoch, c.metadata or "", now_ms)
                values.append((OffsetKey(group_id, c.topic, c.partition), value))
        accepted = [(k.topic, k.partition) for k, _ in values]

        def apply() -> None:
            for key, value in values:
                self.replay(key, value)

        def failed(error: CoordinatorError) -> Results:
            return results | dict.fromkeys(accepted, error.code)

        return CoordinatorResult(
            results | dict.fromkeys(accepted, "NONE"),
            [(encode_offset_key(k), encode_offset_value(v)) for k, v in values],
            apply,
            failed,
        )

    def txn_commit(
        self,
        group_id: str,
        producer: tuple[int, int],
        commits: Sequence[OffsetCommit],
        image: MetadataImage,
        metadata_max_bytes: int,
        now_ms: int,
    ) -> CoordinatorResult[Results]:
        """TxnOffsetCommit: as ``commit``, but written as a transactional batch of
        ``producer`` (id, epoch) and pending until its marker."""
        planned = self.commit(group_id, commits, image, metadata_max_bytes, now_ms)
        values = [
            (OffsetKey(group_id, c.topic, c.partition), c)
            for c in commits
            if planned.response.get((c.topic, c.partition)) == "NONE"
        ]

        def apply() -> None:
            for key, c in values:
                value = OffsetValue(c.offset, c.leader_epoch, c.metadata or "", now_ms)
                self.replay_pending(producer[0], key, value)

        return CoordinatorResult(
            planned.response, planned.records, apply, planned.rollback, producer=producer
        )

    def delete(
        self, group_id: str, partitions: Sequence[TopicPartition], subscribed: Collection[str]
    ) -> CoordinatorResult[Results]:
        """OffsetDelete: a topic the group is subscribed to keeps its offsets."""
        committed = self.committed.get(group_id) or {}
        results: Results = {}
        gone = []
        for topic, partition in partitions:
            if topic in subscribed:
                results[(topic, partition)] = "GROUP_SUBSCRIBED_TO_TOPIC"
            else:
                results[(topic, partition)] = "NONE"
                if (topic, partition) in committed:
                    gone.append((topic, partition))
        return CoordinatorResult(
            results, tombstones(group_id, gone), lambda: self._drop(group_id, gone)
        )

    def delete_group(self, group_id: str) -> list[KeyValue]:
        """The tombstones of all the group's offsets (DeleteGroups; ``forget`` after)."""
        return tombstones(group_id, self.of(group_id))

    def forget(self, group_id: str) -> None:
        self.committed.pop(group_id, None)
        for groups in self.pending.values():
            groups.pop(group_id, None)

    def expire(
        self, horizon_ms: int, has_members: Callable[[str], bool]
    ) -> tuple[list[KeyValue], Callable[[], int]]:
        """offsets.retention.minutes: tombstones for the offsets of groups without
        members committed before ``horizon_ms``, and the apply (returns the count)."""
        old = {
            group_id: [tp for tp, v in committed.items() if v.commit_timestamp < horizon_ms]
            for group_id, committed in self.committed.items()
            if not has_members(group_id)
        }
        old = {group_id: tps for group_id, tps in old.items() if tps}
        records = [kv for group_id, tps in old.items() for kv in tombstones(group_id, tps)]

        def apply() -> int:
            for group_id, tps in old.items():
                self._drop(group_id, tps)
            return sum(len(tps) for tps in old.values())

        return records, apply

    def of_topics(self, gone: Collection[str]) -> dict[str, dict[TopicPartition, OffsetValue]]:
        """Each group's offsets in the topics ``gone`` (deleted): the values seen now."""
        stale = {
            group_id: {tp: value for tp, value in committed.items() if tp[0] in gone}
            for group_id, committed in self.committed.items()
        }
        return {group_id: values for group_id, values in stale.items() if values}

    def delete_stale(
        self, stale: dict[str, dict[TopicPartition, OffsetValue]]
    ) -> CoordinatorResult[None]:
        """Kafka's onPartitionsDeleted: delete the offsets of deleted topics that are
        still the values seen at deletion (not a newer commit to a namesake)."""
        old = {
            group_id: [tp for tp, v in values.items() if self.of(group_id).get(tp) is v]
            for group_id, values in stale.items()
        }
        records = [kv for group_id, tps in old.items() for kv in tombstones(group_id, tps)]

        def apply() -> None:
            for group_id, tps in old.items():
                committed = self.of(group_id)
                for tp in tps:
                    if committed.get(tp) is stale[group_id][tp]:
                        committed.pop(tp, None)

        return CoordinatorResult(None, records, apply)

    def _drop(self, group_id: str, partitions: Iterable[TopicPartition]) -> None:
        committed = self.committed.get(group_id)
        if committed is not None:
            for tp in partitions:
                committed.pop(tp, None)
