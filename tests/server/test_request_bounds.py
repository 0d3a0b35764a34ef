"""The bounds pre-check against kio, for every request and response the broker serves.

Valid encodings (random entities drawn from kio's own types) must pass and end exactly
where kio's reader ends; every count and length prefix in them, inflated to a huge
value in its own wire form (int16, int32 and unsigned varint), must be refused before
kio would see it; truncations must be refused; and no input may make the checker
raise anything but LengthError.
"""

from __future__ import annotations

import io
import struct
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import Records

from odradek.protocol.bounds import (
    MAX_ARRAY_ELEMENTS,
    LengthError,
    checked,
    checker,
    read_uvarint,
    traced_positions,
)
from odradek.protocol.messages import MalformedRequest, decode_request
from odradek.server.handlers import supported_versions
from tests.support.kio_samples import full_entity, uvarint

st.register_type_strategy(Records, st.binary(max_size=64).map(Records))


LOADERS = (("request", load_request_schema), ("response", load_response_schema))


def served_schemas() -> list[tuple[str, int, int, type]]:
    out = []
    for key, (low, high) in sorted(supported_versions().items()):
        for version in range(low, high + 1):
            for kind, load in (
                ("request", load_request_schema),
                ("response", load_response_schema),
            ):
                try:
                    schema = load(key, version)
                except Exception:  # advertised, never decodable (Produce v0-2, KAFKA-18659)
                    continue
                out.append((kind, key, version, schema))
    return out


SCHEMAS = served_schemas()


def encode(entity_type: type, entity: Any) -> bytes:
    buffer = io.BytesIO()
    entity_writer(entity_type)(buffer, entity)
    return buffer.getvalue()


def inflations(frame: bytes, pos: int, width: str) -> list[bytes]:
    """``frame`` with the prefix at ``pos`` replaced by huge values of the same form."""
    if width == "int16":
        return [frame[:pos] + struct.pack(">h", 0x7FFF) + frame[pos + 2 :]]
    if width == "int32":
        return [frame[:pos] + struct.pack(">i", 2**31 - 1) + frame[pos + 4 :]]
    assert width == "uvarint"
    _, after = read_uvarint(frame, pos, len(frame), "test")
    return [frame[:pos] + uvarint(huge) + frame[after:] for huge in (2**32 - 1, 2**34 + 1)]


def test_every_served_version_is_covered() -> None:
    served = {(key, version) for _, key, version, _ in SCHEMAS}
    for key, (low, high) in supported_versions().items():
        for version in range(max(low, 3 if key == 0 else low), high + 1):
            assert (key, version) in served


