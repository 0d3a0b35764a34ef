"""kill -9 of the active controller, then its restart: the partitions it hosts keep
their records.

A topic of one partition (placed on the active controller's broker, the only one
registered) takes acknowledged records; the controller is killed (SIGKILL), another
node takes over, and the killed node restarts as a follower. Its broker must build its
partitions from an image holding every committed topic: a follower that took the new
leader's not yet established high watermark as "caught up" set the partition's log
aside as a stray and served it empty. Every process is stopped by pid.
"""

from __future__ import annotations

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from tests.support.kraft import Quorum
from tests.support.wire import WireClient, create_topic

RECORDS = 200
QUIET = {"log_level": 0}


def test_a_restarted_controller_keeps_the_records_of_its_partitions(quorum: Quorum) -> None:
    leader, _ = quorum.wait_for_leader(30)
    address = quorum.broker_address(leader)
    with WireClient(address) as client:
        assert create_topic(client, "kept").error_code == 0
    producer = Producer({"bootstrap.servers": address, "acks": "all", **QUIET})
    for n in range(RECORDS):
        producer.produce("kept", str(n).encode(), partition=0)
    assert producer.flush(30) == 0

    quorum.kill(leader)
    survivors = [n for n in quorum.node_ids if n != leader]
    quorum.wait_for_leader(30, frozenset({leader}), survivors)
    quorum.start_node(leader)

    log = quorum.nodes[leader].log()
    assert "is not in the metadata" not in log, log[-3000:]
    consumer = Consumer({"bootstrap.servers": address, "group.id": "kept-reader", **QUIET})
    try:
        consumer.assign([TopicPartition("kept", 0, OFFSET_BEGINNING)])
        values = []
        for message in consumer.consume(RECORDS, 30):
            assert message.error() is None, message.error()
            values.append(int(message.value()))
            if len(values) == RECORDS:
                break
    finally:
        consumer.close()
    assert values == list(range(RECORDS))
