"""MetadataDelta: what changed between two metadata images.

How this works and why (KRaft's MetadataDelta): a broker that rescanned the whole
image on every commit would cost O(partitions) per change and, worse, could only
guess from an absence what happened ("not in the image" may mean deleted, or not yet
known). The loader instead hands subscribers the delta of each commit: the topics
created and deleted (by id, so a topic deleted and re-created under the same name is
both), every partition whose state changed with its old and new state, brokers,
configs per resource, and the producer-id block. Subscribers act on exactly that.

A delta is computed by comparing the old and new image only at the keys the records
touched (``ChangedKeys``), so it is the net change of a run of batches: a topic created
and deleted within one replay is in neither list. ``between(old, new)`` without keys
compares everything; it gives the same delta and serves the first, full publication.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from odradek.metadata.image import (
    BROKER_RESOURCE,
    TOPIC_RESOURCE,
    BrokerImage,
    ChangedKeys,
    MetadataImage,
    PartitionImage,
    TopicImage,
)

_EMPTY: Mapping[Any, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class PartitionChange:
    """A partition created (``old`` None) or whose state changed, under ``topic``."""

    topic: TopicImage  # the topic in the new image
    old: PartitionImage | None
    new: PartitionImage


@dataclass(frozen=True, slots=True)
class BrokerChange:
    old: BrokerImage | None  # None: newly registered
    new: BrokerImage | None  # None: unregistered


@dataclass(frozen=True, slots=True)
class ConfigChange:
    """A resource's explicit configs before and after (empty: none set)."""

    old: Mapping[str, str]
    new: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class MetadataDelta:
    """The change from the image at ``previous_offset`` to the one at ``offset``."""

    previous_offset: int
    offset: int
    created_topics: Mapping[uuid.UUID, TopicImage] = field(default_factory=lambda: _EMPTY)
    deleted_topics: Mapping[uuid.UUID, TopicImage] = field(default_factory=lambda: _EMPTY)
    # keyed by (topic id, partition); partitions of deleted topics are not listed
    partitions: Mapping[tuple[uuid.UUID, int], PartitionChange] = field(
        default_factory=lambda: _EMPTY
    )
    brokers: Mapping[int, BrokerChange] = field(default_factory=lambda: _EMPTY)
    configs: Mapping[tuple[str, str], ConfigChange] = field(default_factory=lambda: _EMPTY)
    producer_ids: tuple[int, int] | None = None  # (old, new) next producer id
    # SCRAM credentials, ACLs or client quotas differ (their owners read the image)
    security: bool = False

    @property
    def topics_changed(self) -> bool:
        return bool(self.created_topics or self.deleted_topics or self.partitions)

    @property
    def broker_configs_changed(self) -> bool:
        return any(kind == BROKER_RESOURCE for kind, _ in self.configs)

    def topic_configs_changed(self) -> set[str]:
        return {name for kind, name in self.configs if kind == TOPIC_RESOURCE}

    def is_empty(self) -> bool:
        return not (
            self.topics_changed
            or self.brokers
            or self.configs
            or self.producer_ids
            or self.security
        )


def between(
    old: MetadataImage, new: MetadataImage, keys: ChangedKeys | None = None
) -> MetadataDelta:
    """The delta from ``old`` to ``new``, comparing only ``keys`` (everything if None)."""
    if keys is None:
        keys = _all_keys(old, new)
    created: dict[uuid.UUID, TopicImage] = {}
    deleted: dict[uuid.UUID, TopicImage] = {}
    for topic_id in keys.topic_ids:
        before, after = _topic(old, topic_id), _topic(new, topic_id)
        if before is None and after is not None:
            created[topic_id] = after
        elif before is not None and after is None:
            deleted[topic_id] = before
    partitions: dict[tuple[uuid.UUID, int], PartitionChange] = {}
    for name, index in keys.partitions:
        topic = new.topics.get(name)
        state = topic.partitions.get(index) if topic is not None else None
        if topic is None or state is None:
            continue  # deleted since: the topic's deletion says it
        was = old.topics.get(name)
        same_topic = was is not None and was.topic_id == topic.topic_id
        previous = was.partitions.get(index) if was is not None and same_topic else None
        if previous != state:
            partitions[(topic.topic_id, index)] = PartitionChange(topic, previous, state)
    brokers: dict[int, BrokerChange] = {}
    for broker_id in keys.brokers:
        after_broker = new.brokers.get(broker_id)
        before_broker = old.brokers.get(broker_id)
        if after_broker != before_broker:
            brokers[broker_id] = BrokerChange(before_broker, after_broker)
    configs: dict[tuple[str, str], ConfigChange] = {}
    for resource in keys.resources:
        before_configs = old.configs.get(resource, _EMPTY)
        after_configs = new.configs.get(resource, _EMPTY)
        if dict(before_configs) != dict(after_configs):
            configs[resource] = ConfigChange(before_configs, after_configs)
    producer_ids = None
    if old.next_producer_id != new.next_producer_id:
        producer_ids = (old.next_producer_id, new.next_producer_id)
    return MetadataDelta(
        old.offset,
        new.offset,
        _frozen(created),
        _frozen(deleted),
        _frozen(partitions),
        _frozen(brokers),
        _frozen(configs),
        producer_ids,
        old.scram_credentials != new.scram_credentials
        or old.acls != new.acls
        or old.client_quotas != new.client_quotas,
    )


def _topic(image: MetadataImage, topic_id: uuid.UUID) -> TopicImage | None:
    """The topic with this id (not a later namesake a stale id entry points to)."""
    topic = image.topic_by_id(topic_id)
    return topic if topic is not None and topic.topic_id == topic_id else None


def _all_keys(old: MetadataImage, new: MetadataImage) -> ChangedKeys:
    keys = ChangedKeys()
    for image in (old, new):
        keys.brokers.update(image.brokers)
        keys.topic_ids.update(image.topic_names_by_id)
        keys.resources.update(image.configs)
        for topic in image.topics.values():
            keys.partitions.update((topic.name, index) for index in topic.partitions)
    return keys


def _frozen(mapping: dict[Any, Any]) -> Mapping[Any, Any]:
    return MappingProxyType(mapping) if mapping else _EMPTY


__all__ = ["BrokerChange", "ConfigChange", "MetadataDelta", "PartitionChange", "between"]
