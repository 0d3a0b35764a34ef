"""Consumer groups with confluent-kafka (librdkafka), each member in its own process.

A 12-partition topic is fed with uniquely keyed records while members join, leave
cleanly (commit on revoke, LeaveGroup) and are killed with SIGKILL; after every change
the group must settle with each partition owned by exactly one member, and in the end
every record was consumed, twice only if a killed member had consumed it without
committing (harness.py checks all of that from the members' event logs).
"""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.groups.harness import GroupRun, Producer, churn, high_watermarks
from tests.groups.wire import (
    commit,
    create_topic,
    describe_one,
    fetch_one,
    find_coordinator,
    unique,
    wait_for,
)
from tests.support.broker import BrokerProcess
from tests.support.wire import WireClient

PARTITIONS = 12
SESSION_MS = 2000


@pytest.fixture
def topic(group_broker: BrokerProcess) -> str:
    with WireClient(group_broker.bootstrap) as wire:
        return create_topic(wire, unique("gt-cf"), PARTITIONS)


@pytest.mark.parametrize("assignor", ["range", "roundrobin", "cooperative-sticky"])
def test_group_members_join_leave_and_crash(
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
        unique(f"cf-{assignor}"),
        [topic],
        assignor=assignor,
        session_ms=SESSION_MS,
    )
    runs.append(run)
    producer = Producer(bootstrap, topic, PARTITIONS)
    producer.start()
    try:
        churn(run, everything, SESSION_MS)
    finally:
        produced = producer.stop()
    run.wait_consumed(produced)
    run.stop("a")
    run.stop("d")
    stats = run.check(produced)
    if assignor != "cooperative-sticky":  # members keep partitions while rebalancing
        assert stats["errors"] == 0, [e for e in run.events() if "error" in e["ev"]]
    with WireClient(bootstrap) as wire:
        assert describe_one(wire, run.group).group_state == "Empty"
        # Everything consumed was committed on the way out: the group resumes at the end.
        found = fetch_one(wire, run.group, sorted(everything))
        assert {tp: f.offset for tp, f in found.items()} == high_watermarks(wire, topic, PARTITIONS)


def test_static_membership_restart_without_rebalance(
    group_broker: BrokerProcess, tmp_path: Path, topic: str, runs: list[GroupRun]
) -> None:
    """KIP-345: a static member that restarts within its session gets its partitions
    back; the others see no revoke and the generation does not change."""
    bootstrap = group_broker.bootstrap
    everything = {(topic, p) for p in range(PARTITIONS)}
    run = GroupRun(tmp_path, bootstrap, unique("cf-static"), [topic], session_ms=6000)
    runs.append(run)
    for name in ("s1", "s2", "s3"):
        run.start(name, instance_id=f"instance-{name}")
    before = run.wait_settled(everything)
    generation_events = len(run.events())
    with WireClient(bootstrap) as wire:
        described = describe_one(wire, run.group)
        old_ids = {m.client_id: m.member_id for m in described.members}
        assert {m.group_instance_id for m in described.members} == {
            "instance-s1",
            "instance-s2",
            "instance-s3",
        }
    producer = Producer(bootstrap, topic, PARTITIONS)
    producer.produce(120)
    run.kill("s2")
    run.start("s2", instance_id="instance-s2")
    after = run.wait_settled(everything)
    assert after == before
    later = run.events()[generation_events:]
    others = [e for e in later if e["m"] in ("s1", "s3") and e["ev"] in ("assign", "revoke")]
    assert others == [], others
    with WireClient(bootstrap) as wire:
        described = describe_one(wire, run.group)
        new_ids = {m.client_id: m.member_id for m in described.members}
    assert new_ids["s1"] == old_ids["s1"] and new_ids["s3"] == old_ids["s3"]
    assert new_ids["s2"] != old_ids["s2"]
    run.wait_consumed(set(producer.delivered))
    for name in ("s1", "s2", "s3"):
        run.stop(name)
    run.check(set(producer.delivered))


