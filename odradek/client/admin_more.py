"""The admin client's group, offset, config, record and cluster methods.

How this works and why: ``AdminMethods`` is mixed into ``AdminClient`` (admin.py) and
uses its background loop (``_submit``) and ``Cluster``. Every method returns what
confluent-kafka returns — a dict of ``concurrent.futures.Future`` keyed by the item
asked about (or one future) — and each future resolves to an ``admin_types`` value or
raises ``KafkaException`` with that item's broker error. Requests are routed as Kafka
does: group requests to the group's coordinator (FindCoordinator), ListOffsets and
DeleteRecords to each partition's leader, a broker resource's configs to that broker,
topic configs and DescribeCluster to any broker. Each API is pinned to one version
(``MORE_VERSIONS``) whose request shape the code below writes.
"""

from __future__ import annotations

import concurrent.futures
import datetime
from collections.abc import Callable, Coroutine, Hashable, Iterable, Mapping
from typing import Any, Final, TypeVar

from kio.schema.errors import ErrorCode

from odradek.client.admin_types import (
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
from odradek.client.cluster import Cluster, KafkaError
from odradek.client.connection import BrokerConnection, request_entity
from odradek.client.consumer_protocol import ConsumerProtocolError, decode_assignment
from odradek.client.types import KafkaException, TopicPartition

LIST_OFFSETS: Final = 2
OFFSET_COMMIT: Final = 8
OFFSET_FETCH: Final = 9
FIND_COORDINATOR: Final = 10
DESCRIBE_GROUPS: Final = 15
LIST_GROUPS: Final = 16
DELETE_RECORDS: Final = 21
DESCRIBE_CONFIGS: Final = 32
DELETE_GROUPS: Final = 42
INCREMENTAL_ALTER_CONFIGS: Final = 44
DESCRIBE_CLUSTER: Final = 60
MORE_VERSIONS: Final = {
    LIST_OFFSETS: (7, 7),
    OFFSET_COMMIT: (7, 7),
    OFFSET_FETCH: (7, 7),
    FIND_COORDINATOR: (3, 3),
    DESCRIBE_GROUPS: (5, 5),
    LIST_GROUPS: (4, 4),
    DELETE_RECORDS: (2, 2),
    DESCRIBE_CONFIGS: (4, 4),
    DELETE_GROUPS: (2, 2),
    INCREMENTAL_ALTER_CONFIGS: (1, 1),
    DESCRIBE_CLUSTER: (0, 1),
}
K = TypeVar("K", bound=Hashable)


def _check(code: ErrorCode, what: str, message: str | None = None) -> None:
    if code != ErrorCode.none:
        raise KafkaError(code, f"{what}{': ' + message if message else ''}")


def _as_exception(error: BaseException) -> KafkaException:
    if isinstance(error, KafkaException):
        return error
    return KafkaException(error if isinstance(error, Exception) else RuntimeError(repr(error)))


def _by_topic(parts: Iterable[tuple[str, int, Any]]) -> dict[str, list[tuple[int, Any]]]:
    topics: dict[str, list[tuple[int, Any]]] = {}
    for topic, partition, extra in parts:
        topics.setdefault(topic, []).append((partition, extra))
    return topics


class AdminMethods:
    _cluster: Cluster

    def _submit(self, coroutine: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any]:
        raise NotImplementedError

    # -- plumbing --------------------------------------------------------------------
    def _per_key(
        self, keys: Iterable[K], work: Callable[[K], Coroutine[Any, Any, Any]]
    ) -> dict[K, concurrent.futures.Future[Any]]:
        """One future per key, each running ``work(key)`` on the loop."""
        futures: dict[K, concurrent.futures.Future[Any]] = {}
        for key in keys:
            futures[key] = self._wrapped(work(key))
        return futures

    def _wrapped(self, coroutine: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any]:
        result: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def resolve(done: concurrent.futures.Future[Any]) -> None:
            error = done.exception()
            if error is not None:
                result.set_exception(_as_exception(error))
            else:
                result.set_result(done.result())

        self._submit(coroutine).add_done_callback(resolve)
        return result

    def _split(
        self,
        keys: list[K],
        work: Coroutine[Any, Any, Mapping[K, Any]],
    ) -> dict[K, concurrent.futures.Future[Any]]:
        """One future per key from one coroutine answering ``{key: value | Exception}``."""
        futures: dict[K, concurrent.futures.Future[Any]] = {
            k: concurrent.futures.Future() for k in keys
        }

        def resolve(done: concurrent.futures.Future[Mapping[K, Any]]) -> None:
            error = done.exception()
            for key, future in futures.items():
                if error is not None:
                    future.set_exception(_as_exception(error))
                    continue
                value = done.result().get(key, KafkaError(ErrorCode.unknown_server_error, "none"))
                if isinstance(value, Exception):
                    future.set_exception(_as_exception(value))
                else:
                    future.set_result(value)

        self._submit(work).add_done_callback(resolve)
        return futures

    async def _coordinator(self, group_id: str) -> tuple[BrokerConnection, Node]:
        async def attempt() -> tuple[BrokerConnection, Node]:
            connection = await self._cluster.any_connection()
            v = connection.version_for(FIND_COORDINATOR)
            response = await connection.send(
                request_entity(FIND_COORDINATOR, v, key=group_id, key_type=0)
            )
            _check(response.error_code, f"group {group_id}", response.error_message)
            node = Node(response.node_id, response.host, response.port)
            return await self._cluster.connection(response.node_id), node

        return await self._cluster.with_retry(attempt)

    async def _leaders(self, parts: Iterable[TopicPartition]) -> dict[int, list[tuple[str, int]]]:
        wanted = [(tp.topic, tp.partition) for tp in parts]
        topics = sorted({t for t, _ in wanted})
        self._cluster.want_topics(topics)
        metadata = await self._cluster.refresh(topics)
        by_leader: dict[int, list[tuple[str, int]]] = {}
        for topic, partition in wanted:
            info = metadata.topics.get(topic)
            p = None if info is None else info.partitions.get(partition)
            by_leader.setdefault(-1 if p is None else p.leader, []).append((topic, partition))
        return by_leader

    async def _leader_connections(
        self, parts: Iterable[TopicPartition], found: dict[TopicPartition, Any]
    ) -> list[tuple[BrokerConnection, list[tuple[str, int]]]]:
        """Connections to each leader with its partitions; unknown ones fail in ``found``."""
        result = []
        for leader, led in (await self._leaders(parts)).items():
            if leader < 0:
                for t, p in led:
                    found[TopicPartition(t, p)] = KafkaError(
                        ErrorCode.unknown_topic_or_partition, f"{t}-{p}"
                    )
                continue
            result.append((await self._cluster.connection(leader), led))
        return result

    # -- configs ---------------------------------------------------------------------
    async def _config_connection(self, resource: ConfigResource) -> BrokerConnection:
        if resource.restype == ResourceType.BROKER and resource.name.isdigit():
            await self._cluster.refresh()
            return await self._cluster.connection(int(resource.name))
        return await self._cluster.any_connection()

    def describe_configs(
        self, resources: list[ConfigResource], request_timeout: float | None = None
    ) -> dict[ConfigResource, concurrent.futures.Future[dict[str, ConfigEntry]]]:
        async def work(resource: ConfigResource) -> dict[str, ConfigEntry]:
            connection = await self._config_connection(resource)
            v = connection.version_for(DESCRIBE_CONFIGS)
            entity = request_entity(
                DESCRIBE_CONFIGS,
                v,
                "DescribeConfigsResource",
                resource_type=int(resource.restype),
                resource_name=resource.name,
                configuration_keys=None,
            )
            response = await connection.send(
                request_entity(
                    DESCRIBE_CONFIGS,
                    v,
                    resources=(entity,),
                    include_synonyms=True,
                    include_documentation=False,
                )
            )
            result = response.results[0]
            _check(result.error_code, repr(resource), result.error_message)
            entries = {}
            for c in result.configs:
                source = (
                    ConfigSource(c.config_source)
                    if c.config_source in range(6)
                    else (ConfigSource.UNKNOWN_CONFIG)
                )
                entries[c.name] = ConfigEntry(
                    c.name,
                    c.value,
                    source=source,
                    is_read_only=c.read_only,
                    is_default=source == ConfigSource.DEFAULT_CONFIG,
                    is_sensitive=c.is_sensitive,
                    synonyms={
                        s.name: ConfigEntry(
                            s.name, s.value, ConfigSource(s.source), is_synonym=True
                        )
                        for s in c.synonyms
                        if s.source in range(6)
                    },
                )
            return entries

        return self._per_key(resources, work)

    def incremental_alter_configs(
        self,
        resources: list[ConfigResource],
        request_timeout: float | None = None,
        validate_only: bool = False,
    ) -> dict[ConfigResource, concurrent.futures.Future[None]]:
        async def work(resource: ConfigResource) -> None:
            connection = await self._config_connection(resource)
            v = connection.version_for(INCREMENTAL_ALTER_CONFIGS)
            configs = tuple(
                request_entity(
                    INCREMENTAL_ALTER_CONFIGS,
                    v,
                    "AlterableConfig",
                    name=e.name,
                    config_operation=int(e.incremental_operation or 0),
                    value=e.value,
                )
                for e in resource.incremental_configs
            )
            entity = request_entity(
                INCREMENTAL_ALTER_CONFIGS,
                v,
                "AlterConfigsResource",
                resource_type=int(resource.restype),
                resource_name=resource.name,
                configs=configs,
            )
            response = await connection.send(
                request_entity(
                    INCREMENTAL_ALTER_CONFIGS, v, resources=(entity,), validate_only=validate_only
                )
            )
            result = response.responses[0]
            _check(result.error_code, repr(resource), result.error_message)

        return self._per_key(resources, work)

    # -- groups ----------------------------------------------------------------------
    def list_consumer_groups(
        self, request_timeout: float | None = None, states: Iterable[Any] | None = None
    ) -> concurrent.futures.Future[ListConsumerGroupsResult]:
        async def work() -> ListConsumerGroupsResult:
            metadata = await self._cluster.refresh()
            result = ListConsumerGroupsResult()
            for node_id in sorted(metadata.brokers):
                try:
                    connection = await self._cluster.connection(node_id)
                    v = connection.version_for(LIST_GROUPS)
                    response = await connection.send(
                        request_entity(LIST_GROUPS, v, states_filter=())
                    )
                    _check(response.error_code, f"ListGroups on node {node_id}")
                except Exception as error:
                    result.errors.append(_as_exception(error))
                    continue
                for g in response.groups:
                    state = ConsumerGroupState.from_name(getattr(g, "group_state", "") or "")
                    if states and state not in set(states):
                        continue
                    result.valid.append(
                        ConsumerGroupListing(g.group_id, g.protocol_type == "", state)
                    )
            return result

        return self._wrapped(work())

    def describe_consumer_groups(
        self, group_ids: list[str], request_timeout: float | None = None
    ) -> dict[str, concurrent.futures.Future[ConsumerGroupDescription]]:
        async def work(group_id: str) -> ConsumerGroupDescription:
            connection, node = await self._coordinator(group_id)
            v = connection.version_for(DESCRIBE_GROUPS)
            response = await connection.send(
                request_entity(
                    DESCRIBE_GROUPS, v, groups=(group_id,), include_authorized_operations=False
                )
            )
            g = response.groups[0]
            _check(g.error_code, f"group {group_id}")
            members = []
            for m in g.members:
                partitions: list[TopicPartition] = []
                if g.protocol_type == "consumer" and m.member_assignment:
                    try:
                        assignment = decode_assignment(m.member_assignment)
                        partitions = [
                            TopicPartition(p.topic, p.partition) for p in assignment.partitions
                        ]
                    except ConsumerProtocolError:
                        partitions = []
                members.append(
                    MemberDescription(
                        m.member_id,
                        m.client_id,
                        m.client_host,
                        MemberAssignment(partitions),
                        getattr(m, "group_instance_id", None),
                    )
                )
            return ConsumerGroupDescription(
                g.group_id,
                g.protocol_type == "",
                members,
                g.protocol_data,
                ConsumerGroupState.from_name(g.group_state),
                node,
            )

        return self._per_key(group_ids, work)

    def delete_consumer_groups(
        self, group_ids: list[str], request_timeout: float | None = None
    ) -> dict[str, concurrent.futures.Future[None]]:
        async def work(group_id: str) -> None:
            connection, _ = await self._coordinator(group_id)
            v = connection.version_for(DELETE_GROUPS)
            response = await connection.send(
                request_entity(DELETE_GROUPS, v, groups_names=(group_id,))
            )
            for r in response.results:
                _check(r.error_code, f"group {r.group_id}")

        return self._per_key(group_ids, work)

    def list_consumer_group_offsets(
        self,
        list_consumer_group_offsets_request: list[ConsumerGroupTopicPartitions],
        require_stable: bool = False,
        request_timeout: float | None = None,
    ) -> dict[str, concurrent.futures.Future[ConsumerGroupTopicPartitions]]:
        requests = {r.group_id: r for r in list_consumer_group_offsets_request}

        async def work(group_id: str) -> ConsumerGroupTopicPartitions:
            wanted = requests[group_id].topic_partitions
            connection, _ = await self._coordinator(group_id)
            v = connection.version_for(OFFSET_FETCH)
            topics = None
            if wanted is not None:
                topics = tuple(
                    request_entity(
                        OFFSET_FETCH,
                        v,
                        "OffsetFetchRequestTopic",
                        name=t,
                        partition_indexes=tuple(p for p, _ in ps),
                    )
                    for t, ps in _by_topic((tp.topic, tp.partition, None) for tp in wanted).items()
                )
            response = await connection.send(
                request_entity(
                    OFFSET_FETCH,
                    v,
                    group_id=group_id,
                    topics=topics,
                    require_stable=require_stable,
                )
            )
            _check(response.error_code, f"group {group_id}")
            found = []
            for topic in response.topics:
                for p in topic.partitions:
                    _check(p.error_code, f"{group_id} {topic.name}-{p.partition_index}")
                    found.append(TopicPartition(topic.name, p.partition_index, p.committed_offset))
            return ConsumerGroupTopicPartitions(group_id, sorted(found))

        return self._per_key(list(requests), work)

    def alter_consumer_group_offsets(
        self,
        alter_consumer_group_offsets_request: list[ConsumerGroupTopicPartitions],
        request_timeout: float | None = None,
    ) -> dict[str, concurrent.futures.Future[ConsumerGroupTopicPartitions]]:
        requests = {r.group_id: r for r in alter_consumer_group_offsets_request}

        async def work(group_id: str) -> ConsumerGroupTopicPartitions:
            wanted = list(requests[group_id].topic_partitions or ())
            connection, _ = await self._coordinator(group_id)
            v = connection.version_for(OFFSET_COMMIT)
            grouped = _by_topic((tp.topic, tp.partition, tp.offset) for tp in wanted)
            topics = tuple(
                request_entity(
                    OFFSET_COMMIT,
                    v,
                    "OffsetCommitRequestTopic",
                    name=t,
                    partitions=tuple(
                        request_entity(
                            OFFSET_COMMIT,
                            v,
                            "OffsetCommitRequestPartition",
                            partition_index=p,
                            committed_offset=offset,
                            committed_leader_epoch=-1,
                            committed_metadata="",
                        )
                        for p, offset in ps
                    ),
                )
                for t, ps in grouped.items()
            )
            response = await connection.send(
                request_entity(
                    OFFSET_COMMIT,
                    v,
                    group_id=group_id,
                    generation_id_or_member_epoch=-1,
                    member_id="",
                    group_instance_id=None,
                    topics=topics,
                )
            )
            for topic in response.topics:
                for p in topic.partitions:
                    _check(p.error_code, f"{group_id} {topic.name}-{p.partition_index}")
            return ConsumerGroupTopicPartitions(group_id, wanted)

        return self._per_key(list(requests), work)

    # -- cluster, offsets, records ---------------------------------------------------
    def describe_cluster(
        self, request_timeout: float | None = None, include_authorized_operations: bool = False
    ) -> concurrent.futures.Future[DescribeClusterResult]:
        async def work() -> DescribeClusterResult:
            connection = await self._cluster.any_connection()
            v = connection.version_for(DESCRIBE_CLUSTER)
            response = await connection.send(
                request_entity(
                    DESCRIBE_CLUSTER,
                    v,
                    include_cluster_authorized_operations=include_authorized_operations,
                    endpoint_type=1,
                )
            )
            _check(response.error_code, "DescribeCluster", response.error_message)
            nodes = [Node(b.broker_id, b.host, b.port, b.rack) for b in response.brokers]
            controller = next((n for n in nodes if n.id == response.controller_id), None)
            return DescribeClusterResult(controller, nodes, response.cluster_id)

        return self._wrapped(work())

    def list_offsets(
        self,
        topic_partition_offsets: Mapping[TopicPartition, OffsetSpec],
        isolation_level: int = 0,
        request_timeout: float | None = None,
    ) -> dict[TopicPartition, concurrent.futures.Future[ListOffsetsResultInfo]]:
        specs = {
            TopicPartition(tp.topic, tp.partition): s for tp, s in topic_partition_offsets.items()
        }

        async def work() -> dict[TopicPartition, Any]:
            found: dict[TopicPartition, Any] = {}
            for connection, parts in await self._leader_connections(specs, found):
                v = connection.version_for(LIST_OFFSETS)
                topics = tuple(
                    request_entity(
                        LIST_OFFSETS,
                        v,
                        "ListOffsetsTopic",
                        name=t,
                        partitions=tuple(
                            request_entity(
                                LIST_OFFSETS,
                                v,
                                "ListOffsetsPartition",
                                partition_index=p,
                                current_leader_epoch=-1,
                                timestamp=specs[TopicPartition(t, p)].timestamp,
                            )
                            for p, _ in ps
                        ),
                    )
                    for t, ps in _by_topic((t, p, None) for t, p in parts).items()
                )
                response = await connection.send(
                    request_entity(
                        LIST_OFFSETS,
                        v,
                        replica_id=-1,
                        isolation_level=isolation_level,
                        topics=topics,
                    )
                )
                for topic in response.topics:
                    for r in topic.partitions:
                        key = TopicPartition(topic.name, r.partition_index)
                        if r.error_code != ErrorCode.none:
                            found[key] = KafkaError(
                                r.error_code, f"{topic.name}-{r.partition_index}"
                            )
                        else:
                            epoch = r.leader_epoch if r.leader_epoch >= 0 else None
                            found[key] = ListOffsetsResultInfo(r.offset, r.timestamp, epoch)
            return found

        return self._split(list(specs), work())

    def delete_records(
        self,
        topic_partition_offsets: Iterable[TopicPartition] | Mapping[TopicPartition, int],
        request_timeout: float | None = None,
        operation_timeout: float = 60,
    ) -> dict[TopicPartition, concurrent.futures.Future[DeletedRecords]]:
        """Delete records before an offset: a list of ``TopicPartition``s carrying the
        offset (confluent-kafka's shape) or ``{TopicPartition: offset}``."""
        if isinstance(topic_partition_offsets, Mapping):
            items = {
                TopicPartition(tp.topic, tp.partition): o
                for tp, o in topic_partition_offsets.items()
            }
        else:
            items = {
                TopicPartition(tp.topic, tp.partition): tp.offset for tp in topic_partition_offsets
            }

        async def work() -> dict[TopicPartition, Any]:
            found: dict[TopicPartition, Any] = {}
            for connection, parts in await self._leader_connections(items, found):
                v = connection.version_for(DELETE_RECORDS)
                topics = tuple(
                    request_entity(
                        DELETE_RECORDS,
                        v,
                        "DeleteRecordsTopic",
                        name=t,
                        partitions=tuple(
                            request_entity(
                                DELETE_RECORDS,
                                v,
                                "DeleteRecordsPartition",
                                partition_index=p,
                                offset=o,
                            )
                            for p, o in ps
                        ),
                    )
                    for t, ps in _by_topic(
                        (t, p, items[TopicPartition(t, p)]) for t, p in parts
                    ).items()
                )
                response = await connection.send(
                    request_entity(
                        DELETE_RECORDS,
                        v,
                        topics=topics,
                        timeout=datetime.timedelta(milliseconds=int(operation_timeout * 1000)),
                    )
                )
                for topic in response.topics:
                    for r in topic.partitions:
                        key = TopicPartition(topic.name, r.partition_index)
                        if r.error_code != ErrorCode.none:
                            found[key] = KafkaError(
                                r.error_code, f"{topic.name}-{r.partition_index}"
                            )
                        else:
                            found[key] = DeletedRecords(r.low_watermark)
            return found

        return self._split(list(items), work())
