"""Reads below the local log: whole batches of a remote segment, and its index cache.

How this works and why: once a tiered partition's old segments leave the local disk,
a consumer fetch at an offset in [log start offset, local log start offset) is served
from remote storage (KIP-405). ``read_remote`` finds the remote segment holding the
offset in the leader-epoch lineage (the epoch the local epoch cache gives for it,
then the metadata cache's ``segment_for``), looks the offset up in that segment's
offset index to get a byte position at or before the batch holding it, reads a range
of the segment from there and keeps the whole batches that end at/after the offset,
up to ``max_bytes`` (at least one batch when ``min_one_batch``, as for a local read).
A batch cut off by the end of the range is read again whole (a second range) when it
is the first one; otherwise the response stops before it. The result is bytes: the
fetch response carries them as a MemoryRange instead of a sendfile FileRange. A
read_committed read also gets the aborted transactions overlapping those batches, from
the remote ``.txnindex`` files of that segment and the ones after it, until an entry's
last stable offset proves no other can overlap (else the caller goes on with the local
log's indexes).

ListOffsets by timestamp below the local log (``find_offset_for_timestamp``): the
first remote segment whose max timestamp reaches the target is searched from its
time index's last entry below the target (every record before that entry's offset is
older), batch by batch, and the first record at/after the target answers.

Offset indexes are fetched once per segment and kept on local disk under
``<log dir>/remote-log-index-cache/`` (``RemoteIndexCache``), least recently used
first out past ``remote.log.index.file.cache.total.size.bytes``; the directory is
emptied on start (it is a cache, rebuilt on demand).

Concurrency: blocking (remote and file I/O): runs on the RemoteLogManager's reader
thread pool, never on the event loop. The index cache has its own lock.
"""

from __future__ import annotations

import bisect
import os
import shutil
import struct
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from odradek.storage.errors import OffsetOutOfRangeError
from odradek.storage.remote.metadata import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from odradek.storage.remote.metadata_manager import RemoteLogMetadataManager
from odradek.storage.remote.storage_manager import (
    IndexType,
    RemoteStorageError,
    RemoteStorageManager,
)
from odradek.storage.txn_index import AbortedTxn, decode_entries

COPY_FINISHED: Final = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
INDEX_CACHE_DIR: Final = "remote-log-index-cache"
_OFFSET_ENTRY = struct.Struct(">ii")  # relative offset, position (the .index format)
_BATCH_PREFIX = struct.Struct(">qi")  # base offset, batch length
_LAST_OFFSET_DELTA = struct.Struct(">i")
_LAST_OFFSET_DELTA_AT: Final = 23
_TIME_ENTRY = struct.Struct(">qi")  # timestamp, relative offset (the .timeindex format)
_INT64 = struct.Struct(">q")
LOG_OVERHEAD: Final = 12
MIN_READ_BYTES: Final = 64 * 1024


