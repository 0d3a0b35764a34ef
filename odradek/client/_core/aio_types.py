"""Value types of the aiokafka-shaped faces, as ``aiokafka.structs`` names them.

How this works and why: code ported from aiokafka unpacks ``topic, partition = tp``,
builds ``OffsetAndMetadata(offset, "")`` and reads ``record.serialized_value_size``,
so the asyncio faces hand out and accept these shapes, not the confluent-kafka ones
of ``types.py`` (whose ``TopicPartition`` carries an offset as a third field). The
faces still accept any object with ``topic`` and ``partition`` (or a pair) wherever a
partition is asked for, so a confluent ``TopicPartition`` keeps working there.

``ConsumerRecord`` is a tuple laid out like the fetched columns (so the consumer
builds it straight from them, as it builds every record) with aiokafka's attribute
names; unlike aiokafka's dataclass it cannot be changed after it is made.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter
from typing import Any, NamedTuple


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class OffsetAndMetadata(NamedTuple):
    offset: int
    metadata: str


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp: int | None


class RecordMetadata(NamedTuple):
    """Where a record (or, from ``send_batch``, a whole batch) landed."""

    topic: str
    partition: int
    topic_partition: TopicPartition
    offset: int  # -1 with acks=0
    timestamp: int | None  # ms: the record's create time, or the broker's append time
    timestamp_type: int  # 0 = CreateTime, 1 = LogAppendTime
    log_start_offset: int | None


def as_pair(partition: Any) -> tuple[str, int]:
    """(topic, partition) from an aiokafka or confluent ``TopicPartition`` or a pair."""
    topic = getattr(partition, "topic", None)
    if topic is not None:
        return (topic, partition.partition)
    topic, number = partition[0], partition[1]
    return (topic, number)


class ConsumerRecord(tuple[Any, ...]):
    """A fetched record with ``aiokafka.structs.ConsumerRecord``'s attributes.

    Items 0-8 are the fetched columns (topic, partition, offset, timestamp,
    timestamp_type, key, value, headers, leader epoch); a record whose key or value
    went through a deserializer carries its serialized sizes as items 9 and 10.
    """

    __slots__ = ()

    topic: str = property(itemgetter(0))  # type: ignore[assignment]
    partition: int = property(itemgetter(1))  # type: ignore[assignment]
    offset: int = property(itemgetter(2))  # type: ignore[assignment]
    timestamp: int = property(itemgetter(3))  # type: ignore[assignment]
    timestamp_type: int = property(itemgetter(4))  # type: ignore[assignment]
    key: Any = property(itemgetter(5))
    value: Any = property(itemgetter(6))
    headers: Sequence[tuple[str, bytes]] = property(itemgetter(7))  # type: ignore[assignment]
    leader_epoch: int = property(itemgetter(8))  # type: ignore[assignment]
    checksum = None  # aiokafka: "Deprecated", and None for v2 record batches

    @classmethod
    def deserialized(
        cls,
        fetched: Sequence[Any],
        key_deserializer: Any,
        value_deserializer: Any,
    ) -> ConsumerRecord:
        """``fetched`` with its key and value through the deserializers (as aiokafka,
        each is called on None too), keeping the serialized sizes."""
        key, value = fetched[5], fetched[6]
        return tuple.__new__(
            cls,
            (
                *fetched[:5],
                key if key_deserializer is None else key_deserializer(key),
                value if value_deserializer is None else value_deserializer(value),
                *fetched[7:9],
                -1 if key is None else len(key),
                -1 if value is None else len(value),
            ),
        )

    @property
    def serialized_key_size(self) -> int:
        if len(self) > 9:
            return int(self[9])
        return -1 if self[5] is None else len(self[5])

    @property
    def serialized_value_size(self) -> int:
        if len(self) > 9:
            return int(self[10])
        return -1 if self[6] is None else len(self[6])

    def __repr__(self) -> str:
        return (
            f"ConsumerRecord(topic={self[0]!r}, partition={self[1]!r}, offset={self[2]!r}, "
            f"timestamp={self[3]!r}, timestamp_type={self[4]!r}, key={self[5]!r}, "
            f"value={self[6]!r}, checksum=None, "
            f"serialized_key_size={self.serialized_key_size!r}, "
            f"serialized_value_size={self.serialized_value_size!r}, headers={self[7]!r})"
        )
