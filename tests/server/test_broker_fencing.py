"""Broker registration, heartbeats and fencing on three combined ``odradek serve`` nodes.

The cluster is test_kraft_cluster.py's (Kafka-style properties, ``storage format``),
with short heartbeats (``broker.heartbeat.interval.ms=200``) and a short session
(``broker.session.timeout.ms=2000``). Every node registers with the active controller
and is unfenced before it prints its ready line, so each node's Metadata lists all
three (asked with confluent-kafka and kafka-python), and each RegisterBroker record
in the metadata log carries an incarnation id and a broker epoch (its offset). A node
paused with SIGSTOP stops heartbeating: past the session timeout the active
controller fences it and it disappears from the Metadata of the other two, and a
replication factor of 3 is then INVALID_REPLICATION_FACTOR; after SIGCONT its next
heartbeat unfences it and it reappears. The zero-config node registers in-process,
and again at once after kill -9. Hostile registrations and heartbeats on a controller
listener get Kafka's error codes. Every process is stopped by the test, by pid.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient
from kio.schema.broker_heartbeat.v1.request import BrokerHeartbeatRequest
from kio.schema.broker_registration.v4.request import BrokerRegistrationRequest, Listener
from kio.schema.errors import ErrorCode

from tests.server.test_kraft_cluster import TIMEOUTS, quorum_status
from tests.support.broker import BrokerProcess
from tests.support.kraft import NODE_IDS, Quorum, odradek
from tests.support.wire import WireClient

HEARTBEAT_MS = 200
SESSION_MS = 2000
WAIT_S = 40.0  # generous: two cores shared with other test runs


@contextlib.contextmanager
def fast_heartbeat_cluster(tmp_path: Path) -> Iterator[dict[int, BrokerProcess]]:
    heartbeats = {
        **TIMEOUTS,
        "broker.heartbeat.interval.ms": str(HEARTBEAT_MS),
        "broker.session.timeout.ms": str(SESSION_MS),
    }
    quorum = Quorum(tmp_path, properties=heartbeats)
    try:
        yield quorum.start().nodes
    finally:
        for node in quorum.nodes.values():
            if node.alive():  # a test may leave one paused: stop cannot reach it then
                with contextlib.suppress(ProcessLookupError):
                    os.kill(node.pid, signal.SIGCONT)
        quorum.close()


def confluent_brokers(node: BrokerProcess) -> set[int]:
    admin = AdminClient({"bootstrap.servers": node.bootstrap, "socket.timeout.ms": 5000})
    return set(admin.list_topics(timeout=10).brokers)


def kafka_python_brokers(node: BrokerProcess) -> dict[int, bool]:
    """DescribeCluster v2 with include_fenced_brokers (kafka-python asks for them):
    broker id -> is_fenced."""
    admin = KafkaAdminClient(bootstrap_servers=node.bootstrap, request_timeout_ms=10000)
    try:
        return {b["broker_id"]: b["is_fenced"] for b in admin.describe_cluster()["brokers"]}
    finally:
        admin.close()


def eventually(what: str, check: Callable[[], bool], timeout_s: float = WAIT_S) -> None:
    """Until ``check()`` holds; a client error (a slow answer under load) counts as not yet."""
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while True:
        try:
            if check():
                return
        except KafkaException as error:
            last = error
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what} ({last})"
        time.sleep(0.2)


def metadata_records(node: BrokerProcess) -> list[tuple[int, dict[str, Any]]]:
    """(offset, decoded record) of every metadata record in ``node``'s first segment."""
    segment = node.data_dir / "__cluster_metadata-0" / "00000000000000000000.log"
    dumped = odradek("dump-log", "--cluster-metadata-decoder", "--print-data-log", str(segment))
    assert dumped.returncode == 0, dumped.stderr
    records = []
    for line in dumped.stdout.splitlines():
        if " payload: {" in line:
            offset = int(line.split("offset: ", 1)[1].split()[0])
            records.append((offset, json.loads(line.split(" payload: ", 1)[1])))
    return records


