"""KIP-405's RemoteStorageManager: the plug that moves segment bytes to and from a store.

How this works and why: tiered storage splits "what exists" (remote log metadata,
kept in ``__remote_log_metadata``) from "the bytes" (this interface), so any store
that can put, range-read and delete objects can hold old segments, and the store
never has to be consistent on its own: a segment is only read after its
COPY_SEGMENT_FINISHED event, and each copy attempt has a fresh segment uuid, so
readers never see a half-written copy and retries never overwrite each other.

The interface follows Kafka's method names (in snake case):

* ``copy_log_segment_data(metadata, segment_data)`` stores one inactive segment: the
  ``.log``, its ``.index``, ``.timeindex``, ``.txnindex`` (only if the segment has
  one), the producer-state snapshot at the segment's end offset + 1 and the
  leader-epoch checkpoint content up to the segment's end (bytes, built by the
  caller). It may return custom metadata (bytes) to record in the segment's metadata.
* ``fetch_log_segment(metadata, start_position, end_position=None)`` returns the
  ``.log`` bytes from ``start_position`` to ``end_position`` *inclusive* (as in Kafka),
  or to the end of the segment; positions past the end give fewer bytes (none).
* ``fetch_index(metadata, index_type)`` returns one of the other five files whole.
* ``delete_log_segment_data(metadata)`` removes all of a segment's files; deleting a
  segment that is (partly) gone is not an error (deletes are retried).

Errors: a missing segment or index raises ``RemoteResourceNotFoundError``, any other
failure ``RemoteStorageError`` with the cause chained.

Configuration (``remote_storage_manager_from_config``), Kafka's broker config names::

    remote.log.storage.manager.class.name   filesystem (default) | s3 | package.module:Class
    remote.log.storage.manager.impl.prefix  rsm.config. (default)

The backend gets the properties under the prefix with the prefix removed
(``rsm.config.dir`` -> ``dir``), through its ``from_config(config, prefix)`` class
method; the prefix is only for naming keys in errors. A bad value raises a one-line
ValueError that names the full key. Backends: filesystem.py, s3.py.

Concurrency: implementations are blocking (file and network I/O): callers run them
on a worker thread, never on the event loop.
"""

from __future__ import annotations

import enum
import importlib
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol, runtime_checkable

from odradek.storage.errors import StorageError

if TYPE_CHECKING:
    from odradek.storage.remote.metadata import RemoteLogSegmentMetadata

CLASS_NAME_CONFIG: Final = "remote.log.storage.manager.class.name"
IMPL_PREFIX_CONFIG: Final = "remote.log.storage.manager.impl.prefix"
DEFAULT_IMPL_PREFIX: Final = "rsm.config."
DEFAULT_CLASS_NAME: Final = "filesystem"


class RemoteStorageError(StorageError):
    """A remote storage operation that failed (the cause is chained)."""


class RemoteResourceNotFoundError(RemoteStorageError):
    """The segment or index asked for is not in remote storage."""


class IndexType(enum.Enum):
    """The files of a remote segment besides its ``.log``; the value is the file suffix."""

    OFFSET = ".index"
    TIMESTAMP = ".timeindex"
    TRANSACTION = ".txnindex"
    LEADER_EPOCH = ".leader-epoch-checkpoint"
    PRODUCER_SNAPSHOT = ".snapshot"


LOG_SUFFIX: Final = ".log"


@dataclass(frozen=True, slots=True)
class LogSegmentData:
    """What ``copy_log_segment_data`` stores: local files, and the epochs as bytes."""

    log_segment: Path
    offset_index: Path
    time_index: Path
    transaction_index: Path | None
    producer_snapshot_index: Path
    leader_epoch_index: bytes

    def sources(self) -> list[tuple[str, Path | bytes]]:
        """(suffix, file or content) of every file to store, the ``.log`` last."""
        files: list[tuple[str, Path | bytes]] = [
            (IndexType.OFFSET.value, self.offset_index),
            (IndexType.TIMESTAMP.value, self.time_index),
        ]
        if self.transaction_index is not None:
            files.append((IndexType.TRANSACTION.value, self.transaction_index))
        files.append((IndexType.PRODUCER_SNAPSHOT.value, self.producer_snapshot_index))
        files.append((IndexType.LEADER_EPOCH.value, self.leader_epoch_index))
        files.append((LOG_SUFFIX, self.log_segment))
        return files


