"""Bad input is rejected, never fatal: after each case the same broker still serves.

Framing errors and undecodable requests close that one connection; well-formed
requests with bad content get the protocol's error code. No case may leave a
traceback in the broker's log.
"""

from __future__ import annotations

import datetime
import itertools
import os
import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from odradek.protocol.build import make
from odradek.records.batch import MAGIC_POSITION
from odradek.records.codec import Record, encode_batch
from tests.server.test_protocol import (
    API_VERSIONS,
    CREATE_TOPICS,
    FETCH,
    INIT_PRODUCER_ID,
    LIST_OFFSETS,
    METADATA,
    PRODUCE,
    assert_clean_log,
    assert_serves,
    batch,
    create_topic,
    fetch,
    make_topic,
    metadata,
    nested,
    now_ms,
    produce,
    produce_request,
    read_all,
    request,
    unique,
    wait_closed,
)
from tests.support.broker import BrokerProcess
from tests.support.wire import WireClient


@pytest.fixture(scope="module")
def target(shared_broker: BrokerProcess) -> Iterator[BrokerProcess]:
    """The module's broker; at the end it must still serve and have logged no traceback."""
    yield shared_broker
    assert shared_broker.alive()
    assert_serves(shared_broker.bootstrap)
    assert_clean_log(shared_broker)


_SOURCES = itertools.count()


def connect(broker: BrokerProcess) -> socket.socket:
    """A connection from its own loopback address (127.0.0.2-251): the broker logs bad
    input at most once per address per 10 s, and each test looks for its own line."""
    source = f"127.0.0.{2 + next(_SOURCES) % 250}"
    return socket.create_connection(
        ("127.0.0.1", broker.port), timeout=10, source_address=(source, 0)
    )


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def header(api_key: int, version: int, correlation_id: int = 1, client_id: bytes = b"t") -> bytes:
    """Request header v1 (api key, version, correlation id, client id)."""
    fixed = struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id
    flexible = {  # first flexible version per API: header v2 adds a tagged-field byte
        PRODUCE: 9, FETCH: 12, LIST_OFFSETS: 6, METADATA: 9, API_VERSIONS: 3,
        CREATE_TOPICS: 5, INIT_PRODUCER_ID: 2,
    }  # fmt: skip
    return fixed + (b"\x00" if version >= flexible.get(api_key, 1 << 15) else b"")


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def assert_alive(broker: BrokerProcess) -> None:
    with WireClient(broker.bootstrap) as client:
        assert client.request(request(API_VERSIONS, 0)).error_code == ErrorCode.none


# -- framing ----------------------------------------------------------------------------


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    derandomize=True,
)
@given(data=st.binary(min_size=0, max_size=300))
def test_random_bytes_never_hurt_the_broker(target: BrokerProcess, data: bytes) -> None:
    with connect(target) as sock:
        sock.sendall(data)
    assert_alive(target)


READ_ONLY_KEYS = [(API_VERSIONS, 0, 4), (METADATA, 0, 12), (FETCH, 4, 17),
                  (LIST_OFFSETS, 1, 8), (INIT_PRODUCER_ID, 0, 5), (PRODUCE, 3, 11)]  # fmt: skip


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    derandomize=True,
)
@given(
    api=st.sampled_from(READ_ONLY_KEYS),
    version_pick=st.integers(0, 20),
    body=st.binary(min_size=0, max_size=200),
)
def test_random_bodies_behind_valid_headers(
    target: BrokerProcess, api: tuple[int, int, int], version_pick: int, body: bytes
) -> None:
    """Garbage that reaches the request decoders (every supported key and version)."""
    api_key, low, high = api
    version = low + version_pick % (high - low + 1)
    with connect(target) as sock:
        sock.sendall(frame(header(api_key, version) + body))
        sock.shutdown(socket.SHUT_WR)
        # Either an answer (the garbage happened to decode) or a close; never a hang.
        wait_closed(sock)
    assert_alive(target)


def test_truncated_frame_then_close(target: BrokerProcess) -> None:
    whole = frame(header(API_VERSIONS, 0))
    with connect(target) as sock:
        sock.sendall(struct.pack(">i", 100) + whole[4:])
    with connect(target) as sock:
        sock.sendall(whole[:2])
    assert_serves(target.bootstrap)


