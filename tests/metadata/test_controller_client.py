"""ControllerClient: where a forwarded request goes, what is retried, and until when.

Driven with fake connections and a fake clock (``sleep`` advances it), so the rules
are checked without a network or real waiting: the leader source is followed; an
unknown or failed leader sends the request to the voters in turn; NOT_CONTROLLER,
a refused connection and a lost connection are retried after the backoff; any other
error is the caller's; the deadline ends it with REQUEST_TIMED_OUT; versions are the
connection's; connections are kept. One test runs over a real socket.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest
from kio.schema.create_topics.v7.response import CreatableTopicResult, CreateTopicsResponse
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta

from odradek.client._core.connection import ConnectionLost, KafkaConnectionError, RequestTimedOut
from odradek.metadata.controller_client import (
    ControllerClient,
    VoterAddress,
    connector,
    not_controller_anywhere,
)
from odradek.metadata.errors import ControllerError

T = TypeVar("T")


@dataclass(frozen=True)
class Voter:
    node_id: int
    host: str = "127.0.0.1"
    port: int = 1


@dataclass(frozen=True)
class Answer:
    error_code: ErrorCode = ErrorCode.none
    node: int = -1


@dataclass
class FakeConnection:
    node_id: int
    network: Network
    closed: bool = False
    sent: list[tuple[Any, float | None]] = field(default_factory=list)

    def version_for(self, api_key: int) -> int:
        return self.network.versions.get(self.node_id, 3)

    async def send(
        self, request: Any, *, expect_response: bool = True, timeout_s: float | None = None
    ) -> Any:
        self.sent.append((request, timeout_s))
        self.network.log.append(self.node_id)
        behaviour = self.network.behaviour.get(self.node_id, "leader")
        if "," in behaviour:  # one per request, the last one for good
            behaviour, rest = behaviour.split(",", 1)
            self.network.behaviour[self.node_id] = rest
        if behaviour == "lost":
            self.closed = True
            raise ConnectionLost("connection lost")
        if behaviour == "silent":  # no answer: the response timeout runs out
            self.network.now += timeout_s or 0.0
            self.closed = True  # as BrokerConnection does
            raise RequestTimedOut("request timed out")
        if behaviour == "follower":
            return Answer(ErrorCode.not_controller, self.node_id)
        if behaviour == "error":
            return Answer(ErrorCode.invalid_request, self.node_id)
        return Answer(ErrorCode.none, self.node_id)

    async def close(self) -> None:
        self.closed = True


class Network:
    """Voters by node id: how each behaves ("leader", "follower", "lost", "down",
    "silent")."""

    def __init__(self, **behaviour: str) -> None:
        self.behaviour = {int(k.removeprefix("n")): v for k, v in behaviour.items()}
        self.versions: dict[int, int] = {}
        self.log: list[int] = []  # node ids in the order requests reached them
        self.connects: list[int] = []
        self.connections: list[FakeConnection] = []
        self.now = 0.0
        self.sleeps: list[float] = []

    async def connect(self, voter: VoterAddress, timeout_s: float) -> FakeConnection:
        self.connects.append(voter.node_id)
        if self.behaviour.get(voter.node_id) == "down":
            raise KafkaConnectionError(f"cannot connect to node {voter.node_id}")
        connection = FakeConnection(voter.node_id, self)
        self.connections.append(connection)
        return connection

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def client(
        self, leader: Callable[[], int | None], voters: tuple[int, ...] = (1, 2, 3)
    ) -> ControllerClient:
        return ControllerClient(
            [Voter(v) for v in voters],
            leader,
            self.connect,
            retry_backoff_s=0.05,
            clock=self.clock,
            sleep=self.sleep,
        )


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coroutine)


def send(client: ControllerClient, timeout_s: float | None = 5.0) -> Any:
    async def go() -> Any:
        try:
            return await client.send(7, lambda version: ("request", version), timeout_s=timeout_s)
        finally:
            await client.close()

    return run(go())


def test_the_leader_named_by_the_source_gets_the_request_at_its_version() -> None:
    network = Network(n1="follower", n2="leader", n3="follower")
    network.versions[2] = 5
    client = network.client(lambda: 2)
    answer = send(client)
    assert answer.node == 2
    assert network.log == [2]
    assert network.connections[0].sent[0][0] == ("request", 5)
    assert network.sleeps == []


def test_the_whole_time_left_is_the_response_timeout() -> None:
    network = Network(n1="leader")
    send(network.client(lambda: 1), timeout_s=7.5)
    assert network.connections[0].sent[0][1] == pytest.approx(7.5)


def test_an_unknown_leader_means_the_voters_in_turn_until_one_is_the_controller() -> None:
    network = Network(n1="follower", n2="follower", n3="leader")
    answer = send(network.client(lambda: None))
    assert answer.node == 3
    assert network.log == [1, 2, 3]
    assert network.sleeps == [0.05, 0.05]  # the backoff before each retry


def test_a_stale_leader_is_retried_after_another_voter_and_the_source_is_asked_again() -> None:
    network = Network(n1="follower", n2="follower", n3="leader")
    named = iter([1, 1, 1, 3])  # the source learns of the new leader on the fourth try
    answer = send(network.client(lambda: next(named)))
    assert answer.node == 3
    # 1 said NOT_CONTROLLER; the next voter other than 1 (2) next; back to 1 as named;
    # then the source names 3.
    assert network.log == [1, 2, 1, 3]


def test_a_silent_stale_leader_is_given_up_after_the_attempt_timeout() -> None:
    # The named leader lost its leadership with the request in flight and never
    # answers; the source has not learnt of the new one yet.
    network = Network(n1="silent", n2="follower", n3="leader")
    named = iter([1, 1, 1])

    async def go(attempt_timeout_s: float | None) -> Any:
        client = network.client(lambda: next(named, 3))
        try:
            return await client.send(
                7, lambda v: ("heartbeat", v), timeout_s=1.0, attempt_timeout_s=attempt_timeout_s
            )
        finally:
            await client.close()

    answer = run(go(0.5))
    assert answer.node == 3
    assert network.connections[0].sent[0][1] == pytest.approx(0.5)  # half, not all 1 s
    # 1 silent (dropped, not asked again in this send though still named), 2 NOT_CONTROLLER
    assert network.log == [1, 2, 3]
    assert network.now == pytest.approx(0.6)  # 0.5 + two backoffs
    # Without it, the silent one takes the whole deadline.
    network.now, named = 0.0, iter([1, 1, 1])
    with pytest.raises(ControllerError) as timed_out:
        run(go(None))
    assert timed_out.value.code == "REQUEST_TIMED_OUT"


def test_a_controller_that_cannot_be_reached_is_skipped_and_dropped() -> None:
    network = Network(n1="down", n2="leader")
    leader = [1]
    answer = send(network.client(lambda: leader[0]))
    assert answer.node == 2
    assert network.connects == [1, 2]


def test_a_lost_connection_is_replaced_on_the_next_try() -> None:
    network = Network(n1="lost,leader")
    answer = send(network.client(lambda: 1, voters=(1,)))
    assert answer.node == 1
    assert network.connects == [1, 1]
    assert network.connections[0].closed


def test_other_errors_are_the_callers_not_retried() -> None:
    network = Network(n1="error")
    answer = send(network.client(lambda: 1))
    assert answer.error_code == ErrorCode.invalid_request
    assert network.log == [1]


def test_no_controller_before_the_deadline_is_request_timed_out() -> None:
    network = Network(n1="follower", n2="down", n3="follower")
    with pytest.raises(ControllerError) as raised:
        send(network.client(lambda: None), timeout_s=1.0)
    assert raised.value.code == "REQUEST_TIMED_OUT"
    assert network.now == pytest.approx(1.0)
    assert len(network.sleeps) == pytest.approx(20, abs=1)  # 1 s of 50 ms backoffs
    assert set(network.log) == {1, 3}


def test_no_timeout_given_means_the_default_deadline() -> None:
    network = Network(n1="down")
    with pytest.raises(ControllerError) as raised:
        send(network.client(lambda: 1, voters=(1,)), timeout_s=None)
    assert raised.value.code == "REQUEST_TIMED_OUT"
    assert network.now == pytest.approx(30.0)


def test_a_controller_without_the_api_fails_at_once() -> None:
    from odradek.client._core.connection import UnsupportedVersionError

    network = Network(n1="leader")

    def unsupported(api_key: int) -> int:
        raise UnsupportedVersionError("broker does not support API key 7")

    async def go() -> None:
        client = network.client(lambda: 1)
        connection = await network.connect(Voter(1), 1.0)
        connection.version_for = unsupported  # type: ignore[method-assign]
        client._connections[1] = connection
        await client.send(7, lambda v: v, timeout_s=1.0)

    with pytest.raises(ControllerError) as raised:
        run(go())
    assert raised.value.code == "UNSUPPORTED_VERSION"
    assert network.sleeps == []


def test_connections_are_kept_for_the_next_request() -> None:
    network = Network(n1="leader")
    client = network.client(lambda: 1)

    async def go() -> None:
        for _ in range(3):
            await client.send(7, lambda v: v, timeout_s=1.0)
        await client.close()

    run(go())
    assert network.connects == [1]
    assert network.connections[0].closed  # closed with the client


def test_not_controller_is_found_per_item_too() -> None:
    def result(code: ErrorCode) -> CreatableTopicResult:
        return CreatableTopicResult(
            name="t",
            topic_id=None,
            error_code=code,
            error_message=None,
            topic_config_error_code=ErrorCode.none,
            num_partitions=-1,
            replication_factor=-1,
            configs=None,
        )

    def response(*codes: ErrorCode) -> CreateTopicsResponse:
        return CreateTopicsResponse(
            throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
            topics=tuple(result(c) for c in codes),
        )

    assert not_controller_anywhere(response(ErrorCode.none, ErrorCode.not_controller))
    assert not not_controller_anywhere(response(ErrorCode.none, ErrorCode.topic_already_exists))
    assert not_controller_anywhere(Answer(ErrorCode.not_controller))
    assert not not_controller_anywhere(Answer(ErrorCode.none))


def test_over_a_real_socket_a_refused_port_is_retried_until_the_deadline() -> None:
    """The default connector against a port nothing listens on: refused, retried, timed out."""

    async def go() -> None:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        client = ControllerClient(
            [Voter(1, "127.0.0.1", port)],
            lambda: 1,
            connector(client_id="test", versions={7: (0, 7)}),
            retry_backoff_s=0.05,
        )
        try:
            await client.send(7, lambda v: v, timeout_s=0.5)
        finally:
            await client.close()

    with pytest.raises(ControllerError) as raised:
        run(go())
    assert raised.value.code == "REQUEST_TIMED_OUT"
    assert "cannot connect" in str(raised.value)


def test_a_voter_can_be_pointed_at_another_address() -> None:
    """A node's own entry is moved to the controller listener it bound; the connection
    to the old address is dropped and the next request connects to the new one."""
    network = Network(n1="leader")
    addresses: list[tuple[str, int]] = []
    connect = network.connect

    async def recording(voter: VoterAddress, timeout_s: float) -> FakeConnection:
        addresses.append((voter.host, voter.port))
        return await connect(voter, timeout_s)

    client = ControllerClient(
        [Voter(1, "localhost", 9093)],
        lambda: 1,
        recording,
        clock=network.clock,
        sleep=network.sleep,
    )

    async def go() -> None:
        await client.send(7, lambda v: v, timeout_s=1.0)
        await client.set_address(Voter(1, "127.0.0.1", 40000))
        await client.send(7, lambda v: v, timeout_s=1.0)
        with pytest.raises(ValueError):
            await client.set_address(Voter(9, "127.0.0.1", 1))
        await client.close()

    run(go())
    assert addresses == [("localhost", 9093), ("127.0.0.1", 40000)]
    assert network.connections[0].closed


def test_a_connect_that_ends_in_its_own_error_after_a_cancel_is_not_logged_as_unretrieved() -> None:
    """Cancelled mid-handshake (a shutdown), a connect attempt can still end in its own
    error — Python 3.11's wait_for lets a result that raced the cancel win. Nobody awaits
    that attempt any more; the client reads its outcome so asyncio does not log "Task
    exception was never retrieved" (seen in a chaos run's broker log)."""
    import gc

    unretrieved: list[dict[str, Any]] = []

    async def connect(voter: VoterAddress, timeout_s: float) -> FakeConnection:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            raise ConnectionLost("connection closed by the broker") from None
        raise AssertionError("not reached")

    async def go() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _, ctx: unretrieved.append(ctx))
        client = ControllerClient([Voter(1)], lambda: 1, connect)
        sending = asyncio.create_task(client.send(7, lambda v: v, timeout_s=30.0))
        await started.wait()
        sending.cancel()
        with pytest.raises(asyncio.CancelledError):
            await sending
        for _ in range(3):
            await asyncio.sleep(0)
        gc.collect()

    started = asyncio.Event()
    asyncio.run(go())
    assert unretrieved == []
