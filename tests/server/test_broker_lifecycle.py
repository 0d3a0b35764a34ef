"""The broker's lifecycle (server/broker_lifecycle.py): the sans-IO core with a fake
clock, the asyncio loop over a fake transport, and the wire handlers (API 62/63) on
the controller plane, in process."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import uuid
from collections.abc import Sequence
from typing import Any

import pytest
from kio.schema.broker_heartbeat.v1.request import BrokerHeartbeatRequest
from kio.schema.broker_registration.v4.request import BrokerRegistrationRequest, Listener
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta

from odradek.client._core.connection import RequestTimedOut
from odradek.metadata.broker_heartbeats import BrokerHeartbeat, BrokerRegistration, HeartbeatReply
from odradek.metadata.controller import Controller
from odradek.metadata.controller_client import ControllerClient
from odradek.metadata.errors import ControllerError
from odradek.metadata.image import MetadataImage, MetadataRecord
from odradek.metadata.loader import MetadataLoader
from odradek.server.broker_lifecycle import (
    MIN_RETRY_BACKOFF_MS,
    BrokerLifecycle,
    BrokerLifecycleManager,
    Heartbeat,
    LocalLifecycleTransport,
    Register,
    RemoteLifecycleTransport,
    State,
)
from odradek.server.config import QuorumVoter
from odradek.server.handlers import Plane
from odradek.server.handlers.broker_registration import broker_heartbeat, broker_registration

INTERVAL = 2000
REG = BrokerRegistration(2, str(uuid.uuid4()), (("PLAINTEXT", "h", 9092),))


def reply(caught_up: bool, fenced: bool, stop: bool = False) -> HeartbeatReply:
    return HeartbeatReply(caught_up, fenced, stop)


# -- the core ------------------------------------------------------------------------
def test_registers_first_then_heartbeats_soon_while_catching_up_then_every_interval() -> None:
    core = BrokerLifecycle(REG, INTERVAL)
    action = core.poll(0, 5)
    assert isinstance(action, Register) and action.request == REG
    assert core.poll(0, 5) is None  # one request at a time
    core.on_registered(7, 10)
    assert core.state is State.FENCED and core.broker_epoch == 7
    action = core.poll(10, 5)
    assert isinstance(action, Heartbeat)
    assert action.request == BrokerHeartbeat(2, 7, 5, want_fence=False, want_shut_down=False)
    core.on_heartbeat(reply(False, True), 20)
    assert core.next_send_ms() == 20 + MIN_RETRY_BACKOFF_MS  # not caught up: soon
    assert core.poll(20 + MIN_RETRY_BACKOFF_MS - 1, 6) is None
    assert isinstance(core.poll(20 + MIN_RETRY_BACKOFF_MS, 7), Heartbeat)
    core.on_heartbeat(reply(True, False), 200)
    assert core.unfenced and core.state is State.RUNNING
    assert core.next_send_ms() == 200 + INTERVAL
    # fenced again by the controller (a long pause): the state follows the answer
    core.poll(200 + INTERVAL, 9)
    core.on_heartbeat(reply(True, True), 200 + INTERVAL)
    assert core.state is State.FENCED


def test_errors_re_register_or_back_off() -> None:
    core = BrokerLifecycle(REG, INTERVAL)
    core.poll(0, 0)
    core.on_error("DUPLICATE_BROKER_REGISTRATION", 0)
    assert core.state is State.REGISTERING
    delays = []
    for now in range(0, 10**6, 10**5):
        core.poll(now, 0)
        core.on_error("REQUEST_TIMED_OUT", now)
        delays.append(core.next_send_ms() - now)  # type: ignore[operator]
    assert delays[0] == 2 * MIN_RETRY_BACKOFF_MS and delays[-1] == INTERVAL  # capped
    assert delays == sorted(delays)
    core.poll(10**6, 0)
    core.on_registered(3, 10**6)
    core.poll(10**6, 3)
    core.on_error("STALE_BROKER_EPOCH", 10**6)  # a newer registration: register again
    assert core.state is State.REGISTERING and core.broker_epoch == -1
    assert isinstance(core.poll(10**6, 3), Register)


def test_controlled_shutdown_asks_at_once_and_ends_on_should_shut_down() -> None:
    core = BrokerLifecycle(REG, INTERVAL)
    core.poll(0, 0)
    core.on_registered(1, 0)
    core.poll(0, 1)
    core.on_heartbeat(reply(True, False), 0)
    core.begin_shutdown(5)
    action = core.poll(5, 1)
    assert isinstance(action, Heartbeat) and action.request.want_shut_down
    core.on_heartbeat(reply(True, True, stop=False), 6)  # not yet: ask again soon
    assert core.state is State.PENDING_SHUTDOWN and core.next_send_ms() == 6 + MIN_RETRY_BACKOFF_MS
    core.poll(6 + MIN_RETRY_BACKOFF_MS, 1)
    core.on_heartbeat(reply(True, True, stop=True), 200)
    assert core.state is State.SHUT_DOWN and core.next_send_ms() is None
    # never registered: nothing to hand over
    fresh = BrokerLifecycle(REG, INTERVAL)
    fresh.begin_shutdown(0)
    assert fresh.state is State.SHUT_DOWN


# -- the loop over the in-process controller --------------------------------------------
class MemoryWriter:
    def __init__(self, loader: MetadataLoader) -> None:
        self.loader = loader
        self.end = -1
        self.active_epoch = 1

    async def append(self, records: Sequence[MetadataRecord]) -> int:
        if self.active_epoch < 0:
            raise ControllerError("NOT_CONTROLLER", "not active")
        self.end += len(records)
        self.loader.handle_commit(self.end, records)
        return self.end

    def replay(self) -> MetadataImage:
        return self.loader.image


def memory_controller(node_id: int = 1) -> tuple[Controller, MemoryWriter, MetadataLoader]:
    loader = MetadataLoader()
    writer = MemoryWriter(loader)
    defaults = {"num.partitions": 1, "default.replication.factor": 1}
    return Controller(writer, loader, node_id, lambda: defaults), writer, loader


def test_the_manager_registers_is_unfenced_and_shuts_down_in_process() -> None:
    async def body() -> None:
        controller, _, loader = memory_controller()
        manager = BrokerLifecycleManager(
            BrokerLifecycle(REG, 50),
            LocalLifecycleTransport(lambda: controller),
            lambda: loader.image.offset,
        )
        manager.start()
        await asyncio.wait_for(manager.wait_unfenced(), 10)
        broker = controller.image.brokers[2]
        assert not broker.fenced and broker.epoch == manager.core.broker_epoch
        assert await manager.controlled_shutdown(10)
        assert controller.image.brokers[2].fenced
        await manager.stop()

    asyncio.run(body())


class FailingTransport:
    async def register(self, request: BrokerRegistration) -> int:
        raise RuntimeError("a bug")

    async def heartbeat(self, request: BrokerHeartbeat) -> HeartbeatReply:
        raise AssertionError

    async def close(self) -> None:
        return None


def test_a_broken_loop_fails_the_wait_instead_of_hanging() -> None:
    async def body() -> None:
        manager = BrokerLifecycleManager(BrokerLifecycle(REG, 50), FailingTransport(), lambda: 0)
        manager.start()
        with pytest.raises(RuntimeError, match="a bug"):
            await asyncio.wait_for(manager.wait_unfenced(), 10)

    asyncio.run(body())


class FakeClient:
    """The controller client's ``send``, answered by a function of the built request."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.sent: list[Any] = []
        self.timeouts: list[tuple[float | None, float | None]] = []

    async def send(
        self,
        api_key: int,
        build: Any,
        *,
        timeout_s: float | None = None,
        attempt_timeout_s: float | None = None,
    ) -> Any:
        request = build(4 if api_key == 62 else 1)
        self.sent.append(request)
        self.timeouts.append((timeout_s, attempt_timeout_s))
        return self.answer(request)

    async def close(self) -> None:
        return None


