"""EmbeddedCluster (odradek/testing/cluster.py): three KRaft nodes, a topic replicated on
all of them, written with acks=all and read back; every node stopped by pid."""

from __future__ import annotations

import os

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from odradek.testing import EmbeddedCluster
from tests.support.kraft import read_partition

TIMEOUT_S = 30.0


def test_three_nodes_replicate_a_topic_written_with_acks_all() -> None:
    with EmbeddedCluster(n=3) as cluster:
        pids = cluster.pids()
        assert len(pids) == 3 and len(cluster.bootstrap.split(",")) == 3
        topic = cluster.create_topic("replicated", partitions=2)  # RF = every node
        assert cluster.create_topic("replicated", partitions=2) == topic  # idempotent
        described = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(
            topic, timeout=TIMEOUT_S
        )
        for partition in described.topics[topic].partitions.values():
            assert sorted(partition.replicas) == [1, 2, 3]
        producer = Producer(
            {"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True}
        )
        values = [b"replicated-%d" % i for i in range(20)]
        for value in values:
            producer.produce(topic, value, partition=0)
        assert producer.flush(TIMEOUT_S) == 0
        del producer
        assert read_partition(cluster.bootstrap, topic, len(values), timeout_s=TIMEOUT_S) == values
        cluster.kill_node(3)  # a crash; it comes back on a new port with its data
        assert 3 not in cluster.pids()
        cluster.start_node(3)
        assert set(cluster.pids()) == {1, 2, 3} and cluster.pids()[3] != pids[3]
        restarted = cluster.addresses[3]
        assert restarted in cluster.bootstrap.split(",")
        assert read_partition(restarted, topic, len(values), timeout_s=TIMEOUT_S) == values
        pids = cluster.pids()
    for pid in pids.values():
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_cluster_size_is_checked() -> None:
    with pytest.raises(ValueError, match="n must be 1 to 9"):
        EmbeddedCluster(n=0)
