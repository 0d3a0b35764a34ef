"""Consumer groups with odradek's own ``Consumer`` beside confluent-kafka members.

The harness churn (join, clean leave, kill -9 of an odradek member) in groups mixing
odradek and librdkafka members, with ``cooperative-sticky`` and with ``range``, with
the harness's invariants (one owner per partition, nothing skipped, duplicates only
after the kill) plus: the killed member's partitions resume from its last commit, and
with ``cooperative-sticky`` our members only ever revoke partitions that then move to
another member. Then a cooperative rebalance driven step by step (the second member
speaks the protocol on the wire, so the test decides when it rejoins): our member
revokes just the moving partitions and keeps consuming the others while the group
waits in PreparingRebalance. Then the protocol rules: a member listing an eager
assignor is eager, and a group without a common assignor refuses the newcomer.
"""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer as CKConsumer
from kio.schema.errors import ErrorCode

from odradek.client import Consumer, KafkaException, TopicPartition
from odradek.client.consumer.protocol import (
    Subscription,
    decode_assignment,
    encode_subscription,
)
from tests.groups.harness import TP, GroupRun, Producer, churn, high_watermarks
from tests.groups.wire import (
    create_topic,
    describe_one,
    fetch_one,
    heartbeat,
    send_join,
    send_join_new,
    sync,
    unique,
    wait_for,
)
from tests.support.broker import BrokerProcess
from tests.support.wire import WireClient

PARTITIONS = 12
SESSION_MS = 2000
MIX = ["odradek", "confluent", "odradek", "confluent"]  # a, b, c, d: c (odradek) is killed


@pytest.fixture
def topic(group_broker: BrokerProcess) -> str:
    with WireClient(group_broker.bootstrap) as wire:
        return create_topic(wire, unique("gt-od"), PARTITIONS)


@pytest.mark.parametrize("assignor", ["cooperative-sticky", "range"])
def test_mixed_group_churn(
    group_broker: BrokerProcess,
    tmp_path: Path,
    topic: str,
    runs: list[GroupRun],
    assignor: str,
) -> None:
    bootstrap = group_broker.bootstrap
    everything = {(topic, p) for p in range(PARTITIONS)}
    run = GroupRun(
        tmp_path,
        bootstrap,
        unique(f"od-{assignor}"),
        [topic],
        assignor=assignor,
        session_ms=SESSION_MS,
    )
    runs.append(run)
    producer = Producer(bootstrap, topic, PARTITIONS)
    producer.start()
    try:
        churn(run, everything, SESSION_MS, clients=MIX)
    finally:
        produced = producer.stop()
    run.wait_consumed(produced)
    run.stop("a")
    run.stop("d")
    stats = run.check(produced)
    if assignor == "range":
        assert stats["errors"] == 0, [e for e in run.events() if "error" in e["ev"]]
    events = run.events()
    check_killed_member_resumed_from_its_commits(events, "c")
    if assignor == "cooperative-sticky":
        for name in ("a", "c"):  # the odradek members
            check_revoked_only_moving_partitions(events, name)
    with WireClient(bootstrap) as wire:
        assert describe_one(wire, run.group).group_state == "Empty"
        found = fetch_one(wire, run.group, sorted(everything))
        assert {tp: f.offset for tp, f in found.items()} == high_watermarks(wire, topic, PARTITIONS)


def check_killed_member_resumed_from_its_commits(events: list[dict[str, Any]], name: str) -> None:
    """Each partition the member held when killed is read next from the group's last
    logged commit of it (or later, if the kill fell between a commit and its log line,
    but never past what the member had consumed)."""
    committed: dict[TP, int] = {}
    consumed_to: dict[TP, int] = {}
    owned: set[TP] = set()
    killed_at = None
    for event in events:
        kind, member = event["ev"], event["m"]
        if kind == "commit":
            for t, p, o in event["offsets"]:
                committed[(t, p)] = o
        elif member == name and kind == "assign":
            owned |= {(t, p) for t, p in event["parts"]}
        elif member == name and kind in ("revoke", "lost"):
            owned -= {(t, p) for t, p in event["parts"]}
        elif member == name and kind == "recs":
            for t, p, o, _ in event["recs"]:
                consumed_to[(t, p)] = o + 1
        elif member == name and kind == "killed":
            killed_at = event["t"]
            break
    assert killed_at is not None and owned, f"{name} held nothing when killed"
    first_after: dict[TP, int] = {}
    for event in events:
        if event["t"] > killed_at and event["ev"] == "recs":
            for t, p, o, _ in event["recs"]:
                first_after.setdefault((t, p), o)
    for tp in owned:
        assert tp in first_after, f"{tp} was never read again after {name} was killed"
        low = committed.get(tp, 0)
        high = max(low, consumed_to.get(tp, low))
        assert low <= first_after[tp] <= high, (tp, low, first_after[tp], high)


