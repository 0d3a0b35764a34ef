"""Authorized operations (KIP-430) in Metadata, DescribeCluster, DescribeGroups and
ConsumerGroupDescribe: asked for, they list every operation the resource supports
(there is no authorizer, so everything is allowed, as in Kafka without one); not asked
for, they say "not requested" (INT32_MIN). Every version each API serves, on the wire
with kio, then through confluent-kafka's AdminClient, whose describe_* calls with
include_authorized_operations=True used to report "expected 8 authorized operations,
got 0" style mismatches.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.protocol.build import has_field, make
from odradek.server.authorized_operations import (
    SUPPORTED_OPERATIONS,
    AclOperation,
    ResourceType,
    authorized_operations,
)
from tests.groups.conftest import GROUP_ARGS
from tests.groups.wire import assignment, find_coordinator, single_member_group, subscription
from tests.server.test_protocol import create_topic, nested
from tests.support.broker import BrokerProcess, running_broker
from tests.support.wire import WireClient

METADATA, DESCRIBE_GROUPS, DESCRIBE_CLUSTER, CONSUMER_GROUP_DESCRIBE = 3, 15, 60, 69
CONSUMER_GROUP_HEARTBEAT = 68
NOT_REQUESTED = -(2**31)
TOPIC_OPS = {"READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "DESCRIBE_CONFIGS"}
TOPIC_OPS |= {"ALTER_CONFIGS"}
CLUSTER_OPS = {"CREATE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"}
CLUSTER_OPS |= {"IDEMPOTENT_WRITE", "ALTER", "DESCRIBE"}
GROUP_OPS = {"READ", "DESCRIBE", "DELETE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"}


def names(bits: int) -> set[str]:
    return {op.name for op in AclOperation if bits & (1 << op)}


@pytest.fixture(scope="module")
def ops_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("ops") / "data", GROUP_ARGS) as process:
        yield process


@pytest.fixture(scope="module")
def topic(ops_broker: BrokerProcess) -> str:
    name = f"ops-{uuid.uuid4().hex[:8]}"
    with WireClient(ops_broker.bootstrap) as client:
        create_topic(client, name, 2)
    return name


@pytest.fixture(autouse=True)
def _no_tracebacks(ops_broker: BrokerProcess) -> Iterator[None]:
    yield
    assert "Traceback" not in ops_broker.log(), ops_broker.log()[-4000:]


def test_operation_sets_are_kafkas() -> None:
    assert names(authorized_operations(ResourceType.TOPIC)) == TOPIC_OPS
    assert names(authorized_operations(ResourceType.CLUSTER)) == CLUSTER_OPS
    assert names(authorized_operations(ResourceType.GROUP)) == GROUP_OPS
    assert len(SUPPORTED_OPERATIONS[ResourceType.TOPIC]) == 8


# -- Metadata --------------------------------------------------------------------------------
def _metadata(client: WireClient, version: int, topics: list[str], include: bool) -> Any:
    module = nested(METADATA, version)
    wanted = tuple(make(module.MetadataRequestTopic, name=t, topic_id=None) for t in topics)
    return client.request(
        make(
            module.MetadataRequest,
            topics=wanted,
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=include,
            include_topic_authorized_operations=include,
        )
    )


@pytest.mark.parametrize("version", range(0, 13))
def test_metadata_every_version(ops_broker: BrokerProcess, topic: str, version: int) -> None:
    missing = f"missing-{uuid.uuid4().hex[:8]}"
    with WireClient(ops_broker.bootstrap) as client:
        asked = _metadata(client, version, [topic, missing], include=True)
        plain = _metadata(client, version, [topic, missing], include=False)
    found, absent = asked.topics
    assert found.error_code == ErrorCode.none
    if version >= 8:
        # Every topic named, found or not, gets the operations (Kafka sets them on
        # every topic of the response, error topics included).
        assert names(found.topic_authorized_operations) == TOPIC_OPS
        assert names(absent.topic_authorized_operations) == TOPIC_OPS
        assert {t.topic_authorized_operations for t in plain.topics} == {NOT_REQUESTED}
    response_cls = type(asked)
    if 8 <= version <= 10:
        assert names(asked.cluster_authorized_operations) == CLUSTER_OPS
        assert plain.cluster_authorized_operations == NOT_REQUESTED
    else:
        # Before v8 the field did not exist; from v11 it moved to DescribeCluster.
        assert not has_field(response_cls, "cluster_authorized_operations")


def test_metadata_unknown_topic_id_is_not_described(ops_broker: BrokerProcess) -> None:
    module = nested(METADATA, 12)
    with WireClient(ops_broker.bootstrap) as client:
        response = client.request(
            make(
                module.MetadataRequest,
                topics=(make(module.MetadataRequestTopic, name=None, topic_id=uuid.uuid4()),),
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=True,
            )
        )
    (unknown,) = response.topics
    assert unknown.error_code == ErrorCode.unknown_topic_id
    assert unknown.topic_authorized_operations == NOT_REQUESTED


# -- DescribeCluster -------------------------------------------------------------------------
@pytest.mark.parametrize("version", range(0, 2))
def test_describe_cluster_every_version(ops_broker: BrokerProcess, version: int) -> None:
    module = nested(DESCRIBE_CLUSTER, version)
    with WireClient(ops_broker.bootstrap) as client:
        for include, expected in ((True, CLUSTER_OPS), (False, None)):
            response = client.request(
                make(
                    module.DescribeClusterRequest,
                    include_cluster_authorized_operations=include,
                    endpoint_type=1,
                )
            )
            assert response.error_code == ErrorCode.none
            bits = response.cluster_authorized_operations
            assert (names(bits) if include else bits) == (expected or NOT_REQUESTED)


# -- DescribeGroups --------------------------------------------------------------------------
def _describe_groups(client: WireClient, version: int, groups: list[str], include: bool) -> Any:
    module = nested(DESCRIBE_GROUPS, version)
    return client.request(
        make(
            module.DescribeGroupsRequest,
            groups=tuple(groups),
            include_authorized_operations=include,
        )
    ).groups


@pytest.mark.parametrize("version", range(0, 6))
def test_describe_groups_every_version(ops_broker: BrokerProcess, version: int) -> None:
    group, dead = f"g-{uuid.uuid4().hex[:8]}", f"dead-{uuid.uuid4().hex[:8]}"
    with WireClient(ops_broker.bootstrap) as client:
        assert find_coordinator(client, 3, [group])[0][4] == ErrorCode.none
        single_member_group(client, group)
        stable, gone = _describe_groups(client, version, [group, dead], include=True)
        plain = _describe_groups(client, version, [group, dead], include=False)
    assert (stable.group_state, gone.group_state) == ("Stable", "Dead")
    if version < 3:
        assert not has_field(type(stable), "authorized_operations")
        return
    # A group described without error (a missing one is "Dead", error NONE) gets them.
    assert names(stable.authorized_operations) == GROUP_OPS
    assert names(gone.authorized_operations) == GROUP_OPS
    assert {g.authorized_operations for g in plain} == {NOT_REQUESTED}


def test_describe_groups_error_gets_no_operations(ops_broker: BrokerProcess) -> None:
    with WireClient(ops_broker.bootstrap) as client:
        (invalid,) = _describe_groups(client, 5, [""], include=True)
    assert invalid.error_code != ErrorCode.none
    assert invalid.authorized_operations == NOT_REQUESTED


# -- ConsumerGroupDescribe (KIP-848) ---------------------------------------------------------
def join_consumer_group(client: WireClient, group: str, topic: str) -> Any:
    """A new KIP-848 member's first ConsumerGroupHeartbeat (epoch 0), checked for NONE."""
    module = nested(CONSUMER_GROUP_HEARTBEAT, 0)
    response = client.request(
        make(
            module.ConsumerGroupHeartbeatRequest,
            group_id=group,
            member_id=uuid.uuid4().hex,
            member_epoch=0,
            instance_id=None,
            rack_id=None,
            rebalance_timeout=datetime.timedelta(seconds=10),
            subscribed_topic_names=(topic,),
            server_assignor=None,
            topic_partitions=(),
        )
    )
    assert response.error_code == ErrorCode.none, response
    return response


