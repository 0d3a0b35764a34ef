"""Broker: wires storage, metadata, replicas and the network into one process.

How this works and why: start-up follows the order in which each part needs the one
before it — lock and recover the log dirs (LogManager), open ``__cluster_metadata-0``
as the Raft log (DiskRaftLog, from its checkpointed recovery point) and publish what
its newest snapshot proves committed, checking the rest (RaftMetadataWriter.replay;
damage to its flushed part stops the broker with one line rather than starting an
empty cluster whose partition data would look stray), start the RaftDriver — the
voters of ``controller.quorum.voters`` over the controller listeners, or this node
alone, which elects itself without any network — and wait until the loader has
applied the quorum's high watermark of the current epoch; only then check partition
dirs against the image, bind the broker listeners (so port 0 becomes a real port),
start the broker lifecycle (broker_lifecycle.py: BrokerRegistration with those
endpoints, then BrokerHeartbeats, to the active controller over the controller
listeners, or in-process on the zero-config node), create the partitions the image
assigns here (ReplicaManager.catch_up), subscribe to the loader's deltas, wait until
the controller has unfenced this broker, and only then accept client connections and
print the ready line. The metadata log and quorum steps are broker_quorum.py's; the
controller's timers (controller_timers.py) fence brokers that stopped heartbeating,
move leaderships back to preferred replicas and take time-bound snapshots.

process.roles decides which of those parts run. A combined node runs all of them. A
controller-only node stops after the quorum: it binds only its controller listeners,
votes, leads, runs the controller and the session and snapshot timers, and never
binds a client listener, creates partitions, starts the coordinators or registers.
A broker-only node is not among controller.quorum.voters and has no controller
listener, so the same RaftDriver runs it as an observer (the core's rule for a node
outside the voter set): it fetches the metadata log from the leader, never votes or
stands, and its writer and loader apply what commits exactly as on a voter (its
controller is never active); it registers, heartbeats and forwards to the leader
its driver learnt, over the voters' controller listeners.

Shutdown runs the other way: a controlled shutdown (want_shut_down, a brief wait for
the controller's answer — which is this node's own controller when it is the active
one: the broker half goes first, as in Kafka, and the controller half resigns only
after), stop accepting, let in-flight requests finish, resign and stop the Raft
driver, flush and checkpoint every log, write the clean-shutdown marker
(broker_shutdown.py). The settings the coordinator and the fetchers are built with
come from broker_settings.py.

This module is the composition root: it builds the parts and hands each only the
narrow interfaces it needs — handlers get ``Services`` (services.py), the controller
listeners ``ControllerPlaneServices`` (the driver), the group coordinator a metadata
view, a partition writer and a topic creator (coordinator_io.py). Every metadata
change goes through one ``ControllerChannel``: the single zero-config node's
``LocalControllerChannel``, or, when controller.quorum.voters is set, the
``RemoteControllerChannel`` that forwards to the active controller over the
controller listeners — even when that is this node, so one code path serves every
node whoever leads. The controller listener serves those forwarded requests with
this node's own controller behind ``GatedControllerChannel`` (NOT_CONTROLLER unless
it is the active one), and BrokerRegistration/BrokerHeartbeat with the controller
itself. Both controller clients (forwarding, lifecycle) reach this node's own
controller where its listener bound (``own_controller``). Nothing imports this
module but the ``serve`` command and tests (and, for its type only, the modules that
take a ``Broker``: broker_views.py, broker_quorum.py, broker_shutdown.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from odradek.coordinator.group.coordinator import OFFSETS_TOPIC, GroupCoordinator
from odradek.coordinator.internal_topic import InternalTopic, InternalTopicCreator
from odradek.coordinator.runtime import leadership_changes
from odradek.coordinator.transaction.coordinator import (
    TRANSACTION_STATE_TOPIC,
    TransactionCoordinator,
)
from odradek.coordinator.transaction.producer_id_manager import ProducerIdManager
from odradek.metadata.controller import Controller
from odradek.metadata.controller_channel import ControllerChannel, LocalControllerChannel
from odradek.metadata.controller_rpc import RemoteControllerChannel
from odradek.metadata.delta import MetadataDelta, between
from odradek.metadata.image import BROKER_RESOURCE, TOPIC_RESOURCE, MetadataImage
from odradek.metadata.loader import MetadataLoader
from odradek.metadata.raft_writer import RaftMetadataWriter
from odradek.network.limits import ConnectionLimits
from odradek.network.server import SocketServer
from odradek.raft.disk_log import DiskRaftLog
from odradek.raft.driver import RaftDriver
from odradek.replica.fetcher import ReplicaFetcherManager, monotonic_ms
from odradek.replica.interfaces import IsrChannel, IsrOutcome, IsrProposal
from odradek.replica.log_dir_mover import LogDirMover
from odradek.replica.replica_manager import ReplicaManager
from odradek.replica.replica_selector import selector_for
from odradek.server.authorizer import build_authorizer
from odradek.server.broker_lifecycle import (
    BrokerLifecycleManager,
    broker_registration,
    lifecycle_manager,
    new_incarnation_id,
)
from odradek.server.broker_quorum import (
    CATCH_UP_POLL_S,
    forwarding_channel,
    load_metadata,
    start_quorum,
)
from odradek.server.broker_remote import build_remote_log_manager
from odradek.server.broker_settings import (
    cleaner_settings,
    coordinator_settings,
    dynamic_value,
    fetcher_settings,
    replication_quotas,
    transaction_settings,
)
from odradek.server.broker_shutdown import stop_broker
from odradek.server.broker_views import BrokerConfigs, BrokerMetadata
from odradek.server.config import (
    BROKER_CONFIGS,
    BROKER_ROLE,
    CONFIGS_BY_NAME,
    BrokerConfig,
    QuorumVoter,
)
from odradek.server.config_alter import BrokerConfigRules
from odradek.server.controller_timers import leader_balance_ticks, session_ticks, snapshot_ticks
from odradek.server.coordinator_io import ChannelTopicCreator, ReplicaPartitionWriter
from odradek.server.dispatcher import Dispatcher
from odradek.server.handlers import Plane
from odradek.server.metadata_log import METADATA_LOG_DIR
from odradek.server.quorum_describer import LocalQuorumDescriber
from odradek.server.quotas import ClientQuotaManager
from odradek.server.remote_metadata_transport import ClientMetadataTransport
from odradek.server.request_metrics import RequestTimes
from odradek.server.services import Services
from odradek.server.txn_markers import TxnMarkerWriter
from odradek.server.txn_verify import TxnVerifier
from odradek.storage.log import Log, wall_clock_ms
from odradek.storage.log_config import LogConfig
from odradek.storage.log_manager import LogManager, LogManagerSettings
from odradek.storage.meta_properties import (
    ensure_meta_properties,
    random_uuid,
    require_formatted,
)


class Broker:
    def __init__(self, config: BrokerConfig, *, truncate_damaged_metadata: bool = False) -> None:
        self.config = config
        # Start from the metadata before damage instead of refusing (an operator's choice).
        self.truncate_damaged_metadata = truncate_damaged_metadata
        self.node_id = config.node_id
        self.cluster_id = ""
        self.log_manager = LogManager(
            config.log_dirs,
            config.topic_defaults,
            settings=LogManagerSettings(
                retention_check_interval_ms=config["log.retention.check.interval.ms"],
                flush_scheduler_interval_ms=config["log.flush.scheduler.interval.ms"],
                flush_offset_checkpoint_interval_ms=config[
                    "log.flush.offset.checkpoint.interval.ms"
                ],
                high_watermark_checkpoint_interval_ms=config[
                    "replica.high.watermark.checkpoint.interval.ms"
                ],
                producer_id_expiration_ms=config["producer.id.expiration.ms"],
            ),
            reserved_dirs=frozenset({METADATA_LOG_DIR}),
            cleaner=cleaner_settings(config, {}),
        )
        self.metadata_log: Log | None = None
        self.raft_log: DiskRaftLog | None = None
        self.metadata_writer: RaftMetadataWriter | None = None
        self.raft_driver: RaftDriver | None = None
        # The CONTROLLER plane's listeners (a quorum is configured): a server of their
        # own, accepting before the broker listeners do, since the quorum must run
        # before this node can catch up.
        self.controller_server: SocketServer | None = None
        # One per process start: the controller tells this run from an earlier one.
        self.incarnation_id = new_incarnation_id()
        self.lifecycle: BrokerLifecycleManager | None = None
        # This node's voter entry at the controller listener it bound, once bound.
        self.own_controller: QuorumVoter | None = None
        self._session_timer: asyncio.Task[None] | None = None
        self._balance_timer: asyncio.Task[None] | None = None
        self._snapshot_timer: asyncio.Task[None] | None = None
        self.codec_warmup: asyncio.Task[None] | None = None
        self.metadata_loader = MetadataLoader()
        self.controller: Controller = None  # type: ignore[assignment]  # set in start()
        # Replication quotas (KIP-73): the leader's on the fetches it answers, the
        # follower's on its fetchers, both kept in step with the image's configs.
        self.replication_quotas = replication_quotas(config, monotonic_ms)
        # Replica fetchers: this node's followers copy from their leaders' inter-broker
        # listeners (named in the MetadataImage), the logs the ReplicaManager hosts.
        self.replica_fetchers = ReplicaFetcherManager(
            fetcher_settings(config),
            num_fetchers=config["num.replica.fetchers"],
            socket_timeout_ms=config["replica.socket.timeout.ms"],
            endpoint=self._inter_broker_endpoint,
            partition=lambda tp: self.replica_manager.follower_log(tp),
            broker_epoch=lambda: self.lifecycle.core.broker_epoch if self.lifecycle else -1,
            quota=self.replication_quotas.follower,
            ssl_context=config.inter_broker_ssl_context,
            sasl=config.inter_broker_sasl,
        )
        self.replica_manager = ReplicaManager(
            self.node_id,
            self.log_manager,
            fetching=self.replica_fetchers,
            # A leader's ISR shrinks and expansions go to the active controller
            # (AlterPartition) through the channel this node ends up with below.
            isr_channel=_ChannelIsr(lambda: self.isr_channel),
            broker_epoch=lambda: self.lifecycle.core.broker_epoch if self.lifecycle else -1,
            lag_time_max_ms=config["replica.lag.time.max.ms"],
            replica_selector=selector_for(config["replica.selector.class"]),
            leader_quota=self.replication_quotas.leader,
        )
        # AlterReplicaLogDirs: copies replicas into another of this broker's log dirs.
        self.log_dir_mover = LogDirMover(
            self.log_manager,
            self.replica_manager,
            quota=self.replication_quotas.alter_log_dirs,
            chunk_bytes=config["replica.fetch.max.bytes"],
        )
        # process.roles: a controller-only node binds no client listener and runs no
        # partitions, coordinators or broker lifecycle; a broker-only node (not among
        # controller.quorum.voters) replicates the metadata log as a Raft observer.
        self.is_broker = BROKER_ROLE in config.roles
        listeners = config.listeners or config.controller_listeners
        self.default_listener_name = listeners[0].name
        metadata = self.metadata_view = BrokerMetadata(self)
        configs = self.config_view = BrokerConfigs(self)
        # This node's own controller: the single node's channel, the controller
        # listener's (behind the gate) and this node's registration.
        self.local_channel = LocalControllerChannel(
            lambda: self.controller, BrokerConfigRules(metadata, configs)
        )
        self.remote_channel: RemoteControllerChannel | None = None
        self.controller_channel: ControllerChannel = self.local_channel
        self.isr_channel: IsrChannel = self.local_channel
        if config.quorum_voters and self.is_broker:
            # A quorum's broker sends every change to the active controller, itself
            # included (one code path whichever node leads).
            self.controller_channel = self.remote_channel = forwarding_channel(self)
            self.isr_channel = self.remote_channel
        self.group_coordinator = GroupCoordinator(
            metadata,
            ReplicaPartitionWriter(self.replica_manager),
            ChannelTopicCreator(self.controller_channel),
            coordinator_settings(config),
            wall_clock_ms,
        )
        # Transaction markers: into partitions led here, or to their leaders.
        self.txn_markers = TxnMarkerWriter(
            metadata,
            self.replica_manager,
            lambda: self.group_coordinator,
            self._inter_broker_endpoint,
            ssl_context=config.inter_broker_ssl_context,
            sasl=config.inter_broker_sasl,
        )
        producer_ids = ProducerIdManager(self.node_id, self.controller_channel)
        self.txn_coordinator = TransactionCoordinator(
            metadata,
            ReplicaPartitionWriter(self.replica_manager),
            ChannelTopicCreator(self.controller_channel),
            transaction_settings(config),
            wall_clock_ms,
            producer_ids,
            self.txn_markers,
        )
        # Tiered storage (KIP-405): None unless remote.log.storage.system.enable; its
        # metadata goes through __remote_log_metadata with this broker's own client.
        self.remote_log_manager = build_remote_log_manager(
            config, self.replica_manager, self._remote_metadata_transport
        )
        self.replica_manager.remote_log_manager = self.remote_log_manager
        if self.remote_log_manager is not None:  # followers build from remote storage
            self.replica_fetchers.tier_state = self.replica_manager.build_tier_state
        self._remote_log_task: asyncio.Task[None] | None = None
        # KIP-890 part 1: transactional produce verified with the coordinator.
        self.txn_verifier = (
            TxnVerifier(
                metadata,
                lambda: self.txn_coordinator,
                self._inter_broker_endpoint,
                ssl_context=config.inter_broker_ssl_context,
                sasl=config.inter_broker_sasl,
            )
            if config["transaction.partition.verification.enable"]
            else None
        )
        self.services = Services(
            metadata=metadata,
            config=configs,
            replicas=self.replica_manager,
            controller=self.controller_channel,
            groups=self.group_coordinator,
            producer_ids=producer_ids,
            txns=self.txn_coordinator,
            log_dirs=self.log_manager,
            # DescribeQuorum on a broker listener: forwarded to the active controller,
            # or answered by the zero-config node's own quorum.
            quorum=self.remote_channel or LocalQuorumDescriber(lambda: self.raft_driver),
            log_dir_moves=self.log_dir_mover,
            txn_markers=self.txn_markers,
            txn_verifier=self.txn_verifier,
            # Client quotas read the loader's image on each request: changes apply at once.
            client_quotas=ClientQuotaManager(
                lambda: self.metadata_loader.image.client_quotas,
                monotonic_ms,
                samples=config["quota.window.num"],
                window_ms=config["quota.window.size.seconds"] * 1000,
            ),
            authorizer=build_authorizer(config, lambda: metadata.image.acls),
        )
        # TotalTimeMs per request name, both planes' dispatchers together (/metrics).
        self.request_times = RequestTimes()
        self.dispatchers = {
            plane: Dispatcher(self.services, plane, self.request_times) for plane in Plane
        }
        self.dispatcher = self.dispatchers[Plane.BROKER]
        self.server = SocketServer(
            self.dispatcher,
            max_frame_bytes=config["socket.request.max.bytes"],
            idle_timeout_ms=config["connections.max.idle.ms"],
            limits=self.connection_limits(),
            queued_max_request_bytes=config["queued.max.request.bytes"],
        )
        self._topic_defaults_cache: tuple[tuple[tuple[str, str], ...], LogConfig] | None = None
        self._housekeeping: asyncio.Task[None] | None = None
        self.cleaner_task: asyncio.Task[None] | None = None
        self._isr_expiration: asyncio.Task[None] | None = None
        self._log_dir_moves: asyncio.Task[None] | None = None
        self.stopped = asyncio.Event()

    def _remote_metadata_transport(self, topic: InternalTopic) -> ClientMetadataTransport:
        def bootstrap() -> str | None:
            found = self._inter_broker_endpoint(self.node_id)
            return None if found is None else f"{found[0]}:{found[1]}"

        creator = InternalTopicCreator(
            self.metadata_view, ChannelTopicCreator(self.controller_channel), topic
        )
        return ClientMetadataTransport(
            bootstrap,
            creator,
            f"broker-{self.node_id}-rlmm",
            ssl_context=self.config.inter_broker_ssl_context,
            sasl=self.config.inter_broker_sasl,
        )

    def _inter_broker_endpoint(self, broker_id: int) -> tuple[str, int] | None:
        """(host, port) of ``broker_id``'s inter-broker listener, as it registered it."""
        listener = self.config.inter_broker_listener
        broker = self.image.brokers.get(broker_id)
        if listener is None or broker is None:
            return None
        for name, host, port in broker.endpoints:
            if name == listener.name:
                return host, port
        return None

    # -- lifecycle -----------------------------------------------------------------
    async def start(self) -> list[str]:
        """Bring the broker up; returns the listener URLs with their real ports."""
        loop = asyncio.get_running_loop()
        # Identity first: nothing in a log dir is loaded or written before it is known
        # to belong to this cluster and node. Only the zero-config node (no quorum
        # configured) formats its own dirs; a quorum's nodes need `odradek storage format`.
        format_empty = not self.config.quorum_configured
        if not format_empty:
            require_formatted(self.config.identity_dirs)  # before lock_dirs creates them
        await loop.run_in_executor(None, self.log_manager.lock_dirs)
        self.cluster_id = ensure_meta_properties(
            self.config.identity_dirs,
            self.node_id,
            random_uuid,
            reserved=(METADATA_LOG_DIR,),
            format_empty=format_empty,
        )
        await loop.run_in_executor(None, self.log_manager.load_logs)
        await loop.run_in_executor(None, load_metadata, self)
        # Partition dirs against the image of the whole local log, before the quorum
        # writes anything (quorum-state, a LeaderChange): a refusal changes nothing.
        assert self.metadata_writer is not None
        self.replica_manager.check_loaded_logs(self.metadata_writer.local_image)
        controller_bound = await start_quorum(self)
        # Again against what the quorum committed (the same on a single voter).
        self.replica_manager.check_loaded_logs(self.controller.image)
        self._session_timer = asyncio.create_task(
            session_ticks(self.controller, self.config["broker.session.timeout.ms"])
        )
        if self.config["auto.leader.rebalance.enable"]:
            interval_s = self.config["leader.imbalance.check.interval.seconds"]
            self._balance_timer = asyncio.create_task(
                leader_balance_ticks(self.controller, interval_s)
            )
        self._housekeeping = asyncio.create_task(self.log_manager.run())
        self.cleaner_task = asyncio.create_task(self.log_manager.cleaner.run())
        if self.remote_log_manager is not None:
            self._remote_log_task = asyncio.create_task(self.remote_log_manager.run())
        self._isr_expiration = asyncio.create_task(self.replica_manager.isr_expiration())
        self._log_dir_moves = asyncio.create_task(self.log_dir_mover.run())
        self._snapshot_timer = asyncio.create_task(snapshot_ticks(self.metadata_writer))
        if not self.is_broker:
            # A controller-only node: it votes, leads, runs the controller and writes
            # snapshots; nothing of a broker (no client listener, partitions, groups or
            # registration).
            return [b.url() for b in controller_bound]
        protocols = self.config.protocol_map
        bound = [
            self.server.bind(
                li.name,
                li.host,
                li.port,
                self.dispatchers[self.plane_of(li.name)],
                security_protocol=protocols[li.name],
                tls=self.config.listener_tls.get(li.name),
            )
            for li in self.config.listeners
        ]
        ports = {b.name: b.port for b in bound}
        endpoints = []
        for listener in self.config.advertised_listeners:
            port = listener.port or ports.get(listener.name, listener.port)
            host = listener.host or "localhost"
            endpoints.append((listener.name, host, port))
        self._start_lifecycle(endpoints)
        # The loader caught up with the quorum's high watermark (start_quorum): the
        # image is everything committed, so the partitions it assigns here are created.
        self.update_replication_quotas()
        self.replica_manager.catch_up(self.image, self.topic_config)
        self.metadata_loader.subscribe(self._on_metadata)
        self._feed_coordinators(between(MetadataImage(), self.image), self.image)
        self.group_coordinator.start()
        self.txn_coordinator.start()
        self.server.quotas.update(self.connection_limits())
        self.server.reserve_files()
        assert self.lifecycle is not None
        await self.lifecycle.wait_unfenced()
        # ... and this node's own image shows it (its Metadata lists this broker).
        while (me := self.image.brokers.get(self.node_id)) is None or me.fenced:
            await asyncio.sleep(CATCH_UP_POLL_S)
        self.server.start()
        return [b.url() for b in bound] + [b.url() for b in controller_bound]

    def _start_lifecycle(self, endpoints: list[tuple[str, str, int]]) -> None:
        """Register this broker and keep heartbeating (broker_lifecycle.py): over the
        controller listeners to the active controller when a quorum is configured,
        in-process on the zero-config node."""
        self.lifecycle = lifecycle_manager(
            self.config,
            self.cluster_id,
            self.controller_voters(),
            broker_registration(self.config, self.incarnation_id, endpoints),
            lambda: None if self.raft_driver is None else self.raft_driver.leader_id,
            lambda: self.controller,
            lambda: self.metadata_loader.image.offset,
        )
        self.lifecycle.start()

    def controller_voters(self) -> list[QuorumVoter]:
        """controller.quorum.voters, with this node at the controller listener it bound."""
        own = self.own_controller
        return [
            own if own is not None and v.node_id == own.node_id else v
            for v in self.config.quorum_voters
        ]

    def unclean_election_default(self) -> bool:
        """The broker default of unclean.leader.election.enable, dynamic over static."""
        raw = self.dynamic_broker_configs().get("unclean.leader.election.enable")
        if raw is None:
            return bool(self.config["unclean.leader.election.enable"])
        return raw.strip().lower() == "true"

    async def stop(self) -> None:
        """Controlled shutdown, then every part stopped in turn (broker_shutdown.py)."""
        await stop_broker(self)

    def background_tasks(self) -> tuple[asyncio.Task[Any] | None, ...]:
        """The tasks ``stop`` cancels, in the order it cancels them."""
        return (
            self._log_dir_moves,  # before housekeeping: a swap uses the log manager
            self._remote_log_task,  # before housekeeping: copies read local segments
            self._housekeeping,
            self._isr_expiration,
            self._snapshot_timer,
            self._session_timer,
            self._balance_timer,
            self.codec_warmup,
        )

    # -- metadata --------------------------------------------------------------------
    @property
    def image(self) -> MetadataImage:
        """The loader's image: the controller's too in combined mode, and all a
        broker-only node (fed from a replicated metadata log) has."""
        return self.metadata_loader.image

    def _on_metadata(self, delta: MetadataDelta, image: MetadataImage) -> None:
        if delta.configs:
            self.update_replication_quotas()
        self.replica_manager.apply_delta(delta, image, self.topic_config)
        self._feed_coordinators(delta, image)
        if delta.broker_configs_changed:
            self.server.quotas.update(self.connection_limits())
            settings = cleaner_settings(self.config, self.dynamic_broker_configs())
            if settings != self.log_manager.cleaner.settings:
                self.log_manager.cleaner.update_settings(settings)
        if delta.topics_changed:
            self.server.reserve_files()  # new partitions hold files: keep them a reserve

    def _feed_coordinators(self, delta: MetadataDelta, image: MetadataImage) -> None:
        """Coordinator ownership follows the leadership of __consumer_offsets and
        __transaction_state partitions, with their epochs."""
        for partition, epoch in leadership_changes(delta, OFFSETS_TOPIC, self.node_id):
            self.group_coordinator.on_leadership(partition, epoch)
        self.group_coordinator.on_metadata(image)
        for partition, epoch in leadership_changes(delta, TRANSACTION_STATE_TOPIC, self.node_id):
            self.txn_coordinator.on_leadership(partition, epoch)

    def plane_of(self, listener: str) -> Plane:
        """A listener named in controller.listener.names serves the controller plane."""
        controller_listeners = self.config["controller.listener.names"] or ()
        return Plane.CONTROLLER if listener in controller_listeners else Plane.BROKER

    def update_replication_quotas(self) -> None:
        """KIP-73: the rates and throttled replicas the image's configs now say."""
        topics = {
            name: configs
            for (kind, name), configs in self.image.configs.items()
            if kind == TOPIC_RESOURCE
        }
        self.replication_quotas.apply(self.dynamic_broker_configs(), topics)

    def dynamic_broker_configs(self) -> Mapping[str, str]:
        """Cluster-wide ("") then per-node dynamic broker configs from the image."""
        image = self.metadata_loader.image
        merged = dict(image.configs.get((BROKER_RESOURCE, ""), {}))
        merged.update(image.configs.get((BROKER_RESOURCE, str(self.node_id)), {}))
        return merged

    def connection_limits(self) -> ConnectionLimits:
        """max.connections and max.connections.per.ip(.overrides), dynamic over static."""
        dynamic = self.dynamic_broker_configs() if self.controller else {}
        names = ("max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides")
        values = {name: dynamic_value(self.config, dynamic, name) for name in names}
        return ConnectionLimits(
            values["max.connections"],
            values["max.connections.per.ip"],
            values["max.connections.per.ip.overrides"] or (),
            explicit_max=self.config.is_set("max.connections") or "max.connections" in dynamic,
        )

    def dynamic_defaults(self) -> dict[str, int]:
        dynamic = self.dynamic_broker_configs()
        result = {}
        for name in ("num.partitions", "default.replication.factor"):
            raw = dynamic.get(name)
            result[name] = CONFIGS_BY_NAME[name].parse(name, raw) if raw else self.config[name]
        return result

    def topic_defaults(self) -> LogConfig:
        """Static broker log.* defaults overlaid with dynamic broker configs.

        Rebuilt only when the dynamic configs change (not once per topic of every
        metadata change): they are compared as a sorted item tuple.
        """
        dynamic = self.dynamic_broker_configs()
        if not dynamic:
            return self.config.topic_defaults
        key = tuple(sorted(dynamic.items()))
        cached = self._topic_defaults_cache
        if cached is not None and cached[0] == key:
            return cached[1]
        merged = dict(self.config.original)
        merged.update(dynamic)
        defaults = BrokerConfig(merged).topic_defaults
        self._topic_defaults_cache = (key, defaults)
        return defaults

    def effective_topic_config(
        self, topic: str, explicit: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        overrides = dict(self.image.topic_configs(topic)) if explicit is None else dict(explicit)
        return LogConfig.from_properties(overrides, self.topic_defaults()).to_properties()

    def topic_config(self, topic: str) -> LogConfig:
        return LogConfig.from_properties(
            dict(self.image.topic_configs(topic)), self.topic_defaults()
        )


class _ChannelIsr:
    """The IsrChannel over the controller channel the broker picks after building its
    ReplicaManager (local on a single node, the RPC to the active controller in a
    quorum)."""

    def __init__(self, channel: Callable[[], IsrChannel]) -> None:
        self._channel = channel

    async def alter_partition(
        self, broker_id: int, broker_epoch: int, proposals: Sequence[IsrProposal]
    ) -> list[IsrOutcome]:
        return await self._channel().alter_partition(broker_id, broker_epoch, proposals)


def broker_config_names() -> list[str]:
    return [d.name for d in BROKER_CONFIGS]


__all__ = ["Broker"]
