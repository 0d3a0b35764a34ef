"""The odradek Python client: producer, consumer and admin.

Two faces over one asyncio core: blocking ``Producer``/``Consumer``/``AdminClient``
shaped like confluent-kafka's, and ``AIOKafkaProducer``/``AIOKafkaConsumer`` shaped
like aiokafka's. Configuration uses Kafka's property names (``ClientConfig``).
"""

from odradek.client.admin import AdminClient, NewPartitions, NewTopic
from odradek.client.admin_types import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ConsumerGroupDescription,
    ConsumerGroupListing,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    DeletedRecords,
    DescribeClusterResult,
    ListConsumerGroupsResult,
    ListOffsetsResultInfo,
    MemberAssignment,
    MemberDescription,
    Node,
    OffsetSpec,
    ResourceType,
)
from odradek.client.blocking import Producer
from odradek.client.config import ClientConfig, ConfigError
from odradek.client.consumer_aio import AIOKafkaConsumer
from odradek.client.consumer_sync import Consumer
from odradek.client.producer import AIOKafkaProducer, AsyncProducer
from odradek.client.types import KafkaError, KafkaException, Message, RecordMetadata, TopicPartition

__all__ = [
    "AIOKafkaConsumer",
    "AIOKafkaProducer",
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
    "ConsumerGroupState",
    "ConsumerGroupTopicPartitions",
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
    "TopicPartition",
]
