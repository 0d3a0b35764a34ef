"""process.roles over real processes: dedicated controllers, broker-only observers, and a
node that catches up by FetchSnapshot.

- Three controller-only and two broker-only nodes, from ``config/cluster/dedicated``
  (their addresses and dirs replaced by free ones): the quorum elects among the
  controllers only; both brokers register and appear in Metadata (confluent-kafka,
  kcat -L), the controllers do not; Metadata names a broker as controller (Kafka's
  KRaft brokers do: clients cannot reach controller listeners), so kafka-python's
  CreateTopics goes to a broker, which forwards it; ``metadata-quorum --bootstrap-server <broker>``
  lists the brokers as observers (forwarded DescribeQuorum); a controller listener's
  DescribeCluster (KIP-919) lists the controllers; CreateTopics through a broker works
  and a real client produces and consumes on it; after kill -9 of the active
  controller a new one is elected among the other controllers and creation through a
  broker still works.
- Three combined nodes and one broker-only observer: the observer is in Metadata and
  in ``CurrentObservers``, placement uses it, and it serves its partitions.
- Snapshot catch-up: a stopped node falls behind the leader's log start (a small
  ``metadata.log.max.record.bytes.between.snapshots``); restarted, it receives the
  leader's checkpoint file, logs it, and its Metadata shows every topic.

Every process is stopped by pid (``Quorum.close``).
"""

from __future__ import annotations

import asyncio
import gc
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient
from kafka.admin import NewTopic as KafkaNewTopic

from odradek.cli.metadata_quorum import describe, describe_through_brokers
from odradek.raft.snapshots import SNAPSHOT_SUFFIX
from tests.support.kraft import HOST, Quorum

QUIET = {"log_level": 0}
EXAMPLES = Path(__file__).resolve().parents[2] / "config" / "cluster" / "dedicated"
FAST = {
    "controller.quorum.election.timeout.ms": "500",
    "controller.quorum.fetch.timeout.ms": "2000",
}
WAIT_S = 60.0