def check_revoked_only_moving_partitions(events: list[dict[str, Any]], name: str) -> None:
    """Cooperative: everything the member revoked while running (not on its way out)
    was next assigned to another member."""
    revoked: dict[TP, float] = {}
    leaving = {e["t"] for e in events if e["m"] == name and e["ev"] in ("exit", "killed")}
    last_leave = max(leaving, default=float("inf"))
    next_owner: dict[TP, str] = {}
    for event in events:
        parts = {(t, p) for t, p in event.get("parts", ())}
        if event["m"] == name and event["ev"] == "revoke" and event["t"] < last_leave:
            for tp in parts:
                revoked[tp] = event["t"]
                next_owner.pop(tp, None)
        elif event["ev"] == "assign":
            for tp in parts & set(revoked):
                next_owner.setdefault(tp, event["m"])
    stayed = {tp for tp, owner in next_owner.items() if owner == name}
    assert not stayed, f"{name} revoked {sorted(stayed)} only to get them back"


# -- one cooperative rebalance, step by step ---------------------------------------------
def _member_conf(bootstrap: str, group: str, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 200,
        "fetch.max.wait.ms": 100,
        "partition.assignment.strategy": "cooperative-sticky",
        **extra,
    }


def _cooperative_subscription(topic: str, owned: tuple[TP, ...], generation: int) -> bytes:
    from odradek.client.consumer.protocol import TopicPartition as ProtocolTP

    data = generation.to_bytes(4, "big", signed=True)
    claimed = tuple(ProtocolTP(t, p) for t, p in owned)
    return encode_subscription(Subscription((topic,), data, claimed, generation))


def test_cooperative_rebalance_revokes_only_moved_partitions_and_keeps_consuming(
    group_broker: BrokerProcess,
) -> None:
    bootstrap = group_broker.bootstrap
    with WireClient(bootstrap) as wire:
        topic = create_topic(wire, unique("gt-coop"), 4)
    group = unique("od-coop-steps")
    everything = {(topic, p) for p in range(4)}
    producer = Producer(bootstrap, topic, 4)
    producer.produce(40)
    events: list[tuple[str, set[TP]]] = []
    consumed: dict[TP, list[int]] = defaultdict(list)
    ours = Consumer(_member_conf(bootstrap, group))

    def on_assign(consumer: Any, parts: list[TopicPartition]) -> None:
        events.append(("assign", {(tp.topic, tp.partition) for tp in parts}))

    def on_revoke(consumer: Any, parts: list[TopicPartition]) -> None:
        events.append(("revoke", {(tp.topic, tp.partition) for tp in parts}))
        consumer.commit(
            offsets=[tp for tp in consumer.position(parts) if tp.offset >= 0], asynchronous=False
        )

    def poll_until(what: str, condition: Any, timeout_s: float = 20.0) -> Any:
        def step() -> Any:
            for message in ours.consume(100, 0.05):
                assert message.error() is None
                consumed[(message.topic(), message.partition())].append(message.offset())
            return condition()

        return wait_for(step, timeout_s, what)

    wire = WireClient(bootstrap)
    try:
        ours.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
        poll_until(
            "all partitions",
            lambda: {(tp.topic, tp.partition) for tp in ours.assignment()} == everything,
        )
        poll_until("the first 40 records", lambda: sum(map(len, consumed.values())) == 40)
        assert events == [("assign", everything)]

        # A second member joins; ours is leader and keeps two partitions, withholding
        # the two that move (the other member gets nothing this generation).
        pending = send_join_new(
            wire,
            9,
            group,
            protocols=[("cooperative-sticky", _cooperative_subscription(topic, (), -1))],
            session_ms=30_000,
            rebalance_ms=30_000,
        )
        # Ours rejoins from its heartbeat thread, keeping its partitions: no callback
        # runs before JoinGroup, so nothing needs to poll it meanwhile.
        joined = pending.result()
        assert joined.error_code == ErrorCode.none and joined.leader != joined.member_id
        other = joined.member_id
        first = sync(
            wire, 5, group, joined.generation_id, other, protocol_name="cooperative-sticky"
        )
        assert first.error_code == ErrorCode.none
        assert decode_assignment(first.assignment).partitions == ()

        # Ours revokes exactly the two moving partitions, commits them and rejoins at
        # once; the group waits in PreparingRebalance for the other member.
        poll_until(
            "the revoke",
            lambda: len(events) >= 3 and len(ours.assignment()) == 2,
        )
        kept = {(tp.topic, tp.partition) for tp in ours.assignment()}
        moved = everything - kept
        assert len(kept) == 2 and events[1] == ("revoke", moved), events
        assert events[2:] == [("assign", set())]  # nothing new this generation
        with WireClient(bootstrap) as admin:
            wait_for(
                lambda: describe_one(admin, group).group_state == "PreparingRebalance",
                10,
                "the second rebalance",
            )
        # While the group rebalances, the kept partitions go on being consumed.
        before = {tp: len(consumed[tp]) for tp in kept}
        producer.produce(40)
        poll_until(
            "records of the kept partitions during the rebalance",
            lambda: all(len(consumed[tp]) == before[tp] + 10 for tp in kept),
        )
        with WireClient(bootstrap) as admin:
            assert describe_one(admin, group).group_state == "PreparingRebalance"
        assert (
            heartbeat(wire, 4, group, joined.generation_id, other)
            == ErrorCode.rebalance_in_progress
        )

        # The other member rejoins and now gets the two partitions ours gave up.
        pending = send_join(
            wire,
            9,
            group,
            other,
            protocols=[
                ("cooperative-sticky", _cooperative_subscription(topic, (), joined.generation_id))
            ],
            session_ms=30_000,
            rebalance_ms=30_000,
        )
        second = pending.result()
        assert second.error_code == ErrorCode.none, second
        got = sync(wire, 5, group, second.generation_id, other, protocol_name="cooperative-sticky")
        assert got.error_code == ErrorCode.none
        assert {
            (tp.topic, tp.partition) for tp in decode_assignment(got.assignment).partitions
        } == moved
        poll_until("the next (empty) incremental assign", lambda: len(events) >= 4)
        assert events[3:] == [("assign", set())]
        assert {(tp.topic, tp.partition) for tp in ours.assignment()} == kept
        # The moved partitions' offsets were committed on revoke: the new owner resumes
        # where ours stopped.
        committed = fetch_one(wire, group, sorted(moved))
        assert {tp: f.offset for tp, f in committed.items()} == {tp: 10 for tp in moved}
        # Every record of the kept partitions read exactly once, in order.
        for tp in kept:
            assert consumed[tp] == list(range(20))
    finally:
        ours.close()
        wire.close()


