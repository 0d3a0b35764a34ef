"""ControllerChannel: how a broker asks the active controller for a metadata change.

How this works and why: every change a handler or coordinator makes to the cluster —
create/delete topics, add partitions, alter configs (AlterConfigs and
IncrementalAlterConfigs), client quotas (AlterClientQuotas), ACLs (CreateAcls,
DeleteAcls), auto-create, producer-id blocks, leader elections (ElectLeaders),
partition reassignments (AlterPartitionReassignments), SCRAM credentials
(AlterUserScramCredentials) — goes through this Protocol, never to ``Controller``
directly. There is one implementation per place the controller can be:
``LocalControllerChannel`` calls the controller of this process (the single
zero-config node; and, behind
``GatedControllerChannel``, the controller listener's handlers of forwarded
requests), ``RemoteControllerChannel`` (controller_rpc.py) sends the change to the
active controller over the controller listener, as every broker of a quorum does
(Kafka forwards CreateTopics/DeleteTopics/CreatePartitions/AlterConfigs/
IncrementalAlterConfigs/AlterUserScramCredentials and has an AllocateProducerIds RPC;
broker registration is BrokerRegistration/BrokerHeartbeat's,
server/broker_lifecycle.py), so
the signatures follow what a request can carry:

- plain data in (names, counts, ``NewTopic``, ``ConfigOp``), never callables or images;
- results out as Kafka error codes: a call about many items returns one
  ``ControllerError`` or None per item, in order; a call about one item raises
  ``ControllerError`` (code and message: exactly what an RPC response carries);
- no ``MetadataImage`` crosses: the caller reads the image of its own
  ``MetadataView``. Contract: when a call returns success, the caller's image already
  shows the change. The local channel commits and applies before returning, so that
  holds at once; the RPC channel waits until the local image shows the change.

A partition leader's ISR changes (AlterPartition) take the same two paths: the local
and the RPC channel are each an ``IsrChannel`` (replica/interfaces.py), whose
request-level failures (NOT_CONTROLLER, STALE_BROKER_EPOCH, no controller reachable)
come back as that error in every outcome rather than raised.

It lives in ``metadata/`` (not ``server/``) because it is the metadata layer's write
interface: the coordinators use it too and must not import ``server``.

Config changes need rules that only the broker's config tables know: how APPEND/
SUBTRACT combine with the current value (a list config not set on the resource starts
from the broker's effective value) and whether the resulting set of broker or group
configs is valid. ``ConfigRules`` supplies them to the local channel, which applies
them under the controller's lock; on the RPC path the active controller runs the
same tables (every node has them), and the forwarding broker has already checked the
request's form (resource names, duplicate keys) in its handler.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from odradek.metadata.controller import Controller, ControllerError
from odradek.metadata.elections import ElectionResult
from odradek.metadata.image import AclEntry
from odradek.metadata.quota_changes import QuotaAlteration
from odradek.metadata.reassignment import ReassignmentRequest, ReassignmentResult
from odradek.metadata.scram_changes import ScramDeletion, ScramUpsertion, UserResult
from odradek.metadata.topic_changes import NewTopic
from odradek.replica.interfaces import IsrOutcome, IsrProposal
from odradek.security.acls import AclFilter

# IncrementalAlterConfigs config_operation values.
SET: Final = 0
DELETE: Final = 1
APPEND: Final = 2
SUBTRACT: Final = 3

Changes = dict[str, str | None]
Validator = Callable[[Mapping[str, str]], None]


@dataclass(frozen=True, slots=True)
class ConfigOp:
    """One config change: SET/APPEND/SUBTRACT ``value`` to ``name``, or DELETE it."""

    name: str
    op: int
    value: str | None


@dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    first_id: int
    count: int


class ControllerChannel(Protocol):
    async def create_topics(
        self, topics: Sequence[NewTopic], validate_only: bool
    ) -> list[ControllerError | None]:
        """Per topic: None (created, or would be with ``validate_only``) or the error."""
        ...

    async def delete_topics(
        self, targets: Sequence[str | uuid.UUID]
    ) -> list[ControllerError | None]:
        """Topics by name or id (DeleteTopics v6); per target: None or the error."""
        ...

    async def create_partitions(
        self,
        topic: str,
        count: int,
        assignments: Sequence[Sequence[int]] | None,
        validate_only: bool,
    ) -> None:
        """Grow ``topic`` to ``count`` partitions; raises ControllerError."""
        ...

    async def alter_configs(
        self,
        resource_type: str,
        resource_name: str,
        ops: Sequence[ConfigOp],
        *,
        replace: bool,
        validate_only: bool,
    ) -> None:
        """Apply ``ops`` to one resource's dynamic configs; ``replace`` (legacy
        AlterConfigs, SET ops only) drops every key the ops do not set. Raises
        ControllerError."""
        ...

    async def allocate_producer_ids(self, broker_id: int) -> ProducerIdBlock:
        """Reserve a block of producer ids for ``broker_id``; raises ControllerError."""
        ...

    async def elect_leaders(
        self, election_type: int, partitions: Sequence[tuple[str, int]] | None
    ) -> list[ElectionResult]:
        """PREFERRED (0) or UNCLEAN (1) elections of (topic, partition)s, or of every
        partition (None: only those not already led as asked are answered); raises
        ControllerError for the request as a whole."""
        ...

    async def alter_partition_reassignments(
        self, requests: Sequence[ReassignmentRequest], allow_rf_change: bool
    ) -> list[ReassignmentResult]:
        """Start, replace or cancel (null replicas) reassignments (reassignment.py); one
        result per partition; raises ControllerError for the request as a whole."""
        ...

    async def create_acls(self, bindings: Sequence[AclEntry]) -> list[ControllerError | None]:
        """CreateAcls: per binding None (created, or there already) or its error."""
        ...

    async def delete_acls(
        self, filters: Sequence[AclFilter]
    ) -> list[ControllerError | list[AclEntry]]:
        """DeleteAcls: per filter the bindings it removed, or its error."""
        ...

    async def alter_client_quotas(
        self, entries: Sequence[QuotaAlteration], validate_only: bool
    ) -> list[ControllerError | None]:
        """AlterClientQuotas (quota_changes.py): per entry None or its error."""
        ...

    async def alter_user_scram_credentials(
        self, deletions: Sequence[ScramDeletion], upsertions: Sequence[ScramUpsertion]
    ) -> list[UserResult]:
        """Delete and upsert SCRAM credentials (scram_changes.py); per user named, in
        first-seen order, None or the error."""
        ...


class ConfigRules(Protocol):
    """The config tables a controller needs to apply ``ConfigOp``s (see module doc)."""

    def changes(
        self, resource_type: str, resource_name: str, ops: Sequence[ConfigOp]
    ) -> Callable[[Mapping[str, str]], Changes]:
        """Check ``ops``; return how they change a resource's current configs."""
        ...

    def validator(self, resource_type: str, resource_name: str) -> Validator | None:
        """What checks the resulting set (raises ControllerError), if anything."""
        ...


