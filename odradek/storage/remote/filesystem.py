"""A RemoteStorageManager over a local (or mounted) directory: the default backend.

How this works and why: the simplest "remote" store is another directory — a
different disk, an NFS mount, or a temporary directory in tests — and it exercises
the whole tiered-storage path with no service to run. Layout (storage_manager.py's
``segment_key``)::

    <dir>/<topic>-<partition>-<topic id>/<20-digit start offset>-<segment uuid>.log
                                                         ... .index, .timeindex,
                               .txnindex (if any), .snapshot, .leader-epoch-checkpoint

Copies are atomic: each file is streamed (1 MiB at a time, never whole) into
``<name>.tmp``, fsynced, then all are renamed into place with the ``.log`` last and
the directory fsynced. The ``.log`` is the commit mark: a segment without one does not
exist for fetches, so a copy cut short by a crash is never visible, only leftovers that
``delete_log_segment_data`` (which removes ``.log`` first) cleans up. A failed copy
removes what it wrote. Reads use ``os.pread`` on the range asked for; deleting files
that are already gone is not an error.

Config (under ``remote.log.storage.manager.impl.prefix``, default ``rsm.config.``):
``dir`` (required; created if missing), ``fsync`` (true/false, default true).

Concurrency: no shared state besides the directory; calls may run on any thread, and
different segments in parallel (each copy has its own uuid, hence its own names).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from odradek.storage.deferred_files import fsync_directory
from odradek.storage.remote.metadata import RemoteLogSegmentMetadata
from odradek.storage.remote.storage_manager import (
    LOG_SUFFIX,
    IndexType,
    LogSegmentData,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    check_known_keys,
    check_range,
    config_bool,
    segment_key,
)

COPY_CHUNK_BYTES: Final = 1024 * 1024
TMP_SUFFIX: Final = ".tmp"
_ALL_SUFFIXES: Final = (LOG_SUFFIX, *(index.value for index in IndexType))


class FileSystemRemoteStorageManager:
    def __init__(self, directory: Path, *, fsync: bool = True) -> None:
        self.directory = Path(directory)
        self.fsync = fsync
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise RemoteStorageError(f"cannot create {self.directory}: {error}") from error

    @classmethod
    def from_config(cls, config: Mapping[str, str], prefix: str) -> FileSystemRemoteStorageManager:
        check_known_keys(config, prefix, ("dir", "fsync"))
        directory = config.get("dir", "").strip()
        if not directory:
            raise ValueError(f"{prefix}dir: required by the filesystem remote storage manager")
        return cls(Path(directory), fsync=config_bool(config, prefix, "fsync", True))

    def path(self, metadata: RemoteLogSegmentMetadata, suffix: str) -> Path:
        return self.directory / segment_key(metadata, suffix)

    # -- copy -----------------------------------------------------------------------
    def copy_log_segment_data(
        self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData
    ) -> bytes | None:
        written: list[Path] = []
        try:
            partition_dir = self.path(metadata, LOG_SUFFIX).parent
            partition_dir.mkdir(parents=True, exist_ok=True)
            staged = []
            for suffix, source in segment_data.sources():
                final = self.path(metadata, suffix)
                tmp = final.with_name(final.name + TMP_SUFFIX)
                written.append(tmp)
                self._write(tmp, source)
                staged.append((tmp, final))
            for tmp, final in staged:  # the .log last: it makes the segment visible
                os.replace(tmp, final)
                written.append(final)
            if self.fsync:
                fsync_directory(partition_dir)
        except OSError as error:
            for path in reversed(written):
                with contextlib.suppress(OSError):
                    path.unlink(missing_ok=True)
            raise RemoteStorageError(
                f"copy of remote segment {metadata.remote_log_segment_id} to "
                f"{self.directory} failed: {error}"
            ) from error
        return None

    def _write(self, tmp: Path, source: Path | bytes) -> None:
        with open(tmp, "wb") as out:
            if isinstance(source, bytes):
                out.write(source)
            else:
                with open(source, "rb") as data:
                    shutil.copyfileobj(data, out, COPY_CHUNK_BYTES)
            out.flush()
            if self.fsync:
                os.fsync(out.fileno())

    # -- fetch ----------------------------------------------------------------------
    def fetch_log_segment(
        self,
        metadata: RemoteLogSegmentMetadata,
        start_position: int,
        end_position: int | None = None,
    ) -> bytes:
        check_range(start_position, end_position)
        path = self.path(metadata, LOG_SUFFIX)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            raise RemoteResourceNotFoundError(
                f"remote segment {metadata.remote_log_segment_id} not found at {path}"
            ) from None
        except OSError as error:
            raise RemoteStorageError(f"cannot open {path}: {error}") from error
        try:
            size = os.fstat(fd).st_size
            end = size if end_position is None else min(end_position + 1, size)
            chunks, position = [], start_position
            while position < end:
                chunk = os.pread(fd, end - position, position)
                if not chunk:
                    break
                chunks.append(chunk)
                position += len(chunk)
            return b"".join(chunks)
        except OSError as error:
            raise RemoteStorageError(f"read of {path} failed: {error}") from error
        finally:
            os.close(fd)

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        log = self.path(metadata, LOG_SUFFIX)
        path = self.path(metadata, index_type.value)
        try:
            if not log.exists():
                raise FileNotFoundError(log)
            return path.read_bytes()
        except FileNotFoundError as error:
            raise RemoteResourceNotFoundError(
                f"{index_type.name} index of remote segment {metadata.remote_log_segment_id} "
                f"not found: {error.filename}"
            ) from None
        except OSError as error:
            raise RemoteStorageError(f"read of {path} failed: {error}") from error

    # -- delete ---------------------------------------------------------------------
    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        try:
            for suffix in _ALL_SUFFIXES:  # the .log first: the segment is gone at once
                final = self.path(metadata, suffix)
                final.unlink(missing_ok=True)
                final.with_name(final.name + TMP_SUFFIX).unlink(missing_ok=True)
            partition_dir = self.path(metadata, LOG_SUFFIX).parent
            if self.fsync and partition_dir.exists():
                fsync_directory(partition_dir)
        except OSError as error:
            raise RemoteStorageError(
                f"delete of remote segment {metadata.remote_log_segment_id} failed: {error}"
            ) from error

    def close(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"FileSystemRemoteStorageManager({self.directory})"
