"""Real logs for the fetcher's tests: a follower wrapping a storage Log, and a leader
that answers the fetcher's requests from another Log through the real wire codec.

``FollowerReplica`` is the ``FollowerLog`` a Partition will be, reduced to its log.
``LeaderReplica`` answers Fetch as Kafka's leader does for a follower (fencing by
current_leader_epoch, ``diverging_epoch`` when the follower's last fetched epoch ends
earlier on the leader or is unknown to it, OFFSET_OUT_OF_RANGE outside
[log start, log end], whole batches up to partition_max_bytes), encodes the answer with
``encode_fetch_response`` and parses it back with ``parse_fetch_response``, so the core
sees exactly what it would see from a socket; ListOffsets answers LATEST / EARLIEST.
"""

from __future__ import annotations

import datetime
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType

from odradek.protocol.build import make
from odradek.protocol.fetch_codec import (
    PartitionResult,
    RawFetchResponse,
    TopicResult,
    encode_fetch_response,
    parse_fetch_response,
)
from odradek.records.codec import Record, encode_batch
from odradek.records.file_range import FileRange
from odradek.replica.fetcher_state import ApplyResult, FetcherCore, RequestPlan
from odradek.storage.log import Log
from odradek.storage.log_config import LogConfig
from odradek.storage.log_loader import open_log

TOPIC = "t"
TOPIC_ID = uuid.UUID(int=7)
TP = (TOPIC, 0)