class LocalControllerChannel:
    """Combined mode: calls the ``Controller`` of this process.

    ``controller`` is a getter because the broker opens the metadata log (and so
    builds the Controller) in ``start()``, after it has wired its services.
    """

    def __init__(self, controller: Callable[[], Controller], rules: ConfigRules) -> None:
        self._controller = controller
        self._rules = rules

    async def create_topics(
        self, topics: Sequence[NewTopic], validate_only: bool
    ) -> list[ControllerError | None]:
        outcomes = await self._controller().create_topics(topics, validate_only)
        return [o if isinstance(o, ControllerError) else None for o in outcomes]

    async def delete_topics(
        self, targets: Sequence[str | uuid.UUID]
    ) -> list[ControllerError | None]:
        return await self._controller().delete_topics(targets)

    async def create_partitions(
        self,
        topic: str,
        count: int,
        assignments: Sequence[Sequence[int]] | None,
        validate_only: bool,
    ) -> None:
        await self._controller().create_partitions(topic, count, assignments, validate_only)

    async def alter_configs(
        self,
        resource_type: str,
        resource_name: str,
        ops: Sequence[ConfigOp],
        *,
        replace: bool,
        validate_only: bool,
    ) -> None:
        if replace and any(op.op != SET for op in ops):
            raise ControllerError("INVALID_REQUEST", "a replacing config change only sets keys")
        changes = self._rules.changes(resource_type, resource_name, ops)
        await self._controller().alter_configs(
            resource_type,
            resource_name,
            changes,
            validate_only,
            replace=replace,
            validator=self._rules.validator(resource_type, resource_name),
        )

    async def allocate_producer_ids(self, broker_id: int) -> ProducerIdBlock:
        first, count = await self._controller().allocate_producer_ids(broker_id)
        return ProducerIdBlock(first, count)

    async def elect_leaders(
        self, election_type: int, partitions: Sequence[tuple[str, int]] | None
    ) -> list[ElectionResult]:
        return await self._controller().elect_leaders(election_type, partitions)

    async def alter_partition_reassignments(
        self, requests: Sequence[ReassignmentRequest], allow_rf_change: bool
    ) -> list[ReassignmentResult]:
        return await self._controller().alter_partition_reassignments(requests, allow_rf_change)

    async def alter_client_quotas(
        self, entries: Sequence[QuotaAlteration], validate_only: bool
    ) -> list[ControllerError | None]:
        return await self._controller().alter_client_quotas(entries, validate_only)

    async def alter_user_scram_credentials(
        self, deletions: Sequence[ScramDeletion], upsertions: Sequence[ScramUpsertion]
    ) -> list[UserResult]:
        return await self._controller().alter_user_scram_credentials(deletions, upsertions)

    async def create_acls(self, bindings: Sequence[AclEntry]) -> list[ControllerError | None]:
        return await self._controller().create_acls(bindings)

    async def delete_acls(
        self, filters: Sequence[AclFilter]
    ) -> list[ControllerError | list[AclEntry]]:
        return await self._controller().delete_acls(filters)

    async def alter_partition(
        self, broker_id: int, broker_epoch: int, proposals: Sequence[IsrProposal]
    ) -> list[IsrOutcome]:
        """``IsrChannel.alter_partition`` on this process's controller."""
        try:
            return await self._controller().alter_partition(broker_id, broker_epoch, proposals)
        except ControllerError as failure:
            return [IsrOutcome(failure.code) for _ in proposals]


