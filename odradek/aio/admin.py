"""``aiokafka.admin``'s names: the admin client and the objects its calls take."""

from odradek.client.admin.aio import AIOKafkaAdminClient
from odradek.client.admin.aio_types import (
    ConfigResource,
    ConfigResourceType,
    NewPartitions,
    NewTopic,
    RecordsToDelete,
)

__all__ = [
    "AIOKafkaAdminClient",
    "ConfigResource",
    "ConfigResourceType",
    "NewPartitions",
    "NewTopic",
    "RecordsToDelete",
]
