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

The checks and records of new topics and partitions are topic_changes.py's, those of
config changes config_changes.py's, those of SCRAM credentials scram_changes.py's (this
module holds the lock, hands them the current image and commits what they return).
Bootstrap records (``storage format --add-scram``, bootstrap.py) are committed as a
batch of their own before the first change of a cluster whose image is still empty
(offset -1), so they are applied once, by whichever controller is active first.
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
import logging
import random
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Final

from odradek.metadata import alter_partition as isr_changes
from odradek.metadata import reassignment as reassignments
from odradek.metadata.acl_changes import create_acl_records, delete_acl_records
from odradek.metadata.broker_heartbeats import (
    DEFAULT_HEARTBEAT_INTERVAL_MS,
    DEFAULT_SESSION_TIMEOUT_MS,
    BrokerHeartbeat,
    BrokerHeartbeatManager,
    BrokerRegistration,
    HeartbeatReply,
    fence_records,
)
from odradek.metadata.config_changes import config_change_records
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
    AclEntry,
    MetadataImage,
    MetadataRecord,
)
from odradek.metadata.loader import MetadataLoader
from odradek.metadata.quota_changes import QuotaAlteration, quota_change_records
from odradek.metadata.scram_changes import (
    ScramDeletion,
    ScramUpsertion,
    UserResult,
    alter_credentials,
)
from odradek.metadata.topic_changes import (
    MAX_PARTITIONS_PER_REQUEST,
    NewTopic,
    new_partition_records,
    new_topic_records,
    requested_partitions,
)
from odradek.metadata.writer import CONTROLLER_EPOCH, MetadataWriter
from odradek.replica.interfaces import IsrOutcome, IsrProposal
from odradek.security.acls import AclFilter

logger = logging.getLogger(__name__)

METADATA_TOPIC: Final = "__cluster_metadata"
MIN_SESSION_CHECK_S: Final = 0.05  # the session timer's shortest sleep

Listener = Callable[[MetadataImage, MetadataImage], None]


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
        bootstrap: Sequence[MetadataRecord] = (),
    ) -> None:
        self.writer = writer
        # ``storage format --add-scram``'s records (metadata/bootstrap.py): committed
        # before the first change of a cluster whose log holds nothing yet.
        self._bootstrap = tuple(bootstrap)
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
        if self._bootstrap and self.image.offset < 0:
            offset = await self.writer.append(self._bootstrap)
            logger.info(
                "committed %d bootstrap record(s) (storage format --add-scram) at offset %d",
                len(self._bootstrap),
                offset,
            )
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
    async def create_topics(
        self, topics: Sequence[NewTopic], validate_only: bool
    ) -> list[ControllerError | MetadataImage]:
        """Per topic: the image after creation (the current one if validate_only), or the error."""
        async with self._lock:
            requested = requested_partitions(topics, self._defaults()["num.partitions"])
            if requested > MAX_PARTITIONS_PER_REQUEST:
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
                    results.append(new_topic_records(topic, self.image, self._defaults, self._rng))
                except ControllerError as error:
                    results.append(error)
            records = [r for item in results if isinstance(item, list) for r in item]
            try:
                image = self.image if validate_only else await self._commit(records)
            except ControllerError as failure:  # storage: nothing of the request committed
                return [item if isinstance(item, ControllerError) else failure for item in results]
            return [item if isinstance(item, ControllerError) else image for item in results]

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
        """CreatePartitions: grow ``topic_name`` to ``count`` partitions (topic_changes.py).
        Raises ControllerError."""
        async with self._lock:
            records = new_partition_records(self.image, topic_name, count, assignments, self._rng)
            if validate_only:
                return
            await self._commit(records)

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
            records = config_change_records(
                self.image,
                resource_type,
                resource_name,
                changes,
                replace=replace,
                validator=validator,
            )
            if validate_only:
                return
            await self._commit(records)

    # -- client quotas (quota_changes.py) --------------------------------------------
    async def alter_client_quotas(
        self, entries: Sequence[QuotaAlteration], validate_only: bool
    ) -> list[ControllerError | None]:
        """AlterClientQuotas: per entry None or its error; the valid entries' records
        are committed together."""
        async with self._lock:
            outcomes: list[ControllerError | None] = []
            records: list[MetadataRecord] = []
            for entry in entries:
                try:
                    records.extend(quota_change_records(self.image, entry))
                    outcomes.append(None)
                except ControllerError as failure:
                    outcomes.append(failure)
            if records and not validate_only:
                await self._commit(records)
            return outcomes

    # -- SCRAM credentials -------------------------------------------------------------
    async def alter_user_scram_credentials(
        self, deletions: Sequence[ScramDeletion], upsertions: Sequence[ScramUpsertion]
    ) -> list[UserResult]:
        """AlterUserScramCredentials (scram_changes.py): per user, None or its error;
        the accepted changes commit as one batch (a storage failure fails them all)."""
        async with self._lock:
            results, records = alter_credentials(self.image, deletions, upsertions)
            try:
                await self._commit(records)
            except ControllerError as failure:
                return [(user, failure if error is None else error) for user, error in results]
            return results

    # -- ACLs --------------------------------------------------------------------------
    async def create_acls(self, bindings: Sequence[AclEntry]) -> list[ControllerError | None]:
        """CreateAcls: per binding None (created, or there already) or its error
        (acl_changes.py); the valid ones are committed together."""
        async with self._lock:
            records, outcomes = create_acl_records(self.image, bindings)
            await self._commit(records)
            return outcomes

    async def delete_acls(
        self, filters: Sequence[AclFilter]
    ) -> list[ControllerError | list[AclEntry]]:
        """DeleteAcls: per filter the bindings it removed, or its error."""
        async with self._lock:
            records, outcomes = delete_acl_records(self.image, filters)
            await self._commit(records)
            return outcomes

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


__all__ = [
    "BROKER_RESOURCE",
    "CONTROLLER_EPOCH",
    "Controller",
    "ControllerError",
]
