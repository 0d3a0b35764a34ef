"""DeleteTopics (key 20) and CreatePartitions (key 37), committed by the controller.

Deleting a topic removes it from the metadata image; the ReplicaManager reacts by
renaming each local partition directory ``<topic>-<p>.<id>-delete``, which the
LogManager's housekeeping removes, so the name can be created again at once.
DeleteTopics v6 names topics by name or by id (exactly one of them per entry).

Both are served on both planes, as CreateTopics is (topics.py): a broker listener
through its channel, a controller listener (forwarded requests) through this node's
own controller when it is the active one.
"""

from __future__ import annotations

import datetime
import uuid
from typing import TYPE_CHECKING, Any

from odradek.metadata.controller_channel import ControllerError
from odradek.metadata.controller_rpc import FORWARDED_VERSIONS
from odradek.protocol.build import error_code, make, response_module
from odradek.protocol.messages import Request
from odradek.server.authorized_operations import AclOperation, ResourceType
from odradek.server.handlers import handles
from odradek.server.handlers.topics import BOTH_PLANES

if TYPE_CHECKING:
    from odradek.server.services import AdminServices

DELETE_TOPICS_KEY = 20
CREATE_PARTITIONS_KEY = 37
DELETION_DISABLED_VERSION = 3  # TOPIC_DELETION_DISABLED exists from v3 (KIP-322)

Target = str | uuid.UUID
DELETE_DENIED = ControllerError("TOPIC_AUTHORIZATION_FAILED", "not authorized to delete the topic")


@handles(DELETE_TOPICS_KEY, *FORWARDED_VERSIONS[DELETE_TOPICS_KEY], plane=BOTH_PLANES)
async def delete_topics(services: AdminServices, request: Request) -> Any:
    version = request.header.api_version
    module = response_module(DELETE_TOPICS_KEY, version)
    body = request.body
    if hasattr(body, "topics"):
        wanted = [(t.name, t.topic_id) for t in body.topics]
    else:
        wanted = [(name, None) for name in body.topic_names]
    if services.config.static["delete.topic.enable"]:
        outcomes = await _delete(services, request, wanted)
    else:
        code = (
            "TOPIC_DELETION_DISABLED" if version >= DELETION_DISABLED_VERSION else "INVALID_REQUEST"
        )
        error = ControllerError(code, "topic deletion is disabled (delete.topic.enable=false)")
        outcomes = [(name, topic_id, error) for name, topic_id in wanted]
    results = tuple(
        make(
            module.DeletableTopicResult,
            name=name,
            topic_id=topic_id,
            error_code=error_code(error.code if error else "NONE"),
            error_message=str(error) if error else None,
        )
        for name, topic_id, error in outcomes
    )
    return make(module.DeleteTopicsResponse, throttle_time=datetime.timedelta(0), responses=results)


Outcome = tuple[str | None, uuid.UUID | None, ControllerError | None]


async def _delete(
    services: AdminServices, request: Request, wanted: list[tuple[str | None, uuid.UUID | None]]
) -> list[Outcome]:
    """(name, topic id, error) per entry; a topic named twice (by name or id) is an error."""
    image = services.metadata.image
    targets = [_target(name, topic_id) for name, topic_id in wanted]
    resolved = [_resolve(image, t) for t in targets]
    keys = [r for r in resolved if r is not None]
    named = {r for r in resolved if r is not None} | {t for t in targets if isinstance(t, str)}
    deletable = services.authorizer.allowed_names(
        request.session, AclOperation.DELETE, ResourceType.TOPIC, named
    )
    outcomes: list[Outcome] = []
    to_delete: list[tuple[int, Target]] = []
    for index, (target, key) in enumerate(zip(targets, resolved, strict=True)):
        if isinstance(target, ControllerError):
            outcomes.append((*wanted[index], target))
        elif (key or _name(target)) is not None and (key or _name(target)) not in deletable:
            outcomes.append((*wanted[index], DELETE_DENIED))
        elif key is not None and keys.count(key) > 1:
            outcomes.append((*wanted[index], _duplicate(target)))
        else:
            outcomes.append((key or _name(target), _id(image, target), None))
            to_delete.append((index, target))
    errors = await services.controller.delete_topics([t for _, t in to_delete])
    for (index, _), failure in zip(to_delete, errors, strict=True):
        if failure is not None:
            outcomes[index] = (*wanted[index], failure)
    return outcomes


def _target(name: str | None, topic_id: uuid.UUID | None) -> Target | ControllerError:
    if name is not None and topic_id is not None:
        return ControllerError("INVALID_REQUEST", "give a topic name or a topic id, not both")
    if name is None and topic_id is None:
        return ControllerError("INVALID_REQUEST", "neither a topic name nor a topic id given")
    return name if name is not None else topic_id  # type: ignore[return-value]


def _resolve(image: Any, target: Target | ControllerError) -> str | None:
    """The topic name an entry refers to (to find duplicates), if it exists."""
    if isinstance(target, uuid.UUID):
        topic = image.topic_by_id(target)
        return topic.name if topic is not None else None
    return target if isinstance(target, str) else None


def _name(target: Target) -> str | None:
    return target if isinstance(target, str) else None


def _id(image: Any, target: Target) -> uuid.UUID | None:
    if isinstance(target, uuid.UUID):
        return target
    topic = image.topics.get(target)
    return topic.topic_id if topic is not None else None


def _duplicate(target: Target) -> ControllerError:
    return ControllerError("INVALID_REQUEST", f"topic {target} is listed more than once")


@handles(CREATE_PARTITIONS_KEY, *FORWARDED_VERSIONS[CREATE_PARTITIONS_KEY], plane=BOTH_PLANES)
async def create_partitions(services: AdminServices, request: Request) -> Any:
    module = response_module(CREATE_PARTITIONS_KEY, request.header.api_version)
    body = request.body
    names = [topic.name for topic in body.topics]
    results = []
    for topic in body.topics:
        try:
            denial = services.authorizer.denial(
                request.session, AclOperation.ALTER, ResourceType.TOPIC, topic.name
            )
            if denial is not None:
                raise ControllerError(denial, f"not authorized to alter topic {topic.name!r}")
            if names.count(topic.name) > 1:
                raise ControllerError(
                    "INVALID_REQUEST", f"topic {topic.name!r} is listed more than once"
                )
            assignments = [tuple(a.broker_ids) for a in topic.assignments or ()] or None
            await services.controller.create_partitions(
                topic.name, topic.count, assignments, body.validate_only
            )
            error = None
        except ControllerError as failure:
            error = failure
        results.append(
            make(
                module.CreatePartitionsTopicResult,
                name=topic.name,
                error_code=error_code(error.code if error else "NONE"),
                error_message=str(error) if error else None,
            )
        )
    return make(
        module.CreatePartitionsResponse,
        throttle_time=datetime.timedelta(0),
        results=tuple(results),
    )
