"""The broker's side of registration and heartbeats (KIP-631's BrokerLifecycleManager).

How this works and why: a broker is only part of the cluster once the active
controller has registered it and unfenced it. At start it sends a BrokerRegistration
(its node id, a fresh incarnation id per process start, its advertised broker
listeners, features and the directory ids of its log dirs) and gets its broker epoch
back; then it heartbeats every ``broker.heartbeat.interval.ms`` with that epoch and
the metadata offset its loader has applied. The controller unfences it once that
offset reaches its registration record, and fences it again if the heartbeats stop
for ``broker.session.timeout.ms`` (a paused or cut-off process); the next heartbeat
that gets through unfences it again. On SIGTERM the broker asks to shut down
(``want_shut_down``) and waits briefly for ``should_shut_down``: the controller fences
it and gives every partition it led a new leader from the ISR in the same commit, and
says yes once this broker's loader has applied that commit. On a combined node whose
controller is the active one, that controller answers its own broker (server/broker.py
resigns only afterwards); if the leadership moves meanwhile, NOT_CONTROLLER or a
silent attempt sends the heartbeat on to the new controller (controller_client.py).

Two parts, as elsewhere in odradek:

- ``BrokerLifecycle``: the sans-IO core. It knows the state (registering, fenced,
  unfenced, shutting down), decides what to send at a given time (``poll``) and
  when to wake up next, and takes the answers. Errors decide the next step:
  STALE_BROKER_EPOCH or BROKER_ID_NOT_REGISTERED mean the registration is gone (a
  newer one, an unregistration) and it registers again; DUPLICATE_BROKER_REGISTRATION
  (the old incarnation's session has not expired yet) and every transport failure
  are retried after a backoff that doubles up to the heartbeat interval.
- ``BrokerLifecycleManager``: the thin asyncio loop around it, sending through a
  ``LifecycleTransport``: ``RemoteLifecycleTransport`` sends Kafka's own requests
  (API 62/63) to the active controller with the ``ControllerClient`` (which finds the
  leader, retries NOT_CONTROLLER and lost connections); ``LocalLifecycleTransport`` is
  the zero-config single node's, which has no controller listener: it calls its own
  controller in-process, with the same decisions.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType

from odradek.metadata.broker_heartbeats import (
    BrokerHeartbeat,
    BrokerRegistration,
    HeartbeatReply,
)
from odradek.metadata.controller import Controller
from odradek.metadata.controller_client import ControllerClient, VoterAddress, connector
from odradek.metadata.errors import ControllerError
from odradek.protocol.build import make
from odradek.server.config import BrokerConfig
from odradek.storage.meta_properties import parse_uuid, read_meta_properties
from odradek.tasks import cancel_and_wait

logger = logging.getLogger(__name__)

BROKER_REGISTRATION_KEY: Final = 62
BROKER_HEARTBEAT_KEY: Final = 63
VERSIONS: Final = {BROKER_REGISTRATION_KEY: (0, 4), BROKER_HEARTBEAT_KEY: (0, 2)}
# The first retry after a failure; it doubles up to the heartbeat interval.
MIN_RETRY_BACKOFF_MS: Final = 100
# How long one registration may keep trying (the client retries inside it).
REGISTRATION_TIMEOUT_S: Final = 5.0
# Kafka's SecurityProtocol ids (BrokerRegistration's Listener.security_protocol).
SECURITY_PROTOCOLS: Final = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}


class State(enum.Enum):
    REGISTERING = "registering"
    FENCED = "fenced"  # registered, not (yet, or no longer) unfenced
    RUNNING = "running"  # unfenced
    PENDING_SHUTDOWN = "pending controlled shutdown"
    SHUT_DOWN = "shut down"  # the controller let it go (or it gave up waiting)


@dataclass(frozen=True, slots=True)
class Register:
    request: BrokerRegistration


@dataclass(frozen=True, slots=True)
class Heartbeat:
    request: BrokerHeartbeat


Action = Register | Heartbeat


class BrokerLifecycle:
    """The sans-IO core (module doc): times are milliseconds from the caller's clock."""

    def __init__(self, registration: BrokerRegistration, heartbeat_interval_ms: int) -> None:
        self.registration = registration
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.state = State.REGISTERING
        self.broker_epoch = -1
        self.caught_up = False
        self._next_send_ms = 0  # at once
        self._in_flight = False
        self._failures = 0

    @property
    def broker_id(self) -> int:
        return self.registration.broker_id

    @property
    def unfenced(self) -> bool:
        return self.state is State.RUNNING

    @property
    def in_flight(self) -> bool:
        return self._in_flight

    def next_send_ms(self) -> int | None:
        """When ``poll`` will have something to send (None: nothing ever again)."""
        if self.state is State.SHUT_DOWN:
            return None
        return self._next_send_ms

    def poll(self, now_ms: int, metadata_offset: int) -> Action | None:
        """What to send now, if anything (one request at a time)."""
        if self._in_flight or self.state is State.SHUT_DOWN or now_ms < self._next_send_ms:
            return None
        self._in_flight = True
        if self.state is State.REGISTERING:
            return Register(self.registration)
        shutting = self.state is State.PENDING_SHUTDOWN
        return Heartbeat(
            BrokerHeartbeat(
                self.broker_id,
                self.broker_epoch,
                metadata_offset,
                want_fence=False,
                want_shut_down=shutting,
            )
        )

    def begin_shutdown(self, now_ms: int) -> None:
        """SIGTERM: ask the controller to let this broker go, at the next send."""
        if self.state in (State.FENCED, State.RUNNING):
            self.state = State.PENDING_SHUTDOWN
            self._next_send_ms = now_ms
        elif self.state is State.REGISTERING:
            self.state = State.SHUT_DOWN  # never registered: nothing to hand over

    def on_registered(self, epoch: int, now_ms: int) -> None:
        self._in_flight = False
        self._failures = 0
        self.broker_epoch = epoch
        if self.state is State.REGISTERING:
            self.state = State.FENCED
        self._next_send_ms = now_ms  # the first heartbeat at once: it may unfence

    def on_heartbeat(self, reply: HeartbeatReply, now_ms: int) -> None:
        self._in_flight = False
        self._failures = 0
        self.caught_up = reply.is_caught_up
        self._next_send_ms = now_ms + self.heartbeat_interval_ms
        if self.state is State.PENDING_SHUTDOWN:
            if reply.should_shut_down:
                self.state = State.SHUT_DOWN
            else:
                self._next_send_ms = now_ms + self._backoff_ms(grow=False)
            return
        self.state = State.FENCED if reply.is_fenced else State.RUNNING
        if reply.is_fenced and not reply.is_caught_up:
            # catching up with the metadata log: ask again soon, not a whole interval on
            self._next_send_ms = now_ms + MIN_RETRY_BACKOFF_MS

    def on_error(self, code: str, now_ms: int) -> None:
        """A refusal (error code) or a transport failure (REQUEST_TIMED_OUT ...)."""
        self._in_flight = False
        if code in ("STALE_BROKER_EPOCH", "BROKER_ID_NOT_REGISTERED"):
            if self.state is State.PENDING_SHUTDOWN:
                self.state = State.SHUT_DOWN  # no registration left to shut down
                return
            self.state = State.REGISTERING
            self.broker_epoch = -1
            self._next_send_ms = now_ms
            return
        self._next_send_ms = now_ms + self._backoff_ms(grow=True)

    def _backoff_ms(self, *, grow: bool) -> int:
        if grow:
            self._failures += 1
        steps = max(self._failures - 1, 0)
        return min(MIN_RETRY_BACKOFF_MS << min(steps, 16), max(self.heartbeat_interval_ms, 1))


