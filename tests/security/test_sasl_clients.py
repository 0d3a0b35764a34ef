"""Real clients authenticate with SASL PLAIN and SCRAM against ``odradek serve``:
confluent-kafka (librdkafka), kcat, kafka-python, aiokafka and odradek's own client
each produce and consume through a SASL_PLAINTEXT listener."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from typing import Any

import pytest

from tests.security.conftest import USERS

KCAT = shutil.which("kcat") or shutil.which("kafkacat")
MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


def confluent_config(bootstrap: str, mechanism: str, user: str = "alice") -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": USERS[user],
    }


def consume_confluent(conf: dict[str, Any], topic: str, count: int, timeout_s: float = 30) -> list:
    import confluent_kafka

    consumer = confluent_kafka.Consumer(
        {**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"}
    )
    try:
        consumer.subscribe([topic])
        values: list[bytes] = []
        deadline = time.monotonic() + timeout_s
        while len(values) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
        return values
    finally:
        consumer.close()


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_produce_consume(sasl_bootstrap: str, topic_name: str, mechanism: str) -> None:
    import confluent_kafka

    conf = confluent_config(sasl_bootstrap, mechanism)
    producer = confluent_kafka.Producer(conf)
    for i in range(5):
        producer.produce(topic_name, f"{mechanism}-{i}".encode())
    assert producer.flush(20) == 0
    values = consume_confluent(conf, topic_name, 5)
    assert values == [f"{mechanism}-{i}".encode() for i in range(5)]


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed")
def test_kcat_scram(sasl_bootstrap: str, topic_name: str) -> None:
    assert KCAT is not None
    sasl = [
        "-X", "security.protocol=SASL_PLAINTEXT",
        "-X", "sasl.mechanisms=SCRAM-SHA-256",
        "-X", "sasl.username=alice",
        "-X", f"sasl.password={USERS['alice']}",
    ]  # fmt: skip
    common = [KCAT, "-b", sasl_bootstrap, *sasl, "-t", topic_name]
    subprocess.run([*common, "-P"], input=b"one\ntwo\n", check=True, timeout=30)
    out = subprocess.run(
        [*common, "-C", "-o", "beginning", "-e", "-c", "2"],
        capture_output=True,
        check=True,
        timeout=30,
    )
    assert out.stdout.split() == [b"one", b"two"]
    # A wrong password: kcat fails with librdkafka's authentication error.
    bad = [a.replace(USERS["alice"], "wrong") for a in common]
    failed = subprocess.run([*bad, "-L", "-m", "5"], capture_output=True, timeout=30, check=False)
    assert failed.returncode != 0
    assert b"Authentication failed: Invalid username or password" in failed.stderr


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_kafka_python(sasl_bootstrap: str, topic_name: str, mechanism: str) -> None:
    import kafka

    kwargs = {
        "bootstrap_servers": sasl_bootstrap,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": "alice",
        "sasl_plain_password": USERS["alice"],
    }
    producer = kafka.KafkaProducer(**kwargs)
    try:
        for i in range(3):
            producer.send(topic_name, f"kp-{i}".encode()).get(timeout=20)
    finally:
        producer.close(timeout=5)
    consumer = kafka.KafkaConsumer(
        topic_name, auto_offset_reset="earliest", consumer_timeout_ms=15_000, **kwargs
    )
    try:
        values = []
        for message in consumer:
            values.append(message.value)
            if len(values) == 3:
                break
    finally:
        consumer.close()
    assert values == [f"kp-{i}".encode() for i in range(3)]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_aiokafka(sasl_bootstrap: str, topic_name: str, mechanism: str) -> None:
    import aiokafka

    kwargs = {
        "bootstrap_servers": sasl_bootstrap,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": "alice",
        "sasl_plain_password": USERS["alice"],
    }

    async def run() -> list[bytes]:
        producer = aiokafka.AIOKafkaProducer(**kwargs)
        await producer.start()
        try:
            for i in range(3):
                await producer.send_and_wait(topic_name, f"ak-{i}".encode())
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(topic_name, auto_offset_reset="earliest", **kwargs)
        await consumer.start()
        try:
            values: list[bytes] = []
            async with asyncio.timeout(20):
                async for message in consumer:
                    values.append(message.value)
                    if len(values) == 3:
                        break
            return values
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == [f"ak-{i}".encode() for i in range(3)]


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
def test_odradek_client(sasl_bootstrap: str, topic_name: str, mechanism: str) -> None:
    from odradek.client import Consumer, Producer

    conf = {
        "bootstrap.servers": sasl_bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": mechanism,  # librdkafka's name
        "sasl.username": "alice",
        "sasl.password": USERS["alice"],
    }
    producer = Producer(conf)
    for i in range(3):
        producer.produce(topic_name, f"od-{i}".encode())
    assert producer.flush(20) == 0
    consumer = Consumer({**conf, "group.id": f"g-{topic_name}", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic_name])
        values: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(values) < 3 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    assert values == [f"od-{i}".encode() for i in range(3)]


def test_odradek_aio_client_scram(sasl_bootstrap: str, topic_name: str) -> None:
    from odradek.aio import AIOKafkaConsumer, AIOKafkaProducer

    kwargs = {
        "bootstrap_servers": sasl_bootstrap,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "alice",
        "sasl_plain_password": USERS["alice"],
    }

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(**kwargs)
        await producer.start()
        try:
            await producer.send_and_wait(topic_name, b"aio")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            topic_name, group_id=f"g-{topic_name}", auto_offset_reset="earliest", **kwargs
        )
        await consumer.start()
        try:
            async with asyncio.timeout(20):
                message = await consumer.getone()
            return [message.value]
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == [b"aio"]


def test_user_added_at_runtime_can_authenticate_at_once(sasl_bootstrap: str) -> None:
    """AlterUserScramCredentials (over SASL, as alice) adds carol; carol's next
    handshake finds her credential in the broker's image; deleting it locks her out."""
    import confluent_kafka
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient(confluent_config(sasl_bootstrap, "SCRAM-SHA-256"))
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    futures = admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion("carol", info, b"carol-secret")]
    )
    for future in futures.values():
        future.result(timeout=20)
    carol = {**confluent_config(sasl_bootstrap, "SCRAM-SHA-256"), "sasl.username": "carol"}
    carol["sasl.password"] = "carol-secret"
    assert AdminClient(carol).list_topics(timeout=10).brokers
    futures = admin.alter_user_scram_credentials(
        [UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_256)]
    )
    for future in futures.values():
        future.result(timeout=20)
    errors: list[Any] = []
    locked_out = AdminClient({**carol, "error_cb": errors.append})
    with pytest.raises(confluent_kafka.KafkaException):
        locked_out.list_topics(timeout=3)
    deadline = time.monotonic() + 5
    while not errors and time.monotonic() < deadline:
        locked_out.poll(0.2)  # error_cb is served by poll()
    assert any(e.code() == confluent_kafka.KafkaError._AUTHENTICATION for e in errors)
