"""The narrow interfaces handlers see, in place of the Broker object.

How this works and why: a handler gets a ``BrokerServices`` and from it only what it
needs — a read-only view of the metadata, the replica manager, the controller
channel, the group coordinator, config lookups, producer ids, the log dirs. Each part
is a small Protocol, so a test fakes just the part a handler uses, and the cluster
work can swap one (an RPC ``ControllerChannel`` on a broker-only node, a transaction
coordinator) without touching handlers. A controller listener's handlers get a
``ControllerServices`` instead: the Raft driver for the quorum APIs, the same
``AdminServices`` the broker's admin handlers use, over this node's own controller,
for the admin requests brokers forward, and the controller's broker decisions for
BrokerRegistration and BrokerHeartbeat. ``broker.py`` is the
composition root: it builds a ``Services`` from its parts and nothing imports it.

Where the parts live: ``MetadataView`` in ``metadata/view.py`` and
``ControllerChannel`` in ``metadata/controller_channel.py``, because coordinators use
them too and must not import ``server``; the coordinator's own write path is
``coordinator/partition_writer.py``. What is here is what only handlers use.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from odradek.metadata.controller_channel import ControllerChannel
from odradek.metadata.view import Endpoint, MetadataView
from odradek.server.authorizer import ALLOW_ALL, Authorizer

if TYPE_CHECKING:
    from odradek.coordinator.group.coordinator import GroupCoordinator
    from odradek.coordinator.transaction.coordinator import TransactionCoordinator
    from odradek.metadata.broker_heartbeats import (
        BrokerHeartbeat,
        BrokerRegistration,
        HeartbeatReply,
    )
    from odradek.raft.driver import RaftDriver
    from odradek.replica.interfaces import IsrOutcome, IsrProposal
    from odradek.replica.replica_manager import ReplicaManager
    from odradek.server.config import BrokerConfig
    from odradek.server.quotas import ClientQuotaManager
    from odradek.server.txn_markers import TxnMarkerWriter
    from odradek.server.txn_verify import TxnVerifier
    from odradek.storage.log import Log
    from odradek.storage.log_config import LogConfig


class ConfigView(Protocol):
    """Broker properties as this node sees them: static, and with dynamic overrides."""

    @property
    def static(self) -> BrokerConfig:
        """The properties the process started with (server.properties, flags)."""
        ...

    def dynamic_defaults(self) -> dict[str, int]:
        """num.partitions and default.replication.factor, dynamic over static."""
        ...

    def topic_defaults(self) -> LogConfig:
        """The log.* broker defaults of every topic config, dynamic over static."""
        ...

    def effective_topic_config(
        self, topic: str, explicit: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """A topic's every config: its overrides (``explicit``, else the image's) over
        the defaults."""
        ...


class ConfigContext(Protocol):
    """What config describe/alter/validate needs: the image and the broker properties."""

    @property
    def metadata(self) -> MetadataView: ...

    @property
    def config(self) -> ConfigView: ...


class ProducerIdSource(Protocol):
    async def next_producer_id(self) -> int:
        """A producer id no other producer got; raises ControllerError if no block."""
        ...


class LogDirsView(Protocol):
    """The partitions on this node's disks (DescribeLogDirs). Reading ``Log`` sizes
    here is a storage detail in a handler, to move under ``replicas`` with step 3."""

    @property
    def logs(self) -> Mapping[tuple[str, int], Log]: ...

    @property
    def log_dirs(self) -> Sequence[Path]: ...

    @property
    def future_logs(self) -> Mapping[tuple[str, int], Log]:
        """The copies being made in another dir (AlterReplicaLogDirs)."""
        ...


class LogDirMoves(Protocol):
    """AlterReplicaLogDirs (``replica.log_dir_mover.LogDirMover`` fits)."""

    def alter(self, topic: str, index: int, path: str) -> str:
        """Move one hosted replica to the log dir ``path``: the Kafka error name."""
        ...


class AdminServices(ConfigContext, Protocol):
    """What the metadata-changing admin handlers (CreateTopics, DeleteTopics,
    CreatePartitions, AlterConfigs, IncrementalAlterConfigs) need; both planes serve
    them: a broker listener through its channel (forwarding, in a quorum), a
    controller listener through this node's own controller."""

    @property
    def controller(self) -> ControllerChannel: ...

    @property
    def authorizer(self) -> Authorizer:
        """Whether the request's principal may act (authorizer.py); allow-all unless
        ``authorizer.class.name`` is set, and on the controller plane (the forwarding
        broker already checked)."""
        ...


