"""TLS listeners proven with real clients against a real ``odradek serve``.

One broker serves three listeners: PLAINTEXT; SSL (server authentication only, a PEM
keystore whose key is encrypted: ssl.key.password); MTLS (an SSL listener requiring a
client certificate, with PKCS12 keystore and truststore). Certificates are made per
run (tests/support/certs.py).
"""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient as ConfluentAdmin

from tests.support.broker import BrokerProcess
from tests.support.certs import PASSWORD, Certs, make_certs

KCAT = shutil.which("kcat") or shutil.which("kafkacat")
COUNT = 50


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def tls_overrides(certs: Certs) -> list[str]:
    properties = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,MTLS://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs.server.encrypted_keystore_pem),
        "ssl.key.password": PASSWORD,
        "listener.name.mtls.ssl.keystore.type": "PKCS12",
        "listener.name.mtls.ssl.keystore.location": str(certs.server.keystore_p12),
        "listener.name.mtls.ssl.keystore.password": PASSWORD,
        "listener.name.mtls.ssl.truststore.type": "PKCS12",
        "listener.name.mtls.ssl.truststore.location": str(certs.ca_p12),
        "listener.name.mtls.ssl.truststore.password": PASSWORD,
        "listener.name.mtls.ssl.client.auth": "required",
    }
    return [f"--override={k}={v}" for k, v in properties.items()]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("tls") / "data", tls_overrides(certs))
    process.start(listen=None)
    try:
        yield process
    finally:
        try:
            process.stop()
        finally:
            process.kill()


def topic() -> str:
    return f"tls-{uuid.uuid4().hex[:8]}"


def ssl_conf(broker: BrokerProcess, certs: Certs, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": broker.urls["SSL"],
        "security.protocol": "ssl",
        "ssl.ca.location": str(certs.ca),
        **extra,
    }


def mtls_conf(broker: BrokerProcess, certs: Certs) -> dict[str, Any]:
    return ssl_conf(
        broker,
        certs,
        **{
            "bootstrap.servers": broker.urls["MTLS"],
            "ssl.certificate.location": str(certs.alice.cert),
            "ssl.key.location": str(certs.alice.key),
        },
    )


def produce_consume(conf: dict[str, Any], name: str) -> list[bytes]:
    producer = Producer(conf)
    for i in range(COUNT):
        producer.produce(name, b"value-%d" % i)
    assert producer.flush(20) == 0
    return consume(conf, name)


def consume(conf: dict[str, Any], name: str, count: int = COUNT) -> list[bytes]:
    consumer = Consumer({**conf, "group.id": name, "auto.offset.reset": "earliest"})
    consumer.subscribe([name])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(values) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    return values


async def aio_round_trip(
    producer_class: Any, consumer_class: Any, options: dict[str, Any], name: str, **consumer: Any
) -> list[bytes]:
    """COUNT records through an aiokafka-shaped producer, read back by its consumer
    (aiokafka's own classes or odradek.aio's, with the same ``options``)."""
    producer = producer_class(**options)
    await producer.start()
    try:
        for i in range(COUNT):
            await producer.send(name, b"value-%d" % i)
        await producer.flush()
    finally:
        await producer.stop()
    reader = consumer_class(name, auto_offset_reset="earliest", **consumer, **options)
    await reader.start()
    values: list[bytes] = []
    try:
        while len(values) < COUNT:
            batch = await asyncio.wait_for(reader.getmany(timeout_ms=500), 20)
            values += [m.value for ms in batch.values() for m in ms]
    finally:
        await reader.stop()
    return values


def expected(count: int = COUNT) -> list[bytes]:
    return [b"value-%d" % i for i in range(count)]


def test_confluent_over_ssl(broker: BrokerProcess, certs: Certs) -> None:
    assert produce_consume(ssl_conf(broker, certs), topic()) == expected()
    # Kafka's property names must not be reported as "accepted; it has no effect"
    assert "'ssl.keystore.location' accepted" not in broker.log()
    assert "listener.name.mtls.ssl.client.auth' accepted" not in broker.log()


