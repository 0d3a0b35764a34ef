"""A three-node KRaft quorum whose nodes log in to each other with SCRAM-SHA-512: the
inter-broker and controller listeners are SASL (SASL_PLAINTEXT, and SASL_SSL with the
TLS helper's contexts under it), so Raft between the controllers, the brokers'
registration, heartbeats and forwarding, replica fetching and transaction markers all
authenticate as ``User:broker``, whose credential comes from ``storage format
--add-scram`` on every node, as Kafka's KIP-900 bootstraps it (and, in Kafka's usual
setup, with PLAIN to the controllers and SCRAM between brokers). The authorizer is on
with only ``User:broker`` and ``User:admin`` as super users, so a follower that did
not log in as the broker could not replicate (CLUSTER_ACTION). A real client produces
with acks=all to a topic replicated three times, then in a transaction across its
partitions, and reads it all back read_committed; the controller port refuses a
client without credentials."""

from __future__ import annotations

import socket
import struct
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.certs import Certs, make_certs
from tests.support.kraft import Quorum

MECHANISM = "SCRAM-SHA-512"
NODE_JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    'username="broker" password="broker-secret";'
)
SCRAM = [
    f"--add-scram={MECHANISM}=[name=broker,password=broker-secret]",
    f"--add-scram={MECHANISM}=[name=admin,password=admin-secret]",
]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


PLAIN_CONTROLLER = "SASL_PLAINTEXT-PLAIN-controller"


@pytest.fixture(scope="module", params=["SASL_PLAINTEXT", "SASL_SSL", PLAIN_CONTROLLER])
def quorum(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, certs: Certs
) -> Iterator[tuple[Quorum, dict[str, str]]]:
    protocol = request.param.split("-")[0]
    properties = {
        # The listener names stay Quorum's (PLAINTEXT is the inter-broker one).
        "listener.security.protocol.map": f"PLAINTEXT:{protocol},CONTROLLER:{protocol}",
        "sasl.enabled.mechanisms": MECHANISM,
        "sasl.mechanism.inter.broker.protocol": MECHANISM,
        "sasl.mechanism.controller.protocol": MECHANISM,
        "listener.name.plaintext.scram-sha-512.sasl.jaas.config": NODE_JAAS,
        "listener.name.controller.scram-sha-512.sasl.jaas.config": NODE_JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:broker;User:admin",
    }
    if request.param == PLAIN_CONTROLLER:
        # Kafka's usual setup: SCRAM between brokers, PLAIN (JAAS users) to controllers
        del properties["listener.name.controller.scram-sha-512.sasl.jaas.config"]
        properties["listener.name.controller.sasl.enabled.mechanisms"] = "PLAIN"
        properties["sasl.mechanism.controller.protocol"] = "PLAIN"
        properties["listener.name.controller.plain.sasl.jaas.config"] = (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            'username="broker" password="broker-secret" user_broker="broker-secret";'
        )
    client = {
        "security.protocol": protocol,
        "sasl.mechanism": MECHANISM,
        "sasl.username": "admin",
        "sasl.password": "admin-secret",
    }
    if protocol == "SASL_SSL":
        properties.update(
            {
                "ssl.keystore.type": "PEM",
                "ssl.keystore.location": str(certs.server.keystore_pem),
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(certs.ca),
            }
        )
        client["ssl.ca.location"] = str(certs.ca)
    workdir = tmp_path_factory.mktemp(f"sasl-quorum-{request.param.lower()}")
    with Quorum(workdir, properties=properties, format_args=SCRAM) as running:
        yield running, client


def test_replication_and_raft_log_in_with_sasl(quorum: tuple[Quorum, dict[str, str]]) -> None:
    running, client = quorum
    conf = {"bootstrap.servers": running.bootstrap, **client}
    topic = f"sasl-rf3-{uuid.uuid4().hex[:6]}"
    admin = AdminClient(conf)
    # three partitions: their leaders are spread over the nodes, so transaction markers
    # and AddPartitionsToTxn verification go from node to node
    admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(30)  # through the controller
    producer = Producer({**conf, "acks": "all"})
    for i in range(20):
        producer.produce(topic, b"v%d" % i, partition=i % 3)
    assert producer.flush(30) == 0  # acks=all: both followers fetched, logged in as broker
    deadline = time.monotonic() + 20
    partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
    while any(len(p.isrs) < 3 for p in partitions.values()) and time.monotonic() < deadline:
        time.sleep(0.2)
        partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
    assert all(sorted(p.isrs) == [1, 2, 3] for p in partitions.values())
    assert len({p.leader for p in partitions.values()}) > 1, partitions
    transactional = Producer({**conf, "transactional.id": topic})
    transactional.init_transactions(30)
    transactional.begin_transaction()
    for i in range(20, 26):
        transactional.produce(topic, b"v%d" % i, partition=i % 3)
    transactional.commit_transaction(30)
    consumer = Consumer(
        {
            **conf,
            "group.id": topic,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([topic])
    values: list[bytes] = []
    try:
        while len(values) < 26 and time.monotonic() < deadline + 30:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    assert sorted(values) == sorted(b"v%d" % i for i in range(26))
    for node in running.nodes.values():
        log = node.log()
        for needle in ("Authentication failed", "authentication failed", "no such credential"):
            assert needle not in log, log[-3000:]


def _describe_quorum_v0() -> bytes:
    """DescribeQuorum v0 for __cluster_metadata-0 (request header v1, no client id)."""
    name = b"__cluster_metadata"
    body = struct.pack(">i", 1) + struct.pack(">h", len(name)) + name
    body += struct.pack(">ii", 1, 0)
    header = struct.pack(">hhih", 55, 0, 7, -1)
    return struct.pack(">i", len(header) + len(body)) + header + body


def test_the_controller_listener_refuses_a_client_without_credentials(
    quorum: tuple[Quorum, dict[str, str]], certs: Certs
) -> None:
    """What the quorum above ran over: its controller listeners serve nothing before
    SASL (so Raft and the brokers' controller clients did log in)."""
    running, client = quorum
    node_id = running.controller_ids[0]
    raw = socket.create_connection(("127.0.0.1", running.controller_ports[node_id]), 5)
    sock: socket.socket = raw
    if client["security.protocol"] == "SASL_SSL":
        import ssl

        context = ssl.create_default_context(cafile=str(certs.ca))
        context.check_hostname = False
        sock = context.wrap_socket(raw)
    with sock:
        sock.sendall(_describe_quorum_v0())
        sock.settimeout(5)
        assert sock.recv(1024) == b""  # closed, never answered
    deadline = time.monotonic() + 5
    needle = "Unexpected Kafka request of type 55 v0 during SASL handshake on listener CONTROLLER"
    while needle not in running.nodes[node_id].log():
        assert time.monotonic() < deadline, running.nodes[node_id].log()[-2000:]
        time.sleep(0.1)
