"""Blocking admin client shaped like confluent-kafka's ``AdminClient``.

How this works and why: the asyncio admin core (``core`` and the operation
modules ``topics``, ``configs``, ``groups``, ``records``) runs on
a background thread's event loop; each method here starts one operation there and
returns what confluent-kafka returns — ``{item: concurrent.futures.Future}`` (or one
future) — with each future resolving to a ``types`` value or raising
``KafkaException`` carrying that item's broker error. ``request_timeout`` (seconds)
bounds the whole operation, lookups included; ``operation_timeout`` is what the
broker is told to wait for topic changes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import warnings
from collections.abc import Callable, Coroutine, Hashable, Iterable, Mapping
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from odradek.client._core.cluster import Cluster
from odradek.client._core.config import ClientConfig
from odradek.client._core.errors import KafkaError
from odradek.client._core.loop_thread import LoopThread
from odradek.client._core.types import TopicPartition
from odradek.client.admin import acls as admin_acls
from odradek.client.admin import configs as admin_configs
from odradek.client.admin import groups as admin_groups
from odradek.client.admin import quotas as admin_quotas
from odradek.client.admin import records as admin_records
from odradek.client.admin import scram as admin_scram
from odradek.client.admin import topics as admin_topics
from odradek.client.admin.acls import (
    AclBinding,
    AclBindingFilter,
    AclPermissionType,
    ResourcePatternType,
)
from odradek.client.admin.core import Outcome, as_exception, open_cluster, within
from odradek.client.admin.groups import GroupView, partition_errors
from odradek.client.admin.quotas import (
    ClientQuotaAlteration,
    ClientQuotaEntity,
    ClientQuotaFilter,
)
from odradek.client.admin.topics import MetadataView
from odradek.client.admin.types import (
    AclOperation,
    ClusterMetadata,
    ConfigEntry,
    ConfigResource,
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
from odradek.client.consumer.protocol import ConsumerProtocolError, decode_assignment

K = TypeVar("K", bound=Hashable)
Future = concurrent.futures.Future

__all__ = [  # the value types most callers import from here, as from confluent_kafka.admin
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermissionType",
    "AdminClient",
    "ClusterMetadata",
    "NewPartitions",
    "NewTopic",
    "ResourcePatternType",
    "ResourceType",
    "TopicCollection",
]


def member_partitions(protocol_type: str, assignment: bytes) -> list[TopicPartition]:
    """A consumer-protocol assignment as topic-partitions (empty when not decodable)."""
    if protocol_type != "consumer" or not assignment:
        return []
    try:
        decoded = decode_assignment(assignment)
    except (ConsumerProtocolError, ValueError, IndexError):
        return []
    return [TopicPartition(p.topic, p.partition) for p in decoded.partitions]


def group_description(view: GroupView) -> ConsumerGroupDescription:
    """A DescribeGroups answer in confluent-kafka's shape."""
    members = [
        MemberDescription(
            m.member_id,
            m.client_id,
            m.client_host,
            MemberAssignment(member_partitions(view.protocol_type, m.assignment)),
            m.group_instance_id,
        )
        for m in view.members
    ]
    return ConsumerGroupDescription(
        view.group_id,
        view.protocol_type == "",
        members,
        view.protocol,
        ConsumerGroupState.from_name(view.state),
        view.coordinator,
        AclOperation.from_bits(view.authorized_operations),
        ConsumerGroupType.CLASSIC if view.protocol_type else ConsumerGroupType.UNKNOWN,
    )


def topic_description(metadata: MetadataView, name: str) -> TopicDescription | KafkaError:
    view = next((t for t in metadata.topics if t.name == name), None)
    if view is None:
        return KafkaError(ErrorCode.unknown_topic_or_partition, name)
    if view.error != ErrorCode.none:
        return KafkaError(view.error, name)

    def nodes(ids: Iterable[int]) -> list[Node]:
        return [metadata.node(i) or Node(i, "", -1) for i in ids]

    return TopicDescription(
        view.name,
        view.topic_id,
        view.is_internal,
        [
            TopicPartitionInfo(
                p.id,
                metadata.node(p.leader) if p.leader >= 0 else None,
                nodes(p.replicas),
                nodes(p.isr),
            )
            for p in view.partitions
        ],
        AclOperation.from_bits(view.authorized_operations),
    )


