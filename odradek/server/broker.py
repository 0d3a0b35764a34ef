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
print the ready line. The active controller's session timer (``_session_ticks``)
fences brokers that stopped heartbeating.

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
driver, flush and checkpoint every log, write the clean-shutdown marker.

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
module but the ``serve`` command and tests.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from odradek.aio import cancel_and_wait
from odradek.coordinator.group.classic import GroupSettings
from odradek.coordinator.group.consumer_model import ConsumerGroupSettings
from odradek.coordinator.group.coordinator import (
    OFFSETS_TOPIC,
    CoordinatorSettings,
    GroupCoordinator,
)
from odradek.coordinator.runtime import leadership_changes
from odradek.coordinator.transaction.producer_id_manager import ProducerIdManager
from odradek.metadata.controller import Controller
from odradek.metadata.controller_channel import (
    ControllerChannel,
    GatedControllerChannel,
    LocalControllerChannel,
)
from odradek.metadata.controller_client import ControllerClient, connector
from odradek.metadata.controller_rpc import (
    DESCRIBE_QUORUM_KEY,
    DESCRIBE_QUORUM_VERSIONS,
    FORWARDED_VERSIONS,
    RemoteControllerChannel,
)
from odradek.metadata.delta import MetadataDelta, between
from odradek.metadata.errors import ControllerError
from odradek.metadata.image import BROKER_RESOURCE, MetadataImage
from odradek.metadata.loader import MetadataLoader
from odradek.metadata.raft_writer import RaftMetadataWriter
from odradek.metadata.snapshotter import SnapshotPolicy
from odradek.metadata.writer import MetadataSnapshotsUnusableError
from odradek.network.limits import ConnectionLimits
from odradek.network.server import SocketServer
from odradek.protocol.messages import warm_codecs
from odradek.raft.config import RaftConfig
from odradek.raft.control_records import leader_change_entry
from odradek.raft.disk_log import DiskRaftLog
from odradek.raft.driver import RaftDriver
from odradek.raft.election_store import FileElectionStore
from odradek.raft.snapshots import SNAPSHOT_SUFFIX, FileSnapshotStore
from odradek.replica.fetcher import ReplicaFetcherManager
from odradek.replica.fetcher_state import FetcherSettings
from odradek.replica.interfaces import IsrChannel, IsrOutcome, IsrProposal
from odradek.replica.replica_manager import ReplicaManager
from odradek.replica.replica_selector import selector_for
from odradek.server.broker_lifecycle import (
    BrokerLifecycleManager,
    broker_registration,
    lifecycle_manager,
    new_incarnation_id,
)
from odradek.server.broker_views import BrokerConfigs, BrokerMetadata
from odradek.server.config import (
    BROKER_CONFIGS,
    BROKER_ROLE,
    CONFIGS_BY_NAME,
    BrokerConfig,
    ConfigError,
    QuorumVoter,
)
from odradek.server.config_alter import BrokerConfigRules
from odradek.server.coordinator_io import ChannelTopicCreator, ReplicaPartitionWriter
from odradek.server.dispatcher import Dispatcher
from odradek.server.handlers import Plane, supported_versions
from odradek.server.metadata_log import (
    METADATA_LOG_CONFIG,
    METADATA_LOG_DIR,
    MetadataLogDamagedError,
    damaged_message,
    missing_message,
    open_metadata_log,
    seed_election_epoch,
)
from odradek.server.quorum_describer import LocalQuorumDescriber
from odradek.server.services import ControllerPlaneServices, Services
from odradek.storage.errors import CommittedDataCorruptError, StorageError
from odradek.storage.log import Log, wall_clock_ms
from odradek.storage.log_config import LogConfig
from odradek.storage.log_manager import LogManager, LogManagerSettings
from odradek.storage.meta_properties import (
    ensure_meta_properties,
    random_uuid,
    require_formatted,
)

logger = logging.getLogger(__name__)

# How often the time bound of metadata snapshots is checked (commits check the bytes).
SNAPSHOT_CHECK_INTERVAL_S: Final = 1.0
# Start-up polls the loader's progress towards the quorum's high watermark this often
# (a single voter is there within one append linger), and logs the wait every 5 s.
CATCH_UP_POLL_S: Final = 0.01
CATCH_UP_LOG_EVERY_S: Final = 5.0
# How long a SIGTERM'd broker waits for the controller's should_shut_down.
CONTROLLED_SHUTDOWN_WAIT_S: Final = 1.0


