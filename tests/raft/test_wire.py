"""raft/wire.py: raft message → kio entity → bytes → kio entity → raft message, at every
version served; wire_records.py: log entries ⇄ Fetch record bytes; and
wire_describe_quorum.py's DescribeQuorum response."""

from __future__ import annotations

import io
import uuid
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from odradek.raft import wire, wire_describe_quorum, wire_records
from odradek.raft.log import LogEntry, SnapshotId
from odradek.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    EpochEndOffset,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    LeaderIdAndEpoch,
    VoteRequest,
    VoteResponse,
)
from odradek.raft.node import QuorumDescription, ReplicaDescription
from odradek.records.batch import HEADER_SIZE
from odradek.records.codec import encode_batch, new_records

ids = st.integers(-1, 1_000)
epochs = st.integers(-1, 2**31 - 1)
offsets = st.integers(-1, 2**62)
cluster_ids = st.none() | st.text(min_size=1, max_size=30)
# Partition-level errors (the top-level ones travel without partition data).
partition_errors = st.sampled_from(
    [
        ErrorCode.none,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.unknown_leader_epoch,
        ErrorCode.not_leader_or_follower,
        ErrorCode.inconsistent_voter_set,
        ErrorCode.invalid_request,
        ErrorCode.snapshot_not_found,
        ErrorCode.position_out_of_range,
    ]
)


def through_bytes(entity: Any) -> Any:
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    decoded, size = entity_reader(type(entity))(buffer.getvalue(), 0)
    assert size == len(buffer.getvalue())
    return decoded


def versions(api_key: int) -> st.SearchStrategy[int]:
    low, high = wire.VERSIONS[api_key]
    return st.integers(low, high)


def request_round_trip(message: Any, version: int) -> Any:
    return wire.request_from_kio(through_bytes(wire.request_to_kio(message, version)))


def response_round_trip(message: Any, api_key: int, version: int) -> Any:
    return wire.response_from_kio(through_bytes(wire.response_to_kio(message, api_key, version)))


# --- requests ---------------------------------------------------------------------------


@given(cluster_ids, ids, epochs, ids, epochs, offsets, st.booleans(), versions(wire.VOTE_KEY))
def test_vote_request(
    cluster_id: str | None,
    voter_id: int,
    replica_epoch: int,
    replica_id: int,
    last_epoch: int,
    last_offset: int,
    pre_vote: bool,
    version: int,
) -> None:
    message = VoteRequest(
        cluster_id=cluster_id,
        voter_id=voter_id if version >= 1 else -1,  # v1 added voter_id
        replica_epoch=replica_epoch,
        replica_id=replica_id,
        last_offset_epoch=last_epoch,
        last_offset=last_offset,
        pre_vote=pre_vote and version >= 2,  # v2 added pre_vote (KIP-996)
    )
    assert request_round_trip(message, version) == message


def test_a_pre_vote_cannot_be_sent_below_v2() -> None:
    message = VoteRequest(
        cluster_id=None,
        voter_id=2,
        replica_epoch=1,
        replica_id=1,
        last_offset_epoch=0,
        last_offset=0,
        pre_vote=True,
    )
    with pytest.raises(wire.WireError):
        wire.request_to_kio(message, 1)


@given(cluster_ids, ids, ids, epochs, versions(wire.BEGIN_QUORUM_EPOCH_KEY))
def test_begin_quorum_epoch_request(
    cluster_id: str | None, voter_id: int, leader_id: int, epoch: int, version: int
) -> None:
    message = BeginQuorumEpochRequest(
        cluster_id=cluster_id,
        voter_id=voter_id if version >= 1 else -1,
        leader_id=leader_id,
        leader_epoch=epoch,
    )
    assert request_round_trip(message, version) == message


