"""Creating a coordinator's internal topic on first use, with its full replication factor.

How this works and why (Kafka's FindCoordinator path; table B of the cluster review):
``__consumer_offsets`` (``__transaction_state`` next) is created by the first
FindCoordinator that needs it, with ``offsets.topic.replication.factor`` replicas.
Shrinking the factor to the brokers alive at that moment would leave the topic — and
every committed offset — on fewer replicas forever when the first client arrives
while the cluster is still starting. So, as in Kafka, creation waits: while fewer
unfenced brokers than the factor are registered, ``ensure`` creates nothing and
answers COORDINATOR_NOT_AVAILABLE, which clients retry; the first request after
enough brokers are up creates it. One creation at a time per topic (a lock); a topic
some other broker created meanwhile (TOPIC_ALREADY_EXISTS) is fine.

A single zero-config node gets a factor of 1 from its configuration, as Kafka's
single-node example configs set ``offsets.topic.replication.factor=1``
(server/broker_settings.py decides that; this module only enforces the factor it is given).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from odradek.coordinator.partition_writer import TopicCreator
from odradek.metadata.image import MetadataImage

if TYPE_CHECKING:
    from odradek.metadata.view import MetadataView

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class InternalTopic:
    name: str
    partitions: int
    replication_factor: int
    config_name: str  # the broker config that sets the factor, for the log line
    configs: Mapping[str, str] = field(default_factory=dict)


def live_brokers(image: MetadataImage) -> int:
    """Registered brokers that are not fenced (heartbeating and caught up)."""
    return sum(1 for broker in image.brokers.values() if not broker.fenced)


class InternalTopicCreator:
    def __init__(self, metadata: MetadataView, topics: TopicCreator, topic: InternalTopic):
        self.metadata = metadata
        self.topics = topics
        self.topic = topic
        self._lock = asyncio.Lock()
        self._logged_short: int | None = None  # the live count last logged (no flood)

    async def ensure(self) -> str | None:
        """None once the topic exists; else the error to answer (COORDINATOR_NOT_AVAILABLE)."""
        if self.topic.name in self.metadata.image.topics:
            return None
        async with self._lock:
            image = self.metadata.image
            if self.topic.name in image.topics:
                return None
            live = live_brokers(image)
            if live < self.topic.replication_factor:
                if self._logged_short != live:
                    self._logged_short = live
                    logger.warning(
                        "not creating %s yet: %d live brokers do not meet its replication "
                        "factor %d (%s); clients get COORDINATOR_NOT_AVAILABLE until enough "
                        "brokers are up (expected while a cluster starts)",
                        self.topic.name,
                        live,
                        self.topic.replication_factor,
                        self.topic.config_name,
                    )
                return "COORDINATOR_NOT_AVAILABLE"
            error = await self.topics.create_topic(
                self.topic.name,
                self.topic.partitions,
                self.topic.replication_factor,
                self.topic.configs,
            )
            if error is not None and error != "TOPIC_ALREADY_EXISTS":
                logger.warning("cannot create %s: %s", self.topic.name, error)
                return "COORDINATOR_NOT_AVAILABLE"
            self._logged_short = None
            return None
