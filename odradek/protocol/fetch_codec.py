"""Fetch responses as raw bytes: the broker's zero-copy encoder and a raw decoder.

How this works and why (seeds/000 零拷贝): kio would need the records as a Python
``bytes`` value, i.e. a copy of every fetched byte through user space. The encoder
writes the response structure itself and puts each partition's records as a
``FileRange`` in the output, so the connection can write the surrounding bytes and
``os.sendfile`` the ranges between them; records read from remote storage (KIP-405)
come as a ``MemoryRange`` and are written as bytes. The decoder walks a received frame the same
way and leaves each partition's records as a ``memoryview`` slice of it: the Spark
reader and replica fetchers need only a handful of fields around the records, and
kio would copy them.

Both cover Fetch v4–v17: v5 adds the log start offset, v7 the top-level error code
and session id, v11 the preferred read replica, and v12 is flexible — compact
strings/arrays/bytes (unsigned varint length + 1, 0 = null) and tagged-field sections
after the response header, each aborted transaction, each partition, each topic and
the body. A v12+ partition may carry tagged fields 0 (diverging epoch: the follower
must truncate), 1 (current leader) and 2 (snapshot id). v13 (KIP-516) names each
topic by its 16-byte id instead of its name; v14 and v15 change only the request;
v16 (KIP-951) adds the body's tag 0, ``node_endpoints``: the host, port and rack of
every leader a partition's ``current_leader`` names, so a client moves to the new
leader without a Metadata round trip; v17 changes only the request. Both sides know
these tags, and the decoder skips tags it does not know. A frame that ends early or
has an impossible length raises ``FetchParseError``.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from odradek.protocol.bounds import uvarint_bytes as _uvarint
from odradek.records.file_range import FileRange, MemoryRange, RecordRange

MIN_VERSION: Final = 4
MAX_VERSION: Final = 17
FIRST_FLEXIBLE: Final = 12
FIRST_TOPIC_ID: Final = 13  # KIP-516: topics by id in request and response
FIRST_NODE_ENDPOINTS: Final = 16  # KIP-951: the body's node_endpoints tag
_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
_I64: Final = struct.Struct(">q")
_PARTITION_HEAD: Final = struct.Struct(">ihqqq")  # index, error, hw, lso, log start
_RAW_PARTITION_HEAD: Final = struct.Struct(">ihqq")  # index, error, hw, lso
_ABORTED: Final = struct.Struct(">qq")
_EPOCH_END: Final = struct.Struct(">iq")  # diverging epoch: epoch, end offset
_LEADER: Final = struct.Struct(">ii")  # current leader: id, epoch
_SNAPSHOT: Final = struct.Struct(">qi")  # snapshot id: end offset, epoch
TAG_DIVERGING_EPOCH: Final = 0
TAG_CURRENT_LEADER: Final = 1
TAG_SNAPSHOT_ID: Final = 2
TAG_NODE_ENDPOINTS: Final = 0  # the response body's tag (v16+)
_ZERO_UUID: Final = uuid.UUID(int=0)


@dataclass(frozen=True, slots=True)
class NodeEndpoint:
    """A leader's address in a v16+ response's ``node_endpoints`` (KIP-951)."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(slots=True)
class PartitionResult:
    index: int
    error_code: int
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    ranges: list[RecordRange] = field(default_factory=list)
    aborted: list[tuple[int, int]] | None = None  # (producer id, first offset)
    # v12 tagged fields, left out when None: (epoch, end offset), (leader id, leader
    # epoch), (snapshot end offset, snapshot epoch)
    diverging_epoch: tuple[int, int] | None = None
    current_leader: tuple[int, int] | None = None
    snapshot_id: tuple[int, int] | None = None
    preferred_read_replica: int = -1  # v11+ (KIP-392), -1: none

    @property
    def records_size(self) -> int:
        return sum(r.length for r in self.ranges)


@dataclass(slots=True)
class TopicResult:
    name: str
    partitions: list[PartitionResult]
    topic_id: uuid.UUID | None = None  # what v13+ sends instead of the name (None: zero)


def _string(text: str, flexible: bool) -> bytes:
    data = text.encode()
    return (_uvarint(len(data) + 1) if flexible else _I16.pack(len(data))) + data


