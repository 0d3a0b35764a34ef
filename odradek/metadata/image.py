"""Metadata records and the immutable MetadataImage they build.

How this works and why (ARCHITECTURE.md "Metadata is a log"): every cluster change is
a record in ``__cluster_metadata``; the image is the fold of all records so far.
Images are never mutated — ``apply`` returns a new one sharing unchanged parts — so a
request handler that took ``broker.image`` sees one consistent cluster state even if
a topic is created while it runs.

Record encoding: each metadata record is one Kafka record whose key is the record
type (``b"Topic"``, ...) and whose value is the JSON of its fields. Kafka encodes
these with generated binary schemas; JSON keeps ``odradek dump-log
--print-data-log`` readable and is only ever read by odradek.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Final

TOPIC_RESOURCE: Final = "topic"
BROKER_RESOURCE: Final = "broker"
GROUP_RESOURCE: Final = "group"  # KIP-848 group configs
PRODUCER_ID_BLOCK_SIZE: Final = 1000
_EMPTY: Mapping[Any, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class MetadataRecord:
    """One change: ``kind`` names it, ``fields`` holds its JSON-able data."""

    kind: str
    fields: Mapping[str, Any]

    def encode(self) -> tuple[bytes, bytes]:
        return self.kind.encode(), json.dumps(dict(self.fields), sort_keys=True).encode()

    @classmethod
    def decode(cls, key: bytes | None, value: bytes | None) -> MetadataRecord:
        if key is None or value is None:
            raise ValueError("metadata record without key or value")
        return cls(key.decode(), json.loads(value))


@dataclass(frozen=True, slots=True)
class BrokerImage:
    broker_id: int
    endpoints: tuple[tuple[str, str, int], ...]  # (listener name, host, port)
    rack: str | None = None
    incarnation_id: str = ""


@dataclass(frozen=True, slots=True)
class PartitionImage:
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int = 0


@dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: Mapping[int, PartitionImage] = field(default_factory=lambda: _EMPTY)


@dataclass(frozen=True, slots=True)
class MetadataImage:
    offset: int = -1  # offset of the last record applied
    brokers: Mapping[int, BrokerImage] = field(default_factory=lambda: _EMPTY)
    topics: Mapping[str, TopicImage] = field(default_factory=lambda: _EMPTY)
    topic_names_by_id: Mapping[uuid.UUID, str] = field(default_factory=lambda: _EMPTY)
    configs: Mapping[tuple[str, str], Mapping[str, str]] = field(default_factory=lambda: _EMPTY)
    next_producer_id: int = 0

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicImage | None:
        name = self.topic_names_by_id.get(topic_id)
        return self.topics.get(name) if name is not None else None

    def topic_configs(self, topic: str) -> Mapping[str, str]:
        return self.configs.get((TOPIC_RESOURCE, topic), _EMPTY)

    def apply(self, records: Iterable[MetadataRecord], offset: int) -> MetadataImage:
        image = self
        for record in records:
            handler = _APPLY.get(record.kind)
            if handler is None:
                raise ValueError(f"unknown metadata record type {record.kind!r}")
            image = handler(image, record.fields)
        return replace(image, offset=offset)


def _with(mapping: Mapping[Any, Any], key: Any, value: Any) -> Mapping[Any, Any]:
    updated = dict(mapping)
    if value is None:
        updated.pop(key, None)
    else:
        updated[key] = value
    return MappingProxyType(updated)


def _register_broker(image: MetadataImage, f: Mapping[str, Any]) -> MetadataImage:
    broker = BrokerImage(
        f["broker_id"],
        tuple((e[0], e[1], e[2]) for e in f["endpoints"]),
        f.get("rack"),
        f.get("incarnation_id", ""),
    )
    return replace(image, brokers=_with(image.brokers, broker.broker_id, broker))


def _topic(image: MetadataImage, f: Mapping[str, Any]) -> MetadataImage:
    topic_id = uuid.UUID(f["topic_id"])
    topic = TopicImage(f["name"], topic_id)
    return replace(
        image,
        topics=_with(image.topics, topic.name, topic),
        topic_names_by_id=_with(image.topic_names_by_id, topic_id, topic.name),
    )


def _partition(image: MetadataImage, f: Mapping[str, Any]) -> MetadataImage:
    topic = image.topic_by_id(uuid.UUID(f["topic_id"]))
    if topic is None:
        raise ValueError(f"partition record for unknown topic {f['topic_id']}")
    partition = PartitionImage(
        f["partition"],
        tuple(f["replicas"]),
        tuple(f["isr"]),
        f["leader"],
        f["leader_epoch"],
        f.get("partition_epoch", 0),
    )
    updated = replace(topic, partitions=_with(topic.partitions, partition.partition, partition))
    return replace(image, topics=_with(image.topics, topic.name, updated))


def _remove_topic(image: MetadataImage, f: Mapping[str, Any]) -> MetadataImage:
    topic_id = uuid.UUID(f["topic_id"])
    name = image.topic_names_by_id.get(topic_id)
    if name is None:
        return image
    return replace(
        image,
        topics=_with(image.topics, name, None),
        topic_names_by_id=_with(image.topic_names_by_id, topic_id, None),
        configs=_with(image.configs, (TOPIC_RESOURCE, name), None),
    )


def _config(image: MetadataImage, f: Mapping[str, Any]) -> MetadataImage:
    resource = (f["resource_type"], f["resource_name"])
    current = image.configs.get(resource, _EMPTY)
    updated = _with(current, f["name"], f.get("value"))
    return replace(image, configs=_with(image.configs, resource, updated or None))


def _producer_ids(image: MetadataImage, f: Mapping[str, Any]) -> MetadataImage:
    return replace(image, next_producer_id=f["next_producer_id"])


_APPLY = {
    "RegisterBroker": _register_broker,
    "Topic": _topic,
    "Partition": _partition,
    "RemoveTopic": _remove_topic,
    "Config": _config,
    "ProducerIds": _producer_ids,
}
