"""Records of ``__remote_log_metadata``: KIP-405's metadata events, in Kafka's layout.

How this works and why: the leader of a partition publishes every step of a remote
segment's life (copy started/finished, delete started/finished) and of a partition's
remote deletion as one record of the internal topic ``__remote_log_metadata``; every
broker rebuilds its view by reading them in order (metadata_cache.py). Writing Kafka's
own layout keeps the topic readable by Kafka's tools and the other way round.

Record key: null. Partition of the metadata topic: ``metadata_partition_for`` (all
events of one user partition land in one metadata partition, so they stay in order).
Record value: Kafka's ApiMessage framing, then the message in the flexible encoding
(KIP-482: compact strings/arrays/bytes are ``unsigned varint length + 1``, 0 = null;
every struct ends with a tag section ``uvarint count, then (uvarint tag, uvarint size,
bytes)`` in ascending tag order; integers big-endian; a uuid is its 16 bytes)::

    frameVersion uvarint (1) | apiKey uvarint | version uvarint (0) | message

    SegmentId = TopicIdPartition(Name string, Id uuid, Partition int32, tags)
                Id uuid, tags
    apiKey 0 RemoteLogSegmentMetadataRecord: SegmentId, StartOffset int64,
        EndOffset int64, BrokerId int32, MaxTimestampMs int64, EventTimestampMs int64,
        SegmentLeaderEpochs [LeaderEpoch int32, Offset int64, tags],
        SegmentSizeInBytes int32, CustomMetadata nullable bytes,
        RemoteLogSegmentState int8, tags (0: TxnIndexEmpty bool, KIP-1058, default false)
    apiKey 1 RemoteLogSegmentMetadataUpdateRecord: SegmentId, BrokerId int32,
        EventTimestampMs int64, CustomMetadata nullable bytes,
        RemoteLogSegmentState int8, tags
    apiKey 2 RemotePartitionDeleteMetadataRecord: TopicIdPartition, BrokerId int32,
        EventTimestampMs int64, RemotePartitionDeleteState int8, tags

A tagged field equal to its default is not written; unknown tags are skipped.

Decoding takes untrusted bytes: every declared length and count is checked against
the bytes that are actually left *before* anything is read or allocated, trailing
bytes are refused, and whatever is wrong raises ``RemoteLogMetadataFormatError``
naming the field — never IndexError, struct.error or a huge allocation.

Concurrency: pure functions.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Final

from odradek.client.producer.partitioner import murmur2, to_positive
from odradek.protocol.bounds import LengthError, read_uvarint, uvarint_bytes
from odradek.storage.errors import StorageError
from odradek.storage.remote.metadata import (
    RemoteLogMetadata,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)

REMOTE_LOG_METADATA_TOPIC: Final = "__remote_log_metadata"
FRAME_VERSION: Final = 1
SEGMENT_METADATA_API_KEY: Final = 0
SEGMENT_UPDATE_API_KEY: Final = 1
PARTITION_DELETE_API_KEY: Final = 2
RECORD_VERSION: Final = 0
TAG_TXN_INDEX_EMPTY: Final = 0
# The smallest encoding of one SegmentLeaderEpochs entry (int32, int64, empty tags).
_EPOCH_ENTRY_MIN: Final = 13

_I8 = struct.Struct(">b")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class RemoteLogMetadataFormatError(StorageError, ValueError):
    """A ``__remote_log_metadata`` value that does not follow the schema."""

    code = "CORRUPT_MESSAGE"


def metadata_partition_for(topic_id: uuid.UUID, partition: int, num_partitions: int) -> int:
    """The ``__remote_log_metadata`` partition holding the events of one user partition.

    ``toPositive(murmur2(topic id's 16 bytes + partition as big-endian int32)) %
    num_partitions``: Kafka's key hash (client/partitioner.py) over the partition's
    identity, so it is stable across brokers, restarts and Python versions (unlike
    ``hash()``), and keyed by topic *id*, so a topic recreated under the same name
    starts fresh.
    """
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be >= 1, not {num_partitions}")
    return to_positive(murmur2(topic_id.bytes + _I32.pack(partition))) % num_partitions


# -- writing ---------------------------------------------------------------------------
def _compact_bytes(data: bytes | None) -> bytes:
    return b"\x00" if data is None else uvarint_bytes(len(data) + 1) + data


def _topic_id_partition(tp: TopicIdPartition) -> bytes:
    return _compact_bytes(tp.topic.encode()) + tp.topic_id.bytes + _I32.pack(tp.partition) + b"\0"


def _segment_id(sid: RemoteLogSegmentId) -> bytes:
    return _topic_id_partition(sid.topic_id_partition) + sid.id.bytes + b"\0"


def _tags(tags: list[tuple[int, bytes]]) -> bytes:
    out = bytearray(uvarint_bytes(len(tags)))
    for tag, data in tags:
        out += uvarint_bytes(tag) + uvarint_bytes(len(data)) + data
    return bytes(out)


def serialize(message: RemoteLogMetadata) -> bytes:
    """The record value of ``message``."""
    out = bytearray(uvarint_bytes(FRAME_VERSION))
    if isinstance(message, RemoteLogSegmentMetadata):
        out += uvarint_bytes(SEGMENT_METADATA_API_KEY) + uvarint_bytes(RECORD_VERSION)
        out += _segment_id(message.remote_log_segment_id)
        out += _I64.pack(message.start_offset) + _I64.pack(message.end_offset)
        out += _I32.pack(message.broker_id) + _I64.pack(message.max_timestamp_ms)
        out += _I64.pack(message.event_timestamp_ms)
        out += uvarint_bytes(len(message.segment_leader_epochs) + 1)
        for epoch, offset in message.segment_leader_epochs.items():
            out += _I32.pack(epoch) + _I64.pack(offset) + b"\0"
        out += _I32.pack(message.segment_size_in_bytes)
        out += _compact_bytes(message.custom_metadata) + _I8.pack(message.state)
        out += _tags([(TAG_TXN_INDEX_EMPTY, b"\x01")] if message.txn_index_empty else [])
    elif isinstance(message, RemoteLogSegmentMetadataUpdate):
        out += uvarint_bytes(SEGMENT_UPDATE_API_KEY) + uvarint_bytes(RECORD_VERSION)
        out += _segment_id(message.remote_log_segment_id)
        out += _I32.pack(message.broker_id) + _I64.pack(message.event_timestamp_ms)
        out += _compact_bytes(message.custom_metadata) + _I8.pack(message.state) + b"\0"
    else:
        out += uvarint_bytes(PARTITION_DELETE_API_KEY) + uvarint_bytes(RECORD_VERSION)
        out += _topic_id_partition(message.topic_id_partition)
        out += _I32.pack(message.broker_id) + _I64.pack(message.event_timestamp_ms)
        out += _I8.pack(message.state) + b"\0"
    return bytes(out)


# -- reading ---------------------------------------------------------------------------
class _Reader:
    def __init__(self, data: bytes | bytearray | memoryview) -> None:
        self.data = bytes(data)
        self.position = 0

    def fail(self, what: str) -> RemoteLogMetadataFormatError:
        left = len(self.data) - self.position
        return RemoteLogMetadataFormatError(
            f"__remote_log_metadata value: {what} at byte {self.position} ({left} bytes left)"
        )

    def _fixed(self, fmt: struct.Struct, what: str) -> int:
        if self.position + fmt.size > len(self.data):
            raise self.fail(f"{what} ends early")
        (value,) = fmt.unpack_from(self.data, self.position)
        self.position += fmt.size
        return int(value)

    def i8(self, what: str) -> int:
        return self._fixed(_I8, what)

    def i32(self, what: str) -> int:
        return self._fixed(_I32, what)

    def i64(self, what: str) -> int:
        return self._fixed(_I64, what)

    def uvarint(self, what: str) -> int:
        try:
            value, self.position = read_uvarint(self.data, self.position, len(self.data), what)
        except LengthError as error:
            raise self.fail(str(error)) from None
        return value

    def raw(self, length: int, what: str) -> bytes:
        if length > len(self.data) - self.position:
            raise self.fail(f"{what} declares {length} bytes")
        data = self.data[self.position : self.position + length]
        self.position += length
        return data

    def uuid(self, what: str) -> uuid.UUID:
        return uuid.UUID(bytes=self.raw(16, what))

    def nullable_bytes(self, what: str) -> bytes | None:
        length = self.uvarint(what) - 1
        return None if length < 0 else self.raw(length, what)

    def string(self, what: str) -> str:
        data = self.nullable_bytes(what)
        if data is None:
            raise self.fail(f"null {what}")
        try:
            return data.decode()
        except UnicodeDecodeError:
            raise self.fail(f"{what} is not UTF-8") from None

    def count(self, element_min: int, what: str) -> int:
        count = self.uvarint(what) - 1
        if count < 0:
            raise self.fail(f"null {what}")
        if count * element_min > len(self.data) - self.position:
            raise self.fail(f"{what} declares {count} entries")
        return count

    def tags(self, what: str, known: Callable[[int, bytes], None] | None = None) -> None:
        count = self.uvarint(f"{what} tag count")
        if count * 2 > len(self.data) - self.position:
            raise self.fail(f"{what} declares {count} tagged fields")
        previous = -1
        for _ in range(count):
            tag = self.uvarint(f"{what} tag")
            if tag <= previous:
                raise self.fail(f"{what} tag {tag} out of order")
            data = self.raw(self.uvarint(f"{what} tag {tag} size"), f"{what} tag {tag}")
            if known is not None:
                known(tag, data)
            previous = tag

    def topic_id_partition(self) -> TopicIdPartition:
        name = self.string("topic name")
        topic_id = self.uuid("topic id")
        partition = self.i32("partition")
        self.tags("TopicIdPartition")
        return TopicIdPartition(topic_id, name, partition)

    def segment_id(self) -> RemoteLogSegmentId:
        tp = self.topic_id_partition()
        segment_uuid = self.uuid("segment id")
        self.tags("RemoteLogSegmentId")
        return RemoteLogSegmentId(tp.topic_id, tp.topic, tp.partition, segment_uuid)


def _segment_state(value: int) -> RemoteLogSegmentState:
    try:
        return RemoteLogSegmentState(value)
    except ValueError:
        raise RemoteLogMetadataFormatError(f"unknown remote log segment state {value}") from None


def _segment_metadata(reader: _Reader) -> RemoteLogSegmentMetadata:
    sid = reader.segment_id()
    start, end = reader.i64("StartOffset"), reader.i64("EndOffset")
    broker_id, max_ts = reader.i32("BrokerId"), reader.i64("MaxTimestampMs")
    event_ts = reader.i64("EventTimestampMs")
    epochs: dict[int, int] = {}
    for _ in range(reader.count(_EPOCH_ENTRY_MIN, "SegmentLeaderEpochs")):
        epoch = reader.i32("LeaderEpoch")
        if epoch in epochs:
            raise reader.fail(f"leader epoch {epoch} listed twice")
        epochs[epoch] = reader.i64("Offset")
        reader.tags("SegmentLeaderEpochEntry")
    size = reader.i32("SegmentSizeInBytes")
    custom = reader.nullable_bytes("CustomMetadata")
    state = _segment_state(reader.i8("RemoteLogSegmentState"))
    txn_index_empty = False

    def known(tag: int, data: bytes) -> None:
        nonlocal txn_index_empty
        if tag == TAG_TXN_INDEX_EMPTY:
            if data not in (b"\0", b"\1"):
                raise reader.fail(f"TxnIndexEmpty is {data!r}, not a bool")
            txn_index_empty = data == b"\1"

    reader.tags("RemoteLogSegmentMetadataRecord", known)
    return RemoteLogSegmentMetadata(
        sid, start, end, max_ts, broker_id, event_ts, size, epochs, state, custom, txn_index_empty
    )


def _segment_update(reader: _Reader) -> RemoteLogSegmentMetadataUpdate:
    sid = reader.segment_id()
    broker_id, event_ts = reader.i32("BrokerId"), reader.i64("EventTimestampMs")
    custom = reader.nullable_bytes("CustomMetadata")
    state = _segment_state(reader.i8("RemoteLogSegmentState"))
    reader.tags("RemoteLogSegmentMetadataUpdateRecord")
    return RemoteLogSegmentMetadataUpdate(sid, event_ts, custom, state, broker_id)


def _partition_delete(reader: _Reader) -> RemotePartitionDeleteMetadata:
    tp = reader.topic_id_partition()
    broker_id, event_ts = reader.i32("BrokerId"), reader.i64("EventTimestampMs")
    value = reader.i8("RemotePartitionDeleteState")
    try:
        state = RemotePartitionDeleteState(value)
    except ValueError:
        raise reader.fail(f"unknown partition delete state {value}") from None
    reader.tags("RemotePartitionDeleteMetadataRecord")
    return RemotePartitionDeleteMetadata(tp, state, event_ts, broker_id)


_DECODERS: Final[dict[int, Callable[[_Reader], RemoteLogMetadata]]] = {
    SEGMENT_METADATA_API_KEY: _segment_metadata,
    SEGMENT_UPDATE_API_KEY: _segment_update,
    PARTITION_DELETE_API_KEY: _partition_delete,
}


def deserialize(data: bytes | bytearray | memoryview) -> RemoteLogMetadata:
    """The message of one record value; RemoteLogMetadataFormatError if it is malformed."""
    reader = _Reader(data)
    frame = reader.uvarint("frame version")
    if frame != FRAME_VERSION:
        raise reader.fail(f"unknown frame version {frame}")
    api_key, version = reader.uvarint("apiKey"), reader.uvarint("version")
    decoder = _DECODERS.get(api_key)
    if decoder is None:
        raise reader.fail(f"unknown apiKey {api_key}")
    if version != RECORD_VERSION:
        raise reader.fail(f"unsupported version {version} of apiKey {api_key}")
    try:
        message = decoder(reader)
    except RemoteLogMetadataFormatError:
        raise
    except ValueError as error:  # the values' own checks (offsets, epochs, states)
        raise RemoteLogMetadataFormatError(f"__remote_log_metadata value: {error}") from None
    if reader.position != len(reader.data):
        raise reader.fail("trailing bytes")
    return message
