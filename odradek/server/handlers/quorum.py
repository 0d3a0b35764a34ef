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
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from odradek.network.connection import CloseConnection
from odradek.protocol.messages import Request
from odradek.raft import wire
from odradek.raft.driver import source_id_of
from odradek.server.handlers import Plane, handles

if TYPE_CHECKING:
    from odradek.server.services import ControllerServices


async def _quorum_request(services: ControllerServices, request: Request) -> Any:
    api_key, version = request.header.api_key, request.header.api_version
    if services.raft.stopped:
        raise CloseConnection()  # shutting down: the peer reconnects elsewhere or later
    try:
        message = wire.request_from_kio(request.body)
    except wire.WireError as error:
        return wire.error_response(api_key, version, error.code)
    response = await services.raft.handle_request(source_id_of(message), message)
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
        wire.check_describe_quorum_request(request.body)
    except wire.WireError as error:
        return wire.error_response(wire.DESCRIBE_QUORUM_KEY, version, error.code)
    description, wall_offset_ms = services.raft.describe_quorum()
    return wire.describe_quorum_to_kio(description, version, wall_offset_ms)
