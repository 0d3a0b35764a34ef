"""AlterPartitionReassignments (45) and ListPartitionReassignments (46), both planes.

How this works and why (KIP-455; ``kafka-reassign-partitions.sh``, ``odradek
reassign-partitions``, AdminClient.alterPartitionReassignments): only the active
controller moves replicas (metadata/reassignment.py), so AlterPartitionReassignments
goes through the controller channel as ElectLeaders does — forwarded from a broker
listener, or to this node's controller behind the gate on a controller listener. A
failure of the whole request (NOT_CONTROLLER, REQUEST_TIMED_OUT ...) is the top-level
error with no partitions; otherwise each partition is answered with NONE,
UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT, NO_REASSIGNMENT_IN_PROGRESS or
INVALID_REQUEST (a partition named twice) and a message saying why.

ListPartitionReassignments is a read: the ongoing reassignments are part of every
partition's state in the metadata image (``adding_replicas`` / ``removing_replicas``),
so this node answers from its own image instead of asking the controller; a broker's
image trails the controller's by one metadata propagation at most, and a reassignment
this node forwarded is in its image before the forwarding call returns.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any, Final

from odradek.metadata.controller_rpc import FORWARDED_VERSIONS
from odradek.metadata.errors import ControllerError
from odradek.metadata.partition_rpc import ALTER_REASSIGNMENTS_KEY
from odradek.metadata.reassignment import ReassignmentRequest, list_reassignments
from odradek.protocol.build import error_code, make, response_module
from odradek.protocol.messages import Request
from odradek.server.authorized_operations import AclOperation, ResourceType
from odradek.server.handlers import BOTH_PLANES, handles

if TYPE_CHECKING:
    from odradek.server.services import AdminServices

LIST_REASSIGNMENTS_KEY: Final = 46


def _require_cluster(services: AdminServices, request: Request, operation: AclOperation) -> None:
    """``operation`` on the cluster (Kafka's table), else CLUSTER_AUTHORIZATION_FAILED."""
    denial = services.authorizer.denial(request.session, operation, ResourceType.CLUSTER)
    if denial is not None:
        raise ControllerError(denial, f"not authorized to {operation.name} the cluster")


@handles(ALTER_REASSIGNMENTS_KEY, *FORWARDED_VERSIONS[ALTER_REASSIGNMENTS_KEY], plane=BOTH_PLANES)
async def alter_partition_reassignments(services: AdminServices, request: Request) -> Any:
    version = request.header.api_version
    module = response_module(ALTER_REASSIGNMENTS_KEY, version)
    body = request.body
    allow_rf_change = bool(getattr(body, "allow_replication_factor_change", True))
    requests = [
        ReassignmentRequest(
            topic.name,
            int(p.partition_index),
            None if p.replicas is None else tuple(int(b) for b in p.replicas),
        )
        for topic in body.topics
        for p in topic.partitions
    ]

    def respond(code: str, message: str | None, responses: tuple[Any, ...]) -> Any:
        return make(
            module.AlterPartitionReassignmentsResponse,
            throttle_time=datetime.timedelta(0),
            error_code=error_code(code),
            error_message=message,
            allow_replication_factor_change=allow_rf_change,  # v1+
            responses=responses,
        )

    try:
        _require_cluster(services, request, AclOperation.ALTER)
        results = await services.controller.alter_partition_reassignments(requests, allow_rf_change)
    except ControllerError as failure:
        return respond(failure.code, str(failure), ())
    by_topic: dict[str, list[Any]] = {}
    for result in results:
        by_topic.setdefault(result.topic, []).append(
            make(
                module.ReassignablePartitionResponse,
                partition_index=result.partition,
                error_code=error_code(result.error),
                error_message=result.message,
            )
        )
    return respond(
        "NONE",
        None,
        tuple(
            make(module.ReassignableTopicResponse, name=name, partitions=tuple(partitions))
            for name, partitions in by_topic.items()
        ),
    )


@handles(LIST_REASSIGNMENTS_KEY, 0, 0, plane=BOTH_PLANES)
async def list_partition_reassignments(services: AdminServices, request: Request) -> Any:
    module = response_module(LIST_REASSIGNMENTS_KEY, request.header.api_version)
    try:
        _require_cluster(services, request, AclOperation.DESCRIBE)
    except ControllerError as failure:
        return make(
            module.ListPartitionReassignmentsResponse,
            throttle_time=datetime.timedelta(0),
            error_code=error_code(failure.code),
            error_message=str(failure),
            topics=(),
        )
    topics = request.body.topics
    wanted = (
        None
        if topics is None
        else [(t.name, int(index)) for t in topics for index in t.partition_indexes]
    )
    by_topic: dict[str, list[Any]] = {}
    for row in list_reassignments(services.metadata.image, wanted):
        by_topic.setdefault(row.topic, []).append(
            make(
                module.OngoingPartitionReassignment,
                partition_index=row.partition,
                replicas=row.replicas,
                adding_replicas=row.adding_replicas,
                removing_replicas=row.removing_replicas,
            )
        )
    return make(
        module.ListPartitionReassignmentsResponse,
        throttle_time=datetime.timedelta(0),
        error_code=error_code("NONE"),
        error_message=None,
        topics=tuple(
            make(module.OngoingTopicReassignment, name=name, partitions=tuple(partitions))
            for name, partitions in by_topic.items()
        ),
    )