def eventually(what: str, check: Callable[[], object], timeout_s: float = WAIT_S) -> object:
    """``check()``'s first truthy value; exceptions count as not yet (clients reconnect)."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except Exception as error:
            last = f"{type(error).__name__}: {error}"
        else:
            if last:
                return last
        finally:
            gc.collect()  # librdkafka handles close their sockets
        time.sleep(0.3)
    raise AssertionError(f"{what}: not within {timeout_s} s (last: {last!r})")


def metadata_brokers(bootstrap: str) -> set[int]:
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    return set(admin.list_topics(timeout=10).brokers)


def kcat_brokers(bootstrap: str) -> set[int]:
    listing = subprocess.run(
        ["kcat", "-L", "-b", bootstrap, "-m", "10"], capture_output=True, text=True, timeout=30
    )
    return {int(n) for n in re.findall(r"broker (\d+) at ", listing.stdout)}


def metadata_quorum(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "odradek", "metadata-quorum", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def replication_statuses(broker: str) -> dict[int, str]:
    out = metadata_quorum("--bootstrap-server", broker, "describe", "--replication")
    rows = [line.split() for line in out.splitlines()[1:]]
    return {int(row[0]): row[-1] for row in rows}


def create_topic(bootstrap: str, name: str, partitions: int, replication: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    futures = admin.create_topics(
        [NewTopic(name, partitions, replication)], request_timeout=30, operation_timeout=30
    )
    futures[name].result(timeout=40)


def produce_and_consume(bootstrap: str, topic: str, values: Iterable[bytes]) -> None:
    sent = list(values)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, **QUIET})
    for value in sent:
        producer.produce(topic, value)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"roles-{topic}",
            "auto.offset.reset": "earliest",
            **QUIET,
        }
    )
    try:
        consumer.subscribe([topic])
        got: list[bytes] = []
        deadline = time.monotonic() + WAIT_S
        while len(got) < len(sent) and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                got.append(message.value())
        assert sorted(got) == sorted(sent)
    finally:
        consumer.close()


# config/cluster/dedicated: controllers 1-3, broker-only observers 4 and 5
DEDICATED = pytest.mark.quorum(
    node_ids=(1, 2, 3, 4, 5),
    properties=FAST,
    roles={n: "controller" for n in (1, 2, 3)} | {n: "broker" for n in (4, 5)},
    templates={n: EXAMPLES / f"controller-{n}.properties" for n in (1, 2, 3)}
    | {n: EXAMPLES / f"broker-{n}.properties" for n in (4, 5)},
)


@DEDICATED
def test_dedicated_controllers_and_broker_only_observers(quorum: Quorum) -> None:
    leader, epoch = quorum.wait_for_leader(30)
    assert leader in (1, 2, 3)
    # The controllers listen only as controllers; the brokers only for clients.
    assert set(quorum.nodes[1].urls) == {"CONTROLLER"}
    assert set(quorum.nodes[4].urls) == {"PLAINTEXT"}
    for broker in (4, 5):
        address = quorum.broker_address(broker)
        eventually("both brokers in Metadata", lambda a=address: metadata_brokers(a) == {4, 5})
    if shutil.which("kcat") is not None:
        assert eventually("kcat -L", lambda: kcat_brokers(quorum.bootstrap) == {4, 5})
    # The controllers' DescribeCluster (KIP-919) names the controllers.
    assert set(describe_controllers(quorum)) == {1, 2, 3}

    statuses = eventually(
        "both brokers observed",
        lambda: (
            (s := replication_statuses(quorum.broker_address(5)))
            and {n for n, st in s.items() if st == "Observer"} == {4, 5}
            and s
        ),
    )
    assert isinstance(statuses, dict)
    assert statuses[leader] == "Leader"
    assert {n for n, st in statuses.items() if st == "Follower"} == {1, 2, 3} - {leader}
    status = metadata_quorum("--bootstrap-server", quorum.broker_address(4), "describe", "--status")
    assert f"LeaderId:               {leader}" in status
    assert '"id": 4' in status.split("CurrentObservers:")[1]

    # kafka-python's admin client sends CreateTopics to the controller Metadata
    # names: a broker here (the controllers are unreachable to clients), which
    # forwards it.
    admin_kp = KafkaAdminClient(
        bootstrap_servers=[quorum.broker_address(4)], request_timeout_ms=30_000
    )
    try:
        assert admin_kp.describe_cluster()["controller_id"] in (4, 5)
        admin_kp.create_topics([KafkaNewTopic("via-kafka-python", 1, 2)])
    finally:
        admin_kp.close()
    create_topic(quorum.broker_address(5), "dedicated", 2, 2)
    eventually(
        "kafka-python's topic on broker 5",
        lambda: (
            "via-kafka-python"
            in AdminClient({"bootstrap.servers": quorum.broker_address(5), **QUIET})
            .list_topics(timeout=10)
            .topics
        ),
    )
    produce_and_consume(quorum.bootstrap, "dedicated", [b"a", b"b", b"c", b"d"])

    quorum.kill(leader)
    others = [n for n in (1, 2, 3) if n != leader]
    new_leader, new_epoch = quorum.wait_for_leader(30, frozenset({leader}), others)
    assert new_leader in others and new_epoch > epoch
    eventually(
        "creation through a broker after the kill",
        lambda: create_topic(quorum.broker_address(4), "after-kill", 1, 2) or True,
    )
    admin = AdminClient({"bootstrap.servers": quorum.broker_address(5), **QUIET})
    eventually(
        "the topic on the other broker",
        lambda: "after-kill" in admin.list_topics(timeout=10).topics,
    )
    # The controller's restart: it rejoins as a follower, the leader unchanged.
    quorum.start_node(leader)
    assert quorum.wait_for_leader(30)[0] == new_leader
    # SIGTERM: a broker-only and a controller-only node stop cleanly (exit 0).
    assert quorum.stop(5) == 0
    assert quorum.stop(leader) == 0
    for node in (5, leader):
        assert "Traceback" not in quorum.nodes[node].log()


def describe_controllers(quorum: Quorum) -> list[int]:
    described = asyncio.run(describe([(HOST, quorum.controller_ports[1])]))
    return sorted(described.endpoints)


@pytest.mark.quorum(node_ids=(1, 2, 3, 4), properties=FAST, roles={4: "broker"})
def test_combined_quorum_with_a_broker_only_observer(quorum: Quorum) -> None:
    leader, _ = quorum.wait_for_leader(30)
    assert leader in (1, 2, 3)
    observer = quorum.broker_address(4)
    eventually("all four brokers", lambda: metadata_brokers(observer) == {1, 2, 3, 4})
    quorum_state = eventually(
        "node 4 observed",
        lambda: (q := _describe(observer)) and [o.node_id for o in q.observers] == [4] and q,
    )
    assert sorted(v.node_id for v in quorum_state.voters) == [1, 2, 3]
    # An observer follows and never stands for election.
    log = quorum.nodes[4].log()
    assert "-> Follower" in log
    assert "Prospective" not in log and "Candidate" not in log
    # Placement spreads over all four unfenced brokers; the observer serves its share.
    create_topic(observer, "spread", 4, 1)
    admin = AdminClient({"bootstrap.servers": observer, **QUIET})
    topic = admin.list_topics("spread", timeout=10).topics["spread"]
    assert {p.leader for p in topic.partitions.values()} == {1, 2, 3, 4}
    produce_and_consume(quorum.bootstrap, "spread", [b"%d" % i for i in range(20)])


def _describe(bootstrap: str) -> Any:
    host, port = bootstrap.rsplit(":", 1)
    return asyncio.run(describe_through_brokers([(host, int(port))]))


def _snapshot_offsets(directory: Path) -> list[int]:
    return sorted(int(p.name.split("-")[0]) for p in directory.glob("*" + SNAPSHOT_SUFFIX))


@pytest.mark.quorum(properties={**FAST, "metadata.log.max.record.bytes.between.snapshots": "4096"})
def test_a_node_far_behind_catches_up_by_fetch_snapshot(quorum: Quorum) -> None:
    leader, _ = quorum.wait_for_leader(30)
    behind = next(n for n in quorum.node_ids if n != leader)
    assert quorum.stop(behind) == 0
    # What the stopped node can hold at most: the leader's log end now.
    before = _describe(quorum.broker_address(leader))
    bound = max(v.log_end_offset for v in before.voters)
    metadata = quorum.data_dir(leader) / "__cluster_metadata-0"
    names = []
    for round_ in range(40):
        batch = [f"behind-{round_}-{i}" for i in range(5)]
        admin = AdminClient({"bootstrap.servers": quorum.broker_address(leader), **QUIET})
        futures = admin.create_topics([NewTopic(name, 1, 1) for name in batch])
        for future in futures.values():
            future.result(timeout=40)
        names += batch
        offsets = _snapshot_offsets(metadata)
        # Two snapshots kept past the stopped node's end: the leader's log start
        # (the older one's end) is past it.
        if len(offsets) >= 2 and offsets[0] > bound:
            break
    else:
        raise AssertionError(f"the leader's snapshots {offsets} never passed {bound}")
    leader_snapshots = {p.name for p in metadata.glob("*" + SNAPSHOT_SUFFIX)}

    quorum.start_node(behind)
    own = quorum.data_dir(behind) / "__cluster_metadata-0"
    received = {p.name for p in own.glob("*" + SNAPSHOT_SUFFIX)} & leader_snapshots
    assert any(int(name.split("-")[0]) > bound for name in received), (received, bound)
    log = quorum.nodes[behind].log()
    assert "caught up by the leader's metadata snapshot" in log
    admin = AdminClient({"bootstrap.servers": quorum.broker_address(behind), **QUIET})
    topics = admin.list_topics(timeout=10).topics
    assert set(names) <= set(topics)


@pytest.mark.parametrize("roles", ["broker", "controller"])
def test_a_dedicated_node_without_voters_is_refused(tmp_path: Path, roles: str) -> None:
    config = tmp_path / "node.properties"
    listeners = "PLAINTEXT://127.0.0.1:0" if roles == "broker" else "CONTROLLER://127.0.0.1:0"
    config.write_text(
        f"process.roles={roles}\nnode.id=7\nlisteners={listeners}\n"
        f"controller.listener.names=CONTROLLER\nlog.dirs={tmp_path / 'data'}\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "odradek", "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "needs controller.quorum.voters" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