class LifecycleTransport(Protocol):
    async def register(self, request: BrokerRegistration) -> int:
        """The broker epoch; raises ControllerError."""
        ...

    async def heartbeat(self, request: BrokerHeartbeat) -> HeartbeatReply:
        """Raises ControllerError."""
        ...

    async def close(self) -> None: ...


class LocalLifecycleTransport:
    """The zero-config node: its own controller, in-process (no controller listener)."""

    def __init__(self, controller: Callable[[], Controller]) -> None:
        self._controller = controller

    async def register(self, request: BrokerRegistration) -> int:
        return await self._controller().register_broker(request)

    async def heartbeat(self, request: BrokerHeartbeat) -> HeartbeatReply:
        return await self._controller().broker_heartbeat(request)

    async def close(self) -> None:
        return None


class RemoteLifecycleTransport:
    """Kafka's BrokerRegistration / BrokerHeartbeat to the active controller."""

    def __init__(
        self,
        client: ControllerClient,
        cluster_id: str,
        heartbeat_timeout_s: float,
        protocols: Mapping[str, str],
    ) -> None:
        self._client = client
        self._cluster_id = cluster_id
        self._heartbeat_timeout_s = heartbeat_timeout_s
        self._protocols = protocols  # listener name -> security protocol name

    async def register(self, request: BrokerRegistration) -> int:
        def build(version: int) -> Any:
            module = _request_module(BROKER_REGISTRATION_KEY, version)
            return make(
                module.BrokerRegistrationRequest,
                broker_id=request.broker_id,
                cluster_id=self._cluster_id,
                incarnation_id=uuid.UUID(request.incarnation_id),
                listeners=tuple(
                    make(
                        module.Listener,
                        name=name,
                        host=host,
                        port=port,
                        security_protocol=SECURITY_PROTOCOLS.get(
                            self._protocols.get(name.upper(), "PLAINTEXT"), 0
                        ),
                    )
                    for name, host, port in request.endpoints
                ),
                features=tuple(
                    make(
                        module.Feature,
                        name=name,
                        min_supported_version=low,
                        max_supported_version=high,
                    )
                    for name, low, high in request.features
                ),
                rack=request.rack,
                log_dirs=tuple(uuid.UUID(d) for d in request.log_dirs),
            )

        response = await self._client.send(
            BROKER_REGISTRATION_KEY, build, timeout_s=REGISTRATION_TIMEOUT_S
        )
        _raise_for(response.error_code)
        return int(response.broker_epoch)

    async def heartbeat(self, request: BrokerHeartbeat) -> HeartbeatReply:
        def build(version: int) -> Any:
            module = _request_module(BROKER_HEARTBEAT_KEY, version)
            return make(
                module.BrokerHeartbeatRequest,
                broker_id=request.broker_id,
                broker_epoch=request.broker_epoch,
                current_metadata_offset=request.current_metadata_offset,
                want_fence=request.want_fence,
                want_shut_down=request.want_shut_down,
            )

        # A heartbeat is harmless to repeat: half its time per controller asked, so one
        # that went silent (it lost the leadership with this request in flight) leaves
        # the other half to the new one — a controlled shutdown has ~1 s in all.
        response = await self._client.send(
            BROKER_HEARTBEAT_KEY,
            build,
            timeout_s=self._heartbeat_timeout_s,
            attempt_timeout_s=self._heartbeat_timeout_s / 2,
        )
        _raise_for(response.error_code)
        return HeartbeatReply(
            bool(response.is_caught_up),
            bool(response.is_fenced),
            bool(response.should_shut_down),
        )

    async def close(self) -> None:
        await self._client.close()


