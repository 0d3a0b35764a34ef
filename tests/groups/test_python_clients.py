"""Consumer groups with kafka-python and aiokafka, and a group mixing three clients.

The same churn as the confluent-kafka tests (harness.churn: join, clean leave, kill
-9), each member in its own process, with the same invariants: exclusive ownership
after every rebalance, nothing skipped, duplicates only after the crash.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.groups.harness import GroupRun, Producer, churn, high_watermarks
from tests.groups.wire import create_topic, describe_one, fetch_one, unique
from tests.support.broker import BrokerProcess
from tests.support.wire import WireClient

PARTITIONS = 12
SESSION_MS = 2000


@pytest.fixture
def topic(group_broker: BrokerProcess) -> str:
    with WireClient(group_broker.bootstrap) as wire:
        return create_topic(wire, unique("gt-py"), PARTITIONS)


@pytest.mark.parametrize(
    ("client", "assignor", "mix"),
    [
        ("kafka-python", "range", None),
        ("kafka-python", "roundrobin", None),
        ("aiokafka", "roundrobin", None),
        ("aiokafka", "range", None),
        # One group, three clients, one assignor they all implement.
        ("confluent", "range", ["confluent", "kafka-python", "aiokafka", "kafka-python"]),
    ],
    ids=[
        "kafka-python-range",
        "kafka-python-roundrobin",
        "aiokafka-roundrobin",
        "aiokafka-range",
        "mixed-range",
    ],
)
def test_group_churn(
    group_broker: BrokerProcess,
    tmp_path: Path,
    topic: str,
    runs: list[GroupRun],
    client: str,
    assignor: str,
    mix: list[str] | None,
) -> None:
    bootstrap = group_broker.bootstrap
    everything = {(topic, p) for p in range(PARTITIONS)}
    run = GroupRun(
        tmp_path,
        bootstrap,
        unique(f"py-{client}-{assignor}"),
        [topic],
        client=client,
        assignor=assignor,
        session_ms=SESSION_MS,
    )
    runs.append(run)
    producer = Producer(bootstrap, topic, PARTITIONS)
    producer.start()
    try:
        churn(run, everything, SESSION_MS, clients=mix)
    finally:
        produced = producer.stop()
    run.wait_consumed(produced)
    run.stop("a")
    run.stop("d")
    stats = run.check(produced)
    assert stats["errors"] == 0, [e for e in run.events() if "error" in e["ev"]]
    with WireClient(bootstrap) as wire:
        assert describe_one(wire, run.group).group_state == "Empty"
        found = fetch_one(wire, run.group, sorted(everything))
        assert {tp: f.offset for tp, f in found.items()} == high_watermarks(wire, topic, PARTITIONS)