def test_huge_size_prefix_is_refused_before_buffering(target: BrokerProcess) -> None:
    before = rss_kib(target.pid)
    with connect(target) as sock:
        sock.sendall(struct.pack(">i", 0x7FFFFFFF) + b"\x00" * 1024)
        wait_closed(sock)
        # Whatever follows is not read into memory: the peer is gone.
        with pytest.raises(OSError):
            for _ in range(64):
                sock.sendall(b"\x00" * (1 << 20))
    assert rss_kib(target.pid) - before < 32 * 1024
    assert "exceeds socket.request.max.bytes" in target.log()
    assert_serves(target.bootstrap)


def test_negative_size_prefix_closes_the_connection(target: BrokerProcess) -> None:
    with connect(target) as sock:
        sock.sendall(struct.pack(">i", -5) + b"abcd")
        wait_closed(sock)
    assert "negative frame size" in target.log()
    assert_alive(target)


def test_bad_frame_lines_are_rate_limited_per_address(target: BrokerProcess) -> None:
    """A client breaking the framing in a loop gets one log line per 10 s, not one each."""
    first = connect(target)
    source = first.getsockname()[0]
    sockets = [first] + [
        socket.create_connection(("127.0.0.1", target.port), timeout=10, source_address=(source, 0))
        for _ in range(7)
    ]
    for sock in sockets:
        with sock:
            sock.sendall(struct.pack(">i", -7) + b"abcd")
            wait_closed(sock)
    lines = [line for line in target.log().splitlines() if line.endswith("frame size -7")]
    assert len(lines) == 1, lines
    assert_alive(target)


def test_frame_shorter_than_a_header_closes_the_connection(target: BrokerProcess) -> None:
    with connect(target) as sock:
        sock.sendall(frame(b"\x00\x12"))
        wait_closed(sock)
    with connect(target) as sock:
        sock.sendall(frame(b""))
        wait_closed(sock)
    assert_alive(target)


# -- unsupported APIs and versions ------------------------------------------------------


@pytest.mark.parametrize(
    ("api_key", "version"),
    [
        (9999, 0),  # no such API
        (-1, 0),
        (74, 0),  # a real Kafka API that odradek does not implement (yet)
        (PRODUCE, 2),  # advertised for old librdkafka, never served (KAFKA-18659)
        (PRODUCE, 99),
        (FETCH, 3),
        (METADATA, 13),
        (LIST_OFFSETS, 0),
    ],
)
def test_unsupported_key_or_version_closes_the_connection(
    target: BrokerProcess, api_key: int, version: int
) -> None:
    with connect(target) as sock:
        sock.sendall(frame(header(api_key, version, 77) + b"\x00" * 16))
        sock.settimeout(10)
        assert sock.recv(1024) == b""
    assert_alive(target)


def test_unsupported_version_on_a_busy_connection_drops_only_it(target: BrokerProcess) -> None:
    with WireClient(target.bootstrap) as client:
        assert client.request(request(API_VERSIONS, 0)).error_code == ErrorCode.none
        client.send_raw(frame(header(METADATA, 99, 5)))
        wait_closed(client.sock)
    assert_alive(target)


# -- undecodable bodies -----------------------------------------------------------------


def test_garbage_body_closes_the_connection(target: BrokerProcess) -> None:
    with connect(target) as sock:
        # Metadata v1: a topics array claiming a million entries, then nothing.
        sock.sendall(frame(header(METADATA, 1) + struct.pack(">i", 1_000_000)))
        sock.settimeout(10)
        assert sock.recv(1024) == b""
    with connect(target) as sock:
        # A string length far past the end of the frame.
        sock.sendall(frame(header(METADATA, 1) + struct.pack(">ih", 1, 30000) + b"ab"))
        sock.settimeout(10)
        assert sock.recv(1024) == b""
    assert "malformed request" in target.log()
    assert_alive(target)