def _request_module(api_key: int, version: int) -> Any:
    return load_payload_module(api_key, version, EntityType.request)


def _raise_for(code: ErrorCode) -> None:
    if code != ErrorCode.none:
        raise ControllerError(code.name.upper(), f"the controller answered {code.name}")


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class BrokerLifecycleManager:
    """The asyncio loop around ``BrokerLifecycle`` (module doc)."""

    def __init__(
        self,
        core: BrokerLifecycle,
        transport: LifecycleTransport,
        metadata_offset: Callable[[], int],
        *,
        clock_ms: Callable[[], int] = _monotonic_ms,
    ) -> None:
        self.core = core
        self._transport = transport
        self._metadata_offset = metadata_offset
        self._clock_ms = clock_ms
        self._wake = asyncio.Event()
        self._changed = asyncio.Event()  # any answer: waiters re-check the state
        self._task: asyncio.Task[None] | None = None
        self._last_error: str | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def wait_unfenced(self) -> None:
        """Until the controller has unfenced this broker (start-up waits for it)."""
        await self._wait_for(lambda: self.core.unfenced)

    async def _wait_for(self, condition: Callable[[], bool]) -> None:
        """Until ``condition()`` holds after an answer; the loop's failure is raised."""
        task = self._task
        assert task is not None, "start() first"
        while not condition():
            if task.done():
                task.result()  # a bug in the loop: raise it here, not hang
                raise RuntimeError("the broker lifecycle loop ended")
            self._changed.clear()
            changed = asyncio.ensure_future(self._changed.wait())
            try:
                await asyncio.wait({task, changed}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                changed.cancel()

    async def controlled_shutdown(self, timeout_s: float) -> bool:
        """Ask to shut down and wait up to ``timeout_s`` for the controller's yes."""
        self.core.begin_shutdown(self._clock_ms())
        self._wake.set()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._wait_for(lambda: self.core.state is State.SHUT_DOWN)
        return self.core.state is State.SHUT_DOWN

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        await self._transport.close()

    async def _run(self) -> None:
        core = self.core
        while True:
            now = self._clock_ms()
            action = core.poll(now, self._metadata_offset())
            if action is None:
                due = core.next_send_ms()
                if due is None:
                    return
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(due - now, 0) / 1000):
                        await self._wake.wait()
                continue
            before = core.state
            try:
                if isinstance(action, Register):
                    epoch = await self._transport.register(action.request)
                    core.on_registered(epoch, self._clock_ms())
                    logger.info("broker %d registered with broker epoch %d", core.broker_id, epoch)
                else:
                    reply = await self._transport.heartbeat(action.request)
                    core.on_heartbeat(reply, self._clock_ms())
                self._last_error = None
            except ControllerError as error:
                core.on_error(error.code, self._clock_ms())
                if error.code != self._last_error:  # one line per kind of trouble
                    logger.info(
                        "broker %d: %s failed: %s (%s); retrying",
                        core.broker_id,
                        "registration" if isinstance(action, Register) else "heartbeat",
                        error.code,
                        error,
                    )
                self._last_error = error.code
            if core.state is not before:
                logger.info(
                    "broker %d is %s (broker epoch %d)",
                    core.broker_id,
                    core.state.value,
                    core.broker_epoch,
                )
            self._changed.set()