@runtime_checkable
class RemoteStorageManager(Protocol):
    def copy_log_segment_data(
        self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData
    ) -> bytes | None: ...

    def fetch_log_segment(
        self,
        metadata: RemoteLogSegmentMetadata,
        start_position: int,
        end_position: int | None = None,
    ) -> bytes: ...

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes: ...

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None: ...

    def close(self) -> None: ...


def segment_key(metadata: RemoteLogSegmentMetadata, suffix: str) -> str:
    """``<topic>-<partition>-<topic id>/<20-digit start offset>-<segment uuid><suffix>``:
    the relative path (or object key) of one file of a remote segment. Topic names
    only use ``[a-zA-Z0-9._-]``, so the key needs no escaping."""
    sid = metadata.remote_log_segment_id
    return (
        f"{sid.topic}-{sid.partition}-{sid.topic_id}/{metadata.start_offset:020d}-{sid.id}{suffix}"
    )


def check_range(start_position: int, end_position: int | None) -> None:
    if start_position < 0 or (end_position is not None and end_position < start_position - 1):
        raise ValueError(f"bad byte range [{start_position}, {end_position}]")


# -- configuration -------------------------------------------------------------------
def config_int(config: Mapping[str, str], prefix: str, key: str, default: int, low: int) -> int:
    raw = config.get(key)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{prefix}{key}: {raw!r} is not an integer") from None
    if value < low:
        raise ValueError(f"{prefix}{key}: {value} is below {low}")
    return value


def config_bool(config: Mapping[str, str], prefix: str, key: str, default: bool) -> bool:
    raw = config.get(key)
    if raw is None:
        return default
    if raw.strip().lower() not in ("true", "false"):
        raise ValueError(f"{prefix}{key}: {raw!r} is not true or false")
    return raw.strip().lower() == "true"


def check_known_keys(config: Mapping[str, str], prefix: str, known: Collection[str]) -> None:
    for key in sorted(config):
        if key not in known:
            raise ValueError(f"{prefix}{key}: unknown remote storage property")


def remote_storage_manager_from_config(props: Mapping[str, str]) -> RemoteStorageManager:
    """The RemoteStorageManager the broker properties name (see the module docstring)."""
    prefix = props.get(IMPL_PREFIX_CONFIG, DEFAULT_IMPL_PREFIX)
    if not prefix:
        raise ValueError(f"{IMPL_PREFIX_CONFIG}: must not be empty")
    name = props.get(CLASS_NAME_CONFIG, DEFAULT_CLASS_NAME).strip()
    config = {k[len(prefix) :]: v for k, v in props.items() if k.startswith(prefix)}
    cls: type
    if name == "filesystem":
        from odradek.storage.remote.filesystem import FileSystemRemoteStorageManager

        cls = FileSystemRemoteStorageManager
    elif name == "s3":
        from odradek.storage.remote.s3 import S3RemoteStorageManager

        cls = S3RemoteStorageManager
    else:
        module_name, _, class_name = name.partition(":")
        if not module_name or not class_name:
            raise ValueError(
                f"{CLASS_NAME_CONFIG}: {name!r} is not filesystem, s3 or package.module:Class"
            )
        try:
            found = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError) as error:
            raise ValueError(f"{CLASS_NAME_CONFIG}: cannot load {name!r}: {error}") from None
        if not isinstance(found, type) or not hasattr(found, "from_config"):
            raise ValueError(f"{CLASS_NAME_CONFIG}: {name!r} is not a class with from_config")
        cls = found
    manager = cls.from_config(config, prefix)  # type: ignore[attr-defined]
    if not isinstance(manager, RemoteStorageManager):
        raise ValueError(f"{CLASS_NAME_CONFIG}: {name!r} is not a RemoteStorageManager")
    return manager
