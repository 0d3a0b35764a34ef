"""SASL_SSL, as production Kafka runs it: SCRAM and PLAIN inside TLS, with real clients.

One broker, one ``SASL_SSL`` listener (PEM keystore; server authentication only) whose
SCRAM users were written by ``odradek storage format --add-scram`` and whose PLAIN users
come from the JAAS config; a PLAINTEXT listener beside it proves nothing leaks between
them. Each client library logs in the way its users configure it.
"""

from __future__ import annotations

import asyncio
import gc
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient as ConfluentAdmin

from tests.security.conftest import PLAIN_JAAS, USERS, format_with_scram
from tests.security.test_tls_interop import COUNT, aio_round_trip, expected, produce_consume
from tests.support.broker import BrokerProcess
from tests.support.certs import Certs, make_certs

KCAT = shutil.which("kcat") or shutil.which("kafkacat")


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[BrokerProcess]:
    data_dir = tmp_path_factory.mktemp("sasl-ssl") / "data"
    format_with_scram(data_dir)
    properties = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs.server.keystore_pem),
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "connection.failed.authentication.delay.ms": "200",
    }
    process = BrokerProcess(data_dir, [f"--override={k}={v}" for k, v in properties.items()])
    process.start(listen=None)
    try:
        yield process
    finally:
        gc.collect()  # librdkafka handles in reference cycles close their sockets
        try:
            process.stop()
        finally:
            process.kill()


def topic() -> str:
    return f"sasl-ssl-{uuid.uuid4().hex[:8]}"


def conf(
    broker: BrokerProcess, certs: Certs, mechanism: str, user: str = "alice", **extra: Any
) -> dict[str, Any]:
    return {
        "bootstrap.servers": broker.urls["SASL_SSL"],
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(certs.ca),
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": USERS.get(user, "whatever"),
        **extra,
    }


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_confluent_kafka_over_sasl_ssl(broker: BrokerProcess, certs: Certs, mechanism: str) -> None:
    assert produce_consume(conf(broker, certs, mechanism), topic()) == expected()


def test_confluent_kafka_oauthbearer_over_sasl_ssl(broker: BrokerProcess, certs: Certs) -> None:
    """Kafka's unsecured validator (the default without a JWKS) with librdkafka's own
    unsecured token; signed tokens: test_oauthbearer_broker.py."""
    settings = {
        "bootstrap.servers": broker.urls["SASL_SSL"],
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(certs.ca),
        "sasl.mechanism": "OAUTHBEARER",
        "enable.sasl.oauthbearer.unsecure.jwt": True,
        "sasl.oauthbearer.config": "principal=alice",
    }
    assert produce_consume(settings, topic()) == expected()


def test_wrong_password_and_unknown_user_over_sasl_ssl(broker: BrokerProcess, certs: Certs) -> None:
    for bad in (
        conf(broker, certs, "SCRAM-SHA-256", **{"sasl.password": "nope"}),
        conf(broker, certs, "SCRAM-SHA-256", user="mallory"),
    ):
        with pytest.raises(KafkaException):
            ConfluentAdmin(bad).list_topics(timeout=3)
    assert "failed authentication with 127.0.0.1:" in broker.log()