def test_truncated_request_body_closes_the_connection(target: BrokerProcess) -> None:
    with WireClient(target.bootstrap) as client:
        topic = make_topic(client, "truncated")
    for version in (3, 9, 11):
        with WireClient(target.bootstrap) as client:
            whole, _ = client.encode(produce_request(topic, 0, batch([b"x" * 50]), version=version))
            body = whole[4:]
            for cut in (1, 20, len(body) // 2):
                client.send_raw(frame(body[:-cut]))  # a well-framed but short request
                wait_closed(client.sock)
                client.close()
                client = WireClient(target.bootstrap)
    with WireClient(target.bootstrap) as client:
        assert read_all(client, topic, 0) == []  # nothing half-decoded was appended
    assert_serves(target.bootstrap)


# -- produce content errors -------------------------------------------------------------


def test_produce_corrupt_batch(target: BrokerProcess) -> None:
    with WireClient(target.bootstrap) as client:
        topic = make_topic(client, "corrupt")
        good = batch([b"value-1", b"value-2"])
        for position in (len(good) - 1, 61, 21):  # in the records, header and attributes
            corrupt = bytearray(good)
            corrupt[position] ^= 0x40
            response = produce(client, topic, 0, bytes(corrupt))
            assert response.error_code == ErrorCode.corrupt_message, position
        # A batch length that runs past the data, and bytes that are not a batch at all.
        short = produce(client, topic, 0, good[:-5])
        assert short.error_code == ErrorCode.corrupt_message
        tiny = produce(client, topic, 0, b"\x01\x02\x03")
        assert tiny.error_code == ErrorCode.corrupt_message
        assert produce(client, topic, 0, good).base_offset == 0
        assert [r.value for r in read_all(client, topic, 0)] == [b"value-1", b"value-2"]


@pytest.fixture(scope="module")
def mutation_topic(target: BrokerProcess) -> str:
    with WireClient(target.bootstrap) as client:
        return make_topic(client, "mutations")


MUTATION_SOURCE = batch([b"key-less value", b"x" * 40], timestamp=now_ms())
# Outside the CRC and overwritten on append: baseOffset (0-7), partitionLeaderEpoch (12-15).
IGNORED_POSITIONS = set(range(0, 8)) | set(range(12, 16))


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    derandomize=True,
)
@given(
    flips=st.lists(
        st.tuples(st.integers(0, len(MUTATION_SOURCE) - 1), st.integers(1, 255)),
        min_size=1,
        max_size=3,
    )
)
def test_mutated_batches_are_rejected_per_partition(
    target: BrokerProcess, mutation_topic: str, flips: list[tuple[int, int]]
) -> None:
    mutated = bytearray(MUTATION_SOURCE)
    for position, mask in flips:
        mutated[position] ^= mask
    with WireClient(target.bootstrap) as client:
        before = fetch(client, mutation_topic, 0, 0).high_watermark
        response = produce(client, mutation_topic, 0, bytes(mutated))
        after = fetch(client, mutation_topic, 0, 0).high_watermark
    changed = {i for i, (a, b) in enumerate(zip(mutated, MUTATION_SOURCE, strict=True)) if a != b}
    if changed <= IGNORED_POSITIONS:
        assert response.error_code == ErrorCode.none and after == before + 2
    else:
        assert response.error_code in (
            ErrorCode.corrupt_message,
            ErrorCode.invalid_record,
            ErrorCode.unsupported_for_message_format,
        ), response
        assert after == before


def test_produce_old_magic(target: BrokerProcess) -> None:
    with WireClient(target.bootstrap) as client:
        topic = make_topic(client, "magic")
        for magic in (0, 1):
            old = bytearray(batch([b"v"]))
            old[MAGIC_POSITION] = magic
            response = produce(client, topic, 0, bytes(old))
            assert response.error_code == ErrorCode.unsupported_for_message_format
        future = bytearray(batch([b"v"]))
        future[MAGIC_POSITION] = 3
        assert produce(client, topic, 0, bytes(future)).error_code == ErrorCode.corrupt_message


