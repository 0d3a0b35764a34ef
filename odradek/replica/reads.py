"""What a partition is asked to read, what it answers, and ListOffsets lookups.

How this works and why: the fetch handler decodes a request into ``FetchPosition``s
(one per partition) and gets ``PartitionRead``s back from the replica layer — error,
watermarks, the byte ranges to ``sendfile`` and, for a fetcher whose last fetched
epoch does not match the leader's history, the diverging epoch, or (KIP-392) the
follower a consumer should read from instead — so the handler never touches a log
(review step 3). The ListOffsets lookups (earliest, latest,
max-timestamp, by timestamp) are plain functions over a ``Log`` and the partition's
visible end, which ``Partition.offset_for_timestamp`` calls after its epoch and
leadership checks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from odradek.records.codec import decode_batch
from odradek.records.compression import STORED_EXPANSION, ExpansionLimitError
from odradek.records.errors import CorruptRecordError
from odradek.records.file_range import RecordRange
from odradek.storage.log import Log
from odradek.storage.remote.metadata import TopicIdPartition

LATEST: Final = -1
EARLIEST: Final = -2
MAX_TIMESTAMP: Final = -3
EARLIEST_LOCAL: Final = -4
LATEST_TIERED: Final = -5
READ_UNCOMMITTED: Final = 0
READ_COMMITTED: Final = 1
NOT_FOUND: Final = (-1, -1, -1)


@dataclass(frozen=True, slots=True)
class FetchPosition:
    """One partition of a Fetch request."""

    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1  # -1: not checked (v<9 or a client that has none)
    last_fetched_epoch: int = -1  # v12+: the epoch of the fetcher's last batch, -1: none
    log_start_offset: int = -1  # a follower's own log start offset (v5+)


@dataclass(frozen=True, slots=True)
class RemoteFetch:
    """A consumer read below the local log start of a tiered partition (KIP-405): the
    fetch service completes it from remote storage, off the event loop."""

    tp: TopicIdPartition
    log: Log
    offset: int
    max_bytes: int
    min_one_batch: bool
    committed: bool = False  # read_committed: the aborted transactions too


@dataclass(slots=True)
class PartitionRead:
    """One partition's Fetch answer. ``error`` is a Kafka error name."""

    error: str = "NONE"
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    ranges: list[RecordRange] = field(default_factory=list)
    diverging_epoch: tuple[int, int] | None = None  # (epoch, end offset): truncate there
    preferred_read_replica: int = -1  # v11+, KIP-392: read from this follower instead
    # read_committed only: (producer id, first offset) of each aborted transaction the
    # records may hold; None for read_uncommitted and followers (encoded as null).
    aborted: list[tuple[int, int]] | None = None
    remote: RemoteFetch | None = None  # to be read from remote storage (fetch_service.py)

    @property
    def size(self) -> int:
        return sum(r.length for r in self.ranges)


def diverging_epoch(log: Log, position: FetchPosition) -> tuple[int, int] | None:
    """Kafka's check of a Fetch's last fetched epoch (v12+): the fetcher's log diverges
    if the leader's history has that epoch ending before the fetch offset, or knows
    only a smaller epoch; then (epoch, end offset) is where the two logs last agree.
    ValueError (OFFSET_OUT_OF_RANGE) when the leader cannot tell, or the offset is
    below its log start."""
    epoch, end_offset = log.end_offset_for_epoch(position.last_fetched_epoch)
    if epoch < 0 or end_offset < 0:
        raise ValueError(f"no end offset for the last fetched epoch {position.last_fetched_epoch}")
    if position.fetch_offset < log.log_start_offset:
        raise ValueError(f"fetch offset {position.fetch_offset} is below the log start")
    if epoch < position.last_fetched_epoch or end_offset < position.fetch_offset:
        return epoch, end_offset
    return None


def lookup_offset(
    log: Log, timestamp: int, visible_end: int, leader_epoch: int
) -> tuple[int, int, int]:
    """(timestamp, offset, leader epoch) for one ListOffsets query; ``visible_end`` is
    the HW (or LSO), above which nothing is answered. ValueError for an unknown
    special timestamp."""
    if timestamp == LATEST:
        return -1, visible_end, leader_epoch
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        # Tiered storage: EARLIEST is the remote start, EARLIEST_LOCAL the disk's.
        offset = log.log_start_offset if timestamp == EARLIEST else log.local_log_start_offset
        return -1, offset, epoch_at(log, offset, leader_epoch)
    if timestamp == LATEST_TIERED:
        highest = log.highest_offset_in_remote
        if not log.config.remote_storage_enable or highest < 0:
            return NOT_FOUND
        return -1, highest, epoch_at(log, highest, leader_epoch)
    if timestamp == MAX_TIMESTAMP:
        max_timestamp, offset = log.max_timestamp_and_offset()
        if offset < 0 or offset >= visible_end:
            return NOT_FOUND
        offset = record_with_timestamp(log, offset, max_timestamp)
        return max_timestamp, offset, epoch_at(log, offset, leader_epoch)
    if timestamp < 0:
        raise ValueError(f"unknown special timestamp {timestamp}")
    found = log.offset_for_timestamp(timestamp)
    if found is None or found[0] >= visible_end:
        return NOT_FOUND
    offset_found, timestamp_found = found
    return timestamp_found, offset_found, epoch_at(log, offset_found, leader_epoch)


def record_with_timestamp(log: Log, batch_offset: int, timestamp: int) -> int:
    """Offset of the first record carrying ``timestamp`` in the batch holding ``batch_offset``.

    Segments track the max timestamp per batch (its last offset, as Kafka's time index
    does); MAX_TIMESTAMP answers with the record itself (KIP-734, KAFKA-16310), so the
    one batch is decoded here.
    """
    for data in log.read_batches(batch_offset, batch_offset + 1):
        try:  # a bomb stored unopened, or records that do not decode: the batch's offset
            records = decode_batch(data, limit=STORED_EXPANSION * len(data)).records
        except (ExpansionLimitError, CorruptRecordError):
            return batch_offset
        for record in records:
            if record.timestamp == timestamp:
                return record.offset
    return batch_offset


def epoch_at(log: Log, offset: int, current_epoch: int) -> int:
    epoch = log.epoch_cache.epoch_for_offset(offset)
    return epoch if epoch is not None else current_epoch


@dataclass(frozen=True, slots=True)
class FetchParams:
    """A whole Fetch request, decoded: who asks, how long it may wait, what for."""

    replica_id: int  # >= 0: a follower broker; < 0: a consumer
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    topics: Sequence[tuple[str, Sequence[tuple[int, FetchPosition]]]]
    isolation_level: int = READ_UNCOMMITTED
    replica_epoch: int = -1  # the follower's broker epoch (v15+ replica_state), -1: unknown
    # A consumer's rack (v11+ rack_id, KIP-392; "" when it names none). None: a Fetch
    # older than v11, which only the leader may answer.
    client_rack: str | None = None

    @property
    def from_follower(self) -> bool:
        return self.replica_id >= 0

    @property
    def leader_only(self) -> bool:
        """Kafka's fetchOnlyLeader: a follower broker, or a consumer without client
        metadata (Fetch < v11), is answered by the leader only."""
        return self.from_follower or self.client_rack is None


FetchResults = list[tuple[str, list[tuple[int, PartitionRead]]]]
