"""aiokafka's ``BatchBuilder``: a record batch filled by the application, sent whole.

How this works and why: ``AIOKafkaProducer.create_batch()`` hands out a builder;
``append`` encodes each record into the batch's records section right away (the
accumulator's own encoding, ``append_record``), so ``size()`` is the batch's size on
the wire before compression — the 61-byte header plus the records — and a record
that would take it past ``max_batch_size`` is refused (``None``; the first record
always fits), as aiokafka's builder refuses it. ``send_batch`` turns the builder into
one ``ProducerBatch`` of the accumulator, closed to ``send``'s records, so it leaves
as one batch with the producer's compression, idempotence and transaction, and its
records get consecutive offsets.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from odradek.client.producer.accumulator import BATCH_OVERHEAD, Header, ProducerBatch
from odradek.records.codec import append_record

_BYTES_LIKE = (bytes, bytearray, memoryview)


class BatchRecordMetadata(NamedTuple):
    """What ``append`` returns: the record's offset in the batch, its encoded size and
    its timestamp (``crc`` is None for v2 batches, as in aiokafka)."""

    offset: int
    size: int
    timestamp: int
    crc: None = None


class BatchBuilder:
    def __init__(
        self,
        batch_size: int,
        key_serializer: Callable[[Any], Any] | None = None,
        value_serializer: Callable[[Any], Any] | None = None,
    ) -> None:
        self._batch_size = batch_size
        self._key_serializer = key_serializer
        self._value_serializer = value_serializer
        self._body = bytearray()
        self._count = 0
        self._base_timestamp = 0
        self._max_timestamp = 0
        self._closed = False
        self._sent = False

    def append(
        self,
        *,
        timestamp: int | None,
        key: Any,
        value: Any,
        headers: Sequence[Header] | None = None,
    ) -> BatchRecordMetadata | None:
        """Add a record (``timestamp`` in ms, None: now); None when the batch is closed
        or the record does not fit (the batch is closed then)."""
        if self._closed:
            return None
        if self._key_serializer is not None:
            key = self._key_serializer(key)
        if self._value_serializer is not None:
            value = self._value_serializer(value)
        if timestamp is None:
            timestamp = time.time_ns() // 1_000_000
        elif type(timestamp) is not int:
            raise TypeError(timestamp)
        for name, data in (key, "key"), (value, "value"):
            if name is not None and not isinstance(name, _BYTES_LIKE):
                raise TypeError(f"Not supported type for {data}: {type(name)}")
        first = self._count == 0
        if first:
            self._base_timestamp = self._max_timestamp = timestamp
        before = len(self._body)
        size = append_record(
            self._body,
            self._count,
            timestamp - self._base_timestamp,
            None if key is None else bytes(key),
            None if value is None else bytes(value),
            list(headers or ()),
        )
        if not first and BATCH_OVERHEAD + len(self._body) > self._batch_size:
            del self._body[before:]
            self.close()
            return None
        self._max_timestamp = max(self._max_timestamp, timestamp)
        metadata = BatchRecordMetadata(self._count, size, timestamp)
        self._count += 1
        return metadata

    def close(self) -> None:
        """No more records (a closed batch is never reopened)."""
        self._closed = True

    def closed(self) -> bool:
        return self._closed

    def size(self) -> int:
        """Bytes of the batch so far: header and records, before compression."""
        return BATCH_OVERHEAD + len(self._body)

    def record_count(self) -> int:
        return self._count

    def to_batch(self, topic: str, partition: int, deadline: float, waiter: Any) -> ProducerBatch:
        """The accumulator's batch of these records, for ``topic``-``partition``; a
        builder is sent once."""
        if self._sent:
            raise ValueError("this batch was already sent")
        if not self._count:
            raise ValueError("an empty batch cannot be sent")
        self._sent = True
        self.close()
        batch = ProducerBatch(topic, partition, deadline)
        batch.body = self._body
        batch.count = self._count
        batch.base_timestamp = self._base_timestamp
        batch.max_timestamp = self._max_timestamp
        batch.size = self.size()
        batch.waiters.append((0, waiter))
        batch.closed = True
        return batch