def _array_length(count: int, flexible: bool) -> bytes:
    return _uvarint(count + 1) if flexible else _I32.pack(count)


def _node_endpoints(endpoints: Sequence[NodeEndpoint]) -> bytes:
    """The v16+ body's tagged-field section: tag 0 = the endpoints, when there are any."""
    if not endpoints:
        return b"\x00"
    value = bytearray(_uvarint(len(endpoints) + 1))
    for endpoint in endpoints:
        value += _I32.pack(endpoint.node_id) + _string(endpoint.host, True)
        value += _I32.pack(endpoint.port)
        value += b"\x00" if endpoint.rack is None else _string(endpoint.rack, True)
        value += b"\x00"  # the endpoint's tagged fields
    return b"\x01" + _uvarint(TAG_NODE_ENDPOINTS) + _uvarint(len(value)) + value


def _partition_tags(partition: PartitionResult) -> bytes:
    """A v12 partition's tagged-field section (ascending tags, each struct + its own tags)."""
    fields = []
    if partition.diverging_epoch is not None:
        fields.append((TAG_DIVERGING_EPOCH, _EPOCH_END.pack(*partition.diverging_epoch)))
    if partition.current_leader is not None:
        fields.append((TAG_CURRENT_LEADER, _LEADER.pack(*partition.current_leader)))
    if partition.snapshot_id is not None:
        fields.append((TAG_SNAPSHOT_ID, _SNAPSHOT.pack(*partition.snapshot_id)))
    out = bytearray(_uvarint(len(fields)))
    for tag, value in fields:
        out += _uvarint(tag) + _uvarint(len(value) + 1) + value + b"\x00"
    return bytes(out)


def encode_fetch_response(
    version: int,
    correlation_id: int,
    topics: Sequence[TopicResult],
    *,
    error_code: int = 0,
    session_id: int = 0,
    throttle_ms: int = 0,
    node_endpoints: Sequence[NodeEndpoint] = (),
) -> list[bytes | FileRange]:
    """Header + body as parts; records are FileRanges, everything else bytes. Topics go
    by name below v13 and by ``topic_id`` from v13; ``node_endpoints`` are sent from
    v16 (dropped below, as Kafka drops a tagged field a version lacks)."""
    assert MIN_VERSION <= version <= MAX_VERSION
    flexible = version >= FIRST_FLEXIBLE
    by_id = version >= FIRST_TOPIC_ID
    parts: list[bytes | FileRange] = []
    out = bytearray(_I32.pack(correlation_id))
    if flexible:
        out += b"\x00"  # response header v1: no tagged fields
    out += _I32.pack(throttle_ms)
    if version >= 7:
        out += _I16.pack(error_code) + _I32.pack(session_id)
    out += _array_length(len(topics), flexible)
    for topic in topics:
        if by_id:
            out += (topic.topic_id or _ZERO_UUID).bytes
        else:
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
                out += _I32.pack(partition.preferred_read_replica)
            size = partition.records_size
            out += _uvarint(size + 1) if flexible else _I32.pack(size)
            if size:
                parts.append(bytes(out))
                out = bytearray()
                parts.extend(r.data if isinstance(r, MemoryRange) else r for r in partition.ranges)
            if flexible:
                out += _partition_tags(partition)
        if flexible:
            out += b"\x00"  # topic tagged fields
    if version >= FIRST_NODE_ENDPOINTS:
        out += _node_endpoints(node_endpoints)
    elif flexible:
        out += b"\x00"  # response tagged fields
    parts.append(bytes(out))
    return parts


# -- decoding -----------------------------------------------------------------------


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
    diverging_epoch: tuple[int, int] | None = None  # (epoch, end offset), v12 tag 0
    current_leader: tuple[int, int] | None = None  # (leader id, leader epoch), v12 tag 1
    snapshot_id: tuple[int, int] | None = None  # (end offset, epoch), v12 tag 2


@dataclass(slots=True)
class RawFetchResponse:
    correlation_id: int
    throttle_time_ms: int
    error_code: int
    session_id: int
    # each topic by name (v4–v12) or by id (v13+), with its partitions
    topics: list[tuple[str | uuid.UUID, list[RawPartition]]]
    node_endpoints: list[NodeEndpoint] = field(default_factory=list)  # v16+ tag 0