def test_the_remote_transport_builds_kafkas_requests_and_reads_errors() -> None:
    from kio.schema.broker_heartbeat.v1.response import BrokerHeartbeatResponse
    from kio.schema.broker_registration.v4.response import BrokerRegistrationResponse

    log_dir = str(uuid.uuid4())
    registration = BrokerRegistration(
        2, str(uuid.uuid4()), (("INTERNAL", "h", 1),), "r", (("f", 0, 3),), (log_dir,)
    )

    async def body() -> None:
        client = FakeClient(
            lambda r: BrokerRegistrationResponse(
                throttle_time=0, error_code=ErrorCode.none, broker_epoch=42
            )
        )
        transport = RemoteLifecycleTransport(client, "cid", 1.0, {"INTERNAL": "SSL"})  # type: ignore[arg-type]
        assert await transport.register(registration) == 42
        (sent,) = client.sent
        assert sent.cluster_id == "cid" and str(sent.incarnation_id) == registration.incarnation_id
        assert sent.listeners[0].security_protocol == 1 and sent.rack == "r"
        assert [str(d) for d in sent.log_dirs] == [log_dir]
        client.answer = lambda r: BrokerHeartbeatResponse(
            throttle_time=0, error_code=ErrorCode.stale_broker_epoch, should_shut_down=False
        )
        with pytest.raises(ControllerError) as caught:
            await transport.heartbeat(BrokerHeartbeat(2, 42, 40))
        assert caught.value.code == "STALE_BROKER_EPOCH"
        # a heartbeat may be repeated: half its time per controller asked
        assert client.timeouts == [(5.0, None), (1.0, 0.5)]

    asyncio.run(body())


