"""The broker's SASL rules, request by request: the pre-authentication gate, the
handshake's answers, failures that leak nothing and are delayed, KIP-368 session
lifetimes and re-authentication."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from odradek.client._core.connection import (
    BrokerAddress,
    BrokerConnection,
    ConnectionLost,
    request_entity,
)
from odradek.client._core.sasl import SaslAuthenticationError, SaslCredentials, authenticate
from tests.security.conftest import FAILED_DELAY_MS, REAUTH_MS, USERS
from tests.support.broker import BrokerProcess

VERSIONS = {18: (0, 3), 3: (1, 12), 17: (0, 1), 36: (0, 2)}


async def connect(bootstrap: str, sasl: SaslCredentials | None = None) -> BrokerConnection:
    host, port = bootstrap.rsplit(":", 1)
    connection = BrokerConnection(
        BrokerAddress(-1, host, int(port)),
        client_id="sasl-test",
        request_timeout_s=10,
        client_versions=VERSIONS,
        sasl=sasl,
    )
    await connection.connect()
    return connection


def metadata() -> Any:
    return request_entity(
        3, 12, topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )


async def closed_by_broker(connection: BrokerConnection) -> bool:
    try:
        await connection.send(metadata(), timeout_s=5)
    except ConnectionLost:
        return True
    return False


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def test_requests_before_authentication_close_the_connection(
    sasl_broker: BrokerProcess, sasl_bootstrap: str
) -> None:
    async def scenario() -> None:
        connection = await connect(sasl_bootstrap)  # ApiVersions is served
        assert 17 in connection.broker_versions
        assert await closed_by_broker(connection)

    run(scenario())
    assert "Unexpected Kafka request of type 3 v12 during SASL handshake" in sasl_broker.log()


def test_handshake_answers(sasl_bootstrap: str) -> None:
    async def handshake(version: int, mechanism: str) -> tuple[Any, bool]:
        connection = await connect(sasl_bootstrap)
        response = await connection.send(request_entity(17, version, mechanism=mechanism))
        return response, await closed_by_broker(connection)

    async def scenario() -> None:
        response, closed = await handshake(1, "SCRAM-SHA-512")
        assert response.error_code.name == "none"
        assert response.mechanisms == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
        assert closed  # handshake done, not authenticated: Metadata still refused
        response, closed = await handshake(1, "GSSAPI")
        assert response.error_code.name == "unsupported_sasl_mechanism"
        assert response.mechanisms == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
        assert closed
        # The pre-KIP-152 flow (v0, then raw tokens) is refused plainly.
        response, closed = await handshake(0, "PLAIN")
        assert response.error_code.name == "unsupported_version"
        assert closed
        # SaslAuthenticate before any handshake.
        connection = await connect(sasl_bootstrap)
        early = await connection.send(request_entity(36, 2, auth_bytes=b"\0alice\0x"))
        assert early.error_code.name == "illegal_sasl_state"
        assert await closed_by_broker(connection)

    run(scenario())


def test_wrong_password_and_unknown_user_look_alike(
    sasl_broker: BrokerProcess, sasl_bootstrap: str
) -> None:
    async def failure(mechanism: str, user: str, password: str) -> tuple[str, float]:
        started = time.monotonic()
        with pytest.raises(SaslAuthenticationError) as caught:
            await connect(sasl_bootstrap, SaslCredentials(mechanism, user, password))
        return str(caught.value), time.monotonic() - started

    async def scenario() -> None:
        for mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
            wrong, wrong_s = await failure(mechanism, "alice", "not-her-password")
            unknown, unknown_s = await failure(mechanism, "mallory", "whatever")
            assert wrong == unknown, mechanism
            assert "Invalid username or password" in wrong
            assert min(wrong_s, unknown_s) >= FAILED_DELAY_MS / 1000 * 0.9

    run(scenario())
    log = sasl_broker.log()
    assert "failed authentication with 127.0.0.1:" in log
    assert "(mechanism SCRAM-SHA-256)" in log or "(mechanism PLAIN)" in log


def test_failure_delay_blocks_no_other_connection(sasl_bootstrap: str) -> None:
    async def scenario() -> None:
        good = await connect(sasl_bootstrap, SaslCredentials("PLAIN", "alice", USERS["alice"]))
        bad = asyncio.create_task(
            connect(sasl_bootstrap, SaslCredentials("PLAIN", "alice", "wrong"))
        )
        await asyncio.sleep(0.1)  # the failure is now being delayed
        started = time.monotonic()
        await good.send(metadata())
        assert time.monotonic() - started < FAILED_DELAY_MS / 1000 / 2
        with pytest.raises(SaslAuthenticationError):
            await bad
        await good.close()

    run(scenario())


def test_confluent_reports_authentication_failure(sasl_bootstrap: str) -> None:
    import confluent_kafka

    messages = {}
    for user, password in (("alice", "wrong"), ("nobody", "wrong")):
        errors: list[Any] = []
        producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": sasl_bootstrap,
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-256",
                "sasl.username": user,
                "sasl.password": password,
                "error_cb": errors.append,
            }
        )
        deadline = time.monotonic() + 10
        while not errors and time.monotonic() < deadline:
            producer.poll(0.2)
        assert errors and errors[0].code() == confluent_kafka.KafkaError._AUTHENTICATION
        text = errors[0].str()
        messages[user] = text[text.index("SASL authentication error") : text.index(" (after")]
        del producer
    assert messages["alice"] == messages["nobody"]


def test_odradek_client_reports_authentication_failure(sasl_bootstrap: str) -> None:
    from odradek.client import KafkaError, Producer

    errors: list[Any] = []
    producer = Producer(
        {
            "bootstrap.servers": sasl_bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "alice",
            "sasl.password": "wrong",
            "error_cb": errors.append,
        }
    )
    try:
        deadline = time.monotonic() + 10
        while not errors and time.monotonic() < deadline:
            producer.poll(0.2)
    finally:
        producer.close(1)
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION
    assert "Invalid username or password" in errors[0].str()


def test_session_expires_without_reauthentication(reauth_bootstrap: str) -> None:
    async def scenario() -> None:
        credentials = SaslCredentials("SCRAM-SHA-256", "alice", USERS["alice"])
        connection = await connect(reauth_bootstrap, credentials)
        assert connection.session_lifetime_ms == REAUTH_MS
        connection._reauth_at = None  # this client does not re-authenticate on its own
        assert not await closed_by_broker(connection)
        await asyncio.sleep(REAUTH_MS / 1000 + 0.3)
        assert await closed_by_broker(connection)

    run(scenario())


def test_reauthentication_extends_the_session_and_keeps_the_principal(
    reauth_bootstrap: str,
) -> None:
    async def scenario() -> None:
        alice = SaslCredentials("PLAIN", "alice", USERS["alice"])
        connection = await connect(reauth_bootstrap, alice)
        for _ in range(3):  # past several lifetimes, re-authenticating in time
            await asyncio.sleep(REAUTH_MS / 1000 * 0.6)
            assert await authenticate(connection, alice) == REAUTH_MS
            assert not await closed_by_broker(connection)
        # Re-authenticating as someone else is refused, and the connection closed.
        admin = SaslCredentials("PLAIN", "admin", USERS["admin"])
        with pytest.raises(SaslAuthenticationError, match="Cannot change principals"):
            await authenticate(connection, admin)
        assert await closed_by_broker(connection)
        # ... so is a change of mechanism.
        connection = await connect(reauth_bootstrap, alice)
        scram = SaslCredentials("SCRAM-SHA-256", "alice", USERS["alice"])
        with pytest.raises(SaslAuthenticationError, match="UNSUPPORTED_SASL_MECHANISM"):
            await authenticate(connection, scram)

    run(scenario())


def test_librdkafka_reauthenticates_past_several_lifetimes(
    sasl_broker: BrokerProcess, reauth_bootstrap: str, topic_name: str
) -> None:
    import confluent_kafka

    conf = {
        "bootstrap.servers": reauth_bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": USERS["alice"],
    }
    log_start = len(sasl_broker.log())
    producer = confluent_kafka.Producer(conf)
    consumer = confluent_kafka.Consumer(
        {**conf, "group.id": f"g-{topic_name}", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic_name])
    received: list[bytes] = []
    sent = 0
    try:
        deadline = time.monotonic() + REAUTH_MS / 1000 * 4
        while time.monotonic() < deadline:
            producer.produce(topic_name, f"r-{sent}".encode())
            producer.poll(0)
            sent += 1
            message = consumer.poll(0.3)
            if message is not None and message.error() is None:
                received.append(message.value())
        assert producer.flush(10) == 0
        final = time.monotonic() + 15
        while len(received) < sent and time.monotonic() < final:
            message = consumer.poll(0.3)
            if message is not None and message.error() is None:
                received.append(message.value())
    finally:
        consumer.close()
    assert received == [f"r-{i}".encode() for i in range(sent)]
    added = sasl_broker.log()[log_start:]
    # librdkafka re-authenticated each connection in time: the broker never had to
    # close one for an expired session.
    assert "expired (connections.max.reauth.ms)" not in added


def test_odradek_client_reauthenticates_past_several_lifetimes(
    sasl_broker: BrokerProcess, reauth_bootstrap: str, topic_name: str
) -> None:
    from odradek.client import Consumer, Producer

    conf = {
        "bootstrap.servers": reauth_bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "alice",
        "sasl.password": USERS["alice"],
    }
    log_start = len(sasl_broker.log())
    producer = Producer(conf)
    consumer = Consumer({**conf, "group.id": f"g-{topic_name}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic_name])
    received: list[bytes] = []
    sent = 0
    try:
        deadline = time.monotonic() + REAUTH_MS / 1000 * 4
        while time.monotonic() < deadline:
            producer.produce(topic_name, f"o-{sent}".encode())
            producer.poll(0)
            sent += 1
            message = consumer.poll(0.3)
            if message is not None and message.error() is None:
                received.append(message.value())
        assert producer.flush(10) == 0
        final = time.monotonic() + 15
        while len(received) < sent and time.monotonic() < final:
            message = consumer.poll(0.3)
            if message is not None and message.error() is None:
                received.append(message.value())
    finally:
        consumer.close()
    assert received == [f"o-{i}".encode() for i in range(sent)]
    assert "expired (connections.max.reauth.ms)" not in sasl_broker.log()[log_start:]
