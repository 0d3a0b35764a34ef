"""Admin operations on topics: create, delete, add partitions, and metadata lookups.

How this works and why: CreateTopics, DeleteTopics and CreatePartitions go to the
controller and answer one ``Outcome`` per topic. Topic descriptions come from one
Metadata request sent directly (not through ``Cluster.refresh``) so the caller sees
what the broker said about each topic — its error, topic id, internal flag and
authorized operations — and never creates a topic by asking about it
(``allow_auto_topic_creation`` is false). ``MetadataView`` is that answer as plain data;
the faces turn it into confluent-kafka's or aiokafka's shapes.
"""

from __future__ import annotations

import asyncio
import datetime
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.client._core.cluster import Cluster
from odradek.client._core.connection import request_entity
from odradek.client._core.errors import KafkaError, LocalError
from odradek.client._core.loop_thread import LoopThread
from odradek.client._core.types import KafkaException
from odradek.client.admin.core import (
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_TOPICS,
    METADATA,
    Answers,
    Outcome,
    controller,
)
from odradek.client.admin.types import (
    BrokerMetadata,
    ClusterMetadata,
    NewPartitions,
    NewTopic,
    Node,
    PartitionMetadata,
    TopicMetadata,
)

NO_AUTHORIZED_OPERATIONS = -(2**31)


def _timeout(seconds: float) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=int(max(seconds, 0) * 1000))


def _answers(response: Any, results: Iterable[Any]) -> Answers[str, Outcome]:
    answers: Answers[str, Outcome] = Answers(
        (r.name, Outcome(r.error_code, getattr(r, "error_message", None))) for r in results
    )
    answers.throttled(response)
    return answers


async def create_topics(
    cluster: Cluster, new_topics: Sequence[NewTopic], timeout_s: float, validate_only: bool
) -> Answers[str, Outcome]:
    connection = await controller(cluster)
    v = connection.version_for(CREATE_TOPICS)
    topics = tuple(
        request_entity(
            CREATE_TOPICS,
            v,
            "CreatableTopic",
            name=t.topic,
            num_partitions=t.num_partitions if not t.replica_assignment else -1,
            replication_factor=t.replication_factor if not t.replica_assignment else -1,
            assignments=tuple(
                request_entity(
                    CREATE_TOPICS,
                    v,
                    "CreatableReplicaAssignment",
                    partition_index=i,
                    broker_ids=tuple(replicas),
                )
                for i, replicas in enumerate(t.replica_assignment or ())
            ),
            configs=tuple(
                request_entity(CREATE_TOPICS, v, "CreatableTopicConfig", name=k, value=val)
                for k, val in t.config.items()
            ),
        )
        for t in new_topics
    )
    response = await connection.send(
        request_entity(
            CREATE_TOPICS,
            v,
            topics=topics,
            timeout=_timeout(timeout_s),
            validate_only=validate_only,
        )
    )
    return _answers(response, response.topics)


async def delete_topics(
    cluster: Cluster, names: Sequence[str], timeout_s: float
) -> Answers[str, Outcome]:
    connection = await controller(cluster)
    v = connection.version_for(DELETE_TOPICS)
    response = await connection.send(
        request_entity(
            DELETE_TOPICS,
            v,
            topic_names=tuple(names),
            topics=tuple(
                request_entity(DELETE_TOPICS, v, "DeleteTopicState", name=t, topic_id=None)
                for t in names
            ),
            timeout=_timeout(timeout_s),
        )
    )
    return _answers(response, response.responses)


async def create_partitions(
    cluster: Cluster, new_partitions: Sequence[NewPartitions], timeout_s: float, validate_only: bool
) -> Answers[str, Outcome]:
    connection = await controller(cluster)
    v = connection.version_for(CREATE_PARTITIONS)
    topics = tuple(
        request_entity(
            CREATE_PARTITIONS,
            v,
            "CreatePartitionsTopic",
            name=p.topic,
            count=p.new_total_count,
            assignments=None
            if p.replica_assignment is None
            else tuple(
                request_entity(
                    CREATE_PARTITIONS, v, "CreatePartitionsAssignment", broker_ids=tuple(r)
                )
                for r in p.replica_assignment
            ),
        )
        for p in new_partitions
    )
    response = await connection.send(
        request_entity(
            CREATE_PARTITIONS,
            v,
            topics=topics,
            timeout=_timeout(timeout_s),
            validate_only=validate_only,
        )
    )
    return _answers(response, response.results)


# -- metadata ------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class PartitionView:
    id: int
    error: ErrorCode
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]


