"""DescribeQuorum on a broker listener: forwarded to the active controller as it is.

The channel side (``RemoteControllerChannel.describe_quorum``) with fake controller
connections: the client's request object goes out unchanged, a controller that does
not lead (its partition answers NOT_LEADER_OR_FOLLOWER) is passed over for the next,
a controller that serves a lower version is refused with UNSUPPORTED_VERSION. The
handler side (BROKER plane) with a fake ``services.quorum``: a request for another
topic is INVALID_REQUEST without forwarding, and no controller in time is
REQUEST_TIMED_OUT at the top level — never a traceback. Over real processes:
tests/server/test_kraft_roles.py.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.metadata.controller_client import ControllerClient, VoterAddress
from odradek.metadata.controller_rpc import RemoteControllerChannel
from odradek.metadata.errors import ControllerError
from odradek.metadata.image import MetadataImage
from odradek.protocol.session import Session
from odradek.raft import wire, wire_describe_quorum
from odradek.raft.node import QuorumDescription, ReplicaDescription
from odradek.server.authorizer import ALLOW_ALL
from odradek.server.handlers import Plane, plane_handlers
from tests.metadata.test_controller_client import Voter


def description(leader: int, error: ErrorCode = ErrorCode.none) -> QuorumDescription:
    replica = ReplicaDescription(leader, 42, 1_000, 1_000)
    observer = ReplicaDescription(4, 40, 900, 800)
    return QuorumDescription(error, leader, 7, 42, (replica,), (observer,))


@dataclass
class Controller:
    node_id: int
    leads: bool
    version: int = 2
    received: list[Any] = field(default_factory=list)

    def version_for(self, api_key: int) -> int:
        return self.version

    async def send(
        self, request: Any, *, expect_response: bool = True, timeout_s: float | None = None
    ) -> Any:
        self.received.append(request)
        if self.leads:
            return wire_describe_quorum.describe_quorum_to_kio(
                description(self.node_id), request.__version__
            )
        refused = description(-1, ErrorCode.not_leader_or_follower)
        return wire_describe_quorum.describe_quorum_to_kio(refused, request.__version__)

    async def close(self) -> None:
        pass


def channel(controllers: dict[int, Controller], leader: int | None) -> RemoteControllerChannel:
    async def connect(voter: VoterAddress, timeout_s: float) -> Controller:
        return controllers[voter.node_id]

    client = ControllerClient(
        [Voter(n) for n in controllers], lambda: leader, connect, retry_backoff_s=0.0
    )
    return RemoteControllerChannel(client, MetadataImage, timeout_s=5.0)


def test_the_request_goes_to_the_leader_as_it_is_past_a_follower() -> None:
    controllers = {1: Controller(1, leads=False), 2: Controller(2, leads=True)}
    request = wire_describe_quorum.describe_quorum_request(1)
    response = asyncio.run(channel(controllers, leader=1).describe_quorum(request))
    partition = response.topics[0].partitions[0]
    assert partition.error_code == ErrorCode.none and partition.leader_id == 2
    assert [o.replica_id for o in partition.observers] == [4]
    assert controllers[1].received == [request] and controllers[2].received == [request]
    assert response.__version__ == 1  # the client's version, answered unchanged


def test_a_controller_serving_a_lower_version_is_refused() -> None:
    controllers = {1: Controller(1, leads=True, version=1)}
    with pytest.raises(ControllerError) as raised:
        asyncio.run(
            channel(controllers, leader=1).describe_quorum(
                wire_describe_quorum.describe_quorum_request(2)
            )
        )
    assert raised.value.code == "UNSUPPORTED_VERSION"
    assert controllers[1].received == []


def broker_handler() -> Any:
    return plane_handlers(Plane.BROKER)[wire.DESCRIBE_QUORUM_KEY].function


def request_of(body: Any) -> Any:
    header = SimpleNamespace(api_key=wire.DESCRIBE_QUORUM_KEY, api_version=body.__version__)
    return SimpleNamespace(header=header, body=body, session=Session())


class Quorum:
    def __init__(self, error: ControllerError | None = None) -> None:
        self.error = error
        self.asked: list[Any] = []

    async def describe_quorum(self, request: Any) -> Any:
        self.asked.append(request)
        if self.error is not None:
            raise self.error
        return wire_describe_quorum.describe_quorum_to_kio(description(1), request.__version__)


def test_the_broker_handler_refuses_another_topic_without_forwarding() -> None:
    body = wire_describe_quorum.describe_quorum_request(2)
    other = type(body.topics[0])(topic_name="orders", partitions=body.topics[0].partitions)
    body = type(body)(topics=(other,))
    quorum = Quorum()
    response = asyncio.run(
        broker_handler()(SimpleNamespace(quorum=quorum, authorizer=ALLOW_ALL), request_of(body))
    )
    assert response.error_code == ErrorCode.invalid_request
    assert quorum.asked == []


def test_no_controller_in_time_is_request_timed_out() -> None:
    quorum = Quorum(ControllerError("REQUEST_TIMED_OUT", "no active controller answered"))
    body = wire_describe_quorum.describe_quorum_request(2)
    response = asyncio.run(
        broker_handler()(SimpleNamespace(quorum=quorum, authorizer=ALLOW_ALL), request_of(body))
    )
    assert response.error_code == ErrorCode.request_timed_out
    assert quorum.asked == [body]


def test_the_broker_handler_answers_with_the_controllers_response() -> None:
    quorum = Quorum()
    body = wire_describe_quorum.describe_quorum_request(2)
    response = asyncio.run(
        broker_handler()(SimpleNamespace(quorum=quorum, authorizer=ALLOW_ALL), request_of(body))
    )
    assert response.topics[0].partitions[0].leader_id == 1