def _unique(items: list[Any], kind: type) -> None:
    """confluent-kafka's checks of an ACL call's list: the right type, no duplicates."""
    if not isinstance(items, list) or not items:
        raise ValueError(f"expected a non-empty list of {kind.__name__}")
    if any(not isinstance(item, kind) for item in items):
        raise TypeError(f"expected a list of {kind.__name__}")
    if len(set(items)) != len(items):
        raise ValueError("duplicate ACL bindings not allowed")


class AdminClient:
    def __init__(self, config: dict[str, Any]) -> None:
        self.config = ClientConfig(config, "admin")
        self._thread = LoopThread("odradek-admin")

        async def build() -> Cluster:
            return open_cluster(self.config)

        try:
            self._cluster = self._thread.run(build())
        except BaseException:
            self._thread.stop()
            raise

    # -- plumbing --------------------------------------------------------------------
    def _start(
        self, work: Coroutine[Any, Any, Any], timeout: float | None
    ) -> concurrent.futures.Future[Any]:
        return asyncio.run_coroutine_threadsafe(within(work, timeout), self._thread.loop)

    def _one(self, work: Coroutine[Any, Any, Any], timeout: float | None) -> Future[Any]:
        """One future for one operation; any failure as ``KafkaException``."""
        result: Future[Any] = Future()

        def resolve(done: Future[Any]) -> None:
            error = done.exception()
            if error is not None:
                result.set_exception(as_exception(error))
            else:
                result.set_result(done.result())

        self._start(work, timeout).add_done_callback(resolve)
        return result

    def _each(
        self,
        keys: Iterable[K],
        work: Callable[[K], Coroutine[Any, Any, Any]],
        timeout: float | None,
    ) -> dict[K, Future[Any]]:
        """One operation per key, each with its own future."""
        return {key: self._one(work(key), timeout) for key in keys}

    def _split(
        self,
        keys: Iterable[K],
        work: Coroutine[Any, Any, Mapping[K, Any]],
        timeout: float | None,
        what: Callable[[K], str] = str,
    ) -> dict[K, Future[Any]]:
        """One future per key from one operation answering ``{key: value}``: an
        ``Outcome`` resolves to None or fails, an exception fails, anything else is the
        result; a key the broker did not answer fails."""
        futures: dict[K, Future[Any]] = {k: Future() for k in keys}

        def resolve(done: Future[Mapping[K, Any]]) -> None:
            error = done.exception()
            for key, future in futures.items():
                if error is not None:
                    future.set_exception(as_exception(error))
                    continue
                value = done.result().get(key)
                if value is None:
                    value = KafkaError(ErrorCode.unknown_server_error, f"no answer for {key}")
                if isinstance(value, Outcome):
                    value = value.error(what(key))
                if isinstance(value, BaseException):
                    future.set_exception(as_exception(value))
                else:
                    future.set_result(value)

        self._start(work, timeout).add_done_callback(resolve)
        return futures

    # -- topics ----------------------------------------------------------------------
    def create_topics(
        self,
        new_topics: list[NewTopic],
        operation_timeout: float = 0,
        request_timeout: float | None = None,
        validate_only: bool = False,
    ) -> dict[str, Future[None]]:
        work = admin_topics.create_topics(
            self._cluster, new_topics, operation_timeout, validate_only
        )
        return self._split([t.topic for t in new_topics], work, request_timeout)

    def delete_topics(
        self, topics: list[str], operation_timeout: float = 0, request_timeout: float | None = None
    ) -> dict[str, Future[None]]:
        work = admin_topics.delete_topics(self._cluster, topics, operation_timeout)
        return self._split(list(topics), work, request_timeout)

    def create_partitions(
        self,
        new_partitions: list[NewPartitions],
        operation_timeout: float = 0,
        request_timeout: float | None = None,
        validate_only: bool = False,
    ) -> dict[str, Future[None]]:
        work = admin_topics.create_partitions(
            self._cluster, new_partitions, operation_timeout, validate_only
        )
        return self._split([p.topic for p in new_partitions], work, request_timeout)

    def describe_topics(
        self,
        topics: TopicCollection,
        request_timeout: float | None = None,
        include_authorized_operations: bool = False,
    ) -> dict[str, Future[TopicDescription]]:
        if not isinstance(topics, TopicCollection):
            raise TypeError("describe_topics expects a TopicCollection")
        names = list(dict.fromkeys(topics.topic_names))

        async def work() -> dict[str, TopicDescription | KafkaError]:
            metadata = await admin_topics.fetch_metadata(
                self._cluster, names, include_authorized_operations
            )
            return {name: topic_description(metadata, name) for name in names}

        return self._split(names, work(), request_timeout)

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> ClusterMetadata:
        """Cluster metadata (all topics, or ``topic`` with its error when it is unknown)."""
        future = self._one(
            admin_topics.fetch_metadata(self._cluster, None if topic is None else [topic]),
            None if timeout < 0 else timeout,
        )
        metadata: MetadataView = future.result()
        return admin_topics.cluster_metadata(metadata)

    # -- ACLs (acls.py) ----------------------------------------------------------------
    def create_acls(
        self, acls: list[AclBinding], request_timeout: float | None = None
    ) -> dict[AclBinding, Future[None]]:
        """One future per binding: None once created (or if it existed)."""
        _unique(acls, AclBinding)
        return self._split(list(acls), admin_acls.create_acls(self._cluster, acls), request_timeout)

    def describe_acls(
        self, acl_binding_filter: AclBindingFilter, request_timeout: float | None = None
    ) -> Future[list[AclBinding]]:
        if not isinstance(acl_binding_filter, AclBindingFilter):
            raise TypeError("describe_acls expects an AclBindingFilter")
        return self._one(
            admin_acls.describe_acls(self._cluster, acl_binding_filter), request_timeout
        )

    def delete_acls(
        self, acl_binding_filters: list[AclBindingFilter], request_timeout: float | None = None
    ) -> dict[AclBindingFilter, Future[list[AclBinding]]]:
        """One future per filter: the bindings it deleted."""
        _unique(acl_binding_filters, AclBindingFilter)
        work = admin_acls.delete_acls(self._cluster, acl_binding_filters)
        return self._split(list(acl_binding_filters), work, request_timeout)

    # -- configs ---------------------------------------------------------------------
    def describe_configs(
        self, resources: list[ConfigResource], request_timeout: float | None = None
    ) -> dict[ConfigResource, Future[dict[str, ConfigEntry]]]:
        async def work() -> dict[ConfigResource, Any]:
            answers = await admin_configs.describe_configs(self._cluster, resources)
            return {r: a.entries if a.outcome.ok else a.outcome for r, a in answers.items()}

        return self._split(resources, work(), request_timeout, str)

    def alter_configs(
        self,
        resources: list[ConfigResource],
        request_timeout: float | None = None,
        validate_only: bool = False,
    ) -> dict[ConfigResource, Future[None]]:
        """Deprecated in Kafka (use ``incremental_alter_configs``): replaces each
        resource's dynamic configs with ``set_config``; unlisted keys revert to defaults."""
        warnings.warn(
            "alter_configs is deprecated: use incremental_alter_configs",
            DeprecationWarning,
            stacklevel=2,
        )
        work = admin_configs.alter_configs(self._cluster, resources, validate_only)
        return self._split(resources, work, request_timeout, str)

    def incremental_alter_configs(
        self,
        resources: list[ConfigResource],
        request_timeout: float | None = None,
        validate_only: bool = False,
    ) -> dict[ConfigResource, Future[None]]:
        work = admin_configs.incremental_alter_configs(self._cluster, resources, validate_only)
        return self._split(resources, work, request_timeout, str)

    # -- client quotas (quotas.py) ---------------------------------------------------
    def describe_client_quotas(
        self, quota_filter: ClientQuotaFilter | None = None, request_timeout: float | None = None
    ) -> Future[dict[ClientQuotaEntity, dict[str, float]]]:
        """The quotas of the entities ``quota_filter`` matches (default: all)."""
        work = admin_quotas.describe_client_quotas(
            self._cluster, quota_filter or ClientQuotaFilter.all()
        )
        return self._one(work, request_timeout)

    def alter_client_quotas(
        self,
        alterations: list[ClientQuotaAlteration],
        validate_only: bool = False,
        request_timeout: float | None = None,
    ) -> dict[ClientQuotaEntity, Future[None]]:
        """Set or remove quota keys; one future per entity."""
        work = admin_quotas.alter_client_quotas(self._cluster, alterations, validate_only)
        return self._split([a.entity for a in alterations], work, request_timeout)

    # -- groups ----------------------------------------------------------------------
    def list_consumer_groups(
        self,
        request_timeout: float | None = None,
        states: Iterable[ConsumerGroupState] | None = None,
        types: Iterable[ConsumerGroupType] | None = None,
    ) -> Future[ListConsumerGroupsResult]:
        wanted_states = set(states or ())
        wanted_types = set(types or ())

        async def work() -> ListConsumerGroupsResult:
            listings = await admin_groups.list_groups(self._cluster)
            result = ListConsumerGroupsResult(errors=[as_exception(e) for e in listings.errors])
            for g in listings.groups:
                state = ConsumerGroupState.from_name(g.state)
                kind = ConsumerGroupType.from_name(g.group_type)
                if wanted_states and state not in wanted_states:
                    continue
                if wanted_types and kind not in wanted_types:
                    continue
                result.valid.append(
                    ConsumerGroupListing(g.group_id, g.protocol_type == "", state, kind)
                )
            return result

        return self._one(work(), request_timeout)

    def describe_consumer_groups(
        self,
        group_ids: list[str],
        request_timeout: float | None = None,
        include_authorized_operations: bool = False,
    ) -> dict[str, Future[ConsumerGroupDescription]]:
        async def work() -> dict[str, Any]:
            views = await admin_groups.describe_groups(
                self._cluster,
                group_ids,
                include_authorized_operations=include_authorized_operations,
            )
            found: dict[str, Any] = {}
            for group_id, view in views.items():
                if isinstance(view, Exception):
                    found[group_id] = view
                elif view.error != ErrorCode.none:
                    found[group_id] = KafkaError(view.error, f"group {group_id}")
                else:
                    found[group_id] = group_description(view)
            return found

        return self._split(list(dict.fromkeys(group_ids)), work(), request_timeout)

    def delete_consumer_groups(
        self, group_ids: list[str], request_timeout: float | None = None
    ) -> dict[str, Future[None]]:
        work = admin_groups.delete_groups(self._cluster, group_ids)
        return self._split(list(dict.fromkeys(group_ids)), work, request_timeout, "group {}".format)

    def list_consumer_group_offsets(
        self,
        list_consumer_group_offsets_request: list[ConsumerGroupTopicPartitions],
        require_stable: bool = False,
        request_timeout: float | None = None,
    ) -> dict[str, Future[ConsumerGroupTopicPartitions]]:
        requests = {r.group_id: r for r in list_consumer_group_offsets_request}

        async def work(group_id: str) -> ConsumerGroupTopicPartitions:
            wanted = requests[group_id].topic_partitions
            offsets = await admin_groups.list_group_offsets(
                self._cluster, group_id, wanted, require_stable
            )
            found = []
            for c in offsets:
                if c.error != ErrorCode.none:
                    raise KafkaError(c.error, f"group {group_id} {c.topic}-{c.partition}")
                # Like librdkafka: "nothing committed" is OFFSET_INVALID (-1001).
                found.append(
                    TopicPartition(c.topic, c.partition, c.offset if c.offset >= 0 else -1001)
                )
            return ConsumerGroupTopicPartitions(group_id, found)

        return self._each(list(requests), work, request_timeout)

    def alter_consumer_group_offsets(
        self,
        alter_consumer_group_offsets_request: list[ConsumerGroupTopicPartitions],
        request_timeout: float | None = None,
    ) -> dict[str, Future[ConsumerGroupTopicPartitions]]:
        requests = {r.group_id: r for r in alter_consumer_group_offsets_request}

        async def work(group_id: str) -> ConsumerGroupTopicPartitions:
            wanted = list(requests[group_id].topic_partitions or ())
            for tp in wanted:
                if tp.offset < 0:
                    raise KafkaError(
                        ErrorCode.invalid_request, f"offset of {tp.topic}-{tp.partition} < 0"
                    )
            answers = await admin_groups.alter_group_offsets(self._cluster, group_id, wanted)
            error = partition_errors(group_id, answers)
            if error is not None:
                raise error
            return ConsumerGroupTopicPartitions(group_id, wanted)

        return self._each(list(requests), work, request_timeout)

    def delete_consumer_group_offsets(
        self,
        delete_consumer_group_offsets_request: list[ConsumerGroupTopicPartitions],
        request_timeout: float | None = None,
    ) -> dict[str, Future[ConsumerGroupTopicPartitions]]:
        """OffsetDelete: forget each group's committed offsets of the given partitions.

        Not in confluent-kafka's Python API (librdkafka has DeleteConsumerGroupOffsets);
        shaped like ``alter_consumer_group_offsets``: a future per group resolving to the
        request's ``ConsumerGroupTopicPartitions``, or failing with the first error.
        """
        requests = {r.group_id: r for r in delete_consumer_group_offsets_request}
        for r in requests.values():
            if not r.topic_partitions:
                raise ValueError(f"group {r.group_id}: give the partitions whose offsets to delete")

        async def work(group_id: str) -> ConsumerGroupTopicPartitions:
            wanted = [
                TopicPartition(tp.topic, tp.partition)
                for tp in requests[group_id].topic_partitions or ()
            ]
            answers = await admin_groups.delete_group_offsets(self._cluster, group_id, wanted)
            error = partition_errors(group_id, answers)
            if error is not None:
                raise error
            return ConsumerGroupTopicPartitions(group_id, wanted)

        return self._each(list(requests), work, request_timeout)

    # -- cluster, offsets, records ---------------------------------------------------
    def describe_cluster(
        self, request_timeout: float | None = None, include_authorized_operations: bool = False
    ) -> Future[DescribeClusterResult]:
        work = admin_records.describe_cluster(self._cluster, include_authorized_operations)
        return self._one(work, request_timeout)

    def list_offsets(
        self,
        topic_partition_offsets: Mapping[TopicPartition, OffsetSpec],
        isolation_level: int = 0,
        request_timeout: float | None = None,
    ) -> dict[TopicPartition, Future[ListOffsetsResultInfo]]:
        timestamps = {
            TopicPartition(tp.topic, tp.partition): spec.timestamp
            for tp, spec in topic_partition_offsets.items()
        }
        work = admin_records.list_offsets(self._cluster, timestamps, int(isolation_level))
        return self._split(list(timestamps), work, request_timeout)

    def delete_records(
        self,
        topic_partition_offsets: Iterable[TopicPartition] | Mapping[TopicPartition, int],
        request_timeout: float | None = None,
        operation_timeout: float = 60,
    ) -> dict[TopicPartition, Future[DeletedRecords]]:
        """Delete records before an offset: a list of ``TopicPartition``s carrying the
        offset (confluent-kafka's shape) or ``{TopicPartition: offset}``."""
        if isinstance(topic_partition_offsets, Mapping):
            before = {
                TopicPartition(tp.topic, tp.partition): o
                for tp, o in topic_partition_offsets.items()
            }
        else:
            before = {
                TopicPartition(tp.topic, tp.partition): tp.offset for tp in topic_partition_offsets
            }
        work = admin_records.delete_records(self._cluster, before, operation_timeout)
        return self._split(list(before), work, request_timeout)

    # -- SCRAM credentials (scram.py) ------------------------------------------------
    def describe_user_scram_credentials(
        self, users: list[str] | None = None, request_timeout: float | None = None
    ) -> Future[dict[str, admin_scram.UserScramCredentialsDescription]] | dict[str, Future[Any]]:
        """confluent-kafka's shape: users None -> one future of ``{user:
        description}`` (every user with a credential); a list -> ``{user: future}``."""
        admin_scram.check_users(users)
        work = admin_scram.describe_user_scram_credentials(self._cluster, users)
        if users is not None:
            return self._split(list(dict.fromkeys(users)), work, request_timeout)

        async def every_user() -> dict[str, admin_scram.UserScramCredentialsDescription]:
            answers = await work
            found = {}
            for user, answer in answers.items():
                if isinstance(answer, KafkaError):
                    raise answer
                found[user] = answer
            return found

        return self._one(every_user(), request_timeout)

    def alter_user_scram_credentials(
        self,
        alterations: list[admin_scram.UserScramCredentialAlteration],
        request_timeout: float | None = None,
    ) -> dict[str, Future[None]]:
        """One request; ``{user: future}`` resolving to None or raising that user's
        error (a user named twice is DUPLICATE_RESOURCE, as Kafka answers)."""
        admin_scram.check_alterations(alterations)
        users = list(dict.fromkeys(a.user for a in alterations))
        work = admin_scram.alter_user_scram_credentials(self._cluster, alterations)
        return self._split(users, work, request_timeout, lambda user: f"user {user}")

    # -- lifecycle -------------------------------------------------------------------
    def poll(self, timeout: float | None = None) -> int:
        """Futures resolve on the admin's own thread, so there are no events to serve."""
        return 0

    def close(self) -> None:
        """Close the connections and cancel operations still running (their futures fail)."""

        async def shutdown() -> None:
            await self._cluster.close()
            current = asyncio.current_task()
            leftovers = [t for t in asyncio.all_tasks() if t is not current]
            for task in leftovers:
                task.cancel()
            await asyncio.gather(*leftovers, return_exceptions=True)

        try:
            self._thread.run(shutdown(), 10)
        finally:
            self._thread.stop()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
