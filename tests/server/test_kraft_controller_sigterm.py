"""SIGTERM of the node that is the active controller of three combined voters.

Kafka's order on a combined node: the broker half does its controlled shutdown first —
its own controller, still active, handles the want_shut_down heartbeat, fences the
broker and gives every partition it led a new leader from the ISR in one committed
PartitionChange — and only then does the controller half resign, so another voter
takes over at once. The test: a topic with RF=3 whose leaders are spread over the
three nodes, so the active controller's node leads some; an idempotent acks=all
producer (confluent-kafka) writes to every partition throughout; SIGTERM the active
controller's node. Within a few seconds (far below broker.session.timeout.ms = 9 s,
after which a silent broker is fenced anyway) a survivor's Metadata names a new
leader, an in-sync replica, for each partition it led; the node exits 0 after the
controlled shutdown; the producer gets every record acknowledged, records sent after
the node is gone included. Every process is stopped by the test, by pid.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.kraft import Quorum

SESSION_TIMEOUT_MS = 9000  # Kafka's default: the bound a controlled shutdown beats
MOVE_BOUND_S = 5.0  # behaviour, not a benchmark: well below the session timeout
PROPERTIES = {
    "broker.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    "broker.heartbeat.interval.ms": "500",
    "auto.leader.rebalance.enable": "false",
    "min.insync.replicas": "2",
}
# Each node the preferred leader of two partitions.
ASSIGNMENT = [[1, 2, 3], [2, 3, 1], [3, 1, 2], [1, 3, 2], [2, 1, 3], [3, 2, 1]]
TOPIC = "handover"


pytestmark = pytest.mark.quorum(properties=PROPERTIES)


def partitions(admin: AdminClient) -> dict[int, Any]:
    return dict(admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions)


def wait_until(what: str, probe: Any, timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        seen = probe()
        if seen:
            return seen
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {timeout_s} s")


class Acks:
    """Delivery reports of one producer, with the time each arrived."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acked: list[tuple[float, int | None, int | None]] = []  # when, partition, offset
        self.errors: list[str] = []

    def report(self, error: KafkaError | None, message: Message) -> None:
        with self.lock:
            if error is not None:
                self.errors.append(f"partition {message.partition()}: {error}")
            else:
                self.acked.append((time.monotonic(), message.partition(), message.offset()))


def produce_until(producer: Producer, acks: Acks, stop: threading.Event) -> int:
    sent = 0
    while not stop.is_set():
        for partition in range(len(ASSIGNMENT)):
            producer.produce(
                TOPIC, f"r{sent}".encode(), partition=partition, on_delivery=acks.report
            )
            sent += 1
        producer.poll(0.02)
    return sent


def test_sigterm_of_the_active_controller_moves_its_leaderships_before_it_exits(
    quorum: Quorum,
) -> None:
    controller, _ = quorum.wait_for_leader(30)
    survivors = [n for n in quorum.broker_ids if n != controller]
    admin = AdminClient({"bootstrap.servers": quorum.bootstrap})
    for future in admin.create_topics(
        [NewTopic(TOPIC, len(ASSIGNMENT), replica_assignment=ASSIGNMENT)]
    ).values():
        future.result(timeout=30)
    expected = {i: replicas[0] for i, replicas in enumerate(ASSIGNMENT)}
    wait_until(
        "leaders spread and every replica in sync",
        lambda: all(
            p.leader == expected[i] and sorted(p.isrs) == [1, 2, 3]
            for i, p in partitions(admin).items()
        ),
        60,
    )
    led = sorted(i for i, leader in expected.items() if leader == controller)
    assert led, "the active controller's node leads some partitions"

    acks = Acks()
    producer = Producer(
        {
            "bootstrap.servers": quorum.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 60_000,
        }
    )
    stop = threading.Event()
    sent: list[int] = []
    writer = threading.Thread(target=lambda: sent.append(produce_until(producer, acks, stop)))
    writer.start()
    try:
        wait_until("acks before the SIGTERM", lambda: len(acks.acked) >= 60, 30)
        exit_codes: list[int] = []
        stopper = threading.Thread(target=lambda: exit_codes.append(quorum.stop(controller)))
        began = time.monotonic()
        stopper.start()

        # Metadata from a survivor only (the stopping node is not asked).
        survivor_admin = AdminClient(
            {"bootstrap.servers": ",".join(quorum.broker_address(n) for n in survivors)}
        )

        def moved() -> dict[int, Any] | None:
            now = partitions(survivor_admin)
            return now if all(now[i].leader in survivors for i in led) else None

        state = wait_until("new leaders for the controller's partitions", moved, 30)
        took = time.monotonic() - began
        stopper.join(60)
        gone_at = time.monotonic()
        assert exit_codes == [0], exit_codes
        assert took < MOVE_BOUND_S, (
            f"the leaderships of {led} moved {took:.1f} s after SIGTERM "
            f"(broker.session.timeout.ms={SESSION_TIMEOUT_MS}: not a controlled shutdown)"
        )
        for index in led:
            # an in-sync replica took over, and the stopped node left the ISR
            assert state[index].leader in ASSIGNMENT[index][1:], state[index]
            assert controller not in state[index].isrs, state[index]
        log = quorum.nodes[controller].log()
        assert "controlled shutdown done" in log, log[-3000:]
        wait_until("a new active controller", lambda: quorum.leader(survivors), 30)

        # The producer keeps being acknowledged after the node is gone.
        wait_until(
            "acks for records sent after the exit",
            lambda: sum(1 for when, p, _ in acks.acked if when > gone_at and p in led) >= 20,
            30,
        )
    finally:
        stop.set()
        writer.join(30)
    assert producer.flush(60) == 0
    assert acks.errors == []
    assert len(acks.acked) == sent[0]
    print(f"partitions {led} of node {controller} moved in {took:.2f} s")
