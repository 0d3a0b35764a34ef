"""A RemoteStorageManager over S3 (or any S3-compatible store), through ``obstore``.

How this works and why: each file of a remote segment is one object, under the same
relative path the filesystem backend uses (storage_manager.py's ``segment_key``)
below an optional key prefix. The client is ``obstore`` (Python bindings of the Rust
``object_store`` crate, used by Arrow/DataFusion/Delta): it is maintained, fast, has
both sync and async APIs, does ranged GETs and multipart (streaming) PUTs natively,
retries with backoff and timeouts we can bound, and needs no boto/botocore stack.

* Copy: the small files (indexes, snapshot, epochs) are single PUTs; the ``.log``
  (up to 1 GiB) is handed to obstore as a path, and obstore streams it as a multipart
  upload of ``s3.multipart.part.size.bytes`` parts, at most ``s3.upload.concurrency``
  in flight, so memory stays near part size x concurrency whatever the segment size.
  The ``.log`` goes last, as in the filesystem backend. Each PUT is atomic on S3, and
  nothing reads a segment before its COPY_SEGMENT_FINISHED event, so a copy cut short
  is invisible; a failed copy deletes what it wrote (best effort: the leader deletes
  the rest with the segment's DELETE_SEGMENT_STARTED).
* Fetch: one ranged GET for the byte range asked (Kafka's inclusive end); an index is
  one GET. A range starting at or past the end of the object is empty, as on disk.
* Delete: one DELETE per file (S3 deletes of missing keys succeed: idempotent).

Errors: a missing object raises RemoteResourceNotFoundError; anything else —
HTTP errors, refused connections, timeouts after the bounded retries — raises
RemoteStorageError with obstore's exception chained. The request timeout, connect
timeout and retry budget are bounded by config so a dead endpoint fails, never hangs.

Config (under ``remote.log.storage.manager.impl.prefix``, default ``rsm.config.``)::

    s3.bucket (required)          s3.prefix                  s3.endpoint.url
    s3.region (us-east-1)         s3.access.key.id           s3.secret.access.key
    s3.allow.http (false)         s3.request.timeout.ms (30000)
    s3.connect.timeout.ms (5000)  s3.max.retries (3)         s3.retry.timeout.ms (30000)
    s3.multipart.part.size.bytes (8388608; S3's minimum is 5 MiB)
    s3.upload.concurrency (4)

Credentials not given here come from obstore's usual sources (AWS_* environment
variables, instance metadata).

Concurrency: the store object is thread-safe; calls may run on any worker thread.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any, Final

import obstore
from obstore.exceptions import NotFoundError
from obstore.store import S3Store

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
    config_int,
    segment_key,
)

MIN_PART_SIZE: Final = 5 * 1024 * 1024
_ALL_SUFFIXES: Final = (LOG_SUFFIX, *(index.value for index in IndexType))
_KNOWN_KEYS: Final = (
    "s3.bucket",
    "s3.prefix",
    "s3.endpoint.url",
    "s3.region",
    "s3.access.key.id",
    "s3.secret.access.key",
    "s3.allow.http",
    "s3.request.timeout.ms",
    "s3.connect.timeout.ms",
    "s3.max.retries",
    "s3.retry.timeout.ms",
    "s3.multipart.part.size.bytes",
    "s3.upload.concurrency",
)


def _not_found(error: Exception) -> bool:
    return isinstance(error, NotFoundError | FileNotFoundError)


class S3RemoteStorageManager:
    def __init__(
        self,
        bucket: str,
        *,
        prefix: str = "",
        endpoint_url: str | None = None,
        region: str = "us-east-1",
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        allow_http: bool = False,
        request_timeout_ms: int = 30_000,
        connect_timeout_ms: int = 5_000,
        max_retries: int = 3,
        retry_timeout_ms: int = 30_000,
        part_size: int = 8 * 1024 * 1024,
        upload_concurrency: int = 4,
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.part_size = part_size
        self.upload_concurrency = upload_concurrency
        config: dict[str, Any] = {"region": region}
        if endpoint_url:
            config["endpoint"] = endpoint_url
        if access_key_id is not None:
            config["access_key_id"] = access_key_id
        if secret_access_key is not None:
            config["secret_access_key"] = secret_access_key
        try:
            self.store = S3Store(
                bucket,
                prefix=self.prefix or None,
                config=config,  # type: ignore[arg-type]
                client_options={
                    "allow_http": allow_http,
                    "timeout": timedelta(milliseconds=request_timeout_ms),
                    "connect_timeout": timedelta(milliseconds=connect_timeout_ms),
                },
                retry_config={
                    "max_retries": max_retries,
                    "retry_timeout": timedelta(milliseconds=retry_timeout_ms),
                },
            )
        except Exception as error:
            raise RemoteStorageError(f"cannot set up S3 bucket {bucket}: {error}") from error

    @classmethod
    def from_config(cls, config: Mapping[str, str], prefix: str) -> S3RemoteStorageManager:
        check_known_keys(config, prefix, _KNOWN_KEYS)
        bucket = config.get("s3.bucket", "").strip()
        if not bucket:
            raise ValueError(f"{prefix}s3.bucket: required by the s3 remote storage manager")
        endpoint = config.get("s3.endpoint.url", "").strip() or None
        if endpoint is not None and not endpoint.startswith(("http://", "https://")):
            raise ValueError(f"{prefix}s3.endpoint.url: {endpoint!r} is not an http(s) URL")
        part_size = config_int(
            config, prefix, "s3.multipart.part.size.bytes", 8 * 1024 * 1024, MIN_PART_SIZE
        )
        return cls(
            bucket,
            prefix=config.get("s3.prefix", ""),
            endpoint_url=endpoint,
            region=config.get("s3.region", "us-east-1").strip() or "us-east-1",
            access_key_id=config.get("s3.access.key.id"),
            secret_access_key=config.get("s3.secret.access.key"),
            allow_http=config_bool(config, prefix, "s3.allow.http", False),
            request_timeout_ms=config_int(config, prefix, "s3.request.timeout.ms", 30_000, 1),
            connect_timeout_ms=config_int(config, prefix, "s3.connect.timeout.ms", 5_000, 1),
            max_retries=config_int(config, prefix, "s3.max.retries", 3, 0),
            retry_timeout_ms=config_int(config, prefix, "s3.retry.timeout.ms", 30_000, 1),
            part_size=part_size,
            upload_concurrency=config_int(config, prefix, "s3.upload.concurrency", 4, 1),
        )

    def _fail(self, what: str, key: str, error: Exception) -> RemoteStorageError:
        where = f"s3://{self.bucket}/{self.prefix + '/' if self.prefix else ''}{key}"
        if _not_found(error):
            return RemoteResourceNotFoundError(f"{what}: {where} not found")
        first_line = str(error).split("\n", 1)[0]
        return RemoteStorageError(f"{what} {where} failed: {first_line}")

    # -- copy -----------------------------------------------------------------------
    def copy_log_segment_data(
        self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData
    ) -> bytes | None:
        written: list[str] = []
        for suffix, source in segment_data.sources():
            key = segment_key(metadata, suffix)
            try:
                if isinstance(source, bytes):
                    obstore.put(self.store, key, source, use_multipart=False)
                elif source.stat().st_size <= self.part_size:
                    obstore.put(self.store, key, Path(source), use_multipart=False)
                else:
                    obstore.put(
                        self.store,
                        key,
                        Path(source),
                        use_multipart=True,
                        chunk_size=self.part_size,
                        max_concurrency=self.upload_concurrency,
                    )
            except Exception as error:
                for done in written:
                    with contextlib.suppress(Exception):
                        obstore.delete(self.store, done)
                cause = str(error).split("\n", 1)[0]
                raise RemoteStorageError(
                    f"copy of remote segment {metadata.remote_log_segment_id} to "
                    f"s3://{self.bucket}/{self.prefix}: put {key} failed: {cause}"
                ) from error
            written.append(key)
        return None

    # -- fetch ----------------------------------------------------------------------
    def fetch_log_segment(
        self,
        metadata: RemoteLogSegmentMetadata,
        start_position: int,
        end_position: int | None = None,
    ) -> bytes:
        check_range(start_position, end_position)
        key = segment_key(metadata, LOG_SUFFIX)
        if end_position is not None and end_position < start_position:
            self._size(key)  # an empty range of a missing segment is still not found
            return b""
        try:
            if end_position is None:
                result = obstore.get(self.store, key, options={"range": {"offset": start_position}})
                return bytes(result.bytes())
            return bytes(
                obstore.get_range(self.store, key, start=start_position, end=end_position + 1)
            )
        except Exception as error:
            failure = self._fail("get", key, error)
            if not isinstance(failure, RemoteResourceNotFoundError):
                with contextlib.suppress(RemoteStorageError):
                    if start_position >= self._size(key):
                        return b""  # S3 answers 416 for a range past the end
            raise failure from error

    def _size(self, key: str) -> int:
        try:
            return int(obstore.head(self.store, key)["size"])
        except Exception as error:
            raise self._fail("head", key, error) from error

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        key = segment_key(metadata, index_type.value)
        try:
            return bytes(obstore.get(self.store, key).bytes())
        except Exception as error:
            raise self._fail(f"get {index_type.name} index", key, error) from error

    # -- delete ---------------------------------------------------------------------
    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        for suffix in _ALL_SUFFIXES:
            key = segment_key(metadata, suffix)
            try:
                obstore.delete(self.store, key)
            except Exception as error:
                if not _not_found(error):
                    raise self._fail("delete", key, error) from error

    def close(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"S3RemoteStorageManager(s3://{self.bucket}/{self.prefix})"