class ShutdownVoter:
    """A controller listener for the shutdown test: "silent" (the node's own controller,
    which lost the leadership with the heartbeat in flight: no answer until the
    request's timeout, then closed as BrokerConnection does), "follower"
    (NOT_CONTROLLER) or "leader" (lets the broker go)."""

    def __init__(self, node_id: int, behaviour: str, log: list[int]) -> None:
        self.node_id = node_id
        self.behaviour = behaviour
        self.log = log
        self.closed = False

    def version_for(self, api_key: int) -> int:
        return 1

    async def send(
        self, request: Any, *, expect_response: bool = True, timeout_s: float | None = None
    ) -> Any:
        from kio.schema.broker_heartbeat.v1.response import BrokerHeartbeatResponse

        self.log.append(self.node_id)
        if self.behaviour == "silent":
            await asyncio.sleep(timeout_s or 0)
            self.closed = True
            raise RequestTimedOut("request timed out")
        refused = self.behaviour == "follower"
        return BrokerHeartbeatResponse(
            throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
            error_code=ErrorCode.not_controller if refused else ErrorCode.none,
            is_caught_up=True,
            is_fenced=True,
            should_shut_down=not refused,
        )

    async def close(self) -> None:
        self.closed = True


def test_a_controlled_shutdown_reaches_the_new_controller_when_its_own_went_silent() -> None:
    """The leader source still names node 1 (this node's own controller, no longer
    active, holding the heartbeat unanswered): half the heartbeat's time on it, then the
    other voters — the one that is the controller now lets the broker go well within
    the wait. Asking node 1 with the whole heartbeat time (twice) would use it all."""
    behaviour = {1: "silent", 2: "follower", 3: "leader"}
    log: list[int] = []

    async def connect(voter: Any, timeout_s: float) -> ShutdownVoter:
        return ShutdownVoter(voter.node_id, behaviour[voter.node_id], log)

    voters = [QuorumVoter(n, "127.0.0.1", 1) for n in (1, 2, 3)]

    async def body() -> bool:
        client = ControllerClient(voters, lambda: 1, connect, retry_backoff_s=0.02)
        transport = RemoteLifecycleTransport(client, "cid", 1.0, {})
        core = BrokerLifecycle(REG, INTERVAL)
        core.poll(0, 0)
        core.on_registered(1, 0)
        core.poll(0, 1)
        core.on_heartbeat(reply(True, False), 0)  # running; the next beat is 2 s away
        manager = BrokerLifecycleManager(core, transport, lambda: 10)
        manager.start()
        try:
            return await manager.controlled_shutdown(1.6)
        finally:
            await manager.stop()

    assert asyncio.run(body()) is True
    assert log == [1, 2, 3]  # the silent one is not asked again in the same heartbeat


# -- the wire handlers, with the controller in process ----------------------------------
class Raft:
    cluster_id = "the-cluster"


class PlaneServices:
    def __init__(self, controller: Controller) -> None:
        self.raft = Raft()
        self.brokers = controller


class FakeRequest:
    def __init__(self, api_key: int, version: int, body: Any) -> None:
        self.header = type("H", (), {"api_key": api_key, "api_version": version})()
        self.body = body


def registration_request(cluster_id: str, incarnation: uuid.UUID) -> FakeRequest:
    body = BrokerRegistrationRequest(
        broker_id=3,
        cluster_id=cluster_id,
        incarnation_id=incarnation,
        listeners=(Listener(name="PLAINTEXT", host="h", port=9094, security_protocol=0),),
        features=(),
        rack=None,
    )
    return FakeRequest(62, 4, body)


def test_handlers_answer_epochs_and_error_codes() -> None:
    async def body() -> None:
        controller, writer, loader = memory_controller()
        services = PlaneServices(controller)
        incarnation = uuid.uuid4()
        response = await broker_registration(services, registration_request("other", incarnation))  # type: ignore[arg-type]
        assert response.error_code == ErrorCode.inconsistent_cluster_id
        response = await broker_registration(
            services,  # type: ignore[arg-type]
            registration_request("the-cluster", incarnation),
        )
        assert response.error_code == ErrorCode.none and response.broker_epoch == 0
        heartbeat = BrokerHeartbeatRequest(
            broker_id=3,
            broker_epoch=0,
            current_metadata_offset=loader.image.offset,
            want_fence=False,
            want_shut_down=False,
        )
        answer = await broker_heartbeat(services, FakeRequest(63, 1, heartbeat))  # type: ignore[arg-type]
        assert answer.error_code == ErrorCode.none and answer.is_caught_up
        assert not answer.is_fenced and not answer.should_shut_down
        stale = FakeRequest(63, 1, dataclasses.replace(heartbeat, broker_epoch=9))
        answer = await broker_heartbeat(services, stale)  # type: ignore[arg-type]
        assert answer.error_code == ErrorCode.stale_broker_epoch and answer.is_fenced
        # another live incarnation with the same id
        response = await broker_registration(
            services,  # type: ignore[arg-type]
            registration_request("the-cluster", uuid.uuid4()),
        )
        assert response.error_code == ErrorCode.duplicate_broker_registration
        writer.active_epoch = -1  # no longer the active controller
        answer = await broker_heartbeat(services, FakeRequest(63, 1, heartbeat))  # type: ignore[arg-type]
        assert answer.error_code == ErrorCode.not_controller

    asyncio.run(body())


def test_the_controller_plane_lists_registration_and_heartbeat() -> None:
    from odradek.server.handlers import load_all, supported_versions

    load_all()
    versions = supported_versions(Plane.CONTROLLER)
    assert versions[62] == (0, 4) and versions[63] == (0, 2)
    assert 62 not in supported_versions(Plane.BROKER)
