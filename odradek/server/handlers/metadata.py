"""Metadata (key 3): brokers, topics, partitions and leaders from the metadata image.

Brokers are the unfenced ones only (``MetadataView.endpoints``): a broker that has not
caught up since it registered, or stopped heartbeating, is left out. A partition with
no live leader — offline (leader -1: no eligible ISR member, metadata/elections.py) —
is answered LEADER_NOT_AVAILABLE, as Kafka does, and every partition lists its
replicas on fenced or unregistered brokers as ``offline_replicas``.

Authorized operations (KIP-430): v8+ report a topic's when the request sets
``include_topic_authorized_operations``; v8-v10 report the cluster's when it sets
``include_cluster_authorized_operations`` (v11 moved that to DescribeCluster,
KIP-700). Otherwise the fields say "not requested" (INT32_MIN).

Topics a client asks for that do not exist are created here when both the broker
(``auto.create.topics.enable``) and the request (``allow_auto_topic_creation``, v4+)
allow it; creation goes through the controller like CreateTopics, so the response
already shows the new topic with its leader.

With an authorizer (server/authorizer.py), as in Kafka: a request for every topic
lists only those the principal may DESCRIBE; a named topic without DESCRIBE is
answered TOPIC_AUTHORIZATION_FAILED, and auto-creation needs CREATE on the cluster or
the topic (else TOPIC_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from odradek.metadata.controller_channel import ControllerError, NewTopic
from odradek.metadata.image import MetadataImage, TopicImage
from odradek.metadata.topic_changes import INTERNAL_TOPICS, validate_topic_name
from odradek.protocol.build import error_code, make, response_module
from odradek.protocol.messages import Request
from odradek.server.authorized_operations import NOT_REQUESTED, AclOperation, ResourceType
from odradek.server.handlers import handles

if TYPE_CHECKING:
    from odradek.server.services import BrokerServices

METADATA_KEY = 3
LAST_VERSION_WITH_CLUSTER_OPERATIONS = 10  # KIP-700 moved them to DescribeCluster
DESCRIBE = AclOperation.DESCRIBE
CREATE = AclOperation.CREATE
CLUSTER = ResourceType.CLUSTER


@handles(METADATA_KEY, 0, 12)
async def metadata(services: BrokerServices, request: Request) -> Any:
    version = request.header.api_version
    module = response_module(METADATA_KEY, version)
    body = request.body
    image = services.metadata.image
    wanted = body.topics
    unknown_ids: list[Any] = []  # v12 topic ids that name no topic
    authorizer, session = services.authorizer, request.session
    if wanted is None or (version == 0 and not wanted):
        # every topic the principal may DESCRIBE; the others are left out
        names = sorted(
            authorizer.allowed_names(session, DESCRIBE, ResourceType.TOPIC, image.topics)
        )
        errors: dict[str, str] = {}
    else:
        names, errors = [], {}
        for item in wanted:
            name = item.name
            if name is None and getattr(item, "topic_id", None) is not None:
                topic = image.topic_by_id(item.topic_id)
                name = topic.name if topic else None
                if name is None:
                    unknown_ids.append(item.topic_id)
                    continue
            names.append(name)
        describable = authorizer.allowed_names(session, DESCRIBE, ResourceType.TOPIC, names)
        errors.update((n, "TOPIC_AUTHORIZATION_FAILED") for n in names if n not in describable)
        allow_create = getattr(body, "allow_auto_topic_creation", True)
        missing = [n for n in names if n not in image.topics and n in describable]
        if missing and allow_create and not authorizer.allowed(session, CREATE, CLUSTER):
            # auto-creation needs CREATE on the cluster or on each topic
            creatable = authorizer.allowed_names(session, CREATE, ResourceType.TOPIC, missing)
            errors.update((n, "TOPIC_AUTHORIZATION_FAILED") for n in missing if n not in creatable)
            missing = [n for n in missing if n in creatable]
        if missing:
            errors.update(await _auto_create(services, missing, allow_create))
            image = services.metadata.image
    include_topic_ops = getattr(body, "include_topic_authorized_operations", False)
    topics = []
    for name in names:
        topic = None if name in errors else image.topics.get(name)
        operations = authorizer.operations(include_topic_ops, session, ResourceType.TOPIC, name)
        if topic is None:
            error = errors.get(name, "UNKNOWN_TOPIC_OR_PARTITION")
            topics.append(_error_topic(module, name, error, operations))
        else:
            topics.append(_topic(module, topic, operations, image))
    for topic_id in unknown_ids:
        topics.append(
            make(
                module.MetadataResponseTopic,
                error_code=error_code("UNKNOWN_TOPIC_ID"),
                name=None,
                topic_id=topic_id,
                is_internal=False,
                partitions=(),
                topic_authorized_operations=NOT_REQUESTED,
            )
        )
    listener = request_listener(services, request)
    brokers = tuple(
        make(
            module.MetadataResponseBroker, node_id=b.node_id, host=b.host, port=b.port, rack=b.rack
        )
        for b in services.metadata.endpoints(image, listener)
    )
    return make(
        module.MetadataResponse,
        throttle_time=datetime.timedelta(0),
        brokers=brokers,
        cluster_id=services.metadata.cluster_id,
        controller_id=services.metadata.controller_id,
        topics=tuple(topics),
        cluster_authorized_operations=authorizer.operations(
            version <= LAST_VERSION_WITH_CLUSTER_OPERATIONS
            and getattr(body, "include_cluster_authorized_operations", False),
            session,
            ResourceType.CLUSTER,
        ),
        error_code=error_code("NONE"),
    )


def request_listener(services: BrokerServices, request: Request) -> str:
    return getattr(request, "listener", None) or services.metadata.default_listener


async def _auto_create(services: BrokerServices, names: list[str], allowed: bool) -> dict[str, str]:
    errors: dict[str, str] = {}
    creatable = []
    for name in names:
        try:
            validate_topic_name(name)
        except ControllerError:
            errors[name] = "INVALID_TOPIC_EXCEPTION"
            continue
        creatable.append(name)
    if creatable and allowed and services.config.static["auto.create.topics.enable"]:
        wanted = [NewTopic(name) for name in creatable]
        created = await services.controller.create_topics(wanted, validate_only=False)
        for name, error in zip(creatable, created, strict=True):
            if error is not None and error.code != "TOPIC_ALREADY_EXISTS":
                errors[name] = error.code
    return errors


def _error_topic(module: Any, name: str, error: str, operations: int) -> Any:
    return make(
        module.MetadataResponseTopic,
        error_code=error_code(error),
        name=name,
        topic_id=None,
        is_internal=False,
        partitions=(),
        topic_authorized_operations=operations,
    )


def _topic(module: Any, topic: TopicImage, operations: int, image: MetadataImage) -> Any:
    def live(broker_id: int) -> bool:
        broker = image.brokers.get(broker_id)
        return broker is not None and not broker.fenced

    partitions = tuple(
        make(
            module.MetadataResponsePartition,
            # no live leader (offline, or its broker fenced a moment before the
            # controller's election lands): clients back off and ask again
            error_code=error_code("NONE" if live(p.leader) else "LEADER_NOT_AVAILABLE"),
            partition_index=p.partition,
            leader_id=p.leader,
            leader_epoch=p.leader_epoch,
            replica_nodes=p.replicas,
            isr_nodes=p.isr,
            offline_replicas=tuple(r for r in p.replicas if not live(r)),
        )
        for _, p in sorted(topic.partitions.items())
    )
    return make(
        module.MetadataResponseTopic,
        error_code=error_code("NONE"),
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=topic.name in INTERNAL_TOPICS,
        partitions=partitions,
        topic_authorized_operations=operations,
    )


__all__ = ["MetadataImage", "metadata"]
