"""Protocol-level behaviour of a real broker, request by request, with kio on the wire.

Every claimed version of Produce, Fetch, ListOffsets, InitProducerId and Metadata is
round-tripped (the responses decode with kio's readers, including the hand-encoded
FetchResponse); fetch long polling, KIP-74 and max_bytes budgets, OFFSET_OUT_OF_RANGE,
fetch sessions, acks=0, pipelining, idle connections and ListOffsets lookups.

The helpers at the top are shared with the other broker test modules.
"""

from __future__ import annotations

import datetime
import os
import socket
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from kio.index import load_payload_module, load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader
from kio.static.constants import EntityType

from odradek.protocol.build import make
from odradek.protocol.fetch_codec import PartitionResult, TopicResult, encode_fetch_response
from odradek.records.codec import Record, decode_batches, encode_batch, new_records
from odradek.records.file_range import FileRange
from odradek.server.handlers import supported_versions
from tests.support.broker import BrokerProcess
from tests.support.wire import WireClient, create_topic

# -- helpers (also imported by test_bad_input / test_restart) ---------------------------

PRODUCE, FETCH, LIST_OFFSETS, METADATA, API_VERSIONS, CREATE_TOPICS, INIT_PRODUCER_ID = (
    0, 1, 2, 3, 18, 19, 22,
)  # fmt: skip


def request(api_key: int, version: int, **fields: Any) -> Any:
    return make(load_request_schema(api_key, version), **fields)


def nested(api_key: int, version: int) -> Any:
    return load_payload_module(api_key, version, EntityType.request)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def batch(values: Sequence[bytes], *, timestamp: int | None = None, **fields: Any) -> bytes:
    return encode_batch(new_records(values, timestamp=timestamp), **fields)


def make_topic(
    client: WireClient, prefix: str, partitions: int = 1, configs: dict[str, str] | None = None
) -> str:
    name = unique(prefix)
    result = create_topic(client, name, partitions, configs)
    assert result.error_code == ErrorCode.none, result
    return name


def produce_request(
    topic: str, partition: int, records: bytes | None, *, acks: int = -1, version: int = 9
) -> Any:
    module = nested(PRODUCE, version)
    data = make(module.PartitionProduceData, index=partition, records=records)
    return make(
        module.ProduceRequest,
        transactional_id=None,
        acks=acks,
        timeout=datetime.timedelta(seconds=10),
        topic_data=(make(module.TopicProduceData, name=topic, partition_data=(data,)),),
    )


def produce(
    client: WireClient,
    topic: str,
    partition: int,
    records: bytes | None,
    *,
    acks: int = -1,
    version: int = 9,
) -> Any:
    """One partition's PartitionProduceResponse."""
    response = client.request(
        produce_request(topic, partition, records, acks=acks, version=version)
    )
    (topic_response,) = response.responses
    assert topic_response.name == topic
    (partition_response,) = topic_response.partition_responses
    assert partition_response.index == partition
    return partition_response


def fetch_request(
    wanted: Mapping[Any, Sequence[tuple[int, int, int]]],
    *,
    version: int = 12,
    max_wait_ms: int = 0,
    min_bytes: int = 0,
    max_bytes: int = 0x7FFFFFFF,
    session_id: int = 0,
    session_epoch: int = -1,
) -> Any:
    """``wanted``: topic → [(partition, fetch offset, partition max bytes)]; a topic is
    its name below v13 and its id from v13 (KIP-516)."""
    module = nested(FETCH, version)
    topics = tuple(
        make(
            module.FetchTopic,
            topic=topic,
            topic_id=topic,
            partitions=tuple(
                make(
                    module.FetchPartition,
                    partition=p,
                    fetch_offset=offset,
                    partition_max_bytes=limit,
                    current_leader_epoch=-1,
                    log_start_offset=-1,
                )
                for p, offset, limit in partitions
            ),
        )
        for topic, partitions in wanted.items()
    )
    return make(
        module.FetchRequest,
        replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=0,
        session_id=session_id,
        session_epoch=session_epoch,
        topics=topics,
        forgotten_topics_data=(),
        rack_id="",
    )


