"""Pattern subscriptions and growing topics: the clients notice through metadata and
rejoin; the broker's part is to run the rebalance and keep ownership exclusive.

Members subscribe to ``^gt-<id>-.*``: a new matching topic is picked up, a
non-matching one is not, and partitions added to a subscribed topic (CreatePartitions)
are assigned — every record of every matched partition is consumed exactly once.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions

from tests.groups.harness import GroupRun, Producer
from tests.groups.wire import create_topic, unique
from tests.support.broker import BrokerProcess
from tests.support.wire import WireClient


@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka"])
def test_pattern_subscription_new_topics_and_partitions(
    group_broker: BrokerProcess, tmp_path: Path, runs: list[GroupRun], client: str
) -> None:
    bootstrap = group_broker.bootstrap
    prefix = f"gt-{uuid.uuid4().hex[:8]}"
    with WireClient(bootstrap) as wire:
        first = create_topic(wire, f"{prefix}-one", 4)
    run = GroupRun(
        tmp_path,
        bootstrap,
        unique(f"pattern-{client}"),
        [],
        client=client,
        assignor="range" if client != "confluent" else "roundrobin",
        metadata_refresh_ms=500,
    )
    runs.append(run)
    pattern = f"^{prefix}-.*"
    run.start("p1", pattern=pattern)
    run.start("p2", pattern=pattern)
    expected = {(first, p) for p in range(4)}
    run.wait_settled(expected)
    producer = Producer(bootstrap, first, 4)
    producer.produce(40)

    with WireClient(bootstrap) as wire:
        second = create_topic(wire, f"{prefix}-two", 3)
        create_topic(wire, f"x{prefix}-unmatched", 2)
    expected |= {(second, p) for p in range(3)}
    run.wait_settled(expected)
    producer.produce(30, topic=second, partitions=3)

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_partitions([NewPartitions(first, 6)])[first].result(10)
    expected |= {(first, 4), (first, 5)}
    run.wait_settled(expected)
    producer.produce(60, topic=first, partitions=6)

    produced = producer.stop()
    run.wait_consumed(produced)
    run.stop("p1")
    run.stop("p2")
    stats = run.check(produced)
    if client != "aiokafka":
        # aiokafka may redeliver what it had not committed when the pattern matched a new
        # topic (it drops its positions before calling the revoke listener); check()
        # allows exactly those records (harness.GroupRun._crash_redelivery_allowance).
        assert stats["duplicates"] == 0
    consumed_topics = {r[1] for r in run.consumed()}
    assert consumed_topics == {first, second}