@given(
    cluster_ids,
    ids,
    epochs,
    st.lists(st.integers(0, 1000), max_size=5),
    versions(wire.END_QUORUM_EPOCH_KEY),
)
def test_end_quorum_epoch_request(
    cluster_id: str | None, leader_id: int, epoch: int, preferred: list[int], version: int
) -> None:
    message = EndQuorumEpochRequest(
        cluster_id=cluster_id,
        leader_id=leader_id,
        leader_epoch=epoch,
        preferred_candidates=tuple(preferred),
    )
    assert request_round_trip(message, version) == message


@given(
    cluster_ids,
    ids,
    st.integers(-1, 2**40),
    epochs,
    offsets,
    epochs,
    offsets,
    st.integers(0, 2**31 - 1),
    versions(wire.FETCH_KEY),
)
def test_fetch_request(
    cluster_id: str | None,
    replica_id: int,
    replica_epoch: int,
    leader_epoch: int,
    fetch_offset: int,
    last_fetched_epoch: int,
    log_start: int,
    max_bytes: int,
    version: int,
) -> None:
    message = FetchRequest(
        cluster_id=cluster_id,
        replica_id=replica_id,
        replica_epoch=replica_epoch if version >= 15 else -1,  # v15: ReplicaState
        current_leader_epoch=leader_epoch,
        fetch_offset=fetch_offset,
        last_fetched_epoch=last_fetched_epoch,
        log_start_offset=log_start,
        partition_max_bytes=max_bytes,
    )
    assert request_round_trip(message, version) == message


@given(
    cluster_ids,
    ids,
    st.integers(0, 2**31 - 1),
    epochs,
    offsets,
    epochs,
    st.integers(0, 2**62),
    versions(wire.FETCH_SNAPSHOT_KEY),
)
def test_fetch_snapshot_request(
    cluster_id: str | None,
    replica_id: int,
    max_bytes: int,
    leader_epoch: int,
    end_offset: int,
    snapshot_epoch: int,
    position: int,
    version: int,
) -> None:
    message = FetchSnapshotRequest(
        cluster_id=cluster_id,
        replica_id=replica_id,
        max_bytes=max_bytes,
        current_leader_epoch=leader_epoch,
        snapshot_id=SnapshotId(end_offset=end_offset, epoch=snapshot_epoch),
        position=position,
    )
    assert request_round_trip(message, version) == message


def test_a_request_for_another_topic_or_partition_is_invalid() -> None:
    fetch = FetchRequest(
        cluster_id=None,
        replica_id=2,
        replica_epoch=-1,
        current_leader_epoch=1,
        fetch_offset=0,
        last_fetched_epoch=0,
        log_start_offset=0,
        partition_max_bytes=1024,
    )
    for version in (12, 17):
        entity = wire.request_to_kio(fetch, version)
        topic = entity.topics[0]
        for other in (
            {"topic": "orders"} if version == 12 else {"topic_id": uuid.uuid4()},
            {"partitions": (topic.partitions[0], topic.partitions[0])},
        ):
            bad = replace(entity, topics=(replace(topic, **other),))
            with pytest.raises(wire.WireError) as error:
                wire.request_from_kio(bad)
            assert error.value.code == ErrorCode.invalid_request


# --- responses --------------------------------------------------------------------------


@given(partition_errors, ids, epochs, st.booleans(), versions(wire.VOTE_KEY))
def test_vote_response(
    error: ErrorCode, leader_id: int, epoch: int, granted: bool, version: int
) -> None:
    message = VoteResponse(
        error_code=error, leader_id=leader_id, leader_epoch=epoch, vote_granted=granted
    )
    assert response_round_trip(message, wire.VOTE_KEY, version) == message


@given(partition_errors, ids, epochs, st.integers(0, 1), st.booleans())
def test_begin_and_end_quorum_epoch_responses(
    error: ErrorCode, leader_id: int, epoch: int, version: int, begin: bool
) -> None:
    if begin:
        message: Any = BeginQuorumEpochResponse(
            error_code=error, leader_id=leader_id, leader_epoch=epoch
        )
        api_key = wire.BEGIN_QUORUM_EPOCH_KEY
    else:
        message = EndQuorumEpochResponse(error_code=error, leader_id=leader_id, leader_epoch=epoch)
        api_key = wire.END_QUORUM_EPOCH_KEY
    assert response_round_trip(message, api_key, version) == message


