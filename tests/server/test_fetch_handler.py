"""The Fetch handler in-process, against kio: what v13–v17 add around the replica layer.

The replica layer is a stand-in that answers each partition with a chosen
``PartitionRead`` and keeps the ``FetchParams`` it was given; the metadata is a real
``MetadataImage``. So the checks here are the handler's own: topic ids resolved
through the image (and answered by id), unknown ids answered UNKNOWN_TOPIC_ID without
a read and without the long poll, v15's ``replica_state`` feeding the same follower
fields as v12's ``replica_id``, and KIP-951's ``current_leader`` + ``node_endpoints``
on NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH (FENCED_LEADER_EPOCH cannot be
provoked on a single node over the wire: leader epochs change only with elections).
"""

from __future__ import annotations

import asyncio
import datetime
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from kio.index import load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from odradek.metadata.image import MetadataImage, MetadataRecord
from odradek.metadata.view import Endpoint, endpoints_for_listener
from odradek.network.connection import Response
from odradek.protocol.build import make
from odradek.protocol.messages import Request, RequestHeader
from odradek.replica.reads import FetchParams, FetchResults, PartitionRead
from odradek.server.authorizer import ALLOW_ALL, Authorizer
from odradek.server.handlers.fetch import fetch
from tests.server.test_protocol import nested

FETCH = 1
ORDERS = uuid.UUID(int=0x0123)
EVENTS = uuid.UUID(int=0x0456)
LISTENER = "PLAINTEXT"


def _image() -> MetadataImage:
    """Brokers 1 (here), 2 and 3 (rack r3, a second listener); ``orders`` led by 2 in
    epoch 7 (partition 0) and by nobody (partition 1, offline); ``events`` led by 3."""
    records = [
        MetadataRecord(
            "RegisterBroker",
            {"broker_id": b, "endpoints": [[LISTENER, f"host-{b}", 9090 + b], ["OTHER", "o", 1]]}
            | ({"rack": "r3"} if b == 3 else {}),
        )
        for b in (1, 2, 3)
    ]
    records.append(MetadataRecord("Topic", {"name": "orders", "topic_id": str(ORDERS)}))
    records.append(MetadataRecord("Topic", {"name": "events", "topic_id": str(EVENTS)}))
    for topic_id, index, leader, epoch in (
        (ORDERS, 0, 2, 7),
        (ORDERS, 1, -1, 4),
        (EVENTS, 0, 3, 2),
    ):
        fields = {"topic_id": str(topic_id), "partition": index, "replicas": [1, 2, 3]}
        fields |= {"isr": [1, 2, 3], "leader": leader, "leader_epoch": epoch}
        records.append(MetadataRecord("Partition", fields))
    return MetadataImage().apply(records, 10)


@dataclass
class FakeMetadata:
    image: MetadataImage = field(default_factory=_image)
    default_listener: str = LISTENER

    def endpoints(
        self, image: MetadataImage, listener: str, *, include_fenced: bool = False
    ) -> list[Endpoint]:
        return endpoints_for_listener(image, listener, include_fenced=include_fenced)


@dataclass
class FakeReplicas:
    """Answers every partition with ``reads[(name, index)]`` (default: no error)."""

    reads: dict[tuple[str, int], PartitionRead] = field(default_factory=dict)
    asked: list[FetchParams] = field(default_factory=list)

    async def fetch(self, params: FetchParams) -> FetchResults:
        self.asked.append(params)
        return [
            (name, [(i, self.reads.get((name, i), PartitionRead())) for i, _ in positions])
            for name, positions in params.topics
        ]


@dataclass
class FakeServices:
    metadata: FakeMetadata = field(default_factory=FakeMetadata)
    replicas: FakeReplicas = field(default_factory=FakeReplicas)
    authorizer: Authorizer = ALLOW_ALL


def _request(
    version: int,
    topics: Sequence[tuple[str | uuid.UUID, Sequence[int]]],
    *,
    replica_id: int = -1,
    replica_epoch: int = -1,
    max_wait_ms: int = 500,
) -> Any:
    module = nested(FETCH, version)
    fetch_topics = tuple(
        make(
            module.FetchTopic,
            topic=key,
            topic_id=key,
            partitions=tuple(
                make(
                    module.FetchPartition,
                    partition=index,
                    current_leader_epoch=5,
                    fetch_offset=10,
                    last_fetched_epoch=4,
                    log_start_offset=0,
                    partition_max_bytes=1000,
                )
                for index in indexes
            ),
        )
        for key, indexes in topics
    )
    state = None
    if version >= 15:
        state = make(module.ReplicaState, replica_id=replica_id, replica_epoch=replica_epoch)
    return make(
        module.FetchRequest,
        replica_id=replica_id,
        replica_state=state,
        max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=fetch_topics,
        forgotten_topics_data=(),
        rack_id="",
    )


def _call(services: FakeServices, body: Any, listener: str = LISTENER) -> Any:
    version = body.__version__
    request = Request(RequestHeader(FETCH, version, 77, "t"), body, 0, listener)
    response: Response = asyncio.run(fetch(services, request))  # type: ignore[arg-type]
    frame = b"".join(p for p in response.parts if isinstance(p, bytes))
    schema = load_response_schema(FETCH, version)
    header, offset = entity_reader(schema.__header_schema__)(frame, 0)
    assert header.correlation_id == 77
    decoded, size = entity_reader(schema)(frame, offset)
    assert offset + size == len(frame)
    return decoded