@pytest.mark.parametrize("version", range(0, 2))
def test_consumer_group_describe_every_version(
    ops_broker: BrokerProcess, topic: str, version: int
) -> None:
    group = f"cg-{uuid.uuid4().hex[:8]}"
    module = nested(CONSUMER_GROUP_DESCRIBE, version)
    with WireClient(ops_broker.bootstrap) as client:
        assert find_coordinator(client, 3, [group])[0][4] == ErrorCode.none
        join_consumer_group(client, group, topic)
        results = {}
        for include in (True, False):
            (described,) = client.request(
                make(
                    module.ConsumerGroupDescribeRequest,
                    group_ids=(group,),
                    include_authorized_operations=include,
                )
            ).groups
            assert described.error_code == ErrorCode.none, described
            results[include] = described.authorized_operations
    assert names(results[True]) == GROUP_OPS
    assert results[False] == NOT_REQUESTED


# -- through confluent-kafka's AdminClient ----------------------------------------------------
def test_confluent_admin_reports_authorized_operations(
    ops_broker: BrokerProcess, topic: str
) -> None:
    confluent = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient

    group = f"ca-{uuid.uuid4().hex[:8]}"
    with WireClient(ops_broker.bootstrap) as client:
        assert find_coordinator(client, 3, [group])[0][4] == ErrorCode.none
        single_member_group(
            client,
            group,
            protocols=(("range", subscription([topic])),),
            assignment_bytes=assignment({topic: [0, 1]}),
        )
        admin = AdminClient({"bootstrap.servers": ops_broker.bootstrap})
        collection = confluent.TopicCollection([topic])
        described = admin.describe_topics(collection, include_authorized_operations=True)
        description = described[topic].result(timeout=20)
        assert {op.name for op in description.authorized_operations} == TOPIC_OPS
        plain = admin.describe_topics(collection)[topic].result(timeout=20)
        assert plain.authorized_operations is None
        cluster = admin.describe_cluster(include_authorized_operations=True).result(timeout=20)
        assert {op.name for op in cluster.authorized_operations} == CLUSTER_OPS
        groups = admin.describe_consumer_groups([group], include_authorized_operations=True)
        described_group = groups[group].result(timeout=20)
        assert {op.name for op in described_group.authorized_operations} == GROUP_OPS
