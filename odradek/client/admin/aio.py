"""Asyncio admin client shaped like aiokafka's ``AIOKafkaAdminClient``.

How this works and why: the same admin core as the blocking ``AdminClient``
(``topics``, ``configs``, ``groups``, ``records``), awaited on
the caller's event loop and answered in aiokafka's shapes: topic creation and deletion,
configs and group descriptions come back as responses whose entries unpack like
aiokafka's (``for topic, code, message in r.topic_errors``); ``create_partitions``,
``list_consumer_groups``, ``list_consumer_group_offsets`` and ``delete_records`` raise
the first broker error, as aiokafka does. Errors are aiokafka's classes (aio_errors.py;
a broker's is also odradek's ``KafkaError``, with ``code()``); partitions come back as
``(topic, partition)`` pairs. Keyword arguments map to Kafka's client property
names and are validated like every other client's. Beyond aiokafka: ``delete_consumer_groups``,
``alter_consumer_group_offsets`` and ``delete_consumer_group_offsets``, in the same style.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.client._core.aio_errors import aio_boundary
from odradek.client._core.aio_types import TopicPartition, as_pair
from odradek.client._core.cluster import Cluster
from odradek.client._core.config import ClientConfig, ConfigError
from odradek.client._core.errors import KafkaError
from odradek.client._core.types import TopicPartition as CoreTopicPartition
from odradek.client.admin import configs as admin_configs
from odradek.client.admin import groups as admin_groups
from odradek.client.admin import quotas as admin_quotas
from odradek.client.admin import records as admin_records
from odradek.client.admin import scram as admin_scram
from odradek.client.admin import topics as admin_topics
from odradek.client.admin.aio_types import (
    AlterConfigsResponse,
    AlteredResource,
    ConfigEntryTuple,
    ConfigResource,
    ConfigResourceType,
    ConfigSynonym,
    CreatePartitionsResponse,
    CreateTopicsResponse,
    DeleteTopicsResponse,
    DescribeConfigsResponse,
    DescribedGroup,
    DescribedResource,
    DescribeGroupsResponse,
    GroupMember,
    NewPartitions,
    NewTopic,
    OffsetAndMetadata,
    RecordsToDelete,
    TopicError,
    TopicErrorCode,
)
from odradek.client.admin.core import coordinator, open_cluster
from odradek.client.admin.groups import partition_errors
from odradek.client.admin.quotas import ClientQuotaAlteration, ClientQuotaEntity, ClientQuotaFilter
from odradek.client.admin.types import ConfigResource as Resource
from odradek.client.admin.types import NewPartitions as TopicGrowth
from odradek.client.admin.types import NewTopic as TopicSpec
from odradek.client.admin.types import ResourceType

__all__ = [
    "AIOKafkaAdminClient",
    "ConfigResource",
    "ConfigResourceType",
    "NewPartitions",
    "NewTopic",
    "OffsetAndMetadata",
    "RecordsToDelete",
]

_KEYWORDS = {
    "bootstrap_servers": "bootstrap.servers",
    "client_id": "client.id",
    "request_timeout_ms": "request.timeout.ms",
    "retry_backoff_ms": "retry.backoff.ms",
    "metadata_max_age_ms": "metadata.max.age.ms",
    "security_protocol": "security.protocol",
    "ssl_context": "ssl.context",
    # SASL (client/_core/sasl.py): aiokafka's names for PLAIN's and SCRAM's user
    "sasl_mechanism": "sasl.mechanism",
    "sasl_plain_username": "sasl.username",
    "sasl_plain_password": "sasl.password",
    "sasl_oauth_token_provider": "sasl.oauth.token.provider",  # OAUTHBEARER
}
# Accepted for aiokafka compatibility and without effect here: aiokafka itself ignores
# ``loop`` and ``api_version``; connections stay open until close().
_IGNORED = frozenset({"loop", "api_version", "connections_max_idle_ms"})
DEFAULT_PORT = 9092


def _servers(value: str | Sequence[str]) -> str:
    items = value.split(",") if isinstance(value, str) else list(value)
    return ",".join(
        s if s.rpartition(":")[2].isdigit() else f"{s}:{DEFAULT_PORT}"
        for s in (i.strip() for i in items)
        if s
    )


def _raise(code: ErrorCode | int, message: str) -> None:
    code = ErrorCode(code)
    if code != ErrorCode.none:
        raise KafkaError(code, message)


class AIOKafkaAdminClient:
    def __init__(self, **kwargs: Any) -> None:
        properties: dict[str, Any] = {
            "bootstrap.servers": "localhost",
            "client.id": "odradek-python",
            "request.timeout.ms": 40_000,
        }
        for name, value in kwargs.items():
            if name in _IGNORED:
                continue
            key = _KEYWORDS.get(name)
            if key is None:
                raise TypeError(f"unknown argument {name!r}")
            properties[key] = value
        servers = properties["bootstrap.servers"]
        if not isinstance(servers, str | list | tuple):
            raise ConfigError("bootstrap.servers", f"expected a string or list, got {servers!r}")
        properties["bootstrap.servers"] = _servers(servers)
        self.config = ClientConfig(properties, "admin")
        self._cluster: Cluster | None = None
        self._closed = False

    @aio_boundary
    async def start(self) -> None:
        """Connect and read the cluster's metadata (raises when no broker answers)."""
        if self._cluster is not None:
            return
        cluster = open_cluster(self.config)
        try:
            await cluster.refresh()
        except BaseException:
            await cluster.close()
            raise
        self._cluster = cluster

    async def close(self) -> None:
        if self._cluster is not None and not self._closed:
            await self._cluster.close()
        self._closed = True

    async def __aenter__(self) -> AIOKafkaAdminClient:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def cluster(self) -> Cluster:
        if self._cluster is None:
            raise RuntimeError("call start() first")
        if self._closed:
            raise RuntimeError("admin client is closed")
        return self._cluster

    def _timeout_s(self, timeout_ms: int | None) -> float:
        return (timeout_ms or self.config["request.timeout.ms"]) / 1000

    # -- topics ----------------------------------------------------------------------
    @aio_boundary
    async def create_topics(
        self, new_topics: list[NewTopic], timeout_ms: int | None = None, validate_only: bool = False
    ) -> CreateTopicsResponse:
        specs = [
            TopicSpec(
                t.name,
                t.num_partitions,
                t.replication_factor,
                [list(t.replica_assignments[p]) for p in sorted(t.replica_assignments)] or None,
                {k: str(v) for k, v in t.topic_configs.items()},
            )
            for t in new_topics
        ]
        answers = await admin_topics.create_topics(
            self.cluster, specs, self._timeout_s(timeout_ms), validate_only
        )
        return CreateTopicsResponse(
            answers.throttle_time_ms,
            [TopicError(n, int(o.code), o.message) for n, o in answers.items()],
        )

    @aio_boundary
    async def delete_topics(
        self, topics: list[str], timeout_ms: int | None = None
    ) -> DeleteTopicsResponse:
        answers = await admin_topics.delete_topics(
            self.cluster, topics, self._timeout_s(timeout_ms)
        )
        return DeleteTopicsResponse(
            answers.throttle_time_ms, [TopicErrorCode(n, int(o.code)) for n, o in answers.items()]
        )

    @aio_boundary
    async def list_topics(self) -> list[str]:
        metadata = await admin_topics.fetch_metadata(self.cluster, None)
        return [t.name for t in metadata.topics]

    @aio_boundary
    async def describe_topics(self, topics: list[str] | None = None) -> list[dict[str, Any]]:
        """Metadata of ``topics`` (None: all) as aiokafka's dicts, one per topic."""
        metadata = await admin_topics.fetch_metadata(self.cluster, topics)
        return [
            {
                "error_code": int(t.error),
                "topic": t.name,
                "is_internal": t.is_internal,
                "partitions": [
                    {
                        "error_code": int(p.error),
                        "partition": p.id,
                        "leader": p.leader,
                        "replicas": list(p.replicas),
                        "isr": list(p.isr),
                        "offline_replicas": list(p.offline_replicas),
                    }
                    for p in t.partitions
                ],
            }
            for t in metadata.topics
        ]

    @aio_boundary
    async def describe_cluster(self) -> dict[str, Any]:
        metadata = await admin_topics.fetch_metadata(self.cluster, [])
        return {
            "throttle_time_ms": metadata.throttle_time_ms,
            "brokers": [
                {"node_id": n.id, "host": n.host, "port": n.port, "rack": n.rack}
                for n in metadata.brokers.values()
            ],
            "cluster_id": metadata.cluster_id,
            "controller_id": metadata.controller_id,
        }

    @aio_boundary
    async def create_partitions(
        self,
        topic_partitions: dict[str, NewPartitions],
        timeout_ms: int | None = None,
        validate_only: bool = False,
    ) -> CreatePartitionsResponse:
        growth = [
            TopicGrowth(topic, p.total_count, p.new_assignments)
            for topic, p in topic_partitions.items()
        ]
        answers = await admin_topics.create_partitions(
            self.cluster, growth, self._timeout_s(timeout_ms), validate_only
        )
        for topic, outcome in answers.items():
            _raise(outcome.code, f"could not create partitions for {topic}: {outcome.message}")
        return CreatePartitionsResponse(
            answers.throttle_time_ms,
            [TopicError(n, int(o.code), o.message) for n, o in answers.items()],
        )

    # -- configs ---------------------------------------------------------------------
    @staticmethod
    def _by_destination(resources: Iterable[ConfigResource]) -> list[list[ConfigResource]]:
        """aiokafka's grouping: one request per broker resource's broker, one for topics."""
        brokers: dict[str, list[ConfigResource]] = {}
        topics: list[ConfigResource] = []
        for r in resources:
            if r.resource_type == ConfigResourceType.BROKER:
                brokers.setdefault(str(r.name), []).append(r)
            else:
                topics.append(r)
        return [*brokers.values(), topics] if topics else list(brokers.values())

    @staticmethod
    def _resource(r: ConfigResource) -> Resource:
        return Resource(ResourceType(int(r.resource_type)), str(r.name))

    @aio_boundary
    async def describe_configs(
        self, config_resources: list[ConfigResource], include_synonyms: bool = False
    ) -> list[DescribeConfigsResponse]:
        responses = []
        for group in self._by_destination(config_resources):
            wanted = [self._resource(r) for r in group]
            keys = {
                w: list(r.configs) if r.configs else None
                for w, r in zip(wanted, group, strict=True)
            }
            answers = await admin_configs.describe_configs(
                self.cluster, wanted, include_synonyms, keys
            )
            resources = []
            for w in wanted:
                answer = answers.get(w)
                if answer is None:
                    continue
                entries = [
                    ConfigEntryTuple(
                        e.name,
                        e.value,
                        e.is_read_only,
                        int(e.source),
                        e.is_sensitive,
                        [
                            ConfigSynonym(s.name, s.value, int(s.source))
                            for s in e.synonyms.values()
                        ],
                    )
                    for e in answer.entries.values()
                ]
                resources.append(
                    DescribedResource(
                        int(answer.outcome.code),
                        answer.outcome.message,
                        int(w.restype),
                        w.name,
                        entries,
                    )
                )
            responses.append(DescribeConfigsResponse(answers.throttle_time_ms, resources))
        return responses

    @aio_boundary
    async def alter_configs(
        self, config_resources: list[ConfigResource]
    ) -> list[AlterConfigsResponse]:
        """Legacy AlterConfigs: each resource's dynamic configs become ``configs``."""
        groups = self._by_destination(config_resources)
        if not any(r.resource_type != ConfigResourceType.BROKER for g in groups for r in g):
            groups.insert(0, [])  # aiokafka always answers the topics' request first
        else:
            groups.insert(0, groups.pop())
        responses = []
        for group in groups:
            wanted = []
            for r in group:
                resource = self._resource(r)
                resource.set_config_dict = {k: str(v) for k, v in (r.configs or {}).items()}
                wanted.append(resource)
            answers = await admin_configs.alter_configs(self.cluster, wanted) if wanted else {}
            throttle = getattr(answers, "throttle_time_ms", 0)
            results = [
                AlteredResource(int(o.code), o.message, int(w.restype), w.name)
                for w in wanted
                if (o := answers.get(w)) is not None
            ]
            responses.append(AlterConfigsResponse(throttle, results))
        return responses

    # -- client quotas (quotas.py; aiokafka has none: Kafka's Admin in Python) --------
    @aio_boundary
    async def describe_client_quotas(
        self, quota_filter: ClientQuotaFilter | None = None
    ) -> dict[ClientQuotaEntity, dict[str, float]]:
        """The quotas of the entities ``quota_filter`` matches (default: all)."""
        return await admin_quotas.describe_client_quotas(
            self.cluster, quota_filter or ClientQuotaFilter.all()
        )

    @aio_boundary
    async def alter_client_quotas(
        self, alterations: Sequence[ClientQuotaAlteration], validate_only: bool = False
    ) -> dict[ClientQuotaEntity, KafkaError | None]:
        """Set or remove quota keys; per entity None or the broker's error."""
        answers = await admin_quotas.alter_client_quotas(self.cluster, alterations, validate_only)
        return {entity: outcome.error(str(entity)) for entity, outcome in answers.items()}

    # -- groups ----------------------------------------------------------------------
    @aio_boundary
    async def find_coordinator(self, group_id: str, coordinator_type: int = 0) -> int:
        _, node = await coordinator(self.cluster, group_id, key_type=coordinator_type)
        return node.id

    @aio_boundary
    async def list_consumer_groups(
        self, broker_ids: list[int] | None = None
    ) -> list[tuple[str, str]]:
        """``(group_id, protocol_type)`` of every group (or of ``broker_ids``' groups)."""
        listings = await admin_groups.list_groups(self.cluster, broker_ids)
        if listings.errors:
            raise listings.errors[0]
        return sorted({(g.group_id, g.protocol_type) for g in listings.groups})

    @aio_boundary
    async def describe_consumer_groups(
        self,
        group_ids: list[str],
        group_coordinator_id: int | None = None,
        include_authorized_operations: bool = False,
    ) -> list[DescribeGroupsResponse]:
        """One response per coordinator with each group's raw DescribeGroups entry."""
        views = await admin_groups.describe_groups(
            self.cluster, group_ids, group_coordinator_id, include_authorized_operations
        )
        by_node: dict[int, tuple[int, list[DescribedGroup]]] = {}
        for view in views.values():
            if isinstance(view, Exception):
                raise view
            _, groups = by_node.setdefault(view.coordinator.id, (view.throttle_time_ms, []))
            groups.append(
                DescribedGroup(
                    int(view.error),
                    view.group_id,
                    view.state,
                    view.protocol_type,
                    view.protocol,
                    [
                        GroupMember(
                            m.member_id, m.client_id, m.client_host, m.metadata, m.assignment
                        )
                        for m in view.members
                    ],
                )
            )
        return [DescribeGroupsResponse(throttle, groups) for throttle, groups in by_node.values()]

    @aio_boundary
    async def list_consumer_group_offsets(
        self,
        group_id: str,
        group_coordinator_id: int | None = None,
        partitions: list[TopicPartition] | None = None,
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """Committed offsets (-1 for a listed partition with none), raising on errors."""
        wanted = None if not partitions else [CoreTopicPartition(*as_pair(p)) for p in partitions]
        offsets = await admin_groups.list_group_offsets(
            self.cluster, group_id, wanted, coordinator_id=group_coordinator_id
        )
        found = {}
        for c in offsets:
            _raise(c.error, f"unable to get offset info for {c.topic} and {c.partition}")
            found[TopicPartition(c.topic, c.partition)] = OffsetAndMetadata(c.offset, c.metadata)
        return found

    @aio_boundary
    async def delete_consumer_groups(
        self, group_ids: list[str], group_coordinator_id: int | None = None
    ) -> list[tuple[str, int]]:
        """``(group_id, error_code)`` per group (0: deleted), like ``delete_topics``."""
        answers = await admin_groups.delete_groups(self.cluster, group_ids, group_coordinator_id)
        result = []
        for group_id, answer in answers.items():
            if isinstance(answer, Exception):
                raise answer
            result.append((group_id, int(answer.code)))
        return result

    @aio_boundary
    async def alter_consumer_group_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
        group_coordinator_id: int | None = None,
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """Commit ``offsets`` for an inactive group; raises the first partition's error."""
        plain = {TopicPartition(*as_pair(tp)): o for tp, o in offsets.items()}
        commits = [
            CoreTopicPartition(tp.topic, tp.partition, o if isinstance(o, int) else o.offset)
            for tp, o in plain.items()
        ]
        notes = {tp: "" if isinstance(o, int) else o.metadata for tp, o in plain.items()}
        answers = await admin_groups.alter_group_offsets(
            self.cluster,
            group_id,
            commits,
            {CoreTopicPartition(*tp): note for tp, note in notes.items()},
            group_coordinator_id,
        )
        error = partition_errors(group_id, answers)
        if error is not None:
            raise error
        return {
            tp: OffsetAndMetadata(c.offset, notes[tp]) for tp, c in zip(plain, commits, strict=True)
        }

    @aio_boundary
    async def delete_consumer_group_offsets(
        self,
        group_id: str,
        partitions: list[TopicPartition],
        group_coordinator_id: int | None = None,
    ) -> list[TopicPartition]:
        """Forget the group's committed offsets of ``partitions`` (OffsetDelete)."""
        wanted = [TopicPartition(*as_pair(p)) for p in partitions]
        answers = await admin_groups.delete_group_offsets(
            self.cluster, group_id, [CoreTopicPartition(*tp) for tp in wanted], group_coordinator_id
        )
        error = partition_errors(group_id, answers)
        if error is not None:
            raise error
        return wanted

    # -- records ---------------------------------------------------------------------
    @aio_boundary
    async def delete_records(
        self,
        records_to_delete: dict[TopicPartition, RecordsToDelete],
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, int]:
        """Each partition's new low watermark; raises the first partition's error."""
        before = {
            CoreTopicPartition(*as_pair(tp)): r.before_offset for tp, r in records_to_delete.items()
        }
        found = await admin_records.delete_records(
            self.cluster, before, self._timeout_s(timeout_ms)
        )
        result = {}
        for core_tp in before:
            tp = TopicPartition(core_tp.topic, core_tp.partition)
            answer = found.get(core_tp)
            if answer is None:
                raise KafkaError(ErrorCode.unknown_server_error, f"no answer for {tp}")
            if isinstance(answer, Exception):
                raise answer
            result[tp] = answer.low_watermark
        return result

    # -- SCRAM credentials (scram.py; kafka-python's KafkaAdminClient shape) -------------
    @aio_boundary
    async def alter_user_scram_credentials(
        self, alterations: list[admin_scram.UserScramCredentialAlteration]
    ) -> dict[str, str | None]:
        """One AlterUserScramCredentials; ``{user: None or the broker's error message}``
        (aiokafka has no such call: this is kafka-python's answer shape)."""
        admin_scram.check_alterations(alterations)
        answers = await admin_scram.alter_user_scram_credentials(self.cluster, alterations)
        return {
            user: None if outcome.ok else (outcome.message or outcome.code.name.upper())
            for user, outcome in answers.items()
        }

    @aio_boundary
    async def describe_user_scram_credentials(
        self, users: list[str] | None = None
    ) -> dict[str, dict[str, Any]]:
        """``{user: {"error": None or message, "credential_infos": [{"mechanism":
        ScramMechanism, "iterations": n}]}}`` (kafka-python's shape)."""
        admin_scram.check_users(users)
        answers = await admin_scram.describe_user_scram_credentials(self.cluster, users)
        described: dict[str, dict[str, Any]] = {}
        for user, answer in answers.items():
            if isinstance(answer, KafkaError):
                described[user] = {"error": str(answer), "credential_infos": []}
                continue
            infos = [
                {"mechanism": i.mechanism, "iterations": i.iterations}
                for i in answer.scram_credential_infos
            ]
            described[user] = {"error": None, "credential_infos": infos}
        return described
