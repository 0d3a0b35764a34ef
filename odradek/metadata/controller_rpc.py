"""RemoteControllerChannel: the ControllerChannel that forwards to the active controller.

How this works and why: a broker of a quorum does not decide metadata changes; the
active controller does. Each call of the channel (controller_channel.py) becomes the
Kafka request that carries it — CreateTopics, DeleteTopics, CreatePartitions,
AlterConfigs (the ``replace`` form), IncrementalAlterConfigs, CreateAcls, DeleteAcls
(acl_rpc.py), and AllocateProducerIds,
Kafka's broker→controller RPC for producer-id blocks — sent over the controller
listener by ``ControllerClient`` (controller_client.py), which finds the active
controller and retries NOT_CONTROLLER and lost connections until the deadline. The
controller's per-item errors come back as ``ControllerError``s with the code and
message the response carries, exactly as ``LocalControllerChannel`` returns them, so
the broker's handlers cannot tell the two apart. The controller side is
``server/handlers/controller_admin.py``.

The channel's contract — when a call returns success, the caller's image already
shows the change — is kept by waiting for it in the local image: Kafka's responses
carry no metadata offset to wait for, so after a success the channel polls the
local ``image()`` (every ``IMAGE_POLL_S``, at most ``image_wait_s``) until it shows
what the controller reported: a created topic under its name (with the topic id the
response names), a deleted one gone, the partition count reached, each changed
config key at its new value (APPEND/SUBTRACT: the items present/absent), the
producer-id block below the image's next producer id. Waiting for a predicate of
the change, rather than for a metadata offset, needs no extra round trip and is
exact for the one thing the caller reads next. If the local node does not catch up
in time (it lags the quorum), the call still returns success — the change *is*
committed, and an error would make the client retry a change that was made — and
the wait is logged. ``validate_only`` calls and failures do not wait.

When no controller answers in time the call fails as a whole: REQUEST_TIMED_OUT,
for every item of CreateTopics/DeleteTopics (the channel's per-item contract), raised
by the single-item calls.

DescribeQuorum sent to a broker listener is forwarded as it is
(``describe_quorum``): the client's request at the client's version goes to the
active controller (a controller that is not the leader answers the partition with
NOT_LEADER_OR_FOLLOWER, retried like NOT_CONTROLLER) and its response goes back
unchanged, as Kafka's brokers forward it.

AlterUserScramCredentials is built and read in scram_rpc.py (the image then shows
each accepted credential change). AlterPartition (a leader's ISR changes,
``IsrChannel``), ElectLeaders and AlterPartitionReassignments are built and read in
partition_rpc.py; ElectLeaders
waits for the local image to show the elected leaders and AlterPartitionReassignments
the new replica sets, AlterPartition does not (the leader takes the answer itself).

Broker registration is not a channel call: it is BrokerRegistration/BrokerHeartbeat's
(server/broker_lifecycle.py), sent over a controller client of its own.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Final

from kio.schema.errors import ErrorCode

from odradek.client._core.connection import request_entity
from odradek.metadata import acl_rpc, partition_rpc
from odradek.metadata.acl_rpc import ACL_VERSIONS, CREATE_ACLS_KEY, DELETE_ACLS_KEY
from odradek.metadata.controller_channel import (
    APPEND,
    DELETE,
    SET,
    SUBTRACT,
    ConfigOp,
    ProducerIdBlock,
)
from odradek.metadata.controller_client import ControllerClient
from odradek.metadata.elections import ElectionResult
from odradek.metadata.errors import ControllerError
from odradek.metadata.image import (
    BROKER_RESOURCE,
    GROUP_RESOURCE,
    TOPIC_RESOURCE,
    AclEntry,
    MetadataImage,
)
from odradek.metadata.partition_rpc import (
    ALTER_PARTITION_KEY,
    ALTER_PARTITION_VERSIONS,
    ALTER_REASSIGNMENTS_KEY,
    ALTER_REASSIGNMENTS_VERSIONS,
    ELECT_LEADERS_KEY,
    ELECT_LEADERS_VERSIONS,
)
from odradek.metadata.quota_changes import QuotaAlteration
from odradek.metadata.reassignment import ReassignmentRequest, ReassignmentResult
from odradek.metadata.scram_changes import ScramDeletion, ScramUpsertion, UserResult
from odradek.metadata.scram_rpc import (
    ALTER_SCRAM_KEY,
    ALTER_SCRAM_VERSIONS,
    alter_user_scram_credentials,
    credentials_shown,
)
from odradek.metadata.topic_changes import NewTopic
from odradek.replica.interfaces import IsrOutcome, IsrProposal
from odradek.security.acls import AclFilter

logger = logging.getLogger(__name__)

CREATE_TOPICS_KEY: Final = 19
DELETE_TOPICS_KEY: Final = 20
ALTER_CONFIGS_KEY: Final = 33
CREATE_PARTITIONS_KEY: Final = 37
INCREMENTAL_ALTER_CONFIGS_KEY: Final = 44
ALLOCATE_PRODUCER_IDS_KEY: Final = 67
ALTER_CLIENT_QUOTAS_KEY: Final = 49
DESCRIBE_QUORUM_KEY: Final = 55
# DescribeQuorum as a broker listener serves and forwards it (the controller plane's range).
DESCRIBE_QUORUM_VERSIONS: Final = (0, 2)
# The versions a broker forwards with and a controller listener serves (the broker
# plane's ranges of the same APIs; AllocateProducerIds has only v0).
FORWARDED_VERSIONS: Final[dict[int, tuple[int, int]]] = {
    CREATE_TOPICS_KEY: (2, 7),
    DELETE_TOPICS_KEY: (1, 6),
    ALTER_CONFIGS_KEY: (0, 2),
    CREATE_PARTITIONS_KEY: (0, 3),
    INCREMENTAL_ALTER_CONFIGS_KEY: (0, 1),
    ALLOCATE_PRODUCER_IDS_KEY: (0, 0),
    ALTER_CLIENT_QUOTAS_KEY: (0, 1),
    ELECT_LEADERS_KEY: ELECT_LEADERS_VERSIONS,
    ALTER_REASSIGNMENTS_KEY: ALTER_REASSIGNMENTS_VERSIONS,
    ALTER_PARTITION_KEY: ALTER_PARTITION_VERSIONS,  # a broker's own request, not forwarded
    ALTER_SCRAM_KEY: ALTER_SCRAM_VERSIONS,
    CREATE_ACLS_KEY: ACL_VERSIONS,
    DELETE_ACLS_KEY: ACL_VERSIONS,
}
TOPIC_IDS_VERSION: Final = 6  # DeleteTopics names topics by id from v6
# ConfigResource.Type on the wire, by the image's resource type.
WIRE_RESOURCE_TYPES: Final = {TOPIC_RESOURCE: 2, BROKER_RESOURCE: 4, GROUP_RESOURCE: 32}

# How long a forwarded request keeps looking for the active controller: below the
# clients' own request.timeout.ms (30 s) so they get the broker's REQUEST_TIMED_OUT.
DEFAULT_FORWARD_TIMEOUT_S: Final = 25.0
# How long a success waits for the local image to show the change, and how often it looks.
DEFAULT_IMAGE_WAIT_S: Final = 10.0
IMAGE_POLL_S: Final = 0.005
# The broker epoch sent with AllocateProducerIds until registration gives brokers
# epochs (BrokerRegistration); the controller does not check it yet.
UNKNOWN_BROKER_EPOCH: Final = -1

Predicate = Callable[[MetadataImage], bool]


def _error(code: ErrorCode, message: str | None) -> ControllerError | None:
    if code == ErrorCode.none:
        return None
    name = code.name.upper()
    return ControllerError(name, message or name)


class RemoteControllerChannel:
    def __init__(
        self,
        client: ControllerClient,
        image: Callable[[], MetadataImage],
        *,
        timeout_s: float = DEFAULT_FORWARD_TIMEOUT_S,
        image_wait_s: float = DEFAULT_IMAGE_WAIT_S,
    ) -> None:
        self.client = client
        self._image = image
        self._timeout_s = timeout_s
        self._image_wait_s = image_wait_s

    async def _send(self, api_key: int, build: Callable[[int], Any]) -> Any:
        return await self.client.send(api_key, build, timeout_s=self._timeout_s)

    def _timeout(self) -> datetime.timedelta:
        return datetime.timedelta(seconds=self._timeout_s)

    async def _wait_for(self, what: str, predicate: Predicate) -> None:
        """Until the local image shows the change (bounded; see the module doc)."""
        deadline = time.monotonic() + self._image_wait_s
        while not predicate(self._image()):
            if time.monotonic() >= deadline:
                logger.warning(
                    "%s: committed by the controller, but this node's metadata has not "
                    "caught up after %.1f s (image offset %d)",
                    what,
                    self._image_wait_s,
                    self._image().offset,
                )
                return
            await asyncio.sleep(IMAGE_POLL_S)

    # -- topics ----------------------------------------------------------------------
    async def create_topics(
        self, topics: Sequence[NewTopic], validate_only: bool
    ) -> list[ControllerError | None]:
        def build(version: int) -> Any:
            return request_entity(
                CREATE_TOPICS_KEY,
                version,
                topics=tuple(_creatable(version, t) for t in topics),
                timeout=self._timeout(),
                validate_only=validate_only,
            )

        try:
            response = await self._send(CREATE_TOPICS_KEY, build)
            results = _in_order(response.topics, len(topics), "CreateTopics")
        except ControllerError as failure:  # no answer: the same error for every topic
            return [failure for _ in topics]
        errors = [_error(r.error_code, getattr(r, "error_message", None)) for r in results]
        if not validate_only:
            for topic, result, error in zip(topics, results, errors, strict=True):
                if error is None:
                    await self._wait_for(
                        f"topic {topic.name!r} created",
                        _topic_created(topic.name, getattr(result, "topic_id", None)),
                    )
        return errors

    async def delete_topics(
        self, targets: Sequence[str | uuid.UUID]
    ) -> list[ControllerError | None]:
        def build(version: int) -> Any:
            if version >= TOPIC_IDS_VERSION:
                states = tuple(
                    request_entity(
                        DELETE_TOPICS_KEY,
                        version,
                        "DeleteTopicState",
                        name=t if isinstance(t, str) else None,
                        topic_id=t if isinstance(t, uuid.UUID) else None,
                    )
                    for t in targets
                )
                return request_entity(
                    DELETE_TOPICS_KEY, version, topics=states, timeout=self._timeout()
                )
            if any(isinstance(t, uuid.UUID) for t in targets):
                raise ControllerError(
                    "UNSUPPORTED_VERSION", "the controller cannot delete topics by id"
                )
            return request_entity(
                DELETE_TOPICS_KEY,
                version,
                topic_names=tuple(str(t) for t in targets),
                timeout=self._timeout(),
            )

        try:
            response = await self._send(DELETE_TOPICS_KEY, build)
            results = _in_order(response.responses, len(targets), "DeleteTopics")
        except ControllerError as failure:
            return [failure for _ in targets]
        errors = [_error(r.error_code, getattr(r, "error_message", None)) for r in results]
        for target, error in zip(targets, errors, strict=True):
            if error is None:
                await self._wait_for(f"topic {target} deleted", _topic_deleted(target))
        return errors

    async def create_partitions(
        self,
        topic: str,
        count: int,
        assignments: Sequence[Sequence[int]] | None,
        validate_only: bool,
    ) -> None:
        def build(version: int) -> Any:
            wanted = request_entity(
                CREATE_PARTITIONS_KEY,
                version,
                "CreatePartitionsTopic",
                name=topic,
                count=count,
                assignments=None
                if assignments is None
                else tuple(
                    request_entity(
                        CREATE_PARTITIONS_KEY,
                        version,
                        "CreatePartitionsAssignment",
                        broker_ids=tuple(a),
                    )
                    for a in assignments
                ),
            )
            return request_entity(
                CREATE_PARTITIONS_KEY,
                version,
                topics=(wanted,),
                timeout=self._timeout(),
                validate_only=validate_only,
            )

        response = await self._send(CREATE_PARTITIONS_KEY, build)
        (result,) = _in_order(response.results, 1, "CreatePartitions")
        error = _error(result.error_code, result.error_message)
        if error is not None:
            raise error
        if not validate_only:
            await self._wait_for(
                f"topic {topic!r} grown to {count} partitions", _partitions_reach(topic, count)
            )

    # -- configs ---------------------------------------------------------------------
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
        wire_type = WIRE_RESOURCE_TYPES.get(resource_type)
        if wire_type is None:
            raise ControllerError("INVALID_REQUEST", f"unsupported resource {resource_type}")
        api_key = ALTER_CONFIGS_KEY if replace else INCREMENTAL_ALTER_CONFIGS_KEY

        def build(version: int) -> Any:
            if replace:
                configs = tuple(
                    request_entity(api_key, version, "AlterableConfig", name=o.name, value=o.value)
                    for o in ops
                )
            else:
                configs = tuple(
                    request_entity(
                        api_key,
                        version,
                        "AlterableConfig",
                        name=o.name,
                        config_operation=o.op,
                        value=o.value,
                    )
                    for o in ops
                )
            resource = request_entity(
                api_key,
                version,
                "AlterConfigsResource",
                resource_type=wire_type,
                resource_name=resource_name,
                configs=configs,
            )
            return request_entity(
                api_key, version, resources=(resource,), validate_only=validate_only
            )

        response = await self._send(api_key, build)
        (result,) = _in_order(response.responses, 1, "AlterConfigs")
        error = _error(result.error_code, result.error_message)
        if error is not None:
            raise error
        if not validate_only:
            await self._wait_for(
                f"configs of {resource_type} {resource_name!r} changed",
                _configs_show((resource_type, resource_name), ops, replace),
            )

    # -- producer ids, brokers -----------------------------------------------------------
    # -- client quotas ---------------------------------------------------------------
    async def alter_client_quotas(
        self, entries: Sequence[QuotaAlteration], validate_only: bool
    ) -> list[ControllerError | None]:
        key = ALTER_CLIENT_QUOTAS_KEY

        def build(version: int) -> Any:
            return request_entity(
                key,
                version,
                entries=tuple(
                    request_entity(
                        key,
                        version,
                        "EntryData",
                        entity=tuple(
                            request_entity(key, version, "EntityData", entity_type=t, entity_name=n)
                            for t, n in e.entity
                        ),
                        ops=tuple(
                            request_entity(
                                key,
                                version,
                                "OpData",
                                key=k,
                                value=0.0 if v is None else v,
                                remove=v is None,
                            )
                            for k, v in e.ops
                        ),
                    )
                    for e in entries
                ),
                validate_only=validate_only,
            )

        try:
            response = await self._send(key, build)
            results = _in_order(response.entries, len(entries), "AlterClientQuotas")
        except ControllerError as failure:
            return [failure for _ in entries]
        errors = [_error(r.error_code, r.error_message) for r in results]
        for entry, error in zip(entries, errors, strict=True):
            if error is None and not validate_only:
                await self._wait_for("client quotas changed", _quotas_show(entry))
        return errors

    async def allocate_producer_ids(self, broker_id: int) -> ProducerIdBlock:
        def build(version: int) -> Any:
            return request_entity(
                ALLOCATE_PRODUCER_IDS_KEY,
                version,
                broker_id=broker_id,
                broker_epoch=UNKNOWN_BROKER_EPOCH,
            )

        response = await self._send(ALLOCATE_PRODUCER_IDS_KEY, build)
        error = _error(response.error_code, None)
        if error is not None:
            raise error
        block = ProducerIdBlock(int(response.producer_id_start), int(response.producer_id_len))
        if block.count <= 0 or block.first_id < 0:
            raise ControllerError(
                "UNKNOWN_SERVER_ERROR", f"the controller sent an empty producer-id block {block}"
            )
        end = block.first_id + block.count
        await self._wait_for(
            f"producer ids up to {end} reserved", lambda image: image.next_producer_id >= end
        )
        return block

    # -- partition leadership ------------------------------------------------------------
    async def elect_leaders(
        self, election_type: int, partitions: Sequence[tuple[str, int]] | None
    ) -> list[ElectionResult]:
        results = await partition_rpc.elect_leaders(
            self.client, self._timeout_s, election_type, partitions
        )
        await self._wait_for("leaders elected", partition_rpc.elected(election_type, results))
        return results

    async def alter_partition_reassignments(
        self, requests: Sequence[ReassignmentRequest], allow_rf_change: bool
    ) -> list[ReassignmentResult]:
        results = await partition_rpc.alter_partition_reassignments(
            self.client, self._timeout_s, requests, allow_rf_change
        )
        await self._wait_for("reassignments started", partition_rpc.reassigned(requests, results))
        return results

    # -- SCRAM credentials (scram_rpc.py) ------------------------------------------------
    async def alter_user_scram_credentials(
        self, deletions: Sequence[ScramDeletion], upsertions: Sequence[ScramUpsertion]
    ) -> list[UserResult]:
        results = await alter_user_scram_credentials(
            self.client, self._timeout_s, deletions, upsertions
        )
        if any(error is None for _, error in results):
            await self._wait_for(
                "SCRAM credentials changed", credentials_shown(deletions, upsertions, results)
            )
        return results

    async def alter_partition(
        self, broker_id: int, broker_epoch: int, proposals: Sequence[IsrProposal]
    ) -> list[IsrOutcome]:
        """``IsrChannel.alter_partition``: AlterPartition to the active controller."""
        return await partition_rpc.alter_partition(
            self.client, self._timeout_s, broker_id, broker_epoch, proposals
        )

    # -- ACLs (acl_rpc.py) -----------------------------------------------------------
    async def create_acls(self, bindings: Sequence[AclEntry]) -> list[ControllerError | None]:
        outcomes = await acl_rpc.create_acls(self.client, self._timeout_s, bindings)
        await self._wait_for("ACLs created", acl_rpc.created(bindings, outcomes))
        return outcomes

    async def delete_acls(
        self, filters: Sequence[AclFilter]
    ) -> list[ControllerError | list[AclEntry]]:
        outcomes = await acl_rpc.delete_acls(self.client, self._timeout_s, filters)
        await self._wait_for("ACLs deleted", acl_rpc.deleted(outcomes))
        return outcomes

    # -- the quorum's state --------------------------------------------------------------
    async def describe_quorum(self, request: Any) -> Any:
        """The active controller's DescribeQuorumResponse to ``request`` (a client's
        DescribeQuorumRequest, forwarded at its own version)."""

        def build(version: int) -> Any:
            if request.__version__ > version:
                raise ControllerError(
                    "UNSUPPORTED_VERSION",
                    f"the controller serves DescribeQuorum up to v{version}, "
                    f"asked v{request.__version__}",
                )
            return request

        return await self.client.send(
            DESCRIBE_QUORUM_KEY,
            build,
            timeout_s=self._timeout_s,
            is_not_controller=_quorum_not_led_here,
        )

    async def close(self) -> None:
        await self.client.close()


def _quorum_not_led_here(response: Any) -> bool:
    """A DescribeQuorum answered by a controller that does not lead: ask another."""
    return any(
        partition.error_code == ErrorCode.not_leader_or_follower
        for topic in response.topics
        for partition in topic.partitions
    )


def _creatable(version: int, topic: NewTopic) -> Any:
    return request_entity(
        CREATE_TOPICS_KEY,
        version,
        "CreatableTopic",
        name=topic.name,
        num_partitions=topic.num_partitions,
        replication_factor=topic.replication_factor,
        assignments=tuple(
            request_entity(
                CREATE_TOPICS_KEY,
                version,
                "CreatableReplicaAssignment",
                partition_index=index,
                broker_ids=tuple(brokers),
            )
            for index, brokers in sorted((topic.assignments or {}).items())
        ),
        configs=tuple(
            request_entity(
                CREATE_TOPICS_KEY, version, "CreatableTopicConfig", name=name, value=value
            )
            for name, value in (topic.configs or {}).items()
        ),
    )


def _in_order(results: Sequence[Any], expected: int, api: str) -> Sequence[Any]:
    """A response's items, one per item asked, in order (as odradek's controller answers)."""
    if len(results) != expected:
        raise ControllerError(
            "UNKNOWN_SERVER_ERROR",
            f"the controller answered {api} with {len(results)} results for {expected} items",
        )
    return results


def _topic_created(name: str, topic_id: uuid.UUID | None) -> Predicate:
    def shown(image: MetadataImage) -> bool:
        topic = image.topics.get(name)
        if topic is None:
            return False
        return topic_id is None or topic_id.int == 0 or topic.topic_id == topic_id

    return shown


def _topic_deleted(target: str | uuid.UUID) -> Predicate:
    if isinstance(target, uuid.UUID):
        return lambda image: image.topic_by_id(target) is None
    return lambda image: target not in image.topics


def _partitions_reach(name: str, count: int) -> Predicate:
    def shown(image: MetadataImage) -> bool:
        topic = image.topics.get(name)
        return topic is not None and len(topic.partitions) >= count

    return shown


def _configs_show(resource: tuple[str, str], ops: Sequence[ConfigOp], replace: bool) -> Predicate:
    def shown(image: MetadataImage) -> bool:
        configs = image.configs.get(resource, {})
        if replace and set(configs) != {o.name for o in ops}:
            return False
        for op in ops:
            value = configs.get(op.name)
            if op.op == SET and value != op.value:
                return False
            if op.op == DELETE and value is not None:
                return False
            if op.op in (APPEND, SUBTRACT):
                items = {p.strip() for p in (value or "").split(",") if p.strip()}
                given = {p.strip() for p in (op.value or "").split(",") if p.strip()}
                if op.op == APPEND and not given <= items:
                    return False
                if op.op == SUBTRACT and given & items:
                    return False
        return True

    return shown


def _quotas_show(entry: QuotaAlteration) -> Predicate:
    def shown(image: MetadataImage) -> bool:
        current = image.client_quotas.get(entry.entity, {})
        return all(current.get(k) == (None if v is None else float(v)) for k, v in entry.ops)

    return shown


__all__ = [
    "DESCRIBE_QUORUM_VERSIONS",
    "FORWARDED_VERSIONS",
    "WIRE_RESOURCE_TYPES",
    "RemoteControllerChannel",
]
