"""Admin operations on consumer groups and their committed offsets.

How this works and why: ListGroups is asked of every broker (each lists the groups it
coordinates); every other group request goes to the group's coordinator, found with
FindCoordinator (retried while the coordinator is loading or moving). Answers are
kept close to the wire — ``GroupView`` holds a DescribeGroups entry with the members'
raw metadata and assignment bytes — because the two faces show them differently:
confluent-kafka decodes assignments into topic-partitions, aiokafka hands out the raw
tuples. Committing offsets for a group from outside (generation -1, no member id) is
how Kafka's own tools reset offsets; the broker refuses it while the group is active.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from odradek.client._core.cluster import Cluster
from odradek.client._core.connection import request_entity
from odradek.client._core.errors import KafkaError
from odradek.client._core.types import TopicPartition
from odradek.client.admin.core import (
    DELETE_GROUPS,
    DESCRIBE_GROUPS,
    LIST_GROUPS,
    OFFSET_COMMIT,
    OFFSET_DELETE,
    OFFSET_FETCH,
    Outcome,
    by_topic,
    check,
    coordinator,
)
from odradek.client.admin.types import Node


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str
    group_type: str


@dataclass(slots=True)
class GroupListings:
    groups: list[GroupListing] = field(default_factory=list)
    errors: list[Exception] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class MemberView:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(slots=True)
class GroupView:
    group_id: str
    error: ErrorCode
    state: str
    protocol_type: str
    protocol: str
    members: list[MemberView]
    authorized_operations: int
    coordinator: Node
    throttle_time_ms: int = 0


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str
    error: ErrorCode


async def list_groups(
    cluster: Cluster,
    broker_ids: Iterable[int] | None = None,
    states: Sequence[str] = (),
    types: Sequence[str] = (),
) -> GroupListings:
    """Groups of every broker (or of ``broker_ids``); a broker's failure is kept, not raised."""
    if broker_ids is None:
        broker_ids = sorted((await cluster.refresh()).brokers)
    result = GroupListings()
    for node_id in broker_ids:
        try:
            connection = await cluster.connection(node_id)
            v = connection.version_for(LIST_GROUPS)
            response = await connection.send(
                request_entity(
                    LIST_GROUPS, v, states_filter=tuple(states), types_filter=tuple(types)
                )
            )
            check(response.error_code, f"ListGroups on node {node_id}")
        except Exception as error:
            result.errors.append(error)
            continue
        for g in response.groups:
            result.groups.append(
                GroupListing(
                    g.group_id,
                    g.protocol_type,
                    getattr(g, "group_state", "") or "",
                    getattr(g, "group_type", "") or "",
                )
            )
    return result


async def describe_groups(
    cluster: Cluster,
    group_ids: Sequence[str],
    coordinator_id: int | None = None,
    include_authorized_operations: bool = False,
) -> dict[str, GroupView | Exception]:
    """DescribeGroups sent to each group's coordinator, one request per coordinator."""
    found: dict[str, GroupView | Exception] = {}
    by_node: dict[int, tuple[Node, list[str]]] = {}
    for group_id in dict.fromkeys(group_ids):
        try:
            _, node = await coordinator(cluster, group_id, coordinator_id)
        except Exception as error:
            found[group_id] = error
            continue
        by_node.setdefault(node.id, (node, []))[1].append(group_id)
    for node, groups in by_node.values():
        try:
            connection = await cluster.connection(node.id)
            v = connection.version_for(DESCRIBE_GROUPS)
            response = await connection.send(
                request_entity(
                    DESCRIBE_GROUPS,
                    v,
                    groups=tuple(groups),
                    include_authorized_operations=include_authorized_operations,
                )
            )
        except Exception as error:
            found.update(dict.fromkeys(groups, error))
            continue
        for g in response.groups:
            found[g.group_id] = GroupView(
                g.group_id,
                g.error_code,
                g.group_state,
                g.protocol_type,
                g.protocol_data,
                [
                    MemberView(
                        m.member_id,
                        getattr(m, "group_instance_id", None),
                        m.client_id,
                        m.client_host,
                        bytes(m.member_metadata),
                        bytes(m.member_assignment),
                    )
                    for m in g.members
                ],
                getattr(g, "authorized_operations", -(2**31)),
                node,
                int(response.throttle_time.total_seconds() * 1000),
            )
    return found


async def delete_groups(
    cluster: Cluster, group_ids: Sequence[str], coordinator_id: int | None = None
) -> dict[str, Outcome | Exception]:
    found: dict[str, Outcome | Exception] = {}
    for group_id in dict.fromkeys(group_ids):
        try:
            connection, _ = await coordinator(cluster, group_id, coordinator_id)
            v = connection.version_for(DELETE_GROUPS)
            response = await connection.send(
                request_entity(DELETE_GROUPS, v, groups_names=(group_id,))
            )
        except Exception as error:
            found[group_id] = error
            continue
        for r in response.results:
            found[r.group_id] = Outcome(r.error_code)
    return found


