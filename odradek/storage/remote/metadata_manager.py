"""RemoteLogMetadataManager: where a broker records and looks up its remote segments.

How this works and why: KIP-405 splits the metadata of remote segments (which exist,
in which state) from their bytes (storage_manager.py). The RemoteLogManager
(log_manager.py) publishes every step of a segment's life through this interface and
the fetch path asks it which remote segment holds an offset. Kafka's implementation
writes the events to the internal topic ``__remote_log_metadata`` and every broker
rebuilds its view by consuming it; the interface below is the seam for that.

``FileRemoteLogMetadataManager`` is the SINGLE-NODE STAND-IN
(``remote.log.metadata.manager.class.name=file``); the default is the topic-based
manager (topic_metadata_manager.py), which every replica shares. It keeps the same
events, in Kafka's record layout (metadata_records.py), in one append-only file per partition under
``<log dir>/remote-log-metadata/<topic>-<partition>-<topic id>.rlmm``; each frame is
``length int32 | crc32 int32 | value``. Opening a partition replays its file into a
RemoteLogMetadataCache (metadata_cache.py, which checks the state machine); a torn
or corrupt tail (a crash mid-append) is cut off at the last whole frame, which loses
at most the last event: a COPY_SEGMENT_FINISHED lost that way leaves the segment
COPY_SEGMENT_STARTED, and the copier deletes such leftovers and copies again. Only
this broker sees the file, so a follower that becomes leader does not know what the
old leader copied — the reason this is a stand-in.

Every append is fsynced before it returns: an event the copier acted on is durable.

Concurrency: every method may be called from any thread (the copier runs on worker
threads, remote reads on the reader pool); one lock guards the caches and files.
Methods do file I/O, so callers on the event loop run them in an executor.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import zlib
from collections.abc import Collection
from pathlib import Path
from typing import Final, Protocol

from odradek.storage.errors import StorageError
from odradek.storage.remote.metadata import (
    RemoteLogMetadata,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from odradek.storage.remote.metadata_cache import RemoteLogMetadataCache
from odradek.storage.remote.metadata_records import (
    RemoteLogMetadataFormatError,
    deserialize,
    serialize,
)

logger = logging.getLogger(__name__)

METADATA_DIR: Final = "remote-log-metadata"
_FRAME = struct.Struct(">iI")
_MAX_FRAME: Final = 16 * 1024 * 1024


class RemoteLogMetadataManager(Protocol):
    """What the RemoteLogManager and the remote read path need (Kafka's names)."""

    def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None: ...

    def update_remote_log_segment_metadata(
        self, update: RemoteLogSegmentMetadataUpdate
    ) -> None: ...

    def remote_log_segment_metadata(
        self, tp: TopicIdPartition, leader_epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None: ...

    def list_remote_log_segments(
        self, tp: TopicIdPartition, states: Collection[RemoteLogSegmentState] | None = None
    ) -> list[RemoteLogSegmentMetadata]: ...

    def highest_offset_for_epoch(self, tp: TopicIdPartition, leader_epoch: int) -> int | None: ...

    def remove_partition(self, tp: TopicIdPartition) -> None:
        """Forget a deleted partition once its segments are deleted (the stand-in drops
        its file; the topic-based manager will publish DELETE_PARTITION_* events)."""
        ...

    def close(self) -> None: ...

    async def ready(self, tp: TopicIdPartition) -> None:
        """Wait until the metadata of ``tp`` is known up to now (the topic-based manager
        reads its metadata partition to its end; the file store knows it already)."""
        ...

    def start(self) -> None:
        """Start background work on the running loop (the topic-based consumer)."""
        ...

    async def stop(self) -> None:
        """Stop what ``start`` started (on the loop, before ``close``)."""
        ...


def _file_name(tp: TopicIdPartition) -> str:
    return f"{tp.topic}-{tp.partition}-{tp.topic_id}.rlmm"


class FileRemoteLogMetadataManager:
    """The single-node stand-in (see the module docstring): one event file per partition."""

    def __init__(self, directory: Path, *, fsync: bool = True) -> None:
        self.directory = directory
        self.fsync = fsync
        self._lock = threading.Lock()
        self._caches: dict[TopicIdPartition, RemoteLogMetadataCache] = {}
        self._fds: dict[TopicIdPartition, int] = {}

    # -- writing -------------------------------------------------------------------------
    def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None:
        if metadata.state != RemoteLogSegmentState.COPY_SEGMENT_STARTED:
            raise ValueError(f"{metadata.remote_log_segment_id}: a new segment must be started")
        self._publish(metadata.topic_id_partition, metadata)

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        self._publish(update.topic_id_partition, update)

    def _publish(self, tp: TopicIdPartition, message: RemoteLogMetadata) -> None:
        value = serialize(message)
        with self._lock:
            cache = self._cache(tp)
            cache.apply(message)  # the state machine checks it before it is written
            fd = self._fds[tp]
            os.write(fd, _FRAME.pack(len(value), zlib.crc32(value)) + value)
            if self.fsync:
                os.fsync(fd)

    # -- reading -------------------------------------------------------------------------
    def remote_log_segment_metadata(
        self, tp: TopicIdPartition, leader_epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        with self._lock:
            return self._cache(tp).segment_for(leader_epoch, offset)

    def list_remote_log_segments(
        self, tp: TopicIdPartition, states: Collection[RemoteLogSegmentState] | None = None
    ) -> list[RemoteLogSegmentMetadata]:
        with self._lock:
            return self._cache(tp).list_segments(states=states)

    def highest_offset_for_epoch(self, tp: TopicIdPartition, leader_epoch: int) -> int | None:
        with self._lock:
            return self._cache(tp).highest_offset_for_epoch(leader_epoch)

    # -- files ---------------------------------------------------------------------------
    def _cache(self, tp: TopicIdPartition) -> RemoteLogMetadataCache:
        """The partition's cache, replaying its file the first time (lock held)."""
        cache = self._caches.get(tp)
        if cache is not None:
            return cache
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / _file_name(tp)
        cache = RemoteLogMetadataCache(tp)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            data = os.pread(fd, os.fstat(fd).st_size, 0)
            good = _replay(path, data, cache)
            if good < len(data):
                logger.warning(
                    "%s: dropping %d bytes of a torn or corrupt tail", path, len(data) - good
                )
                os.ftruncate(fd, good)
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            raise
        self._caches[tp] = cache
        self._fds[tp] = fd
        return cache

    async def ready(self, tp: TopicIdPartition) -> None:
        return None

    def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    def remove_partition(self, tp: TopicIdPartition) -> None:
        with self._lock:
            fd = self._fds.pop(tp, None)
            if fd is not None:
                os.close(fd)
            self._caches.pop(tp, None)
            (self.directory / _file_name(tp)).unlink(missing_ok=True)

    def close(self) -> None:
        with self._lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()
            self._caches.clear()


def _replay(path: Path, data: bytes, cache: RemoteLogMetadataCache) -> int:
    """Apply the whole frames of ``data``; returns where the good prefix ends."""
    position = 0
    while position + _FRAME.size <= len(data):
        length, crc = _FRAME.unpack_from(data, position)
        start = position + _FRAME.size
        if not 0 <= length <= _MAX_FRAME or start + length > len(data):
            break
        value = data[start : start + length]
        if zlib.crc32(value) != crc:
            break
        try:
            cache.apply(deserialize(value))
        except (RemoteLogMetadataFormatError, StorageError, ValueError) as error:
            logger.warning("%s: bad event at byte %d: %s", path, position, error)
            break
        position = start + length
    return position
