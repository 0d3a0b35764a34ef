"""Group API requests on the wire (kio entities), one helper per API, any version.

Each helper builds the version's request with ``odradek.protocol.build.make`` (fields
a version lacks are dropped) and returns the decoded response. JoinGroup and SyncGroup
may be parked by the broker: ``send_join``/``send_sync`` return a pending request
whose ``result()`` reads the response later, so one test drives several members over
several connections without threads.
"""

from __future__ import annotations

import datetime
import struct
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType

from odradek.protocol.build import make
from tests.support.wire import WireClient
from tests.support.wire import create_topic as support_create_topic

FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 10, 11, 12, 13, 14
DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS = 15, 16, 42
OFFSET_COMMIT, OFFSET_FETCH, OFFSET_DELETE = 8, 9, 47
CREATE_TOPICS, METADATA, CREATE_PARTITIONS = 19, 3, 37
GROUP_VERSIONS = {
    FIND_COORDINATOR: (0, 6),
    JOIN_GROUP: (0, 9),
    SYNC_GROUP: (0, 5),
    HEARTBEAT: (0, 4),
    LEAVE_GROUP: (0, 5),
    LIST_GROUPS: (0, 5),
    DESCRIBE_GROUPS: (0, 5),
    DELETE_GROUPS: (0, 2),
    OFFSET_COMMIT: (2, 9),
    OFFSET_FETCH: (1, 9),
    OFFSET_DELETE: (0, 0),
}
OFFSETS_TOPIC = "__consumer_offsets"
SESSION_MS = 10_000
Protocols = Sequence[tuple[str, bytes]]


def nested(api_key: int, version: int) -> Any:
    return load_payload_module(api_key, version, EntityType.request)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def ms(value: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=value)