def internal_replication_factor(config: BrokerConfig, name: str) -> int:
    """An internal topic's replication factor config (offsets.topic.replication.factor,
    transaction.state.log.replication.factor): 1 on the zero-config single node unless
    set, as Kafka's single-node example configs set it (one broker never meets 3)."""
    if not config.quorum_configured and not config.is_set(name):
        return 1
    return int(config[name])


def coordinator_settings(config: BrokerConfig) -> CoordinatorSettings:
    return CoordinatorSettings(
        partitions=config["offsets.topic.num.partitions"],
        replication_factor=internal_replication_factor(config, "offsets.topic.replication.factor"),
        segment_bytes=config["offsets.topic.segment.bytes"],
        metadata_max_bytes=config["offset.metadata.max.bytes"],
        retention_ms=config["offsets.retention.minutes"] * 60_000,
        retention_check_interval_ms=config["offsets.retention.check.interval.ms"],
        group=GroupSettings(
            min_session_timeout_ms=config["group.min.session.timeout.ms"],
            max_session_timeout_ms=config["group.max.session.timeout.ms"],
            initial_rebalance_delay_ms=config["group.initial.rebalance.delay.ms"],
            max_size=config["group.max.size"],
        ),
        consumer=ConsumerGroupSettings(
            session_timeout_ms=config["group.consumer.session.timeout.ms"],
            heartbeat_interval_ms=config["group.consumer.heartbeat.interval.ms"],
            assignors=config["group.consumer.assignors"],
            max_size=config["group.consumer.max.size"],
        ),
    )


