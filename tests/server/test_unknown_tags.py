"""Tagged fields the schema does not know are ignored, as KIP-482 requires.

kio's reader refuses a tag it does not know (``KeyError: 'Unknown tagged field tag'``),
so before this a newer client that sent a new tag on a version we serve was
disconnected as "malformed". Each test here adds unknown tags to a valid frame with
its own encoder (``add_tag``, independent of odradek/protocol/bounds.py) — at top
level, in the request header and inside nested entities, and for responses inside a
known tagged struct, whose size must then shrink — and expects the frame to decode to
exactly what it was without them; a known tag whose declared size does not fit its
value is still refused.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import socket
import struct
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import get_field_tag

from odradek.protocol.bounds import (
    LengthError,
    UnknownTags,
    checked,
    checker,
    read_uvarint,
    without_unknown_tags,
)
from odradek.protocol.build import make
from odradek.protocol.messages import MalformedRequest, decode_request
from odradek.server.handlers import supported_versions
from tests.server.test_protocol import (
    API_VERSIONS,
    FETCH,
    METADATA,
    PRODUCE,
    assert_clean_log,
    batch,
    fetch_request,
    make_topic,
    nested,
    produce_request,
    read_all,
)
from tests.server.test_request_bounds import SCHEMAS
from tests.support.broker import BrokerProcess
from tests.support.kio_samples import full_entity, uvarint
from tests.support.wire import WireClient, read_frame

UNKNOWN_TAG = 1000  # above every tag kio knows in any schema
PAYLOAD = b"\x07new field value"


def add_tag(frame: bytes, section: int, tag: int = UNKNOWN_TAG, value: bytes = PAYLOAD) -> bytes:
    """``frame`` with one more tagged field, appended to the tagged-field section that
    starts at byte ``section`` (its count is raised by one)."""
    count, pos = read_uvarint(frame, section, len(frame), "test")
    for _ in range(count):
        _tag, pos = read_uvarint(frame, pos, len(frame), "test")
        size, pos = read_uvarint(frame, pos, len(frame), "test")
        pos += size
    entry = uvarint(tag) + uvarint(len(value)) + value
    return (
        frame[:section]
        + uvarint(count + 1)
        + frame[section + len(uvarint(count)) : pos]
        + (entry + frame[pos:])
    )


def add_tags(frame: bytes, sections: list[int], **kw: Any) -> bytes:
    for section in sorted(sections, reverse=True):  # later positions first: earlier stay put
        frame = add_tag(frame, section, **kw)
    return frame


def encode(*entities: Any) -> bytes:
    buffer = io.BytesIO()
    for entity in entities:
        entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


def request_header(api_key: int, version: int, client_id: str = "newer-client") -> Any:
    return load_request_schema(api_key, version).__header_schema__(
        request_api_key=api_key,
        request_api_version=version,
        correlation_id=7,
        client_id=client_id,
    )


def header_section(client_id: str = "newer-client") -> int:
    """Where request header v2's tagged fields start: after the fixed 8 bytes and the
    int16-prefixed client id."""
    return 8 + 2 + len(client_id.encode())


def after(frame: bytes, marker: bytes) -> int:
    """The position just after the one occurrence of ``marker`` in ``frame``."""
    assert frame.count(marker) == 1, marker
    return frame.index(marker) + len(marker)


def without_tagged_values(entity: Any) -> Any:
    """``entity`` with its own (top-level) tagged fields at their defaults."""
    tagged = {
        f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        for f in dataclasses.fields(entity)
        if get_field_tag(f) is not None
    }
    return dataclasses.replace(entity, **tagged)


def flexible_requests() -> list[tuple[int, int]]:
    out = []
    for key, (low, high) in sorted(supported_versions().items()):
        for version in range(low, high + 1):
            try:
                schema = load_request_schema(key, version)
            except Exception:  # advertised, never decodable (Produce v0-2)
                continue
            if schema.__flexible__:
                out.append((key, version))
    return out


FLEXIBLE = flexible_requests()


def test_kio_alone_refuses_an_unknown_tag() -> None:
    """What this module works around (if kio learns to skip them, this fails)."""
    schema = load_request_schema(METADATA, 12)
    header = request_header(METADATA, 12)
    frame = encode(
        header,
        schema(
            topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
        ),
    )
    frame = add_tag(frame, len(frame) - 1)
    _, offset = entity_reader(type(header))(frame, 0)
    with pytest.raises(KeyError, match="Unknown tagged field"):
        entity_reader(schema)(frame, offset)


@pytest.mark.parametrize(("key", "version"), FLEXIBLE, ids=[f"{k}-v{v}" for k, v in FLEXIBLE])
def test_every_flexible_request_ignores_an_unknown_top_level_tag(key: int, version: int) -> None:
    schema = load_request_schema(key, version)
    body = full_entity(schema)  # every known tag present too
    header = request_header(key, version)
    # The body's non-tagged fields are the same with or without tagged values, so its
    # tagged section starts where the bare frame's last byte (a zero count) is.
    section = len(encode(header, without_tagged_values(body))) - 1
    frame = encode(header, body)
    with_unknown = add_tag(frame, section)
    with pytest.raises(UnknownTags):
        checker(schema, schema.__header_schema__)(with_unknown, 0)
    decoded = decode_request(with_unknown, supported_versions())
    assert decoded.body == decode_request(frame, supported_versions()).body
    assert decoded.size == len(with_unknown)
    # In the header too, and several at once.
    both = add_tags(frame, [header_section(), section])
    both = add_tag(both, section + len(PAYLOAD) + 2 + 1, tag=UNKNOWN_TAG + 1)
    assert decode_request(both, supported_versions()).body == decoded.body


def test_an_unknown_tag_that_does_not_fit_is_refused() -> None:
    schema = load_request_schema(METADATA, 12)
    frame = encode(request_header(METADATA, 12), full_entity(schema))
    bad = frame[:-1] + b"\x01" + uvarint(UNKNOWN_TAG) + uvarint(100) + b"short"
    with pytest.raises(MalformedRequest, match="tagged field 1000 of 100 bytes"):
        decode_request(bad, supported_versions())


def fetch_v12_frame(
    cluster_id: str | None = None, topic: str = "tagged"
) -> tuple[bytes, list[int]]:
    """A Fetch v12 request and the starts of its header, partition, topic and top-level
    tagged sections."""
    request = fetch_request({topic: [(0, 0, 0x00ABCDEF)]})
    header = request_header(FETCH, 12)
    bare = encode(header, request)  # no cluster id: the last byte is the zero tag count
    frame = encode(header, dataclasses.replace(request, cluster_id=cluster_id))
    partition = after(frame, struct.pack(">i", 0x00ABCDEF))  # its last field
    return frame, [header_section(), partition, partition + 1, len(bare) - 1]


def test_fetch_v12_unknown_tags_everywhere_and_beside_a_known_one() -> None:
    for cluster_id in (None, "cluster-xyz"):
        frame, sections = fetch_v12_frame(cluster_id)
        expected = decode_request(frame, supported_versions()).body
        assert expected.cluster_id == cluster_id
        for section in sections:  # one place at a time, then all at once
            assert decode_request(add_tag(frame, section), supported_versions()).body == expected
        assert decode_request(add_tags(frame, sections), supported_versions()).body == expected


def test_a_known_tag_with_a_wrong_size_is_still_refused() -> None:
    """Fetch v12's tag 0 is ClusterId (a compact nullable string)."""
    frame, sections = fetch_v12_frame()
    top = sections[-1]
    value = uvarint(len("abc") + 1) + b"abc"
    good = add_tag(frame, top, tag=0, value=value)
    assert decode_request(good, supported_versions()).body.cluster_id == "abc"
    for wrong in (value + b"\x00", value[:-1]):  # declared size past / short of the value
        bad = good.replace(uvarint(len(value)) + value, uvarint(len(wrong)) + wrong)
        with pytest.raises(MalformedRequest, match="FetchRequest"):
            decode_request(add_tag(bad, sections[0]), supported_versions())


