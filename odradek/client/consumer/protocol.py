"""Consumer-protocol bytes: Kafka's subscription and assignment schemas, and the
``StickyAssignor`` user data.

How this works and why: in the classic group protocol every member sends its
*subscription* in JoinGroup and the leader sends each member its *assignment* in
SyncGroup; members written with librdkafka, the Java client and this client share
groups, so the bytes follow Kafka's ``ConsumerProtocolSubscription`` and
``ConsumerProtocolAssignment`` schemas exactly:

- an int16 version, then that version's fields, encoded by kio's ``data`` entities
  (which carry no version themselves, so it is written and read here);
- subscription v0: topics, user data; v1 adds the owned partitions (KIP-429), v2 the
  generation, v3 the rack (KIP-881); assignment v0–v3 share one layout;
- a version newer than 3 is read as v3 and the bytes after its fields are ignored, as
  the Java client does (newer versions only append fields); a negative one is an error;
- empty assignment bytes — a member the leader left out — are an empty assignment.

``StickyAssignorUserData`` (no version prefix) is what Java's eager ``StickyAssignor``
and kafka-python's ``sticky`` put in the subscription's user data: the previous
assignment as ``[topic, [partition]]`` and, from v1, the generation. Decoding tries v1,
then v0, then gives up, as Java does.
"""

from __future__ import annotations

import importlib
import io
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any, Final, NamedTuple

from kio.serial import entity_reader, entity_writer

from odradek.protocol.bounds import checker

HIGHEST_VERSION: Final = 3
NO_GENERATION: Final = -1

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class TopicPartition(NamedTuple):
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class Subscription:
    """One member's JoinGroup metadata, plus its group.instance.id from the member list."""

    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: tuple[TopicPartition, ...] = ()  # v1+
    generation: int = NO_GENERATION  # v2+
    rack: str | None = None  # v3+
    group_instance_id: str | None = None  # not encoded: JoinGroup lists it per member


@dataclass(frozen=True, slots=True)
class Assignment:
    partitions: tuple[TopicPartition, ...]
    user_data: bytes | None = None


class ConsumerProtocolError(ValueError):
    """Subscription, assignment or assignor user data that does not decode."""


# -- consumer protocol bytes ---------------------------------------------------------------
_ENTITIES: Final = {
    "subscription": "ConsumerProtocolSubscription",
    "assignment": "ConsumerProtocolAssignment",
}


@cache
def _schema(kind: str, version: int) -> Any:
    return importlib.import_module(f"kio.schema.consumer_protocol_{kind}.v{version}.data")


def _clamp(version: int, what: str) -> int:
    if version < 0:
        raise ConsumerProtocolError(f"unsupported {what} version {version}")
    return min(version, HIGHEST_VERSION)


def _check_encode_version(version: int) -> None:
    if not 0 <= version <= HIGHEST_VERSION:
        raise ValueError(f"consumer protocol versions are 0-{HIGHEST_VERSION}, not {version}")


