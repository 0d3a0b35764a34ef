"""odradek's client shaped like aiokafka: change ``aiokafka`` to ``odradek.aio`` in the
imports (``aiokafka.admin`` → ``odradek.aio.admin``, ``aiokafka.errors`` →
``odradek.aio.errors``, ``aiokafka.structs`` → ``odradek.aio.structs``,
``aiokafka.abc`` → ``odradek.aio.abc``) and the program runs unchanged.

The faces live in ``odradek.client`` (``producer/aio.py``, ``consumer/aio.py``,
``admin/aio.py``); this package only names them as aiokafka does. ``odradek.client``
keeps confluent-kafka's names (its ``TopicPartition`` has an offset, its ``NewTopic``
is confluent's), so each library's programs import from their own face.
"""

from odradek.client._core.aio_errors import ConsumerStoppedError, IllegalOperation
from odradek.client._core.aio_types import (
    ConsumerRecord,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    RecordMetadata,
    TopicPartition,
)
from odradek.client.admin.aio import AIOKafkaAdminClient
from odradek.client.admin.aio_types import NewPartitions, NewTopic, RecordsToDelete
from odradek.client.consumer.aio import AIOKafkaConsumer, ConsumerRebalanceListener
from odradek.client.producer.aio import AIOKafkaProducer
from odradek.client.producer.batch_builder import BatchBuilder

__all__ = [
    "AIOKafkaAdminClient",
    "AIOKafkaConsumer",
    "AIOKafkaProducer",
    "BatchBuilder",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "ConsumerStoppedError",
    "IllegalOperation",
    "NewPartitions",
    "NewTopic",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "RecordMetadata",
    "RecordsToDelete",
    "TopicPartition",
]
