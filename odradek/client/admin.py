"""Admin client shaped like confluent-kafka's ``AdminClient``.

How this works and why: each method sends one request (to the controller for topic
changes — on a single node any broker) from an asyncio ``Cluster`` running on a
background thread and returns ``{name: concurrent.futures.Future}`` like
confluent-kafka, each future resolving to None or raising ``KafkaException`` with
that item's error. Implemented so far: create_topics, delete_topics,
create_partitions, list_topics here; configs, consumer groups and their offsets,
describe_cluster, list_offsets and delete_records in ``admin_more.AdminMethods``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, Final

from kio.schema.errors import ErrorCode

from odradek.client.admin_more import MORE_VERSIONS, AdminMethods
from odradek.client.blocking import LoopThread
from odradek.client.cluster import Cluster, KafkaError
from odradek.client.config import ClientConfig
from odradek.client.connection import BrokerConnection, request_entity
from odradek.client.types import KafkaException

CREATE_TOPICS: Final = 19
DELETE_TOPICS: Final = 20
CREATE_PARTITIONS: Final = 37
ADMIN_VERSIONS: Final = {
    CREATE_TOPICS: (2, 7),
    DELETE_TOPICS: (1, 6),
    CREATE_PARTITIONS: (0, 3),
    **MORE_VERSIONS,
}


@dataclass
class NewTopic:
    topic: str
    num_partitions: int = -1
    replication_factor: int = -1
    replica_assignment: list[list[int]] | None = None
    config: dict[str, str] = field(default_factory=dict)


@dataclass
class NewPartitions:
    topic: str
    new_total_count: int
    replica_assignment: list[list[int]] | None = None


@dataclass
class PartitionMetadata:
    id: int
    leader: int
    replicas: list[int]
    isrs: list[int]
    error: KafkaError | None = None


@dataclass
class TopicMetadata:
    topic: str
    partitions: dict[int, PartitionMetadata]
    error: KafkaError | None = None


@dataclass
class BrokerMetadata:
    id: int
    host: str
    port: int


@dataclass
class ClusterMetadata:
    cluster_id: str | None
    controller_id: int
    brokers: dict[int, BrokerMetadata]
    topics: dict[str, TopicMetadata]


def _timeout(seconds: float) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=int(max(seconds, 0) * 1000))


class AdminClient(AdminMethods):
    def __init__(self, config: dict[str, Any]) -> None:
        self.config = ClientConfig(config, "admin")
        self._thread = LoopThread("odradek-admin")

        async def build() -> Cluster:
            return Cluster(
                self.config["bootstrap.servers"],
                client_id=self.config["client.id"],
                request_timeout_ms=self.config["request.timeout.ms"],
                retry_backoff_ms=self.config["retry.backoff.ms"],
                client_versions=ADMIN_VERSIONS,
            )

        self._cluster = self._thread.run(build())

    def _submit(self, coroutine: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any]:
        return asyncio.run_coroutine_threadsafe(coroutine, self._thread.loop)

    async def _controller(self) -> BrokerConnection:
        metadata = await self._cluster.refresh()
        if metadata.controller_id >= 0:
            return await self._cluster.connection(metadata.controller_id)
        return await self._cluster.any_connection()

    def _fan_out(
        self, names: list[str], request: Coroutine[Any, Any, dict[str, tuple[ErrorCode, str]]]
    ) -> dict[str, concurrent.futures.Future[None]]:
        futures: dict[str, concurrent.futures.Future[None]] = {
            n: concurrent.futures.Future() for n in names
        }

        def resolve(done: concurrent.futures.Future[dict[str, tuple[ErrorCode, str]]]) -> None:
            error: BaseException | None = done.exception()
            if error is not None and not isinstance(error, Exception):
                error = RuntimeError(repr(error))
            for name, future in futures.items():
                if error is not None:
                    future.set_exception(KafkaException(error))
                    continue
                code, message = done.result().get(
                    name, (ErrorCode.unknown_server_error, "no result")
                )
                if code == ErrorCode.none:
                    future.set_result(None)
                else:
                    future.set_exception(KafkaException(KafkaError(code, message or name)))

        self._submit(request).add_done_callback(resolve)
        return futures

    # -- topics ----------------------------------------------------------------------
    def create_topics(
        self,
        new_topics: list[NewTopic],
        operation_timeout: float = 0,
        request_timeout: float | None = None,
        validate_only: bool = False,
    ) -> dict[str, concurrent.futures.Future[None]]:
        async def go() -> dict[str, tuple[ErrorCode, str]]:
            connection = await self._controller()
            v = connection.version_for(CREATE_TOPICS)
            topics = tuple(
                request_entity(
                    CREATE_TOPICS,
                    v,
                    "CreatableTopic",
                    name=t.topic,
                    num_partitions=t.num_partitions if not t.replica_assignment else -1,
                    replication_factor=t.replication_factor if not t.replica_assignment else -1,
                    assignments=tuple(
                        request_entity(
                            CREATE_TOPICS,
                            v,
                            "CreatableReplicaAssignment",
                            partition_index=i,
                            broker_ids=tuple(replicas),
                        )
                        for i, replicas in enumerate(t.replica_assignment or ())
                    ),
                    configs=tuple(
                        request_entity(CREATE_TOPICS, v, "CreatableTopicConfig", name=k, value=val)
                        for k, val in t.config.items()
                    ),
                )
                for t in new_topics
            )
            response = await connection.send(
                request_entity(
                    CREATE_TOPICS,
                    v,
                    topics=topics,
                    timeout=_timeout(operation_timeout),
                    validate_only=validate_only,
                )
            )
            return {r.name: (r.error_code, r.error_message or "") for r in response.topics}

        return self._fan_out([t.topic for t in new_topics], go())

    def delete_topics(
        self, topics: list[str], operation_timeout: float = 0, request_timeout: float | None = None
    ) -> dict[str, concurrent.futures.Future[None]]:
        async def go() -> dict[str, tuple[ErrorCode, str]]:
            connection = await self._controller()
            v = connection.version_for(DELETE_TOPICS)
            response = await connection.send(
                request_entity(
                    DELETE_TOPICS,
                    v,
                    topic_names=tuple(topics),
                    topics=tuple(
                        request_entity(DELETE_TOPICS, v, "DeleteTopicState", name=t, topic_id=None)
                        for t in topics
                    ),
                    timeout=_timeout(operation_timeout),
                )
            )
            return {
                r.name: (r.error_code, getattr(r, "error_message", None) or "")
                for r in response.responses
            }

        return self._fan_out(list(topics), go())

    def create_partitions(
        self,
        new_partitions: list[NewPartitions],
        operation_timeout: float = 0,
        request_timeout: float | None = None,
        validate_only: bool = False,
    ) -> dict[str, concurrent.futures.Future[None]]:
        async def go() -> dict[str, tuple[ErrorCode, str]]:
            connection = await self._controller()
            v = connection.version_for(CREATE_PARTITIONS)
            topics = tuple(
                request_entity(
                    CREATE_PARTITIONS,
                    v,
                    "CreatePartitionsTopic",
                    name=p.topic,
                    count=p.new_total_count,
                    assignments=None
                    if p.replica_assignment is None
                    else tuple(
                        request_entity(
                            CREATE_PARTITIONS,
                            v,
                            "CreatePartitionsAssignment",
                            broker_ids=tuple(r),
                        )
                        for r in p.replica_assignment
                    ),
                )
                for p in new_partitions
            )
            response = await connection.send(
                request_entity(
                    CREATE_PARTITIONS,
                    v,
                    topics=topics,
                    timeout=_timeout(operation_timeout),
                    validate_only=validate_only,
                )
            )
            return {r.name: (r.error_code, r.error_message or "") for r in response.results}

        return self._fan_out([p.topic for p in new_partitions], go())

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> ClusterMetadata:
        async def go() -> Any:
            if topic is None:
                return await self._cluster.refresh(None)
            self._cluster.want_topics([topic])
            return await self._cluster.refresh([topic])

        future = self._submit(go())
        try:
            metadata = future.result(None if timeout < 0 else timeout)
        except (KafkaError, OSError, ConnectionError) as error:
            raise KafkaException(error) from None
        topics = {
            name: TopicMetadata(
                name,
                {
                    p.partition: PartitionMetadata(
                        p.partition, p.leader, list(p.replicas), list(p.isr)
                    )
                    for p in info.partitions.values()
                },
            )
            for name, info in metadata.topics.items()
            if topic is None or name == topic
        }
        brokers = {
            b.node_id: BrokerMetadata(b.node_id, b.host, b.port) for b in metadata.brokers.values()
        }
        return ClusterMetadata(metadata.cluster_id, metadata.controller_id, brokers, topics)

    def close(self) -> None:
        with_cluster = self._cluster
        try:
            self._submit(with_cluster.close()).result(10)
        finally:
            self._thread.stop()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