async def list_group_offsets(
    cluster: Cluster,
    group_id: str,
    partitions: Sequence[TopicPartition] | None = None,
    require_stable: bool = False,
    coordinator_id: int | None = None,
) -> list[CommittedOffset]:
    """The group's committed offsets (all, or ``partitions``: -1 where none is committed)."""
    connection, _ = await coordinator(cluster, group_id, coordinator_id)
    v = connection.version_for(OFFSET_FETCH)
    topics = None
    if partitions is not None:
        topics = tuple(
            request_entity(
                OFFSET_FETCH,
                v,
                "OffsetFetchRequestTopic",
                name=t,
                partition_indexes=tuple(p for p, _ in ps),
            )
            for t, ps in by_topic((tp.topic, tp.partition, None) for tp in partitions).items()
        )
    response = await connection.send(
        request_entity(
            OFFSET_FETCH, v, group_id=group_id, topics=topics, require_stable=require_stable
        )
    )
    check(response.error_code, f"group {group_id}")
    return sorted(
        (
            CommittedOffset(
                topic.name,
                p.partition_index,
                p.committed_offset,
                p.committed_leader_epoch,
                p.metadata or "",
                p.error_code,
            )
            for topic in response.topics
            for p in topic.partitions
        ),
        key=lambda c: (c.topic, c.partition),
    )


async def alter_group_offsets(
    cluster: Cluster,
    group_id: str,
    offsets: Sequence[TopicPartition],
    metadata: dict[TopicPartition, str] | None = None,
    coordinator_id: int | None = None,
) -> dict[TopicPartition, ErrorCode]:
    """Commit ``offsets`` for the group as an outside tool (generation -1)."""
    connection, _ = await coordinator(cluster, group_id, coordinator_id)
    v = connection.version_for(OFFSET_COMMIT)
    notes = metadata or {}
    topics = tuple(
        request_entity(
            OFFSET_COMMIT,
            v,
            "OffsetCommitRequestTopic",
            name=t,
            partitions=tuple(
                request_entity(
                    OFFSET_COMMIT,
                    v,
                    "OffsetCommitRequestPartition",
                    partition_index=p,
                    committed_offset=offset,
                    committed_leader_epoch=-1,
                    committed_metadata=notes.get(TopicPartition(t, p), ""),
                )
                for p, offset in ps
            ),
        )
        for t, ps in by_topic((tp.topic, tp.partition, tp.offset) for tp in offsets).items()
    )
    response = await connection.send(
        request_entity(
            OFFSET_COMMIT,
            v,
            group_id=group_id,
            generation_id_or_member_epoch=-1,
            member_id="",
            group_instance_id=None,
            topics=topics,
        )
    )
    return {
        TopicPartition(topic.name, p.partition_index): p.error_code
        for topic in response.topics
        for p in topic.partitions
    }


async def delete_group_offsets(
    cluster: Cluster,
    group_id: str,
    partitions: Sequence[TopicPartition],
    coordinator_id: int | None = None,
) -> dict[TopicPartition, ErrorCode]:
    """OffsetDelete: forget the group's committed offsets of ``partitions``.

    A group-level error (unknown group, the group is active and subscribed, ...)
    raises; per-partition answers come back as error codes.
    """
    connection, _ = await coordinator(cluster, group_id, coordinator_id)
    v = connection.version_for(OFFSET_DELETE)
    topics = tuple(
        request_entity(
            OFFSET_DELETE,
            v,
            "OffsetDeleteRequestTopic",
            name=t,
            partitions=tuple(
                request_entity(OFFSET_DELETE, v, "OffsetDeleteRequestPartition", partition_index=p)
                for p, _ in ps
            ),
        )
        for t, ps in by_topic((tp.topic, tp.partition, None) for tp in partitions).items()
    )
    response = await connection.send(
        request_entity(OFFSET_DELETE, v, group_id=group_id, topics=topics)
    )
    check(response.error_code, f"group {group_id}")
    return {
        TopicPartition(topic.name, p.partition_index): p.error_code
        for topic in response.topics
        for p in topic.partitions
    }


def partition_errors(group_id: str, answers: dict[TopicPartition, ErrorCode]) -> KafkaError | None:
    """The first per-partition failure among ``answers`` as one error (None: all fine)."""
    for tp, code in sorted(answers.items()):
        if code != ErrorCode.none:
            return KafkaError(code, f"group {group_id} {tp.topic}-{tp.partition}")
    return None
