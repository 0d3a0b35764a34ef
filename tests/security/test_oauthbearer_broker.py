"""SASL/OAUTHBEARER on a real broker: unsecured tokens, and JWTs signed by an identity
provider whose keys the broker reads from its JWKS, with real clients.

Two SASL_PLAINTEXT listeners: UNSECURED (Kafka's unsecured validator, requiring the
scope ``kafka``) and SIGNED (Kafka's OAuthBearerValidatorCallbackHandler: RS256 tokens
checked against a JWKS file, expected audience and issuer). librdkafka makes unsecured
tokens itself from ``sasl.oauthbearer.config``; for signed ones the tests are the
identity provider (``oauth_cb`` / token providers hand the clients a token they sign).
"""

from __future__ import annotations

import asyncio
import gc
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient as ConfluentAdmin
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from odradek.client._core.connection import BrokerAddress, BrokerConnection, request_entity
from odradek.security.jwt import b64url_encode, unsecured_token
from tests.security.test_tls_interop import aio_round_trip, expected, produce_consume
from tests.support.broker import BrokerProcess

ISSUER = "https://idp.example"
AUDIENCE = "kafka"
VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
UNSECURED = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerUnsecuredValidatorCallbackHandler"
)
LOGIN = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


class Provider:
    """A test identity provider: one RSA key, published as a JWKS file."""

    def __init__(self, directory: Path) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        numbers = self.key.public_key().public_numbers()
        document = {
            "keys": [
                {
                    "kty": "RSA",
                    "kid": "k1",
                    "use": "sig",
                    "alg": "RS256",
                    "n": b64url_encode(numbers.n.to_bytes(256, "big")),
                    "e": b64url_encode(numbers.e.to_bytes(3, "big")),
                }
            ]
        }
        self.jwks = directory / "jwks.json"
        self.jwks.write_text(json.dumps(document))

    def token(
        self, sub: str = "alice", *, key: Any = None, lifetime_s: int = 3600, **claims: Any
    ) -> str:
        now = int(time.time())
        body = {"sub": sub, "iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + lifetime_s}
        body.update(claims)
        header = b64url_encode(json.dumps({"alg": "RS256", "kid": "k1", "typ": "JWT"}).encode())
        payload = b64url_encode(json.dumps(body).encode())
        data = f"{header}.{payload}".encode()
        signature = (key or self.key).sign(data, padding.PKCS1v15(), hashes.SHA256())
        return f"{header}.{payload}.{b64url_encode(signature)}"


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Provider:
    return Provider(tmp_path_factory.mktemp("idp"))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, provider: Provider) -> Iterator[BrokerProcess]:
    properties = {
        "listeners": "UNSECURED://127.0.0.1:0,SIGNED://127.0.0.1:0",
        "listener.security.protocol.map": "UNSECURED:SASL_PLAINTEXT,SIGNED:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        "listener.name.unsecured.oauthbearer.sasl.server.callback.handler.class": UNSECURED,
        "listener.name.unsecured.oauthbearer.sasl.jaas.config": (
            f'{LOGIN} required unsecuredValidatorRequiredScope="kafka";'
        ),
        "listener.name.signed.oauthbearer.sasl.server.callback.handler.class": VALIDATOR,
        "sasl.oauthbearer.jwks.endpoint.url": provider.jwks.as_uri(),
        "sasl.oauthbearer.expected.audience": AUDIENCE,
        "sasl.oauthbearer.expected.issuer": ISSUER,
        "listener.name.signed.connections.max.reauth.ms": "600000",
        "connection.failed.authentication.delay.ms": "100",
    }
    data = tmp_path_factory.mktemp("oauth") / "data"
    process = BrokerProcess(data, [f"--override={k}={v}" for k, v in properties.items()])
    process.start(listen=None)
    try:
        yield process
    finally:
        gc.collect()
        try:
            process.stop()
        finally:
            process.kill()


def topic() -> str:
    return f"oauth-{uuid.uuid4().hex[:8]}"


def unsecured_conf(broker: BrokerProcess, oauth_config: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": broker.urls["UNSECURED"],
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "enable.sasl.oauthbearer.unsecure.jwt": True,
        "sasl.oauthbearer.config": oauth_config,
    }


def signed_conf(broker: BrokerProcess, make_token: Any) -> dict[str, Any]:
    def oauth_cb(_: Any) -> tuple[str, float]:
        return make_token(), time.time() + 3600

    return {
        "bootstrap.servers": broker.urls["SIGNED"],
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "oauth_cb": oauth_cb,
    }


