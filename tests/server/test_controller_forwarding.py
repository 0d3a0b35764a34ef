"""Admin requests sent to any broker of a quorum reach the active controller.

Three combined ``odradek serve`` processes (tests/support/kraft.py's ``Quorum``). Raw
Kafka requests on a *follower's* broker listener (CreateTopics, CreatePartitions,
IncrementalAlterConfigs, DeleteTopics, InitProducerId with AllocateProducerIds behind
it, auto-creation by Metadata and by FindCoordinator) succeed, answered by the
follower once its own image shows the change (a DescribeConfigs/Metadata on the same
follower right after sees it), and every node then shows the change. Real admin
clients bootstrapped with only the follower (confluent-kafka's AdminClient,
kafka-python's KafkaAdminClient) and an idempotent confluent producer work too; they
send to Metadata's ``controller_id`` (the leader, the only registered broker until
followers register), so they cover the forwarding from the leader's own broker.
After kill -9 of the active controller, a CreateTopics sent to a surviving follower at
once is held by the forwarding until the survivors have elected a new leader, then
succeeds. Every process is stopped by pid.
"""

from __future__ import annotations

import datetime
import gc
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)
from kafka.admin import KafkaAdminClient
from kafka.admin import NewPartitions as KafkaNewPartitions
from kafka.admin import NewTopic as KafkaNewTopic
from kio.schema.errors import ErrorCode

from odradek.client._core.connection import request_entity as request
from tests.server.test_kraft_cluster import TIMEOUTS, quorum_status, wait_for_leader
from tests.support.broker import BrokerProcess
from tests.support.kraft import Quorum
from tests.support.wire import WireClient, create_topic

CREATE_PARTITIONS_KEY = 37
DELETE_TOPICS_KEY = 20
INCREMENTAL_ALTER_CONFIGS_KEY = 44
DESCRIBE_CONFIGS_KEY = 32
METADATA_KEY = 3
INIT_PRODUCER_ID_KEY = 22
FIND_COORDINATOR_KEY = 10
TOPIC_TYPE = 2
TIMEOUT = datetime.timedelta(seconds=30)


def create_partitions(client: WireClient, topic: str, count: int) -> Any:
    wanted = request(
        CREATE_PARTITIONS_KEY, 3, "CreatePartitionsTopic", name=topic, count=count, assignments=None
    )
    response = client.request(
        request(CREATE_PARTITIONS_KEY, 3, topics=(wanted,), timeout=TIMEOUT, validate_only=False)
    )
    (result,) = response.results
    return result


def set_topic_config(client: WireClient, topic: str, name: str, value: str) -> Any:
    config = request(
        INCREMENTAL_ALTER_CONFIGS_KEY,
        1,
        "AlterableConfig",
        name=name,
        config_operation=0,
        value=value,
    )
    resource = request(
        INCREMENTAL_ALTER_CONFIGS_KEY,
        1,
        "AlterConfigsResource",
        resource_type=TOPIC_TYPE,
        resource_name=topic,
        configs=(config,),
    )
    response = client.request(
        request(INCREMENTAL_ALTER_CONFIGS_KEY, 1, resources=(resource,), validate_only=False)
    )
    (result,) = response.responses
    return result


def topic_config(client: WireClient, topic: str, name: str) -> str | None:
    resource = request(
        DESCRIBE_CONFIGS_KEY,
        4,
        "DescribeConfigsResource",
        resource_type=TOPIC_TYPE,
        resource_name=topic,
        configuration_keys=(name,),
    )
    response = client.request(
        request(
            DESCRIBE_CONFIGS_KEY,
            4,
            resources=(resource,),
            include_synonyms=False,
            include_documentation=False,
        )
    )
    (result,) = response.results
    assert result.error_code == ErrorCode.none, result
    (entry,) = result.configs
    return entry.value