def test_the_copy_is_made_only_when_there_are_unknown_tags() -> None:
    frame, _ = fetch_v12_frame()
    schema = load_request_schema(FETCH, 12)
    assert checked(frame, schema, schema.__header_schema__) is frame


# Responses, for the client: unknown tags inside a known tagged struct shrink its size.


def response_frame(schema: Any, body: Any) -> bytes:
    header = schema.__header_schema__(correlation_id=7)
    return encode(header, body)


def decode_response(schema: Any, frame: bytes) -> Any:
    frame = bytes(checked(frame, schema, schema.__header_schema__))
    _, offset = entity_reader(schema.__header_schema__)(frame, 0)
    return entity_reader(schema)(frame, offset)[0]


def with_unknown_inside(entity: Any, **kw: Any) -> bytes:
    """A flexible struct's encoding with an unknown tag in its own tagged section (the
    struct sets no tags of its own, so that section is its last byte)."""
    plain = encode(entity)
    assert plain[-1] == 0
    return add_tag(plain, len(plain) - 1, **kw)


def test_fetch_response_unknown_tags_inside_known_tagged_structs() -> None:
    schema = load_response_schema(FETCH, 12)
    module = __import__(schema.__module__, fromlist=["_"])
    diverging = module.EpochEndOffset(epoch=5, end_offset=77)
    leader = module.LeaderIdAndEpoch(leader_id=1, leader_epoch=3)
    partition = make(
        module.PartitionData,
        partition_index=0,
        error_code=ErrorCode.none,
        high_watermark=10,
        last_stable_offset=10,
        log_start_offset=0,
        aborted_transactions=(),
        preferred_read_replica=0x7C7C7C7C,
        records=b"",
    )
    body = make(
        module.FetchResponse,
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        session_id=0,
        responses=(make(module.FetchableTopicResponse, topic="t", partitions=(partition,)),),
    )
    frame = response_frame(schema, body)
    # After preferred_read_replica come the empty records (one byte), then the tags.
    section = after(frame, struct.pack(">i", 0x7C7C7C7C)) + 1
    both = dataclasses.replace(partition, diverging_epoch=diverging, current_leader=leader)
    expected = dataclasses.replace(
        body, responses=(dataclasses.replace(body.responses[0], partitions=(both,)),)
    )
    kio_frame = response_frame(schema, expected)
    cases = {
        "one in each": (with_unknown_inside(diverging), with_unknown_inside(leader)),
        # a two-byte size varint inside
        "a large one": (with_unknown_inside(diverging, value=b"x" * 300), encode(leader)),
    }
    many = encode(leader)
    start = len(many) - 1  # its tag count
    for n in range(130):  # the count varint shrinks from two bytes to one when they go
        many = add_tag(many, start, tag=UNKNOWN_TAG + n, value=b"")
    cases["130 of them"] = (encode(diverging), many)
    for name, (value0, value1) in cases.items():
        grown = add_tag(add_tag(frame, section, tag=0, value=value0), section, tag=1, value=value1)
        grown = add_tag(grown, 4)  # and one in the response header
        assert decode_response(schema, grown) == expected, name
        assert without_unknown_tags(grown, schema, schema.__header_schema__) == kio_frame, name