@st.composite
def log_entries(draw: st.DrawFn) -> tuple[LogEntry, ...]:
    """Consecutive entries; each payload a v2 batch stamped with the entry's offset and
    epoch (as the leader's log holds them) or a short non-batch payload (wrapped)."""
    offset = draw(st.integers(0, 2**40))
    epoch = draw(st.integers(0, 2**31 - 1))
    entries = []
    for _ in range(draw(st.integers(0, 5))):
        epoch = draw(st.integers(epoch, min(epoch + 2, 2**31 - 1)))
        if draw(st.booleans()):
            values = draw(st.lists(st.binary(max_size=40), min_size=1, max_size=3))
            payload = encode_batch(
                new_records(values, base_offset=offset, timestamp=1_700_000_000_000),
                base_offset=offset,
                partition_leader_epoch=epoch,
            )
            entries.append(LogEntry(offset, epoch, payload, False, len(values)))
            offset += len(values)
        else:
            raw = draw(st.binary(max_size=60))  # shorter than a batch header
            entries.append(LogEntry(offset, epoch, raw, control=draw(st.booleans())))
            offset += 1
    return tuple(entries)


@settings(max_examples=60)
@given(
    partition_errors,
    offsets,
    offsets,
    epochs,
    offsets,
    ids,
    epochs,
    offsets,
    epochs,
    log_entries(),
    versions(wire.FETCH_KEY),
)
def test_fetch_response(
    error: ErrorCode,
    high_watermark: int,
    log_start: int,
    diverging_epoch: int,
    diverging_end: int,
    leader_id: int,
    leader_epoch: int,
    snapshot_end: int,
    snapshot_epoch: int,
    entries: tuple[LogEntry, ...],
    version: int,
) -> None:
    message = FetchResponse(
        error_code=error,
        high_watermark=high_watermark,
        log_start_offset=log_start,
        diverging_epoch=EpochEndOffset(epoch=diverging_epoch, end_offset=diverging_end),
        current_leader=LeaderIdAndEpoch(leader_id=leader_id, leader_epoch=leader_epoch),
        snapshot_id=SnapshotId(end_offset=snapshot_end, epoch=snapshot_epoch),
        records=entries,
    )
    assert response_round_trip(message, wire.FETCH_KEY, version) == message


@given(
    partition_errors,
    offsets,
    epochs,
    ids,
    epochs,
    offsets,
    offsets,
    st.binary(max_size=200),
    versions(wire.FETCH_SNAPSHOT_KEY),
)
def test_fetch_snapshot_response(
    error: ErrorCode,
    end_offset: int,
    snapshot_epoch: int,
    leader_id: int,
    leader_epoch: int,
    size: int,
    position: int,
    chunk: bytes,
    version: int,
) -> None:
    message = FetchSnapshotResponse(
        error_code=error,
        snapshot_id=SnapshotId(end_offset=end_offset, epoch=snapshot_epoch),
        current_leader=LeaderIdAndEpoch(leader_id=leader_id, leader_epoch=leader_epoch),
        size=size,
        position=position,
        unaligned_records=chunk,
    )
    assert response_round_trip(message, wire.FETCH_SNAPSHOT_KEY, version) == message


NO_LEADER = {"leader_id": -1, "leader_epoch": -1}
FOREIGN = ErrorCode.inconsistent_cluster_id


