"""odradek's own client over SASL/OAUTHBEARER (client/_core/oauth.py), against the
broker of tests/security/test_oauthbearer_broker.py (an UNSECURED listener requiring
the scope ``kafka``, a SIGNED one checking RS256 tokens against a JWKS): librdkafka's
face (``enable.sasl.oauthbearer.unsecure.jwt`` + ``sasl.oauthbearer.config``),
confluent-kafka's ``oauth_cb``, and aiokafka's ``sasl_oauth_token_provider``; refused
tokens; the token refreshed by KIP-368 re-authentication; and the exchange itself
checked against the broker's own parser and validator without a broker."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from typing import Any

import pytest

from odradek.client._core.oauth import (
    CallbackTokens,
    OAuthBearerClient,
    OAuthToken,
    UnsecuredJwt,
    client_first_message,
)
from odradek.security.jwt import ClaimRules, b64url_decode, validate_unsecured
from odradek.security.oauthbearer import parse_client_first
from tests.security import test_oauthbearer_broker as oauth_broker
from tests.security.test_oauthbearer_broker import Provider
from tests.support.broker import BrokerProcess

# That module's broker (its UNSECURED and SIGNED listeners) and identity provider.
broker = oauth_broker.broker
provider = oauth_broker.provider

COUNT = 5


def topic() -> str:
    return f"oauth-od-{uuid.uuid4().hex[:8]}"


def produce_consume(conf: dict[str, Any], name: str) -> list[bytes]:
    from odradek.client import Consumer, Producer

    producer = Producer(conf)
    for i in range(COUNT):
        producer.produce(name, b"od-%d" % i)
    assert producer.flush(20) == 0
    consumer = Consumer({**conf, "group.id": name, "auto.offset.reset": "earliest"})
    values: list[bytes] = []
    try:
        consumer.subscribe([name])
        deadline = time.monotonic() + 20
        while len(values) < COUNT and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    return values


def expected() -> list[bytes]:
    return [b"od-%d" % i for i in range(COUNT)]


def auth_errors(conf: dict[str, Any]) -> list[Any]:
    """The errors a producer reports through error_cb within a few seconds."""
    from odradek.client import Producer

    errors: list[Any] = []
    producer = Producer({**conf, "error_cb": errors.append})
    try:
        deadline = time.monotonic() + 10
        while not errors and time.monotonic() < deadline:
            producer.poll(0.2)
    finally:
        producer.close(1)
    return errors


def unsecured(broker: BrokerProcess, oauth_config: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": broker.urls["UNSECURED"],
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "OAUTHBEARER",  # librdkafka's name
        "enable.sasl.oauthbearer.unsecure.jwt": True,
        "sasl.oauthbearer.config": oauth_config,
    }


def test_unsecured_jwt_as_librdkafka_makes_it(broker: BrokerProcess) -> None:
    conf = unsecured(broker, "principal=alice scope=kafka,other lifeSeconds=600")
    assert produce_consume(conf, topic()) == expected()


def test_unsecured_jwt_without_the_required_scope_is_refused(broker: BrokerProcess) -> None:
    from odradek.client import KafkaError

    errors = auth_errors(unsecured(broker, "principal=alice scope=other"))
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION, errors
    assert "Invalid username or password" in errors[0].str()


def test_oauth_cb_with_signed_tokens(broker: BrokerProcess, provider: Provider) -> None:
    calls: list[str] = []

    def oauth_cb(config: str) -> tuple[str, float]:
        calls.append(config)
        return provider.token("carol"), time.time() + 3600

    conf = {
        "bootstrap.servers": broker.urls["SIGNED"],
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.config": "audience=kafka",
        "oauth_cb": oauth_cb,
    }
    assert produce_consume(conf, topic()) == expected()
    # confluent-kafka hands the callback sasl.oauthbearer.config; the token is reused
    # by a client's connections (one call per client here: a producer, a consumer)
    assert calls and set(calls) == {"audience=kafka"}
    assert len(calls) <= 4, calls


def test_an_expired_token_is_refused(broker: BrokerProcess, provider: Provider) -> None:
    from odradek.client import KafkaError

    conf = {
        "bootstrap.servers": broker.urls["SIGNED"],
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "oauth_cb": lambda _: (provider.token(lifetime_s=-120), time.time() - 120),
    }
    errors = auth_errors(conf)
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION, errors
    assert "Invalid username or password" in errors[0].str()  # the reason: the broker's log


def test_aiokafka_token_provider(broker: BrokerProcess, provider: Provider) -> None:
    from odradek.aio import AIOKafkaConsumer, AIOKafkaProducer

    class Tokens:  # aiokafka's AbstractTokenProvider shape
        async def token(self) -> str:
            return provider.token("dave")

        def extensions(self) -> dict[str, str]:
            return {"traceId": "abc123"}

    name = topic()

    async def main() -> list[bytes]:
        options: dict[str, Any] = {
            "bootstrap_servers": broker.urls["SIGNED"],
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "OAUTHBEARER",
            "sasl_oauth_token_provider": Tokens(),
        }
        producer = AIOKafkaProducer(**options)
        await producer.start()
        try:
            for i in range(COUNT):
                await producer.send_and_wait(name, b"od-%d" % i)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(name, group_id=name, auto_offset_reset="earliest", **options)
        await consumer.start()
        values: list[bytes] = []
        try:
            while len(values) < COUNT:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=500), 20)
                values += [m.value for ms in batch.values() for m in ms]
        finally:
            await consumer.stop()
        return values

    assert asyncio.run(main()) == expected()


def test_aiokafka_token_provider_with_an_expired_token(
    broker: BrokerProcess, provider: Provider
) -> None:
    from odradek.aio import AIOKafkaProducer

    class Tokens:
        async def token(self) -> str:
            return provider.token(lifetime_s=-120)

    async def main() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=broker.urls["SIGNED"],
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="OAUTHBEARER",
            sasl_oauth_token_provider=Tokens(),
            request_timeout_ms=4000,
        )
        try:
            await producer.start()
        finally:
            await producer.stop()

    with pytest.raises(Exception, match=r"(?i)authentication"):
        asyncio.run(main())


def test_reauthentication_fetches_a_fresh_token(broker: BrokerProcess, provider: Provider) -> None:
    """A token living 3 s caps the broker's session at 3 s (KIP-368); the client logs
    in again before it ends, with a new token from the callback, and keeps producing."""
    from odradek.client import Producer

    calls: list[float] = []
    lock = threading.Lock()

    def oauth_cb(_: str) -> tuple[str, float]:
        with lock:
            calls.append(time.time())
        return provider.token("erin", lifetime_s=3), time.time() + 3

    producer = Producer(
        {
            "bootstrap.servers": broker.urls["SIGNED"],
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER",
            "oauth_cb": oauth_cb,
        }
    )
    name = topic()
    try:
        end = time.monotonic() + 7
        sent = 0
        while time.monotonic() < end:
            producer.produce(name, b"r-%d" % sent)
            sent += 1
            assert producer.flush(10) == 0
            time.sleep(0.25)
    finally:
        producer.close(2)
    assert len(calls) >= 3, calls  # the first login and at least two more
    assert "expired (connections.max.reauth.ms)" not in broker.log()


# -- the exchange, without a broker ------------------------------------------------------


def test_client_first_message_is_what_the_broker_parses() -> None:
    message = client_first_message(OAuthToken("a.b.c", None, {"traceId": "t-1"}))
    assert message == b"n,,\x01auth=Bearer a.b.c\x01traceId=t-1\x01\x01"
    first = parse_client_first(message)
    assert first.token == "a.b.c" and dict(first.extensions) == {"traceId": "t-1"}
    client = OAuthBearerClient(OAuthToken("a.b.c"))
    assert client.next_token(None) == b"n,,\x01auth=Bearer a.b.c\x01\x01"
    assert client.next_token(b"") is None  # accepted: done
    refused = OAuthBearerClient(OAuthToken("a.b.c"))
    refused.next_token(None)
    assert refused.next_token(json.dumps({"status": "invalid_token"}).encode()) == b"\x01"


def test_unsecured_jwt_passes_kafkas_unsecured_validator() -> None:
    source = UnsecuredJwt(
        "principalClaimName=azp principal=admin scopeClaimName=roles scope=r1,r2 "
        "lifeSeconds=600 extension_traceId=123",
        clock=lambda: 1_000_000.0,
    )
    token = asyncio.run(source.token())
    assert token.expires_at_s == 1_000_600.0 and dict(token.extensions) == {"traceId": "123"}
    header = json.loads(b64url_decode(token.value.split(".")[0]))
    assert header == {"alg": "none"}
    rules = ClaimRules(principal_claim="azp", scope_claim="roles", required_scopes=("r2",))
    valid = validate_unsecured(token.value, rules, 1_000_001.0)
    assert valid.principal == "admin" and set(valid.scopes) == {"r1", "r2"}


@pytest.mark.parametrize(
    ("conf", "key", "needle"),
    [
        ({}, "sasl.mechanism", "needs a token: oauth_cb, sasl_oauth_token_provider"),
        (
            {"enable.sasl.oauthbearer.unsecure.jwt": True, "sasl.oauthbearer.config": "scope=a"},
            "sasl.oauthbearer.config",
            "the unsecured JWT needs principal=",
        ),
        (
            {"enable.sasl.oauthbearer.unsecure.jwt": True, "sasl.oauthbearer.config": "bogus"},
            "sasl.oauthbearer.config",
            "'bogus' is not name=value",
        ),
        (
            {
                "enable.sasl.oauthbearer.unsecure.jwt": True,
                "sasl.oauthbearer.config": "principal=a lifeSeconds=soon",
            },
            "sasl.oauthbearer.config",
            "lifeSeconds=soon is not a positive integer",
        ),
        ({"oauth_cb": "not callable"}, "sasl.mechanism", "oauth_cb is not callable"),
    ],
)
def test_bad_oauthbearer_settings_are_one_line(conf: dict[str, Any], key: str, needle: str) -> None:
    from odradek.client import Producer
    from odradek.client._core.config import ConfigError

    with pytest.raises(ConfigError) as caught:
        Producer(
            {
                "bootstrap.servers": "127.0.0.1:1",
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "OAUTHBEARER",
                **conf,
            }
        )
    assert caught.value.key == key and needle in str(caught.value)


def test_a_callback_answering_nonsense_fails_the_login_not_the_client() -> None:
    from odradek.client._core.oauth import OAuthTokenError

    source = CallbackTokens(lambda _: "just a string", "")
    with pytest.raises(OAuthTokenError, match="oauth_cb must return"):
        asyncio.run(source.token())
    failing = CallbackTokens(lambda _: 1 / 0, "")
    with pytest.raises(OAuthTokenError, match="oauth_cb failed: ZeroDivisionError"):
        asyncio.run(failing.token())