def test_produce_response_unknown_tag_in_a_tagged_array_element() -> None:
    schema = load_response_schema(PRODUCE, 10)
    module = __import__(schema.__module__, fromlist=["_"])
    body = make(
        module.ProduceResponse,
        responses=(),
        throttle_time=datetime.timedelta(0),
    )
    frame = response_frame(schema, body)
    endpoint = module.NodeEndpoint(node_id=1, host="h", port=9092, rack=None)
    value = uvarint(2) + with_unknown_inside(endpoint)  # a compact array of one
    grown = add_tag(frame, len(frame) - 1, tag=0, value=value)
    with pytest.raises(UnknownTags):
        checker(schema, schema.__header_schema__)(grown, 0)
    assert decode_response(schema, grown) == dataclasses.replace(body, node_endpoints=(endpoint,))


def test_a_lying_unknown_tag_in_a_response_is_a_length_error() -> None:
    schema = load_response_schema(METADATA, 12)
    frame = response_frame(schema, full_entity(schema))
    bad = frame[:-1] + b"\x01" + uvarint(UNKNOWN_TAG) + uvarint(9) + b"x"
    with pytest.raises(LengthError):
        checked(bad, schema, schema.__header_schema__)


# Against a real broker: the newer client is answered normally, not disconnected.


