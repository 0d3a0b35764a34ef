"""Value types shared by the client faces: topic-partitions, record metadata, messages.

How this works and why: the blocking face is shaped like confluent-kafka (``Message``
with accessor methods, ``KafkaException`` wrapping a ``KafkaError``) and the asyncio
face like aiokafka (``RecordMetadata``); both are built from the same results of the
asyncio core, so they live here, free of any I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from odradek.client.cluster import KafkaError


class KafkaException(Exception):
    """Raised by the blocking face; ``args[0]`` is the ``KafkaError``."""

    def __init__(self, error: KafkaError | Exception) -> None:
        super().__init__(error)
        self.error = error


class TopicPartition(NamedTuple):
    topic: str
    partition: int = -1
    offset: int = -1001


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where a record landed (aiokafka's shape)."""

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


class Message:
    """One record as confluent-kafka shows it: accessor methods, ``error()`` or None."""

    __slots__ = (
        "_error",
        "_headers",
        "_key",
        "_offset",
        "_partition",
        "_timestamp",
        "_topic",
        "_value",
    )

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes | None]] | None,
        timestamp: tuple[int, int],
        error: Exception | None = None,
    ) -> None:
        self._topic = topic
        self._partition = partition
        self._offset = offset
        self._key = key
        self._value = value
        self._headers = headers
        self._timestamp = timestamp
        self._error = error

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> list[tuple[str, bytes | None]] | None:
        return self._headers

    def timestamp(self) -> tuple[int, int]:
        """(type, ms): type is TIMESTAMP_CREATE_TIME or TIMESTAMP_LOG_APPEND_TIME."""
        return self._timestamp

    def error(self) -> Exception | None:
        return self._error

    def __len__(self) -> int:
        return len(self._value or b"")

    def __repr__(self) -> str:
        return f"Message({self._topic}-{self._partition}@{self._offset}, error={self._error!r})"


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