def test_tls_alone_does_not_authenticate(broker: BrokerProcess, certs: Certs) -> None:
    """A client that speaks TLS but not SASL gets nothing from a SASL_SSL listener."""
    tls_only = {
        "bootstrap.servers": broker.urls["SASL_SSL"],
        "security.protocol": "SSL",
        "ssl.ca.location": str(certs.ca),
    }
    with pytest.raises(KafkaException):
        ConfluentAdmin(tls_only).list_topics(timeout=3)


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed")
def test_kcat_scram_over_sasl_ssl(broker: BrokerProcess, certs: Certs) -> None:
    assert KCAT is not None
    name = topic()
    security = [
        *("-X", "security.protocol=SASL_SSL"),
        *("-X", f"ssl.ca.location={certs.ca}"),
        *("-X", "sasl.mechanisms=SCRAM-SHA-512"),
        *("-X", "sasl.username=alice"),
        *("-X", f"sasl.password={USERS['alice']}"),
    ]
    base = [KCAT, "-b", broker.urls["SASL_SSL"], *security, "-t", name]
    lines = b"".join(b"value-%d\n" % i for i in range(COUNT))
    subprocess.run([*base, "-P"], input=lines, check=True, timeout=60)
    done = subprocess.run(
        [*base, "-C", "-o", "beginning", "-e", "-q"], capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == expected()


def test_kafka_python_scram_over_sasl_ssl(broker: BrokerProcess, certs: Certs) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    name = topic()
    options = {
        "bootstrap_servers": broker.urls["SASL_SSL"],
        "security_protocol": "SASL_SSL",
        "ssl_cafile": str(certs.ca),
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": "alice",
        "sasl_plain_password": USERS["alice"],
    }
    producer = KafkaProducer(**options)
    for i in range(COUNT):
        producer.send(name, b"value-%d" % i)
    producer.flush(20)
    producer.close()
    consumer = KafkaConsumer(
        name, auto_offset_reset="earliest", consumer_timeout_ms=10_000, **options
    )
    try:
        values = [m.value for m in consumer][:COUNT]
    finally:
        consumer.close()
    assert values == expected()


def test_aiokafka_scram_over_sasl_ssl(broker: BrokerProcess, certs: Certs) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    name = topic()

    async def main() -> list[bytes]:
        options = {
            "bootstrap_servers": broker.urls["SASL_SSL"],
            "security_protocol": "SASL_SSL",
            "ssl_context": create_ssl_context(cafile=str(certs.ca)),
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": "admin",
            "sasl_plain_password": USERS["admin"],
        }
        return await aio_round_trip(AIOKafkaProducer, AIOKafkaConsumer, options, name)

    assert asyncio.run(main()) == expected()


def test_odradek_client_scram_over_sasl_ssl(broker: BrokerProcess, certs: Certs) -> None:
    from odradek.client import Consumer, Producer

    name = topic()
    settings = conf(broker, certs, "SCRAM-SHA-256")
    producer = Producer(settings)
    for i in range(COUNT):
        producer.produce(name, b"value-%d" % i)
    assert producer.flush(20) == 0
    producer.close()
    consumer = Consumer({**settings, "group.id": name, "auto.offset.reset": "earliest"})
    consumer.subscribe([name])
    values: list[bytes] = []
    try:
        for _ in range(60):
            if len(values) >= COUNT:
                break
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    assert values == expected()


def test_console_reads_a_sasl_ssl_cluster(broker: BrokerProcess, certs: Certs) -> None:
    """``odradek console --command-config``'s connection: the admin reads and the
    message browser's consumer both log in."""
    from odradek.client._core.types import TopicPartition
    from odradek.console.source import ClusterSource

    name = topic()
    settings = conf(broker, certs, "SCRAM-SHA-512")
    assert produce_consume(settings, name) == expected()

    async def scenario() -> tuple[list[str], list[bytes]]:
        properties = {k: v for k, v in settings.items() if k != "bootstrap.servers"}
        source = ClusterSource(broker.urls["SASL_SSL"], properties=properties)
        await source.start()
        try:
            topics = [t.name for t in await source.topics()]
            records = await source.read(TopicPartition(name, 0), 0, 5)
        finally:
            await source.close()
        return topics, [r.value for r in records]

    topics, values = asyncio.run(scenario())
    assert name in topics
    assert values == expected()[:5]


def test_cli_tools_log_in_with_command_config(
    broker: BrokerProcess, certs: Certs, tmp_path: Path
) -> None:
    """Kafka tools' --command-config with SASL_SSL: a client-based command (topics) and
    one that opens its own broker connections (metadata-quorum)."""
    properties = tmp_path / "client.properties"
    settings = conf(broker, certs, "SCRAM-SHA-256")
    properties.write_text(
        "".join(f"{k}={v}\n" for k, v in settings.items() if k != "bootstrap.servers")
    )
    base = [sys.executable, "-m", "odradek"]
    common = ["--bootstrap-server", broker.urls["SASL_SSL"], "--command-config", str(properties)]
    name = topic()
    created = subprocess.run(
        [*base, "topics", "create", name, *common], capture_output=True, text=True, timeout=60
    )
    assert created.returncode == 0, created.stderr
    listed = subprocess.run(
        [*base, "topics", "list", *common], capture_output=True, text=True, timeout=60
    )
    assert name in listed.stdout, listed.stderr
    quorum = subprocess.run(
        [*base, "metadata-quorum", *common, "describe", "--status"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert quorum.returncode == 0 and "LeaderId" in quorum.stdout, quorum.stderr
