"""Shared pieces of the interop tests: the records every client writes and reads back,
the topic a broker stores them in, and a look at the batches as they lie on disk.

How this works and why: each client test produces the same kind of records — binary
keys and values, null and empty keys and values, duplicate header keys, None header
values, explicit CreateTime timestamps — reads them back and compares them exactly, per
partition and in offset order. ``stored_batches`` then reads the partition's segment
file the broker wrote (it is in the page cache) and parses the v2 batch headers, so a
test can check what actually reached the log: compression codec, producer id,
timestamp type.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from odradek.records.batch import COMPRESSION_BY_NAME, BatchHeader, iter_batches
from odradek.server.handlers import supported_versions

# A CreateTime far in the past: brokers accept any age by default
# (message.timestamp.before.max.ms = Long.MAX), so the value must come back unchanged.
BASE_TIMESTAMP = 1_600_000_000_000
CLIENT_TIMEOUT_S = 20.0
FIND_COORDINATOR_KEY = 10
DELETE_TOPICS_KEY = 20
DESCRIBE_CONFIGS_KEY = 32

Headers = list[tuple[str, bytes | None]]


@dataclass(frozen=True)
class Sample:
    partition: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp: int


def sample_records(
    partitions: int, per_partition: int, *, none_header_values: bool = True
) -> list[Sample]:
    """Records covering the awkward cases, spread over ``partitions`` partitions.

    Values are long and repetitive enough that every codec really compresses them
    (librdkafka sends a batch uncompressed when compression would not shrink it).
    """
    records = []
    for i in range(partitions * per_partition):
        partition = i % partitions
        kind = i % 6
        key: bytes | None = f"key-{i}".encode()
        value: bytes | None = (f"value-{i}-" * 40).encode()
        if kind == 1:
            key = None
        elif kind == 2:
            value = None
        elif kind == 3:
            key, value = b"", b""
        elif kind == 4:
            key, value = bytes(range(256)), bytes(range(256)) * 8
        headers: Headers = [("dup", b"first"), ("dup", b"second"), ("empty", b"")]
        if kind % 2 == 0:
            headers.append(("bin", bytes([i % 256, 0, 255])))
        if none_header_values and kind in (0, 5):
            headers.append(("none", None))
        if kind == 5:
            headers = []
        records.append(Sample(partition, key, value, headers, BASE_TIMESTAMP + i * 1000))
    return records


def by_partition(records: list[Sample]) -> dict[int, list[Sample]]:
    out: dict[int, list[Sample]] = {}
    for record in records:
        out.setdefault(record.partition, []).append(record)
    return out


def assert_same_records(received: list[Any], records: list[Sample]) -> None:
    """Records a Python client consumed (``.partition/.offset/.key/.value/.headers/
    .timestamp_type/.timestamp`` attributes, as kafka-python's and aiokafka's have) are
    exactly ``records``: per partition, in order, from offset 0, CreateTime."""
    got: dict[int, list[Any]] = {}
    for record in received:
        got.setdefault(record.partition, []).append(record)
    for partition, wanted in by_partition(records).items():
        have = got.pop(partition)
        assert [r.offset for r in have] == list(range(len(wanted)))
        assert [(r.key, r.value) for r in have] == [(w.key, w.value) for w in wanted]
        assert [list(r.headers) for r in have] == [w.headers for w in wanted]
        assert [(r.timestamp_type, r.timestamp) for r in have] == [(0, w.timestamp) for w in wanted]
    assert not got


def stored_batches(data_dir: Path, topic: str, partition: int) -> list[BatchHeader]:
    """Headers of every batch in the partition's segment files, in offset order."""
    directory = data_dir / f"{topic}-{partition}"
    headers: list[BatchHeader] = []
    for segment in sorted(directory.glob("*.log")):
        headers.extend(iter_batches(segment.read_bytes()))
    return headers


def codec(name: str) -> int:
    return COMPRESSION_BY_NAME[name]


def broker_supports(api_key: int) -> bool:
    """Whether this checkout's broker advertises ``api_key`` (the handler registry)."""
    return api_key in supported_versions()


T = TypeVar("T")


def wait_until(
    probe: Callable[[], T | None], timeout_s: float = CLIENT_TIMEOUT_S, what: str = ""
) -> T:
    """Poll ``probe`` until it returns something not None; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = probe()
        if result is not None:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what or probe}")
        time.sleep(0.05)