def fetch(client: WireClient, topic: str, partition: int, offset: int, **options: Any) -> Any:
    """One partition's PartitionData (decoded by kio's FetchResponse reader)."""
    limit = options.pop("partition_max_bytes", 1 << 20)
    response = client.request(fetch_request({topic: [(partition, offset, limit)]}, **options))
    assert getattr(response, "error_code", ErrorCode.none) == ErrorCode.none
    (topic_response,) = response.responses
    (partition_data,) = topic_response.partitions
    return partition_data


def records_of(data: bytes | None) -> list[Record]:
    return [r for b in decode_batches(data or b"") for r in b.records]


def read_all(client: WireClient, topic: str, partition: int, start: int = 0) -> list[Record]:
    """Every record from ``start`` to the high watermark, fetched batch by batch."""
    records: list[Record] = []
    offset = start
    while True:
        data = fetch(client, topic, partition, offset)
        assert data.error_code == ErrorCode.none, data
        got = [r for r in records_of(data.records) if r.offset >= offset]
        if not got:
            assert offset >= data.high_watermark
            return records
        records += got
        offset = got[-1].offset + 1


def list_offset(
    client: WireClient, topic: str, partition: int, timestamp: int, version: int = 8
) -> Any:
    module = nested(LIST_OFFSETS, version)
    response = client.request(
        make(
            module.ListOffsetsRequest,
            replica_id=-1,
            isolation_level=0,
            topics=(
                make(
                    module.ListOffsetsTopic,
                    name=topic,
                    partitions=(
                        make(
                            module.ListOffsetsPartition,
                            partition_index=partition,
                            current_leader_epoch=-1,
                            timestamp=timestamp,
                        ),
                    ),
                ),
            ),
        )
    )
    (topic_response,) = response.topics
    (partition_response,) = topic_response.partitions
    return partition_response


def init_producer_id(client: WireClient, version: int = 4) -> tuple[int, int]:
    response = client.request(
        request(
            INIT_PRODUCER_ID,
            version,
            transactional_id=None,
            transaction_timeout=datetime.timedelta(seconds=60),
            producer_id=-1,
            producer_epoch=-1,
        )
    )
    assert response.error_code == ErrorCode.none
    return int(response.producer_id), int(response.producer_epoch)