def fetcher_settings(config: BrokerConfig) -> FetcherSettings:
    """The replica.* configs a follower's fetchers obey (Kafka's names)."""
    return FetcherSettings(
        replica_id=config.node_id,
        max_wait_ms=config["replica.fetch.wait.max.ms"],
        min_bytes=config["replica.fetch.min.bytes"],
        max_bytes=config["replica.fetch.response.max.bytes"],
        partition_max_bytes=config["replica.fetch.max.bytes"],
        backoff_ms=config["replica.fetch.backoff.ms"],
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
        self._codec_warmup: asyncio.Task[None] | None = None
        self.metadata_loader = MetadataLoader()
        self.controller: Controller = None  # type: ignore[assignment]  # set in start()
        # Replica fetchers: this node's followers copy from their leaders' inter-broker
        # listeners (named in the MetadataImage), the logs the ReplicaManager hosts.
        self.replica_fetchers = ReplicaFetcherManager(
            fetcher_settings(config),
            num_fetchers=config["num.replica.fetchers"],
            socket_timeout_ms=config["replica.socket.timeout.ms"],
            endpoint=self._inter_broker_endpoint,
            partition=lambda tp: self.replica_manager.follower_log(tp),
            broker_epoch=lambda: self.lifecycle.core.broker_epoch if self.lifecycle else -1,
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
            self.controller_channel = self.remote_channel = self._remote_channel()
            self.isr_channel = self.remote_channel
        self.group_coordinator = GroupCoordinator(
            metadata,
            ReplicaPartitionWriter(self.replica_manager),
            ChannelTopicCreator(self.controller_channel),
            coordinator_settings(config),
            wall_clock_ms,
        )
        self.services = Services(
            metadata=metadata,
            config=configs,
            replicas=self.replica_manager,
            controller=self.controller_channel,
            groups=self.group_coordinator,
            producer_ids=ProducerIdManager(self.node_id, self.controller_channel),
            log_dirs=self.log_manager,
            # DescribeQuorum on a broker listener: forwarded to the active controller,
            # or answered by the zero-config node's own quorum.
            quorum=self.remote_channel or LocalQuorumDescriber(lambda: self.raft_driver),
        )
        self.dispatchers = {plane: Dispatcher(self.services, plane) for plane in Plane}
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
        self._isr_expiration: asyncio.Task[None] | None = None
        self.stopped = asyncio.Event()

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

    def _remote_channel(self) -> RemoteControllerChannel:
        try:
            raft_config = RaftConfig.from_properties(self.config.original)
        except ValueError:
            raft_config = RaftConfig()  # start() refuses the properties with one line
        client = ControllerClient(
            self.config.quorum_voters,
            lambda: None if self.raft_driver is None else self.raft_driver.leader_id,
            connector(
                client_id=f"broker-{self.node_id}-forwarding",
                versions={**FORWARDED_VERSIONS, DESCRIBE_QUORUM_KEY: DESCRIBE_QUORUM_VERSIONS},
            ),
            retry_backoff_s=raft_config.retry_backoff_ms / 1000,
            connect_timeout_s=raft_config.request_timeout_ms / 1000,
        )
        return RemoteControllerChannel(client, lambda: self.image)

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
        await loop.run_in_executor(None, self._load_metadata)
        # Partition dirs against the image of the whole local log, before the quorum
        # writes anything (quorum-state, a LeaderChange): a refusal changes nothing.
        assert self.metadata_writer is not None
        self.replica_manager.check_loaded_logs(self.metadata_writer.local_image)
        controller_bound = await self._start_quorum()
        # Again against what the quorum committed (the same on a single voter).
        self.replica_manager.check_loaded_logs(self.controller.image)
        self._session_timer = asyncio.create_task(self._session_ticks())
        if self.config["auto.leader.rebalance.enable"]:
            self._balance_timer = asyncio.create_task(self._leader_balance_ticks())
        self._housekeeping = asyncio.create_task(self.log_manager.run())
        self._isr_expiration = asyncio.create_task(self.replica_manager.isr_expiration())
        self._snapshot_timer = asyncio.create_task(self._snapshot_ticks())
        if not self.is_broker:
            # A controller-only node: it votes, leads, runs the controller and writes
            # snapshots; nothing of a broker (no client listener, partitions, groups or
            # registration).
            return [b.url() for b in controller_bound]
        bound = [
            self.server.bind(li.name, li.host, li.port, self.dispatchers[self.plane_of(li.name)])
            for li in self.config.listeners
        ]
        ports = {b.name: b.port for b in bound}
        endpoints = []
        for listener in self.config.advertised_listeners:
            port = listener.port or ports.get(listener.name, listener.port)
            host = listener.host or "localhost"
            endpoints.append((listener.name, host, port))
        self._start_lifecycle(endpoints)
        # The loader caught up with the quorum's high watermark (_start_quorum): the
        # image is everything committed, so the partitions it assigns here are created.
        self.replica_manager.catch_up(self.image, self.topic_config)
        self.metadata_loader.subscribe(self._on_metadata)
        self._feed_coordinators(between(MetadataImage(), self.image), self.image)
        self.group_coordinator.start()
        self.server.quotas.update(self.connection_limits())
        self.server.reserve_files()
        assert self.lifecycle is not None
        await self.lifecycle.wait_unfenced()
        # ... and this node's own image shows it (its Metadata lists this broker).
        while (me := self.image.brokers.get(self.node_id)) is None or me.fenced:
            await asyncio.sleep(CATCH_UP_POLL_S)
        self.server.start()
        return [b.url() for b in bound] + [b.url() for b in controller_bound]

    async def _start_quorum(self) -> list[Any]:
        """Start the Raft driver over the opened metadata log (and the controller
        listeners when a quorum is configured); return once the loader has applied
        everything the quorum has committed (a single voter: once its LeaderChange
        commits). Returns the bound controller listeners."""
        raft_log, writer = self.raft_log, self.metadata_writer
        assert raft_log is not None and writer is not None
        voters: tuple[QuorumVoter, ...] = self.config.quorum_voters or (
            QuorumVoter(self.node_id, "localhost", 0),  # alone: elects itself, no network
        )
        store = FileElectionStore(
            raft_log.storage_log.directory, frozenset(v.node_id for v in voters), self.cluster_id
        )
        seed_election_epoch(store, raft_log, writer.snapshots)
        try:
            raft_config = RaftConfig.from_properties(self.config.original)
        except ValueError as error:
            raise ConfigError("controller.quorum", str(error)) from None
        driver = self.raft_driver = RaftDriver(
            self.node_id,
            voters,
            raft_log,
            store,
            writer.snapshots,
            raft_config,
            cluster_id=self.cluster_id,
            node_options={"control_entry": leader_change_entry},
        )
        writer.attach(driver)
        bound = []
        if self.config.quorum_voters and self.config.controller_listeners:
            gate = GatedControllerChannel(
                self.local_channel, lambda: writer.is_active, lambda: driver.leader_id
            )
            services = ControllerPlaneServices(
                raft=driver,
                metadata=self.metadata_view,
                config=self.config_view,
                controller=gate,
                brokers=self.controller,
            )
            self.controller_server = SocketServer(
                Dispatcher(services, Plane.CONTROLLER),
                max_frame_bytes=self.config["socket.request.max.bytes"],
                idle_timeout_ms=self.config["connections.max.idle.ms"],
            )
            bound = [
                self.controller_server.bind(li.name, li.host, li.port)
                for li in self.config.controller_listeners
            ]
            self.controller_server.start()
            # The quorum APIs' codecs are built now, on a worker thread, not lazily
            # in the middle of this node's first election (a failover).
            self._codec_warmup = asyncio.create_task(
                asyncio.to_thread(warm_codecs, supported_versions(Plane.CONTROLLER))
            )
            if bound:
                # This node's controller clients (forwarding, the broker lifecycle) reach
                # it at the listener it bound, whatever the voters entry says (port 0, a
                # name only the other nodes resolve).
                own = bound[0]
                host = "127.0.0.1" if own.host in ("", "0.0.0.0") else own.host
                host = "::1" if host == "::" else host
                self.own_controller = QuorumVoter(self.node_id, host, own.port)
                if self.remote_channel is not None:
                    await self.remote_channel.client.set_address(self.own_controller)
        driver.start()
        await self._wait_caught_up(writer, driver)
        return bound

    async def _wait_caught_up(self, writer: RaftMetadataWriter, driver: RaftDriver) -> None:
        waited_s = 0.0
        while not writer.caught_up():
            if driver.listener_fault is not None:
                raise MetadataLogDamagedError(
                    f"the metadata log could not be applied: {driver.listener_fault}"
                )
            await asyncio.sleep(CATCH_UP_POLL_S)
            waited_s += CATCH_UP_POLL_S
            if waited_s >= CATCH_UP_LOG_EVERY_S:
                waited_s = 0.0
                logger.info(
                    "waiting for the metadata quorum: leader %s, epoch %d, high watermark %d, "
                    "applied up to %d",
                    driver.leader_id,
                    driver.epoch,
                    driver.high_watermark,
                    writer.applied_end,
                )

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

    async def _session_ticks(self) -> None:
        """The active controller fences brokers whose heartbeats stopped (elsewhere
        this does nothing)."""
        timeout_ms = self.config["broker.session.timeout.ms"]
        tick_s = max(0.05, min(0.5, timeout_ms / 8000))  # well inside half a session
        while True:
            # at the earliest session expiry, not a tick later
            await asyncio.sleep(self.controller.session_check_delay_s(tick_s))
            try:
                fenced = await self.controller.fence_stale_brokers()
            except ControllerError as error:  # lost leadership or a full disk: next tick
                logger.debug("fencing stale brokers: %s", error)
                continue
            if fenced:
                logger.info(
                    "fenced broker(s) %s: no heartbeat for broker.session.timeout.ms=%d",
                    ", ".join(map(str, fenced)),
                    timeout_ms,
                )

    async def _controlled_shutdown(self) -> None:
        """want_shut_down until the controller has moved this broker's leaderships
        away and lets it go (or CONTROLLED_SHUTDOWN_WAIT_S passed); logged either way."""
        assert self.lifecycle is not None
        if await self.lifecycle.controlled_shutdown(CONTROLLED_SHUTDOWN_WAIT_S):
            logger.info("controlled shutdown done: the controller let this broker go")
        else:
            logger.warning(
                "controlled shutdown: no answer from the controller within %.1f s; "
                "stopping anyway (leaderships move when the session expires)",
                CONTROLLED_SHUTDOWN_WAIT_S,
            )

    async def _leader_balance_ticks(self) -> None:
        """auto.leader.rebalance.enable: every leader.imbalance.check.interval.seconds
        the active controller moves leaderships back to preferred replicas
        (``Controller.rebalance_leaders``; elsewhere this does nothing)."""
        interval_s = self.config["leader.imbalance.check.interval.seconds"]
        while True:
            await asyncio.sleep(interval_s)
            moved = await self.controller.rebalance_leaders()
            if moved:
                logger.info("moved %d partition leadership(s) back to preferred replicas", moved)

    def unclean_election_default(self) -> bool:
        """The broker default of unclean.leader.election.enable, dynamic over static."""
        raw = self.dynamic_broker_configs().get("unclean.leader.election.enable")
        if raw is None:
            return bool(self.config["unclean.leader.election.enable"])
        return raw.strip().lower() == "true"

    def _open_metadata_log(self, recovery_point: int, clean: bool) -> DiskRaftLog:
        return open_metadata_log(
            self.config.metadata_log_dir / METADATA_LOG_DIR,
            recovery_point,
            clean,
            strict=not self.truncate_damaged_metadata,
        )

    def _load_metadata(self) -> None:
        """Open ``__cluster_metadata-0`` from its recovery point and replay it: the
        newest valid snapshot beside it, then the batches after that snapshot.

        A clean restart trusts its flushed segments (replay still checks every CRC);
        after a crash only what follows the recovery point is re-read, and a torn tail
        there is cut. Damage to flushed metadata, or a missing metadata log beside
        partition data, stops the broker with one line and changes nothing, unless
        the operator chose ``truncate_damaged_metadata``.
        """
        first_dir = self.config.metadata_log_dir
        state = self.log_manager.reserved.get(METADATA_LOG_DIR)
        if state is not None and not first_dir.samefile(state.log_dir):
            raise MetadataLogDamagedError(
                f"{METADATA_LOG_DIR} is in {state.log_dir}, not in metadata.log.dir "
                f"{first_dir}: set metadata.log.dir={state.log_dir} (or move the directory)"
            )
        recovery_point, clean = (state.recovery_point, state.clean) if state else (0, True)
        partitions = sorted(f"{t}-{p}" for t, p in self.log_manager.logs)
        directory = first_dir / METADATA_LOG_DIR
        # A snapshot is metadata too: the log below it may have been deleted.
        has_snapshot = any(directory.glob("*" + SNAPSHOT_SUFFIX))
        has_data = has_snapshot or any(p.stat().st_size for p in directory.glob("*.log"))
        if partitions and not has_data and not self.truncate_damaged_metadata:
            # Checked before opening the log, which would create an empty one.
            raise MetadataLogDamagedError(missing_message(directory, partitions))
        opened: DiskRaftLog | None = None
        try:
            raft_log = opened = self._open_metadata_log(recovery_point, clean)
            self.controller = self._raft_controller(raft_log)
            self.controller.replay()
        except MetadataSnapshotsUnusableError as error:  # truncating cannot help
            raise MetadataLogDamagedError(str(error)) from None
        except CommittedDataCorruptError as error:
            if not self.truncate_damaged_metadata:
                raise MetadataLogDamagedError(damaged_message(error, first_dir)) from None
            logger.warning(
                "metadata log damaged (%s); keeping only the metadata before the damage", error
            )
            if opened is not None:
                opened.storage_log.close()
            # full recovery: cut at the first bad batch
            raft_log = self._open_metadata_log(0, False)
            self.controller = self._raft_controller(raft_log)
            self.controller.replay()
        log = raft_log.storage_log
        if log.log_end_offset == 0 and partitions and self.image.offset < 0:
            if not self.truncate_damaged_metadata:  # e.g. the first batch is torn
                raise MetadataLogDamagedError(missing_message(directory, partitions))
            logger.warning(
                "metadata log is empty; %d partition(s) it does not know will be set aside",
                len(partitions),
            )
        self.metadata_log = log
        self.raft_log = raft_log
        self.log_manager.attach_reserved_log(METADATA_LOG_DIR, first_dir, log)

    def _raft_controller(self, raft_log: DiskRaftLog) -> Controller:
        """The controller over the Raft writer of ``raft_log``, feeding a fresh loader
        (the driver starts later, on the loop: ``_start_quorum``)."""
        self.metadata_loader = MetadataLoader()
        policy = SnapshotPolicy(
            self.config["metadata.log.max.record.bytes.between.snapshots"],
            self.config["metadata.log.max.snapshot.interval.ms"],
        )
        writer = self.metadata_writer = RaftMetadataWriter(
            raft_log,
            self.metadata_loader,
            FileSnapshotStore(raft_log.storage_log.directory),
            policy,
        )
        controller = Controller(
            writer,
            self.metadata_loader,
            self.node_id,
            self.dynamic_defaults,
            session_timeout_ms=self.config["broker.session.timeout.ms"],
            heartbeat_interval_ms=self.config["broker.heartbeat.interval.ms"],
            unclean_default=self.unclean_election_default,
            silent_leader=writer.silent_predecessor,
        )
        # This node's broker runs in this process: its older incarnation is dead.
        controller.heartbeats.local_incarnation_id = self.incarnation_id
        return controller

    async def stop(self) -> None:
        # Kafka's order on a combined node: the broker half's controlled shutdown first
        # (want_shut_down until the controller has fenced this broker and moved its
        # leaderships to in-sync replicas), while this node's own controller may still
        # be the active one — it then handles its own broker's request and commits the
        # moves — and only then the controller half resigns (below), so another voter
        # takes over at once. Resigning first would leave the request to a controller
        # this node no longer follows: its loader stops with the driver, so it could
        # never show the moves applied and be let go.
        if self.lifecycle is not None:
            await self._controlled_shutdown()
        self.replica_manager.stop_waiting()
        await self.replica_fetchers.close()  # no waiting for a leader's long poll
        await self.group_coordinator.stop()  # parked joins/syncs answer at once
        await self.server.stop()
        for dispatcher in self.dispatchers.values():
            dispatcher.malformed.close()  # the counts the last interval suppressed
            dispatcher.unsupported.close()
        for task in (
            self._housekeeping,
            self._isr_expiration,
            self._snapshot_timer,
            self._session_timer,
            self._balance_timer,
            self._codec_warmup,
        ):
            await cancel_and_wait(task)
        if self.remote_channel is not None:
            await self.remote_channel.close()
        if self.metadata_writer is not None:
            await self.metadata_writer.wait_snapshot()  # before its log is closed
        if self.raft_driver is not None:
            # A leader hands over first (EndQuorumEpoch) so the others elect at once.
            await self.raft_driver.shutdown(resign=True)
            if self.metadata_writer is not None:
                self.metadata_writer.fail_waiters("the controller is shutting down")
        if self.lifecycle is not None:
            await self.lifecycle.stop()
        if self.controller_server is not None:
            await self.controller_server.stop(grace_s=0.5)
        loop = asyncio.get_running_loop()
        failure: Exception | None = None
        try:
            await loop.run_in_executor(None, self.log_manager.shutdown)
        except (StorageError, OSError) as error:  # a full disk: close the rest anyway
            failure = error
        if self.metadata_log is not None and not self.metadata_log.closed:
            try:
                self.metadata_log.flush()
                self.metadata_log.close()
            except OSError as error:
                failure = failure or StorageError(
                    f"the metadata log {self.metadata_log.directory}: {error.strerror or error}"
                )
        self.stopped.set()
        if failure is not None:
            raise failure

    async def _snapshot_ticks(self) -> None:
        """The time bound of metadata snapshots: commits check the byte bound."""
        while True:
            await asyncio.sleep(SNAPSHOT_CHECK_INTERVAL_S)
            if self.metadata_writer is not None:
                self.metadata_writer.maybe_snapshot()

    # -- metadata --------------------------------------------------------------------
    @property
    def image(self) -> MetadataImage:
        """The loader's image: the controller's too in combined mode, and all a
        broker-only node (fed from a replicated metadata log) has."""
        return self.metadata_loader.image

    def _on_metadata(self, delta: MetadataDelta, image: MetadataImage) -> None:
        self.replica_manager.apply_delta(delta, image, self.topic_config)
        self._feed_coordinators(delta, image)
        if delta.broker_configs_changed:
            self.server.quotas.update(self.connection_limits())
        if delta.topics_changed:
            self.server.reserve_files()  # new partitions hold files: keep them a reserve

    def _feed_coordinators(self, delta: MetadataDelta, image: MetadataImage) -> None:
        """Coordinator ownership follows __consumer_offsets leadership with its epoch."""
        for partition, epoch in leadership_changes(delta, OFFSETS_TOPIC, self.node_id):
            self.group_coordinator.on_leadership(partition, epoch)
        self.group_coordinator.on_metadata(image)

    def plane_of(self, listener: str) -> Plane:
        """A listener named in controller.listener.names serves the controller plane."""
        controller_listeners = self.config["controller.listener.names"] or ()
        return Plane.CONTROLLER if listener in controller_listeners else Plane.BROKER

    def dynamic_broker_configs(self) -> Mapping[str, str]:
        """Cluster-wide ("") then per-node dynamic broker configs from the image."""
        image = self.metadata_loader.image
        merged = dict(image.configs.get((BROKER_RESOURCE, ""), {}))
        merged.update(image.configs.get((BROKER_RESOURCE, str(self.node_id)), {}))
        return merged

    def connection_limits(self) -> ConnectionLimits:
        """max.connections and max.connections.per.ip(.overrides), dynamic over static."""
        dynamic = self.dynamic_broker_configs() if self.controller else {}
        values = {}
        names = ("max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides")
        for name in names:
            raw = dynamic.get(name)
            try:
                parsed = CONFIGS_BY_NAME[name].parse(name, raw) if raw is not None else None
            except ConfigError:  # checked when it was set; never fatal here
                parsed = None
            values[name] = self.config[name] if parsed is None else parsed
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


__all__ = [
    "METADATA_LOG_CONFIG",
    "METADATA_LOG_DIR",
    "Broker",
    "MetadataLogDamagedError",
    "Path",
    "seed_election_epoch",
]
