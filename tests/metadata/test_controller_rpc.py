"""RemoteControllerChannel over a real socket to the controller plane's handlers.

A real ``Controller`` (on a tmp metadata log) serves the CONTROLLER plane's admin
handlers (behind ``GatedControllerChannel``) on a loopback listener; the channel under
test forwards to it with a ``ControllerClient``. Checked: each call gives the same
result as ``LocalControllerChannel`` on the same controller (per-item errors with the
same codes), the gate answers NOT_CONTROLLER until the node is active (and the client
keeps trying until it is), and the contract: a success returns only once the
*caller's* image — here a "follower" image that trails the controller's by a delay —
shows the change.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from odradek.metadata.controller import Controller
from odradek.metadata.controller_channel import (
    APPEND,
    DELETE,
    SET,
    ConfigOp,
    ControllerError,
    GatedControllerChannel,
    LocalControllerChannel,
)
from odradek.metadata.controller_client import ControllerClient, connector
from odradek.metadata.controller_rpc import FORWARDED_VERSIONS, RemoteControllerChannel
from odradek.metadata.delta import MetadataDelta
from odradek.metadata.image import BROKER_RESOURCE, TOPIC_RESOURCE, MetadataImage
from odradek.metadata.loader import MetadataLoader
from odradek.metadata.topic_changes import NewTopic
from odradek.metadata.view import Endpoint, endpoints_for_listener
from odradek.metadata.writer import LocalMetadataWriter
from odradek.network.server import SocketServer
from odradek.server.config import BrokerConfig
from odradek.server.config_alter import BrokerConfigRules
from odradek.server.dispatcher import Dispatcher
from odradek.server.handlers import Plane
from odradek.server.metadata_log import METADATA_LOG_CONFIG
from odradek.server.services import ControllerPlaneServices
from odradek.storage.log_config import LogConfig
from odradek.storage.log_loader import open_log
from tests.support.brokers import register_unfenced

DEFAULTS = {"num.partitions": 2, "default.replication.factor": 1}
FOLLOWER_LAG_S = 0.2


@dataclass
class Node:
    """What the controller's handlers see of the node: its image, identity, configs."""

    controller: Controller
    config: BrokerConfig = field(default_factory=lambda: BrokerConfig({}))
    node_id: int = 1
    cluster_id: str = "test"
    controller_id: int = 1
    default_listener: str = "PLAINTEXT"

    @property
    def image(self) -> MetadataImage:
        return self.controller.image

    @property
    def metadata(self) -> Node:
        return self

    @property
    def static(self) -> BrokerConfig:
        return self.config

    def endpoints(self, image: MetadataImage, listener: str) -> list[Endpoint]:
        return endpoints_for_listener(image, listener)

    def dynamic_defaults(self) -> dict[str, int]:
        return dict(DEFAULTS)

    def topic_defaults(self) -> LogConfig:
        return self.config.topic_defaults

    def effective_topic_config(self, topic: str, explicit: Any = None) -> dict[str, Any]:
        overrides = dict(self.image.topic_configs(topic)) if explicit is None else dict(explicit)
        return LogConfig.from_properties(overrides, self.topic_defaults()).to_properties()


@dataclass
class Setup:
    remote: RemoteControllerChannel
    local: LocalControllerChannel
    controller: Controller
    follower: list[MetadataImage]  # [the image the forwarding broker has applied]
    active: list[bool]
    client: ControllerClient


@contextlib.asynccontextmanager
async def forwarding(tmp_path: Path, lag_s: float = FOLLOWER_LAG_S) -> AsyncIterator[Setup]:
    log, _ = open_log(tmp_path / "__cluster_metadata-0", METADATA_LOG_CONFIG)
    loader = MetadataLoader()
    controller = Controller(LocalMetadataWriter(log, loader), loader, 1, lambda: DEFAULTS)
    node = Node(controller)
    local = LocalControllerChannel(lambda: controller, BrokerConfigRules(node, node))
    await register_unfenced(controller, 1)
    follower = [controller.image]
    loop = asyncio.get_running_loop()

    def trail(_delta: MetadataDelta, image: MetadataImage) -> None:
        loop.call_later(lag_s, lambda: follower.__setitem__(0, max_image(follower[0], image)))

    loader.subscribe(trail)
    active = [True]
    gate = GatedControllerChannel(local, lambda: active[0], lambda: 1)
    services: Any = ControllerPlaneServices(
        raft=None,  # type: ignore[arg-type]  # the admin handlers do not use the quorum
        metadata=node,
        config=node,
        controller=gate,
        brokers=controller,
    )
    server = SocketServer(
        Dispatcher(services, Plane.CONTROLLER), max_frame_bytes=1 << 20, idle_timeout_ms=10_000
    )
    bound = server.bind("CONTROLLER", "127.0.0.1", 0)
    server.start()

    @dataclass(frozen=True)
    class Voter:
        node_id: int
        host: str
        port: int

    client = ControllerClient(
        [Voter(1, "127.0.0.1", bound.port)],
        lambda: 1,
        connector(client_id="test", versions=FORWARDED_VERSIONS),
        retry_backoff_s=0.02,
    )
    remote = RemoteControllerChannel(client, lambda: follower[0], timeout_s=5.0)
    try:
        yield Setup(remote, local, controller, follower, active, client)
    finally:
        await remote.close()
        await server.stop(grace_s=0.5)
        log.close()


