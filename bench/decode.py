"""Decode benchmark: what the bounds pre-check (odradek/protocol/bounds.py) adds to decoding.

Run: ``make bench`` (every bench script) or ``.venv/bin/python bench/decode.py [--quick]``.

What is measured, and how: every request (and, for the client, Fetch response) frame
below is decoded by kio's native readers (header, then body) alone, and by the bounds
check followed by the same readers, which is what ``decode_request`` and the client
connection do. Both sides run in the same process on the same frame bytes, in
alternating rounds (which goes first flips every round); each round times enough
calls to last ~20 ms, and the median per-call time over the rounds is reported, with
the ratio (check + kio) / kio and the check's own cost in microseconds. The frames
are what real clients send: Produce with one 16 KiB batch and with ten partitions of
1 KiB, Fetch for one partition and for 100 (ten topics of ten), in the flexible and
the legacy encodings. Record bytes are skipped by their length, so the cost does not
grow with batch size, only with the number of partitions and topics.

The checked side calls ``bounds.checked`` (what the client connection calls; the
broker's ``decode_request`` calls the same checker inline), which returns the frame
itself when every tagged field is known. The last rows carry a tagged field the
schema does not know (KIP-482: ignored): there the checked side walks the frame
twice and copies it without the tag, and the kio side decodes that copy.
"""

from __future__ import annotations

import argparse
import datetime
import io
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kio.index import load_payload_module, load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from bench._support import finish, load_average, show_load, warn_if_busy
from odradek.protocol import bounds
from odradek.protocol.build import make

ROUND_S = 0.02


def encode(entity: Any, header: Any) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(header))(buffer, header)
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


def request_frame(api_key: int, version: int, build: Callable[[Any], Any]) -> tuple[type, bytes]:
    module = load_payload_module(api_key, version, EntityType.request)
    schema = load_request_schema(api_key, version)
    header = schema.__header_schema__(
        request_api_key=api_key,
        request_api_version=version,
        correlation_id=7,
        client_id="rdkafka",
    )
    return schema, encode(build(module), header)


def produce(version: int, partitions: int, batch_bytes: int) -> tuple[type, bytes]:
    def build(m: Any) -> Any:
        data = tuple(
            make(m.PartitionProduceData, index=p, records=b"\x00" * batch_bytes)
            for p in range(partitions)
        )
        topic = make(m.TopicProduceData, name="events", partition_data=data)
        return make(
            m.ProduceRequest,
            transactional_id=None,
            acks=-1,
            timeout=datetime.timedelta(seconds=30),
            topic_data=(topic,),
        )

    return request_frame(0, version, build)


def fetch(version: int, topics: int, partitions: int) -> tuple[type, bytes]:
    def build(m: Any) -> Any:
        def partition(p: int) -> Any:
            return make(
                m.FetchPartition,
                partition=p,
                current_leader_epoch=0,
                fetch_offset=123456,
                last_fetched_epoch=-1,
                log_start_offset=-1,
                partition_max_bytes=1 << 20,
            )

        entries = tuple(
            make(
                m.FetchTopic,
                topic=f"topic-{t}",
                topic_id=uuid.UUID(int=0),
                partitions=tuple(partition(p) for p in range(partitions)),
            )
            for t in range(topics)
        )
        return make(
            m.FetchRequest,
            cluster_id=None,
            replica_id=-1,
            replica_state=None,
            max_wait=datetime.timedelta(milliseconds=500),
            min_bytes=1,
            max_bytes=50 << 20,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=entries,
            forgotten_topics_data=(),
            rack_id="",
        )

    return request_frame(1, version, build)


def fetch_response(version: int, partitions: int, records_bytes: int) -> tuple[type, bytes]:
    module = load_payload_module(1, version, EntityType.response)
    schema = load_response_schema(1, version)
    parts = tuple(
        make(
            module.PartitionData,
            partition_index=p,
            error_code=ErrorCode.none,
            high_watermark=1000,
            last_stable_offset=1000,
            log_start_offset=0,
            aborted_transactions=(),
            preferred_read_replica=-1,
            records=b"\x00" * records_bytes,
        )
        for p in range(partitions)
    )
    topic = make(module.FetchableTopicResponse, topic="events", partitions=parts)
    body = make(
        module.FetchResponse,
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        session_id=0,
        responses=(topic,),
    )
    return schema, encode(body, schema.__header_schema__(correlation_id=7))