def test_produce_two_batches_or_none(target: BrokerProcess) -> None:
    with WireClient(target.bootstrap) as client:
        topic = make_topic(client, "two-batches")
        two = batch([b"a"]) + batch([b"b"])
        assert produce(client, topic, 0, two).error_code == ErrorCode.invalid_record
        assert produce(client, topic, 0, None).error_code == ErrorCode.invalid_record
        assert produce(client, topic, 0, b"").error_code == ErrorCode.invalid_record
        assert read_all(client, topic, 0) == []


def test_produce_batch_rule_violations(target: BrokerProcess) -> None:
    with WireClient(target.bootstrap) as client:
        topic = make_topic(client, "rules")
        # Record count that disagrees with the last offset delta.
        gap = encode_batch([Record(0, now_ms(), None, b"a"), Record(5, now_ms(), None, b"b")])
        assert produce(client, topic, 0, gap).error_code == ErrorCode.invalid_record
        # A client may not write control batches.
        control = batch([b"c"], is_control=True)
        assert produce(client, topic, 0, control).error_code == ErrorCode.invalid_record
        # Idempotent batch without a sequence.
        no_seq = batch([b"d"], producer_id=5, producer_epoch=0, base_sequence=-1)
        assert produce(client, topic, 0, no_seq).error_code == ErrorCode.invalid_record
        assert read_all(client, topic, 0) == []


def test_produce_over_max_message_bytes(target: BrokerProcess) -> None:
    with WireClient(target.bootstrap) as client:
        topic = make_topic(client, "too-large", configs={"max.message.bytes": "1000"})
        response = produce(client, topic, 0, batch([os.urandom(2000)]))
        assert response.error_code == ErrorCode.message_too_large
        assert produce(client, topic, 0, batch([b"fits"])).error_code == ErrorCode.none


def test_produce_far_future_timestamp(target: BrokerProcess) -> None:
    with WireClient(target.bootstrap) as client:
        topic = make_topic(client, "future")
        future = batch([b"later"], timestamp=now_ms() + 10 * 24 * 3600 * 1000)
        assert produce(client, topic, 0, future).error_code == ErrorCode.invalid_timestamp
        strict = make_topic(client, "past", configs={"message.timestamp.before.max.ms": "60000"})
        past = batch([b"earlier"], timestamp=now_ms() - 3600 * 1000)
        assert produce(client, strict, 0, past).error_code == ErrorCode.invalid_timestamp
        assert read_all(client, topic, 0) == []


@pytest.mark.parametrize("acks", [5, -2, 2])
def test_produce_invalid_acks(target: BrokerProcess, acks: int) -> None:
    with WireClient(target.bootstrap) as client:
        topic = make_topic(client, "acks")
        response = produce(client, topic, 0, batch([b"x"]), acks=acks)
        assert response.error_code == ErrorCode.invalid_required_acks
        assert read_all(client, topic, 0) == []


def test_produce_unknown_partition_and_transactional(target: BrokerProcess) -> None:
    with WireClient(target.bootstrap) as client:
        topic = make_topic(client, "partitions", partitions=2)
        assert produce(client, topic, 2, batch([b"x"])).error_code == (
            ErrorCode.unknown_topic_or_partition
        )
        assert produce(client, topic, -1, batch([b"x"])).error_code == (
            ErrorCode.unknown_topic_or_partition
        )
        name = unique("never-made")
        assert produce(client, name, 0, batch([b"x"])).error_code == (
            ErrorCode.unknown_topic_or_partition
        )
        assert name not in {t.name for t in metadata(client, None).topics}


def test_produce_unknown_topic_with_auto_create_disabled(tmp_path: Path) -> None:
    broker = BrokerProcess(
        tmp_path / "data", ["--override", "auto.create.topics.enable=false"]
    ).start()
    try:
        with WireClient(broker.bootstrap) as client:
            response = produce(client, "nowhere", 0, batch([b"x"]))
            assert response.error_code == ErrorCode.unknown_topic_or_partition
            described = metadata(client, ["nowhere"])
            assert described.topics[0].error_code == ErrorCode.unknown_topic_or_partition
            assert metadata(client, None).topics == ()
            assert fetch(client, "nowhere", 0, 0).error_code == (
                ErrorCode.unknown_topic_or_partition
            )
            # Explicit creation still works.
            assert create_topic(client, "nowhere").error_code == ErrorCode.none
            assert produce(client, "nowhere", 0, batch([b"x"])).error_code == ErrorCode.none
        assert_clean_log(broker)
    finally:
        try:
            assert broker.stop() == 0
        finally:
            broker.kill()


