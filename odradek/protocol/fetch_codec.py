"""FetchResponse encoder that leaves record bytes in the segment files.

How this works and why (seeds/000 零拷贝): kio would need the records as a Python
``bytes`` value, i.e. a copy of every fetched byte through user space. This encoder
writes the response structure itself and puts each partition's records as a
``FileRange`` in the output, so the connection can write the surrounding bytes and
``os.sendfile`` the ranges between them. It covers Fetch v4–v12 (topic names; v12 is
the first flexible version, with compact types and tagged fields).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

from odradek.protocol.bounds import uvarint_bytes as _uvarint
from odradek.storage.segment import FileRange

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION_HEAD = struct.Struct(">ihqqq")  # index, error, hw, lso, log start
_ABORTED = struct.Struct(">qq")
MIN_VERSION = 4
MAX_VERSION = 12


@dataclass(slots=True)
class PartitionResult:
    index: int
    error_code: int
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    ranges: list[FileRange] = field(default_factory=list)
    aborted: list[tuple[int, int]] | None = None  # (producer id, first offset)

    @property
    def records_size(self) -> int:
        return sum(r.length for r in self.ranges)


@dataclass(slots=True)
class TopicResult:
    name: str
    partitions: list[PartitionResult]


def _string(text: str, flexible: bool) -> bytes:
    data = text.encode()
    return (_uvarint(len(data) + 1) if flexible else _I16.pack(len(data))) + data


def _array_length(count: int, flexible: bool) -> bytes:
    return _uvarint(count + 1) if flexible else _I32.pack(count)


def encode_fetch_response(
    version: int,
    correlation_id: int,
    topics: Sequence[TopicResult],
    *,
    error_code: int = 0,
    session_id: int = 0,
    throttle_ms: int = 0,
) -> list[bytes | FileRange]:
    """Header + body as parts; records are FileRanges, everything else bytes."""
    assert MIN_VERSION <= version <= MAX_VERSION
    flexible = version >= 12
    parts: list[bytes | FileRange] = []
    out = bytearray(_I32.pack(correlation_id))
    if flexible:
        out += b"\x00"  # response header v1: no tagged fields
    out += _I32.pack(throttle_ms)
    if version >= 7:
        out += _I16.pack(error_code) + _I32.pack(session_id)
    out += _array_length(len(topics), flexible)
    for topic in topics:
        out += _string(topic.name, flexible)
        out += _array_length(len(topic.partitions), flexible)
        for partition in topic.partitions:
            out += _PARTITION_HEAD.pack(
                partition.index,
                partition.error_code,
                partition.high_watermark,
                partition.last_stable_offset,
                partition.log_start_offset,
            )
            if version < 5:
                del out[-8:]  # log start offset arrived in v5
            aborted = partition.aborted
            if aborted is None:
                out += b"\x00" if flexible else _I32.pack(-1)
            else:
                out += _array_length(len(aborted), flexible)
                for producer_id, first_offset in aborted:
                    out += _ABORTED.pack(producer_id, first_offset)
                    if flexible:
                        out += b"\x00"
            if version >= 11:
                out += _I32.pack(-1)  # preferred read replica: none
            size = partition.records_size
            out += _uvarint(size + 1) if flexible else _I32.pack(size)
            if size:
                parts.append(bytes(out))
                out = bytearray()
                parts.extend(partition.ranges)
            if flexible:
                out += b"\x00"  # partition tagged fields
        if flexible:
            out += b"\x00"  # topic tagged fields
    if flexible:
        out += b"\x00"  # response tagged fields
    parts.append(bytes(out))
    return parts
