"""Fetch (key 1): decode, let the replica layer read and wait, encode.

The semantics live in replica/ (review step 3): ``ReplicaManager.fetch`` reads every
partition — consumers below the high watermark (read_committed: below the LSO, equal
to the HW until transactions arrive), followers (``replica_id`` >= 0) to the log end,
reporting their position to the leader — checks leader epochs, reports a diverging
epoch (v12+), points a consumer with a rack (v11+ ``rack_id``) at a follower of its
rack (``preferred_read_replica``, KIP-392) and serves such consumers as a follower
too, and long-polls until ``min_bytes`` or ``max_wait``. This handler only
turns the request into ``FetchParams`` and the answer into fetch_codec's structures,
whose records go from segment files to the socket with sendfile. KIP-74: the first
batch of the first partition with data is returned whole even if larger than
max_bytes; later partitions share what is left. Fetch sessions (KIP-227) are
declined: session id 0 in every response makes clients send full fetches, which the
protocol allows.

Versions past v12, as Kafka defines them:

- v13 (KIP-516) names topics by id. Each id is resolved through the metadata image
  to the name the replica layer reads by; an id the image does not know (or the zero
  id) is answered UNKNOWN_TOPIC_ID on each of its partitions without a read, and the
  response names every topic by the id it was asked by. Such an error answers at
  once, without the long poll, as any partition's error does.
- v14 (KIP-405) changes nothing on the wire.
- v15 (KIP-903) moves the follower's id into the ``replica_state`` tag with its
  broker epoch; both feed the same follower path as v12's ``replica_id`` (the epoch
  goes with the follower's fetch state to the ISR expansion the leader proposes).
- v16 (KIP-951): a partition answered NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH
  carries ``current_leader`` (leader id and epoch from this node's metadata image), and
  the body's ``node_endpoints`` lists each such leader's endpoint on the listener the
  request arrived on, so the client goes to the new leader without a Metadata request.
- v17 (KIP-853) adds the follower's ``replica_directory_id`` tag; KRaft's own fetch
  uses it, partition replication has no use for it, so it is read and left alone.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from odradek.network.connection import Response
from odradek.protocol.build import error_code
from odradek.protocol.fetch_codec import (
    FIRST_NODE_ENDPOINTS,
    FIRST_TOPIC_ID,
    MAX_VERSION,
    MIN_VERSION,
    NodeEndpoint,
    PartitionResult,
    TopicResult,
    encode_fetch_response,
)
from odradek.protocol.messages import Request
from odradek.replica.reads import FetchParams, FetchPosition, PartitionRead
from odradek.security.quotas import CONSUMER_BYTE_RATE
from odradek.server.authorized_operations import AclOperation, ResourceType
from odradek.server.handlers import handles

if TYPE_CHECKING:
    from odradek.metadata.image import MetadataImage
    from odradek.server.services import BrokerServices

FETCH_KEY = 1
TOPIC: Final = ResourceType.TOPIC
CLUSTER: Final = ResourceType.CLUSTER
FINAL_EPOCH = -1
MAX_INT32 = 0x7FFFFFFF
# KIP-951: the errors whose partitions carry the current leader (v16+)
LEADER_MOVED: Final = frozenset({"NOT_LEADER_OR_FOLLOWER", "FENCED_LEADER_EPOCH"})
_LEADER_MOVED_CODES: Final = frozenset(error_code(name).value for name in LEADER_MOVED)


@handles(FETCH_KEY, MIN_VERSION, MAX_VERSION)
async def fetch(services: BrokerServices, request: Request) -> Response:
    body = request.body
    header = request.header
    version = header.api_version
    session_id = getattr(body, "session_id", 0)
    session_epoch = getattr(body, "session_epoch", FINAL_EPOCH)
    if session_id != 0 or session_epoch > 0:
        parts = encode_fetch_response(
            version,
            header.correlation_id,
            [],
            error_code=error_code("FETCH_SESSION_ID_NOT_FOUND").value,
        )
        return Response(parts)
    requested: Sequence[Any] = getattr(body, "topics", ())
    names: list[str | None] = [getattr(topic, "topic", None) for topic in requested]
    if version >= FIRST_TOPIC_ID:
        names = resolve_topic_ids(services.metadata.image, requested)
    denied = _unauthorized(services, request, names)
    if denied is None:  # a follower's fetch without CLUSTER_ACTION
        failed = error_code("CLUSTER_AUTHORIZATION_FAILED").value
        return Response(
            encode_fetch_response(version, header.correlation_id, [], error_code=failed)
        )
    readable = [None if name in denied else name for name in names]
    params = fetch_params(body, readable)
    quotas = getattr(services, "client_quotas", None)
    if quotas is not None and params.replica_id < 0:
        capped = quotas.fetch_max_bytes(
            request.session.user, header.client_id or "", params.max_bytes
        )
        params = dataclasses.replace(params, max_bytes=capped)
    if None in readable:  # an error answers at once, as any partition's error does
        params = dataclasses.replace(params, max_wait_ms=0)
    read = iter(await services.replicas.fetch(params))
    topics: list[TopicResult] = []
    for topic, name in zip(requested, names, strict=True):
        topic_id = getattr(topic, "topic_id", None)
        if name is None or name in denied:  # v13+: an id no topic has; or not READ
            error = "UNKNOWN_TOPIC_ID" if name is None else "TOPIC_AUTHORIZATION_FAILED"
            code = error_code(error).value
            partitions = [PartitionResult(p.partition, code) for p in topic.partitions]
            topics.append(TopicResult(name or "", partitions, topic_id))
            continue
        read_name, reads = next(read)
        topics.append(TopicResult(read_name, [_encode(i, r) for i, r in reads], topic_id))
    endpoints: list[NodeEndpoint] = []
    if version >= FIRST_NODE_ENDPOINTS:
        endpoints = current_leaders(services, request, topics)
    throttle_ms = 0
    if params.replica_id < 0:
        throttle_ms = consumer_throttle(services, request, topics)
    return Response(
        encode_fetch_response(
            version,
            header.correlation_id,
            topics,
            throttle_ms=throttle_ms,
            node_endpoints=endpoints,
        ),
        throttle_ms=throttle_ms,
    )


def consumer_throttle(
    services: BrokerServices, request: Request, topics: Sequence[TopicResult]
) -> int:
    """Charge a consumer's fetch to its ``consumer_byte_rate`` (server/quotas.py); past
    the quota the bytes are taken back and every partition is answered without
    records (Kafka's throttled fetch response), the throttle time returned."""
    quotas = getattr(services, "client_quotas", None)
    if quotas is None or not quotas.enabled(CONSUMER_BYTE_RATE):
        return 0
    user, client_id = request.session.user, request.header.client_id or ""
    size = sum(p.records_size for t in topics for p in t.partitions)
    throttle_ms: int = quotas.record_fetch(user, client_id, size)
    if throttle_ms > 0:
        quotas.unrecord(CONSUMER_BYTE_RATE, user, client_id, size)
        for topic in topics:
            for partition in topic.partitions:
                partition.ranges = []
                partition.aborted = None if partition.aborted is None else []
    return throttle_ms


def _unauthorized(
    services: BrokerServices, request: Request, names: Sequence[str | None]
) -> set[str | None] | None:
    """The topics a consumer may not READ; None when a follower (replica id >= 0)
    lacks CLUSTER_ACTION on the cluster (Kafka fails the whole request then)."""
    authorizer = services.authorizer
    body = request.body
    replica_state = getattr(body, "replica_state", None)
    replica_id = replica_state.replica_id if replica_state else getattr(body, "replica_id", -1)
    if replica_id >= 0:
        allowed = authorizer.allowed(request.session, AclOperation.CLUSTER_ACTION, CLUSTER)
        return set() if allowed else None
    wanted = {name for name in names if name is not None}
    return set(wanted - authorizer.allowed_names(request.session, AclOperation.READ, TOPIC, wanted))


def resolve_topic_ids(image: MetadataImage, topics: Sequence[Any]) -> list[str | None]:
    """Each v13+ topic's name by its id in ``image``; None for an id no topic has."""
    names: list[str | None] = []
    for topic in topics:
        topic_id = topic.topic_id
        found = image.topic_by_id(topic_id) if isinstance(topic_id, uuid.UUID) else None
        names.append(found.name if found is not None else None)
    return names


def current_leaders(
    services: BrokerServices, request: Request, topics: Sequence[TopicResult]
) -> list[NodeEndpoint]:
    """KIP-951: fill ``current_leader`` on each partition whose error says leadership
    moved (from this node's image: it may know of the move before the client does), and
    return the endpoints of those leaders on the request's listener."""
    image = services.metadata.image
    leaders: set[int] = set()
    for topic in topics:
        known = image.topics.get(topic.name) if topic.name else None
        if known is None:
            continue
        for partition in topic.partitions:
            if partition.error_code not in _LEADER_MOVED_CODES:
                continue
            state = known.partitions.get(partition.index)
            if state is None:
                continue
            partition.current_leader = (state.leader, state.leader_epoch)
            if state.leader >= 0:
                leaders.add(state.leader)
    if not leaders:
        return []
    listener = request.listener or services.metadata.default_listener
    return [
        NodeEndpoint(e.node_id, e.host, e.port, e.rack)
        for e in services.metadata.endpoints(image, listener)
        if e.node_id in leaders
    ]


def fetch_params(body: object, names: Sequence[str | None] | None = None) -> FetchParams:
    """The request as the replica layer takes it (fields by version: v3 max_bytes,
    v4 isolation_level, v5 log_start_offset, v9 current_leader_epoch, v11 rack_id,
    v12 last_fetched_epoch; v15+ carries the follower in replica_state). ``names`` are
    the request's topics' names (v13+: resolved from their ids), None for a topic to
    leave out; without it, each topic's own ``topic``."""
    replica_id = getattr(body, "replica_id", -1)
    replica_epoch = -1
    replica_state = getattr(body, "replica_state", None)
    if replica_state is not None:
        replica_id = replica_state.replica_id
        replica_epoch = replica_state.replica_epoch
    requested = getattr(body, "topics", ())
    if names is None:
        names = [topic.topic for topic in requested]
    topics = [
        (
            name,
            [
                (
                    wanted.partition,
                    FetchPosition(
                        wanted.fetch_offset,
                        wanted.partition_max_bytes,
                        getattr(wanted, "current_leader_epoch", -1),
                        getattr(wanted, "last_fetched_epoch", -1),
                        getattr(wanted, "log_start_offset", -1),
                    ),
                )
                for wanted in topic.partitions
            ],
        )
        for topic, name in zip(requested, names, strict=True)
        if name is not None
    ]
    return FetchParams(
        replica_id=replica_id,
        max_wait_ms=int(body.max_wait.total_seconds() * 1000),  # type: ignore[attr-defined]
        min_bytes=body.min_bytes,  # type: ignore[attr-defined]
        max_bytes=getattr(body, "max_bytes", MAX_INT32),
        topics=topics,
        isolation_level=getattr(body, "isolation_level", 0),
        replica_epoch=replica_epoch,
        client_rack=getattr(body, "rack_id", None),  # v11+: may read from a follower
    )


def _encode(index: int, read: PartitionRead) -> PartitionResult:
    return PartitionResult(
        index,
        error_code(read.error).value,
        read.high_watermark,
        read.last_stable_offset,
        read.log_start_offset,
        read.ranges,
        aborted=read.aborted,
        diverging_epoch=read.diverging_epoch,
        preferred_read_replica=read.preferred_read_replica,
    )
