"""Listener planes: each plane's Dispatcher serves only its own handlers.

A controller listener answers ApiVersions (with only the controller plane's keys) and
refuses client APIs exactly as an unknown key is refused: the connection is closed.
Driven in memory: frames go into a Dispatcher, no sockets.
"""

from __future__ import annotations

import asyncio
import datetime
import io
from types import SimpleNamespace
from typing import Any

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from odradek.metadata.controller_rpc import FORWARDED_VERSIONS
from odradek.network.connection import CloseConnection, ConnectionContext, Response
from odradek.network.server import SocketServer
from odradek.protocol.build import make
from odradek.protocol.messages import API_VERSIONS_KEY
from odradek.raft import wire
from odradek.server.dispatcher import Dispatcher
from odradek.server.handlers import REGISTRY, HandlerSpec, Plane, handles, supported_versions

PRODUCE_KEY = 0
METADATA_KEY = 3
DESCRIBE_CLUSTER_KEY = 60
CONTEXT = ConnectionContext("127.0.0.1:1", "CONTROLLER", 1)


def frame(api_key: int, version: int, **fields: Any) -> bytes:
    request = make(load_request_schema(api_key, version), **fields)
    header_schema = request.__header_schema__
    buffer = io.BytesIO()
    entity_writer(header_schema)(
        buffer,
        header_schema(
            request_api_key=api_key,
            request_api_version=version,
            correlation_id=7,
            client_id="tests",
        ),
    )
    entity_writer(type(request))(buffer, request)
    return buffer.getvalue()


def answer(dispatcher: Dispatcher, data: bytes) -> Response | None:
    return asyncio.run(dispatcher(data, CONTEXT))


def api_versions_keys(response: Response | None, version: int) -> dict[int, tuple[int, int]]:
    assert response is not None
    (data,) = response.parts
    assert isinstance(data, bytes)
    schema: Any = load_response_schema(API_VERSIONS_KEY, version)
    header, offset = entity_reader(schema.__header_schema__)(data, 0)
    assert header.correlation_id == 7
    body: Any
    body, _ = entity_reader(schema)(data, offset)
    return {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}


def api_versions_v3() -> bytes:
    return frame(API_VERSIONS_KEY, 3, client_software_name="tests", client_software_version="1")


def test_client_apis_are_on_the_broker_plane_quorum_apis_on_the_controller_one() -> None:
    broker = supported_versions(Plane.BROKER)
    controller = supported_versions(Plane.CONTROLLER)
    assert supported_versions() == broker  # the default plane is the client one
    assert {PRODUCE_KEY, METADATA_KEY, API_VERSIONS_KEY} <= set(broker)
    # The quorum APIs (Vote, Begin/EndQuorumEpoch, DescribeQuorum, FetchSnapshot, and
    # the metadata Fetch, its own handler there), DescribeCluster v1 for controllers
    # (KIP-919, its own handler there too), ApiVersions on both, and the admin requests
    # brokers forward (CreateTopics, DeleteTopics, AlterConfigs, CreatePartitions,
    # IncrementalAlterConfigs, ElectLeaders, AlterPartitionReassignments, CreateAcls,
    # DeleteAcls, AlterClientQuotas, AlterUserScramCredentials, at the broker plane's
    # versions), ListPartitionReassignments (a read of the node's image, on both),
    # AllocateProducerIds, AlterPartition, and BrokerRegistration and BrokerHeartbeat
    # (KIP-631).
    forwarded = {key: broker[key] for key in (19, 20, 30, 31, 33, 37, 43, 44, 45, 49, 51)}
    assert controller == {
        API_VERSIONS_KEY: broker[API_VERSIONS_KEY],
        **wire.VERSIONS,
        DESCRIBE_CLUSTER_KEY: (1, 1),
        **forwarded,
        46: (0, 0),
        67: (0, 0),
        56: (2, 3),
        62: (0, 4),
        63: (0, 2),
        # SASL (handlers/sasl.py) on both planes, as Kafka's controllers have it.
        17: broker[17],
        36: broker[36],
    }
    assert forwarded == {k: v for k, v in FORWARDED_VERSIONS.items() if k not in (56, 67)}
    assert not {52, 53, 54, 56, 59, 67} & set(broker)
    # DescribeQuorum is on both: a broker forwards it to the active controller (Kafka's
    # brokers do, for kafka-metadata-quorum.sh --bootstrap-server).
    assert broker[55] == controller[55]


