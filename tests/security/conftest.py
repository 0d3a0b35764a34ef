"""A broker with two SASL_PLAINTEXT listeners for the SASL tests (one module each).

``SASL_PLAINTEXT`` has no session lifetime; ``REAUTH`` has
``connections.max.reauth.ms`` = ``REAUTH_MS``, so clients there must re-authenticate
(KIP-368). Both enable PLAIN (users from the JAAS config) and SCRAM-SHA-256/512, whose
credentials are written as an operator would: ``odradek storage format --add-scram``
before the first start (the controller commits them as the metadata log's first batch).
"""

from __future__ import annotations

import gc
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

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


def format_with_scram(data_dir: Path, users: dict[str, str] = USERS) -> None:
    """``odradek storage format --add-scram`` for every user, SCRAM-SHA-256 and -512
    (4096 iterations, the default), as kafka-storage.sh is used to bootstrap users."""
    properties = data_dir.parent / f"{data_dir.name}.properties"
    properties.write_text(f"log.dirs={data_dir}\n")
    odradek = [sys.executable, "-m", "odradek", "storage"]
    cluster_id = subprocess.run(
        [*odradek, "random-uuid"], capture_output=True, check=True, text=True
    ).stdout.strip()
    scram = [
        f"--add-scram={mechanism}=[name={user},password={password}]"
        for user, password in users.items()
        for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512")
    ]
    subprocess.run(
        [*odradek, "format", "-t", cluster_id, "-c", str(properties), *scram],
        capture_output=True,
        check=True,
        timeout=60,
    )


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data_dir = tmp_path_factory.mktemp("sasl") / "data"
    format_with_scram(data_dir)
    process = BrokerProcess(data_dir, BROKER_ARGS).start(None)
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
