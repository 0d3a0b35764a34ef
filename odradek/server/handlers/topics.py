"""CreateTopics (key 19): validated by the controller, committed to the metadata log.

The controller channel answers with an error or None per topic; a created topic's
id, partition count and replication factor are then read from this node's image,
which the channel guarantees already holds it.

The same handler serves both planes: on a broker listener ``services.controller`` is
the broker's channel (in a quorum, forwarding to the active controller), on a
controller listener it is this node's own controller behind the gate that answers
NOT_CONTROLLER unless this node is the active one (a forwarded request).
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from odradek.metadata.controller_channel import ControllerError, NewTopic
from odradek.metadata.controller_rpc import FORWARDED_VERSIONS
from odradek.protocol.build import error_code, make, response_module
from odradek.protocol.messages import Request
from odradek.server.authorized_operations import AclOperation, ResourceType
from odradek.server.broker_remote import SYSTEM_ENABLE, check_remote_storage
from odradek.server.handlers import BOTH_PLANES, handles

if TYPE_CHECKING:
    from odradek.server.services import AdminServices

CREATE_TOPICS_KEY = 19
DEFAULT_CONFIG_SOURCE = 5  # DescribeConfigs ConfigSource.DEFAULT_CONFIG
TOPIC_CONFIG_SOURCE = 1  # ConfigSource.TOPIC_CONFIG
TOPIC = ResourceType.TOPIC


@handles(CREATE_TOPICS_KEY, *FORWARDED_VERSIONS[CREATE_TOPICS_KEY], plane=BOTH_PLANES)
async def create_topics(services: AdminServices, request: Request) -> Any:
    module = response_module(CREATE_TOPICS_KEY, request.header.api_version)
    body = request.body
    wanted = [
        NewTopic(
            name=topic.name,
            num_partitions=topic.num_partitions,
            replication_factor=topic.replication_factor,
            assignments={a.partition_index: tuple(a.broker_ids) for a in topic.assignments} or None,
            configs={c.name: c.value for c in topic.configs},
        )
        for topic in body.topics
    ]
    refused: dict[str, ControllerError] = {}
    authorizer, session = services.authorizer, request.session
    if not authorizer.allowed(session, AclOperation.CREATE, ResourceType.CLUSTER):
        # CREATE on the cluster covers every topic; else CREATE on each topic's name
        names = [t.name for t in wanted]
        creatable = authorizer.allowed_names(session, AclOperation.CREATE, TOPIC, names)
        for name in names:
            if name not in creatable:
                refused[name] = ControllerError(
                    "TOPIC_AUTHORIZATION_FAILED", f"not authorized to create topic {name!r}"
                )
    for topic in wanted:  # tiered storage needs the brokers' flag (broker_remote.py)
        try:
            check_remote_storage(
                lambda: bool(services.config.static[SYSTEM_ENABLE]), topic.configs or {}
            )
        except ControllerError as refusal:
            refused[topic.name] = refusal
    asked = [topic for topic in wanted if topic.name not in refused]
    answered = iter(await services.controller.create_topics(asked, body.validate_only))
    errors = [refused[t.name] if t.name in refused else next(answered) for t in wanted]
    results = []
    for topic, error in zip(wanted, errors, strict=True):
        if error is not None:
            results.append(_failed(module, topic.name, error))
        else:
            results.append(_created(services, module, topic, body.validate_only))
    return make(
        module.CreateTopicsResponse, throttle_time=datetime.timedelta(0), topics=tuple(results)
    )


def _failed(module: Any, name: str, error: ControllerError) -> Any:
    return make(
        module.CreatableTopicResult,
        name=name,
        topic_id=None,
        error_code=error_code(error.code),
        error_message=str(error),
        topic_config_error_code=0,
        num_partitions=-1,
        replication_factor=-1,
        configs=None,
    )


def _created(services: AdminServices, module: Any, topic: NewTopic, validate_only: bool) -> Any:
    created = services.metadata.image.topics.get(topic.name)
    if created is not None and not validate_only:
        partitions = len(created.partitions)
        factor = len(next(iter(created.partitions.values())).replicas)
        topic_id = created.topic_id
    else:  # validate_only: report what would have been created
        defaults = services.config.dynamic_defaults()
        partitions = (
            topic.num_partitions
            if topic.num_partitions > 0
            else (len(topic.assignments) if topic.assignments else defaults["num.partitions"])
        )
        factor = (
            topic.replication_factor
            if topic.replication_factor > 0
            else (
                len(next(iter(topic.assignments.values())))
                if topic.assignments
                else defaults["default.replication.factor"]
            )
        )
        topic_id = None
    explicit = {k: v for k, v in (topic.configs or {}).items() if v is not None}
    if not hasattr(module, "CreatableTopicConfigs"):  # configs are reported from v5
        configs = None
    else:
        configs = _configs(services, module, topic.name, explicit)
    return make(
        module.CreatableTopicResult,
        name=topic.name,
        topic_id=topic_id,
        error_code=error_code("NONE"),
        error_message=None,
        topic_config_error_code=0,
        num_partitions=partitions,
        replication_factor=factor,
        configs=configs,
    )


def _configs(
    services: AdminServices, module: Any, name: str, explicit: dict[str, Any]
) -> tuple[Any, ...]:
    return tuple(
        make(
            module.CreatableTopicConfigs,
            name=key,
            value=str(value).lower() if isinstance(value, bool) else str(value),
            read_only=False,
            config_source=TOPIC_CONFIG_SOURCE if key in explicit else DEFAULT_CONFIG_SOURCE,
            is_sensitive=False,
        )
        for key, value in sorted(services.config.effective_topic_config(name, explicit).items())
    )