# -- protocol selection ----------------------------------------------------------------
def _wait_assigned(consumers: list[Any], everything: set[TP], timeout_s: float = 30.0) -> None:
    def done() -> bool:
        for consumer in consumers:
            consumer.poll(0.05)
        owned = [{(tp.topic, tp.partition) for tp in c.assignment()} for c in consumers]
        return (
            all(owned)
            and set().union(*owned) == everything
            and sum(map(len, owned)) == len(everything)
        )

    wait_for(done, timeout_s, "every partition owned once")


def test_member_listing_an_eager_assignor_joins_a_cooperative_group(
    group_broker: BrokerProcess,
) -> None:
    """``cooperative-sticky,range`` is eager (KIP-429's upgrade step): the group still
    picks cooperative-sticky, the one assignor everyone offers, and stays consistent."""
    bootstrap = group_broker.bootstrap
    with WireClient(bootstrap) as wire:
        topic = create_topic(wire, unique("gt-mix"), 6)
    group = unique("od-upgrade")
    everything = {(topic, p) for p in range(6)}
    revoked: list[set[TP]] = []
    ours = Consumer(
        _member_conf(
            bootstrap, group, **{"partition.assignment.strategy": "cooperative-sticky,range"}
        )
    )
    theirs = CKConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 200,
            "partition.assignment.strategy": "cooperative-sticky",
        }
    )
    try:
        ours.subscribe(
            [topic],
            on_revoke=lambda c, ps: revoked.append({(tp.topic, tp.partition) for tp in ps}),
        )
        _wait_assigned([ours], everything)
        theirs.subscribe([topic])
        _wait_assigned([ours, theirs], everything)
        with WireClient(bootstrap) as wire:
            described = describe_one(wire, group)
        assert described.protocol_data == "cooperative-sticky"
        assert revoked and revoked[0] == everything  # eager: all given up before rejoining
    finally:
        ours.close()
        theirs.close()


def test_no_common_assignor_refuses_the_newcomer(group_broker: BrokerProcess) -> None:
    bootstrap = group_broker.bootstrap
    with WireClient(bootstrap) as wire:
        topic = create_topic(wire, unique("gt-inc"), 2)
    group = unique("od-inconsistent")
    theirs = CKConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "session.timeout.ms": 6000,
            "partition.assignment.strategy": "cooperative-sticky",
        }
    )
    ours = Consumer(_member_conf(bootstrap, group, **{"partition.assignment.strategy": "range"}))
    try:
        theirs.subscribe([topic])
        wait_for(lambda: theirs.poll(0.1) is None and len(theirs.assignment()) == 2, 20)
        ours.subscribe([topic])
        deadline = time.monotonic() + 20
        with pytest.raises(KafkaException, match="INCONSISTENT_GROUP_PROTOCOL"):
            while time.monotonic() < deadline:
                ours.poll(0.1)
        assert ours.assignment() == []
    finally:
        ours.close()
        theirs.close()