class RemoteIndexCache:
    """Remote segments' index files on local disk, LRU-bounded by total bytes."""

    def __init__(self, directory: Path, rsm: RemoteStorageManager, max_bytes: int) -> None:
        self.directory = directory
        self.rsm = rsm
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, int] = OrderedDict()  # file name -> size
        self._size = 0
        self._ready = False  # emptied and created on first use (not before the log
        # dir's identity is checked at startup)

    def _prepare(self) -> None:
        if not self._ready:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory.mkdir(parents=True, exist_ok=True)
            self._ready = True

    @staticmethod
    def _name(metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> str:
        return f"{metadata.start_offset:020d}_{metadata.remote_log_segment_id.id}{index_type.value}"

    def get(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        """The index's bytes: from the local copy, else fetched and kept."""
        name = self._name(metadata, index_type)
        path = self.directory / name
        with self._lock:
            self._prepare()
            if name in self._entries:
                self._entries.move_to_end(name)
                try:
                    return path.read_bytes()
                except FileNotFoundError:
                    self._size -= self._entries.pop(name)
        data = self.rsm.fetch_index(metadata, index_type)
        tmp = path.with_name(f"{name}.{threading.get_ident()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
        with self._lock:
            if name not in self._entries:
                self._entries[name] = len(data)
                self._size += len(data)
            while self._size > self.max_bytes and len(self._entries) > 1:
                old, size = self._entries.popitem(last=False)
                self._size -= size
                (self.directory / old).unlink(missing_ok=True)
        return data

    def remove(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Forget a deleted segment's indexes."""
        with self._lock:
            for index_type in IndexType:
                name = self._name(metadata, index_type)
                if name in self._entries:
                    self._size -= self._entries.pop(name)
                    (self.directory / name).unlink(missing_ok=True)

    @property
    def size(self) -> int:
        return self._size


def index_position(index: bytes, base_offset: int, offset: int) -> int:
    """The position of the largest offset index entry <= ``offset`` (0 if none)."""
    count = len(index) // _OFFSET_ENTRY.size
    found = (
        bisect.bisect_right(
            range(count),
            offset - base_offset,
            key=lambda i: _OFFSET_ENTRY.unpack_from(index, i * _OFFSET_ENTRY.size)[0],
        )
        - 1
    )
    return _OFFSET_ENTRY.unpack_from(index, found * _OFFSET_ENTRY.size)[1] if found >= 0 else 0


def _batches(data: bytes) -> list[tuple[int, int, int]]:
    """(start, size, last offset) of each batch wholly or partly in ``data``; a partial
    last batch has the size its header declares (it may pass the end)."""
    found = []
    position = 0
    while position + _LAST_OFFSET_DELTA_AT + 4 <= len(data):
        base, length = _BATCH_PREFIX.unpack_from(data, position)
        if length <= 0:
            raise RemoteStorageError(f"corrupt batch length {length} at byte {position}")
        (delta,) = _LAST_OFFSET_DELTA.unpack_from(data, position + _LAST_OFFSET_DELTA_AT)
        size = LOG_OVERHEAD + length
        found.append((position, size, base + delta))
        position += size
    return found


@dataclass(frozen=True, slots=True)
class RemoteRead:
    """What a remote read found: whole batches, and for a read_committed read the
    aborted transactions overlapping them (``complete`` False: more may be in the
    local log's transaction indexes, up to ``upper_bound``)."""

    data: bytes
    aborted: list[AbortedTxn] | None = None
    complete: bool = True
    upper_bound: int = -1


def read_remote(
    rlmm: RemoteLogMetadataManager,
    rsm: RemoteStorageManager,
    indexes: RemoteIndexCache,
    tp: TopicIdPartition,
    leader_epoch: int,
    offset: int,
    max_bytes: int,
    min_one_batch: bool,
    committed: bool = False,
) -> RemoteRead:
    """Whole batches from the one holding ``offset`` (see the module docstring), and
    when ``committed`` the aborted transactions overlapping them.

    OffsetOutOfRangeError when no remote segment of ``leader_epoch`` holds it;
    RemoteStorageError when the store fails.
    """
    metadata = rlmm.remote_log_segment_metadata(tp, leader_epoch, offset)
    if metadata is None:
        raise OffsetOutOfRangeError(f"{tp}: offset {offset} (epoch {leader_epoch}) not remote")
    data, last = _read_batches(rsm, indexes, metadata, offset, max_bytes, min_one_batch)
    if not committed or not data:
        return RemoteRead(data)
    aborted, complete = _aborted(rlmm, indexes, metadata, offset, last + 1)
    return RemoteRead(data, aborted, complete, last + 1)


def _aborted(
    rlmm: RemoteLogMetadataManager,
    indexes: RemoteIndexCache,
    first: RemoteLogSegmentMetadata,
    start: int,
    upper: int,
) -> tuple[list[AbortedTxn], bool]:
    """Aborted transactions overlapping [start, upper) from the remote transaction
    indexes of ``first`` and the segments after it (an ABORT marker may be in a later
    segment); True once an entry's last stable offset proves none is left."""
    found: list[AbortedTxn] = []
    for metadata in rlmm.list_remote_log_segments(first.topic_id_partition, (COPY_FINISHED,)):
        if metadata.end_offset < first.start_offset or metadata.txn_index_empty:
            continue
        entries, _ = decode_entries(indexes.get(metadata, IndexType.TRANSACTION))
        for entry in entries:
            if entry.last_offset >= start and entry.first_offset < upper:
                found.append(entry)
            if entry.last_stable_offset >= upper:
                return found, True
    return found, False


def _read_batches(
    rsm: RemoteStorageManager,
    indexes: RemoteIndexCache,
    metadata: RemoteLogSegmentMetadata,
    offset: int,
    max_bytes: int,
    min_one_batch: bool,
) -> tuple[bytes, int]:
    """The batches' bytes and the last offset they hold."""
    index = indexes.get(metadata, IndexType.OFFSET)
    start = index_position(index, metadata.start_offset, offset)
    want = max(max_bytes, MIN_READ_BYTES)
    data = rsm.fetch_log_segment(metadata, start, start + want - 1)
    out = bytearray()
    budget = max_bytes
    last_offset = -1
    for position, size, last in _batches(data):
        if last < offset:
            continue
        first = not out
        if size > budget and not (first and min_one_batch):
            break
        if position + size > len(data):  # cut off by the range
            if not first:
                break
            whole = rsm.fetch_log_segment(metadata, start + position, start + position + size - 1)
            if len(whole) < size:
                raise RemoteStorageError(f"{metadata.remote_log_segment_id}: truncated batch")
            return whole, last
        out += data[position : position + size]
        budget -= size
        last_offset = last
    return bytes(out), last_offset


def find_offset_for_timestamp(
    rlmm: RemoteLogMetadataManager,
    rsm: RemoteStorageManager,
    indexes: RemoteIndexCache,
    tp: TopicIdPartition,
    timestamp: int,
    start_offset: int,
) -> tuple[int, int] | None:
    """(offset, timestamp) of the first remote record >= ``start_offset`` with a
    timestamp >= ``timestamp``, or None (then the local log answers)."""
    for metadata in rlmm.list_remote_log_segments(tp, (COPY_FINISHED,)):
        if metadata.end_offset < start_offset or metadata.max_timestamp_ms < timestamp:
            continue
        found = _search_segment(rsm, indexes, metadata, timestamp, start_offset)
        if found is not None:
            return found
    return None


def _search_segment(
    rsm: RemoteStorageManager,
    indexes: RemoteIndexCache,
    metadata: RemoteLogSegmentMetadata,
    timestamp: int,
    start_offset: int,
) -> tuple[int, int] | None:
    from odradek.records.batch import MAX_TIMESTAMP_POSITION, parse_header
    from odradek.records.codec import iter_records
    from odradek.records.compression import STORED_EXPANSION, ExpansionLimitError
    from odradek.records.errors import CorruptRecordError

    base = metadata.start_offset
    indexed = base
    time_index = indexes.get(metadata, IndexType.TIMESTAMP)
    for entry_timestamp, relative in _TIME_ENTRY.iter_unpack(
        time_index[: len(time_index) - len(time_index) % _TIME_ENTRY.size]
    ):
        if entry_timestamp >= timestamp:
            break
        indexed = base + relative
    indexed = max(indexed, start_offset)
    position = index_position(indexes.get(metadata, IndexType.OFFSET), base, indexed)
    while position < metadata.segment_size_in_bytes:
        chunk = rsm.fetch_log_segment(metadata, position, position + MIN_READ_BYTES - 1)
        batches = _batches(chunk)
        if not batches:
            return None
        for at, size, last in batches:
            if at + size > len(chunk):
                if at == 0:  # one batch larger than the range: read it whole
                    chunk = rsm.fetch_log_segment(metadata, position, position + size - 1)
                    if len(chunk) < size:
                        raise RemoteStorageError(f"{metadata.remote_log_segment_id}: truncated")
                else:
                    break
            (max_timestamp,) = _INT64.unpack_from(chunk, at + MAX_TIMESTAMP_POSITION)
            if last < start_offset or max_timestamp < timestamp:
                continue
            data = chunk[at : at + size]
            header = parse_header(data)
            try:
                for record in iter_records(data, header, STORED_EXPANSION * size):
                    if record.offset >= start_offset and record.timestamp >= timestamp:
                        return record.offset, record.timestamp
            except (ExpansionLimitError, CorruptRecordError):
                return max(header.base_offset, start_offset), header.max_timestamp
        consumed = sum(size for at, size, _ in batches if at + size <= len(chunk))
        if consumed == 0:
            return None
        position += consumed
    return None
