"""The broker's Kafka client for ``__remote_log_metadata`` (KIP-405's topic-based RLMM).

How this works and why: the topic-based metadata manager
(storage/remote/topic_metadata_manager.py) needs to write an event to a metadata
partition whatever broker leads it, and to read the metadata partitions of every
user partition this broker hosts. Kafka's TopicBasedRemoteLogMetadataManager does it
with an ordinary producer and consumer against the cluster, and so does this: the
broker's own asyncio client (odradek.client) connected to its own inter-broker
listener. That path already finds the leader of each partition, follows leader
moves, retries NOT_LEADER and waits for acks=all — none of which the coordinators'
partition writer (coordinator_io.py) does, since it only writes partitions led here.

The topic is created on first use like the other internal topics
(coordinator/internal_topic.py: with its full replication factor, waiting for enough
brokers), with ``remote.log.metadata.topic.num.partitions`` partitions and
``retention.ms`` from ``remote.log.metadata.topic.retention.ms`` (-1: kept forever,
since a broker rebuilds its caches by reading from the beginning).

The clients start lazily, on the first produce or assign (the broker's listener is
bound by then: the copier first runs a task interval after start).

Concurrency: everything on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any, Final

from odradek.client.consumer.aio import AIOKafkaConsumer
from odradek.client.producer.aio import AIOKafkaProducer
from odradek.coordinator.internal_topic import InternalTopicCreator
from odradek.storage.remote.topic_metadata_manager import TOPIC

if TYPE_CHECKING:
    from odradek.client._core.sasl import SaslCredentials

logger = logging.getLogger(__name__)

LATEST: Final = -1
CREATE_RETRY_S: Final = 1.0


class ClientMetadataTransport:
    def __init__(
        self,
        bootstrap: Callable[[], str | None],
        creator: InternalTopicCreator,
        client_id: str,
        topic_configs: Mapping[str, str] | None = None,
        ssl_context: ssl.SSLContext | None = None,
        sasl: SaslCredentials | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        # a TLS inter-broker listener: the clients speak SSL with this context; a SASL
        # one: they log in as this broker (SASL_SSL: both)
        self.security: dict[str, Any] = {"ssl_context": ssl_context} if ssl_context else {}
        if sasl is not None:
            self.security.update(
                sasl_mechanism=sasl.mechanism,
                sasl_plain_username=sasl.username,
                sasl_plain_password=sasl.password,
            )
        if ssl_context is not None or sasl is not None:
            protocol = ("SASL_" if sasl else "") + ("SSL" if ssl_context else "PLAINTEXT")
            self.security["security_protocol"] = protocol
        self.creator = creator
        self.client_id = client_id
        self.topic_configs = dict(topic_configs or {})
        self._producer: AIOKafkaProducer | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._lock = asyncio.Lock()

    async def _ensure_topic(self) -> None:
        while (error := await self.creator.ensure()) is not None:
            logger.debug("%s not available yet: %s", TOPIC, error)
            await asyncio.sleep(CREATE_RETRY_S)

    def _servers(self) -> str:
        servers = self.bootstrap()
        if servers is None:
            raise ConnectionError("the broker's inter-broker listener is not registered yet")
        return servers

    async def _clients(self) -> tuple[AIOKafkaProducer, AIOKafkaConsumer]:
        async with self._lock:
            if self._producer is None or self._consumer is None:
                await self._ensure_topic()
                servers = self._servers()
                producer = AIOKafkaProducer(
                    bootstrap_servers=servers,
                    client_id=f"{self.client_id}-producer",
                    acks="all",
                    linger_ms=0,
                    **self.security,
                )
                consumer = AIOKafkaConsumer(
                    bootstrap_servers=servers,
                    client_id=f"{self.client_id}-consumer",
                    auto_offset_reset="earliest",
                    enable_auto_commit=False,
                    **self.security,
                )
                await producer.start()
                try:
                    await consumer.start()
                except BaseException:
                    await producer.stop()
                    raise
                self._producer, self._consumer = producer, consumer
            return self._producer, self._consumer

    async def produce(self, partition: int, value: bytes) -> int:
        producer, _ = await self._clients()
        metadata = await producer.send_and_wait(TOPIC, value, partition=partition)
        assert metadata is not None  # None only with acks=0
        return int(metadata.offset)

    async def assign(self, partitions: Collection[int]) -> None:
        _, consumer = await self._clients()
        core = consumer.core
        held = set(core.assignment())
        wanted = [(TOPIC, p) for p in partitions]
        await core.assign(wanted, {tp: 0 for tp in wanted if tp not in held})

    async def poll(self, timeout_s: float) -> list[tuple[int, int, bytes]]:
        consumer = self._consumer
        if consumer is None or not consumer.core.assignment():
            await asyncio.sleep(timeout_s)
            return []
        records = await consumer.core.getmany(1000, timeout_s)
        return [(r.partition, r.offset, r.value or b"") for r in records]

    async def end_offset(self, partition: int) -> int:
        _, consumer = await self._clients()
        found = await consumer.core.list_offsets({(TOPIC, partition): LATEST})
        return int(found[(TOPIC, partition)][0])

    async def close(self) -> None:
        for client in (self._producer, self._consumer):
            if client is not None:
                try:
                    await client.stop()
                except Exception as error:  # closing anyway
                    logger.debug("%s client close: %s", TOPIC, error)
        self._producer = self._consumer = None
