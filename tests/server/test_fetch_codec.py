"""The raw FetchResponse codec (broker encoder; decoder of the Spark reader and the
replica fetchers) against kio, for every version 4..17."""

from __future__ import annotations

import datetime
import os
import tempfile
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.index import load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from odradek.protocol.fetch_codec import (
    MAX_VERSION,
    FetchParseError,
    NodeEndpoint,
    PartitionResult,
    RawPartition,
    TopicResult,
    encode_fetch_response,
    parse_fetch_response,
)
from odradek.records.file_range import FileRange

FETCH = 1
VERSIONS = range(4, MAX_VERSION + 1)
ERRORS = [0, 1, 3, 6, 74]

_aborted = st.none() | st.lists(
    st.tuples(st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1)), max_size=3
)
_partition = st.tuples(
    st.integers(0, 2**31 - 1),  # index
    st.sampled_from(ERRORS),
    st.integers(-1, 2**63 - 1),  # high watermark
    st.integers(-1, 2**63 - 1),  # last stable offset
    st.integers(-1, 2**63 - 1),  # log start offset
    _aborted,
    st.binary(max_size=300),  # records (the parser does not look inside)
)
_topics = st.lists(
    st.tuples(
        st.text(min_size=1, max_size=20),
        st.lists(_partition, max_size=4),
        st.uuids(),  # what v13+ sends instead of the name
    ),
    max_size=3,
)
_endpoints = st.lists(
    st.builds(
        NodeEndpoint,
        st.integers(0, 2**31 - 1),
        st.text(min_size=1, max_size=30),
        st.integers(0, 65535),
        st.none() | st.text(max_size=10),
    ),
    max_size=3,
)


def _key(version: int, name: str, topic_id: uuid.UUID) -> str | uuid.UUID:
    """How a topic is named in a response of ``version``."""
    return topic_id if version >= 13 else name


def _encode(version: int, correlation_id: int, topics: list[Any], **kwargs: Any) -> bytes:
    """encode_fetch_response's parts made into one frame (records through a real file)."""
    with tempfile.TemporaryFile() as file:
        results = []
        for name, partitions, *topic_id in topics:
            parts = []
            for index, error, hw, lso, log_start, aborted, records in partitions:
                ranges = []
                if records:
                    position = file.seek(0, os.SEEK_END)
                    file.write(records)
                    file.flush()
                    ranges.append(FileRange(file.fileno(), position, len(records)))
                parts.append(PartitionResult(index, error, hw, lso, log_start, ranges, aborted))
            results.append(TopicResult(name, parts, *topic_id))
        out = bytearray()
        for part in encode_fetch_response(version, correlation_id, results, **kwargs):
            if isinstance(part, FileRange):
                out += os.pread(part.fd, part.length, part.position)
            else:
                out += part
    return bytes(out)


def _kio(frame: bytes, version: int) -> Any:
    schema = load_response_schema(FETCH, version)
    _, offset = entity_reader(schema.__header_schema__)(frame, 0)
    body, size = entity_reader(schema)(frame, offset)
    assert offset + size == len(frame)
    return body


@settings(max_examples=100, deadline=None)
@given(
    version=st.sampled_from(VERSIONS),
    correlation=st.integers(0, 2**31 - 1),
    topics=_topics,
    endpoints=_endpoints,
)
def test_round_trip_against_encoder_and_kio(
    version: int, correlation: int, topics: Any, endpoints: list[NodeEndpoint]
) -> None:
    frame = _encode(
        version, correlation, topics, throttle_ms=5, session_id=0, node_endpoints=endpoints
    )
    parsed = parse_fetch_response(memoryview(frame).toreadonly(), version)
    assert parsed.correlation_id == correlation and parsed.throttle_time_ms == 5
    assert [key for key, _ in parsed.topics] == [_key(version, *t[::2]) for t in topics]
    kio_body = _kio(frame, version)
    if version >= 13:
        assert [t.topic_id for t in kio_body.responses] == [t[2] for t in topics]
    else:
        assert [t.topic for t in kio_body.responses] == [t[0] for t in topics]
    # node_endpoints from v16 (a tagged field the older versions do not have)
    expected = endpoints if version >= 16 else []
    assert parsed.node_endpoints == expected
    if version >= 16:
        theirs_endpoints = [
            NodeEndpoint(e.node_id, e.host, e.port, e.rack) for e in kio_body.node_endpoints
        ]
        assert theirs_endpoints == expected
    for (_, got), (_, sent, _), kio_topic in zip(
        parsed.topics, topics, kio_body.responses, strict=True
    ):
        assert len(got) == len(sent) == len(kio_topic.partitions)
        for raw, want, theirs in zip(got, sent, kio_topic.partitions, strict=True):
            index, error, hw, lso, log_start, aborted, records = want
            assert raw.partition_index == index == theirs.partition_index
            assert raw.error_code == error == theirs.error_code.value
            assert raw.high_watermark == hw == theirs.high_watermark
            assert raw.last_stable_offset == lso == theirs.last_stable_offset
            assert raw.log_start_offset == (log_start if version >= 5 else -1)
            assert raw.aborted_transactions == aborted
            assert raw.records is not None and bytes(raw.records) == records
            assert bytes(raw.records) == (theirs.records or b"")
            if version >= 11:
                assert raw.preferred_read_replica == -1 == theirs.preferred_read_replica