@pytest.mark.parametrize("version", [13, 14, 15, 16, 17])
def test_topic_ids_are_resolved_and_unknown_ones_answered_without_a_read(version: int) -> None:
    services = FakeServices()
    stranger = uuid.UUID(int=0xDEAD)
    body = _request(version, [(stranger, [0, 2]), (EVENTS, [0]), (ORDERS, [1, 0])])
    response = _call(services, body)
    (params,) = services.replicas.asked
    assert [(name, [i for i, _ in ps]) for name, ps in params.topics] == [
        ("events", [0]),
        ("orders", [1, 0]),
    ]
    assert params.max_wait_ms == 0  # an error answers at once
    assert [t.topic_id for t in response.responses] == [stranger, EVENTS, ORDERS]
    unknown, events, orders = response.responses
    assert [(p.partition_index, p.error_code) for p in unknown.partitions] == [
        (0, ErrorCode.unknown_topic_id),
        (2, ErrorCode.unknown_topic_id),
    ]
    assert [(p.partition_index, p.error_code) for p in orders.partitions] == [
        (1, ErrorCode.none),
        (0, ErrorCode.none),
    ]
    assert events.partitions[0].error_code == ErrorCode.none


def test_known_ids_keep_the_long_poll() -> None:
    services = FakeServices()
    _call(services, _request(17, [(ORDERS, [0])], max_wait_ms=500))
    assert services.replicas.asked[0].max_wait_ms == 500


@pytest.mark.parametrize(("version", "replica_epoch"), [(12, -1), (14, -1), (15, 42), (17, 42)])
def test_replica_state_feeds_the_same_follower_fields_as_replica_id(
    version: int, replica_epoch: int
) -> None:
    services = FakeServices()
    key = ORDERS if version >= 13 else "orders"
    _call(services, _request(version, [(key, [0])], replica_id=2, replica_epoch=42))
    (params,) = services.replicas.asked
    assert params.from_follower and params.replica_id == 2
    assert params.replica_epoch == replica_epoch  # only v15+ carries the broker epoch
    ((name, ((index, position),)),) = params.topics
    assert (name, index) == ("orders", 0)
    assert (position.fetch_offset, position.current_leader_epoch) == (10, 5)
    assert (position.last_fetched_epoch, position.log_start_offset) == (4, 0)


def test_consumers_of_v15_plus_are_not_followers() -> None:
    services = FakeServices()
    _call(services, _request(17, [(ORDERS, [0])]))
    assert not services.replicas.asked[0].from_follower


@pytest.mark.parametrize("version", [16, 17])
def test_leadership_errors_carry_the_current_leader_and_its_endpoint(version: int) -> None:
    services = FakeServices()
    services.replicas.reads = {
        ("orders", 0): PartitionRead("NOT_LEADER_OR_FOLLOWER"),
        ("orders", 1): PartitionRead("FENCED_LEADER_EPOCH"),  # offline: leader -1
        ("events", 0): PartitionRead("FENCED_LEADER_EPOCH"),
    }
    response = _call(services, _request(version, [(ORDERS, [0, 1]), (EVENTS, [0])]))
    orders, events = response.responses
    moved, offline = orders.partitions
    assert (moved.current_leader.leader_id, moved.current_leader.leader_epoch) == (2, 7)
    assert (offline.current_leader.leader_id, offline.current_leader.leader_epoch) == (-1, 4)
    (fenced,) = events.partitions
    assert (fenced.current_leader.leader_id, fenced.current_leader.leader_epoch) == (3, 2)
    # the leaders' endpoints on the request's listener, none for an unknown leader
    assert [(e.node_id, e.host, e.port, e.rack) for e in response.node_endpoints] == [
        (2, "host-2", 9092, None),
        (3, "host-3", 9093, "r3"),
    ]
    other = _call(services, _request(version, [(ORDERS, [0])]), listener="OTHER")
    assert [(e.node_id, e.host, e.port) for e in other.node_endpoints] == [(2, "o", 1)]


@pytest.mark.parametrize("version", [12, 15, 16])
def test_other_errors_and_older_versions_carry_no_leader(version: int) -> None:
    services = FakeServices()
    services.replicas.reads = {
        ("orders", 0): PartitionRead("NOT_LEADER_OR_FOLLOWER"),
        ("orders", 1): PartitionRead("OFFSET_OUT_OF_RANGE"),
    }
    key = ORDERS if version >= 13 else "orders"
    response = _call(services, _request(version, [(key, [0, 1])]))
    not_leader, out_of_range = response.responses[0].partitions
    assert out_of_range.current_leader.leader_id == -1  # kio's default: not sent
    if version >= 16:
        assert not_leader.current_leader.leader_id == 2
        assert [e.node_id for e in response.node_endpoints] == [2]
    else:  # KIP-951 came with v16; older clients get the error alone
        assert not_leader.current_leader.leader_id == -1
        assert getattr(response, "node_endpoints", ()) == ()
