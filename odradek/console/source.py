"""What the console shows, read from any Kafka-compatible cluster through odradek's client.

How this works and why: the console is a client like any other, so every page is built
from the admin core's operations (``admin_topics``, ``admin_configs``, ``admin_groups``,
``admin_records``) over one ``Cluster`` the console opens at start and keeps; nothing
here knows odradek's broker, so the console works against Kafka or Redpanda as well.
Two cluster facts have no admin-core operation: the KRaft quorum (DescribeQuorum,
which a broker forwards to the active controller) and partition sizes
(DescribeLogDirs, asked of every broker) — both are plain requests on the same
connections, and a cluster that does not serve them just leaves those cells empty
(``unavailable`` says why). Records are read by a short-lived ``AIOKafkaConsumer``
without a group per request, so browsing never commits and never joins anything.

Every method returns plain dataclasses for the templates; failures are the client's
``KafkaError``/connection errors, which the app shows as one line.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from kio.schema.errors import ErrorCode

from odradek.client._core.aio_types import ConsumerRecord
from odradek.client._core.cluster import Cluster
from odradek.client._core.config import ClientConfig
from odradek.client._core.connection import UnsupportedVersionError, request_entity
from odradek.client._core.errors import KafkaError
from odradek.client._core.sasl import sasl_credentials
from odradek.client._core.types import TopicPartition
from odradek.client.admin import configs as admin_configs
from odradek.client.admin import groups as admin_groups
from odradek.client.admin import records as admin_records
from odradek.client.admin import topics as admin_topics
from odradek.client.admin.blocking import member_partitions
from odradek.client.admin.core import ADMIN_VERSIONS, Outcome
from odradek.client.admin.types import ConfigResource, ConfigSource, NewTopic, Node, ResourceType
from odradek.client.consumer.aio import AIOKafkaConsumer

DESCRIBE_LOG_DIRS: Final = 35
DESCRIBE_QUORUM: Final = 55
CONSOLE_VERSIONS: Final = {**ADMIN_VERSIONS, DESCRIBE_LOG_DIRS: (1, 4), DESCRIBE_QUORUM: (0, 2)}
EARLIEST: Final = -2
LATEST: Final = -1
TOPIC_TIMEOUT_S: Final = 30.0  # what CreateTopics/DeleteTopics tell the controller to wait
BROWSE_WAIT_S: Final = 3.0  # how long one browse waits for records that should be there
MAX_BROWSE_RECORDS: Final = 500  # a page of records, not a dump of the log


@dataclass(frozen=True, slots=True)
class QuorumVoter:
    node_id: int
    log_end_offset: int
    lag: int
    role: str  # Leader, Follower or Observer


@dataclass(frozen=True, slots=True)
class Quorum:
    leader_id: int
    leader_epoch: int
    high_watermark: int
    replicas: list[QuorumVoter]


@dataclass(slots=True)
class ClusterInfo:
    cluster_id: str | None
    controller_id: int
    brokers: list[Node]
    quorum: Quorum | None
    log_dirs: dict[int, list[tuple[str, int, str | None]]]  # node -> (dir, bytes, error)
    unavailable: list[str] = field(default_factory=list)  # what could not be shown, and why


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    id: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline: tuple[int, ...]
    start_offset: int | None
    end_offset: int | None
    size_bytes: int | None  # the leader replica's, from DescribeLogDirs

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)


@dataclass(slots=True)
class TopicInfo:
    name: str
    internal: bool
    partitions: list[PartitionInfo]
    configs: list[tuple[str, str | None, str]] = field(default_factory=list)  # name, value, source

    @property
    def replication_factor(self) -> int:
        return max((len(p.replicas) for p in self.partitions), default=0)

    @property
    def size_bytes(self) -> int | None:
        sizes = [p.size_bytes for p in self.partitions]
        return None if not sizes or None in sizes else sum(s for s in sizes if s is not None)

    @property
    def records(self) -> int | None:
        spans = [(p.start_offset, p.end_offset) for p in self.partitions]
        if any(s is None or e is None for s, e in spans):
            return None
        return sum(e - s for s, e in spans if s is not None and e is not None)


@dataclass(frozen=True, slots=True)
class PartitionLag:
    topic: str
    partition: int
    committed: int | None  # None: nothing committed
    end_offset: int | None  # None: the leader did not answer
    owner: str | None  # the member the partition is assigned to

    @property
    def lag(self) -> int | None:
        if self.end_offset is None or self.committed is None:
            return None  # as kafka-consumer-groups.sh: no lag without a committed offset
        return max(self.end_offset - self.committed, 0)


@dataclass(frozen=True, slots=True)
class Member:
    member_id: str
    client_id: str
    client_host: str
    instance_id: str | None
    partitions: list[TopicPartition]


@dataclass(slots=True)
class GroupInfo:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    coordinator: Node | None
    members: list[Member]
    offsets: list[PartitionLag]

    @property
    def total_lag(self) -> int:
        return sum(p.lag or 0 for p in self.offsets)


@dataclass(frozen=True, slots=True)
class GroupSummary:
    group_id: str
    state: str
    protocol_type: str


def _raise(outcome: Outcome | None, what: str) -> None:
    if outcome is None:
        raise KafkaError(ErrorCode.unknown_server_error, f"{what}: no answer")
    error = outcome.error(what)
    if error is not None:
        raise error


class ClusterSource:
    """The console's one cluster connection and the reads and changes it offers."""

    def __init__(
        self,
        bootstrap: str,
        client_id: str = "odradek-console",
        properties: Mapping[str, Any] | None = None,
    ) -> None:
        # ClientConfig validates the address (and any security.protocol, ssl.*, sasl.*
        # of ``properties``: --command-config) the same way every odradek client does
        config = ClientConfig(
            {**(properties or {}), "bootstrap.servers": bootstrap, "client.id": client_id},
            "admin",
        )
        self.bootstrap = config["bootstrap.servers"]
        self._config = config
        self._cluster: Cluster | None = None

    async def start(self) -> None:
        """Connect and read metadata once; raises when no broker answers."""
        cluster = Cluster(
            self.bootstrap,
            client_id=self._config["client.id"],
            request_timeout_ms=self._config["request.timeout.ms"],
            retry_backoff_ms=self._config["retry.backoff.ms"],
            metadata_max_age_ms=self._config["metadata.max.age.ms"],
            client_versions=CONSOLE_VERSIONS,
            ssl_context=self._config.ssl_context,
            sasl=sasl_credentials(self._config),
        )
        try:
            await cluster.refresh()
        except BaseException:
            await cluster.close()
            raise
        self._cluster = cluster

    async def close(self) -> None:
        if self._cluster is not None:
            await self._cluster.close()
            self._cluster = None

    @property
    def started(self) -> bool:
        return self._cluster is not None

    @property
    def cluster(self) -> Cluster:
        if self._cluster is None:
            raise RuntimeError("ClusterSource.start() was not called")
        return self._cluster

    # -- cluster -----------------------------------------------------------------------
    async def cluster_info(self) -> ClusterInfo:
        metadata = await admin_topics.fetch_metadata(self.cluster, [])
        info = ClusterInfo(
            metadata.cluster_id,
            metadata.controller_id,
            sorted(metadata.brokers.values(), key=lambda n: n.id),
            None,
            {},
        )
        try:
            info.quorum = await self._quorum()
        except (KafkaError, UnsupportedVersionError) as error:
            info.unavailable.append(f"quorum: {error}")
        sizes = await self._log_dirs([n.id for n in info.brokers], info.unavailable)
        for node_id, dirs in sizes.items():
            info.log_dirs[node_id] = [(d, sum(parts.values()), err) for d, err, parts in dirs]
        return info

    async def _quorum(self) -> Quorum:
        connection = await self.cluster.any_connection()
        v = connection.version_for(DESCRIBE_QUORUM)
        partition = request_entity(DESCRIBE_QUORUM, v, "PartitionData", partition_index=0)
        topic = request_entity(
            DESCRIBE_QUORUM,
            v,
            "TopicData",
            topic_name="__cluster_metadata",
            partitions=(partition,),
        )
        response = await connection.send(request_entity(DESCRIBE_QUORUM, v, topics=(topic,)))
        _raise(Outcome(response.error_code), "DescribeQuorum")
        answer = response.topics[0].partitions[0]
        _raise(Outcome(answer.error_code), "DescribeQuorum")
        leader_end = max(
            (r.log_end_offset for r in answer.current_voters if r.replica_id == answer.leader_id),
            default=answer.high_watermark,
        )

        def replica(state: Any, role: str) -> QuorumVoter:
            lag = max(leader_end - state.log_end_offset, 0) if state.log_end_offset >= 0 else -1
            return QuorumVoter(state.replica_id, state.log_end_offset, lag, role)

        return Quorum(
            answer.leader_id,
            answer.leader_epoch,
            answer.high_watermark,
            [
                replica(v, "Leader" if v.replica_id == answer.leader_id else "Follower")
                for v in answer.current_voters
            ]
            + [replica(o, "Observer") for o in answer.observers],
        )

    async def _log_dirs(
        self, node_ids: list[int], unavailable: list[str]
    ) -> dict[int, list[tuple[str, str | None, dict[tuple[str, int], int]]]]:
        """Each broker's log dirs: (dir, error, {(topic, partition): bytes}); a broker
        that does not answer is noted in ``unavailable`` and left out."""

        async def one(node_id: int) -> list[tuple[str, str | None, dict[tuple[str, int], int]]]:
            connection = await self.cluster.connection(node_id)
            v = connection.version_for(DESCRIBE_LOG_DIRS)
            response = await connection.send(request_entity(DESCRIBE_LOG_DIRS, v, topics=None))
            dirs = []
            for result in response.results:
                error = None if result.error_code == ErrorCode.none else result.error_code.name
                sizes = {
                    (t.name, int(p.partition_index)): int(p.partition_size)
                    for t in result.topics
                    for p in t.partitions
                    if not p.is_future_key
                }
                dirs.append((result.log_dir, error, sizes))
            return dirs

        found: dict[int, list[tuple[str, str | None, dict[tuple[str, int], int]]]] = {}
        answers = await asyncio.gather(*(one(n) for n in node_ids), return_exceptions=True)
        for node_id, answer in zip(node_ids, answers, strict=True):
            if isinstance(answer, BaseException):
                if not isinstance(answer, Exception):
                    raise answer
                unavailable.append(f"log dirs of broker {node_id}: {answer}")
            else:
                found[node_id] = answer
        return found

    # -- topics ------------------------------------------------------------------------
    async def topics(self, names: list[str] | None = None) -> list[TopicInfo]:
        """Topics (all, or ``names``) with partitions, offsets and sizes, by name."""
        metadata = await admin_topics.fetch_metadata(self.cluster, names)
        for view in metadata.topics:
            if view.error != ErrorCode.none:
                raise KafkaError(view.error, view.name)
        parts = [TopicPartition(t.name, p.id) for t in metadata.topics for p in t.partitions]
        starts, ends = await asyncio.gather(
            self._offsets(parts, EARLIEST), self._offsets(parts, LATEST)
        )
        dirs = await self._log_dirs(sorted(metadata.brokers), [])
        sizes: dict[tuple[str, int, int], int] = {}  # (topic, partition, node) -> bytes
        for node_id, node_dirs in dirs.items():
            for _, _, by_partition in node_dirs:
                for (topic, index), size in by_partition.items():
                    sizes[(topic, index, node_id)] = size
        topics = [
            TopicInfo(
                t.name,
                t.is_internal,
                [
                    PartitionInfo(
                        p.id,
                        p.leader,
                        p.replicas,
                        p.isr,
                        p.offline_replicas,
                        starts.get(TopicPartition(t.name, p.id)),
                        ends.get(TopicPartition(t.name, p.id)),
                        sizes.get((t.name, p.id, p.leader)),
                    )
                    for p in t.partitions
                ],
            )
            for t in metadata.topics
        ]
        return sorted(topics, key=lambda t: (t.internal, t.name))

    async def topic(self, name: str) -> TopicInfo:
        """One topic with its configs (non-default first); unknown: KafkaError."""
        (info,) = await self.topics([name])
        resource = ConfigResource(ResourceType.TOPIC, name)
        answers = await admin_configs.describe_configs(self.cluster, [resource], False)
        answer = answers.get(resource)
        if answer is not None and answer.outcome.ok:
            entries = sorted(
                answer.entries.values(),
                key=lambda e: (e.source == ConfigSource.DEFAULT_CONFIG, e.name),
            )
            info.configs = [
                (e.name, "(sensitive)" if e.is_sensitive else e.value, e.source.name)
                for e in entries
            ]
        return info

    async def _offsets(self, parts: list[TopicPartition], spec: int) -> dict[TopicPartition, int]:
        """Each partition's offset for ``spec`` (earliest/latest/a timestamp); a
        partition whose leader fails is left out (its cell shows nothing)."""
        if not parts:
            return {}
        found = await admin_records.list_offsets(self.cluster, dict.fromkeys(parts, spec))
        return {
            TopicPartition(tp.topic, tp.partition): answer.offset
            for tp, answer in found.items()
            if not isinstance(answer, Exception)
        }

    async def create_topic(self, name: str, partitions: int, replication_factor: int) -> None:
        answers = await admin_topics.create_topics(
            self.cluster, [NewTopic(name, partitions, replication_factor)], TOPIC_TIMEOUT_S, False
        )
        _raise(answers.get(name), f"create topic {name}")

    async def delete_topic(self, name: str) -> None:
        answers = await admin_topics.delete_topics(self.cluster, [name], TOPIC_TIMEOUT_S)
        _raise(answers.get(name), f"delete topic {name}")

    # -- records -----------------------------------------------------------------------
    async def offset_for_time(self, tp: TopicPartition, timestamp_ms: int) -> int | None:
        """The first offset whose timestamp is >= ``timestamp_ms`` (ListOffsets by
        time); None when every record is older."""
        found = await admin_records.list_offsets(self.cluster, {tp: timestamp_ms})
        answer = found.get(tp)
        if answer is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"{tp.topic}-{tp.partition}")
        if isinstance(answer, Exception):
            raise answer
        return answer.offset if answer.offset >= 0 else None

    async def read(self, tp: TopicPartition, offset: int, limit: int) -> list[ConsumerRecord]:
        """Up to ``limit`` records of one partition from ``offset`` (clamped to the
        log's start), stopping at the partition's end offset."""
        limit = max(1, min(limit, MAX_BROWSE_RECORDS))
        starts, ends = await asyncio.gather(
            self._offsets([tp], EARLIEST), self._offsets([tp], LATEST)
        )
        if tp not in ends:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"{tp.topic}-{tp.partition}")
        end, start = ends[tp], starts.get(tp, 0)
        offset = max(offset, start)
        if offset >= end:
            return []
        config = self._config
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            client_id=f"{config['client.id']}-browser",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            # the cluster's security settings, in the aiokafka face's names
            security_protocol=config["security.protocol"],
            ssl_context=config.ssl_context,
            sasl_mechanism=config["sasl.mechanism"],
            sasl_plain_username=config["sasl.username"],
            sasl_plain_password=config["sasl.password"],
        )
        await consumer.start()
        records: list[ConsumerRecord] = []
        try:
            await consumer.assign([tp])  # odradek's assign is awaitable (aiokafka's is not)
            consumer.seek(tp, offset)
            deadline = asyncio.get_running_loop().time() + BROWSE_WAIT_S
            while len(records) < limit:
                remaining = deadline - asyncio.get_running_loop().time()
                if remaining <= 0:
                    break
                batch = await consumer.getmany(
                    tp, timeout_ms=int(remaining * 1000), max_records=limit - len(records)
                )
                records.extend(r for rs in batch.values() for r in rs)
                # the position, not the last record: control batches (transaction
                # markers) take offsets but are never handed out as records
                if await consumer.position(tp) >= end:
                    break
        finally:
            await consumer.stop()
        return records[:limit]

    # -- groups ------------------------------------------------------------------------
    async def groups(self) -> list[GroupSummary]:
        listings = await admin_groups.list_groups(self.cluster)
        if listings.errors and not listings.groups:
            raise listings.errors[0]
        found = {g.group_id: g for g in listings.groups}
        return [
            GroupSummary(g.group_id, g.state, g.protocol_type)
            for g in sorted(found.values(), key=lambda g: g.group_id)
        ]

    async def group(self, group_id: str) -> GroupInfo:
        views = await admin_groups.describe_groups(self.cluster, [group_id])
        view = views.get(group_id)
        if view is None:
            raise KafkaError(ErrorCode.group_id_not_found, group_id)
        if isinstance(view, Exception):
            raise view
        if view.error != ErrorCode.none:
            raise KafkaError(view.error, group_id)
        members = [
            Member(
                m.member_id,
                m.client_id,
                m.client_host,
                m.group_instance_id,
                member_partitions(view.protocol_type, m.assignment),
            )
            for m in view.members
        ]
        owners = {(tp.topic, tp.partition): m.member_id for m in members for tp in m.partitions}
        return GroupInfo(
            group_id,
            view.state,
            view.protocol_type,
            view.protocol,
            view.coordinator,
            members,
            await self.lag(group_id, owners),
        )

    async def lag(
        self, group_id: str, owners: dict[tuple[str, int], str] | None = None
    ) -> list[PartitionLag]:
        """Committed offset, end offset and lag of every partition the group has
        committed for or is assigned; lag = end offset − committed offset."""
        committed = await admin_groups.list_group_offsets(self.cluster, group_id)
        by_partition: dict[TopicPartition, int | None] = {}
        for c in committed:
            if c.error == ErrorCode.none:
                by_partition[TopicPartition(c.topic, c.partition)] = (
                    c.offset if c.offset >= 0 else None
                )
        for topic, partition in owners or {}:
            by_partition.setdefault(TopicPartition(topic, partition), None)
        ends = await self._offsets(list(by_partition), LATEST)
        return [
            PartitionLag(
                tp.topic,
                tp.partition,
                offset,
                ends.get(tp),
                (owners or {}).get((tp.topic, tp.partition)),
            )
            for tp, offset in sorted(by_partition.items())
        ]

    async def reset_targets(
        self, group_id: str, topic: str | None, to: str, offset: int | None
    ) -> list[tuple[TopicPartition, int | None, int]]:
        """The reset plan: (partition, committed now, new offset) for the partitions
        the group committed for or is assigned (of ``topic``, or all of them), or
        every partition of ``topic`` if it has none there; ``to`` is earliest, latest or
        offset (then ``offset``, clamped into each partition's [start, end])."""
        known = (await self.group(group_id)).offsets  # committed or assigned partitions
        current = [p for p in known if topic is None or p.topic == topic]
        if topic is not None and not current:  # a topic the group never committed for
            (info,) = await self.topics([topic])
            current = [PartitionLag(topic, p.id, None, None, None) for p in info.partitions]
        parts = [TopicPartition(p.topic, p.partition) for p in current]
        starts, ends = await asyncio.gather(
            self._offsets(parts, EARLIEST), self._offsets(parts, LATEST)
        )
        plan = []
        for p, tp in zip(current, parts, strict=True):
            if tp not in starts or tp not in ends:
                raise KafkaError(ErrorCode.leader_not_available, f"{tp.topic}-{tp.partition}")
            if to == "earliest":
                target = starts[tp]
            elif to == "latest":
                target = ends[tp]
            else:
                assert offset is not None
                target = min(max(offset, starts[tp]), ends[tp])
            plan.append((tp, p.committed, target))
        return plan

    async def reset_offsets(self, group_id: str, plan: list[tuple[TopicPartition, int]]) -> None:
        """Commit the plan's offsets as an outside tool; the coordinator refuses it
        while the group has members (the error says so)."""
        commits = [TopicPartition(tp.topic, tp.partition, o) for tp, o in plan]
        answers = await admin_groups.alter_group_offsets(self.cluster, group_id, commits)
        error = admin_groups.partition_errors(group_id, answers)
        if error is not None:
            raise error
