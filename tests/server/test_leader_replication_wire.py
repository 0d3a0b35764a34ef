"""The leader side of replication over the wire, on a 3-node KRaft cluster.

A topic is created with a manual assignment (leader 1, followers 2 and 3). The real
followers are then paused (SIGSTOP, resumed before the cluster stops), and a fake
follower speaks for them: replica Fetches with ``last_fetched_epoch`` — node 2 as a
v12 follower (``replica_id``), node 3 as a v17 one (topic id, ``replica_state``:
KIP-516, KIP-903). The leader's high watermark — in ListOffsets LATEST, in consumer
fetches and in the fetch responses — moves only when both have fetched past a
record; an acks=all produce is answered once they have; a broker that is not a
replica is refused with NOT_LEADER_OR_FOLLOWER, at v16 with the current leader and
its endpoint (KIP-951); a fetch whose last epoch does not match the leader's history
gets a diverging epoch and no records.
"""

from __future__ import annotations

import datetime
import os
import signal
import time
import uuid
from pathlib import Path
from typing import Any

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType

from odradek.protocol.build import make
from odradek.records.codec import decode_batches, encode_batch, new_records
from tests.support.kraft import Quorum
from tests.support.wire import WireClient

TOPIC = "replicated"
LEADER, FOLLOWERS = 1, (2, 3)


def _module(key: int, version: int) -> Any:
    return load_payload_module(key, version, EntityType.request)


def create_assigned(client: WireClient) -> uuid.UUID:
    module = _module(19, 7)
    assignment = make(module.CreatableReplicaAssignment, partition_index=0, broker_ids=(1, 2, 3))
    topic = make(
        module.CreatableTopic,
        name=TOPIC,
        num_partitions=-1,
        replication_factor=-1,
        assignments=(assignment,),
        configs=(),
    )
    request = make(
        module.CreateTopicsRequest,
        topics=(topic,),
        timeout=datetime.timedelta(seconds=10),
        validate_only=False,
    )
    (result,) = client.request(request).topics
    assert result.error_code == ErrorCode.none, result
    return result.topic_id


def produce(client: WireClient, value: bytes, acks: int) -> int:
    return client.send(produce_request(value, acks))


def produce_request(value: bytes, acks: int) -> Any:
    module = _module(0, 9)
    data = make(module.PartitionProduceData, index=0, records=encode_batch(new_records([value])))
    return make(
        module.ProduceRequest,
        transactional_id=None,
        acks=acks,
        timeout=datetime.timedelta(seconds=30),
        topic_data=(make(module.TopicProduceData, name=TOPIC, partition_data=(data,)),),
    )


def fetch(
    client: WireClient,
    replica_id: int,
    offset: int,
    last_fetched_epoch: int = -1,
    *,
    version: int = 12,
    topic_id: uuid.UUID | None = None,
    replica_epoch: int = -1,
) -> Any:
    (topic,) = fetch_response(
        client, replica_id, offset, last_fetched_epoch, version, topic_id, replica_epoch
    ).responses
    (result,) = topic.partitions
    return result


def fetch_response(
    client: WireClient,
    replica_id: int,
    offset: int,
    last_fetched_epoch: int = -1,
    version: int = 12,
    topic_id: uuid.UUID | None = None,
    replica_epoch: int = -1,
) -> Any:
    """A replica Fetch (or a consumer's, ``replica_id`` -1) of the partition: v12 by
    name with ``replica_id``; v13+ by ``topic_id``; v15+ the follower in
    ``replica_state`` with its broker epoch."""
    module = _module(1, version)
    partition = make(
        module.FetchPartition,
        partition=0,
        current_leader_epoch=-1,
        fetch_offset=offset,
        last_fetched_epoch=last_fetched_epoch,
        log_start_offset=-1,
        partition_max_bytes=1 << 20,
    )
    state = None
    if version >= 15:
        state = make(module.ReplicaState, replica_id=replica_id, replica_epoch=replica_epoch)
    request = make(
        module.FetchRequest,
        replica_id=replica_id,
        replica_state=state,
        max_wait=datetime.timedelta(0),
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(make(module.FetchTopic, topic=TOPIC, topic_id=topic_id, partitions=(partition,)),),
        forgotten_topics_data=(),
        rack_id="",
    )
    response = client.request(request)
    if version >= 13:
        assert [t.topic_id for t in response.responses] == [topic_id]
    return response


def latest(client: WireClient) -> Any:
    module = _module(2, 7)
    partition = make(
        module.ListOffsetsPartition, partition_index=0, current_leader_epoch=-1, timestamp=-1
    )
    request = make(
        module.ListOffsetsRequest,
        replica_id=-1,
        isolation_level=0,
        topics=(make(module.ListOffsetsTopic, name=TOPIC, partitions=(partition,)),),
    )
    (topic,) = client.request(request).topics
    (result,) = topic.partitions
    return result