@pytest.fixture(scope="module")
def target(shared_broker: BrokerProcess) -> Iterator[BrokerProcess]:
    yield shared_broker
    assert shared_broker.alive()
    assert_clean_log(shared_broker)


def exchange(broker: BrokerProcess, frame: bytes, api_key: int, version: int) -> Any:
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        response = read_frame(sock)
    schema = load_response_schema(api_key, version)
    header, offset = entity_reader(schema.__header_schema__)(response, 0)
    assert header.correlation_id == 7
    return entity_reader(schema)(response, offset)[0]


def test_broker_answers_api_versions_v3_with_unknown_header_and_body_tags(
    target: BrokerProcess,
) -> None:
    schema = load_request_schema(API_VERSIONS, 3)
    body = schema(client_software_name="newer", client_software_version="9.9")
    frame = encode(request_header(API_VERSIONS, 3), body)
    frame = add_tags(frame, [header_section(), len(frame) - 1])
    response = exchange(target, frame, API_VERSIONS, 3)
    assert response.error_code == ErrorCode.none
    assert {k.api_key for k in response.api_keys} >= {PRODUCE, FETCH, METADATA}


def test_broker_answers_metadata_v12_with_unknown_tags_in_a_topic_entry(
    target: BrokerProcess,
) -> None:
    with WireClient(target.bootstrap) as client:
        topic = make_topic(client, "tags-md")
    module = nested(METADATA, 12)
    request = module.MetadataRequest(
        topics=(module.MetadataRequestTopic(topic_id=None, name=topic),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    frame = encode(request_header(METADATA, 12), request)
    frame = add_tags(frame, [header_section(), after(frame, topic.encode()), len(frame) - 1])
    response = exchange(target, frame, METADATA, 12)
    (answer,) = response.topics
    assert (answer.name, answer.error_code, len(answer.partitions)) == (topic, ErrorCode.none, 1)


def test_broker_answers_produce_v9_and_fetch_v12_with_unknown_tags(target: BrokerProcess) -> None:
    with WireClient(target.bootstrap) as client:
        topic = make_topic(client, "tags-pf")
    records = batch([b"tagged-" + uuid.uuid4().bytes])
    request = produce_request(topic, 0, records, version=9)
    frame = encode(request_header(PRODUCE, 9), request)
    partition = after(frame, records)
    frame = add_tags(
        frame, [header_section(), partition, partition + 1, len(frame) - 1]
    )  # partition entry, topic entry, top level
    response = exchange(target, frame, PRODUCE, 9)
    (partition_response,) = response.responses[0].partition_responses
    assert partition_response.error_code == ErrorCode.none
    fetch_frame, sections = fetch_v12_frame(topic=topic)
    fetched = exchange(target, add_tags(fetch_frame, sections), FETCH, 12)
    (data,) = fetched.responses[0].partitions
    assert (data.error_code, data.high_watermark) == (ErrorCode.none, 1)
    assert data.records
    with WireClient(target.bootstrap) as client:
        assert len(read_all(client, topic, 0)) == 1


FLEXIBLE_SCHEMAS = [
    schema for kind, _key, _version, schema in SCHEMAS if schema.__flexible__
]  # requests and responses


@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_random_entities_with_unknown_top_level_tags_decode_as_without(
    data: st.DataObject,
) -> None:
    """Random entities of every flexible request and response (known tags set or not),
    with 1-3 unknown tags of random sizes appended to the body's tagged fields."""
    schema = data.draw(st.sampled_from(FLEXIBLE_SCHEMAS))
    header_schema = schema.__header_schema__
    header = data.draw(st.from_type(header_schema))
    body = data.draw(st.from_type(schema))
    frame = encode(header, body)
    section = len(encode(header, without_tagged_values(body))) - 1
    grown = frame
    for n in range(data.draw(st.integers(1, 3))):
        value = data.draw(st.binary(max_size=300))
        grown = add_tag(grown, section, tag=UNKNOWN_TAG + n, value=value)
    assert without_unknown_tags(grown, schema, header_schema) == frame