def delete_topic(client: WireClient, topic: str) -> Any:
    state = request(DELETE_TOPICS_KEY, 6, "DeleteTopicState", name=topic, topic_id=None)
    response = client.request(request(DELETE_TOPICS_KEY, 6, topics=(state,), timeout=TIMEOUT))
    (result,) = response.responses
    return result


def partition_counts(client: WireClient, auto_create: str | None = None) -> dict[str, int]:
    """Topic → partition count from Metadata v12 (every topic; or ``auto_create`` only,
    created if missing)."""
    topics = None
    if auto_create is not None:
        topics = (
            request(METADATA_KEY, 12, "MetadataRequestTopic", name=auto_create, topic_id=None),
        )
    response = client.request(
        request(
            METADATA_KEY,
            12,
            topics=topics,
            allow_auto_topic_creation=auto_create is not None,
            include_topic_authorized_operations=False,
        )
    )
    return {t.name: len(t.partitions) for t in response.topics if t.error_code == ErrorCode.none}


def init_producer_id(client: WireClient) -> Any:
    return client.request(
        request(
            INIT_PRODUCER_ID_KEY,
            4,
            transactional_id=None,
            transaction_timeout=datetime.timedelta(seconds=60),
            producer_id=-1,
            producer_epoch=-1,
        )
    )


def find_coordinator(client: WireClient, group: str) -> Any:
    return client.request(request(FIND_COORDINATOR_KEY, 3, key=group, key_type=0))


def wait_everywhere(nodes: list[BrokerProcess], topic: str, partitions: int | None) -> None:
    """Every node's Metadata shows ``topic`` with ``partitions`` (None: not at all)."""
    deadline = time.monotonic() + 30
    for node in nodes:
        with WireClient(node.bootstrap) as client:
            while (seen := partition_counts(client).get(topic)) != partitions:
                assert time.monotonic() < deadline, f"node {node.bootstrap}: {topic} is {seen}"
                time.sleep(0.1)


