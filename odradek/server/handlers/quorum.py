"""The KRaft quorum APIs on the CONTROLLER plane: Vote (52), BeginQuorumEpoch (53),
EndQuorumEpoch (54), DescribeQuorum (55), FetchSnapshot (59) and the metadata Fetch (1).

How this works and why: each handler decodes the kio entity into a raft message
(``raft/wire.py``), hands it to the node's ``RaftDriver`` (``services.raft``) and encodes
the node's answer; the consensus decisions, and the partition-level errors
(FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER, INCONSISTENT_VOTER_SET,
INVALID_REQUEST, SNAPSHOT_NOT_FOUND, POSITION_OUT_OF_RANGE), are the core's. What is
answered here at the top level, as Kafka's KafkaRaftClient does: INCONSISTENT_CLUSTER_ID
(the core's answer to another cluster's request, moved up by ``wire.response_to_kio``)
and INVALID_REQUEST for a request naming anything but ``__cluster_metadata``-0 (a
consumer's Fetch sent to a controller listener gets that, never a traceback).

DescribeQuorum is served on the BROKER plane too, as Kafka's brokers serve it: the
broker forwards the client's request to the active controller (``services.quorum``)
and answers with the controller's response, so ``kafka-metadata-quorum.sh
--bootstrap-server`` (and ``odradek metadata-quorum --bootstrap-server``) works
against any broker. No controller in time: REQUEST_TIMED_OUT at the top level.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any, Final

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType

from odradek.metadata.errors import ControllerError
from odradek.network.connection import CloseConnection
from odradek.protocol.build import make
from odradek.protocol.messages import Request
from odradek.raft import wire, wire_describe_quorum
from odradek.raft.driver import QuorumStoppedError, source_id_of
from odradek.server.authorized_operations import AclOperation, ResourceType
from odradek.server.handlers import Plane, handles

if TYPE_CHECKING:
    from odradek.server.services import BrokerServices, ControllerServices


async def _quorum_request(services: ControllerServices, request: Request) -> Any:
    api_key, version = request.header.api_key, request.header.api_version
    if services.raft.stopped:
        raise CloseConnection()  # shutting down: the peer reconnects elsewhere or later
    try:
        message = wire.request_from_kio(request.body)
    except wire.WireError as error:
        return wire.error_response(api_key, version, error.code)
    try:
        response = await services.raft.handle_request(source_id_of(message), message)
    except QuorumStoppedError:
        raise CloseConnection() from None  # stopped meanwhile: as on shutdown
    return wire.response_to_kio(response, api_key, version)


def _register(api_key: int) -> None:
    low, high = wire.VERSIONS[api_key]

    async def quorum_api(services: ControllerServices, request: Request) -> Any:
        return await _quorum_request(services, request)

    quorum_api.__name__ = f"quorum_api_{api_key}"
    handles(api_key, low, high, plane=Plane.CONTROLLER)(quorum_api)


for _api_key in (
    wire.VOTE_KEY,
    wire.BEGIN_QUORUM_EPOCH_KEY,
    wire.END_QUORUM_EPOCH_KEY,
    wire.FETCH_KEY,
    wire.FETCH_SNAPSHOT_KEY,
):
    _register(_api_key)


@handles(wire.DESCRIBE_QUORUM_KEY, *wire.VERSIONS[wire.DESCRIBE_QUORUM_KEY], plane=Plane.CONTROLLER)
async def describe_quorum(services: ControllerServices, request: Request) -> Any:
    version = request.header.api_version
    try:
        wire_describe_quorum.check_describe_quorum_request(request.body)
    except wire.WireError as error:
        return wire.error_response(wire.DESCRIBE_QUORUM_KEY, version, error.code)
    description, wall_offset_ms = services.raft.describe_quorum()
    nodes = [(v.node_id, v.host, v.port) for v in services.raft.voters]
    return wire_describe_quorum.describe_quorum_to_kio(description, version, wall_offset_ms, nodes)


@handles(wire.DESCRIBE_QUORUM_KEY, *wire.VERSIONS[wire.DESCRIBE_QUORUM_KEY], plane=Plane.BROKER)
async def describe_quorum_on_broker(services: BrokerServices, request: Request) -> Any:
    version = request.header.api_version
    try:
        wire_describe_quorum.check_describe_quorum_request(request.body)
    except wire.WireError as error:
        return wire.error_response(wire.DESCRIBE_QUORUM_KEY, version, error.code)
    if services.quorum is None:
        return wire.error_response(
            wire.DESCRIBE_QUORUM_KEY, version, ErrorCode.unknown_server_error
        )
    if not services.authorizer.allowed(
        request.session, AclOperation.DESCRIBE, ResourceType.CLUSTER
    ):
        return wire.error_response(
            wire.DESCRIBE_QUORUM_KEY, version, ErrorCode.cluster_authorization_failed
        )
    try:
        return await services.quorum.describe_quorum(request.body)
    except ControllerError as error:
        code = getattr(ErrorCode, error.code.lower(), ErrorCode.unknown_server_error)
        return wire.error_response(wire.DESCRIBE_QUORUM_KEY, version, code)


DESCRIBE_CLUSTER_KEY: Final = 60
# DescribeCluster endpoint types (KIP-919): a controller listener describes controllers.
CONTROLLERS_ENDPOINT: Final = 2


@handles(DESCRIBE_CLUSTER_KEY, 1, 1, plane=Plane.CONTROLLER)
async def describe_cluster(services: ControllerServices, request: Request) -> Any:
    """KIP-919: asked on a controller listener, DescribeCluster names the quorum — the
    cluster id, the active controller (the Raft leader, -1 while there is none) and every
    voter's controller address. Brokers are described by broker listeners only
    (UNSUPPORTED_ENDPOINT_TYPE here, as Kafka's controllers answer)."""
    raft = services.raft
    wanted = request.body.endpoint_type
    module = load_payload_module(
        DESCRIBE_CLUSTER_KEY, request.header.api_version, EntityType.response
    )
    leader = raft.leader_id
    refused = wanted != CONTROLLERS_ENDPOINT
    return make(
        module.DescribeClusterResponse,
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.unsupported_endpoint_type if refused else ErrorCode.none,
        error_message="a controller listener describes controllers (endpoint type 2)"
        if refused
        else None,
        endpoint_type=wanted,
        cluster_id=raft.cluster_id or "",
        controller_id=-1 if refused or leader is None else leader,
        brokers=()
        if refused
        else tuple(
            make(module.DescribeClusterBroker, broker_id=v.node_id, host=v.host, port=v.port)
            for v in sorted(raft.voters, key=lambda v: v.node_id)
        ),
    )