@dataclass(slots=True)
class TopicView:
    name: str
    error: ErrorCode
    topic_id: uuid.UUID | None
    is_internal: bool
    partitions: list[PartitionView] = field(default_factory=list)
    authorized_operations: int = NO_AUTHORIZED_OPERATIONS


@dataclass(slots=True)
class MetadataView:
    """A Metadata response as plain data: brokers, controller and each topic asked for."""

    cluster_id: str | None
    controller_id: int
    brokers: dict[int, Node]
    topics: list[TopicView]
    throttle_time_ms: int = 0

    def node(self, node_id: int) -> Node | None:
        return self.brokers.get(node_id)


async def fetch_metadata(
    cluster: Cluster, names: Sequence[str] | None, include_authorized_operations: bool = False
) -> MetadataView:
    """Metadata for ``names`` (None: every topic), topics in the order asked."""
    connection = await cluster.any_connection()
    v = connection.version_for(METADATA)
    topics = None
    if names is not None:
        topics = tuple(
            request_entity(METADATA, v, "MetadataRequestTopic", name=n, topic_id=None)
            for n in names
        )
    response = await connection.send(
        request_entity(
            METADATA,
            v,
            topics=topics,
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=include_authorized_operations,
        )
    )
    brokers = {
        b.node_id: Node(b.node_id, b.host, b.port, getattr(b, "rack", None))
        for b in response.brokers
    }
    views = []
    for t in response.topics:
        topic_id = getattr(t, "topic_id", None)
        views.append(
            TopicView(
                t.name or "",
                t.error_code,
                None if topic_id is None or topic_id.int == 0 else topic_id,
                bool(getattr(t, "is_internal", False)),
                sorted(
                    (
                        PartitionView(
                            p.partition_index,
                            p.error_code,
                            p.leader_id,
                            getattr(p, "leader_epoch", -1),
                            tuple(p.replica_nodes),
                            tuple(p.isr_nodes),
                            tuple(getattr(p, "offline_replicas", ())),
                        )
                        for p in t.partitions
                    ),
                    key=lambda p: p.id,
                ),
                getattr(t, "topic_authorized_operations", NO_AUTHORIZED_OPERATIONS),
            )
        )
    if names is not None:
        order = {n: i for i, n in enumerate(names)}
        views.sort(key=lambda view: order.get(view.name, len(order)))
    throttle = getattr(response, "throttle_time", None)
    return MetadataView(
        getattr(response, "cluster_id", None),
        getattr(response, "controller_id", -1),
        brokers,
        views,
        int(throttle.total_seconds() * 1000) if throttle is not None else 0,
    )


def cluster_metadata(metadata: MetadataView) -> ClusterMetadata:
    """confluent-kafka's ``list_topics`` answer (ClusterMetadata) from a Metadata view."""
    topics = {}
    for view in metadata.topics:
        partitions = {
            p.id: PartitionMetadata(
                p.id,
                p.leader,
                list(p.replicas),
                list(p.isr),
                None if p.error == ErrorCode.none else KafkaError(p.error),
            )
            for p in view.partitions
        }
        error = None if view.error == ErrorCode.none else KafkaError(view.error, view.name)
        topics[view.name] = TopicMetadata(view.name, partitions, error)
    brokers = {n.id: BrokerMetadata(n.id, n.host, n.port) for n in metadata.brokers.values()}
    return ClusterMetadata(metadata.cluster_id, metadata.controller_id, brokers, topics)


async def list_topics(cluster: Cluster, topic: str | None) -> ClusterMetadata:
    """``list_topics(topic)`` of every face: all topics, or ``topic`` (with its error)."""
    return cluster_metadata(await fetch_metadata(cluster, None if topic is None else [topic]))


def blocking_list_topics(
    thread: LoopThread, cluster: Cluster, topic: str | None, timeout: float | None
) -> ClusterMetadata:
    """``list_topics`` of the blocking faces, on their loop thread."""
    limit = None if timeout is None or timeout < 0 else float(timeout)

    async def fetch() -> ClusterMetadata:
        try:
            return await asyncio.wait_for(list_topics(cluster, topic), limit)
        except TimeoutError:
            raise KafkaError(LocalError.timed_out, "Local: Timed out (list_topics)") from None

    try:
        return thread.run(fetch())
    except KafkaError as error:
        raise KafkaException(error) from None
    except Exception as error:  # no broker reachable: a connection error
        raise KafkaException(KafkaError(LocalError.transport, str(error))) from None