def values(records: bytes | None) -> list[bytes]:
    return [r.value for b in decode_batches(records or b"") for r in b.records if r.value]


def wait_until_leading(client: WireClient) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if latest(client).error_code == ErrorCode.none:
            return
        time.sleep(0.1)
    raise AssertionError(f"node {LEADER} never led {TOPIC}-0")


def test_the_hw_moves_only_when_the_followers_fetched(tmp_path: Path) -> None:
    properties = {"replica.lag.time.max.ms": "600000"}  # no ISR change during the test
    with Quorum(tmp_path, properties=properties) as quorum:
        quorum.wait_for_leader(30)
        paused: list[int] = []
        try:
            with WireClient(quorum.broker_address(LEADER)) as client:
                topic_id = create_assigned(client)
                wait_until_leading(client)
                for node in FOLLOWERS:  # only the fake follower fetches from here on
                    os.kill(quorum.nodes[node].pid, signal.SIGSTOP)
                    paused.append(node)
                _exercise(quorum, client, topic_id)
        finally:
            for node in paused:
                os.kill(quorum.nodes[node].pid, signal.SIGCONT)


def _exercise(quorum: Quorum, client: WireClient, topic_id: uuid.UUID) -> None:
    def v17(follower: WireClient, offset: int, last_fetched_epoch: int = -1) -> Any:
        """Node 3 as a follower of today: Fetch v17, by id, in replica_state (its broker
        epoch -1: "not available", which KIP-903 allows; the epoch matters only to the
        ISR expansions the leader proposes, and the ISR is full here)."""
        return fetch(
            follower,
            FOLLOWERS[1],
            offset,
            last_fetched_epoch,
            version=17,
            topic_id=topic_id,
        )

    for value in (b"a", b"b", b"c"):
        response = client.receive(produce_request(value, 1), produce(client, value, 1))
        assert response.responses[0].partition_responses[0].error_code == ErrorCode.none
    start = latest(client)
    assert (start.error_code, start.offset) == (ErrorCode.none, 0)  # nothing replicated
    assert values(fetch(client, -1, 0).records) == []  # consumers see nothing yet

    with WireClient(quorum.broker_address(LEADER)) as follower:
        first = fetch(follower, FOLLOWERS[0], 0)
        assert values(first.records) == [b"a", b"b", b"c"]  # followers read to the log end
        assert first.high_watermark == 0
        assert fetch(follower, FOLLOWERS[0], 3, last_fetched_epoch=0).high_watermark == 0
        assert latest(client).offset == 0  # follower 3 has not fetched
        second = v17(follower, 2, last_fetched_epoch=0)
        assert second.high_watermark == 2  # min(3, 2)
        assert latest(client).offset == 2
        assert values(fetch(client, -1, 0).records) == [b"a", b"b"]
        assert v17(follower, 3, last_fetched_epoch=0).high_watermark == 3

        # acks=all: answered once both followers fetched past the batch. The producer's
        # connection waits for that answer (requests are served in order), so the
        # checks meanwhile go over another.
        pending = produce(client, b"d", -1)
        stranger = fetch(follower, 9, 0)
        assert stranger.error_code == ErrorCode.not_leader_or_follower
        # KIP-951 (v16+): the same refusal names the current leader and its endpoint
        refused = fetch_response(follower, 9, 0, version=16, topic_id=topic_id)
        (moved,) = refused.responses[0].partitions
        assert moved.error_code == ErrorCode.not_leader_or_follower
        assert moved.current_leader.leader_id == LEADER
        assert moved.current_leader.leader_epoch == latest(follower).leader_epoch
        (endpoint,) = refused.node_endpoints
        _, port = quorum.broker_address(LEADER).rsplit(":", 1)
        assert (endpoint.node_id, endpoint.port) == (LEADER, int(port))
        diverging = fetch(follower, FOLLOWERS[0], 9, last_fetched_epoch=0)
        assert diverging.error_code == ErrorCode.none and not diverging.records
        assert (diverging.diverging_epoch.epoch, diverging.diverging_epoch.end_offset) == (0, 4)
        fetch(follower, FOLLOWERS[0], 4, last_fetched_epoch=0)
        with WireClient(quorum.broker_address(LEADER)) as reader:
            assert latest(reader).offset == 3
        v17(follower, 4, last_fetched_epoch=0)
        answer = client.receive(produce_request(b"d", -1), pending)
        (partition,) = answer.responses[0].partition_responses
        assert (partition.error_code, partition.base_offset) == (ErrorCode.none, 3)
        assert latest(client).offset == 4