def test_controller_dispatcher_answers_api_versions_with_its_plane_only() -> None:
    services: Any = SimpleNamespace()  # ApiVersions needs no service
    dispatcher = Dispatcher(services, Plane.CONTROLLER)
    assert api_versions_keys(answer(dispatcher, api_versions_v3()), 3) == supported_versions(
        Plane.CONTROLLER
    )
    broker_dispatcher = Dispatcher(services, Plane.BROKER)
    keys = api_versions_keys(answer(broker_dispatcher, api_versions_v3()), 3)
    assert keys == supported_versions(Plane.BROKER)


def test_controller_dispatcher_refuses_client_apis_like_an_unknown_key() -> None:
    services: Any = SimpleNamespace()  # a handler reaching a service would fail loudly
    dispatcher = Dispatcher(services, Plane.CONTROLLER)
    metadata = frame(
        METADATA_KEY,
        12,
        topics=None,
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    produce = frame(
        PRODUCE_KEY,
        9,
        transactional_id=None,
        acks=1,
        timeout=datetime.timedelta(seconds=1),
        topic_data=(),
    )
    for data in (metadata, produce):
        with pytest.raises(CloseConnection):
            answer(dispatcher, data)
    unknown = bytearray(metadata)
    unknown[0:2] = (999).to_bytes(2, "big")
    with pytest.raises(CloseConnection):
        answer(dispatcher, bytes(unknown))
    with pytest.raises(CloseConnection):  # the broker plane refuses the same unknown key
        answer(Dispatcher(services, Plane.BROKER), bytes(unknown))


def test_an_unsupported_api_versions_version_lists_the_plane_s_keys() -> None:
    services: Any = SimpleNamespace()
    data = bytearray(api_versions_v3())
    data[2:4] = (99).to_bytes(2, "big")  # a version nobody implements
    response = answer(Dispatcher(services, Plane.CONTROLLER), bytes(data))
    assert api_versions_keys(response, 0) == supported_versions(Plane.CONTROLLER)


def test_a_handler_registered_on_the_controller_plane_is_served_only_there() -> None:
    key = 32_000  # no real API: registered for this test, removed after
    seen: list[Any] = []

    async def probe(services: Any, request: Any) -> Any:
        seen.append(services)
        return None

    handles(key, 0, 0, plane=Plane.CONTROLLER)(probe)
    try:
        assert supported_versions(Plane.CONTROLLER)[key] == (0, 0)
        assert key not in supported_versions(Plane.BROKER)
        assert isinstance(REGISTRY[Plane.CONTROLLER][key], HandlerSpec)
        with pytest.raises(AssertionError, match="registered twice"):
            handles(key, 0, 0, plane=Plane.CONTROLLER)(probe)
    finally:
        del REGISTRY[Plane.CONTROLLER][key]
    assert key not in supported_versions(Plane.CONTROLLER)


def test_one_socket_server_serves_each_listener_with_its_plane_s_dispatcher() -> None:
    """What the KRaft work needs: bind the controller listener with its dispatcher."""
    services: Any = SimpleNamespace()

    async def exchange(port: int, data: bytes) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(len(data).to_bytes(4, "big") + data)
        await writer.drain()
        try:
            size = int.from_bytes(await reader.readexactly(4), "big")
            return await reader.readexactly(size)
        except asyncio.IncompleteReadError:
            return b""  # closed without an answer
        finally:
            writer.close()

    async def run() -> tuple[bytes, bytes, bytes]:
        broker = Dispatcher(services, Plane.BROKER)
        server = SocketServer(broker, max_frame_bytes=1 << 20, idle_timeout_ms=10_000)
        server.bind("PLAINTEXT", "127.0.0.1", 0)
        controller = server.bind(
            "CONTROLLER", "127.0.0.1", 0, Dispatcher(services, Plane.CONTROLLER)
        )
        plain = server.bound[0]
        server.start()
        try:
            on_broker = await exchange(plain.port, api_versions_v3())
            on_controller = await exchange(controller.port, api_versions_v3())
            metadata = frame(
                METADATA_KEY,
                12,
                topics=None,
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
            refused = await exchange(controller.port, metadata)
        finally:
            await server.stop()
        return on_broker, on_controller, refused

    on_broker, on_controller, refused = asyncio.run(run())
    assert api_versions_keys(Response([on_broker]), 3) == supported_versions(Plane.BROKER)
    assert api_versions_keys(Response([on_controller]), 3) == supported_versions(Plane.CONTROLLER)
    assert refused == b""