def assert_refused_where_it_must_be(schema: Any, frame: bytes) -> None:
    """``frame`` passes and ends where kio's readers end; each count and length prefix
    in it inflated, and each truncation, is refused."""
    header_schema = schema.__header_schema__
    check = checker(schema, header_schema)
    end = check(frame, 0)
    _, header_size = entity_reader(header_schema)(frame, 0)
    _, body_size = entity_reader(schema)(frame, header_size)
    assert end == header_size + body_size == len(frame)
    for pos, width in traced_positions(schema, header_schema, frame):
        for inflated in inflations(frame, pos, width):
            with pytest.raises(LengthError):
                check(inflated, 0)
    for cut in {1, len(frame) // 2, len(frame) - 1}:
        if 0 < cut < len(frame):
            with pytest.raises(LengthError):
                check(frame[:-cut], 0)


@pytest.mark.parametrize(
    ("kind", "key", "version", "schema"), SCHEMAS, ids=[f"{k}-{a}-v{v}" for k, a, v, _ in SCHEMAS]
)
def test_full_entities_pass_and_each_inflated_prefix_is_refused(
    kind: str, key: int, version: int, schema: Any
) -> None:
    """Every array with one element and every nullable value present: every count and
    length position of the schema appears in the frame."""
    header_schema = schema.__header_schema__
    frame = encode(header_schema, full_entity(header_schema)) + encode(schema, full_entity(schema))
    assert_refused_where_it_must_be(schema, frame)


@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_random_entities_pass_and_each_inflated_prefix_is_refused(data: st.DataObject) -> None:
    """Random entities drawn from kio's own types (empty and null arrays, long strings,
    tagged fields present or not), for a random served schema."""
    _, _, _, schema = data.draw(st.sampled_from(SCHEMAS))
    header_schema = schema.__header_schema__
    header = data.draw(st.from_type(header_schema))
    body = data.draw(st.from_type(schema))
    assert_refused_where_it_must_be(schema, encode(header_schema, header) + encode(schema, body))


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(pick=st.integers(0, len(SCHEMAS) - 1), garbage=st.binary(max_size=120))
def test_garbage_raises_only_length_errors(pick: int, garbage: bytes) -> None:
    _, _, _, schema = SCHEMAS[pick]
    try:
        out = checked(garbage, schema, schema.__header_schema__)
    except LengthError:
        return
    # Passed as it is, or (tags the schema does not know) copied without them.
    assert out is garbage or len(out) < len(garbage)


def test_memoryview_frames_are_checked_like_bytes() -> None:
    schema = load_response_schema(3, 12)
    # Header v1 (correlation id, no tags), throttle time, then 2^34 brokers.
    frame = bytes.fromhex("000000010000000000") + uvarint(2**34 + 1) + b"\x00" * 20
    with pytest.raises(LengthError, match="17179869184"):
        checker(schema, schema.__header_schema__)(memoryview(frame), 0)


# The repro: a Metadata v12 request of 85 bytes whose compact topic array
# claims 2^34 entries. Before the pre-check kio reserved 128 GiB and the process
# aborted (SIGABRT); run in a child so that a regression fails this test, not pytest.
REPRO = textwrap.dedent(
    """
    import struct, sys
    from odradek.protocol.messages import MalformedRequest, decode_request
    from odradek.server.handlers import supported_versions
    count = bytes([0x81, 0x80, 0x80, 0x80, 0x40])  # uvarint 2**34 + 1: 2**34 topics
    frame = struct.pack(">hhih", 3, 12, 1, 1) + b"t" + b"\\x00" + count + b"\\x00" * 64
    assert len(frame) + 4 == 85
    try:
        decode_request(frame, supported_versions())
    except MalformedRequest as error:
        print("refused:", error)
    """
)


def test_the_85_byte_metadata_request_is_refused_not_fatal() -> None:
    result = subprocess.run(
        [sys.executable, "-c", REPRO], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "refused: MetadataRequest v12: MetadataRequest.topics: count 17179869184" in (
        result.stdout
    )


# Produce v9: null transactional id, acks, timeout, one topic "t", one partition 0, then
# a compact records length of 2^31 with nothing after it.
PRODUCE_V9_HUGE_RECORDS = (
    b"\x00" + struct.pack(">hi", 1, 1000) + b"\x02\x02t\x02" + struct.pack(">i", 0) + uvarint(2**31)
)


# Produce v9: null transactional id, acks, timeout, one topic "t", one partition 0, then
# a compact records length of 2^31 with nothing after it.
PRODUCE_V9_HUGE_RECORDS = b"\x00" + struct.pack(">hi", 1, 1000) + b"\x02\x02t\x02\x00\x00\x00\x00"
PRODUCE_V9_HUGE_RECORDS += uvarint(2**31)


@pytest.mark.parametrize(
    ("key", "version", "body"),
    [
        (3, 1, struct.pack(">i", 2**31 - 1)),  # legacy int32 topic count
        (3, 1, struct.pack(">i", -7)),  # negative count
        (3, 1, struct.pack(">ih", 1, 30000) + b"ab"),  # legacy string length
        (3, 12, uvarint(2**32 - 1)),  # compact count, the largest 5-byte varint
        (3, 12, b"\xff\xff\xff\xff\xff\x01"),  # a varint longer than 5 bytes
        (0, 9, PRODUCE_V9_HUGE_RECORDS),  # compact records length
    ],
)
def test_decode_request_turns_length_errors_into_malformed(
    key: int, version: int, body: bytes
) -> None:
    flexible = (key == 3 and version >= 9) or (key == 0 and version >= 9)
    frame = struct.pack(">hhih", key, version, 1, 1) + b"t" + (b"\x00" if flexible else b"")
    with pytest.raises(MalformedRequest, match="bytes left"):
        decode_request(frame + body, supported_versions())


def test_null_is_refused_where_the_schema_allows_none() -> None:
    """kio reads a null array as None even where the field cannot be null, and the
    handler then failed on it with a traceback; Kafka refuses such a request."""
    legacy = struct.pack(">hhih", 0, 3, 1, 1) + b"t" + struct.pack(">hhii", -1, 1, 1000, -1)
    flexible = struct.pack(">hhih", 0, 9, 1, 1) + b"t\x00" + b"\x00" + struct.pack(">hi", 1, 1000)
    for frame in (legacy, flexible + b"\x00\x00"):
        with pytest.raises(MalformedRequest, match="topic_data: null where the schema"):
            decode_request(frame, supported_versions())
    # Metadata's topics may be null ("all topics"), in both encodings.
    v1 = struct.pack(">hhih", 3, 1, 1, 1) + b"t" + struct.pack(">i", -1)
    assert decode_request(v1, supported_versions()).body.topics is None
    v12 = struct.pack(">hhih", 3, 12, 1, 1) + b"t\x00" + b"\x00\x01\x00\x00"
    assert decode_request(v12, supported_versions()).body.topics is None


def test_a_million_array_elements_in_all_and_no_more() -> None:
    """Within the 100 MiB frame limit, 2-byte topic entries would become ~3 GB of
    Python objects and a minute of decoding; all arrays together are capped."""
    schema = load_request_schema(3, 1)
    check = checker(schema, schema.__header_schema__)
    header = struct.pack(">hhih", 3, 1, 1, 1) + b"t"
    count = MAX_ARRAY_ELEMENTS
    assert check(header + struct.pack(">i", count) + b"\x00\x00" * count, 0)
    over = header + struct.pack(">i", count + 1) + b"\x00\x00" * (count + 1)
    with pytest.raises(MalformedRequest, match="more than 1000000 array elements"):
        decode_request(over, supported_versions())
    # Counted across arrays: two nested arrays whose sum is over the cap.
    deletes = load_request_schema(21, 0)  # DeleteRecords v0: topics[name, partitions[...]]
    half = count // 2 + 1
    partitions = struct.pack(">i", half) + struct.pack(">iq", 0, 0) * half
    topics = (struct.pack(">ih", 2, 1) + b"a" + partitions) + (struct.pack(">h", 1) + b"b")
    frame = struct.pack(">hhih", 21, 0, 1, 1) + b"t" + topics + partitions + b"\x00" * 4
    with pytest.raises(LengthError, match="array elements in all"):
        checker(deletes, deletes.__header_schema__)(frame, 0)


def test_tagged_fields_count_against_the_element_cap() -> None:
    """Two million empty tagged fields (4 MB) would be two million turns of the walk."""
    schema = load_request_schema(3, 12)
    header = struct.pack(">hhih", 3, 12, 1, 1) + b"t"
    tags = 2 * MAX_ARRAY_ELEMENTS
    frame = header + uvarint(tags) + b"\x7f\x00" * tags  # tag 127, empty, over and over
    with pytest.raises(LengthError, match="RequestHeader tagged fields: more than 1000000"):
        checker(schema, schema.__header_schema__)(frame, 0)
