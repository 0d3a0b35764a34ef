"""confluent-kafka (librdkafka) transactions on a three-node KRaft cluster.

One cluster of three combined ``odradek serve`` processes for the module (the example
property files, short failover timeouts: tests/interop/cluster_support.py), with
``__transaction_state`` replicated three ways (``transaction.state.log.replication.factor``
=3, ``transaction.state.log.min.isr``=2). Data topics have RF=3 and one partition led
by each node, so a transaction's markers go to two remote leaders through
WriteTxnMarkers as well as to the coordinator's own; transactional ids and groups are
chosen by asking FindCoordinator (key type 1 and 0) so the transaction coordinator,
the group coordinator and the victims are the nodes a test wants.

- Commit and abort across leaders: committed transactions are visible to
  read_committed and the aborted one is not, read_uncommitted sees all three and never
  a control record; the offsets sent with each transaction (to a group coordinated by
  another node) are committed with the committed ones only.
- A node killed with SIGKILL mid-commit (the transaction coordinator's, or a data
  partition's leader that is not the coordinator), while three transactional
  producers (same coordinator) commit and abort back to back and a read_committed
  consumer reads: every transaction ends entirely visible or entirely invisible to
  read_committed, no record of an aborted one is ever handed out, every commit the
  producer was told succeeded is entirely visible, every commit/abort call returned
  (success or an error), the groups' offsets match the last visible transaction, and
  the producers go on committing after the failover (tests/chaos/txn_checks.py).
  The groups' coordinator is on a third node, never the victim: librdkafka's
  send_offsets_to_transaction can block past its timeout when the group coordinator's
  broker leaves the metadata (confluentinc/librdkafka#5456, #5511); the chaos harness,
  whose faults hit any node, gives such a call up (tests/chaos/txn_workload.py).

Every process is stopped by pid (the module's ``Quorum``).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as TP
from kio.schema.errors import ErrorCode

from tests.chaos.txn_checks import (
    COMMITTED,
    TxnHistory,
    TxnKey,
    check_transactions,
    decode_value,
    encode_value,
    summary,
)
from tests.chaos.txn_workload import (
    ReadCommittedReader,
    TransactionalRunner,
    group_offsets,
    read_topic,
    wait_stable,
)
from tests.groups.wire import find_coordinator
from tests.interop.cluster_support import (
    EXAMPLES,
    PROPERTIES,
    QUIET,
    admin,
    create_topic,
    eventually,
    logs_tail,
    partitions,
    revive,
    wait_in_sync,
)
from tests.support.kraft import NODE_IDS, Quorum
from tests.support.wire import WireClient

pytestmark = pytest.mark.slow

TXN_STATE = "__transaction_state"
TXN_PROPERTIES = {
    **PROPERTIES,
    "transaction.state.log.num.partitions": "6",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
}
# One partition led by each node (the first replica is the preferred leader).
ASSIGNMENT = [[1, 2, 3], [2, 3, 1], [3, 1, 2]]
TIMEOUT_S = 30.0
TRANSACTION = 1  # FindCoordinator key types
GROUP = 0


@pytest.fixture(scope="module")
def quorum(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Quorum]:
    running = Quorum(
        tmp_path_factory.mktemp("txn-cluster"),
        properties=TXN_PROPERTIES,
        templates={n: EXAMPLES / f"node{n}.properties" for n in NODE_IDS},
    ).start()
    try:
        yield running
    finally:
        running.close()


@pytest.fixture
def cluster(quorum: Quorum) -> Iterator[Quorum]:
    """The module's cluster with every node running and every internal partition in
    sync, before the test and after it (a test kills a node)."""
    revive(quorum)
    _coordinator_nodes(quorum, TRANSACTION)  # __transaction_state exists
    client = admin(quorum)
    wait_in_sync(client, TXN_STATE)
    yield quorum
    revive(quorum)
    wait_in_sync(client, TXN_STATE)


# -- coordinators -------------------------------------------------------------------------


def _coordinators(quorum: Quorum, key_type: int, keys: list[str]) -> dict[str, int]:
    """key -> the node FindCoordinator (v4, batched) names, for the keys it answered."""
    for node_id, node in quorum.nodes.items():
        if not node.alive():
            continue
        with WireClient(quorum.broker_address(node_id), timeout_s=10) as client:
            found = find_coordinator(client, 4, keys, key_type=key_type)
        return {key: int(node) for key, node, _, _, error in found if error is ErrorCode.none}
    return {}


def _coordinator_nodes(quorum: Quorum, key_type: int) -> list[int]:
    """The nodes coordinating some keys of ``key_type`` now, most keys first (a node
    restarted after a kill leads no internal partition: leaders are not rebalanced)."""
    keys = [f"probe-{uuid.uuid4().hex[:6]}-{i}" for i in range(200)]

    def ask() -> list[int] | None:
        found = Counter(_coordinators(quorum, key_type, keys).values())
        return [node for node, _ in found.most_common()] or None

    return eventually(f"coordinators of key type {key_type}", ask)


def _keys_on(quorum: Quorum, key_type: int, prefix: str, node: int, count: int = 1) -> list[str]:
    """``count`` fresh keys (transactional ids or groups) whose coordinator is ``node``."""
    tag = uuid.uuid4().hex[:6]
    candidates = [f"{prefix}-{tag}-{i}" for i in range(200)]

    def pick() -> list[str] | None:
        found = _coordinators(quorum, key_type, candidates)
        chosen = [key for key in candidates if found.get(key) == node]
        return chosen[:count] if len(chosen) >= count else None

    return eventually(f"{count} keys of type {key_type} coordinated by node {node}", pick)


def _replicated_three_ways(quorum: Quorum) -> None:
    state = partitions(admin(quorum), TXN_STATE)
    assert len(state) == 6
    assert all(len(p.replicas) == 3 for p in state.values()), state


def _spread_topic(quorum: Quorum, name: str) -> dict[int, int]:
    """A topic with RF=3 and one partition led by each node: partition -> leader."""
    client = admin(quorum)
    create_topic(client, name, assignment=ASSIGNMENT)
    state = wait_in_sync(client, name)
    leaders = {p: int(meta.leader) for p, meta in state.items()}
    assert sorted(leaders.values()) == [1, 2, 3], leaders
    return leaders


# -- (a) commit visible, abort invisible, across leaders -----------------------------------


def test_commit_and_abort_across_leaders_with_offsets(cluster: Quorum) -> None:
    quorum = cluster
    topic, source = f"txn-spread-{uuid.uuid4().hex[:6]}", f"txn-src-{uuid.uuid4().hex[:6]}"
    leaders = _spread_topic(quorum, topic)
    create_topic(admin(quorum), source)
    _replicated_three_ways(quorum)
    coordinator = _coordinator_nodes(quorum, TRANSACTION)[0]
    group_node = next(n for n in _coordinator_nodes(quorum, GROUP) if n != coordinator)
    (txn_id,) = _keys_on(quorum, TRANSACTION, "tx", coordinator)
    (group,) = _keys_on(quorum, GROUP, "grp", group_node)  # another node's group coordinator
    assert len(set(leaders.values()) - {coordinator}) == 2  # two remote leaders

    producer = Producer(
        {"bootstrap.servers": quorum.bootstrap, "transactional.id": txn_id, **QUIET}
    )
    member = Consumer({"bootstrap.servers": quorum.bootstrap, "group.id": group, **QUIET})
    # (commit, the offset sent with it, the group's offset after it)
    plan = [(True, 5, 5), (False, 10, 5), (True, 8, 8)]
    sent: dict[int, list[bytes]] = {p: [] for p in leaders}
    try:
        producer.init_transactions(TIMEOUT_S)
        for index, (commit, offset, after) in enumerate(plan):
            producer.begin_transaction()
            for number in range(6):  # two records in each partition
                value = encode_value(txn_id, index, commit, number, 6)
                producer.produce(topic, value=value, partition=number % 3)
                sent[number % 3].append(value)
            producer.send_offsets_to_transaction(
                [TP(source, 0, offset)], member.consumer_group_metadata(), TIMEOUT_S
            )
            if commit:
                producer.commit_transaction(TIMEOUT_S)
            else:
                producer.flush(TIMEOUT_S)  # the records are in the logs, then aborted
                producer.abort_transaction(TIMEOUT_S)
            # offsets are materialised with the marker, and only a commit's
            assert group_offsets(quorum.bootstrap, {txn_id: group}, source) == {txn_id: after}
    finally:
        producer.close()
        member.close()

    committed = read_topic(quorum.bootstrap, topic, 3, "read_committed")
    everything = read_topic(quorum.bootstrap, topic, 3, "read_uncommitted")
    by_partition: dict[int, list[bytes]] = {p: [] for p in leaders}
    for partition, _, value in committed:
        by_partition[partition].append(value)
    for partition in leaders:
        assert by_partition[partition] == [v for v in sent[partition] if b":c:" in v]
        assert [v for p, _, v in everything if p == partition] == sent[partition]
    assert all(decode_value(v) is not None for _, _, v in everything)  # no control record
    # Offsets of each partition: two records a transaction, then its marker.
    assert [o for p, o, _ in everything if p == 0] == [0, 1, 3, 4, 6, 7]
    assert [o for p, o, _ in committed if p == 0] == [0, 1, 6, 7]


# -- (b) a node killed mid-commit -----------------------------------------------------------

PRODUCERS = 3
BEFORE_KILL = 3  # transactions each producer committed before the kill
AFTER_KILL = 3  # ... and after it, before the victim returns
RUN_LIMIT_S = 90.0


class Killer:
    """Kills ``victim`` with SIGKILL a few milliseconds after one producer calls its
    commit (or abort), once each producer has committed ``BEFORE_KILL`` transactions."""

    def __init__(self, quorum: Quorum, victim: int, runners: list[TransactionalRunner]) -> None:
        self.quorum = quorum
        self.victim = victim
        self.runners = runners
        self.lock = threading.Lock()
        self.fired = threading.Event()
        self.killed = threading.Event()
        self.at: dict[str, int] = {}  # committed per producer at the kill
        self.in_flight: TxnKey | None = None

    def on_end(self, key: TxnKey) -> None:
        with self.lock:
            if self.fired.is_set() or any(r.committed() < BEFORE_KILL for r in self.runners):
                return
            self.fired.set()
            self.in_flight = key
            self.at = {r.txn_id: r.committed() for r in self.runners}
        timer = threading.Timer(0.005 + (hash(key) % 20) / 1000, self._kill)
        timer.start()

    def _kill(self) -> None:
        self.quorum.kill(self.victim)
        self.killed.set()

    def progressed(self) -> bool:
        return all(r.committed() >= self.at[r.txn_id] + AFTER_KILL for r in self.runners)


@pytest.mark.parametrize("victim_role", ["coordinator", "partition-leader"])
def test_node_killed_mid_commit_leaves_every_transaction_whole(
    cluster: Quorum, victim_role: str
) -> None:
    quorum = cluster
    topic, source = f"txn-kill-{uuid.uuid4().hex[:6]}", f"txn-src-{uuid.uuid4().hex[:6]}"
    _spread_topic(quorum, topic)
    create_topic(admin(quorum), source)
    _replicated_three_ways(quorum)
    coordinator = _coordinator_nodes(quorum, TRANSACTION)[0]
    group_node = next(n for n in _coordinator_nodes(quorum, GROUP) if n != coordinator)
    txn_ids = _keys_on(quorum, TRANSACTION, "kill", coordinator, PRODUCERS)
    groups = dict(zip(txn_ids, _keys_on(quorum, GROUP, "kg", group_node, PRODUCERS), strict=True))
    # the coordinator (which also leads a partition of the topic), or the leader of the
    # partition led by neither the transaction nor the group coordinator
    (bystander,) = set(NODE_IDS) - {coordinator, group_node}
    victim = coordinator if victim_role == "coordinator" else bystander

    runners: list[TransactionalRunner] = []
    killer = Killer(quorum, victim, runners)
    runners += [
        TransactionalRunner(
            txn_id,
            quorum.bootstrap,
            topic,
            3,
            seed=i,
            records=(3, 8),
            abort_ratio=0.3,
            source=source,
            group=groups[txn_id],
            on_end=killer.on_end,
        )
        for i, txn_id in enumerate(txn_ids)
    ]
    reader = ReadCommittedReader(quorum.bootstrap, topic, 3)
    began = time.monotonic()
    try:
        reader.start()
        for runner in runners:
            runner.start()
        deadline = began + RUN_LIMIT_S
        while not (killer.killed.is_set() and killer.progressed()):
            assert time.monotonic() < deadline, _state(runners, killer)
            assert all(r.is_alive() for r in runners), _state(runners, killer)
            time.sleep(0.2)
        recovered_s = time.monotonic() - began
        quorum.start_node(victim)
        time.sleep(2.0)  # a few transactions more with the victim back
    finally:
        for runner in runners:
            runner.stopping.set()
        for runner in runners:
            runner.join(120)
        reader.stop(30)
    assert not any(r.is_alive() for r in runners), _state(runners, killer)
    crashes = [r.crash for r in (*runners, reader) if r.crash]
    assert not crashes, crashes

    outcomes: dict[Any, Any] = {}
    for runner in runners:
        outcomes.update(runner.outcomes)
    wait_stable(quorum.bootstrap, topic, 3)
    history = TxnHistory(
        outcomes=outcomes,
        reads=reader.reads,
        committed=read_topic(quorum.bootstrap, topic, 3, "read_committed"),
        uncommitted=read_topic(quorum.bootstrap, topic, 3, "read_uncommitted"),
        offsets=group_offsets(quorum.bootstrap, groups, source),
    )
    report = check_transactions(history)
    line = (
        f"{victim_role} (node {victim}) killed as {killer.in_flight} ended; "
        f"{summary(outcomes, history.committed)}; recovered after {recovered_s:.1f} s; "
        f"errors {sum((r.errors for r in runners), start=Counter()).most_common(8)}"
    )
    print(line)
    assert report.ok, f"{line}\n{report.examples}\n{logs_tail(quorum)}"
    assert report.verified == sum(o.result == COMMITTED for o in outcomes.values())
    assert report.verified >= PRODUCERS * (BEFORE_KILL + AFTER_KILL)
    if victim_role == "coordinator":  # the ids moved to another node's replica for good
        moved = _coordinators(quorum, TRANSACTION, txn_ids)
        assert set(moved) == set(txn_ids) and victim not in moved.values(), moved


def _state(runners: list[TransactionalRunner], killer: Killer) -> str:
    return (
        f"killed {killer.killed.is_set()} at {killer.at}; committed "
        f"{ {r.txn_id: r.committed() for r in runners} }; alive "
        f"{[r.is_alive() for r in runners]}; crashes {[r.crash for r in runners if r.crash]}; "
        f"errors {[dict(r.errors) for r in runners]}"
    )
