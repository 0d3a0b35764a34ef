"""A three-node cluster for the replication tests with real clients, and what they ask it.

How this works and why: each test module runs one cluster of three combined
``odradek serve`` processes started from the example Kafka-style property files
(``config/cluster/node{1,2,3}.properties``, their addresses and dirs replaced by free
ones, tests/support/kraft.py), with Kafka's timeouts made short so a failover takes
seconds: ``broker.session.timeout.ms`` (a killed broker is fenced, its partitions get
new leaders) and ``replica.lag.time.max.ms`` (a stalled follower leaves the ISR).
Tests kill, pause and restart nodes; ``revive`` brings every node back between tests
so each starts from a whole cluster. The partition state a test waits for is read the
way a client reads it (confluent-kafka's Metadata: leader, replicas, ISR), and broker
logs are attached to a failing test's report by the module's fixture.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from confluent_kafka.admin import AdminClient, NewTopic, PartitionMetadata
from kio.schema.errors import ErrorCode

from tests.groups.wire import find_coordinator
from tests.support.kraft import NODE_IDS, Quorum
from tests.support.wire import WireClient

EXAMPLES = Path(__file__).resolve().parents[2] / "config" / "cluster"
# A lagging follower leaves the ISR (the leader's AlterPartition) well before a paused
# broker is fenced (the controller's own ISR change), so a test can tell them apart.
SESSION_TIMEOUT_MS = 4000
LAG_TIME_MAX_MS = 1500
PROPERTIES = {
    "broker.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    "broker.heartbeat.interval.ms": "300",
    "replica.lag.time.max.ms": str(LAG_TIME_MAX_MS),
    "controller.quorum.election.timeout.ms": "500",
    "controller.quorum.fetch.timeout.ms": "2000",
    "auto.leader.rebalance.enable": "false",
    "offsets.topic.num.partitions": "3",
    "offsets.topic.replication.factor": "3",
}
QUIET = {"log_level": 0}
WAIT_S = 60.0
T = TypeVar("T")


def cluster(workdir: Path) -> Quorum:
    """Three nodes from the example property files (not started)."""
    return Quorum(
        workdir,
        properties=PROPERTIES,
        templates={n: EXAMPLES / f"node{n}.properties" for n in NODE_IDS},
    )


def eventually(what: str, check: Callable[[], T | None], timeout_s: float = WAIT_S) -> T:
    """``check()``'s first truthy value; exceptions count as not yet (clients reconnect)."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
            last = value
        except Exception as error:
            last = error
        time.sleep(0.2)
    raise AssertionError(f"timed out ({timeout_s} s) waiting for {what}: {last!r}")


def admin(quorum: Quorum) -> AdminClient:
    return AdminClient({"bootstrap.servers": quorum.bootstrap, **QUIET})


def partitions(client: AdminClient, topic: str) -> dict[int, PartitionMetadata]:
    metadata = client.list_topics(topic, timeout=10)
    found = metadata.topics[topic]
    if found.error is not None:
        raise AssertionError(f"{topic}: {found.error}")
    return dict(found.partitions)


def create_topic(
    client: AdminClient,
    topic: str,
    *,
    count: int = 1,
    replication_factor: int = 3,
    assignment: list[list[int]] | None = None,
    config: dict[str, str] | None = None,
) -> None:
    new = (
        NewTopic(topic, len(assignment), -1, replica_assignment=assignment, config=config or {})
        if assignment is not None
        else NewTopic(topic, count, replication_factor, config=config or {})
    )
    client.create_topics([new], operation_timeout=30)[topic].result(timeout=40)


def in_sync(client: AdminClient, topic: str, size: int = 3) -> dict[int, PartitionMetadata]:
    """Every partition led, with ``size`` replicas all in the ISR, or {} (not yet)."""
    state = partitions(client, topic)
    whole = all(
        p.leader >= 0 and len(p.replicas) == size and sorted(p.isrs) == sorted(p.replicas)
        for p in state.values()
    )
    return state if state and whole else {}


def wait_in_sync(client: AdminClient, topic: str, size: int = 3) -> dict[int, PartitionMetadata]:
    return eventually(f"{topic} fully in sync", lambda: in_sync(client, topic, size))


def leader_of(client: AdminClient, topic: str, partition: int = 0) -> int:
    return int(partitions(client, topic)[partition].leader)


def wait_new_leader(client: AdminClient, topic: str, old: int, partition: int = 0) -> int:
    """The partition's leader once it is a live node other than ``old``."""

    def moved() -> int | None:
        leader = leader_of(client, topic, partition)
        return leader if leader not in (old, -1) else None

    # fencing takes the session timeout; the margin is for a loaded 2-core machine
    return eventually(f"a new leader of {topic}-{partition}", moved, SESSION_TIMEOUT_MS / 1000 + 30)


def kill_leader_and_return(client: AdminClient, quorum: Quorum, topic: str) -> tuple[int, int]:
    """kill -9 the leader of ``topic``-0, wait for its successor, restart it and wait
    until it is back in every ISR of the topic. Returns (killed, successor)."""
    victim = leader_of(client, topic)
    quorum.kill(victim)
    successor = wait_new_leader(client, topic, victim)
    quorum.start_node(victim)
    wait_in_sync(client, topic)
    return victim, successor


def revive(quorum: Quorum) -> None:
    """Every node running and unpaused (a test that failed midway may leave one down)."""
    for node_id, node in quorum.nodes.items():
        if node.alive():
            os.kill(node.pid, signal.SIGCONT)
        else:
            quorum.start_node(node_id)


def coordinator_of(quorum: Quorum, group: str) -> int:
    """The node FindCoordinator names for ``group`` (asked of any live node)."""

    def ask() -> int | None:
        for node_id, node in quorum.nodes.items():
            if not node.alive():
                continue
            with WireClient(quorum.broker_address(node_id), timeout_s=10) as client:
                ((_, coordinator, _, _, error),) = find_coordinator(client, 3, [group])
            if error is ErrorCode.none:
                return int(coordinator)
        return None

    return eventually(f"a coordinator for {group}", ask)


def logs_tail(quorum: Quorum, chars: int = 3000) -> str:
    return "\n".join(f"--- node {n} ---\n{node.log()[-chars:]}" for n, node in quorum.nodes.items())


def describe(state: dict[int, Any]) -> str:
    return ", ".join(
        f"{i}: leader {p.leader} replicas {p.replicas} isr {p.isrs}" for i, p in state.items()
    )
