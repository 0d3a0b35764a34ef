"""A controller listener with the authorizer on: every request but the login ones needs
CLUSTER_ACTION on the cluster (super users have it), as Kafka requires of the
controller's APIs and of the requests brokers forward. Driven in memory: frames into a
controller-plane Dispatcher, no sockets."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from odradek.metadata.image import AclEntry
from odradek.network.connection import CloseConnection, ConnectionContext, Response
from odradek.security.acls import AuthorizerSettings
from odradek.server.authorizer import ALLOW_ALL, Authorizer
from odradek.server.dispatcher import Dispatcher
from odradek.server.handlers import HandlerSpec, Plane
from tests.server.test_planes import frame

BROKER_HEARTBEAT = 63
CLUSTER, LITERAL, CLUSTER_ACTION, ALLOW = 4, 3, 9, 3
NODE2_MAY_ACT = AclEntry(
    CLUSTER, "kafka-cluster", LITERAL, "User:node2", "*", CLUSTER_ACTION, ALLOW
)


async def served(_services: Any, _request: Any) -> Response:
    return Response([b"served"])


def dispatcher(peer_authorizer: Authorizer) -> Dispatcher:
    services = SimpleNamespace(peer_authorizer=peer_authorizer)
    gate = Dispatcher(services, Plane.CONTROLLER)  # type: ignore[arg-type]
    spec = gate.handlers[BROKER_HEARTBEAT]
    gate.handlers[BROKER_HEARTBEAT] = HandlerSpec(
        BROKER_HEARTBEAT, spec.min_version, spec.max_version, served
    )
    return gate


def heartbeat_as(gate: Dispatcher, principal: str) -> Response | None:
    context = ConnectionContext("127.0.0.1:5", "CONTROLLER", 1)
    context.session.principal = principal
    data = frame(
        BROKER_HEARTBEAT,
        0,
        broker_id=2,
        broker_epoch=5,
        current_metadata_offset=0,
        want_fence=False,
        want_shut_down=False,
    )
    return asyncio.run(gate(data, context))


def test_super_users_and_cluster_action_acls_pass_others_are_closed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = AuthorizerSettings(super_users=frozenset({"User:broker"}))
    gate = dispatcher(Authorizer(lambda: {"a": NODE2_MAY_ACT}, settings))
    assert heartbeat_as(gate, "User:broker") is not None
    assert heartbeat_as(gate, "User:node2") is not None
    with pytest.raises(CloseConnection):
        heartbeat_as(gate, "User:mallory")
    assert "User:mallory may not send API 63 to a controller listener" in caplog.text


def test_without_an_authorizer_the_gate_is_open() -> None:
    assert heartbeat_as(dispatcher(ALLOW_ALL), "User:ANONYMOUS") is not None
