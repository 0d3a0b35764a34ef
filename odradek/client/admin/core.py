"""The asyncio admin core: versions, routing and error plumbing shared by every admin call.

How this works and why: the admin operations (``topics``, ``configs``,
``groups``, ``records``) are plain async functions over a ``Cluster``;
they return the broker's answer per item (an ``Outcome`` or a value, or an exception
for that item) and never decide how a caller sees it. Two faces sit on top: the
blocking, confluent-kafka-shaped ``AdminClient`` (a dict of futures) and the asyncio,
aiokafka-shaped ``AIOKafkaAdminClient`` (awaited results, raising on errors). Requests
are routed as Kafka does: topic changes to the controller, group requests to the
group's coordinator (FindCoordinator), ListOffsets and DeleteRecords to each
partition's leader, a broker's configs to that broker, everything else to any broker.
``ADMIN_VERSIONS`` is the one table of API versions whose shapes the operations write.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Awaitable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from kio.schema.errors import ErrorCode

from odradek.client._core.cluster import Cluster
from odradek.client._core.config import ClientConfig
from odradek.client._core.connection import BrokerConnection, request_entity
from odradek.client._core.errors import KafkaError
from odradek.client._core.sasl import sasl_credentials
from odradek.client._core.types import KafkaException, TopicPartition
from odradek.client.admin.types import Node

LIST_OFFSETS: Final = 2
METADATA: Final = 3
OFFSET_COMMIT: Final = 8
OFFSET_FETCH: Final = 9
FIND_COORDINATOR: Final = 10
DESCRIBE_GROUPS: Final = 15
LIST_GROUPS: Final = 16
CREATE_TOPICS: Final = 19
DELETE_TOPICS: Final = 20
DELETE_RECORDS: Final = 21
DESCRIBE_CONFIGS: Final = 32
ALTER_CONFIGS: Final = 33
CREATE_PARTITIONS: Final = 37
DELETE_GROUPS: Final = 42
INCREMENTAL_ALTER_CONFIGS: Final = 44
OFFSET_DELETE: Final = 47
DESCRIBE_USER_SCRAM_CREDENTIALS: Final = 50
ALTER_USER_SCRAM_CREDENTIALS: Final = 51
DESCRIBE_ACLS: Final = 29
CREATE_ACLS: Final = 30
DELETE_ACLS: Final = 31
DESCRIBE_CLUSTER: Final = 60
# The versions each operation writes and reads; requests are built once with every
# field of the range (``request_entity`` keeps the fields the chosen version has).
ADMIN_VERSIONS: Final = {
    LIST_OFFSETS: (7, 7),
    METADATA: (1, 12),
    OFFSET_COMMIT: (7, 7),
    OFFSET_FETCH: (7, 7),
    FIND_COORDINATOR: (3, 3),
    DESCRIBE_GROUPS: (5, 5),
    LIST_GROUPS: (4, 5),
    CREATE_TOPICS: (2, 7),
    DELETE_TOPICS: (1, 6),
    DELETE_RECORDS: (2, 2),
    DESCRIBE_CONFIGS: (4, 4),
    ALTER_CONFIGS: (0, 2),
    CREATE_PARTITIONS: (0, 3),
    DELETE_GROUPS: (2, 2),
    INCREMENTAL_ALTER_CONFIGS: (1, 1),
    OFFSET_DELETE: (0, 0),
    DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    DESCRIBE_CLUSTER: (0, 1),
    48: (0, 1),  # DescribeClientQuotas (quotas.py)
    49: (0, 1),  # AlterClientQuotas
    DESCRIBE_ACLS: (1, 3),
    CREATE_ACLS: (1, 3),
    DELETE_ACLS: (1, 3),
}
T = TypeVar("T")
K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class Outcome:
    """One item's answer: the error code (``none`` for success) and the broker's message."""

    code: ErrorCode
    message: str | None = None

    @property
    def ok(self) -> bool:
        return self.code == ErrorCode.none

    def error(self, what: str) -> KafkaError | None:
        if self.ok:
            return None
        return KafkaError(self.code, f"{what}: {self.message}" if self.message else what)


class Answers(dict[K, V]):
    """Per-item answers and the broker's throttle time (the largest of the requests)."""

    throttle_time_ms: int = 0

    def throttled(self, response: Any) -> None:
        delay = getattr(response, "throttle_time", None)
        if isinstance(delay, datetime.timedelta):
            self.throttle_time_ms = max(self.throttle_time_ms, int(delay.total_seconds() * 1000))


