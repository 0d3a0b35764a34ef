"""A three-node KRaft quorum whose every listener is TLS with client certificates
required: Raft between the controllers, the brokers' registration and forwarding to
the controller, and replica fetching all run over mutual TLS (the broker's
certificate is its client certificate), and a real client produces with acks=all to
a topic replicated three times and reads it back."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.certs import Certs, make_certs
from tests.support.kraft import Quorum


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def quorum(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[Quorum]:
    properties = {
        # The listener names stay Quorum's; both speak TLS.
        "listener.security.protocol.map": "PLAINTEXT:SSL,CONTROLLER:SSL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs.server.keystore_pem),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(certs.ca),
        "ssl.client.auth": "required",
    }
    with Quorum(tmp_path_factory.mktemp("tls-quorum"), properties=properties) as running:
        yield running


def test_replication_and_raft_over_mutual_tls(quorum: Quorum, certs: Certs) -> None:
    conf = {
        "bootstrap.servers": quorum.bootstrap,
        "security.protocol": "ssl",
        "ssl.ca.location": str(certs.ca),
        "ssl.certificate.location": str(certs.alice.cert),
        "ssl.key.location": str(certs.alice.key),
    }
    topic = f"tls-rf3-{uuid.uuid4().hex[:6]}"
    admin = AdminClient(conf)
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)  # through the controller
    producer = Producer({**conf, "acks": "all"})
    for i in range(20):
        producer.produce(topic, b"v%d" % i)
    assert producer.flush(30) == 0  # acks=all: both followers fetched over TLS
    metadata = admin.list_topics(topic, timeout=10).topics[topic].partitions[0]
    deadline = time.monotonic() + 20
    while len(metadata.isrs) < 3 and time.monotonic() < deadline:
        time.sleep(0.2)
        metadata = admin.list_topics(topic, timeout=10).topics[topic].partitions[0]
    assert sorted(metadata.isrs) == [1, 2, 3]
    consumer = Consumer({**conf, "group.id": topic, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    values: list[bytes] = []
    try:
        while len(values) < 20 and time.monotonic() < deadline + 20:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    assert values == [b"v%d" % i for i in range(20)]
    for node in quorum.nodes.values():
        assert "TLS handshake" not in node.log(), node.log()[-2000:]


def test_the_controller_listener_speaks_only_tls(quorum: Quorum) -> None:
    """What the quorum above ran over: its controller listeners refuse plaintext (so
    Raft and the brokers' controller clients did speak TLS)."""
    node_id = quorum.controller_ids[0]
    with socket.create_connection(("127.0.0.1", quorum.controller_ports[node_id]), 5) as sock:
        sock.sendall(b"\x00\x00\x00\x0a" + b"\x00\x12\x00\x03" + b"\x00" * 6)  # ApiVersions
        sock.settimeout(5)
        data = sock.recv(1024)
        assert data == b"" or data[:1] == b"\x15", data  # a TLS alert, never a response
        if data:
            assert sock.recv(1024) == b""  # then closed
    deadline = time.monotonic() + 5
    while "TLS handshake with 127.0.0.1:" not in quorum.nodes[node_id].log():
        assert time.monotonic() < deadline, quorum.nodes[node_id].log()[-2000:]
        time.sleep(0.1)