def max_image(a: MetadataImage, b: MetadataImage) -> MetadataImage:
    return b if b.offset >= a.offset else a


def run(tmp_path: Path, body: Callable[[Setup], Coroutine[Any, Any, None]]) -> None:
    async def go() -> None:
        async with forwarding(tmp_path) as setup:
            await body(setup)

    asyncio.run(go())


def codes(errors: list[ControllerError | None]) -> list[str | None]:
    return [None if e is None else e.code for e in errors]


def test_create_topics_per_item_errors_as_the_local_channel_and_waits_for_the_image(
    tmp_path: Path,
) -> None:
    async def body(s: Setup) -> None:
        wanted = [NewTopic("a", 3, 1), NewTopic("bad name!"), NewTopic("b", 1, 5)]
        started = time.monotonic()
        errors = await s.remote.create_topics(wanted, False)
        assert codes(errors) == [None, "INVALID_TOPIC_EXCEPTION", "INVALID_REPLICATION_FACTOR"]
        assert errors[1] is not None and "bad name!" in str(errors[1])  # the message too
        # Returned only once the trailing image had it (the contract), not before.
        assert len(s.follower[0].topics["a"].partitions) == 3
        assert time.monotonic() - started >= FOLLOWER_LAG_S * 0.9
        # The same request through the local channel: the same codes (a exists now).
        local = await s.local.create_topics([NewTopic("a"), NewTopic("bad name!")], False)
        remote = await s.remote.create_topics([NewTopic("a"), NewTopic("bad name!")], False)
        assert codes(local) == codes(remote) == ["TOPIC_ALREADY_EXISTS", "INVALID_TOPIC_EXCEPTION"]
        # validate_only: success, nothing created, no wait for something that never comes.
        assert await s.remote.create_topics([NewTopic("c")], validate_only=True) == [None]
        assert "c" not in s.controller.image.topics

    run(tmp_path, body)


def test_delete_topics_by_name_and_id(tmp_path: Path) -> None:
    async def body(s: Setup) -> None:
        await s.remote.create_topics([NewTopic("a"), NewTopic("b")], False)
        topic_id = s.controller.image.topics["b"].topic_id
        errors = await s.remote.delete_topics(["a", topic_id, "missing"])
        assert codes(errors) == [None, None, "UNKNOWN_TOPIC_OR_PARTITION"]
        assert not s.follower[0].topics  # the caller's image already shows it

    run(tmp_path, body)


def test_create_partitions_raises_the_controllers_error(tmp_path: Path) -> None:
    async def body(s: Setup) -> None:
        await s.remote.create_topics([NewTopic("a", 1, 1)], False)
        await s.remote.create_partitions("a", 4, None, False)
        assert len(s.follower[0].topics["a"].partitions) == 4
        for channel in (s.remote, s.local):
            with pytest.raises(ControllerError) as raised:
                await channel.create_partitions("a", 2, None, False)
            assert raised.value.code == "INVALID_PARTITIONS"
            with pytest.raises(ControllerError) as raised:
                await channel.create_partitions("missing", 2, None, False)
            assert raised.value.code == "UNKNOWN_TOPIC_OR_PARTITION"
        await s.remote.create_partitions("a", 6, None, validate_only=True)
        assert len(s.controller.image.topics["a"].partitions) == 4

    run(tmp_path, body)