class FollowerReplica:
    """A ``FollowerLog`` over a real Log (what replica-core's Partition does, minus the rest)."""

    def __init__(self, log: Log, topic: str = TOPIC, index: int = 0) -> None:
        self.log = log
        self.topic = topic
        self.index = index
        self.leader_epoch = 0
        self.truncations: list[int] = []

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    def latest_epoch(self) -> int | None:
        return self.log.latest_epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self.log.end_offset_for_epoch(epoch)

    def append_as_follower(self, records: bytes | memoryview) -> None:
        self.log.append_as_follower(records)

    def truncate_to(self, offset: int) -> None:
        self.truncations.append(offset)
        self.log.truncate_to(offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.truncations.append(offset)
        self.log.truncate_fully_and_start_at(offset)

    def update_follower_high_watermark(self, leader_high_watermark: int) -> None:
        self.log.high_watermark = min(leader_high_watermark, self.log.log_end_offset)

    def update_follower_log_start_offset(self, leader_log_start_offset: int) -> None:
        if self.log.log_start_offset < leader_log_start_offset <= self.log.high_watermark:
            self.log.increment_log_start_offset(leader_log_start_offset)


def new_log(directory: Path, clock: Callable[[], int], **config: Any) -> Log:
    config.setdefault("retention_ms", -1)
    log, _ = open_log(directory, LogConfig(**config), clock=clock)
    return log


_counter = [0]


def batch(count: int = 3, *, size: int = 20, timestamp: int = 1_700_000_000_000) -> bytes:
    """A client batch with distinct values (so different histories hold different bytes)."""
    _counter[0] += 1
    tag = _counter[0]
    records = [Record(i, timestamp + i, f"k{tag}-{i}".encode(), b"v" * size) for i in range(count)]
    return encode_batch(records)


def materialize(parts: list[bytes | FileRange]) -> bytes:
    out = bytearray()
    for part in parts:
        if isinstance(part, FileRange):
            out += os.pread(part.fd, part.length, part.position)
        else:
            out += part
    return bytes(out)


class LeaderReplica:
    """Answers a fetcher's requests from a real leader Log, in ``epoch``."""

    def __init__(self, log: Log, epoch: int, topic: str = TOPIC) -> None:
        self.log = log
        self.epoch = epoch
        self.topic = topic
        self.high_watermark: int | None = None  # None: the log end (every follower caught up)
        self.errors: dict[int, str] = {}  # partition -> error to answer instead
        # KIP-405: where the leader's local log starts (None: its log start); a fetch
        # below it is answered OFFSET_MOVED_TO_TIERED_STORAGE
        self.local_start: int | None = None
        self.requests: list[Any] = []

    def become_leader(self, epoch: int) -> None:
        """As Kafka: the new epoch starts at the log end even before a batch is written."""
        self.epoch = epoch
        self.log.epoch_cache.assign(epoch, self.log.log_end_offset)

    def append(self, count: int = 1, records: int = 3) -> None:
        for _ in range(count):
            self.log.append_as_leader(batch(records), self.epoch)

    def _partition(self, request: Any, partition: Any) -> PartitionResult:
        log = self.log
        index = int(partition.partition)
        forced = self.errors.get(index)
        if forced is not None:
            return PartitionResult(index, ErrorCode[forced.lower()].value)
        current = int(partition.current_leader_epoch)
        if current >= 0 and current < self.epoch:
            return PartitionResult(index, ErrorCode.fenced_leader_epoch.value)
        if current > self.epoch:
            return PartitionResult(index, ErrorCode.unknown_leader_epoch.value)
        hw = log.log_end_offset if self.high_watermark is None else self.high_watermark
        log.high_watermark = hw
        offset = int(partition.fetch_offset)
        last_epoch = int(partition.last_fetched_epoch)
        result = PartitionResult(
            index, 0, log.high_watermark, log.high_watermark, log.log_start_offset
        )
        if last_epoch >= 0:
            epoch, end = log.end_offset_for_epoch(last_epoch)
            if epoch < last_epoch or end < offset:
                result.diverging_epoch = (epoch, end)
                return result
        if self.local_start is not None and log.log_start_offset <= offset < self.local_start:
            return PartitionResult(index, ErrorCode.offset_moved_to_tiered_storage.value)
        if not log.log_start_offset <= offset <= log.log_end_offset:
            return PartitionResult(index, ErrorCode.offset_out_of_range.value)
        read = log.read(offset, int(partition.partition_max_bytes))
        result.ranges = read.ranges
        return result

    def fetch_frame(self, request: Any, version: int, correlation_id: int) -> bytes:
        """The whole FetchResponse frame (correlation id first) as a broker sends it."""
        self.requests.append(request)
        topics = []
        for topic in request.topics:
            name = getattr(topic, "topic", None) or self.topic
            partitions = [self._partition(request, p) for p in topic.partitions]
            # v13+ asks by id and is answered by the same id (the encoder sends it then)
            topics.append(TopicResult(name, partitions, getattr(topic, "topic_id", None)))
        return materialize(encode_fetch_response(version, correlation_id, topics))

    def fetch(self, plan: RequestPlan) -> RawFetchResponse:
        frame = self.fetch_frame(plan.request, plan.version, 99)
        return parse_fetch_response(frame, plan.version)

    def list_offsets(self, plan: RequestPlan) -> Any:
        return self.list_offsets_body(plan.request, plan.version)

    def list_offsets_body(self, request: Any, version: int) -> Any:
        module = load_payload_module(2, version, EntityType.response)
        topics = []
        for topic in request.topics:
            partitions = []
            for p in topic.partitions:
                forced = self.errors.get(int(p.partition_index))
                if forced is not None:
                    code = ErrorCode[forced.lower()]
                    offset = -1
                else:
                    code = ErrorCode.none
                    latest = int(p.timestamp) == -1
                    offset = self.log.log_end_offset if latest else self.log.log_start_offset
                    if int(p.timestamp) == -4 and self.local_start is not None:
                        offset = self.local_start  # EARLIEST_LOCAL
                partitions.append(
                    make(
                        module.ListOffsetsPartitionResponse,
                        partition_index=p.partition_index,
                        error_code=code,
                        timestamp=-1,
                        offset=offset,
                        leader_epoch=self.epoch,
                    )
                )
            topics.append(
                make(module.ListOffsetsTopicResponse, name=topic.name, partitions=tuple(partitions))
            )
        return make(
            module.ListOffsetsResponse,
            throttle_time=datetime.timedelta(0),
            topics=tuple(topics),
        )


def step(core: FetcherCore, leader: LeaderReplica, version: int = 12) -> ApplyResult | None:
    """One request/response round, as the asyncio adapter runs it (offsets first)."""
    plan = core.build_list_offsets(7)
    if plan is not None:
        return core.apply_list_offsets(plan, leader.list_offsets(plan))
    plan = core.build_fetch(version, broker_epoch=5)
    if plan is None:
        return None
    return core.apply_fetch(plan, leader.fetch(plan))


def catch_up(
    core: FetcherCore,
    leader: LeaderReplica,
    follower: FollowerReplica,
    rounds: int = 500,
    version: int = 12,
) -> int:
    """Rounds until the follower's log end equals the leader's and a fetch brings nothing."""
    for done in range(1, rounds + 1):
        result = step(core, leader, version)
        if (
            result is not None
            and not result.appended_bytes
            and not result.truncated
            and not result.errors
            and follower.log_end_offset == leader.log.log_end_offset
        ):
            return done
    raise AssertionError(f"no catch-up in {rounds} rounds: {core.partitions}")


def log_bytes(log: Log) -> dict[str, bytes]:
    """Every segment file's name and content (what byte-identical replicas share)."""
    log.flush()
    return {segment.log_path.name: segment.log_path.read_bytes() for segment in log.segments}


def batches_from(log: Log, offset: int) -> list[bytes]:
    return list(log.read_batches(offset))
