"""The odradek Python client: producer, consumer and admin.

Two faces over one asyncio core: blocking ``Producer``/``Consumer``/``AdminClient``
shaped like confluent-kafka's, and ``AIOKafkaProducer``/``AIOKafkaConsumer``/
``AIOKafkaAdminClient`` shaped like aiokafka's. Configuration uses Kafka's property
names (``ClientConfig``).

The names here are confluent-kafka's (``TopicPartition`` with an offset, confluent's
``NewTopic``); programs written for aiokafka import ``odradek.aio`` instead, which
names the same asyncio faces with aiokafka's types and errors.
"""

from odradek.client._core.config import ClientConfig, ConfigError
from odradek.client._core.types import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_NOT_AVAILABLE,
    KafkaError,
    KafkaException,
    Message,
    RecordMetadata,
    TopicPartition,
)
from odradek.client.admin.aio import AIOKafkaAdminClient
from odradek.client.admin.blocking import AdminClient
from odradek.client.admin.types import (
    AclOperation,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ConsumerGroupDescription,
    ConsumerGroupListing,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    DeletedRecords,
    DescribeClusterResult,
    ListConsumerGroupsResult,
    ListOffsetsResultInfo,
    MemberAssignment,
    MemberDescription,
    NewPartitions,
    NewTopic,
    Node,
    OffsetSpec,
    ResourceType,
    TopicCollection,
    TopicDescription,
    TopicPartitionInfo,
)
from odradek.client.consumer.aio import AIOKafkaConsumer
from odradek.client.consumer.blocking import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    OFFSET_STORED,
    Consumer,
)
from odradek.client.producer.aio import AIOKafkaProducer
from odradek.client.producer.blocking import Producer
from odradek.client.producer.core import AsyncProducer
from odradek.client.producer.transactions import ConsumerGroupMetadata

__all__ = [
    "OFFSET_BEGINNING",
    "OFFSET_END",
    "OFFSET_INVALID",
    "OFFSET_STORED",
    "TIMESTAMP_CREATE_TIME",
    "TIMESTAMP_LOG_APPEND_TIME",
    "TIMESTAMP_NOT_AVAILABLE",
    "AIOKafkaAdminClient",
    "AIOKafkaConsumer",
    "AIOKafkaProducer",
    "AclOperation",
    "AdminClient",
    "AlterConfigOpType",
    "AsyncProducer",
    "ClientConfig",
    "ConfigEntry",
    "ConfigError",
    "ConfigResource",
    "ConfigSource",
    "Consumer",
    "ConsumerGroupDescription",
    "ConsumerGroupListing",
    "ConsumerGroupMetadata",
    "ConsumerGroupState",
    "ConsumerGroupTopicPartitions",
    "ConsumerGroupType",
    "DeletedRecords",
    "DescribeClusterResult",
    "KafkaError",
    "KafkaException",
    "ListConsumerGroupsResult",
    "ListOffsetsResultInfo",
    "MemberAssignment",
    "MemberDescription",
    "Message",
    "NewPartitions",
    "NewTopic",
    "Node",
    "OffsetSpec",
    "Producer",
    "RecordMetadata",
    "ResourceType",
    "TopicCollection",
    "TopicDescription",
    "TopicPartition",
    "TopicPartitionInfo",
]