def test_config_changes_incremental_and_replacing(tmp_path: Path) -> None:
    async def body(s: Setup) -> None:
        await s.remote.create_topics([NewTopic("a", 1, 1)], False)
        resource = (TOPIC_RESOURCE, "a")
        await s.remote.alter_configs(
            TOPIC_RESOURCE,
            "a",
            [ConfigOp("retention.ms", SET, "1000"), ConfigOp("cleanup.policy", SET, "compact")],
            replace=False,
            validate_only=False,
        )
        assert s.follower[0].configs[resource] == {
            "retention.ms": "1000",
            "cleanup.policy": "compact",
        }
        await s.remote.alter_configs(
            TOPIC_RESOURCE,
            "a",
            [ConfigOp("cleanup.policy", APPEND, "delete"), ConfigOp("retention.ms", DELETE, None)],
            replace=False,
            validate_only=False,
        )
        assert s.follower[0].configs[resource] == {"cleanup.policy": "compact,delete"}
        await s.remote.alter_configs(
            TOPIC_RESOURCE,
            "a",
            [ConfigOp("segment.ms", SET, "60000")],
            replace=True,
            validate_only=False,
        )
        assert s.follower[0].configs[resource] == {"segment.ms": "60000"}
        for channel in (s.remote, s.local):
            with pytest.raises(ControllerError) as raised:
                await channel.alter_configs(
                    TOPIC_RESOURCE,
                    "a",
                    [ConfigOp("retention.ms", SET, "soon")],
                    replace=False,
                    validate_only=False,
                )
            assert raised.value.code == "INVALID_CONFIG"
        # A broker resource of another broker: the controller accepts any broker id,
        # validated with the broker tables (a static-only property is refused).
        await s.remote.alter_configs(
            BROKER_RESOURCE,
            "7",
            [ConfigOp("log.cleaner.threads", SET, "2")],
            replace=False,
            validate_only=False,
        )
        assert s.follower[0].configs[(BROKER_RESOURCE, "7")] == {"log.cleaner.threads": "2"}
        with pytest.raises(ControllerError) as raised:
            await s.remote.alter_configs(
                BROKER_RESOURCE,
                "7",
                [ConfigOp("node.id", SET, "3")],
                replace=False,
                validate_only=False,
            )
        assert raised.value.code == "INVALID_REQUEST"
        for name in ("x", "-1"):  # not a broker id
            with pytest.raises(ControllerError) as raised:
                await s.remote.alter_configs(
                    BROKER_RESOURCE,
                    name,
                    [ConfigOp("log.cleaner.threads", SET, "2")],
                    replace=False,
                    validate_only=False,
                )
            assert raised.value.code == "INVALID_REQUEST"

    run(tmp_path, body)


def test_producer_id_blocks_for_the_broker_that_asks(tmp_path: Path) -> None:
    async def body(s: Setup) -> None:
        first = await s.remote.allocate_producer_ids(2)
        second = await s.remote.allocate_producer_ids(3)
        assert second.first_id == first.first_id + first.count
        assert s.follower[0].next_producer_id >= second.first_id + second.count

    run(tmp_path, body)


def test_a_node_that_is_not_active_answers_not_controller_and_the_client_waits(
    tmp_path: Path,
) -> None:
    async def body(s: Setup) -> None:
        s.active[0] = False
        client = s.remote.client

        def build(version: int) -> Any:
            from odradek.client._core.connection import request_entity

            return request_entity(67, version, broker_id=1, broker_epoch=-1)

        async def become_active() -> None:
            await asyncio.sleep(0.3)
            s.active[0] = True

        started = time.monotonic()
        activation = asyncio.ensure_future(become_active())
        errors = await s.remote.create_topics([NewTopic("a"), NewTopic("b")], False)
        await activation
        assert errors == [None, None]  # retried until the node became active
        assert time.monotonic() - started >= 0.25
        s.active[0] = False
        # Straight to the controller listener, NOT_CONTROLLER taken as an answer.
        response = await asyncio.wait_for(
            client.send(67, build, timeout_s=0.3, is_not_controller=lambda r: False), 5
        )
        assert response.error_code.name == "not_controller"
        with pytest.raises(ControllerError) as raised:
            await s.remote.create_partitions("a", 5, None, False)
        assert raised.value.code == "REQUEST_TIMED_OUT"

    async def go() -> None:
        async with forwarding(tmp_path) as setup:
            setup.remote._timeout_s = 2.0
            await body(setup)

    asyncio.run(go())


def test_a_lagging_node_still_returns_success_after_the_bounded_wait(tmp_path: Path) -> None:
    async def go() -> None:
        async with forwarding(tmp_path, lag_s=60.0) as s:
            s.remote._image_wait_s = 0.3
            started = time.monotonic()
            assert await s.remote.create_topics([NewTopic("a")], False) == [None]
            assert time.monotonic() - started >= 0.3
            assert "a" in s.controller.image.topics and "a" not in s.follower[0].topics

    asyncio.run(go())


def test_no_controller_in_time_is_request_timed_out_per_item(tmp_path: Path) -> None:
    """A forwarded request nobody answers: every topic of a many-item call gets
    REQUEST_TIMED_OUT (the channel's per-item contract), single-item calls raise it."""

    async def go() -> None:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()

        @dataclass(frozen=True)
        class Voter:
            node_id: int
            host: str
            port: int

        client = ControllerClient(
            [Voter(1, "127.0.0.1", port)],
            lambda: 1,
            connector(client_id="test", versions=FORWARDED_VERSIONS),
            retry_backoff_s=0.05,
        )
        remote = RemoteControllerChannel(client, MetadataImage, timeout_s=0.3)
        try:
            created = await remote.create_topics([NewTopic("a"), NewTopic("b")], False)
            assert codes(created) == ["REQUEST_TIMED_OUT", "REQUEST_TIMED_OUT"]
            deleted = await remote.delete_topics(["a"])
            assert codes(deleted) == ["REQUEST_TIMED_OUT"]
            with pytest.raises(ControllerError) as raised:
                await remote.allocate_producer_ids(1)
            assert raised.value.code == "REQUEST_TIMED_OUT"
        finally:
            await remote.close()

    asyncio.run(go())