def test_brokers_register_are_fenced_when_silent_and_unfenced_when_back(tmp_path: Path) -> None:
    with fast_heartbeat_cluster(tmp_path) as nodes:
        everyone = set(NODE_IDS)
        for node in nodes.values():
            eventually(
                f"all brokers in node {node.bootstrap}'s Metadata",
                lambda node=node: confluent_brokers(node) == everyone,
            )
            assert kafka_python_brokers(node) == dict.fromkeys(everyone, False)

        # Each registration carries an incarnation id; its epoch is its offset, and the
        # controller unfenced each (the ready line waited for it).
        records = metadata_records(nodes[1])
        registered = {
            r["data"]["broker_id"]: (offset, r["data"])
            for offset, r in records
            if r["type"] == "RegisterBroker"
        }
        assert set(registered) == everyone
        assert all(d["fenced"] and d["incarnation_id"] for _, d in registered.values())
        assert len({d["incarnation_id"] for _, d in registered.values()}) == 3
        unfenced = {
            r["data"]["broker_id"]: r["data"]["broker_epoch"]
            for _, r in records
            if r["type"] == "UnfenceBroker"
        }
        # the broker epoch is the offset of the broker's RegisterBroker record
        assert unfenced == {broker_id: offset for broker_id, (offset, _) in registered.items()}

        status = quorum_status(nodes[1])
        assert status is not None
        leader = int(status["LeaderId"])
        paused_id = next(i for i in NODE_IDS if i != leader)
        paused = nodes[paused_id]
        others = [n for i, n in nodes.items() if i != paused_id]

        os.kill(paused.pid, signal.SIGSTOP)
        try:
            for node in others:
                eventually(
                    f"broker {paused_id} fenced, as seen from {node.bootstrap}",
                    lambda node=node: confluent_brokers(node) == everyone - {paused_id},
                )
                assert kafka_python_brokers(node)[paused_id] is True  # listed, as fenced
            # Placement sees two live brokers: replication factor 3 is refused.
            admin = AdminClient({"bootstrap.servers": nodes[leader].bootstrap})
            future = admin.create_topics([NewTopic("three-copies", 1, 3)])["three-copies"]
            try:
                future.result(timeout=20)
                raise AssertionError("a replication factor above the live brokers was accepted")
            except KafkaException as error:
                assert error.args[0].name() == "INVALID_REPLICATION_FACTOR", error
            assert "fenced broker(s) " + str(paused_id) in nodes[leader].log()
        finally:
            os.kill(paused.pid, signal.SIGCONT)

        for node in nodes.values():
            eventually(
                f"broker {paused_id} unfenced again, as seen from {node.bootstrap}",
                lambda node=node: confluent_brokers(node) == everyone,
            )
        assert "Traceback" not in "".join(n.log() for n in nodes.values())


def test_the_zero_config_node_registers_in_process_and_again_after_kill_9(
    tmp_path: Path,
) -> None:
    """The single node registers with its own controller (no controller listener) and
    is unfenced before it is ready; after kill -9 its new incarnation takes its id at
    once (the old one was this node's own process), not after a session timeout."""
    node = BrokerProcess(tmp_path / "single")
    try:
        node.start()
        assert confluent_brokers(node) == {1}
        node.kill()
        node.start()
        assert confluent_brokers(node) == {1}
        assert node.stop() == 0  # controlled shutdown: fenced on the way out
        log = node.log()
        assert log.count("broker 1 registered with broker epoch") == 2
        assert "DUPLICATE_BROKER_REGISTRATION" not in log and "Traceback" not in log
        records = [r for _, r in metadata_records(node)]
        kinds = [r["type"] for r in records if r["type"].endswith("Broker")]
        assert kinds == [
            "RegisterBroker",
            "UnfenceBroker",
            "RegisterBroker",  # the restart: a new incarnation and epoch
            "UnfenceBroker",
            "FenceBroker",  # the controlled shutdown
        ]
    finally:
        node.kill()


def test_hostile_registrations_and_heartbeats_get_error_codes(tmp_path: Path) -> None:
    """On a one-voter quorum's controller listener: another cluster, an oversized or
    malformed registration, heartbeats of unknown brokers and stale epochs, and a
    registration of a live broker's id by another incarnation are error codes; the node
    keeps serving and logs no traceback."""
    quorum = Quorum(tmp_path, node_ids=(1,), properties=TIMEOUTS)
    cluster_id = quorum.cluster_id
    node = quorum.nodes[1]
    try:
        node.start()

        def registration(broker_id: int, cluster: str, listeners: int = 1) -> Any:
            return BrokerRegistrationRequest(
                broker_id=broker_id,
                cluster_id=cluster,
                incarnation_id=uuid.uuid4(),
                listeners=tuple(
                    Listener(name=f"L{i}", host="h", port=1 + i, security_protocol=0)
                    for i in range(listeners)
                ),
                features=(),
                rack=None,
            )

        def heartbeat(broker_id: int, epoch: int) -> Any:
            return BrokerHeartbeatRequest(
                broker_id=broker_id,
                broker_epoch=epoch,
                current_metadata_offset=10**12,
                want_fence=False,
                want_shut_down=False,
            )

        with WireClient(f"127.0.0.1:{quorum.controller_ports[1]}") as client:
            cases = [
                (registration(7, "another-cluster"), ErrorCode.inconsistent_cluster_id),
                (registration(7, cluster_id, listeners=1000), ErrorCode.invalid_request),
                (registration(-5, cluster_id), ErrorCode.invalid_request),
                (registration(1, cluster_id), ErrorCode.duplicate_broker_registration),
                (heartbeat(42, 0), ErrorCode.broker_id_not_registered),
                (heartbeat(1, 10**15), ErrorCode.stale_broker_epoch),
            ]
            for request, expected in cases:
                assert client.request(request).error_code == expected, request
            # a stranger registered (fenced) does not become a broker of the cluster
            assert client.request(registration(9, cluster_id)).error_code == ErrorCode.none
        assert confluent_brokers(node) == {1}
        assert node.stop() == 0
        assert "Traceback" not in node.log()
    finally:
        node.kill()