def test_mtls_requires_a_client_certificate(broker: BrokerProcess, certs: Certs) -> None:
    without = ssl_conf(broker, certs, **{"bootstrap.servers": broker.urls["MTLS"]})
    with pytest.raises(KafkaException):
        ConfluentAdmin(without).list_topics(timeout=3)
    assert produce_consume(mtls_conf(broker, certs), topic()) == expected()
    assert "TLS handshake with 127.0.0.1:" in broker.log()


def test_wrong_ca_is_refused(broker: BrokerProcess, certs: Certs) -> None:
    conf = ssl_conf(broker, certs, **{"ssl.ca.location": str(certs.other_ca)})
    with pytest.raises(KafkaException):
        ConfluentAdmin(conf).list_topics(timeout=3)
    from odradek.client import AdminClient
    from odradek.client import KafkaException as OdradekKafkaException

    admin = AdminClient({**conf, "request.timeout.ms": 3000})
    try:
        with pytest.raises(OdradekKafkaException, match="refused the broker's certificate"):
            admin.list_topics(timeout=3)
    finally:
        admin.close()
    # librdkafka's escape hatch: no verification at all (then any CA will do)
    unverified = AdminClient({**conf, "enable.ssl.certificate.verification": False})
    try:
        assert unverified.list_topics(timeout=10).brokers
    finally:
        unverified.close()


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed")
@pytest.mark.parametrize("listener", ["SSL", "MTLS"])
def test_kcat_over_ssl(broker: BrokerProcess, certs: Certs, listener: str) -> None:
    assert KCAT is not None
    name = topic()
    tls = ["-X", "security.protocol=ssl", "-X", f"ssl.ca.location={certs.ca}"]
    if listener == "MTLS":  # its client certificate, as librdkafka takes it
        tls += ["-X", f"ssl.certificate.location={certs.alice.cert}"]
        tls += ["-X", f"ssl.key.location={certs.alice.key}"]
    base = [KCAT, "-b", broker.urls[listener], *tls, "-t", name]
    lines = b"".join(b"value-%d\n" % i for i in range(COUNT))
    subprocess.run([*base, "-P"], input=lines, check=True, timeout=60)
    done = subprocess.run(
        [*base, "-C", "-o", "beginning", "-e", "-q"], capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == expected()


def test_kafka_python_over_ssl(broker: BrokerProcess, certs: Certs) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    name = topic()
    options = {
        "bootstrap_servers": broker.urls["MTLS"],
        "security_protocol": "SSL",
        "ssl_cafile": str(certs.ca),
        "ssl_certfile": str(certs.alice.cert),
        "ssl_keyfile": str(certs.alice.key),
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


def test_aiokafka_over_ssl(broker: BrokerProcess, certs: Certs) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    name = topic()

    async def main() -> list[bytes]:
        context = create_ssl_context(cafile=str(certs.ca))
        options = {
            "bootstrap_servers": broker.urls["SSL"],
            "security_protocol": "SSL",
            "ssl_context": context,
        }
        return await aio_round_trip(AIOKafkaProducer, AIOKafkaConsumer, options, name)

    assert asyncio.run(main()) == expected()


def test_odradek_client_over_ssl_and_mtls(broker: BrokerProcess, certs: Certs) -> None:
    from odradek.client import Consumer as OdradekConsumer
    from odradek.client import Producer as OdradekProducer

    for conf in (ssl_conf(broker, certs), mtls_conf(broker, certs)):
        name = topic()
        producer = OdradekProducer(conf)
        for i in range(COUNT):
            producer.produce(name, b"value-%d" % i)
        assert producer.flush(20) == 0
        consumer = OdradekConsumer({**conf, "group.id": name, "auto.offset.reset": "earliest"})
        consumer.subscribe([name])
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        try:
            while len(values) < COUNT and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is not None and message.error() is None:
                    values.append(message.value())
        finally:
            consumer.close()
        assert values == expected()


def test_odradek_aio_client_with_ssl_context(broker: BrokerProcess, certs: Certs) -> None:
    from odradek.aio import AIOKafkaConsumer, AIOKafkaProducer

    name = topic()

    async def main() -> list[bytes]:
        context = ssl.create_default_context(cafile=str(certs.ca))
        context.load_cert_chain(str(certs.alice.cert), str(certs.alice.key))
        options = {
            "bootstrap_servers": broker.urls["MTLS"],
            "security_protocol": "SSL",
            "ssl_context": context,
        }
        return await aio_round_trip(
            AIOKafkaProducer, AIOKafkaConsumer, options, name, group_id=name
        )

    assert asyncio.run(main()) == expected()


def odradek(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    done = subprocess.run(
        [sys.executable, "-m", "odradek", *args], input=stdin, capture_output=True, timeout=60
    )
    assert b"Traceback" not in done.stderr
    return done


def test_cli_command_config(broker: BrokerProcess, certs: Certs, tmp_path: Path) -> None:
    properties = tmp_path / "client.properties"
    properties.write_text(
        "security.protocol=SSL\n"
        # Kafka's Java client names for a PEM truststore and keystore are understood
        f"ssl.truststore.type=PEM\nssl.truststore.location={certs.ca}\n"
        f"ssl.certificate.location={certs.alice.cert}\nssl.key.location={certs.alice.key}\n"
    )
    name = topic()
    common = ["-b", broker.urls["MTLS"], "--command-config", str(properties)]
    done = odradek("topics", "create", name, *common)
    assert done.returncode == 0, done.stderr
    done = odradek("produce", name, *common, stdin=b"one\ntwo\n")
    assert done.returncode == 0, done.stderr
    done = odradek("consume", name, "--from-beginning", "--max-messages", "2", *common)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [b"one", b"two"]
    # a tool with its own connections (kafka-log-dirs.sh's) over the same properties
    done = odradek("log-dirs", "--describe", "--bootstrap-server", *common[1:])
    assert done.returncode == 0, done.stderr
    assert name.encode() in done.stdout
    # a wrong key password is one line before anything connects
    bad = tmp_path / "bad.properties"
    bad.write_text(
        f"security.protocol=SSL\nssl.ca.location={certs.ca}\n"
        f"ssl.certificate.location={certs.alice.encrypted_keystore_pem}\n"
        "ssl.key.password=wrong\n"
    )
    done = odradek("topics", "list", "-b", broker.urls["MTLS"], "--command-config", str(bad))
    assert done.returncode == 2
    assert "wrong ssl.key.password" in done.stderr.decode()
    # without the properties the MTLS listener does not answer as Kafka
    plain = odradek("topics", "list", "-b", broker.urls["MTLS"])
    assert plain.returncode != 0
    missing = odradek("topics", "list", *common[:2], "--command-config", "/nonexistent")
    assert missing.returncode == 2
    assert len(missing.stderr.decode().strip().splitlines()) <= 3  # click's usage + 1 line
    assert "/nonexistent" in missing.stderr.decode()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["ssl.keystore.type=PKCS12", "ssl.keystore.password=wrong"],
            "wrong password",
        ),
        (["ssl.keystore.type=JKS"], "convert it to PKCS12"),
        (["ssl.keystore.type=PEM", "ssl.keystore.location=/nonexistent.pem"], "cannot read"),
    ],
)
def test_serve_refuses_bad_tls_settings_in_one_line(
    tmp_path: Path, certs: Certs, overrides: list[str], message: str
) -> None:
    args = [
        "serve",
        "--data-dir",
        str(tmp_path / "data"),
        "--override=listeners=SSL://127.0.0.1:0",
        "--override=listener.security.protocol.map=SSL:SSL",
        f"--override=ssl.keystore.location={certs.server.keystore_p12}",
        *(f"--override={o}" for o in overrides),
    ]
    done = odradek(*args)
    assert done.returncode == 2
    lines = done.stderr.decode().strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("odradek serve: invalid value for ssl.keystore")
    assert message in lines[0]