def metadata(client: WireClient, topics: Sequence[str] | None, version: int = 12, **kw: Any) -> Any:
    module = nested(METADATA, version)
    wanted = (
        None
        if topics is None
        else tuple(make(module.MetadataRequestTopic, name=t, topic_id=None) for t in topics)
    )
    return client.request(
        make(
            module.MetadataRequest,
            topics=wanted,
            allow_auto_topic_creation=kw.get("allow_auto_topic_creation", True),
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
    )


def assert_serves(bootstrap: str) -> None:
    """A fresh connection gets ApiVersions and Metadata, and a produce reads back."""
    with WireClient(bootstrap) as client:
        versions = client.request(
            request(API_VERSIONS, 3, client_software_name="t", client_software_version="1")
        )
        assert versions.error_code == ErrorCode.none
        assert metadata(client, None).brokers
        topic = make_topic(client, "health")
        response = produce(client, topic, 0, batch([b"alive-1", b"alive-2"]))
        assert response.error_code == ErrorCode.none and response.base_offset == 0
        assert [r.value for r in read_all(client, topic, 0)] == [b"alive-1", b"alive-2"]


def assert_clean_log(broker: BrokerProcess) -> None:
    assert "Traceback" not in broker.log(), broker.log()


def wait_closed(sock: socket.socket, timeout_s: float = 10.0) -> None:
    """Block until the peer closes ``sock`` (EOF or reset); fail after ``timeout_s``."""
    sock.settimeout(timeout_s)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass


# -- every claimed version round-trips ---------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def no_tracebacks(shared_broker: BrokerProcess) -> Iterator[None]:
    yield
    assert shared_broker.alive()
    assert_clean_log(shared_broker)


@pytest.fixture(scope="module")
def versions_topic(shared_broker: BrokerProcess) -> str:
    with WireClient(shared_broker.bootstrap) as client:
        return make_topic(client, "versions")


def test_claimed_versions_are_the_tested_ones() -> None:
    claimed = supported_versions()
    assert claimed[PRODUCE] == (0, 11)  # 0-2 advertised, never served (KAFKA-18659)
    assert claimed[FETCH] == (4, 17)
    assert claimed[LIST_OFFSETS] == (1, 8)
    assert claimed[INIT_PRODUCER_ID] == (0, 5)
    assert claimed[METADATA] == (0, 12)


@pytest.mark.parametrize("version", range(3, 12))
def test_produce_every_version(
    shared_broker: BrokerProcess, versions_topic: str, version: int
) -> None:
    with WireClient(shared_broker.bootstrap) as client:
        before = list_offset(client, versions_topic, 0, -1).offset
        value = f"produce-v{version}".encode()
        response = produce(client, versions_topic, 0, batch([value, value]), version=version)
        assert response.error_code == ErrorCode.none
        assert response.base_offset == before
        if version >= 5:
            assert response.log_start_offset == 0
        if version >= 2:
            assert response.log_append_time is None  # CreateTime topic
        records = read_all(client, versions_topic, 0, before)
    assert [(r.offset, r.value) for r in records] == [(before, value), (before + 1, value)]


@pytest.mark.parametrize("version", range(4, 18))
def test_fetch_every_version(shared_broker: BrokerProcess, version: int) -> None:
    """v13+ by topic id (KIP-516), v15+ a consumer's replica_state left at its default
    (-1: not a follower, KIP-903), v17's replica_directory_id tag absent."""
    with WireClient(shared_broker.bootstrap) as client:
        topic = make_topic(client, f"fetch-v{version}", partitions=2)
        (described,) = metadata(client, [topic]).topics
        key: Any = described.topic_id if version >= 13 else topic
        produce(client, topic, 0, batch([b"a", b"b"]))
        produce(client, topic, 0, batch([b"c"]))
        response = client.request(
            fetch_request({key: [(0, 1, 1 << 20), (1, 0, 1 << 20)]}, version=version)
        )
    assert getattr(response, "error_code", ErrorCode.none) == ErrorCode.none
    (topic_response,) = response.responses
    if version >= 13:
        assert topic_response.topic_id == described.topic_id
    else:
        assert topic_response.topic == topic
    if version >= 16:
        assert response.node_endpoints == ()  # no leadership error: none sent
    first, second = topic_response.partitions
    assert (first.partition_index, first.error_code, first.high_watermark) == (0, 0, 3)
    assert first.last_stable_offset == 3
    if version >= 5:
        assert first.log_start_offset == 0
    assert first.aborted_transactions is None
    # Whole batches: the batch holding offset 1 starts at 0.
    assert [(r.offset, r.value) for r in records_of(first.records)] == [
        (0, b"a"), (1, b"b"), (2, b"c"),
    ]  # fmt: skip
    assert (second.partition_index, second.error_code, second.high_watermark) == (1, 0, 0)
    assert not second.records


@pytest.mark.parametrize("version", range(1, 9))
def test_list_offsets_every_version(
    shared_broker: BrokerProcess, versions_topic: str, version: int
) -> None:
    with WireClient(shared_broker.bootstrap) as client:
        produce(client, versions_topic, 0, batch([b"x"]))
        end = fetch(client, versions_topic, 0, 0).high_watermark
        latest = list_offset(client, versions_topic, 0, -1, version)
        earliest = list_offset(client, versions_topic, 0, -2, version)
    assert (latest.error_code, latest.offset) == (ErrorCode.none, end)
    assert (earliest.error_code, earliest.offset) == (ErrorCode.none, 0)
    if version >= 4:
        assert latest.leader_epoch >= 0


@pytest.mark.parametrize("version", range(0, 6))
def test_init_producer_id_every_version(shared_broker: BrokerProcess, version: int) -> None:
    with WireClient(shared_broker.bootstrap) as client:
        first = init_producer_id(client, version)
        second = init_producer_id(client, version)
    assert first[0] >= 0 and first[1] == 0
    assert second[0] != first[0]


@pytest.mark.parametrize("version", range(0, 13))
def test_metadata_every_version_lists_all_topics(
    shared_broker: BrokerProcess, versions_topic: str, version: int
) -> None:
    with WireClient(shared_broker.bootstrap) as client:
        response = metadata(client, None if version else [], version)
    names = {t.name for t in response.topics}
    assert versions_topic in names
    assert [(b.node_id, b.port) for b in response.brokers] == [(1, shared_broker.port)]


def test_metadata_v12_by_topic_id(shared_broker: BrokerProcess) -> None:
    module = nested(METADATA, 12)
    with WireClient(shared_broker.bootstrap) as client:
        topic = make_topic(client, "by-id", partitions=2)
        (known,) = metadata(client, [topic]).topics
        unknown_id = uuid.uuid4()
        response = client.request(
            make(
                module.MetadataRequest,
                topics=tuple(
                    make(module.MetadataRequestTopic, name=None, topic_id=topic_id)
                    for topic_id in (known.topic_id, unknown_id)
                ),
                allow_auto_topic_creation=True,
                include_topic_authorized_operations=False,
            )
        )
    by_id = {t.topic_id: t for t in response.topics}
    assert set(by_id) == {known.topic_id, unknown_id}
    assert by_id[known.topic_id].name == topic and len(by_id[known.topic_id].partitions) == 2
    assert by_id[unknown_id].error_code == ErrorCode.unknown_topic_id
    assert by_id[unknown_id].name is None and by_id[unknown_id].partitions == ()


# -- the hand-written FetchResponse encoder, decoded by kio -------------------------------


def _materialise(parts: list[bytes | FileRange]) -> bytes:
    out = bytearray()
    for part in parts:
        if isinstance(part, FileRange):
            data = os.pread(part.fd, part.length, part.position)
            assert len(data) == part.length
            out += data
        else:
            out += part
    return bytes(out)


@pytest.mark.parametrize("version", range(4, 18))
def test_encode_fetch_response_decodes_with_kio(tmp_path: Path, version: int) -> None:
    first = encode_batch(new_records([b"one", b"two"], timestamp=1000))
    second = encode_batch(new_records([b"three"], base_offset=2, timestamp=1001))
    path = tmp_path / "segment.log"
    path.write_bytes(b"junk" + first + second)
    fd = os.open(path, os.O_RDONLY)
    try:
        ids = [uuid.UUID(int=1), uuid.UUID(int=2), uuid.UUID(int=3)]
        topics = [
            TopicResult(
                "orders",
                [
                    PartitionResult(
                        0,
                        0,
                        3,
                        3,
                        0,
                        [FileRange(fd, 4, len(first)), FileRange(fd, 4 + len(first), len(second))],
                    ),
                    PartitionResult(1, 0, 0, 0, 0),  # empty
                    PartitionResult(2, 1, 10, 10, 5),  # OFFSET_OUT_OF_RANGE
                    PartitionResult(3, 0, 7, 5, 0, aborted=[(42, 5), (43, 6)]),
                ],
                ids[0],
            ),
            TopicResult("ünïcode-topic", [], ids[1]),
            TopicResult("x" * 200, [PartitionResult(9, 6, aborted=[])], ids[2]),
        ]
        parts = encode_fetch_response(version, 12345, topics, session_id=0, throttle_ms=7)
        frame = _materialise(parts)
    finally:
        os.close(fd)
    schema: Any = load_response_schema(FETCH, version)
    header, offset = entity_reader(schema.__header_schema__)(frame, 0)
    assert header.correlation_id == 12345
    body, size = entity_reader(schema)(frame, offset)
    assert offset + size == len(frame)
    assert body.throttle_time == datetime.timedelta(milliseconds=7)
    if version >= 7:
        assert body.error_code == ErrorCode.none and body.session_id == 0
    if version >= 13:
        assert [t.topic_id for t in body.responses] == ids
    else:
        assert [t.topic for t in body.responses] == ["orders", "ünïcode-topic", "x" * 200]
    orders = body.responses[0].partitions
    assert [p.partition_index for p in orders] == [0, 1, 2, 3]
    assert orders[0].records == first + second
    assert (orders[0].high_watermark, orders[0].last_stable_offset) == (3, 3)
    assert orders[0].aborted_transactions is None
    assert not orders[1].records and orders[1].high_watermark == 0
    assert orders[2].error_code == ErrorCode.offset_out_of_range
    assert orders[2].high_watermark == 10
    if version >= 5:
        assert orders[2].log_start_offset == 5
    assert [(a.producer_id, a.first_offset) for a in orders[3].aborted_transactions] == [
        (42, 5), (43, 6),
    ]  # fmt: skip
    assert orders[3].last_stable_offset == 5
    if version >= 11:
        assert all(p.preferred_read_replica == -1 for p in orders)
    assert body.responses[1].partitions == ()
    (last,) = body.responses[2].partitions
    assert last.error_code == ErrorCode.not_leader_or_follower
    assert last.aborted_transactions == ()


@pytest.mark.parametrize("version", [4, 7, 12, 13, 16, 17])
def test_encode_fetch_response_top_level_error(version: int) -> None:
    frame = _materialise(encode_fetch_response(version, 9, [], error_code=70))
    schema: Any = load_response_schema(FETCH, version)
    _, offset = entity_reader(schema.__header_schema__)(frame, 0)
    body, size = entity_reader(schema)(frame, offset)
    assert offset + size == len(frame) and body.responses == ()
    if version >= 7:
        assert body.error_code == ErrorCode.fetch_session_id_not_found


# -- fetch semantics --------------------------------------------------------------------


def test_fetch_long_poll_returns_as_soon_as_data_arrives(shared_broker: BrokerProcess) -> None:
    with (
        WireClient(shared_broker.bootstrap) as waiting,
        WireClient(shared_broker.bootstrap) as producer,
    ):
        topic = make_topic(producer, "long-poll")
        fetch_req = fetch_request({topic: [(0, 0, 1 << 20)]}, max_wait_ms=2000, min_bytes=1)
        started = time.monotonic()
        correlation_id = waiting.send(fetch_req)
        time.sleep(0.2)  # let the fetch park
        assert produce(producer, topic, 0, batch([b"wake"])).error_code == ErrorCode.none
        response = waiting.receive(fetch_req, correlation_id)
        elapsed = time.monotonic() - started
    assert elapsed < 1.5, elapsed
    (data,) = response.responses[0].partitions
    assert [r.value for r in records_of(data.records)] == [b"wake"]


def test_fetch_long_poll_times_out_after_max_wait(shared_broker: BrokerProcess) -> None:
    with WireClient(shared_broker.bootstrap) as client:
        topic = make_topic(client, "long-poll-idle")
        started = time.monotonic()
        data = fetch(client, topic, 0, 0, max_wait_ms=1000, min_bytes=1)
        elapsed = time.monotonic() - started
    assert 0.9 <= elapsed < 2.5, elapsed
    assert data.error_code == ErrorCode.none and not data.records


def test_fetch_min_bytes_met_returns_immediately(shared_broker: BrokerProcess) -> None:
    with WireClient(shared_broker.bootstrap) as client:
        topic = make_topic(client, "min-bytes")
        produce(client, topic, 0, batch([b"ready"]))
        started = time.monotonic()
        data = fetch(client, topic, 0, 0, max_wait_ms=5000, min_bytes=1)
    assert time.monotonic() - started < 1.0
    assert [r.value for r in records_of(data.records)] == [b"ready"]


def test_kip74_first_batch_larger_than_partition_max_bytes_is_returned_whole(
    shared_broker: BrokerProcess,
) -> None:
    big = batch([os.urandom(3000)])
    with WireClient(shared_broker.bootstrap) as client:
        topic = make_topic(client, "kip74")
        produce(client, topic, 0, big)
        produce(client, topic, 0, batch([b"small"]))
        data = fetch(client, topic, 0, 0, partition_max_bytes=100)
        both = fetch(client, topic, 0, 0, partition_max_bytes=1 << 20)
        whole = fetch(client, topic, 0, 0, partition_max_bytes=1 << 20, max_bytes=100)
    assert len(data.records) == len(big)  # the first batch, whole, and nothing more
    assert [r.offset for r in records_of(data.records)] == [0]
    assert [r.offset for r in records_of(both.records)] == [0, 1]
    assert [r.offset for r in records_of(whole.records)] == [0]


def test_fetch_max_bytes_is_a_budget_across_partitions(shared_broker: BrokerProcess) -> None:
    payload = batch([os.urandom(1000)])
    with WireClient(shared_broker.bootstrap) as client:
        topic = make_topic(client, "budget", partitions=3)
        for partition in range(3):
            produce(client, topic, partition, payload)
        wanted = {topic: [(p, 0, 1 << 20) for p in range(3)]}
        tight = client.request(fetch_request(wanted, max_bytes=len(payload) * 2 + 10))
        loose = client.request(fetch_request(wanted, max_bytes=1 << 20))
    sizes = [len(p.records or b"") for p in tight.responses[0].partitions]
    assert sizes == [len(payload), len(payload), 0]
    assert [len(p.records or b"") for p in loose.responses[0].partitions] == [len(payload)] * 3
    # The partition that did not fit still reports its offsets.
    assert tight.responses[0].partitions[2].high_watermark == 1


def test_fetch_offset_out_of_range_reports_hw_and_log_start(shared_broker: BrokerProcess) -> None:
    with WireClient(shared_broker.bootstrap) as client:
        topic = make_topic(client, "out-of-range", partitions=2)
        produce(client, topic, 0, batch([b"1", b"2", b"3"]))
        response = client.request(fetch_request({topic: [(0, 10, 1 << 20), (1, 0, 1 << 20)]}))
        also_negative = fetch(client, topic, 0, -1)
    bad, good = response.responses[0].partitions
    assert bad.error_code == ErrorCode.offset_out_of_range
    assert (bad.high_watermark, bad.log_start_offset) == (3, 0)
    assert not bad.records
    assert good.error_code == ErrorCode.none
    assert also_negative.error_code == ErrorCode.offset_out_of_range


def test_fetch_unknown_topic_partition(shared_broker: BrokerProcess) -> None:
    with WireClient(shared_broker.bootstrap) as client:
        topic = make_topic(client, "known")
        missing_partition = fetch(client, topic, 5, 0)
        missing_topic = fetch(client, unique("never-created"), 0, 0)
    assert missing_partition.error_code == ErrorCode.unknown_topic_or_partition
    assert missing_topic.error_code == ErrorCode.unknown_topic_or_partition


@pytest.mark.parametrize("version", [7, 12, 17])
def test_fetch_session_epoch_is_declined(shared_broker: BrokerProcess, version: int) -> None:
    with WireClient(shared_broker.bootstrap) as client:
        topic = make_topic(client, "sessions")
        key: Any = metadata(client, [topic]).topics[0].topic_id if version >= 13 else topic
        produce(client, topic, 0, batch([b"s"]))
        declined = client.request(
            fetch_request({key: [(0, 0, 1 << 20)]}, version=version, session_id=77, session_epoch=3)
        )
        full = client.request(
            fetch_request({key: [(0, 0, 1 << 20)]}, version=version, session_epoch=0)
        )
    assert declined.error_code == ErrorCode.fetch_session_id_not_found
    assert declined.responses == ()
    # A request to open a session gets a full response with session id 0 (no session).
    assert full.error_code == ErrorCode.none and full.session_id == 0
    assert [r.value for r in records_of(full.responses[0].partitions[0].records)] == [b"s"]


@pytest.mark.parametrize("version", [13, 15, 16, 17])
def test_fetch_unknown_topic_id_is_answered_at_once(
    shared_broker: BrokerProcess, version: int
) -> None:
    """KIP-516: an id no topic has gets UNKNOWN_TOPIC_ID on each partition asked for
    (named by that id), beside a known topic read as usual; the error ends the long
    poll, as any partition's error does."""
    unknown = uuid.uuid4()
    with WireClient(shared_broker.bootstrap) as client:
        topic = make_topic(client, "by-id")
        (described,) = metadata(client, [topic]).topics
        produce(client, topic, 0, batch([b"x"]))
        started = time.monotonic()
        response = client.request(
            fetch_request(
                {
                    unknown: [(0, 0, 1 << 20), (3, 0, 1 << 20)],
                    described.topic_id: [(0, 0, 1 << 20)],
                    uuid.UUID(int=0): [(0, 0, 1 << 20)],
                },
                version=version,
                max_wait_ms=30_000,
                min_bytes=1 << 30,
            )
        )
        waited = time.monotonic() - started
    assert waited < 20  # not the 30 s long poll (no tighter bound under load)
    assert response.error_code == ErrorCode.none
    missing, known, zero = response.responses
    assert missing.topic_id == unknown
    assert zero.topic_id is None  # the zero id, as kio reads it
    assert [(p.partition_index, p.error_code) for p in missing.partitions] == [
        (0, ErrorCode.unknown_topic_id),
        (3, ErrorCode.unknown_topic_id),
    ]
    assert [p.error_code for p in zero.partitions] == [ErrorCode.unknown_topic_id]
    assert known.topic_id == described.topic_id
    (read,) = known.partitions
    assert read.error_code == ErrorCode.none and read.high_watermark == 1
    assert [r.value for r in records_of(read.records)] == [b"x"]


# -- produce / connection semantics -----------------------------------------------------


def test_acks_zero_gets_no_response(shared_broker: BrokerProcess) -> None:
    with WireClient(shared_broker.bootstrap) as client:
        topic = make_topic(client, "acks0")
        client.send(produce_request(topic, 0, batch([b"fire"]), acks=0))
        client.send(produce_request(topic, 0, batch([b"forget"]), acks=0))
        versions = request(API_VERSIONS, 0)
        correlation_id = client.send(versions)
        # receive() asserts that the next frame carries the ApiVersions correlation id.
        assert client.receive(versions, correlation_id).error_code == ErrorCode.none
        assert [r.value for r in read_all(client, topic, 0)] == [b"fire", b"forget"]


def test_acks_zero_error_closes_the_connection(shared_broker: BrokerProcess) -> None:
    """With no response to carry it, an acks=0 error is signalled by closing (as Kafka)."""
    with WireClient(shared_broker.bootstrap) as client:
        topic = make_topic(client, "acks0-error")
        client.send(produce_request(topic, 0, batch([b"ok"]), acks=0))
        client.send(produce_request(topic, 3, batch([b"no such partition"]), acks=0))
        wait_closed(client.sock)
    with WireClient(shared_broker.bootstrap) as client:
        assert [r.value for r in read_all(client, topic, 0)] == [b"ok"]


def test_pipelined_requests_are_answered_in_order(shared_broker: BrokerProcess) -> None:
    with WireClient(shared_broker.bootstrap) as setup:
        topic = make_topic(setup, "pipeline")
    with WireClient(shared_broker.bootstrap) as client:
        requests = [
            # A long poll first: nothing may overtake it.
            fetch_request({topic: [(0, 0, 1 << 20)]}, max_wait_ms=300, min_bytes=1),
            request(API_VERSIONS, 3, client_software_name="t", client_software_version="1"),
        ]
        requests += [produce_request(topic, 0, batch([f"p{i}".encode()])) for i in range(5)]
        requests += [
            fetch_request({topic: [(0, 0, 1 << 20)]}),
            request(API_VERSIONS, 0),
            request(METADATA, 1, topics=None),
        ]
        frames = b"".join(client.encode(r)[0] for r in requests)
        first_id = client.correlation_id - len(requests) + 1
        client.send_raw(frames)
        responses = []
        for index, req in enumerate(requests):
            responses.append(client.receive(req, first_id + index))
    assert not responses[0].responses[0].partitions[0].records  # the long poll timed out
    offsets = [r.responses[0].partition_responses[0].base_offset for r in responses[2:7]]
    assert offsets == [0, 1, 2, 3, 4]
    fetched = responses[7].responses[0].partitions[0]
    assert [r.value for r in records_of(fetched.records)] == [f"p{i}".encode() for i in range(5)]


def test_large_fetch_to_a_slow_or_vanishing_reader(shared_broker: BrokerProcess) -> None:
    """Megabytes through sendfile: a slow reader blocks only itself; a reader that hangs
    up mid-response costs nothing but its connection."""
    values = [os.urandom(1 << 20) for _ in range(6)]
    with WireClient(shared_broker.bootstrap) as client:
        topic = make_topic(client, "large", configs={"max.message.bytes": str(16 << 20)})
        assert produce(client, topic, 0, batch(values)).error_code == ErrorCode.none
        big_fetch = fetch_request({topic: [(0, 0, 32 << 20)]}, max_bytes=32 << 20)
        with WireClient(shared_broker.bootstrap) as slow:
            correlation_id = slow.send(big_fetch)
            time.sleep(0.3)  # the broker's socket buffer fills; its loop must stay free
            started = time.monotonic()
            assert client.request(request(API_VERSIONS, 0)).error_code == ErrorCode.none
            assert time.monotonic() - started < 1.0
            response = slow.receive(big_fetch, correlation_id)
        assert [r.value for r in records_of(response.responses[0].partitions[0].records)] == values
        for _ in range(3):
            with WireClient(shared_broker.bootstrap) as vanishing:
                vanishing.send(big_fetch)
                vanishing.sock.recv(100)
        assert client.request(request(API_VERSIONS, 0)).error_code == ErrorCode.none
    assert_clean_log(shared_broker)


def test_idle_connections_are_closed(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", ["--override", "connections.max.idle.ms=400"]).start()
    try:
        with WireClient(broker.bootstrap) as idle, WireClient(broker.bootstrap) as busy:
            assert idle.request(request(API_VERSIONS, 0)).error_code == ErrorCode.none
            started = time.monotonic()
            # The busy connection keeps talking for longer than the idle limit.
            while time.monotonic() - started < 0.8:
                assert busy.request(request(API_VERSIONS, 0)).error_code == ErrorCode.none
                time.sleep(0.1)
            wait_closed(idle.sock, timeout_s=5)
            elapsed = time.monotonic() - started
            assert elapsed < 3.0
            assert busy.request(request(API_VERSIONS, 0)).error_code == ErrorCode.none
        assert_clean_log(broker)
    finally:
        try:
            assert broker.stop() == 0
        finally:
            broker.kill()


# -- ListOffsets ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def timestamps_topic(shared_broker: BrokerProcess) -> tuple[str, int]:
    """Batch A: offsets 0-2 at base+10/20/30; batch B: offsets 3-4 at base+50/40."""
    base = now_ms() - 100_000
    with WireClient(shared_broker.bootstrap) as client:
        topic = make_topic(client, "timestamps")
        a = encode_batch([Record(i, base + 10 * (i + 1), None, b"a") for i in range(3)])
        b = encode_batch([Record(0, base + 50, None, b"b"), Record(1, base + 40, None, b"b")])
        assert produce(client, topic, 0, a).base_offset == 0
        assert produce(client, topic, 0, b).base_offset == 3
    return topic, base


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        (-2, (-1, 0)),  # earliest
        (-1, (-1, 5)),  # latest
        (-3, (50, 3)),  # max timestamp: the record holding it, not its batch
        (0, (10, 0)),  # before everything: the first record
        (10, (10, 0)),
        (11, (20, 1)),
        (25, (30, 2)),
        (30, (30, 2)),
        (35, (50, 3)),  # first record (in offset order) at or after the target
        (45, (50, 3)),
        (50, (50, 3)),
        (51, (None, -1)),  # past the newest timestamp: no offset
    ],
)
def test_list_offsets_layout(
    shared_broker: BrokerProcess,
    timestamps_topic: tuple[str, int],
    query: int,
    expected: tuple[int | None, int],
) -> None:
    topic, base = timestamps_topic
    target = query if query < 0 else base + query
    expected_ts = -1 if expected[0] is None or expected[0] < 0 else base + expected[0]
    with WireClient(shared_broker.bootstrap) as client:
        for version in (1, 4, 8):
            if query == -3 and version < 7:
                continue  # MAX_TIMESTAMP arrived in v7 (KIP-734)
            response = list_offset(client, topic, 0, target, version)
            assert response.error_code == ErrorCode.none
            assert (response.timestamp, response.offset) == (expected_ts, expected[1]), version
            if version >= 4 and response.offset >= 0:
                assert response.leader_epoch >= 0


def test_list_offsets_unknown_partition(shared_broker: BrokerProcess) -> None:
    with WireClient(shared_broker.bootstrap) as client:
        response = list_offset(client, unique("nope"), 0, -1)
    assert response.error_code == ErrorCode.unknown_topic_or_partition
    assert response.offset == -1


def test_warm_codecs_builds_the_highest_version_of_each_api_both_ways() -> None:
    from odradek.protocol import messages

    messages._request_codec.cache_clear()
    messages._response_codec.cache_clear()
    messages.warm_codecs({52: (0, 2), 1: (12, 18)})  # Vote, the metadata Fetch
    built = messages._request_codec.cache_info().currsize
    assert built == 2 and messages._response_codec.cache_info().currsize == 2
    messages._request_codec(52, 2)
    messages._response_codec(1, 18)
    assert messages._request_codec.cache_info().hits == 1  # built by the warm-up
    assert messages._response_codec.cache_info().hits == 1
    assert messages._request_codec.cache_info().currsize == built  # no lower version