def refused(conf: dict[str, Any]) -> bool:
    try:
        ConfluentAdmin(conf).list_topics(timeout=4)
    except KafkaException:
        return True
    return False


def test_confluent_kafka_with_librdkafkas_unsecured_token(broker: BrokerProcess) -> None:
    conf = unsecured_conf(broker, "principal=alice scope=kafka")
    assert produce_consume(conf, topic()) == expected()


def test_unsecured_token_without_the_required_scope_is_refused(broker: BrokerProcess) -> None:
    assert refused(unsecured_conf(broker, "principal=alice scope=other"))
    assert "lacks required scope(s) kafka" in broker.log()


def test_confluent_kafka_with_a_signed_token(broker: BrokerProcess, provider: Provider) -> None:
    assert produce_consume(signed_conf(broker, provider.token), topic()) == expected()


async def exchange(bootstrap: str, token: str) -> list[Any]:
    """SaslHandshake + RFC 7628's exchange with ``token``, request by request: the
    SaslAuthenticate responses (the second is sent only after an error challenge)."""
    host, port = bootstrap.rsplit(":", 1)
    connection = BrokerConnection(
        BrokerAddress(-1, host, int(port)),
        client_id="oauth-test",
        request_timeout_s=10,
        client_versions={18: (0, 3), 17: (1, 1), 36: (2, 2)},
    )
    await connection.connect()
    try:
        handshake = await connection.send(request_entity(17, 1, mechanism="OAUTHBEARER"))
        assert handshake.error_code.name == "none"
        first = f"n,,\x01auth=Bearer {token}\x01\x01".encode()
        answers = [await connection.send(request_entity(36, 2, auth_bytes=first))]
        if answers[0].error_code.name == "none" and answers[0].auth_bytes:
            answers.append(await connection.send(request_entity(36, 2, auth_bytes=b"\x01")))
        return answers
    finally:
        await connection.close()


def test_a_good_token_completes_in_one_step_with_the_tokens_lifetime(
    broker: BrokerProcess, provider: Provider
) -> None:
    (answer,) = asyncio.run(exchange(broker.urls["SIGNED"], provider.token(lifetime_s=120)))
    assert answer.error_code.name == "none" and answer.auth_bytes == b""
    # connections.max.reauth.ms is 10 minutes; the token lasts 2: the session ends with it
    assert 100_000 < answer.session_lifetime.total_seconds() * 1000 <= 120_000


@pytest.mark.parametrize("what", ["forged", "expired", "audience", "issuer", "unsecured"])
def test_bad_signed_tokens_get_the_error_challenge_then_fail(
    broker: BrokerProcess, provider: Provider, what: str
) -> None:
    token = {
        "forged": lambda: provider.token(key=provider.other_key),
        "expired": lambda: provider.token(lifetime_s=-120),
        "audience": lambda: provider.token(aud="someone-else"),
        "issuer": lambda: provider.token(iss="https://evil.example"),
        "unsecured": lambda: unsecured_token({"sub": "alice", "exp": time.time() + 60}),
    }[what]()
    challenge, final = asyncio.run(exchange(broker.urls["SIGNED"], token))
    assert json.loads(challenge.auth_bytes) == {"status": "invalid_token"}
    assert final.error_code.name == "sasl_authentication_failed"
    # the client learns nothing of why (the reason goes to the broker's log)
    assert final.error_message == "Authentication failed: Invalid username or password"


def test_kafka_python_with_an_expired_token_cannot_connect(
    broker: BrokerProcess, provider: Provider
) -> None:
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError as KafkaPythonError
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class Tokens(AbstractTokenProvider):
        def token(self) -> str:
            return provider.token(lifetime_s=-120)

    with pytest.raises(KafkaPythonError):  # kafka-python reports "Unable to bootstrap"
        KafkaAdminClient(
            bootstrap_servers=broker.urls["SIGNED"],
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="OAUTHBEARER",
            sasl_oauth_token_provider=Tokens(),
            request_timeout_ms=3000,
        ).close()


def test_aiokafka_with_a_signed_token(broker: BrokerProcess, provider: Provider) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.abc import AbstractTokenProvider as AioTokenProvider

    class Tokens(AioTokenProvider):
        async def token(self) -> str:
            return provider.token("bob")

    name = topic()

    async def main() -> list[bytes]:
        options = {
            "bootstrap_servers": broker.urls["SIGNED"],
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "OAUTHBEARER",
            "sasl_oauth_token_provider": Tokens(),
        }
        return await aio_round_trip(AIOKafkaProducer, AIOKafkaConsumer, options, name)

    assert asyncio.run(main()) == expected()
