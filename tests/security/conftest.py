"""A broker with two SASL_PLAINTEXT listeners for the SASL tests (one module each).

``SASL_PLAINTEXT`` has no session lifetime; ``REAUTH`` has
``connections.max.reauth.ms`` = ``REAUTH_MS``, so clients there must re-authenticate
(KIP-368). Both enable PLAIN (users from the JAAS config) and SCRAM-SHA-256/512
(credentials seeded into the metadata log through the broker's test-only hook,
``ODRADEK_TEST_SCRAM_CREDENTIALS``, until the SCRAM admin APIs can write them).
"""

from __future__ import annotations

import gc
import json
import os
import uuid
from collections.abc import Iterator

import pytest

from odradek.server.sasl_settings import TEST_CREDENTIALS_ENV
from tests.support.broker import BrokerProcess

REAUTH_MS = 1500
FAILED_DELAY_MS = 600
USERS = {"alice": "alice-secret", "admin": "admin-secret"}
PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret" '
    'user_alice="alice-secret";'
)
BROKER_ARGS = [
    "--override=listeners=SASL_PLAINTEXT://127.0.0.1:0,REAUTH://127.0.0.1:0",
    "--override=listener.security.protocol.map="
    "SASL_PLAINTEXT:SASL_PLAINTEXT,REAUTH:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
    "--override=sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    f"--override=sasl.jaas.config={PLAIN_JAAS}",
    f"--override=listener.name.reauth.connections.max.reauth.ms={REAUTH_MS}",
    f"--override=connection.failed.authentication.delay.ms={FAILED_DELAY_MS}",
]


def seeded_credentials() -> str:
    return json.dumps(
        [
            [user, mechanism, password, 4096]
            for user, password in USERS.items()
            for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512")
        ]
    )


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    os.environ[TEST_CREDENTIALS_ENV] = seeded_credentials()
    try:
        process = BrokerProcess(tmp_path_factory.mktemp("sasl") / "data", BROKER_ARGS).start(None)
    finally:
        del os.environ[TEST_CREDENTIALS_ENV]
    try:
        yield process
    finally:
        gc.collect()  # librdkafka handles in reference cycles close their sockets
        try:
            process.stop()
        finally:
            process.kill()


@pytest.fixture
def sasl_bootstrap(sasl_broker: BrokerProcess) -> str:
    assert sasl_broker.alive(), f"broker died; log:\n{sasl_broker.log()[-4000:]}"
    return sasl_broker.urls["SASL_PLAINTEXT"]


@pytest.fixture
def reauth_bootstrap(sasl_broker: BrokerProcess) -> str:
    return sasl_broker.urls["REAUTH"]


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60].strip("-")
    return f"{base}-{uuid.uuid4().hex[:8]}"
