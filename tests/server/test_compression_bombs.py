"""Compression bombs and recompression against a real broker (issue 10, section 4).

A topic whose compression.type is not ``producer`` makes the broker open every batch
in another codec. A few KiB of gzip or zstd standing for 512 MiB must get
MESSAGE_TOO_LARGE without the broker's memory following the bomb, while another
connection keeps being answered; a batch whose recompressed form is over
max.message.bytes is refused and not stored; an ordinary conversion still works.
Clients may not write into internal topics (whose batches the coordinators decode),
and ListOffsets by timestamp does not expand a bomb a ``producer`` topic stored.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from odradek.records import batch as b
from odradek.records.codec import Header, Record, decode_batches, encode_batch, new_records
from tests.groups.wire import find_coordinator
from tests.server.test_protocol import (
    API_VERSIONS,
    assert_clean_log,
    fetch,
    list_offset,
    make_topic,
    now_ms,
    produce,
    produce_request,
    read_all,
    request,
)
from tests.support.bombs import bomb, raw_batch
from tests.support.broker import BrokerProcess, running_broker
from tests.support.wire import WireClient

MiB = 1 << 20
# Growth of the broker's peak RSS allowed for all the bombs below: two converter
# threads each hold at most 64 MiB of expanded records (the bound at the default
# max.message.bytes) plus its compressed output. Before the bound, one 512 MiB bomb
# alone took over 1 GiB.
RSS_GROWTH_BOUND = 400 * MiB


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("bombs") / "data") as started:
        yield started
        assert started.alive()
        assert_clean_log(started)


def _status(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def _pid(broker: BrokerProcess) -> int:
    assert broker.process is not None
    return broker.process.pid


def test_bombs_get_message_too_large_memory_stays_bounded_others_answered(
    broker: BrokerProcess,
) -> None:
    with WireClient(broker.bootstrap) as admin:
        to_zstd = make_topic(admin, "to-zstd", configs={"compression.type": "zstd"})
        to_gzip = make_topic(admin, "to-gzip", configs={"compression.type": "gzip"})
        to_none = make_topic(admin, "to-none", configs={"compression.type": "uncompressed"})
        produce(admin, to_zstd, 0, encode_batch(new_records([b"warm-up"])))
    baseline = _status(_pid(broker), "VmHWM")
    bombs = [
        (to_zstd, b.GZIP, 512 * MiB),
        (to_gzip, b.ZSTD, 512 * MiB),
        (to_zstd, b.LZ4, 128 * MiB),
        (to_none, b.ZSTD, 512 * MiB),
        (to_none, b.SNAPPY, 16 * MiB),
    ]
    answered: list[float] = []
    stop = threading.Event()

    def ping() -> None:
        with WireClient(broker.bootstrap, timeout_s=20) as other:
            while not stop.is_set():
                start = time.monotonic()
                versions = other.request(
                    request(API_VERSIONS, 3, client_software_name="t", client_software_version="1")
                )
                assert versions.error_code == ErrorCode.none
                answered.append(time.monotonic() - start)

    pinger = threading.Thread(target=ping, daemon=True)
    pinger.start()
    try:
        with WireClient(broker.bootstrap, timeout_s=60) as client:
            # three of each, pipelined: the broker has them all at once
            sent = []
            for topic, codec, size in bombs * 3:
                data = raw_batch(bomb(codec, size), codec, timestamp=now_ms())
                sent.append((topic, client.send(produce_request(topic, 0, data))))
            for topic, correlation_id in sent:
                response = client.receive(produce_request(topic, 0, None), correlation_id)
                (partition,) = response.responses[0].partition_responses
                assert partition.error_code == ErrorCode.message_too_large, partition
    finally:
        stop.set()
        pinger.join(30)
    assert answered, "ApiVersions on another connection was never answered"
    growth = _status(_pid(broker), "VmHWM") - baseline
    assert growth < RSS_GROWTH_BOUND, f"peak RSS grew by {growth / MiB:.0f} MiB"
    with WireClient(broker.bootstrap) as client:
        # nothing was stored: the next records start at the offset after the warm-up
        assert produce(client, to_zstd, 0, encode_batch(new_records([b"x"]))).base_offset == 1
        assert produce(client, to_gzip, 0, encode_batch(new_records([b"x"]))).base_offset == 0


def test_recompressed_batch_over_max_message_bytes_is_refused(broker: BrokerProcess) -> None:
    """zstd finds a 100 KB block repeated ten times; lz4 (64 KiB window) cannot."""
    import os

    value = os.urandom(100_000) * 10
    data = encode_batch([Record(0, now_ms(), None, value)], compression=b.ZSTD)
    assert len(data) < 200_000
    with WireClient(broker.bootstrap) as client:
        topic = make_topic(
            client,
            "lz4-small",
            configs={"compression.type": "lz4", "max.message.bytes": "300000"},
        )
        refused = produce(client, topic, 0, data)
        assert refused.error_code == ErrorCode.message_too_large, refused
        assert "over max.message.bytes=300000" in (refused.error_message or "")
        accepted = produce(
            client, topic, 0, encode_batch(new_records([b"a", b"b"]), compression=b.ZSTD)
        )
        assert accepted.error_code == ErrorCode.none and accepted.base_offset == 0


def test_ordinary_conversion_round_trips(broker: BrokerProcess) -> None:
    values = [f"value-{i}".encode() * 20 for i in range(500)]
    with WireClient(broker.bootstrap) as client:
        topic = make_topic(client, "convert", configs={"compression.type": "zstd"})
        for codec in (b.GZIP, b.SNAPPY, b.LZ4, b.NO_COMPRESSION):
            response = produce(
                client, topic, 0, encode_batch(new_records(values), compression=codec)
            )
            assert response.error_code == ErrorCode.none, response
        stored = []
        offset = 0
        while offset < 2000:
            data = fetch(client, topic, 0, offset)
            for batch in decode_batches(data.records or b""):
                assert batch.header.compression == b.ZSTD
                stored += [r.value for r in batch.records]
                offset = batch.header.last_offset + 1
    assert stored == values * 4


def test_internal_topics_take_no_client_produce(broker: BrokerProcess) -> None:
    """A client's batch in __consumer_offsets is what the coordinator loads and decodes:
    Kafka refuses appends to internal topics, and so does odradek."""
    with WireClient(broker.bootstrap) as client:
        (found,) = find_coordinator(client, 4, ["bomb-group"])  # creates __consumer_offsets
        assert found[-1] == ErrorCode.none
        data = raw_batch(bomb(b.ZSTD, 64 * MiB), b.ZSTD, timestamp=now_ms())
        for partition in (0, 7):
            refused = produce(client, "__consumer_offsets", partition, data)
            assert refused.error_code == ErrorCode.invalid_topic_exception, refused


def test_list_offsets_does_not_open_a_stored_bomb(broker: BrokerProcess) -> None:
    """A ``producer`` topic stores a bomb unopened; ListOffsets by timestamp and
    MAX_TIMESTAMP answer with the batch's offset instead of expanding it."""
    stamp = now_ms()
    with WireClient(broker.bootstrap) as client:
        topic = make_topic(client, "stored-bomb")
        for value in (b"before", b"after"):
            records = [Record(0, stamp - 1000, None, value)]
            assert produce(client, topic, 0, encode_batch(records)).error_code == ErrorCode.none
            if value == b"before":
                data = raw_batch(bomb(b.ZSTD, 512 * MiB), b.ZSTD, timestamp=stamp)
                assert produce(client, topic, 0, data).base_offset == 1
        baseline = _status(_pid(broker), "VmHWM")
        by_time = list_offset(client, topic, 0, stamp - 10)
        assert (by_time.error_code, by_time.offset, by_time.timestamp) == (ErrorCode.none, 1, stamp)
        latest_time = list_offset(client, topic, 0, -3)  # MAX_TIMESTAMP (KIP-734)
        assert (latest_time.offset, latest_time.timestamp) == (1, stamp)
    growth = _status(_pid(broker), "VmHWM") - baseline
    assert growth < 100 * MiB, f"peak RSS grew by {growth / MiB:.0f} MiB"


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_librdkafka_batches_convert(broker: BrokerProcess, codec: str) -> None:
    """Real client batches (librdkafka's framing and record encoding) pass the record
    framing check and are stored in the topic's codec, every record intact."""
    from confluent_kafka import Producer

    target = "gzip" if codec == "zstd" else "zstd"
    values = [f"{codec}-{i}-".encode() * (i % 50 + 1) for i in range(3000)]
    with WireClient(broker.bootstrap) as client:
        topic = make_topic(client, f"rdkafka-{codec}", configs={"compression.type": target})
        errors: list[object] = []
        producer = Producer(
            {
                "bootstrap.servers": broker.bootstrap,
                "compression.type": codec,
                "enable.idempotence": True,
                "linger.ms": 20,
            }
        )
        for i, value in enumerate(values):
            producer.produce(
                topic,
                value=value,
                key=str(i).encode(),
                headers=[("h", b"v")] if i % 7 == 0 else None,
                on_delivery=lambda err, _msg: errors.append(err) if err else None,
            )
        assert producer.flush(30) == 0
        assert errors == []
        stored = read_all(client, topic, 0)
        assert [r.value for r in stored] == values
        assert [r.headers for r in stored[:8:7]] == [(Header("h", b"v"),), (Header("h", b"v"),)]
        data = fetch(client, topic, 0, 0)
        first = next(decode_batches(data.records or b""))
        assert first.header.compression == b.COMPRESSION_BY_NAME[target]


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_kafka_python_batches_convert(broker: BrokerProcess, codec: str) -> None:
    """kafka-python writes snappy in xerial framing and lz4 with its own frame
    settings, as the Java client does: those convert too."""
    from kafka import KafkaProducer

    target = "gzip" if codec == "zstd" else "zstd"
    values = [f"{codec}-{i}-".encode() * (i % 50 + 1) for i in range(2000)]
    with WireClient(broker.bootstrap) as client:
        topic = make_topic(client, f"kafka-python-{codec}", configs={"compression.type": target})
        producer = KafkaProducer(
            bootstrap_servers=broker.bootstrap,
            compression_type=codec,
            linger_ms=20,
            batch_size=256 * 1024,
            request_timeout_ms=30_000,
        )
        try:
            futures = [producer.send(topic, value=v, partition=0) for v in values]
            producer.flush(30)
            for future in futures:
                future.get(30)
        finally:
            producer.close(timeout=10)
        assert [r.value for r in read_all(client, topic, 0)] == values