@pytest.mark.parametrize(
    ("api_key", "message"),
    [
        (wire.VOTE_KEY, VoteResponse(error_code=FOREIGN, vote_granted=False, **NO_LEADER)),
        (wire.BEGIN_QUORUM_EPOCH_KEY, BeginQuorumEpochResponse(error_code=FOREIGN, **NO_LEADER)),
        (wire.END_QUORUM_EPOCH_KEY, EndQuorumEpochResponse(error_code=FOREIGN, **NO_LEADER)),
    ],
)
def test_another_cluster_is_a_top_level_error_as_in_kafka(api_key: int, message: Any) -> None:
    foreign = message
    entity = wire.response_to_kio(foreign, api_key, wire.VERSIONS[api_key][1])
    assert entity.error_code == ErrorCode.inconsistent_cluster_id
    assert entity.topics == ()
    assert wire.response_from_kio(through_bytes(entity)) == foreign


def test_describe_quorum_response_at_every_version() -> None:
    voters = tuple(ReplicaDescription(i, 10 * i, 1_000 + i, 900 + i) for i in (1, 2, 3))
    description = QuorumDescription(ErrorCode.none, 1, 4, 30, voters, ())
    for version in range(3):
        entity = through_bytes(
            wire_describe_quorum.describe_quorum_to_kio(description, version, 10**12)
        )
        (partition,) = entity.topics[0].partitions
        assert (partition.leader_id, partition.leader_epoch, partition.high_watermark) == (
            1,
            4,
            30,
        )
        assert [v.log_end_offset for v in partition.current_voters] == [10, 20, 30]
        if version >= 1:  # v1 added the timestamps, reported on the wall clock
            assert partition.current_voters[0].last_fetch_timestamp == 10**12 + 1_001


# --- records ----------------------------------------------------------------------------


def test_a_batch_of_three_records_is_one_entry_spanning_three_offsets() -> None:
    payload = encode_batch(new_records([b"a", b"b", b"c"], timestamp=1))
    (batch,) = wire_records.split_batches(wire_records.encode_entries([LogEntry(7, 2, payload)]))
    assert (batch.offset, batch.epoch, batch.count, batch.control) == (7, 2, 3, False)
    entry = batch.entry()
    assert (entry.offset, entry.epoch, entry.control) == (7, 2, False)
    assert entry.count == 3
    assert entry.payload[:8] == (7).to_bytes(8, "big")  # stamped, as the leader holds it


def test_a_non_batch_payload_is_wrapped_and_comes_back_whole() -> None:
    entry = LogEntry(5, 3, b"LeaderChange leaderId=1 voters=1,2,3", control=True)
    records = wire_records.encode_entries([entry])
    assert len(records) > HEADER_SIZE  # a real v2 control batch on the wire
    assert wire_records.split_records(records) == (entry,)


def test_a_trailing_partial_batch_is_left_for_the_next_fetch() -> None:
    entries = [LogEntry(0, 1, b"one"), LogEntry(1, 1, b"two")]
    records = wire_records.encode_entries(entries)
    assert wire_records.split_records(records[:-3]) == (entries[0],)
    assert wire_records.split_records(b"") == ()


def test_a_corrupt_batch_in_a_fetch_response_is_the_peer_s_fault() -> None:
    response = FetchResponse(
        error_code=ErrorCode.none,
        high_watermark=1,
        log_start_offset=0,
        diverging_epoch=EpochEndOffset(),
        current_leader=LeaderIdAndEpoch(leader_id=1, leader_epoch=1),
        snapshot_id=SnapshotId(),
        records=(LogEntry(0, 1, b"payload"),),
    )
    entity = wire.response_to_kio(response, wire.FETCH_KEY, 17)
    (topic,) = entity.responses
    (partition,) = topic.partitions
    damaged = bytearray(partition.records)
    damaged[-1] ^= 0xFF
    bad_topic = replace(topic, partitions=(replace(partition, records=bytes(damaged)),))
    bad = replace(entity, responses=(bad_topic,))
    with pytest.raises(wire.WireError) as error:
        wire.response_from_kio(bad)
    assert error.value.code == ErrorCode.corrupt_message
