"""Admin operations on partitions' records and on the cluster itself.

How this works and why: ListOffsets and DeleteRecords must reach each partition's
leader, so the partitions are grouped by leader (``leader_connections``) and each
leader gets one request; a partition without a known leader fails alone with the
broker's error for it. DescribeCluster goes to any broker. Each partition's answer is
a value or a ``KafkaError`` for that partition only.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping

from kio.schema.errors import ErrorCode

from odradek.client._core.cluster import Cluster
from odradek.client._core.connection import request_entity
from odradek.client._core.errors import KafkaError
from odradek.client._core.types import TopicPartition
from odradek.client.admin.core import (
    DELETE_RECORDS,
    DESCRIBE_CLUSTER,
    LIST_OFFSETS,
    by_topic,
    check,
    leader_connections,
    send_any,
)
from odradek.client.admin.types import (
    AclOperation,
    DeletedRecords,
    DescribeClusterResult,
    ListOffsetsResultInfo,
    Node,
)


async def describe_cluster(
    cluster: Cluster, include_authorized_operations: bool = False
) -> DescribeClusterResult:
    response = await send_any(
        cluster,
        DESCRIBE_CLUSTER,
        include_cluster_authorized_operations=include_authorized_operations,
        endpoint_type=1,
    )
    check(response.error_code, "DescribeCluster", response.error_message)
    nodes = [Node(b.broker_id, b.host, b.port, b.rack) for b in response.brokers]
    controller = next((n for n in nodes if n.id == response.controller_id), None)
    operations = AclOperation.from_bits(response.cluster_authorized_operations)
    return DescribeClusterResult(controller, nodes, response.cluster_id, operations)


async def list_offsets(
    cluster: Cluster, timestamps: Mapping[TopicPartition, int], isolation_level: int = 0
) -> dict[TopicPartition, ListOffsetsResultInfo | KafkaError]:
    """Offsets for ``{partition: timestamp}`` (-2 earliest, -1 latest, -3 max timestamp)."""
    found: dict[TopicPartition, ListOffsetsResultInfo | KafkaError] = {}
    for connection, parts in await leader_connections(cluster, timestamps, found):
        v = connection.version_for(LIST_OFFSETS)
        topics = tuple(
            request_entity(
                LIST_OFFSETS,
                v,
                "ListOffsetsTopic",
                name=t,
                partitions=tuple(
                    request_entity(
                        LIST_OFFSETS,
                        v,
                        "ListOffsetsPartition",
                        partition_index=p,
                        current_leader_epoch=-1,
                        timestamp=timestamps[TopicPartition(t, p)],
                    )
                    for p, _ in ps
                ),
            )
            for t, ps in by_topic((t, p, None) for t, p in parts).items()
        )
        response = await connection.send(
            request_entity(
                LIST_OFFSETS, v, replica_id=-1, isolation_level=isolation_level, topics=topics
            )
        )
        for topic in response.topics:
            for r in topic.partitions:
                key = TopicPartition(topic.name, r.partition_index)
                if r.error_code != ErrorCode.none:
                    found[key] = KafkaError(r.error_code, f"{topic.name}-{r.partition_index}")
                else:
                    epoch = r.leader_epoch if r.leader_epoch >= 0 else None
                    found[key] = ListOffsetsResultInfo(r.offset, r.timestamp, epoch)
    return found


async def delete_records(
    cluster: Cluster, before: Mapping[TopicPartition, int], timeout_s: float
) -> dict[TopicPartition, DeletedRecords | KafkaError]:
    """Move each partition's log start offset up to ``before[partition]``."""
    found: dict[TopicPartition, DeletedRecords | KafkaError] = {}
    for connection, parts in await leader_connections(cluster, before, found):
        v = connection.version_for(DELETE_RECORDS)
        topics = tuple(
            request_entity(
                DELETE_RECORDS,
                v,
                "DeleteRecordsTopic",
                name=t,
                partitions=tuple(
                    request_entity(
                        DELETE_RECORDS, v, "DeleteRecordsPartition", partition_index=p, offset=o
                    )
                    for p, o in ps
                ),
            )
            for t, ps in by_topic((t, p, before[TopicPartition(t, p)]) for t, p in parts).items()
        )
        response = await connection.send(
            request_entity(
                DELETE_RECORDS,
                v,
                topics=topics,
                timeout=datetime.timedelta(milliseconds=int(max(timeout_s, 0) * 1000)),
            )
        )
        for topic in response.topics:
            for r in topic.partitions:
                key = TopicPartition(topic.name, r.partition_index)
                if r.error_code != ErrorCode.none:
                    found[key] = KafkaError(r.error_code, f"{topic.name}-{r.partition_index}")
                else:
                    found[key] = DeletedRecords(r.low_watermark)
    return found