def per_call(function: Callable[[], Any]) -> float:
    calls = 1
    while True:
        started = time.perf_counter()
        for _ in range(calls):
            function()
        elapsed = time.perf_counter() - started
        if elapsed >= ROUND_S:
            return elapsed / calls
        calls *= 2


def measure(schema: Any, frame: bytes, rounds: int) -> tuple[float, float]:
    header_schema = schema.__header_schema__
    read_header, read_body = entity_reader(header_schema), entity_reader(schema)
    known = bounds.checked(frame, schema, header_schema)  # without unknown tags

    def kio_only() -> None:
        _, size = read_header(known, 0)
        read_body(known, size)

    def checked() -> None:
        decodable = bounds.checked(frame, schema, header_schema)
        _, size = read_header(decodable, 0)
        read_body(decodable, size)

    plain, guarded = [], []
    for round_ in range(rounds + 1):
        pair = [(plain, kio_only), (guarded, checked)]
        if round_ % 2:
            pair.reverse()
        for samples, function in pair:
            seconds = per_call(function)
            if round_:  # the first round warms up
                samples.append(seconds)
    return statistics.median(plain), statistics.median(guarded)


CASES: list[tuple[str, Callable[[], tuple[type, bytes]]]] = [
    ("Produce v9, 1 partition, 16 KiB batch", lambda: produce(9, 1, 16 << 10)),
    ("Produce v9, 10 partitions of 1 KiB", lambda: produce(9, 10, 1 << 10)),
    ("Produce v7 (legacy), 10 partitions of 1 KiB", lambda: produce(7, 10, 1 << 10)),
    ("Fetch v12, 1 partition", lambda: fetch(12, 1, 1)),
    ("Fetch v12, 10 topics x 10 partitions", lambda: fetch(12, 10, 10)),
    ("Fetch v11 (legacy), 10 topics x 10 partitions", lambda: fetch(11, 10, 10)),
    ("Fetch response v12 (client), 10 x 64 KiB", lambda: fetch_response(12, 10, 64 << 10)),
    ("+ unknown tag: Fetch v12, 1 partition", lambda: unknown_tag(fetch(12, 1, 1))),
    ("+ unknown tag: Fetch v12, 10 topics x 10 partitions", lambda: unknown_tag(fetch(12, 10, 10))),
]


def unknown_tag(case: tuple[type, bytes]) -> tuple[type, bytes]:
    """The request with a tagged field 1000 (8 bytes) at top level, where its last byte
    is the zero tag count of the body (no known tag set)."""
    schema, frame = case
    assert frame[-1] == 0
    return schema, frame[:-1] + b"\x01" + bytes([0xE8, 0x07, 8]) + b"newfield"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--strict", action="store_true", help="accepted for bench/run.py")
    parser.add_argument("--verbose", action="store_true", help="accepted for bench/run.py")
    args = parser.parse_args(argv)
    rounds = 5 if args.quick else 15
    started = time.perf_counter()
    load_start = load_average()
    print(f"load average at start: {show_load(load_start)}", flush=True)
    warn_if_busy(load_start)
    print(
        f"{'frame':48} {'bytes':>8} {'kio µs':>8} {'check+kio µs':>13} {'ratio':>6} {'check µs':>9}"
    )
    for name, build in CASES:
        schema, frame = build()
        plain, guarded = measure(schema, frame, rounds)
        print(
            f"{name:48} {len(frame):8d} {plain * 1e6:8.2f} {guarded * 1e6:13.2f} "
            f"{guarded / plain:6.2f} {(guarded - plain) * 1e6:9.2f}",
            flush=True,
        )
    return finish("decode", started, [], 0, args.strict)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