def java_hash(text: str) -> int:
    """Java's String.hashCode (over UTF-16 code units), as a signed int32."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def coordinator_partition(group: str, partitions: int = 50) -> int:
    return (java_hash(group) & 0x7FFFFFFF) % partitions


def subscription(topics: Iterable[str], user_data: bytes | None = None) -> bytes:
    """A ConsumerProtocolSubscription v0: version, topics, user data."""
    out = struct.pack(">h", 0)
    topics = list(topics)
    out += struct.pack(">i", len(topics))
    for topic in topics:
        raw = topic.encode()
        out += struct.pack(">h", len(raw)) + raw
    if user_data is None:
        return out + struct.pack(">i", -1)
    return out + struct.pack(">i", len(user_data)) + user_data


def assignment(partitions: dict[str, Sequence[int]]) -> bytes:
    """A ConsumerProtocolAssignment v0: version, [topic, [partition]], user data."""
    out = struct.pack(">h", 0) + struct.pack(">i", len(partitions))
    for topic, indexes in partitions.items():
        raw = topic.encode()
        out += struct.pack(">h", len(raw)) + raw + struct.pack(">i", len(indexes))
        out += b"".join(struct.pack(">i", i) for i in indexes)
    return out + struct.pack(">i", -1)


def wait_for(predicate: Callable[[], Any], timeout_s: float = 15.0, what: str = "") -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what or predicate}")
        time.sleep(0.05)


# -- FindCoordinator -------------------------------------------------------------------
def find_coordinator(
    client: WireClient, version: int, keys: Sequence[str], key_type: int = 0
) -> list[tuple[str, int, str, int, ErrorCode]]:
    """(key, node_id, host, port, error) per key; v0-3 send one request per key."""
    module = nested(FIND_COORDINATOR, version)
    if version >= 4:
        response = client.request(
            make(module.FindCoordinatorRequest, key_type=key_type, coordinator_keys=tuple(keys))
        )
        return [(c.key, c.node_id, c.host, c.port, c.error_code) for c in response.coordinators]
    found = []
    for key in keys:
        r = client.request(make(module.FindCoordinatorRequest, key=key, key_type=key_type))
        found.append((key, r.node_id, r.host, r.port, r.error_code))
    return found


# -- JoinGroup / SyncGroup -------------------------------------------------------------
@dataclass
class Pending:
    client: WireClient
    request: Any
    correlation_id: int

    def result(self) -> Any:
        return self.client.receive(self.request, self.correlation_id)


def join_request(
    version: int,
    group: str,
    member_id: str = "",
    *,
    protocols: Protocols = (("range", b"meta"),),
    instance_id: str | None = None,
    session_ms: int = SESSION_MS,
    rebalance_ms: int = SESSION_MS,
    protocol_type: str = "consumer",
) -> Any:
    module = nested(JOIN_GROUP, version)
    return make(
        module.JoinGroupRequest,
        group_id=group,
        session_timeout=ms(session_ms),
        rebalance_timeout=ms(rebalance_ms),
        member_id=member_id,
        group_instance_id=instance_id,
        protocol_type=protocol_type,
        protocols=tuple(
            make(module.JoinGroupRequestProtocol, name=n, metadata=m) for n, m in protocols
        ),
        reason="test",
    )


def send_join(
    client: WireClient, version: int, group: str, member_id: str = "", **kw: Any
) -> Pending:
    request = join_request(version, group, member_id, **kw)
    return Pending(client, request, client.send(request))


def join(client: WireClient, version: int, group: str, member_id: str = "", **kw: Any) -> Any:
    return send_join(client, version, group, member_id, **kw).result()


def send_join_new(client: WireClient, version: int, group: str, **kw: Any) -> Pending:
    """A new member's join; on v4+ without an instance id, the MEMBER_ID_REQUIRED step
    is taken first, and the returned pending join carries the given member id."""
    if version >= 4 and kw.get("instance_id") is None:
        first = join(client, version, group, **kw)
        assert first.error_code == ErrorCode.member_id_required, first
        assert first.member_id
        return send_join(client, version, group, first.member_id, **kw)
    return send_join(client, version, group, **kw)


def join_new(client: WireClient, version: int, group: str, **kw: Any) -> Any:
    return send_join_new(client, version, group, **kw).result()


def sync_request(
    version: int,
    group: str,
    generation: int,
    member_id: str,
    assignments: dict[str, bytes] | None = None,
    *,
    instance_id: str | None = None,
    protocol_type: str | None = "consumer",
    protocol_name: str | None = "range",
) -> Any:
    module = nested(SYNC_GROUP, version)
    return make(
        module.SyncGroupRequest,
        group_id=group,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=instance_id,
        protocol_type=protocol_type,
        protocol_name=protocol_name,
        assignments=tuple(
            make(module.SyncGroupRequestAssignment, member_id=m, assignment=a)
            for m, a in (assignments or {}).items()
        ),
    )


def send_sync(client: WireClient, version: int, *args: Any, **kw: Any) -> Pending:
    request = sync_request(version, *args, **kw)
    return Pending(client, request, client.send(request))


def sync(client: WireClient, version: int, *args: Any, **kw: Any) -> Any:
    return send_sync(client, version, *args, **kw).result()


def heartbeat(
    client: WireClient,
    version: int,
    group: str,
    generation: int,
    member_id: str,
    instance_id: str | None = None,
) -> ErrorCode:
    module = nested(HEARTBEAT, version)
    response = client.request(
        make(
            module.HeartbeatRequest,
            group_id=group,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=instance_id,
        )
    )
    return response.error_code


def leave(
    client: WireClient, version: int, group: str, members: Sequence[tuple[str, str | None]]
) -> Any:
    """v0-2: one member (the first); v3+: the batch."""
    module = nested(LEAVE_GROUP, version)
    if version < 3:
        return client.request(
            make(module.LeaveGroupRequest, group_id=group, member_id=members[0][0])
        )
    return client.request(
        make(
            module.LeaveGroupRequest,
            group_id=group,
            members=tuple(
                make(module.MemberIdentity, member_id=m, group_instance_id=i, reason="bye")
                for m, i in members
            ),
        )
    )


@dataclass
class Member:
    """A member of a wire-driven group, as its last join told it."""

    client: WireClient
    group: str
    member_id: str
    generation: int
    leader: str
    instance_id: str | None = None


def single_member_group(
    client: WireClient,
    group: str,
    *,
    version: int = 9,
    protocols: Protocols = (("range", b"meta"),),
    assignment_bytes: bytes = b"assigned",
    instance_id: str | None = None,
    session_ms: int = SESSION_MS,
) -> Member:
    """A Stable group of one member: join (two steps on v4+) then sync as its leader."""
    joined = join_new(
        client, version, group, protocols=protocols, instance_id=instance_id, session_ms=session_ms
    )
    assert joined.error_code == ErrorCode.none, joined
    assert joined.leader == joined.member_id
    synced = sync(
        client,
        min(version, 5),
        group,
        joined.generation_id,
        joined.member_id,
        {joined.member_id: assignment_bytes},
        instance_id=instance_id,
        protocol_name=protocols[0][0],
    )
    assert synced.error_code == ErrorCode.none, synced
    assert synced.assignment == assignment_bytes
    return Member(client, group, joined.member_id, joined.generation_id, joined.leader, instance_id)


# -- group admin -------------------------------------------------------------------------
def describe(client: WireClient, version: int, groups: Sequence[str]) -> list[Any]:
    module = nested(DESCRIBE_GROUPS, version)
    response = client.request(
        make(
            module.DescribeGroupsRequest,
            groups=tuple(groups),
            include_authorized_operations=False,
        )
    )
    return list(response.groups)


def describe_one(client: WireClient, group: str, version: int = 5) -> Any:
    (described,) = describe(client, version, [group])
    return described


def list_groups(
    client: WireClient, version: int, states: Sequence[str] = (), types: Sequence[str] = ()
) -> Any:
    module = nested(LIST_GROUPS, version)
    return client.request(
        make(module.ListGroupsRequest, states_filter=tuple(states), types_filter=tuple(types))
    )


def delete_groups(client: WireClient, version: int, groups: Sequence[str]) -> dict[str, ErrorCode]:
    module = nested(DELETE_GROUPS, version)
    response = client.request(make(module.DeleteGroupsRequest, groups_names=tuple(groups)))
    return {r.group_id: r.error_code for r in response.results}


# -- offsets ---------------------------------------------------------------------------
def commit(
    client: WireClient,
    version: int,
    group: str,
    offsets: dict[tuple[str, int], int],
    *,
    generation: int = -1,
    member_id: str = "",
    instance_id: str | None = None,
    metadata: str | None = "meta",
    leader_epoch: int = -1,
) -> dict[tuple[str, int], ErrorCode]:
    module = nested(OFFSET_COMMIT, version)
    by_topic: dict[str, list[tuple[int, int]]] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append((partition, offset))
    response = client.request(
        make(
            module.OffsetCommitRequest,
            group_id=group,
            generation_id_or_member_epoch=generation,
            member_id=member_id,
            group_instance_id=instance_id,
            retention_time=datetime.timedelta(milliseconds=-1),
            topics=tuple(
                make(
                    module.OffsetCommitRequestTopic,
                    name=topic,
                    partitions=tuple(
                        make(
                            module.OffsetCommitRequestPartition,
                            partition_index=p,
                            committed_offset=o,
                            committed_leader_epoch=leader_epoch,
                            committed_metadata=metadata,
                        )
                        for p, o in parts
                    ),
                )
                for topic, parts in by_topic.items()
            ),
        )
    )
    return {
        (t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions
    }


@dataclass(frozen=True)
class Fetched:
    offset: int
    leader_epoch: int
    metadata: str | None
    error: ErrorCode


def fetch_offsets(
    client: WireClient,
    version: int,
    groups: dict[str, Sequence[tuple[str, int]] | None],
) -> dict[str, tuple[ErrorCode, dict[tuple[str, int], Fetched]]]:
    """Per group: (group error, {(topic, partition): Fetched}); ``None`` asks for all.

    Below v8 one request per group."""
    module = nested(OFFSET_FETCH, version)
    out: dict[str, tuple[ErrorCode, dict[tuple[str, int], Fetched]]] = {}

    def topics_of(cls: Any, wanted: Sequence[tuple[str, int]] | None) -> Any:
        if wanted is None:
            return None
        by_topic: dict[str, list[int]] = {}
        for topic, partition in wanted:
            by_topic.setdefault(topic, []).append(partition)
        return tuple(make(cls, name=t, partition_indexes=tuple(ps)) for t, ps in by_topic.items())

    def parse(topics: Any) -> dict[tuple[str, int], Fetched]:
        return {
            (t.name, p.partition_index): Fetched(
                p.committed_offset,
                getattr(p, "committed_leader_epoch", -1),
                p.metadata,
                p.error_code,
            )
            for t in topics
            for p in t.partitions
        }

    if version >= 8:
        request = make(
            module.OffsetFetchRequest,
            groups=tuple(
                make(
                    module.OffsetFetchRequestGroup,
                    group_id=g,
                    member_id=None,
                    member_epoch=-1,
                    topics=topics_of(module.OffsetFetchRequestTopics, wanted),
                )
                for g, wanted in groups.items()
            ),
            require_stable=True,
        )
        for g in client.request(request).groups:
            out[g.group_id] = (g.error_code, parse(g.topics))
        return out
    for group, wanted in groups.items():
        response = client.request(
            make(
                module.OffsetFetchRequest,
                group_id=group,
                topics=topics_of(module.OffsetFetchRequestTopic, wanted),
                require_stable=True,
            )
        )
        out[group] = (getattr(response, "error_code", ErrorCode.none), parse(response.topics))
    return out


def fetch_one(
    client: WireClient, group: str, wanted: Sequence[tuple[str, int]] | None, version: int = 9
) -> dict[tuple[str, int], Fetched]:
    error, found = fetch_offsets(client, version, {group: wanted})[group]
    assert error == ErrorCode.none, error
    return found


def offset_delete(
    client: WireClient, group: str, partitions: Sequence[tuple[str, int]]
) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
    module = nested(OFFSET_DELETE, 0)
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    response = client.request(
        make(
            module.OffsetDeleteRequest,
            group_id=group,
            topics=tuple(
                make(
                    module.OffsetDeleteRequestTopic,
                    name=t,
                    partitions=tuple(
                        make(module.OffsetDeleteRequestPartition, partition_index=p) for p in ps
                    ),
                )
                for t, ps in by_topic.items()
            ),
        )
    )
    return response.error_code, {
        (t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions
    }


# -- topics ------------------------------------------------------------------------------
def create_topic(
    client: WireClient, name: str, partitions: int = 1, configs: dict[str, str] | None = None
) -> str:
    result = support_create_topic(client, name, partitions, configs)
    assert result.error_code == ErrorCode.none, result
    return name


def metadata(client: WireClient, topics: Sequence[str] | None) -> Any:
    module = nested(METADATA, 12)
    wanted = (
        None
        if topics is None
        else tuple(make(module.MetadataRequestTopic, name=t, topic_id=None) for t in topics)
    )
    return client.request(
        make(
            module.MetadataRequest,
            topics=wanted,
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
    )
