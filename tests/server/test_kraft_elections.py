"""Leader failover and preferred elections on three combined ``odradek serve`` processes.

kill -9 of a node: once its session expires (``broker.session.timeout.ms``), the active
controller fences it and, in the same commit, gives every partition it led a new
leader from the ISR and takes it out of the ISRs; a confluent-kafka AdminClient sees
the new leaders in Metadata, and a partition whose only replica was on the dead node
as offline (LEADER_NOT_AVAILABLE, leader -1). When the node returns it is unfenced and
brings its offline partition back. Preferred leadership comes back only once the
returned node is in sync again: its fetchers catch it up and the leaders propose it
for the ISR (AlterPartition, replica/isr.py), and ``odradek leader-election
--election-type PREFERRED`` then restores the spread. SIGTERM then moves the node's
leadership away before it exits (a controlled shutdown). Every process is stopped by
the test, by pid.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from tests.support.kraft import Quorum, odradek
from tests.support.wire import WireClient, cluster_metadata

T = TypeVar("T")
SESSION_TIMEOUT_MS = 3000
PROPERTIES = {
    "broker.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    "broker.heartbeat.interval.ms": "300",
    "auto.leader.rebalance.enable": "false",
}
# assignments: each node the preferred leader of one partition
SPREAD = {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}


pytestmark = pytest.mark.quorum(properties=PROPERTIES)


def wait_for(what: str, probe: Callable[[], T | None], timeout_s: float) -> T:
    deadline = time.monotonic() + timeout_s
    seen = None
    while time.monotonic() < deadline:
        seen = probe()
        if seen:
            return seen
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {timeout_s} s")


def partitions(admin: AdminClient, topic: str) -> dict[int, Any]:
    metadata = admin.list_topics(topic, timeout=10)
    return dict(metadata.topics[topic].partitions)


def leaders(admin: AdminClient, topic: str) -> dict[int, int]:
    return {index: p.leader for index, p in partitions(admin, topic).items()}


def test_kill_moves_leadership_and_preferred_election_restores_the_spread(
    quorum: Quorum,
) -> None:
    admin = AdminClient({"bootstrap.servers": quorum.bootstrap})
    controller = quorum.wait_for_leader(30)[0]
    victim = next(n for n in (3, 2, 1) if n != controller)
    futures = admin.create_topics(
        [
            NewTopic("spread", 3, replica_assignment=[SPREAD[i] for i in range(3)]),
            NewTopic("solo", 1, replica_assignment=[[victim]]),
        ]
    )
    for future in futures.values():
        future.result(timeout=30)
    wait_for("leaders spread", lambda: leaders(admin, "spread") == {0: 1, 1: 2, 2: 3}, 30)
    led = next(i for i, replicas in SPREAD.items() if replicas[0] == victim)

    quorum.kill(victim)
    began = time.monotonic()

    def moved() -> dict[int, Any] | None:
        now = partitions(admin, "spread")
        return now if now[led].leader not in (victim, -1) else None

    # within the session timeout (plus a margin for a loaded machine)
    state = wait_for("a new leader", moved, SESSION_TIMEOUT_MS / 1000 + 15)
    took = time.monotonic() - began
    successor = SPREAD[led][1]
    assert state[led].leader == successor, state[led]  # the next replica in the ISR
    assert victim not in state[led].isrs and victim not in state[(led + 1) % 3].isrs
    solo = partitions(admin, "solo")[0]
    assert solo.leader == -1 and solo.error is not None
    assert solo.error.code() == 5  # LEADER_NOT_AVAILABLE
    assert solo.isrs == [victim]  # the last ISR member stays: only it has the data
    # Metadata v12 on the wire: the dead node's replicas are offline_replicas
    survivor = next(n for n in quorum.broker_ids if n != victim)
    with WireClient(quorum.broker_address(survivor)) as client:
        answer = cluster_metadata(client, all_topics=True)
    wire = {t.name: {p.partition_index: p for p in t.partitions} for t in answer.topics}
    assert wire["solo"][0].error_code == ErrorCode.leader_not_available
    assert list(wire["solo"][0].offline_replicas) == [victim]
    assert list(wire["spread"][led].offline_replicas) == [victim]
    assert wire["spread"][led].error_code == ErrorCode.none
    assert wire["spread"][led].leader_epoch == 1  # one leader change
    print(f"leadership of spread-{led} moved from {victim} to {successor} in {took:.1f} s")

    quorum.start_node(victim)
    wait_for("the victim unfenced", lambda: victim in admin.list_topics(timeout=10).brokers, 30)
    wait_for("solo back", lambda: partitions(admin, "solo")[0].leader == victim, 30)
    assert leaders(admin, "spread")[led] == successor  # no change until asked

    # The victim's fetchers catch it up and its leaders propose it for the ISR again
    # (AlterPartition): no hand-made ISR change, the replication layer does it.
    wait_for(
        "the victim back in every ISR of spread",
        lambda: all(victim in p.isrs for p in partitions(admin, "spread").values()),
        60,
    )

    result = odradek(
        "leader-election",
        "--bootstrap-server",
        quorum.bootstrap,
        "--election-type",
        "PREFERRED",
        "--all-topic-partitions",
    )
    assert result.returncode == 0, result
    assert "Successfully completed leader election (PREFERRED) for partitions" in result.stdout
    assert f"spread-{led}" in result.stdout
    assert leaders(admin, "spread") == {0: 1, 1: 2, 2: 3}

    # SIGTERM: a controlled shutdown moves the leadership before the process exits
    assert quorum.stop(victim) == 0
    assert "controlled shutdown done" in quorum.nodes[victim].log()
    state = wait_for("moved on SIGTERM", moved, 30)
    assert state[led].leader == successor and victim not in state[led].isrs