# -- topic names and configs ------------------------------------------------------------

ILLEGAL_NAMES = ["bad/name", "a b", "ünïcode", "x" * 250, ".", "..", "tab\t", "colon:"]


def test_illegal_topic_names_in_metadata(target: BrokerProcess) -> None:
    with WireClient(target.bootstrap) as client:
        for version in (1, 4, 12):
            response = metadata(client, ILLEGAL_NAMES, version)
            codes = {t.name: t.error_code for t in response.topics}
            assert codes == dict.fromkeys(ILLEGAL_NAMES, ErrorCode.invalid_topic_exception)
        listed = {t.name for t in metadata(client, None).topics}
    assert not listed & set(ILLEGAL_NAMES)


def test_illegal_topic_names_in_create_topics(target: BrokerProcess) -> None:
    with WireClient(target.bootstrap) as client:
        for name in [*ILLEGAL_NAMES, ""]:
            result = create_topic(client, name)
            assert result.error_code == ErrorCode.invalid_topic_exception, name
            assert result.error_message
        # Names differing only in '.' vs '_' collide in metric names: Kafka rejects them.
        base = unique("dot.collide")
        assert create_topic(client, base).error_code == ErrorCode.none
        collision = create_topic(client, base.replace(".", "_"))
        assert collision.error_code == ErrorCode.invalid_topic_exception


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("retention.ms", "soon"),
        ("retention.ms", "-5"),
        ("cleanup.policy", "shred"),
        ("max.message.bytes", "-1"),
        ("segment.bytes", "10"),
        ("min.insync.replicas", "0"),
        ("message.timestamp.type", "Sometime"),
        ("compression.type", "brotli"),
        ("no.such.config", "1"),
        ("retention.bytes", "9" * 30),
    ],
)
def test_invalid_topic_configs(target: BrokerProcess, key: str, value: str) -> None:
    with WireClient(target.bootstrap) as client:
        name = unique("bad-config")
        result = create_topic(client, name, configs={key: value})
        assert result.error_code == ErrorCode.invalid_config, (key, value, result)
        assert key in (result.error_message or "")
        assert name not in {t.name for t in metadata(client, None).topics}


def test_null_config_value_and_bad_partition_counts(target: BrokerProcess) -> None:
    module = nested(CREATE_TOPICS, 7)

    def topic(name: str, partitions: int, configs: tuple = ()) -> object:
        return make(
            module.CreatableTopic,
            name=name,
            num_partitions=partitions,
            replication_factor=1,
            assignments=(),
            configs=configs,
        )

    def create(*topics: object) -> list[ErrorCode]:
        response = client.request(
            make(
                module.CreateTopicsRequest,
                topics=topics,
                timeout=datetime.timedelta(seconds=10),
                validate_only=False,
            )
        )
        return [t.error_code for t in response.topics]

    null = (make(module.CreatableTopicConfig, name="retention.ms", value=None),)
    with WireClient(target.bootstrap) as client:
        codes = create(topic(unique("null-config"), 1, null), topic(unique("negative"), -7))
        assert codes[0] in (ErrorCode.none, ErrorCode.invalid_config)
        assert codes[1] == ErrorCode.invalid_partitions
        # Kafka refuses more than 10,000 new partitions per request, for every topic in it.
        huge = [unique("huge"), unique("small")]
        assert create(topic(huge[0], 2**31 - 1), topic(huge[1], 1)) == [
            ErrorCode.policy_violation, ErrorCode.policy_violation,
        ]  # fmt: skip
        assert create(topic(unique("many"), 6000), topic(unique("more"), 6000)) == [
            ErrorCode.policy_violation, ErrorCode.policy_violation,
        ]  # fmt: skip
        listed = {t.name for t in metadata(client, None).topics}
        assert not listed & set(huge)