_PARTITION_TAGS: Final = {
    TAG_DIVERGING_EPOCH: _EPOCH_END,
    TAG_CURRENT_LEADER: _LEADER,
    TAG_SNAPSHOT_ID: _SNAPSHOT,
}


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
        text = self.nullable_string(flexible)
        if text is None:
            raise FetchParseError("fetch response has a null string where one is required")
        return text

    def nullable_string(self, flexible: bool) -> str | None:
        size = self.uvarint() - 1 if flexible else self.unpack(_I16)[0]
        if size < 0:
            return None
        start = self.need(size)
        try:
            return bytes(self.data[start : start + size]).decode()
        except UnicodeDecodeError:
            raise FetchParseError("fetch response has a string that is not UTF-8") from None

    def topic_id(self) -> uuid.UUID:
        start = self.need(16)
        return uuid.UUID(bytes=bytes(self.data[start : start + 16]))

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

    def partition_tags(self, partition: RawPartition) -> None:
        """Read a v12 partition's tagged fields into ``partition``; unknown tags skipped."""
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            size = self.uvarint()
            start = self.need(size)
            shape = _PARTITION_TAGS.get(tag)
            if shape is None:
                continue
            if size < shape.size + 1:
                raise FetchParseError(f"fetch response tag {tag} has {size} bytes")
            value = shape.unpack_from(self.data, start)
            if tag == TAG_DIVERGING_EPOCH:
                partition.diverging_epoch = value
            elif tag == TAG_CURRENT_LEADER:
                partition.current_leader = value
            else:
                partition.snapshot_id = value

    def body_tags(self, response: RawFetchResponse) -> None:
        """The body's tagged fields (v16+: tag 0 = node_endpoints); unknown tags skipped."""
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            size = self.uvarint()
            start = self.need(size)
            if tag != TAG_NODE_ENDPOINTS:
                continue
            end, self.pos = self.pos, start
            for _ in range(max(self.array_length(True), 0)):
                (node_id,) = self.unpack(_I32)
                host = self.string(True)
                (port,) = self.unpack(_I32)
                rack = self.nullable_string(True)
                self.skip_tags()
                response.node_endpoints.append(NodeEndpoint(node_id, host, port, rack))
            if self.pos != end:
                raise FetchParseError(f"fetch response tag {tag} is not {size} bytes long")


def parse_fetch_response(frame: bytes | memoryview, version: int) -> RawFetchResponse:
    """Parse a whole response frame (correlation id first, size prefix stripped)."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise FetchParseError(
            f"fetch response version {version} is not in {MIN_VERSION}..{MAX_VERSION}"
        )
    flexible = version >= FIRST_FLEXIBLE
    by_id = version >= FIRST_TOPIC_ID
    cursor = _Cursor(memoryview(frame))
    (correlation_id,) = cursor.unpack(_I32)
    if flexible:
        cursor.skip_tags()
    (throttle,) = cursor.unpack(_I32)
    error_code = session_id = 0
    if version >= 7:
        (error_code,) = cursor.unpack(_I16)
        (session_id,) = cursor.unpack(_I32)
    topics: list[tuple[str | uuid.UUID, list[RawPartition]]] = []
    for _ in range(max(cursor.array_length(flexible), 0)):
        name: str | uuid.UUID = cursor.topic_id() if by_id else cursor.string(flexible)
        partitions: list[RawPartition] = []
        for _ in range(max(cursor.array_length(flexible), 0)):
            index, error, high_watermark, last_stable = cursor.unpack(_RAW_PARTITION_HEAD)
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
            partition = RawPartition(
                index, error, high_watermark, last_stable, log_start, aborted, preferred, records
            )
            if flexible:
                cursor.partition_tags(partition)
            partitions.append(partition)
        if flexible:
            cursor.skip_tags()
        topics.append((name, partitions))
    response = RawFetchResponse(correlation_id, throttle, error_code, session_id, topics)
    if flexible:
        cursor.body_tags(response)
    if cursor.pos != cursor.end:
        raise FetchParseError(
            f"fetch response has {cursor.end - cursor.pos} bytes after its last field"
        )
    return response