def _grouped(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    """Partitions by topic, topics in order of first appearance (as Java writes them)."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return by_topic


def _write(entity: Any, prefix_version: int) -> bytes:
    buffer = io.BytesIO()
    buffer.write(_I16.pack(prefix_version))
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


def protocol_version(data: bytes) -> int:
    """The int16 version a subscription or assignment starts with."""
    if len(data) < 2:
        raise ConsumerProtocolError(f"{len(data)} bytes hold no consumer protocol version")
    return int(_I16.unpack_from(data, 0)[0])


def _read(kind: str, data: bytes) -> Any:
    version = _clamp(protocol_version(data), kind)
    entity_type = getattr(_schema(kind, version), _ENTITIES[kind])
    try:
        # Another group member wrote these bytes: check its counts before kio reads them.
        checker(entity_type)(data, 2)
        entity, _size = entity_reader(entity_type)(data, 2)
    except Exception as error:  # kio raises assorted errors on short or garbled input
        raise ConsumerProtocolError(
            f"cannot decode {kind} v{version}: {type(error).__name__}: {error}"
        ) from None
    return entity


def encode_subscription(subscription: Subscription, version: int = HIGHEST_VERSION) -> bytes:
    """``ConsumerProtocolSubscription`` bytes: int16 version, then that version's fields."""
    _check_encode_version(version)
    module = _schema("subscription", version)
    fields: dict[str, Any] = {
        "topics": tuple(subscription.topics),
        "user_data": subscription.user_data,
    }
    if version >= 1:
        fields["owned_partitions"] = tuple(
            module.TopicPartition(topic=topic, partitions=tuple(partitions))
            for topic, partitions in _grouped(subscription.owned_partitions).items()
        )
    if version >= 2:
        fields["generation_id"] = subscription.generation
    if version >= 3:
        fields["rack_id"] = subscription.rack
    return _write(module.ConsumerProtocolSubscription(**fields), version)


def decode_subscription(data: bytes, group_instance_id: str | None = None) -> Subscription:
    entity = _read("subscription", data)
    owned = tuple(
        TopicPartition(str(tp.topic), int(p))
        for tp in getattr(entity, "owned_partitions", ())
        for p in tp.partitions
    )
    return Subscription(
        topics=tuple(str(t) for t in entity.topics),
        user_data=None if entity.user_data is None else bytes(entity.user_data),
        owned_partitions=owned,
        generation=int(getattr(entity, "generation_id", NO_GENERATION)),
        rack=getattr(entity, "rack_id", None),
        group_instance_id=group_instance_id,
    )


def encode_assignment(assignment: Assignment, version: int = HIGHEST_VERSION) -> bytes:
    """``ConsumerProtocolAssignment`` bytes (v0–v3 share one layout)."""
    _check_encode_version(version)
    module = _schema("assignment", version)
    entity = module.ConsumerProtocolAssignment(
        assigned_partitions=tuple(
            module.TopicPartition(topic=topic, partitions=tuple(partitions))
            for topic, partitions in _grouped(assignment.partitions).items()
        ),
        user_data=assignment.user_data,
    )
    return _write(entity, version)


def decode_assignment(data: bytes) -> Assignment:
    """An assignment; empty bytes (a member the leader left out) is an empty assignment."""
    if not data:
        return Assignment(())
    entity = _read("assignment", data)
    return Assignment(
        partitions=tuple(
            TopicPartition(str(tp.topic), int(p))
            for tp in entity.assigned_partitions
            for p in tp.partitions
        ),
        user_data=None if entity.user_data is None else bytes(entity.user_data),
    )


# -- StickyAssignor user data ------------------------------------------------------------
def encode_sticky_user_data(owned: Iterable[TopicPartition], generation: int) -> bytes:
    """``StickyAssignorUserData`` v1 (no version prefix): previous assignment, generation."""
    grouped = _grouped(owned)
    out = [_I32.pack(len(grouped))]
    for topic, partitions in grouped.items():
        name = topic.encode()
        out.append(_I16.pack(len(name)) + name + _I32.pack(len(partitions)))
        out.append(struct.pack(f">{len(partitions)}i", *partitions))
    out.append(_I32.pack(generation))
    return b"".join(out)


def decode_sticky_user_data(data: bytes) -> tuple[tuple[TopicPartition, ...], int] | None:
    """(previous assignment, generation) from v1, or v0 (generation -1); None if neither.

    kafka-python 3 writes the v1 struct behind an int16 version (``00 01``); Java reads
    that as garbage and ignores it. It is read here too: a plain v1 starting with those
    bytes would list at least 65,536 topics.
    """
    decoded = _parse_sticky(data)
    if decoded is None and data[:2] == b"\x00\x01":
        decoded = _parse_sticky(data[2:])
    return decoded


def _parse_sticky(data: bytes) -> tuple[tuple[TopicPartition, ...], int] | None:
    try:
        count = _I32.unpack_from(data, 0)[0]
        if not 0 <= count <= len(data):
            return None
        offset = 4
        owned: list[TopicPartition] = []
        for _ in range(count):
            size = _I16.unpack_from(data, offset)[0]
            if size < 0 or offset + 2 + size > len(data):
                return None
            topic = bytes(data[offset + 2 : offset + 2 + size]).decode()
            offset += 2 + size
            partitions = _I32.unpack_from(data, offset)[0]
            if not 0 <= partitions <= (len(data) - offset - 4) // 4:
                return None
            values = struct.unpack_from(f">{partitions}i", data, offset + 4)
            offset += 4 + 4 * partitions
            owned.extend(TopicPartition(topic, p) for p in values)
    except (struct.error, UnicodeDecodeError):
        return None
    if len(data) - offset >= 4:  # v1: the generation follows
        return tuple(owned), int(_I32.unpack_from(data, offset)[0])
    return tuple(owned), NO_GENERATION