def new_incarnation_id() -> str:
    return str(uuid.uuid4())


def broker_registration(
    config: BrokerConfig, incarnation_id: str, endpoints: Sequence[tuple[str, str, int]]
) -> BrokerRegistration:
    """This broker's registration: its advertised broker listeners, rack and the
    ``directory.id`` of each log dir (meta.properties, checked at start-up)."""
    log_dirs = []
    for log_dir in config.log_dirs:
        directory_id = read_meta_properties(log_dir).get("directory.id")
        if directory_id:  # version 0 files have none
            log_dirs.append(str(uuid.UUID(bytes=parse_uuid(directory_id))))
    return BrokerRegistration(
        config.node_id,
        incarnation_id,
        tuple(endpoints),
        config["broker.rack"],
        (),  # no feature levels yet (ApiVersions finalizes none either)
        tuple(log_dirs),
    )


def lifecycle_manager(
    config: BrokerConfig,
    cluster_id: str,
    voters: Sequence[VoterAddress],
    registration: BrokerRegistration,
    leader_id: Callable[[], int | None],
    controller: Callable[[], Controller],
    metadata_offset: Callable[[], int],
) -> BrokerLifecycleManager:
    """The manager ``broker.py`` starts: remote to the voters' controller listeners when
    a quorum is configured, else the zero-config node's in-process controller."""
    interval_ms = config["broker.heartbeat.interval.ms"]
    transport: LifecycleTransport
    if config.quorum_voters:
        client = ControllerClient(
            voters,
            leader_id,
            connector(
                client_id=f"broker-{config.node_id}",
                versions=VERSIONS,
                ssl_context=config.controller_ssl_context,
                sasl=config.controller_sasl,
            ),
            retry_backoff_s=config["controller.quorum.retry.backoff.ms"] / 1000,
        )
        transport = RemoteLifecycleTransport(
            client, cluster_id, max(interval_ms, 1000) / 1000, config.protocol_map
        )
    else:
        transport = LocalLifecycleTransport(controller)
    return BrokerLifecycleManager(
        BrokerLifecycle(registration, interval_ms), transport, metadata_offset
    )


__all__ = [
    "BrokerLifecycle",
    "BrokerLifecycleManager",
    "LifecycleTransport",
    "LocalLifecycleTransport",
    "RemoteLifecycleTransport",
    "State",
    "broker_registration",
    "lifecycle_manager",
    "new_incarnation_id",
]
