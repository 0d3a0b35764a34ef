"""ControllerClient: one kio request to the active controller, retried until it gets there.

How this works and why: a broker that is asked to change metadata (CreateTopics,
DeleteTopics, CreatePartitions, config changes, producer-id blocks) forwards the
change to the active controller, as Kafka's brokers do (its ``ForwardingManager`` and
``NodeToControllerChannelManager``). This module is that transport and nothing more:
which request and how to read its answer are the caller's (``controller_rpc.py``).

- Where to send: the leader source, an injected ``() -> int | None`` — the local
  ``RaftDriver.leader_id`` on a node that runs the quorum, the leader learnt from the
  replicated metadata log on a broker-only node. The leader is one of
  ``controller.quorum.voters``, whose addresses are the controller listeners. When no
  leader is known, or the one named has just failed us (or went silent earlier in
  the same request), the voters are tried in turn:
  a voter that is not the leader answers NOT_CONTROLLER and the next one is asked.
- What counts as "try again": the leader unknown, the connection failing (connect,
  write, read, or no answer within the time left), and a response that says
  NOT_CONTROLLER (``is_not_controller`` decides; by default any ``error_code`` at the
  top level or in the first level of the response's arrays). Each retry waits
  ``controller.quorum.retry.backoff.ms`` first. Every other answer, errors included,
  goes back to the caller as it is.
- Until when: the request's own deadline (its ``timeout_ms``, given by the caller),
  else ``DEFAULT_TIMEOUT_S``; then ControllerError REQUEST_TIMED_OUT. A request is
  sent with the whole time left as its response timeout, so a controller that is slow
  to commit is not cut off and asked twice — unless the caller gives an
  ``attempt_timeout_s``: a request that is harmless to repeat (a broker heartbeat)
  then gives up on a silent controller after that long and asks the next one, so a
  stale leader that neither answers nor refuses (one that lost its leadership with
  the request in flight) cannot take the whole deadline from the new one; a voter
  that went silent is not asked again in the same request while another may be. A
  change that was applied but whose answer was lost is sent again (Kafka's
  forwarding does the same); the controller then answers as to a repeat
  (TOPIC_ALREADY_EXISTS and the like).
- Versions: one connection per voter, kept and reused; ``BrokerConnection`` sends
  ApiVersions once when it connects, and each request is built by the caller at the
  highest version both sides know (``build(version)``). A controller that knows no
  common version fails the call at once with UNSUPPORTED_VERSION.

Sockets, clock and sleep are injected (``connect``, ``clock``, ``sleep``) so the
retry rules are tested without a network; the default ``connect`` opens a
``BrokerConnection`` from ``odradek.client._core.connection``, as ``raft/driver.py`` does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Set
from typing import TYPE_CHECKING, Any, Final, Protocol

from kio.schema.errors import ErrorCode

from odradek.client._core.connection import (
    API_VERSIONS_KEY,
    BrokerAddress,
    BrokerConnection,
    KafkaConnectionError,
    RequestTimedOut,
    UnsupportedVersionError,
)
from odradek.metadata.errors import ControllerError

if TYPE_CHECKING:
    from odradek.client._core.sasl import SaslCredentials

logger = logging.getLogger("odradek.metadata.controller_client")

# How long a forwarded request keeps trying when the caller names no timeout (Kafka's
# request.timeout.ms default is 30 s).
DEFAULT_TIMEOUT_S: Final = 30.0
# The pause before a retry when none is configured (controller.quorum.retry.backoff.ms'
# default is 20 ms).
DEFAULT_RETRY_BACKOFF_S: Final = 0.02
# How long connecting (TCP plus the ApiVersions handshake) may take at most, when the
# deadline leaves more (controller.quorum.request.timeout.ms' default).
DEFAULT_CONNECT_TIMEOUT_S: Final = 2.0


class VoterAddress(Protocol):
    """One entry of controller.quorum.voters (``server.config.QuorumVoter`` fits)."""

    @property
    def node_id(self) -> int: ...
    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...


class Connection(Protocol):
    """What the client needs of a connection (``BrokerConnection`` fits)."""

    closed: bool

    def version_for(self, api_key: int) -> int: ...

    async def send(
        self, request: Any, *, expect_response: bool = True, timeout_s: float | None = None
    ) -> Any: ...

    async def close(self) -> None: ...


Connect = Callable[[VoterAddress, float], Awaitable[Connection]]
LeaderSource = Callable[[], "int | None"]


def connector(
    *,
    client_id: str,
    versions: Mapping[int, tuple[int, int]],
    ssl_context: ssl.SSLContext | None = None,
    sasl: SaslCredentials | None = None,
) -> Connect:
    """The default ``connect``: a ``BrokerConnection`` that knows ``versions`` (plus
    ApiVersions) and has negotiated with the controller listener (over TLS with
    ``ssl_context``: a TLS controller listener), logged in with ``sasl`` on a SASL
    controller listener."""
    client_versions = dict(versions)
    client_versions.setdefault(API_VERSIONS_KEY, (0, 3))

    async def connect(voter: VoterAddress, timeout_s: float) -> Connection:
        connection = BrokerConnection(
            BrokerAddress(voter.node_id, voter.host, voter.port),
            client_id=client_id,
            request_timeout_s=timeout_s,
            client_versions=client_versions,
            ssl_context=ssl_context,
            sasl=sasl,
        )
        await connection.connect()
        return connection

    return connect


def not_controller_anywhere(response: Any) -> bool:
    """NOT_CONTROLLER at the response's top level or in an item of one of its arrays
    (CreateTopics and the like answer per topic)."""
    if getattr(response, "error_code", None) == ErrorCode.not_controller:
        return True
    for name in getattr(response, "__dataclass_fields__", ()):
        value = getattr(response, name)
        if isinstance(value, tuple):
            for item in value:
                if getattr(item, "error_code", None) == ErrorCode.not_controller:
                    return True
    return False


def _read_outcome(attempt: asyncio.Future[Any]) -> None:
    if not attempt.cancelled():
        attempt.exception()


class ControllerClient:
    def __init__(
        self,
        voters: Iterable[VoterAddress],
        leader_id: LeaderSource,
        connect: Connect,
        *,
        retry_backoff_s: float = DEFAULT_RETRY_BACKOFF_S,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        self._voters = {v.node_id: v for v in voters}
        self._order = list(self._voters)
        if not self._order:
            raise ValueError("a controller client needs controller.quorum.voters")
        self._leader_id = leader_id
        self._connect = connect
        self._retry_backoff_s = retry_backoff_s
        self._connect_timeout_s = connect_timeout_s
        self._clock = clock
        self._sleep = sleep
        self._connections: dict[int, Connection] = {}
        self._connecting: dict[int, asyncio.Lock] = {}
        self._next_voter = 0
        self._closed = False

    async def send(
        self,
        api_key: int,
        build: Callable[[int], Any],
        *,
        timeout_s: float | None = None,
        attempt_timeout_s: float | None = None,
        is_not_controller: Callable[[Any], bool] = not_controller_anywhere,
    ) -> Any:
        """The active controller's response to ``build(version)``; see the module doc
        for what is retried (and ``attempt_timeout_s``). Raises ControllerError
        REQUEST_TIMED_OUT past the deadline and UNSUPPORTED_VERSION when the
        controller does not know the API."""
        deadline = self._clock() + (DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s)
        failed: int | None = None
        silent: set[int] = set()  # timed out in this send: not asked again while others may
        last_problem = "no controller tried"
        first = True
        while True:
            if not first:
                left = deadline - self._clock()
                if left <= 0:
                    break
                await self._sleep(min(self._retry_backoff_s, left))
            first = False
            if self._closed:
                raise ControllerError("REQUEST_TIMED_OUT", "the controller client is closed")
            left = deadline - self._clock()
            if left <= 0:
                break
            target = self._target(failed, silent)
            try:
                connection = await self._connection(target, left)
                version = connection.version_for(api_key)
                left = deadline - self._clock()
                if left <= 0:
                    break
                if attempt_timeout_s is not None:
                    left = min(left, attempt_timeout_s)
                response = await connection.send(build(version), timeout_s=left)
            except UnsupportedVersionError as error:
                raise ControllerError("UNSUPPORTED_VERSION", str(error)) from None
            except (KafkaConnectionError, OSError, TimeoutError) as error:
                last_problem = f"controller {target}: {error}"
                logger.debug("forwarding to %s", last_problem)
                await self._drop(target)
                failed = target
                if isinstance(error, (RequestTimedOut, TimeoutError)):
                    silent.add(target)
                continue
            if is_not_controller(response):
                last_problem = f"node {target} is not the active controller"
                failed = target
                continue
            return response
        raise ControllerError(
            "REQUEST_TIMED_OUT", f"no active controller answered in time ({last_problem})"
        )

    async def set_address(self, voter: VoterAddress) -> None:
        """Reach ``voter.node_id`` at this address from now on. A node that is a voter
        itself points its own entry at the controller listener it actually bound
        (``port=0`` in ``listeners``, or a voters entry other processes reach through
        a name or proxy): forwarding to itself never depends on that entry."""
        if voter.node_id not in self._voters:
            raise ValueError(f"node {voter.node_id} is not one of the voters")
        self._voters[voter.node_id] = voter
        await self._drop(voter.node_id)

    def _target(self, failed: int | None, silent: Set[int] = frozenset()) -> int:
        """The leader the source names, unless it is the one that just failed us, one
        that went silent in this send (a stale leader the source still names), or
        unknown; then the next voter in turn, skipping those (the silent ones only while
        some voter has not been silent)."""
        avoid = set(silent) if len(silent) < len(self._order) else set()
        if failed is not None:
            avoid.add(failed)
        leader = self._leader_id()
        if leader is not None and leader in self._voters and leader not in avoid:
            return leader
        for _ in range(len(self._order)):
            candidate = self._order[self._next_voter % len(self._order)]
            self._next_voter += 1
            if candidate not in avoid or len(self._order) == 1:
                return candidate
        return self._order[(self._next_voter - 1) % len(self._order)]  # all avoided

    async def _connection(self, node_id: int, left_s: float) -> Connection:
        connection = self._connections.get(node_id)
        if connection is not None and not connection.closed:
            return connection
        lock = self._connecting.setdefault(node_id, asyncio.Lock())
        async with lock:
            connection = self._connections.get(node_id)
            if connection is not None and not connection.closed:
                return connection
            timeout = min(left_s, self._connect_timeout_s)
            attempt = asyncio.ensure_future(self._connect(self._voters[node_id], timeout))
            # Cancelled mid-handshake (shutdown), the attempt may still end in its own
            # error (3.11's wait_for lets a result that raced the cancel win): read it
            # here, else asyncio logs "Task exception was never retrieved".
            attempt.add_done_callback(_read_outcome)
            try:
                connection = await asyncio.wait_for(attempt, timeout)
            except TimeoutError:
                raise KafkaConnectionError(f"connecting took longer than {timeout:.3f} s") from None
            if self._closed:
                await connection.close()
                raise KafkaConnectionError("the controller client is closed")
            self._connections[node_id] = connection
            return connection

    async def _drop(self, node_id: int) -> None:
        connection = self._connections.pop(node_id, None)
        if connection is not None:
            with contextlib.suppress(Exception):
                await connection.close()

    async def close(self) -> None:
        self._closed = True
        for node_id in list(self._connections):
            await self._drop(node_id)


__all__ = [
    "DEFAULT_TIMEOUT_S",
    "Connect",
    "Connection",
    "ControllerClient",
    "LeaderSource",
    "VoterAddress",
    "connector",
    "not_controller_anywhere",
]
