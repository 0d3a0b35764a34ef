"""Value types shared by the client faces: topic-partitions, record metadata, messages.

How this works and why: the blocking face is shaped like confluent-kafka (``Message``
with accessor methods, ``KafkaException`` wrapping a ``KafkaError``) and the asyncio
face like aiokafka (``RecordMetadata``); both are built from the same results of the
asyncio core, so they live here, free of any I/O.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from odradek.client._core.errors import KafkaError


class KafkaException(Exception):
    """Raised by the blocking face; ``args[0]`` is the ``KafkaError``."""

    def __init__(self, error: KafkaError | Exception) -> None:
        super().__init__(error)
        self.error = error


class TopicPartition(NamedTuple):
    topic: str
    partition: int = -1
    offset: int = -1001


class RecordMetadata(NamedTuple):
    """Where a record landed (aiokafka's shape: a named tuple there too; one is built
    per record sent, and a frozen dataclass cost several times more to build)."""

    topic: str
    partition: int
    offset: int  # -1 with acks=0
    timestamp: int  # ms: the create time, or the broker's log-append time
    timestamp_type: int  # 0 = CreateTime, 1 = LogAppendTime
    serialized_key_size: int
    serialized_value_size: int

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


TIMESTAMP_NOT_AVAILABLE = 0
TIMESTAMP_CREATE_TIME = 1
TIMESTAMP_LOG_APPEND_TIME = 2


# Message's timestamp type, indexed by the record's (0 = Create, 1 = LogAppend, -1 = none)
_MESSAGE_TIMESTAMP_TYPES = (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_NOT_AVAILABLE,
)
_RECORD_TIMESTAMP_TYPES = {TIMESTAMP_CREATE_TIME: 0, TIMESTAMP_LOG_APPEND_TIME: 1}


class Message(tuple[Any, ...]):
    """One record as confluent-kafka shows it: accessor methods, ``error()`` or None.

    Laid out like the consumer's ``ConsumerRecord`` (topic, partition, offset,
    timestamp, timestamp type 0/1/-1, key, value, header pairs, leader epoch), so the
    blocking consumer builds a fetch's messages with ``tuple.__new__`` in C, straight
    from its columns. Build one with the confluent-shaped arguments below; one with an
    error is a ``Message`` too (a subclass whose ``error()`` returns it), so the
    ``error()`` every consumer loop calls on every message is a plain ``return None``.
    """

    __slots__ = ()

    def __new__(
        cls,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes | None]] | None,
        timestamp: tuple[int, int],
        error: Exception | None = None,
        leader_epoch: int = -1,
    ) -> Message:
        kind, milliseconds = timestamp
        fields = (
            topic,
            partition,
            offset,
            milliseconds,
            _RECORD_TIMESTAMP_TYPES.get(kind, -1),
            key,
            value,
            tuple(headers) if headers else (),
            leader_epoch,
        )
        if error is None:
            return tuple.__new__(cls, fields)
        return tuple.__new__(_FailedMessage, (*fields, error))

    def topic(self) -> str:
        return self[0]

    def partition(self) -> int:
        return self[1]

    def offset(self) -> int:
        return self[2]

    def timestamp(self) -> tuple[int, int]:
        """(type, ms): type is TIMESTAMP_CREATE_TIME or TIMESTAMP_LOG_APPEND_TIME."""
        return (_MESSAGE_TIMESTAMP_TYPES[self[4]], self[3])

    def key(self) -> bytes | None:
        return self[5]

    def value(self) -> bytes | None:
        return self[6]

    def headers(self) -> list[tuple[str, bytes | None]] | None:
        return list(self[7]) if self[7] else None

    def leader_epoch(self) -> int | None:
        return self[8] if self[8] >= 0 else None

    def error(self) -> Exception | None:
        return None

    def __len__(self) -> int:
        """The value's size, as in confluent-kafka."""
        return len(self[6] or b"")

    def __repr__(self) -> str:
        return f"Message({self[0]}-{self[1]}@{self[2]}, error={self.error()!r})"


class _FailedMessage(Message):
    """A ``Message`` whose delivery or fetch failed: the error is its tenth field."""

    __slots__ = ()

    def error(self) -> Exception | None:
        return self[9]


def as_bytes(data: Any, what: str) -> bytes | None:
    if data is None or type(data) is bytes:  # the common cases first: per-record path
        return data
    if isinstance(data, str):
        return data.encode()
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    raise TypeError(f"{what} must be bytes, str or None, not {type(data).__name__}")


__all__ = [
    "KafkaError",
    "KafkaException",
    "Message",
    "RecordMetadata",
    "TopicPartition",
    "as_bytes",
]
