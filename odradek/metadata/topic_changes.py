"""Topic and partition changes on the controller: the checks a new topic or new
partitions must pass, and the records that create them, decided from the image.

How this works and why: CreateTopics and CreatePartitions end as records — a
``Topic`` record (a fresh topic id), one ``Config`` record per topic config and one
``Partition`` record per partition, whose replicas placement.py chooses (or the request
names, checked against the registered brokers) and whose ISR and leader are the
replicas eligible now (elections.eligible_in). A topic name follows Kafka's rules
(1–249 characters of ASCII alphanumerics, '.', '_' and '-'; not '.' or '..') and may
not collide with an existing one once '.' and '_' are treated alike, as their metric
names would. One request may not ask for more than MAX_PARTITIONS_PER_REQUEST
partitions in all (Kafka's KAFKA-17870 limit), which also keeps a hostile count from
building billions of assignments. Errors are Kafka's codes, raised as ControllerError.
Nothing here writes or locks: the controller (controller.py) runs these under its lock
against its current image and commits the records, as it does elections.py's.
"""

from __future__ import annotations

import random
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from odradek.metadata import placement
from odradek.metadata.config_changes import config_record
from odradek.metadata.elections import eligible_in
from odradek.metadata.errors import ControllerError
from odradek.metadata.image import TOPIC_RESOURCE, MetadataImage, MetadataRecord
from odradek.storage.errors import LogConfigError
from odradek.storage.log_config import LogConfig

MAX_TOPIC_NAME_LENGTH: Final = 249
# Kafka's controller limit (KAFKA-17870): one request may not create more partitions
# than this, which also keeps a hostile count from building billions of assignments.
MAX_PARTITIONS_PER_REQUEST: Final = 10_000
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
INTERNAL_TOPICS: Final = frozenset({"__consumer_offsets", "__transaction_state"})


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


def new_topic_records(
    topic: NewTopic,
    image: MetadataImage,
    defaults: Callable[[], Mapping[str, int]],
    rng: random.Random,
) -> list[MetadataRecord]:
    """The records that create ``topic`` in ``image``; ControllerError when it cannot
    be. ``defaults`` gives num.partitions and default.replication.factor (asked only
    when the request leaves them to the broker); ``rng`` is placement's."""
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
    assignments = _assignments(topic, image, defaults, rng)
    configs = {k: v for k, v in (topic.configs or {}).items() if v is not None}
    try:
        LogConfig.from_properties(configs)
    except LogConfigError as error:
        raise ControllerError("INVALID_CONFIG", str(error)) from None
    topic_id = uuid.uuid4()
    records = [MetadataRecord("Topic", {"name": topic.name, "topic_id": str(topic_id)})]
    for name, value in sorted(configs.items()):
        records.append(config_record(TOPIC_RESOURCE, topic.name, name, value))
    for partition, replicas in sorted(assignments.items()):
        records.append(
            placement.partition_record(topic_id, partition, replicas, eligible_in(image))
        )
    return records


def _assignments(
    topic: NewTopic,
    image: MetadataImage,
    defaults: Callable[[], Mapping[str, int]],
    rng: random.Random,
) -> dict[int, tuple[int, ...]]:
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
        ordered = [topic.assignments[p] for p in range(len(topic.assignments))]
        return dict(enumerate(placement.check_assignments(ordered, image.brokers)))
    configured = defaults()
    partitions = topic.num_partitions
    if partitions == -1:
        partitions = configured["num.partitions"]
    if partitions <= 0:
        raise ControllerError(
            "INVALID_PARTITIONS", f"number of partitions must be positive, got {partitions}"
        )
    factor = topic.replication_factor
    if factor == -1:
        factor = configured["default.replication.factor"]
    if factor <= 0:
        raise ControllerError(
            "INVALID_REPLICATION_FACTOR", f"replication factor must be positive, got {factor}"
        )
    return dict(enumerate(placement.place(image.brokers, partitions, factor, rng)))


def requested_partitions(topics: Sequence[NewTopic], default: int) -> int:
    """How many partitions a CreateTopics asks for in all (``default``: num.partitions,
    for a topic that leaves the count to the broker)."""
    total = 0
    for topic in topics:
        if topic.assignments:
            total += len(topic.assignments)
        elif topic.num_partitions > 0:
            total += topic.num_partitions
        elif topic.num_partitions == -1:
            total += default
    return total


def new_partition_records(
    image: MetadataImage,
    topic_name: str,
    count: int,
    assignments: Sequence[Sequence[int]] | None,
    rng: random.Random,
) -> list[MetadataRecord]:
    """The records that grow ``topic_name`` to ``count`` partitions (CreatePartitions),
    on the given brokers or placement's; ControllerError when it cannot be."""
    topic = image.topics.get(topic_name)
    if topic is None:
        raise ControllerError("UNKNOWN_TOPIC_OR_PARTITION", f"topic {topic_name!r} not found")
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
    factor = len(next(iter(topic.partitions.values())).replicas) if topic.partitions else 1
    new = list(range(current, count))
    chosen: Sequence[Sequence[int]]
    if assignments is not None:
        if len(assignments) != len(new):
            raise ControllerError(
                "INVALID_REPLICA_ASSIGNMENT",
                f"{len(assignments)} assignments for {len(new)} new partitions",
            )
        chosen = placement.check_assignments(
            assignments, image.brokers, first_partition=current, expected_factor=factor
        )
    else:
        chosen = placement.place(image.brokers, len(new), factor, rng, first_partition=current)
    return [
        placement.partition_record(topic.topic_id, p, r, eligible_in(image))
        for p, r in zip(new, chosen, strict=True)
    ]
