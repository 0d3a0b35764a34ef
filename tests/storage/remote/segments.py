"""Real segments for the remote storage tests, written with odradek's own LogSegment."""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path

from odradek.records.batch import parse_header
from odradek.records.codec import Record, encode_batch
from odradek.storage.checkpoint import checkpoint_bytes
from odradek.storage.epoch_cache import LEADER_EPOCH_CHECKPOINT_VERSION
from odradek.storage.producer_state import snapshot_path
from odradek.storage.remote.metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    TopicIdPartition,
)
from odradek.storage.remote.storage_manager import LogSegmentData
from odradek.storage.segment import BatchMeta, LogSegment
from odradek.storage.txn_index import AbortedTxn

T0 = 1_700_000_000_000
TP = TopicIdPartition(uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8"), "tiered.orders", 2)


@dataclass(frozen=True)
class LocalSegment:
    data: LogSegmentData
    base_offset: int
    next_offset: int
    size: int

    def metadata(self) -> RemoteLogSegmentMetadata:
        """Metadata of a fresh copy attempt (a new segment uuid each time)."""
        return RemoteLogSegmentMetadata(
            RemoteLogSegmentId.generate(TP),
            self.base_offset,
            self.next_offset - 1,
            T0,
            1,
            T0,
            self.size,
            {4: self.base_offset, 5: self.base_offset + 100}
            if self.next_offset > self.base_offset + 100
            else {4: self.base_offset},
            txn_index_empty=self.data.transaction_index is None,
        )


def write_segment(
    directory: Path, *, base: int = 1000, target_bytes: int = 3 * 1024 * 1024, txn: bool = True
) -> LocalSegment:
    """A closed segment of about ``target_bytes`` of random records, with both indexes,
    a producer snapshot, leader epochs and (if ``txn``) a transaction index."""
    directory.mkdir(parents=True, exist_ok=True)
    segment = LogSegment(
        directory, base, index_interval_bytes=4096, max_index_bytes=10_485_760, created_ms=T0
    )
    offset = base
    while segment.size < target_bytes:
        records = [Record(offset + i, T0 + offset + i, b"k", os.urandom(700)) for i in range(50)]
        data = encode_batch(records, base_offset=offset, partition_leader_epoch=4)
        header = parse_header(data)
        meta = BatchMeta(offset, header.last_offset, header.max_timestamp, header.size)
        segment.append([meta], [data], len(data))
        offset += 50
    if txn:
        segment.txn_index.append(AbortedTxn(7, base + 50, base + 120, base + 121))
        segment.txn_index.append(AbortedTxn(8, base + 200, base + 260, base + 261))
    segment.on_become_inactive()
    segment.write_indexes()
    segment.fsync()
    next_offset, size = segment.next_offset, segment.size
    log_path = segment.log_path
    index_path, time_path = segment.offset_index.path, segment.time_index.path
    txn_path = segment.txn_index.path
    segment.close()
    snapshot = snapshot_path(directory, next_offset)
    snapshot.write_bytes(os.urandom(300))
    epochs = checkpoint_bytes(LEADER_EPOCH_CHECKPOINT_VERSION, [f"4 {base}", f"5 {base + 100}"])
    assert txn_path.exists() == txn
    return LocalSegment(
        LogSegmentData(
            log_path, index_path, time_path, txn_path if txn else None, snapshot, epochs
        ),
        base,
        next_offset,
        size,
    )