@pytest.mark.parametrize("version", [4, 7, 12, 13, 16, 17])
def test_top_level_error(version: int) -> None:
    frame = _encode(version, 3, [], error_code=70)
    parsed = parse_fetch_response(frame, version)
    assert parsed.topics == []
    assert parsed.error_code == (70 if version >= 7 else 0)


def _kio_frame(version: int, correlation: int, body: Any) -> bytes:
    import io

    schema = type(body)
    out = io.BytesIO()
    header_schema = schema.__header_schema__
    entity_writer(header_schema)(out, header_schema(correlation_id=correlation))
    entity_writer(schema)(out, body)
    return out.getvalue()


@pytest.mark.parametrize("version", [4, 11, 12, 13, 14, 15, 16, 17])
def test_frames_written_by_kio_with_tagged_fields_and_null_records(version: int) -> None:
    """kio's encoder (tagged current_leader/diverging_epoch at v12+, topic ids at v13+,
    node_endpoints at v16+, null records)."""
    module = __import__(f"kio.schema.fetch.v{version}.response", fromlist=["x"])
    extra: dict[str, Any] = {}
    if version >= 12:
        extra = {
            "current_leader": module.LeaderIdAndEpoch(leader_id=3, leader_epoch=9),
            "diverging_epoch": module.EpochEndOffset(epoch=2, end_offset=77),
        }
    fields: dict[str, Any] = {
        "partition_index": 7,
        "error_code": ErrorCode.none,
        "high_watermark": 100,
        "last_stable_offset": 90,
        "aborted_transactions": (module.AbortedTransaction(producer_id=5, first_offset=80),),
        "records": None,
        **extra,
    }
    if version >= 5:
        fields["log_start_offset"] = 11
    if version >= 11:
        fields["preferred_read_replica"] = 2
    partition = module.PartitionData(**fields)
    second = module.PartitionData(**{**fields, "partition_index": 8, "records": b"abc"})
    topic_id = uuid.UUID(int=0xABC)
    naming: dict[str, Any] = {"topic_id": topic_id} if version >= 13 else {"topic": "t"}
    topic = module.FetchableTopicResponse(**naming, partitions=(partition, second))
    body_fields: dict[str, Any] = {
        "throttle_time": datetime.timedelta(milliseconds=1),
        "responses": (topic,),
    }
    if version >= 7:
        body_fields.update(error_code=ErrorCode.none, session_id=4)
    if version >= 16:
        body_fields["node_endpoints"] = (
            module.NodeEndpoint(node_id=3, host="broker-3", port=9093, rack="r1"),
            module.NodeEndpoint(node_id=5, host="broker-5", port=9095, rack=None),
        )
    frame = _kio_frame(version, 42, module.FetchResponse(**body_fields))
    parsed = parse_fetch_response(frame, version)
    ((name, (first, other)),) = parsed.topics
    assert name == (topic_id if version >= 13 else "t") and parsed.correlation_id == 42
    if version >= 16:
        assert parsed.node_endpoints == [
            NodeEndpoint(3, "broker-3", 9093, "r1"),
            NodeEndpoint(5, "broker-5", 9095, None),
        ]
    else:
        assert parsed.node_endpoints == []
    tags = ((2, 77), (3, 9), None) if version >= 12 else (None, None, None)
    assert first == RawPartition(
        7,
        0,
        100,
        90,
        11 if version >= 5 else -1,
        [(5, 80)],
        2 if version >= 11 else -1,
        None,
        *tags,
    )
    assert other.partition_index == 8 and other.records is not None
    assert bytes(other.records) == b"abc"
    if version >= 7:
        assert parsed.session_id == 4


@pytest.mark.parametrize("version", [4, 12, 13, 16])
def test_truncated_or_padded_frames_fail_clearly(version: int) -> None:
    topics = [("orders", [(0, 0, 10, 10, 0, [(1, 2)], b"x" * 40)], uuid.UUID(int=9))]
    endpoints = [NodeEndpoint(1, "h", 9092, "rack")]
    frame = _encode(version, 1, topics, node_endpoints=endpoints)
    for cut in range(len(frame)):
        with pytest.raises(FetchParseError):
            parse_fetch_response(frame[:cut], version)
    with pytest.raises(FetchParseError, match="after its last field"):
        parse_fetch_response(frame + b"\x00", version)
    with pytest.raises(FetchParseError, match="version 18"):
        parse_fetch_response(frame, 18)