def test_admin_requests_on_a_follower_reach_the_active_controller(tmp_path: Path) -> None:
    with Quorum(tmp_path, properties=TIMEOUTS) as quorum:
        nodes = quorum.nodes
        status = quorum_status(nodes[1])
        assert status is not None
        leader = int(status["LeaderId"])
        follower = next(n for i, n in nodes.items() if i != leader)
        everyone = list(nodes.values())

        with WireClient(follower.bootstrap) as client:
            result = create_topic(client, "forwarded", partitions=3)
            assert result.error_code == ErrorCode.none, result
            assert result.num_partitions == 3 and result.topic_id is not None
            # The follower answered once its own image had the topic.
            assert partition_counts(client)["forwarded"] == 3
            again = create_topic(client, "forwarded")
            assert again.error_code == ErrorCode.topic_already_exists
            assert create_topic(client, "bad name!").error_code == (
                ErrorCode.invalid_topic_exception
            )

            result = create_partitions(client, "forwarded", 5)
            assert result.error_code == ErrorCode.none, result
            assert partition_counts(client)["forwarded"] == 5
            shrink = create_partitions(client, "forwarded", 2)
            assert shrink.error_code == ErrorCode.invalid_partitions

            result = set_topic_config(client, "forwarded", "retention.ms", "123456")
            assert result.error_code == ErrorCode.none, result
            assert topic_config(client, "forwarded", "retention.ms") == "123456"
            bad = set_topic_config(client, "forwarded", "retention.ms", "soon")
            assert bad.error_code == ErrorCode.invalid_config

            produced = init_producer_id(client)
            assert produced.error_code == ErrorCode.none and produced.producer_id >= 0

            # Auto-creation on the follower goes the same way: a Metadata request that
            # may create, and FindCoordinator creating __consumer_offsets.
            assert partition_counts(client, auto_create="auto-created") == {"auto-created": 1}
            found = find_coordinator(client, "a-group")
            assert found.error_code == ErrorCode.none, found
            assert found.node_id in nodes
        wait_everywhere(everyone, "forwarded", 5)
        wait_everywhere(everyone, "auto-created", 1)
        wait_everywhere(everyone, "__consumer_offsets", 50)

        with WireClient(follower.bootstrap) as client:
            result = delete_topic(client, "forwarded")
            assert result.error_code == ErrorCode.none, result
            assert "forwarded" not in partition_counts(client)
        wait_everywhere(everyone, "forwarded", None)

        # confluent-kafka's AdminClient, bootstrapped with the follower only.
        admin = AdminClient({"bootstrap.servers": follower.bootstrap})
        futures = admin.create_topics([NewTopic("by-confluent", 2, 1)], request_timeout=30)
        futures["by-confluent"].result(timeout=60)
        admin.create_partitions([NewPartitions("by-confluent", 4)])["by-confluent"].result(60)
        resource = ConfigResource(
            ConfigResource.Type.TOPIC,
            "by-confluent",
            incremental_configs=[
                ConfigEntry("retention.ms", "654321", incremental_operation=AlterConfigOpType.SET)
            ],
        )
        for future in admin.incremental_alter_configs([resource]).values():
            future.result(timeout=60)
        wait_everywhere(everyone, "by-confluent", 4)
        deadline = time.monotonic() + 30  # sent to whichever broker the client chose
        with WireClient(follower.bootstrap) as client:
            while topic_config(client, "by-confluent", "retention.ms") != "654321":
                assert time.monotonic() < deadline, "the config change never arrived"
                time.sleep(0.1)
        admin.delete_topics(["by-confluent"])["by-confluent"].result(timeout=60)
        wait_everywhere(everyone, "by-confluent", None)

        # kafka-python's KafkaAdminClient, bootstrapped with the follower only.
        kafka_admin = KafkaAdminClient(bootstrap_servers=follower.bootstrap)
        try:
            kafka_admin.create_topics([KafkaNewTopic("by-kafka-python", 1, 1)])
            kafka_admin.create_partitions({"by-kafka-python": KafkaNewPartitions(3)})
            wait_everywhere(everyone, "by-kafka-python", 3)
            kafka_admin.delete_topics(["by-kafka-python"])
            wait_everywhere(everyone, "by-kafka-python", None)
        finally:
            kafka_admin.close()

        # An idempotent producer bootstrapped with the follower: InitProducerId there
        # (or anywhere) gets an id from a block the active controller reserved.
        with WireClient(follower.bootstrap) as client:
            assert create_topic(client, "idempotent").error_code == ErrorCode.none
        producer = Producer({"bootstrap.servers": follower.bootstrap, "enable.idempotence": True})
        delivered: list[Any] = []
        producer.produce("idempotent", b"once", on_delivery=lambda e, m: delivered.append(e))
        assert producer.flush(30) == 0
        assert delivered == [None]
        del producer, admin
        gc.collect()


def test_after_kill_9_of_the_active_controller_a_follower_creates_topics(tmp_path: Path) -> None:
    with Quorum(tmp_path, properties=TIMEOUTS) as quorum:
        nodes = quorum.nodes
        status = quorum_status(nodes[1])
        assert status is not None
        leader, epoch = int(status["LeaderId"]), int(status["LeaderEpoch"])
        nodes[leader].kill()
        survivors = {i: n for i, n in nodes.items() if i != leader}
        # Sent at once: the forwarding holds it until a new leader is elected.
        some = next(iter(survivors.values()))
        with WireClient(some.bootstrap) as client:
            result = create_topic(client, "after-kill")
            assert result.error_code == ErrorCode.none, result
        new_leader, new_epoch = wait_for_leader(
            list(survivors.values()), 30.0, not_in=frozenset({leader})
        )
        assert new_epoch > epoch
        # And through the survivor that does not lead now.
        follower = next(n for i, n in survivors.items() if i != new_leader)
        with WireClient(follower.bootstrap) as client:
            result = create_topic(client, "through-the-follower", partitions=2)
            assert result.error_code == ErrorCode.none, result
        wait_everywhere(list(survivors.values()), "after-kill", 1)
        wait_everywhere(list(survivors.values()), "through-the-follower", 2)