class QuorumDescriber(Protocol):
    """DescribeQuorum asked on a broker listener: forwarded to the active controller
    (``RemoteControllerChannel``), or answered by the zero-config node's own quorum."""

    async def describe_quorum(self, request: Any) -> Any:
        """The DescribeQuorumResponse to a client's request; raises ControllerError."""
        ...


class BrokerServices(AdminServices, Protocol):
    @property
    def replicas(self) -> ReplicaManager: ...

    @property
    def groups(self) -> GroupCoordinator: ...

    @property
    def txns(self) -> TransactionCoordinator | None:
        """The transaction coordinator (coordinator/transaction/coordinator.py); None
        until the broker wires one: the transaction APIs, FindCoordinator of a
        transactional id and InitProducerId with one answer COORDINATOR_NOT_AVAILABLE."""
        ...

    @property
    def txn_markers(self) -> TxnMarkerWriter:
        """Writes transaction markers into partitions led here (WriteTxnMarkers)."""
        ...

    @property
    def txn_verifier(self) -> TxnVerifier | None:
        """KIP-890 part 1's check of a transactional produce with the coordinator;
        None when ``transaction.partition.verification.enable`` is false."""
        ...

    @property
    def producer_ids(self) -> ProducerIdSource: ...

    @property
    def log_dirs(self) -> LogDirsView: ...

    @property
    def quorum(self) -> QuorumDescriber | None: ...

    @property
    def log_dir_moves(self) -> LogDirMoves | None: ...


class BrokerControl(Protocol):
    """The controller's broker decisions (``metadata.controller.Controller`` fits)."""

    async def register_broker(self, request: BrokerRegistration) -> int:
        """The broker epoch; raises ControllerError."""
        ...

    async def broker_heartbeat(self, request: BrokerHeartbeat) -> HeartbeatReply:
        """Raises ControllerError."""
        ...

    async def alter_partition(
        self, broker_id: int, broker_epoch: int, proposals: Sequence[IsrProposal]
    ) -> list[IsrOutcome]:
        """A leader's ISR changes (AlterPartition): one outcome per proposal; raises
        ControllerError for the request (NOT_CONTROLLER, STALE_BROKER_EPOCH, ...)."""
        ...


class ControllerServices(AdminServices, Protocol):
    """What the CONTROLLER plane's handlers see: the node's Raft driver (the quorum
    APIs); for the forwarded admin requests, this node's image and config tables
    and a channel to its own controller that answers NOT_CONTROLLER unless this node
    is the active controller (``GatedControllerChannel``); and the controller's broker
    registration and heartbeats (NOT_CONTROLLER unless active, from the controller)."""

    @property
    def raft(self) -> RaftDriver: ...

    @property
    def brokers(self) -> BrokerControl: ...


@dataclass(frozen=True, slots=True)
class ControllerPlaneServices:
    """The plain holder of a controller listener's services."""

    raft: RaftDriver
    metadata: MetadataView
    config: ConfigView
    controller: ControllerChannel
    brokers: BrokerControl
    authorizer: Authorizer = ALLOW_ALL
    # The node's authorizer, for the plane's gate: CLUSTER_ACTION on the cluster for
    # every request (the handlers' own ``authorizer`` stays allow-all: what a forwarded
    # request may do was checked by the broker that forwarded it).
    peer_authorizer: Authorizer = ALLOW_ALL


@dataclass(frozen=True, slots=True)
class Services:
    """The plain holder ``broker.py`` fills; tests fill it with fakes."""

    metadata: MetadataView
    config: ConfigView
    replicas: ReplicaManager
    controller: ControllerChannel
    groups: GroupCoordinator
    producer_ids: ProducerIdSource
    log_dirs: LogDirsView
    txns: TransactionCoordinator | None = None
    quorum: QuorumDescriber | None = None
    log_dir_moves: LogDirMoves | None = None
    txn_markers: TxnMarkerWriter = None  # type: ignore[assignment]  # tests without txns
    txn_verifier: TxnVerifier | None = None
    # Client quotas (server/quotas.py); None: nothing is measured or throttled.
    client_quotas: ClientQuotaManager | None = None
    authorizer: Authorizer = ALLOW_ALL


__all__ = [
    "AdminServices",
    "BrokerControl",
    "BrokerServices",
    "ConfigContext",
    "ConfigView",
    "ControllerChannel",
    "ControllerPlaneServices",
    "ControllerServices",
    "Endpoint",
    "LogDirMoves",
    "LogDirsView",
    "MetadataView",
    "ProducerIdSource",
    "QuorumDescriber",
    "Services",
]
