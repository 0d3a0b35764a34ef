"""Replication throttles (KIP-73) on three ``odradek serve`` processes.

A topic's one partition lives on broker 1 with ~5 MB of records. ``odradek
reassign-partitions --execute --throttle 100000`` adds a replica on broker 2: the tool
sets ``leader.replication.throttled.rate`` and ``follower.replication.throttled.rate``
on brokers 1 and 2 and the topic's ``leader.replication.throttled.replicas`` = ``0:1``
(the sender) and ``follower.replication.throttled.replicas`` = ``0:2`` (the receiver),
as DescribeConfigs from confluent-kafka's AdminClient shows. The rate is measured over
11 one-second windows and counted over at least 10 s, so the copy goes in bursts: a
fetch (up to ``replica.fetch.max.bytes``, 1 MiB) passes while the rate is at or below
the bound, so about 2 MB go at once and the next ones when those windows age out 11 s
later. Three seconds after the start broker 2 holds at most that first burst and
``--verify`` says the move is still in progress. Measured on this machine: the 5.2 MB
copy took 24.6 s at 100 KB/s (2.0 MB at 3 s, 4.0 MB at 14 s), 1.2 s unthrottled
(tool start included). ``--execute --additional
--throttle 50000000`` raises the rate of the running move, as Kafka's tool does; the
replica catches up, joins the ISR, ``--verify`` reports the move completed and clears
every throttle (the rates gone from both brokers, the lists from the topic), and the
two replicas are byte-identical.

A real client sets the broker config itself: confluent-kafka's AdminClient
IncrementalAlterConfigs puts ``leader.replication.throttled.rate`` on broker 3 (a
DYNAMIC_BROKER_CONFIG in DescribeConfigs) and deletes it again; a negative rate is
refused with INVALID_REQUEST and a bad throttled-replicas list with INVALID_CONFIG.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)

from tests.server.test_kraft_reassignment import reassign, wait_until, write_plan
from tests.support.kraft import Quorum, odradek

TOPIC = "moving"  # write_plan's topic
RECORD = 1024
RECORDS = 5000  # ~5 MB
PROPERTIES = {
    "broker.session.timeout.ms": "6000",
    "broker.heartbeat.interval.ms": "300",
    "auto.leader.rebalance.enable": "false",
}
RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
LISTS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")

pytestmark = [pytest.mark.slow, pytest.mark.quorum(properties=PROPERTIES)]


def log_bytes(quorum: Quorum, node_id: int) -> int:
    directory = quorum.data_dir(node_id) / f"{TOPIC}-0"
    return sum(p.stat().st_size for p in directory.glob("*.log")) if directory.is_dir() else 0


def configs(admin: AdminClient, kind: ResourceType, name: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource(kind, name)
    return dict(admin.describe_configs([resource])[resource].result(timeout=30))


def dynamic(admin: AdminClient, kind: ResourceType, name: str, keys: tuple[str, ...]) -> dict:
    """The keys set on the resource itself (not defaults), with their values."""
    found = configs(admin, kind, name)
    wanted = {
        ConfigSource.DYNAMIC_BROKER_CONFIG.value,
        ConfigSource.DYNAMIC_TOPIC_CONFIG.value,
    }
    return {k: found[k].value for k in keys if k in found and found[k].source in wanted}


def produce(bootstrap: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20})
    failures: list[object] = []

    def delivered(error: object, _message: object) -> None:
        if error is not None:
            failures.append(error)

    for _ in range(RECORDS):
        producer.produce(TOPIC, os.urandom(RECORD), on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(60) == 0 and failures == []


def test_a_throttled_reassignment_moves_at_the_rate_until_raised(
    tmp_path: Path, quorum: Quorum
) -> None:
    admin = AdminClient({"bootstrap.servers": quorum.bootstrap})
    created = admin.create_topics([NewTopic(TOPIC, 1, -1, replica_assignment=[[1]])])
    created[TOPIC].result(timeout=30)
    produce(quorum.bootstrap)
    total = log_bytes(quorum, 1)
    assert total > 5_000_000

    plan = write_plan(tmp_path / "plan.json", [1, 2])
    began = time.monotonic()
    out = throttled_execute(quorum, plan, 100_000)
    assert "The inter-broker throttle limit was set to 100000 B/s" in out
    assert out.splitlines()[-1] == f"Successfully started partition reassignment for {TOPIC}-0"
    for broker in ("1", "2"):
        assert dynamic(admin, ResourceType.BROKER, broker, RATES) == dict.fromkeys(RATES, "100000")
    assert dynamic(admin, ResourceType.TOPIC, TOPIC, LISTS) == {
        "leader.replication.throttled.replicas": "0:1",
        "follower.replication.throttled.replicas": "0:2",
    }
    assert dynamic(admin, ResourceType.BROKER, "3", RATES) == {}  # not involved

    # Three seconds in: the first burst at most (two fetches of up to 1 MiB; one
    # more burst per 10 s if this loaded machine took that long to get here).
    time.sleep(max(0.0, began + 3 - time.monotonic()))
    moved, elapsed = log_bytes(quorum, 2), time.monotonic() - began
    bursts = 1 + int(elapsed // 10)
    assert moved <= bursts * 2 * 1_048_576 + 100_000 and moved < total, (
        f"{moved} of {total} bytes moved in {elapsed:.1f} s at 100 KB/s"
    )
    status = reassign(quorum, "--verify", plan)
    assert f"Reassignment of partition {TOPIC}-0 is still in progress." in status
    assert "Clearing" not in status  # not done: the throttles stay
    assert dynamic(admin, ResourceType.TOPIC, TOPIC, LISTS) != {}

    out = throttled_execute(quorum, plan, 50_000_000, "--additional")
    assert "The inter-broker throttle limit was set to 50000000 B/s" in out
    assert dynamic(admin, ResourceType.BROKER, "1", RATES) == dict.fromkeys(RATES, "50000000")

    def completed() -> bool:
        return f"Reassignment of partition {TOPIC}-0 is completed." in reassign(
            quorum, "--verify", plan
        )

    wait_until(completed, 90, "the reassignment completed once the rate was raised")
    # --verify cleared everything it had set (the last call saw the move done).
    for broker in ("1", "2", "3"):
        assert dynamic(admin, ResourceType.BROKER, broker, RATES) == {}
    assert dynamic(admin, ResourceType.TOPIC, TOPIC, LISTS) == {}
    described = configs(admin, ResourceType.TOPIC, TOPIC)
    assert described["leader.replication.throttled.replicas"].value == ""
    metadata = admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions[0]
    assert sorted(metadata.replicas) == [1, 2] and sorted(metadata.isrs) == [1, 2]
    wait_until(
        lambda: quorum.segment_files(2, f"{TOPIC}-0") == quorum.segment_files(1, f"{TOPIC}-0"),
        30,
        "identical replicas",
    )
    for node in (1, 2, 3):
        assert "Traceback" not in quorum.nodes[node].log(), quorum.nodes[node].log()


def throttled_execute(quorum: Quorum, plan: Path, rate: int, *extra: str) -> str:
    done = odradek(
        "reassign-partitions",
        "--bootstrap-server",
        quorum.bootstrap,
        "--execute",
        "--reassignment-json-file",
        str(plan),
        "--throttle",
        str(rate),
        *extra,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_client_sets_and_deletes_the_broker_rate(quorum: Quorum) -> None:
    admin = AdminClient({"bootstrap.servers": quorum.bootstrap})

    def alter(
        kind: ResourceType, name: str, key: str, op: AlterConfigOpType, value: str | None
    ) -> None:
        entry = ConfigEntry(key, value, incremental_operation=op)
        resource = ConfigResource(kind, name, incremental_configs=[entry])
        admin.incremental_alter_configs([resource])[resource].result(timeout=30)

    rate = "leader.replication.throttled.rate"
    alter(ResourceType.BROKER, "3", rate, AlterConfigOpType.SET, "1048576")
    entry = configs(admin, ResourceType.BROKER, "3")[rate]
    assert entry.value == "1048576"
    assert entry.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    assert configs(admin, ResourceType.BROKER, "1")[rate].value == str(2**63 - 1)

    with pytest.raises(KafkaException) as refused:
        alter(ResourceType.BROKER, "3", rate, AlterConfigOpType.SET, "-5")
    assert refused.value.args[0].name() == "INVALID_REQUEST"

    created = admin.create_topics([NewTopic("t", 2, 1)])
    created["t"].result(timeout=30)
    with pytest.raises(KafkaException) as bad:
        alter(ResourceType.TOPIC, "t", LISTS[0], AlterConfigOpType.SET, "0-1")
    assert bad.value.args[0].name() == "INVALID_CONFIG"
    alter(ResourceType.TOPIC, "t", LISTS[0], AlterConfigOpType.SET, "*")
    alter(ResourceType.TOPIC, "t", LISTS[1], AlterConfigOpType.APPEND, "0:2")
    alter(ResourceType.TOPIC, "t", LISTS[1], AlterConfigOpType.APPEND, "1:3")
    assert dynamic(admin, ResourceType.TOPIC, "t", LISTS) == {
        LISTS[0]: "*",
        LISTS[1]: "0:2,1:3",
    }

    alter(ResourceType.BROKER, "3", rate, AlterConfigOpType.DELETE, None)
    entry = configs(admin, ResourceType.BROKER, "3")[rate]
    assert entry.value == str(2**63 - 1) and entry.source == ConfigSource.DEFAULT_CONFIG.value
    for node in (1, 2, 3):
        assert "Traceback" not in quorum.nodes[node].log()