class GatedControllerChannel:
    """A channel to this node's controller that only the active controller passes.

    The controller listener's admin handlers (the requests brokers forward) call the
    controller through this: on a node that is not the active controller (or not yet:
    before its claim is applied) every item is answered NOT_CONTROLLER at once, before
    anything is checked against an image that may be stale, so the forwarding broker
    asks the next controller and no stale verdict (TOPIC_ALREADY_EXISTS, ...) reaches
    a client. A node that loses leadership mid-call fails the commit with
    NOT_CONTROLLER too (the writer's own check).
    """

    def __init__(
        self,
        channel: ControllerChannel,
        active: Callable[[], bool],
        leader: Callable[[], int | None],
    ) -> None:
        self._channel = channel
        self._active = active
        self._leader = leader

    def _refusal(self) -> ControllerError | None:
        if self._active():
            return None
        return ControllerError(
            "NOT_CONTROLLER", f"this node is not the active controller (leader: {self._leader()})"
        )

    def _check(self) -> None:
        refusal = self._refusal()
        if refusal is not None:
            raise refusal

    async def create_topics(
        self, topics: Sequence[NewTopic], validate_only: bool
    ) -> list[ControllerError | None]:
        refusal = self._refusal()
        if refusal is not None:
            return [refusal for _ in topics]
        return await self._channel.create_topics(topics, validate_only)

    async def delete_topics(
        self, targets: Sequence[str | uuid.UUID]
    ) -> list[ControllerError | None]:
        refusal = self._refusal()
        if refusal is not None:
            return [refusal for _ in targets]
        return await self._channel.delete_topics(targets)

    async def create_partitions(
        self,
        topic: str,
        count: int,
        assignments: Sequence[Sequence[int]] | None,
        validate_only: bool,
    ) -> None:
        self._check()
        await self._channel.create_partitions(topic, count, assignments, validate_only)

    async def alter_configs(
        self,
        resource_type: str,
        resource_name: str,
        ops: Sequence[ConfigOp],
        *,
        replace: bool,
        validate_only: bool,
    ) -> None:
        self._check()
        await self._channel.alter_configs(
            resource_type, resource_name, ops, replace=replace, validate_only=validate_only
        )

    async def allocate_producer_ids(self, broker_id: int) -> ProducerIdBlock:
        self._check()
        return await self._channel.allocate_producer_ids(broker_id)

    async def elect_leaders(
        self, election_type: int, partitions: Sequence[tuple[str, int]] | None
    ) -> list[ElectionResult]:
        self._check()
        return await self._channel.elect_leaders(election_type, partitions)

    async def alter_partition_reassignments(
        self, requests: Sequence[ReassignmentRequest], allow_rf_change: bool
    ) -> list[ReassignmentResult]:
        self._check()
        return await self._channel.alter_partition_reassignments(requests, allow_rf_change)

    async def alter_client_quotas(
        self, entries: Sequence[QuotaAlteration], validate_only: bool
    ) -> list[ControllerError | None]:
        refusal = self._refusal()
        if refusal is not None:
            return [refusal for _ in entries]
        return await self._channel.alter_client_quotas(entries, validate_only)

    async def alter_user_scram_credentials(
        self, deletions: Sequence[ScramDeletion], upsertions: Sequence[ScramUpsertion]
    ) -> list[UserResult]:
        refusal = self._refusal()
        if refusal is not None:
            users = dict.fromkeys([d.user for d in deletions] + [u.user for u in upsertions])
            return [(user, refusal) for user in users]
        return await self._channel.alter_user_scram_credentials(deletions, upsertions)

    async def create_acls(self, bindings: Sequence[AclEntry]) -> list[ControllerError | None]:
        refusal = self._refusal()
        if refusal is not None:
            return [refusal for _ in bindings]
        return await self._channel.create_acls(bindings)

    async def delete_acls(
        self, filters: Sequence[AclFilter]
    ) -> list[ControllerError | list[AclEntry]]:
        refusal = self._refusal()
        if refusal is not None:
            return [refusal for _ in filters]
        return await self._channel.delete_acls(filters)


__all__ = [
    "APPEND",
    "DELETE",
    "SET",
    "SUBTRACT",
    "ConfigOp",
    "ConfigRules",
    "ControllerChannel",
    "ControllerError",
    "GatedControllerChannel",
    "LocalControllerChannel",
    "NewTopic",
    "ProducerIdBlock",
]
