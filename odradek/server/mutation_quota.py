"""``controller_mutation_rate`` (KIP-599): partitions created and deleted per second.

How this works and why: CreateTopics, CreatePartitions and DeleteTopics make the
controller write records for every partition they create or delete, so KIP-599
bounds a client's rate of such *mutations*. Kafka counts a topic's partitions (the
new ones, for CreatePartitions) when the topic is done, and at the versions that know
the error (CreateTopics v6+, CreatePartitions v3+, DeleteTopics v5+) refuses work
with THROTTLING_QUOTA_EXCEEDED once the rate is past the bound; older versions are
only throttled.

What odradek does, at the broker that received the client's request (before it is
forwarded): a request that arrives while its client's mutation rate is already past
the bound is refused *whole* at the strict versions — every topic
THROTTLING_QUOTA_EXCEEDED, the throttle time in the response, the connection muted —
and otherwise handled whole and its successful topics' partitions counted, the
response carrying the throttle they cause. Kafka decides topic by topic within one
request (accepting topics until the quota is spent); that finer split is not done
here. The counts come from this broker's image before the request (deleted topics'
partition counts, the partitions CreatePartitions adds) and from the request (new
topics' partition counts, ``num.partitions`` when -1).
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Final

from odradek.metadata.image import MetadataImage
from odradek.protocol.build import error_code, make, response_module
from odradek.security.quotas import CONTROLLER_MUTATION_RATE
from odradek.server.quotas import ClientQuotaManager

CREATE_TOPICS_KEY: Final = 19
DELETE_TOPICS_KEY: Final = 20
CREATE_PARTITIONS_KEY: Final = 37
# The first version of each that can answer THROTTLING_QUOTA_EXCEEDED (KIP-599).
STRICT_FROM: Final[Mapping[int, int]] = {
    CREATE_TOPICS_KEY: 6,
    DELETE_TOPICS_KEY: 5,
    CREATE_PARTITIONS_KEY: 3,
}
_EXCEEDED: Final = "THROTTLING_QUOTA_EXCEEDED"


def applies(quotas: ClientQuotaManager, api_key: int) -> bool:
    return api_key in STRICT_FROM and quotas.enabled(CONTROLLER_MUTATION_RATE)


def _who(request: Any) -> tuple[str, str]:
    return request.session.user, request.header.client_id or ""


def mutations(request: Any, image: MetadataImage, default_partitions: int) -> list[int]:
    """Partitions each topic of the request would create or delete, in order."""
    body, key = request.body, request.header.api_key
    if key == CREATE_TOPICS_KEY:
        return [
            len(t.assignments) if t.assignments else max(t.num_partitions, 0) or default_partitions
            for t in body.topics
        ]
    if key == CREATE_PARTITIONS_KEY:
        counts = []
        for t in body.topics:
            known = image.topics.get(t.name)
            counts.append(max(t.count - len(known.partitions), 0) if known is not None else 0)
        return counts
    targets: Sequence[Any] = (
        [t.topic_id if t.name is None else t.name for t in body.topics]
        if hasattr(body, "topics")
        else list(body.topic_names)
    )
    counts = []
    for target in targets:
        found = image.topic_by_id(target) if isinstance(target, uuid.UUID) else None
        found = found or (image.topics.get(target) if isinstance(target, str) else None)
        counts.append(len(found.partitions) if found is not None else 0)
    return counts


def refusal(quotas: ClientQuotaManager, request: Any) -> tuple[Any, int] | None:
    """At a strict version, the response refusing every topic (and its throttle ms)
    when the client's mutation rate is already past its bound; else None."""
    header = request.header
    if header.api_version < STRICT_FROM[header.api_key]:
        return None
    throttle_ms = quotas.throttle_now(CONTROLLER_MUTATION_RATE, *_who(request))
    if throttle_ms <= 0:
        return None
    module = response_module(header.api_key, header.api_version)
    body = request.body
    refused = {
        "error_code": error_code(_EXCEEDED),
        "error_message": "controller mutation rate quota exceeded",
    }
    delay = datetime.timedelta(milliseconds=throttle_ms)
    if header.api_key == CREATE_TOPICS_KEY:
        topics = tuple(
            make(module.CreatableTopicResult, name=t.name, topic_id=None, configs=None, **refused)
            for t in body.topics
        )
        return make(module.CreateTopicsResponse, throttle_time=delay, topics=topics), throttle_ms
    if header.api_key == CREATE_PARTITIONS_KEY:
        results = tuple(
            make(module.CreatePartitionsTopicResult, name=t.name, **refused) for t in body.topics
        )
        return make(module.CreatePartitionsResponse, throttle_time=delay, results=results), (
            throttle_ms
        )
    entries = (
        [(t.name, t.topic_id) for t in body.topics]
        if hasattr(body, "topics")
        else [(n, None) for n in body.topic_names]
    )
    responses = tuple(
        make(module.DeletableTopicResult, name=name, topic_id=topic_id, **refused)
        for name, topic_id in entries
    )
    return make(module.DeleteTopicsResponse, throttle_time=delay, responses=responses), (
        throttle_ms
    )


def record(quotas: ClientQuotaManager, request: Any, counts: Sequence[int], result: Any) -> int:
    """Count the partitions of the topics the response says were done; the throttle."""
    outcomes = (
        getattr(result, "topics", None)
        or getattr(result, "results", None)
        or getattr(result, "responses", None)
        or ()
    )
    if getattr(request.body, "validate_only", False):
        return 0
    done = sum(
        count
        for count, outcome in zip(counts, outcomes, strict=False)
        if outcome.error_code == error_code("NONE")
    )
    if done == 0:
        return quotas.throttle_now(CONTROLLER_MUTATION_RATE, *_who(request))
    return quotas.record(CONTROLLER_MUTATION_RATE, *_who(request), done)


__all__ = ["applies", "mutations", "record", "refusal"]
