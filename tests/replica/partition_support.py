"""Helpers for the Partition tests: logs in a directory, batches, reading what a
leader hands a fetcher (the bytes of its FileRanges, as sendfile would send them)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from odradek.records.codec import decode_batches, encode_batch, new_records
from odradek.replica.partition import Partition
from odradek.replica.reads import FetchPosition, PartitionRead
from odradek.storage.log import Log
from odradek.storage.log_config import LogConfig
from odradek.storage.log_loader import open_log

TOPIC_ID = str(uuid.UUID(int=7))
LEADER, F2, F3 = 1, 2, 3
REPLICAS = (LEADER, F2, F3)


def new_log(path: Path, config: LogConfig | None = None) -> Log:
    log, _ = open_log(path, config or LogConfig())
    return log


def batch(*values: bytes, timestamp: int | None = None) -> bytes:
    return encode_batch(new_records(list(values), timestamp=timestamp))


def partition_on(log: Log, local_id: int = LEADER, lag_ms: int = 10_000) -> Partition:
    return Partition("t", 0, TOPIC_ID, log, local_id, lag_time_max_ms=lag_ms)


def records_bytes(read: PartitionRead) -> bytes:
    return b"".join(os.pread(r.fd, r.length, r.position) for r in read.ranges)


def read_values(read: PartitionRead) -> list[bytes | None]:
    """The record values a read returns (decoded: a byte count could match a CRC)."""
    return [r.value for b in decode_batches(records_bytes(read)) for r in b.records]


def follower_fetch(
    partition: Partition,
    replica: int,
    offset: int,
    now_ms: int,
    *,
    last_fetched_epoch: int = -1,
    broker_epoch: int = 10,
) -> PartitionRead:
    position = FetchPosition(offset, 1 << 20, last_fetched_epoch=last_fetched_epoch)
    return partition.read(
        position, replica, broker_epoch, now_ms, max_bytes=1 << 20, min_one_batch=True
    )


def consumer_fetch(partition: Partition, offset: int, now_ms: int = 0) -> PartitionRead:
    position = FetchPosition(offset, 1 << 20)
    return partition.read(position, -1, -1, now_ms, max_bytes=1 << 20, min_one_batch=True)
