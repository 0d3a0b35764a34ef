"""The controller: validates cluster changes and decides the records that make them.

How this works and why: requests that change the cluster (create/delete topics, add
partitions, alter configs, register a broker, allocate producer ids) are validated
against the current image and turned into records; the controller then awaits
``writer.append(records)`` (writer.py) and nothing else. It does not apply records:
the writer hands each committed batch to the MetadataLoader (loader.py), which builds
the next image and publishes it, to this controller first, then to the broker. So the
image the controller decides on is the one every node builds from the committed log,
and the same decisions run unchanged over a Raft writer (append to the leader,
complete at the high watermark) instead of today's local one (fsync the single
voter's ``__cluster_metadata``). A failed append raises ControllerError
KAFKA_STORAGE_ERROR and nothing of the change is applied or announced.

Which brokers get the replicas of new partitions is placement.py's decision; broker
registration, heartbeats and fencing are broker_heartbeats.py's, whose sessions (in
memory, from ``now_ms``) belong to the leader epoch ``writer.active_epoch`` names.

Leaders and ISRs (elections.py, alter_partition.py, reassignment.py): a fence (session expiry) or a
controlled shutdown is committed together with the PartitionChange records that move
the broker's leaderships and take it out of ISRs, and an unfence together with the
elections it makes possible, so no image ever shows a fenced leader. A broker that
asked to shut down is told it may only once it has applied the commit that moved its
leaderships (its heartbeat's metadata offset), so it stops acting as leader first.
A new incarnation's registration counts as a fence of the old one (its process is
gone: Kafka's unclean-shutdown handling), so a broker restarted within its session
timeout does not keep leaderships it no longer serves.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

from odradek.metadata import alter_partition as isr_changes
from odradek.metadata import placement
from odradek.metadata import reassignment as reassignments
from odradek.metadata.broker_heartbeats import (
    DEFAULT_HEARTBEAT_INTERVAL_MS,
    DEFAULT_SESSION_TIMEOUT_MS,
    BrokerHeartbeat,
    BrokerHeartbeatManager,
    BrokerRegistration,
    HeartbeatReply,
    fence_records,
)
from odradek.metadata.delta import MetadataDelta
from odradek.metadata.elections import (
    PREFERRED,
    UNCLEAN,
    ElectionResult,
    PartitionChanges,
    elect_leaders,
    eligible_in,
    rebalance,
    topic_allows_unclean,
)
from odradek.metadata.errors import ControllerError
from odradek.metadata.image import (
    BROKER_RESOURCE,
    PRODUCER_ID_BLOCK_SIZE,
    TOPIC_RESOURCE,
    MetadataImage,
    MetadataRecord,
)
from odradek.metadata.loader import MetadataLoader
from odradek.metadata.writer import CONTROLLER_EPOCH, MetadataWriter
from odradek.replica.interfaces import IsrOutcome, IsrProposal
from odradek.storage.errors import LogConfigError
from odradek.storage.log_config import LogConfig

METADATA_TOPIC: Final = "__cluster_metadata"
MIN_SESSION_CHECK_S: Final = 0.05  # the session timer's shortest sleep
MAX_TOPIC_NAME_LENGTH: Final = 249
# Kafka's controller limit (KAFKA-17870): one request may not create more partitions
# than this, which also keeps a hostile count from building billions of assignments.
MAX_PARTITIONS_PER_REQUEST: Final = 10_000
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
INTERNAL_TOPICS: Final = frozenset({"__consumer_offsets", "__transaction_state"})

Listener = Callable[[MetadataImage, MetadataImage], None]


@dataclass(frozen=True, slots=True)
class NewTopic:
    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignments: Mapping[int, Sequence[int]] | None = None
    configs: Mapping[str, str | None] | None = None


def validate_topic_name(name: str) -> None:
    if not name or name in (".", ".."):
        raise ControllerError("INVALID_TOPIC_EXCEPTION", f"topic name {name!r} is illegal")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise ControllerError(
            "INVALID_TOPIC_EXCEPTION",
            f"topic name is {len(name)} characters, longer than {MAX_TOPIC_NAME_LENGTH}",
        )
    if not _LEGAL_TOPIC.match(name):
        raise ControllerError(
            "INVALID_TOPIC_EXCEPTION",
            f"topic name {name!r} contains characters other than ASCII alphanumerics, "
            "'.', '_' and '-'",
        )


class Controller:
    def __init__(
        self,
        writer: MetadataWriter,
        loader: MetadataLoader,
        node_id: int,
        defaults: Callable[[], Mapping[str, int]],
        *,
        rng: random.Random | None = None,
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
        heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS,
        now_ms: Callable[[], int] | None = None,
        unclean_default: Callable[[], bool] | None = None,
        silent_leader: Callable[[], tuple[int, int] | None] | None = None,
    ) -> None:
        self.writer = writer
        self.node_id = node_id
        self.image = loader.image
        self._defaults = defaults  # num.partitions, default.replication.factor (dynamic)
        self._rng = rng or random.Random()  # placement's random start and shift
        self._listeners: list[Listener] = []
        self._lock = asyncio.Lock()
        self._now_ms = now_ms or _monotonic_ms
        self.heartbeats = BrokerHeartbeatManager(
            session_timeout_ms, local_node_id=node_id, heartbeat_interval_ms=heartbeat_interval_ms
        )
        # a new term's silent previous leader (RaftMetadataWriter.silent_predecessor)
        self._silent_leader = silent_leader or (lambda: None)
        # the broker default of unclean.leader.election.enable (dynamic over static)
        self._unclean_default = unclean_default or (lambda: False)
        # (broker id, epoch) -> offset of the commit that moved its leaderships away
        self._shutdown_offsets: dict[tuple[int, int], int] = {}
        loader.subscribe(self._on_published)  # first: the image for the next decision

    def add_listener(self, listener: Listener) -> None:
        """``listener(previous, image)`` after each published change (the loader's
        subscribers get the delta too)."""
        self._listeners.append(listener)

    def _on_published(self, _delta: MetadataDelta, image: MetadataImage) -> None:
        previous, self.image = self.image, image
        for listener in self._listeners:
            listener(previous, image)

    # -- replay ------------------------------------------------------------------
    def replay(self) -> MetadataImage:
        """Start-up: the writer feeds its committed log to the loader; the image.

        Damage raises CommittedDataCorruptError naming the file and the position of the
        first bad batch, and the image is left as it was.
        """
        self.writer.replay()
        return self.image

    # -- commit ------------------------------------------------------------------
    async def _commit(self, records: Sequence[MetadataRecord]) -> MetadataImage:
        """Have ``records`` committed; the image that holds them (published by then).

        Raises ControllerError (KAFKA_STORAGE_ERROR) with nothing applied.
        """
        if not records:
            return self.image
        offset = await self.writer.append(records)
        assert self.image.offset >= offset, "the writer returned before the loader published"
        return self.image

    # -- brokers ---------------------------------------------------------------------
    def _active_now(self) -> int:
        """The time, once the sessions belong to this active term; NOT_CONTROLLER if
        this node is not the active controller."""
        epoch = self.writer.active_epoch
        if epoch < 0:
            raise ControllerError("NOT_CONTROLLER", "node is not the active controller")
        now = self._now_ms()
        if epoch != self.heartbeats.session_epoch:
            self.heartbeats.ensure_epoch(epoch, self.image, now, self._silent_leader())
        return now

    async def register_broker(self, request: BrokerRegistration) -> int:
        """Register (or re-register) a broker; its broker epoch. Raises ControllerError
        (DUPLICATE_BROKER_REGISTRATION, NOT_CONTROLLER, KAFKA_STORAGE_ERROR)."""
        async with self._lock:
            now = self._active_now()
            records = self.heartbeats.registration(self.image, request, now)
            image = await self._commit([*records, *self._leadership_records(records)])
            return image.brokers[request.broker_id].epoch

    async def broker_heartbeat(self, request: BrokerHeartbeat) -> HeartbeatReply:
        """A broker's heartbeat: unfence, fence or let it shut down; the reply once
        the change is committed. Raises ControllerError (STALE_BROKER_EPOCH,
        BROKER_ID_NOT_REGISTERED, NOT_CONTROLLER, KAFKA_STORAGE_ERROR)."""
        async with self._lock:
            now = self._active_now()
            decision = self.heartbeats.heartbeat(self.image, request, now)
            moves = self._leadership_records(decision.records)
            image = await self._commit([*decision.records, *moves])
            reply = decision.reply
            if not reply.should_shut_down:
                return reply
            key = (request.broker_id, request.broker_epoch)
            if moves:
                self._shutdown_offsets[key] = image.offset
            if request.current_metadata_offset < self._shutdown_offsets.get(key, -1):
                return replace(reply, should_shut_down=False)  # not yet seen its moves
            self._shutdown_offsets.pop(key, None)
            return reply

    def _leadership_records(self, changes: Sequence[MetadataRecord]) -> list[MetadataRecord]:
        """The partition changes the fences and unfences among ``changes`` need."""
        image = self.image
        fenced = {r.fields["broker_id"] for r in changes if r.kind == "FenceBroker"}
        # a new incarnation replaces a registration fenced: the old one's process is gone
        fenced |= {
            r.fields["broker_id"]
            for r in changes
            if r.kind == "RegisterBroker" and r.fields["broker_id"] in image.brokers
        }
        unfenced = {r.fields["broker_id"] for r in changes if r.kind == "UnfenceBroker"}
        if not fenced and not unfenced:
            return []
        unclean = topic_allows_unclean(image, self._unclean_default)
        brokers = image.brokers

        def eligible(broker_id: int) -> bool:
            broker = brokers.get(broker_id)
            if broker is None or broker_id in fenced:
                return False
            return broker_id in unfenced or not broker.fenced

        partitions = PartitionChanges(image)
        for broker_id in sorted(fenced):
            partitions.remove_broker(broker_id, eligible, unclean)
        for broker_id in sorted(unfenced):
            partitions.add_broker(broker_id, eligible, unclean)
        return partitions.records()

    def session_check_delay_s(self, cap_s: float) -> float:
        """How long the session timer may sleep (BrokerHeartbeatManager.check_delay_ms)."""
        epoch = self.writer.active_epoch
        if epoch < 0:
            return cap_s
        wait_ms = self.heartbeats.check_delay_ms(epoch, self.image.brokers, self._now_ms())
        return max(MIN_SESSION_CHECK_S, min(cap_s, wait_ms / 1000))

    async def fence_stale_brokers(self) -> list[int]:
        """Fence the brokers whose session expired (the active controller's timer);
        their ids. Does nothing on a node that is not the active controller."""
        if self.writer.active_epoch < 0:
            return []
        async with self._lock:
            try:
                now = self._active_now()
            except ControllerError:
                return []
            stale = self.heartbeats.stale(self.image.brokers, now)
            fences = fence_records(stale)
            await self._commit([*fences, *self._leadership_records(fences)])
            return [b.broker_id for b in stale]

    # -- leaders and ISRs ----------------------------------------------------------------
    async def alter_partition(
        self, broker_id: int, broker_epoch: int, proposals: Sequence[IsrProposal]
    ) -> list[IsrOutcome]:
        """A leader's ISR changes (AlterPartition; alter_partition.py): one outcome per
        proposal, in order. Raises ControllerError for the request as a whole
        (NOT_CONTROLLER, STALE_BROKER_EPOCH, KAFKA_STORAGE_ERROR)."""
        async with self._lock:
            self._active_now()
            outcomes, records = isr_changes.decide(
                self.image, broker_id, broker_epoch, proposals, eligible_in(self.image)
            )
            image = await self._commit(records)
            answers = []
            for outcome, proposal in zip(outcomes, proposals, strict=True):
                if outcome is None:
                    topic = image.topic_by_id(proposal.topic_id)
                    state = topic.partitions.get(proposal.partition) if topic else None
                    outcome = (
                        isr_changes.outcome(state)
                        if state is not None
                        else IsrOutcome("UNKNOWN_TOPIC_ID")
                    )
                answers.append(outcome)
            return answers

    async def elect_leaders(
        self, election_type: int, partitions: Sequence[tuple[str, int]] | None
    ) -> list[ElectionResult]:
        """ElectLeaders: PREFERRED (0) or UNCLEAN (1) elections of ``partitions`` (None:
        every partition, answering only those not already led as asked, as Kafka).
        Raises ControllerError for the request as a whole."""
        if election_type not in (PREFERRED, UNCLEAN):
            raise ControllerError("INVALID_REQUEST", f"unknown election type {election_type}")
        async with self._lock:
            results, records = elect_leaders(self.image, election_type, partitions)
            await self._commit(records)
            return results

    async def alter_partition_reassignments(
        self, requests: Sequence[reassignments.ReassignmentRequest], allow_rf_change: bool = True
    ) -> list[reassignments.ReassignmentResult]:
        """AlterPartitionReassignments (reassignment.py): one result per partition, in
        order. Raises ControllerError (NOT_CONTROLLER, KAFKA_STORAGE_ERROR)."""
        async with self._lock:
            self._active_now()
            results, records = reassignments.alter_reassignments(
                self.image,
                requests,
                eligible_in(self.image),
                allow_replication_factor_change=allow_rf_change,
            )
            await self._commit(records)
            return results

    async def rebalance_leaders(self) -> int:
        """auto.leader.rebalance.enable's check, on the active controller's timer
        (elections.rebalance): the number of leaderships moved back to preferred
        replicas; nothing on a node that is not the active controller."""
        if self.writer.active_epoch < 0:
            return 0
        async with self._lock:
            records = rebalance(self.image)
            try:
                await self._commit(records)
            except ControllerError:
                return 0
            return len(records)

    # -- topics ----------------------------------------------------------------------
    def _check_new_topic(self, topic: NewTopic, image: MetadataImage) -> list[MetadataRecord]:
        validate_topic_name(topic.name)
        if topic.name in image.topics:
            raise ControllerError("TOPIC_ALREADY_EXISTS", f"topic {topic.name!r} already exists")
        collision = topic.name.replace(".", "_")
        for existing in image.topics:
            if existing.replace(".", "_") == collision:
                raise ControllerError(
                    "INVALID_TOPIC_EXCEPTION",
                    f"topic {topic.name!r} collides with existing topic {existing!r}",
                )
        assignments = self._assignments(topic, image)
        configs = {k: v for k, v in (topic.configs or {}).items() if v is not None}
        try:
            LogConfig.from_properties(configs)
        except LogConfigError as error:
            raise ControllerError("INVALID_CONFIG", str(error)) from None
        topic_id = uuid.uuid4()
        records = [MetadataRecord("Topic", {"name": topic.name, "topic_id": str(topic_id)})]
        for name, value in sorted(configs.items()):
            records.append(_config_record(TOPIC_RESOURCE, topic.name, name, value))
        for partition, replicas in sorted(assignments.items()):
            records.append(
                placement.partition_record(topic_id, partition, replicas, eligible_in(image))
            )
        return records

    def _assignments(self, topic: NewTopic, image: MetadataImage) -> dict[int, tuple[int, ...]]:
        if topic.assignments:
            if topic.num_partitions != -1 or topic.replication_factor != -1:
                raise ControllerError(
                    "INVALID_REQUEST",
                    "both partition assignments and partition count/replication factor given",
                )
            if sorted(topic.assignments) != list(range(len(topic.assignments))):
                raise ControllerError(
                    "INVALID_REPLICA_ASSIGNMENT", "partitions must be numbered 0..n-1"
                )
            ordered = [topic.assignments[p] for p in range(len(topic.assignments))]
            return dict(enumerate(placement.check_assignments(ordered, image.brokers)))
        defaults = self._defaults()
        partitions = topic.num_partitions
        if partitions == -1:
            partitions = defaults["num.partitions"]
        if partitions <= 0:
            raise ControllerError(
                "INVALID_PARTITIONS", f"number of partitions must be positive, got {partitions}"
            )
        factor = topic.replication_factor
        if factor == -1:
            factor = defaults["default.replication.factor"]
        if factor <= 0:
            raise ControllerError(
                "INVALID_REPLICATION_FACTOR", f"replication factor must be positive, got {factor}"
            )
        return dict(enumerate(placement.place(image.brokers, partitions, factor, self._rng)))

    async def create_topics(
        self, topics: Sequence[NewTopic], validate_only: bool
    ) -> list[ControllerError | MetadataImage]:
        """Per topic: the image after creation (the current one if validate_only), or the error."""
        async with self._lock:
            if self._requested_partitions(topics) > MAX_PARTITIONS_PER_REQUEST:
                error = ControllerError(
                    "POLICY_VIOLATION", "Excessively large number of partitions per request."
                )
                return [error for _ in topics]
            results: list[ControllerError | list[MetadataRecord]] = []
            names = [t.name for t in topics]
            for topic in topics:
                if names.count(topic.name) > 1:
                    results.append(
                        ControllerError("INVALID_REQUEST", f"topic {topic.name!r} listed twice")
                    )
                    continue
                try:
                    results.append(self._check_new_topic(topic, self.image))
                except ControllerError as error:
                    results.append(error)
            records = [r for item in results if isinstance(item, list) for r in item]
            try:
                image = self.image if validate_only else await self._commit(records)
            except ControllerError as failure:  # storage: nothing of the request committed
                return [item if isinstance(item, ControllerError) else failure for item in results]
            return [item if isinstance(item, ControllerError) else image for item in results]

    def _requested_partitions(self, topics: Sequence[NewTopic]) -> int:
        default = self._defaults()["num.partitions"]
        total = 0
        for topic in topics:
            if topic.assignments:
                total += len(topic.assignments)
            elif topic.num_partitions > 0:
                total += topic.num_partitions
            elif topic.num_partitions == -1:
                total += default
        return total

    async def delete_topics(self, names: Sequence[str | uuid.UUID]) -> list[ControllerError | None]:
        """Delete topics given by name or by topic id (DeleteTopics v6)."""
        async with self._lock:
            results: list[ControllerError | None] = []
            records = []
            for name in names:
                if isinstance(name, uuid.UUID):
                    topic = self.image.topic_by_id(name)
                    missing = ControllerError("UNKNOWN_TOPIC_ID", f"topic id {name} not found")
                else:
                    topic = self.image.topics.get(name)
                    missing = ControllerError(
                        "UNKNOWN_TOPIC_OR_PARTITION", f"topic {name!r} not found"
                    )
                if topic is None:
                    results.append(missing)
                    continue
                records.append(MetadataRecord("RemoveTopic", {"topic_id": str(topic.topic_id)}))
                results.append(None)
            try:
                await self._commit(records)
            except ControllerError as failure:  # storage: no topic of the request deleted
                return [failure if result is None else result for result in results]
            return results

    async def create_partitions(
        self,
        topic_name: str,
        count: int,
        assignments: Sequence[Sequence[int]] | None,
        validate_only: bool,
    ) -> None:
        async with self._lock:
            topic = self.image.topics.get(topic_name)
            if topic is None:
                raise ControllerError(
                    "UNKNOWN_TOPIC_OR_PARTITION", f"topic {topic_name!r} not found"
                )
            current = len(topic.partitions)
            if count - current > MAX_PARTITIONS_PER_REQUEST:
                raise ControllerError(
                    "POLICY_VIOLATION", "Excessively large number of partitions per request."
                )
            if count <= current:
                raise ControllerError(
                    "INVALID_PARTITIONS",
                    f"topic {topic_name!r} has {current} partitions; {count} would not add any",
                )
            factor = len(next(iter(topic.partitions.values())).replicas) if topic.partitions else 1
            new = list(range(current, count))
            chosen: Sequence[Sequence[int]]
            if assignments is not None:
                if len(assignments) != len(new):
                    raise ControllerError(
                        "INVALID_REPLICA_ASSIGNMENT",
                        f"{len(assignments)} assignments for {len(new)} new partitions",
                    )
                chosen = placement.check_assignments(
                    assignments, self.image.brokers, first_partition=current, expected_factor=factor
                )
            else:
                chosen = placement.place(
                    self.image.brokers, len(new), factor, self._rng, first_partition=current
                )
            if validate_only:
                return
            await self._commit(
                [
                    placement.partition_record(topic.topic_id, p, r, eligible_in(self.image))
                    for p, r in zip(new, chosen, strict=True)
                ]
            )

    # -- configs ---------------------------------------------------------------------
    async def alter_configs(
        self,
        resource_type: str,
        resource_name: str,
        changes: Mapping[str, str | None] | Callable[[Mapping[str, str]], Mapping[str, str | None]],
        validate_only: bool,
        *,
        replace: bool = False,
        validator: Callable[[Mapping[str, str]], None] | None = None,
    ) -> None:
        """Set (value) or delete (None) config keys of one resource; validated before commit.

        ``changes`` may be a function of the resource's current configs, called under
        the lock (IncrementalAlterConfigs APPEND/SUBTRACT); ``replace`` drops every key
        not in ``changes`` (legacy AlterConfigs); ``validator`` checks the resulting
        set and raises ControllerError (broker properties: the broker's own table).
        """
        async with self._lock:
            if resource_type == TOPIC_RESOURCE and resource_name not in self.image.topics:
                raise ControllerError(
                    "UNKNOWN_TOPIC_OR_PARTITION", f"topic {resource_name!r} not found"
                )
            current = dict(self.image.configs.get((resource_type, resource_name), {}))
            if callable(changes):
                changes = changes(current)
            merged = {} if replace else dict(current)
            for key, value in changes.items():
                if value is None:
                    merged.pop(key, None)
                else:
                    merged[key] = value
            if resource_type == TOPIC_RESOURCE:
                try:
                    LogConfig.from_properties(merged)
                except LogConfigError as error:
                    raise ControllerError("INVALID_CONFIG", str(error)) from None
            if validator is not None:
                validator(merged)
            if validate_only:
                return
            await self._commit(
                [
                    _config_record(resource_type, resource_name, key, merged.get(key))
                    for key in sorted(set(current) | set(merged))
                    if current.get(key) != merged.get(key)
                ]
            )

    # -- producer ids ------------------------------------------------------------------
    async def allocate_producer_ids(self, broker_id: int | None = None) -> tuple[int, int]:
        """Reserve a block of producer ids for ``broker_id`` (default: this node):
        (first id, count)."""
        async with self._lock:
            first = self.image.next_producer_id
            await self._commit(
                [
                    MetadataRecord(
                        "ProducerIds",
                        {
                            "broker_id": self.node_id if broker_id is None else broker_id,
                            "next_producer_id": first + PRODUCER_ID_BLOCK_SIZE,
                        },
                    )
                ]
            )
            return first, PRODUCER_ID_BLOCK_SIZE


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def _config_record(
    resource_type: str, resource_name: str, name: str, value: str | None
) -> MetadataRecord:
    return MetadataRecord(
        "Config",
        {
            "resource_type": resource_type,
            "resource_name": resource_name,
            "name": name,
            "value": value,
        },
    )


__all__ = [
    "BROKER_RESOURCE",
    "CONTROLLER_EPOCH",
    "Controller",
    "ControllerError",
    "NewTopic",
]