def test_a_node_endpoints_tag_whose_length_lies_fails_clearly() -> None:
    frame = bytearray(_encode(16, 1, [], node_endpoints=[NodeEndpoint(1, "h", 9092)]))
    # body tags at the end: count 1, tag 0, size, then the value; claim one byte more
    # and pad, so the value parses short of its declared end
    size_at = frame.index(b"\x01\x00", len(frame) - 20) + 2
    frame[size_at] += 1
    frame.append(0)
    with pytest.raises(FetchParseError, match="tag 0 is not"):
        parse_fetch_response(bytes(frame), 16)


def test_records_are_a_slice_of_the_frame_not_a_copy() -> None:
    frame = bytearray(_encode(12, 1, [("t", [(0, 0, 1, 1, 0, None, b"payload")])]))
    parsed = parse_fetch_response(memoryview(frame), 12)
    records = parsed.topics[0][1][0].records
    assert records is not None and records.obj is frame


@pytest.mark.parametrize("headers", [False, True])
def test_decoded_batches_do_not_point_into_the_fetch_buffer(headers: bool) -> None:
    """The fetch socket reuses its receive buffer, so decoded columns must own their bytes."""
    from odradek.records.codec import Header, Record, encode_batch
    from odradek.spark.read_arrow import ArrowDecoder, scan

    records = [
        Record(
            offset=10 + i,
            timestamp=1000 + i,
            key=b"key-%d-long-enough-to-not-inline" % i,
            value=bytes([i]) * (5 + 40 * i),
            headers=(Header("h", b"header-value-long-enough-%d" % i),),
        )
        for i in range(5)
    ]
    buffer = bytearray(encode_batch(records, base_offset=10))
    view = memoryview(buffer).toreadonly()
    found = scan(view, 10, None)
    batch = ArrowDecoder("t", 0, headers).decode(view, found, 10, 15)
    assert batch is not None
    before = batch.to_pylist()
    buffer[:] = b"\xff" * len(buffer)
    assert batch.to_pylist() == before
    assert [row["value"] for row in before] == [r.value for r in records]


@pytest.mark.parametrize("version", [12, 13, 16, 17])
@pytest.mark.parametrize(
    "tags",
    [
        {"diverging_epoch": (4, 1234)},
        {"current_leader": (2, 7)},
        {"snapshot_id": (900, 3)},
        {"diverging_epoch": (1, 10), "current_leader": (3, 5), "snapshot_id": (8, 1)},
    ],
)
def test_partition_tags_written_as_kio_reads_them(tags: dict[str, Any], version: int) -> None:
    """The replication fields of v12+ (diverging epoch, current leader, snapshot id)."""
    partition = PartitionResult(0, 0, 5, 5, 0, [], None, **tags)
    topic = TopicResult("t", [partition], uuid.UUID(int=5))
    frame = b"".join(p for p in encode_fetch_response(version, 9, [topic]) if isinstance(p, bytes))
    theirs = _kio(frame, version).responses[0].partitions[0]
    ours = parse_fetch_response(frame, version).topics[0][1][0]
    if "diverging_epoch" in tags:
        epoch, end = tags["diverging_epoch"]
        assert (theirs.diverging_epoch.epoch, theirs.diverging_epoch.end_offset) == (epoch, end)
    if "current_leader" in tags:
        leader, epoch = tags["current_leader"]
        assert (theirs.current_leader.leader_id, theirs.current_leader.leader_epoch) == (
            leader,
            epoch,
        )
    if "snapshot_id" in tags:
        end, epoch = tags["snapshot_id"]
        assert (theirs.snapshot_id.end_offset, theirs.snapshot_id.epoch) == (end, epoch)
    for name in ("diverging_epoch", "current_leader", "snapshot_id"):
        assert getattr(ours, name) == tags.get(name)


@pytest.mark.parametrize("version", [10, 11, 12, 13, 16, 17])
def test_preferred_read_replica_as_kio_reads_it(version: int) -> None:
    """KIP-392: the leader's ``preferred_read_replica`` (v11+) reaches the client; an
    older version has no such field and the frame is unchanged by it."""
    partition = PartitionResult(0, 0, 7, 7, 0, preferred_read_replica=3)
    out = bytearray()
    for part in encode_fetch_response(version, 1, [TopicResult("t", [partition])]):
        assert not isinstance(part, FileRange)
        out += part
    frame = bytes(out)
    theirs = _kio(frame, version).responses[0].partitions[0]
    raw = parse_fetch_response(memoryview(frame).toreadonly(), version).topics[0][1][0]
    if version >= 11:
        assert raw.preferred_read_replica == 3 == theirs.preferred_read_replica
    else:
        assert raw.preferred_read_replica == -1
        assert frame == _encode(version, 1, [("t", [(0, 0, 7, 7, 0, None, b"")])])