def check(code: ErrorCode, what: str, message: str | None = None) -> None:
    """Raise the broker's error for ``what`` unless ``code`` is ``none``."""
    if code != ErrorCode.none:
        raise KafkaError(code, f"{what}{': ' + message if message else ''}")


def as_exception(error: BaseException) -> KafkaException:
    """Any failure as the blocking face's ``KafkaException``."""
    if isinstance(error, KafkaException):
        return error
    if isinstance(error, asyncio.TimeoutError | TimeoutError):
        return KafkaException(KafkaError(ErrorCode.request_timed_out, "admin request timed out"))
    return KafkaException(error if isinstance(error, Exception) else RuntimeError(repr(error)))


def by_topic(parts: Iterable[tuple[str, int, Any]]) -> dict[str, list[tuple[int, Any]]]:
    """``(topic, partition, extra)`` triples grouped by topic, in first-seen order."""
    topics: dict[str, list[tuple[int, Any]]] = {}
    for topic, partition, extra in parts:
        topics.setdefault(topic, []).append((partition, extra))
    return topics


def open_cluster(config: ClientConfig) -> Cluster:
    """The admin's ``Cluster`` (call on the loop that will use it)."""
    return Cluster(
        config["bootstrap.servers"],
        client_id=config["client.id"],
        request_timeout_ms=config["request.timeout.ms"],
        retry_backoff_ms=config["retry.backoff.ms"],
        metadata_max_age_ms=config["metadata.max.age.ms"],
        client_versions=ADMIN_VERSIONS,
        ssl_context=config.ssl_context,
        sasl=sasl_credentials(config),
    )


async def within(work: Awaitable[T], timeout_s: float | None) -> T:
    """``work`` bounded by a caller's ``request_timeout`` (None: the cluster's own)."""
    if timeout_s is None:
        return await work
    return await asyncio.wait_for(work, max(timeout_s, 0.001))


async def controller(cluster: Cluster) -> BrokerConnection:
    metadata = await cluster.refresh()
    if metadata.controller_id >= 0:
        return await cluster.connection(metadata.controller_id)
    return await cluster.any_connection()


async def send_any(cluster: Cluster, api_key: int, **fields: Any) -> Any:
    """One request to any broker, at the version both sides know."""
    connection = await cluster.any_connection()
    return await connection.send(request_entity(api_key, connection.version_for(api_key), **fields))


async def coordinator(
    cluster: Cluster, group_id: str, node_id: int | None = None, key_type: int = 0
) -> tuple[BrokerConnection, Node]:
    """The connection to the coordinator of ``group_id`` (``key_type`` 0; 1 for a
    transactional id), found with retries, and its node; ``node_id`` skips the lookup."""
    if node_id is not None:
        connection = await cluster.connection(node_id)
        address = connection.address
        return connection, Node(node_id, address.host, address.port)

    async def attempt() -> tuple[BrokerConnection, Node]:
        connection = await cluster.any_connection()
        v = connection.version_for(FIND_COORDINATOR)
        response = await connection.send(
            request_entity(FIND_COORDINATOR, v, key=group_id, key_type=key_type)
        )
        check(response.error_code, f"group {group_id}", response.error_message)
        node = Node(response.node_id, response.host, response.port)
        return await cluster.connection(response.node_id), node

    return await cluster.with_retry(attempt)


async def leader_connections(
    cluster: Cluster, parts: Iterable[TopicPartition], found: dict[TopicPartition, Any]
) -> list[tuple[BrokerConnection, list[tuple[str, int]]]]:
    """Each leader's connection with the partitions it leads; unknown ones fail in ``found``."""
    wanted = [(tp.topic, tp.partition) for tp in parts]
    topics = sorted({t for t, _ in wanted})
    cluster.want_topics(topics)
    metadata = await cluster.refresh(topics)
    by_leader: dict[int, list[tuple[str, int]]] = {}
    for topic, partition in wanted:
        info = metadata.topics.get(topic)
        p = None if info is None else info.partitions.get(partition)
        if p is None or p.leader < 0:
            code = ErrorCode.unknown_topic_or_partition if p is None else p.error
            if code == ErrorCode.none:
                code = ErrorCode.leader_not_available
            found[TopicPartition(topic, partition)] = KafkaError(code, f"{topic}-{partition}")
            continue
        by_leader.setdefault(p.leader, []).append((topic, partition))
    return [(await cluster.connection(leader), led) for leader, led in by_leader.items()]
