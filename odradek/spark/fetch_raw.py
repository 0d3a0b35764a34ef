"""Fetch responses (v4–v12) parsed from the raw frame, records left as memoryview slices.

How this works and why: decoding a FetchResponse with kio copies every partition's
records into a new ``bytes`` object, and the Spark reader then only needs a handful of
fields around them. So the reader receives the response frame as is (``fetch_socket``) and this
module walks it: the header, the top-level
error, then per topic and partition the error code, watermarks, log start offset,
aborted transactions and a zero-copy slice of the records. The layout is the one
``odradek/protocol/fetch_codec.py`` writes (the broker's encoder): v7 adds the top-level
error code and session id, v5 the log start offset, v11 the preferred read replica,
and v12 is flexible — compact strings/arrays/bytes (unsigned varint length + 1, 0 =
null) and a tagged-field section after the response header, each aborted transaction,
each partition, each topic and the body. Unknown tagged fields are skipped.

A frame that ends early or has an impossible length raises ``FetchParseError``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

MIN_VERSION: Final = 4
MAX_VERSION: Final = 12
_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
_PARTITION_HEAD: Final = struct.Struct(">ihqq")  # index, error, high watermark, LSO
_I64: Final = struct.Struct(">q")
_ABORTED: Final = struct.Struct(">qq")


class FetchParseError(ValueError):
    """The frame is not a well-formed FetchResponse of the version asked for."""


@dataclass(slots=True)
class RawPartition:
    """One partition of a FetchResponse; ``records`` is a slice of the frame (or None)."""

    partition_index: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: list[tuple[int, int]] | None  # (producer id, first offset)
    preferred_read_replica: int
    records: memoryview | None


@dataclass(slots=True)
class RawFetchResponse:
    correlation_id: int
    throttle_time_ms: int
    error_code: int
    session_id: int
    topics: list[tuple[str, list[RawPartition]]]


class _Cursor:
    __slots__ = ("data", "end", "pos")

    def __init__(self, data: memoryview) -> None:
        self.data = data
        self.pos = 0
        self.end = len(data)

    def need(self, size: int) -> int:
        pos = self.pos
        if size < 0 or pos + size > self.end:
            raise FetchParseError(f"fetch response truncated at byte {pos} (needs {size} more)")
        self.pos = pos + size
        return pos

    def unpack(self, fmt: struct.Struct) -> tuple[int, ...]:
        return fmt.unpack_from(self.data, self.need(fmt.size))

    def uvarint(self) -> int:
        data, pos, end = self.data, self.pos, self.end
        value = shift = 0
        while True:
            if pos >= end:
                raise FetchParseError(f"fetch response truncated in a varint at byte {pos}")
            byte = data[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                break
            shift += 7
            if shift > 28:
                raise FetchParseError(f"fetch response has a varint longer than 5 bytes at {pos}")
        self.pos = pos
        return value

    def array_length(self, flexible: bool) -> int:
        """Element count; -1 for a null array."""
        count = self.uvarint() - 1 if flexible else self.unpack(_I32)[0]
        if count < -1:
            raise FetchParseError(f"fetch response has an array length of {count}")
        return count

    def string(self, flexible: bool) -> str:
        size = self.uvarint() - 1 if flexible else self.unpack(_I16)[0]
        if size < 0:
            raise FetchParseError("fetch response has a null topic name")
        start = self.need(size)
        try:
            return bytes(self.data[start : start + size]).decode()
        except UnicodeDecodeError:
            raise FetchParseError("fetch response has a topic name that is not UTF-8") from None

    def nullable_bytes(self, flexible: bool) -> memoryview | None:
        size = self.uvarint() - 1 if flexible else self.unpack(_I32)[0]
        if size < -1:
            raise FetchParseError(f"fetch response has a records length of {size}")
        if size == -1:
            return None
        start = self.need(size)
        return self.data[start : start + size]

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self.need(self.uvarint())


def parse_fetch_response(frame: bytes | memoryview, version: int) -> RawFetchResponse:
    """Parse a whole response frame (correlation id first, size prefix stripped)."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise FetchParseError(f"fetch response version {version} is not in 4..12")
    flexible = version >= 12
    cursor = _Cursor(memoryview(frame))
    (correlation_id,) = cursor.unpack(_I32)
    if flexible:
        cursor.skip_tags()
    (throttle,) = cursor.unpack(_I32)
    error_code = session_id = 0
    if version >= 7:
        (error_code,) = cursor.unpack(_I16)
        (session_id,) = cursor.unpack(_I32)
    topics: list[tuple[str, list[RawPartition]]] = []
    for _ in range(max(cursor.array_length(flexible), 0)):
        name = cursor.string(flexible)
        partitions: list[RawPartition] = []
        for _ in range(max(cursor.array_length(flexible), 0)):
            index, error, high_watermark, last_stable = cursor.unpack(_PARTITION_HEAD)
            log_start = cursor.unpack(_I64)[0] if version >= 5 else -1
            aborted: list[tuple[int, int]] | None = None
            count = cursor.array_length(flexible)
            if count >= 0:
                aborted = []
                for _ in range(count):
                    producer_id, first_offset = cursor.unpack(_ABORTED)
                    aborted.append((producer_id, first_offset))
                    if flexible:
                        cursor.skip_tags()
            preferred = cursor.unpack(_I32)[0] if version >= 11 else -1
            records = cursor.nullable_bytes(flexible)
            if flexible:
                cursor.skip_tags()
            partitions.append(
                RawPartition(
                    index,
                    error,
                    high_watermark,
                    last_stable,
                    log_start,
                    aborted,
                    preferred,
                    records,
                )
            )
        if flexible:
            cursor.skip_tags()
        topics.append((name, partitions))
    if flexible:
        cursor.skip_tags()
    if cursor.pos != cursor.end:
        raise FetchParseError(
            f"fetch response has {cursor.end - cursor.pos} bytes after its last field"
        )
    return RawFetchResponse(correlation_id, throttle, error_code, session_id, topics)
