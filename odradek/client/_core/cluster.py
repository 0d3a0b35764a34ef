"""Cluster view of a client: bootstrap, metadata, connections per broker, routing.

How this works and why: the client starts from ``bootstrap.servers``, asks any
reachable broker for Metadata, and from then on knows every broker (node id → host,
port) and every topic's partitions and leaders. Requests go to the right broker
through one pipelined connection per node (``connection``). Metadata is refreshed
when asked (``refresh``), when a request hits a stale-routing error
(NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, ...) and every
``metadata.max.age.ms``. ``request_with_retry`` retries retriable errors with
``retry.backoff.ms`` up to a deadline, which is what every higher layer uses.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import ssl
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from kio.schema.errors import ErrorCode

from odradek.client._core.connection import (
    BrokerAddress,
    BrokerConnection,
    KafkaConnectionError,
    request_entity,
)
from odradek.client._core.errors import KafkaError, is_retriable
from odradek.client._core.sasl import SaslAuthenticationError, SaslCredentials

logger = logging.getLogger(__name__)

METADATA_KEY: Final = 3
# The versions of each API this client can build and read. Higher layers add theirs.
CLIENT_VERSIONS: dict[int, tuple[int, int]] = {
    18: (0, 3),  # ApiVersions
    METADATA_KEY: (1, 12),
    17: (1, 1),  # SaslHandshake (client/_core/sasl.py): v1, with SaslAuthenticate
    36: (0, 2),  # SaslAuthenticate
}
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error: ErrorCode = ErrorCode.none


@dataclass(slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID | None
    partitions: dict[int, PartitionInfo] = field(default_factory=dict)
    error: ErrorCode = ErrorCode.none
    is_internal: bool = False


@dataclass(slots=True)
class ClusterMetadata:
    cluster_id: str | None = None
    controller_id: int = -1
    brokers: dict[int, BrokerAddress] = field(default_factory=dict)
    topics: dict[str, TopicInfo] = field(default_factory=dict)
    updated_monotonic: float = 0.0


DEFAULT_PORT = 9092  # a bootstrap server without a port, as in librdkafka


def parse_bootstrap(servers: str | Iterable[str]) -> list[tuple[str, int]]:
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    addresses = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or host.endswith(":") or item.endswith("]"):  # no port: librdkafka's 9092
            host, port = item, str(DEFAULT_PORT)
        if not port.isdigit():
            raise ValueError(f"bootstrap.servers: {item!r} is not HOST:PORT")
        addresses.append((host.strip("[]") or "localhost", int(port)))
    if not addresses:
        raise ValueError("bootstrap.servers: no servers given")
    return addresses


class Cluster:
    def __init__(
        self,
        bootstrap_servers: str | Iterable[str],
        *,
        client_id: str = "odradek-python",
        request_timeout_ms: int = 30_000,
        retry_backoff_ms: int = 100,
        metadata_max_age_ms: int = 300_000,
        client_versions: Mapping[int, tuple[int, int]] | None = None,
        ssl_context: ssl.SSLContext | None = None,
        sasl: SaslCredentials | None = None,
    ) -> None:
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self.ssl_context = ssl_context  # every broker connection is TLS when set
        self.sasl = sasl
        self.client_id = client_id
        self.request_timeout_s = request_timeout_ms / 1000
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.metadata_max_age_s = metadata_max_age_ms / 1000
        self.client_versions = dict(CLIENT_VERSIONS)
        self.client_versions.update(client_versions or {})
        self.metadata = ClusterMetadata()
        self._connections: dict[int, BrokerConnection] = {}
        self._connecting: dict[int, asyncio.Lock] = {}
        self._refresh_lock = asyncio.Lock()
        self._wanted_topics: set[str] | None = set()  # None = all topics
        self.closed = False
        # called (on the loop) when no broker can be reached, once per outage: the
        # blocking faces report it as librdkafka's _TRANSPORT through error_cb
        self.on_unreachable: Callable[[BaseException], None] | None = None
        self._unreachable = False

    # -- connections -----------------------------------------------------------------
    async def _open(self, address: BrokerAddress) -> BrokerConnection:
        connection = BrokerConnection(
            address,
            client_id=self.client_id,
            request_timeout_s=self.request_timeout_s,
            client_versions=self.client_versions,
            ssl_context=self.ssl_context,
            sasl=self.sasl,
        )
        await connection.connect()
        return connection

    async def connection(self, node_id: int) -> BrokerConnection:
        """The (re)opened connection to broker ``node_id``."""
        existing = self._connections.get(node_id)
        if existing is not None and not existing.closed:
            return existing
        lock = self._connecting.setdefault(node_id, asyncio.Lock())
        async with lock:
            existing = self._connections.get(node_id)
            if existing is not None and not existing.closed:
                return existing
            address = self.metadata.brokers.get(node_id)
            if address is None:
                await self.refresh()
                address = self.metadata.brokers.get(node_id)
                if address is None:
                    raise KafkaError(ErrorCode.broker_not_available, f"unknown node {node_id}")
            connection = await self._open(address)
            self._connections[node_id] = connection
            return connection

    async def open(self, address: BrokerAddress) -> BrokerConnection:
        """A connection of the caller's own, not shared and closed by the caller: a
        group coordinator's, whose JoinGroup the broker may hold for the whole
        rebalance, must not hold up the fetches queued behind it."""
        return await self._open(address)

    async def any_connection(self) -> BrokerConnection:
        """A connection to some live broker (known brokers first, then bootstrap)."""
        for node_id in list(self._connections):
            connection = self._connections[node_id]
            if not connection.closed:
                return connection
        candidates = [
            BrokerAddress(b.node_id, b.host, b.port) for b in self.metadata.brokers.values()
        ]
        candidates += [BrokerAddress(-1 - i, h, p) for i, (h, p) in enumerate(self.bootstrap)]
        random.shuffle(candidates)
        errors = []
        last: Exception | None = None
        for address in candidates:
            try:
                connection = await self._open(address)
            except KafkaConnectionError as error:
                errors.append(str(error))
                last = error
                continue
            self._connections[address.node_id] = connection
            self._unreachable = False
            return connection
        failure = KafkaConnectionError("no broker reachable: " + "; ".join(errors))
        if isinstance(last, SaslAuthenticationError):  # librdkafka's _AUTHENTICATION
            failure = SaslAuthenticationError(str(last))
        if self.on_unreachable is not None and not self._unreachable and not self.closed:
            self._unreachable = True
            self.on_unreachable(failure)
        raise failure

    # -- metadata --------------------------------------------------------------------
    def want_topics(self, topics: Iterable[str] | None) -> None:
        """Topics to keep metadata for (None = all topics in the cluster)."""
        if topics is None:
            self._wanted_topics = None
        elif self._wanted_topics is not None:
            self._wanted_topics.update(topics)

    async def refresh(
        self, topics: Iterable[str] | None = (), *, allow_create: bool = False
    ) -> ClusterMetadata:
        """Fetch metadata for the wanted topics plus ``topics`` (None = all)."""
        async with self._refresh_lock:
            wanted: set[str] | None
            if topics is None or self._wanted_topics is None:
                wanted = None
            else:
                wanted = self._wanted_topics | set(topics)
            connection = await self.any_connection()
            version = connection.version_for(METADATA_KEY)
            topic_entities = None
            if wanted is not None:
                topic_entities = tuple(
                    request_entity(
                        METADATA_KEY, version, "MetadataRequestTopic", name=t, topic_id=None
                    )
                    for t in sorted(wanted)
                )
            request = request_entity(
                METADATA_KEY,
                version,
                topics=topic_entities,
                allow_auto_topic_creation=allow_create,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
            )
            response = await connection.send(request)
            self._apply_metadata(response, wanted)
            return self.metadata

    def _apply_metadata(self, response: Any, wanted: set[str] | None) -> None:
        metadata = self.metadata
        metadata.brokers = {
            b.node_id: BrokerAddress(b.node_id, b.host, b.port) for b in response.brokers
        }
        metadata.cluster_id = getattr(response, "cluster_id", None)
        metadata.controller_id = getattr(response, "controller_id", -1)
        topics: dict[str, TopicInfo] = {} if wanted is None else dict(metadata.topics)
        for topic in response.topics:
            if topic.name is None:
                continue
            info = TopicInfo(
                topic.name,
                getattr(topic, "topic_id", None),
                error=topic.error_code,
                is_internal=getattr(topic, "is_internal", False),
            )
            for p in topic.partitions:
                info.partitions[p.partition_index] = PartitionInfo(
                    topic.name,
                    p.partition_index,
                    p.leader_id,
                    getattr(p, "leader_epoch", -1),
                    tuple(p.replica_nodes),
                    tuple(p.isr_nodes),
                    p.error_code,
                )
            if topic.error_code == ErrorCode.none:
                topics[topic.name] = info
            else:
                topics.pop(topic.name, None)
        metadata.topics = topics
        metadata.updated_monotonic = time.monotonic()
        for node_id in [n for n in self._connections if n >= 0 and n not in metadata.brokers]:
            asyncio.get_running_loop().create_task(self._connections.pop(node_id).close())

    async def maybe_refresh(self) -> None:
        if time.monotonic() - self.metadata.updated_monotonic > self.metadata_max_age_s:
            await self.refresh()

    async def partitions_for(
        self, topic: str, *, allow_create: bool = False
    ) -> dict[int, PartitionInfo]:
        info = self.metadata.topics.get(topic)
        if info is None:
            self.want_topics([topic])
            await self.refresh([topic], allow_create=allow_create)
            info = self.metadata.topics.get(topic)
            if info is None:
                raise KafkaError(ErrorCode.unknown_topic_or_partition, topic)
        return info.partitions

    async def leader_for(self, topic: str, partition: int) -> int:
        partitions = await self.partitions_for(topic)
        info = partitions.get(partition)
        if info is None or info.leader < 0:
            raise KafkaError(ErrorCode.leader_not_available, f"{topic}-{partition}")
        return info.leader

    # -- retries -------------------------------------------------------------------------
    async def with_retry(
        self, attempt: Callable[[], Awaitable[T]], *, deadline_s: float | None = None
    ) -> T:
        """Run ``attempt`` until it succeeds or fails non-retriably or the deadline passes.

        Retriable broker errors and lost connections trigger a metadata refresh and a
        backoff (``retry.backoff.ms``, doubled each time up to 1 s).
        """
        deadline = time.monotonic() + (
            deadline_s if deadline_s is not None else self.request_timeout_s
        )
        backoff = self.retry_backoff_s
        while True:
            try:
                return await attempt()
            except (KafkaError, KafkaConnectionError) as error:
                if not is_retriable(error) or time.monotonic() + backoff > deadline:
                    raise
                logger.debug("retrying after %s", error)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
                with contextlib.suppress(KafkaError, KafkaConnectionError):
                    await self.refresh()

    async def close(self) -> None:
        self.closed = True
        connections = list(self._connections.values())
        self._connections.clear()
        for connection in connections:
            await connection.close()