def test_committed_offsets_resume_after_consumer_restart(
    group_broker: BrokerProcess, topic: str
) -> None:
    bootstrap = group_broker.bootstrap
    group = unique("cf-resume")
    producer = Producer(bootstrap, topic, PARTITIONS)
    producer.produce(60)
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": SESSION_MS,
        "heartbeat.interval.ms": 300,
    }
    first = Consumer(conf)
    try:
        first.subscribe([topic])
        seen: list[tuple[int | None, int | None]] = []
        deadline = time.monotonic() + 30
        while len(seen) < 60 and time.monotonic() < deadline:
            seen += [
                (m.partition(), m.offset()) for m in first.consume(100, 0.2) if m.error() is None
            ]
        assert len(seen) == 60
        first.commit(asynchronous=False)
        committed = first.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], 10)
        assert [tp.offset for tp in committed] == [5] * PARTITIONS
    finally:
        first.close()
    producer.produce(24)
    second = Consumer(conf)
    try:
        second.subscribe([topic])
        resumed: list[tuple[int | None, int | None]] = []
        deadline = time.monotonic() + 30
        while len(resumed) < 24 and time.monotonic() < deadline:
            resumed += [
                (m.partition(), m.offset()) for m in second.consume(100, 0.2) if m.error() is None
            ]
        assert sorted(resumed) == sorted((p, o) for p in range(PARTITIONS) for o in (5, 6))
    finally:
        second.close()


def test_group_survives_broker_restart(tmp_path: Path, runs: list[GroupRun]) -> None:
    """Committed offsets and the group itself come back from __consumer_offsets after a
    clean stop and after kill -9; running members carry on without losing records."""
    from tests.groups.conftest import group_broker_process

    broker = group_broker_process(tmp_path / "data").start()
    try:
        bootstrap, port = broker.bootstrap, broker.port
        with WireClient(bootstrap) as wire:
            topic = create_topic(wire, unique("gt-restart"), 4)
        everything = {(topic, p) for p in range(4)}
        standalone = unique("standalone")
        with WireClient(bootstrap) as wire:
            find_coordinator(wire, 6, [standalone])  # creates __consumer_offsets
            assert commit(wire, 9, standalone, {(topic, 0): 1}, metadata="kept") == {(topic, 0): 0}
        run = GroupRun(tmp_path, bootstrap, unique("cf-restart"), [topic], session_ms=6000)
        runs.append(run)
        producer = Producer(bootstrap, topic, 4)
        producer.produce(40)
        run.start("r1")
        run.start("r2")
        before = run.wait_settled(everything)
        run.wait_consumed(set(producer.delivered))
        wait_for(lambda: committed_all(bootstrap, run.group, topic, 4, 10), 15, "commits")

        for stop in (broker.stop, broker.kill):
            seen = len(run.events())
            stop()
            broker.start(listen=f"127.0.0.1:{port}")
            with WireClient(bootstrap) as wire:
                found = wait_for(partial(offsets_loaded, wire, standalone, topic), 15)
                assert (found.offset, found.metadata) == (1, "kept")
            producer.produce(20)
            run.wait_consumed(set(producer.delivered), timeout_s=40)
            after = run.wait_settled(everything, timeout_s=40)
            # Restored Stable with its members: they kept their partitions, no rebalance.
            assert after == before
            moves = [e for e in run.events()[seen:] if e["ev"] in ("assign", "revoke", "lost")]
            assert moves == []
        run.stop("r1")
        run.stop("r2")
        run.check(set(producer.delivered))
        with WireClient(bootstrap) as wire:
            assert committed_all(bootstrap, run.group, topic, 4, 20)
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": run.group})
        try:
            committed = consumer.committed([TopicPartition(topic, p) for p in range(4)], 10)
            assert [tp.offset for tp in committed] == [20] * 4
        finally:
            consumer.close()
    finally:
        for run in runs:
            run.close()
        runs.clear()
        try:
            broker.stop()
        finally:
            broker.kill()


def committed_all(bootstrap: str, group: str, topic: str, partitions: int, offset: int) -> bool:
    with WireClient(bootstrap) as wire:
        found = fetch_one(wire, group, [(topic, p) for p in range(partitions)])
    return all(f.offset == offset for f in found.values())


def offsets_loaded(wire: WireClient, group: str, topic: str) -> Any:
    from tests.groups.wire import fetch_offsets

    error, found = fetch_offsets(wire, 9, {group: [(topic, 0)]})[group]
    if error != 0:  # COORDINATOR_LOAD_IN_PROGRESS while the partition replays
        return None
    return found[(topic, 0)]
