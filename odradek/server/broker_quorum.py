"""A node's metadata quorum start-up: open and replay ``__cluster_metadata-0``, build
the controller over its Raft writer, start the RaftDriver (and the controller
listeners), and wait until the loader has applied what the quorum committed.

How this works and why: these are the steps of ``Broker.start`` that come before
anything of a broker — every later step reads the image they produce — split from
broker.py (the composition root) so that file shows the order of start-up and this
one the detail of each quorum step. ``load_metadata`` opens the metadata log from its
checkpointed recovery point and replays the newest valid snapshot and the batches
after it (RaftMetadataWriter.replay); damage to its flushed part, or a missing log
beside partition data, stops the broker with one line (MetadataLogDamagedError)
unless the operator chose ``truncate_damaged_metadata``. ``start_quorum`` builds the
RaftDriver over that log — the voters of ``controller.quorum.voters`` over the
controller listeners, or this node alone, which elects itself without any network —
binds the controller listeners (the CONTROLLER plane: the quorum APIs, forwarded
changes behind ``GatedControllerChannel``, registrations and heartbeats) and returns
once the loader has caught up with the quorum's high watermark. ``forwarding_channel`` is
the forwarding channel a quorum's broker sends every change through, to whichever
node is the active controller. The functions set the broker's attributes (its
``controller``, ``raft_driver``, ``metadata_writer``, ...), which tests and the
broker's views read.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Final

from odradek.metadata.bootstrap import BootstrapError, read_bootstrap
from odradek.metadata.controller import Controller
from odradek.metadata.controller_channel import GatedControllerChannel
from odradek.metadata.controller_client import ControllerClient, connector
from odradek.metadata.controller_rpc import (
    DESCRIBE_QUORUM_KEY,
    DESCRIBE_QUORUM_VERSIONS,
    FORWARDED_VERSIONS,
    RemoteControllerChannel,
)
from odradek.metadata.loader import MetadataLoader
from odradek.metadata.raft_writer import RaftMetadataWriter
from odradek.metadata.snapshotter import SnapshotPolicy
from odradek.metadata.writer import MetadataSnapshotsUnusableError
from odradek.network.server import SocketServer
from odradek.protocol.messages import warm_codecs
from odradek.raft.config import RaftConfig
from odradek.raft.control_records import leader_change_entry
from odradek.raft.disk_log import DiskRaftLog
from odradek.raft.driver import RaftDriver
from odradek.raft.election_store import FileElectionStore
from odradek.raft.snapshots import SNAPSHOT_SUFFIX, FileSnapshotStore
from odradek.server.config import ConfigError, QuorumVoter
from odradek.server.dispatcher import Dispatcher
from odradek.server.handlers import Plane, supported_versions
from odradek.server.metadata_log import (
    METADATA_LOG_DIR,
    MetadataLogDamagedError,
    damaged_message,
    missing_message,
    open_metadata_log,
    seed_election_epoch,
)
from odradek.server.services import ControllerPlaneServices
from odradek.storage.errors import CommittedDataCorruptError

if TYPE_CHECKING:
    from odradek.server.broker import Broker

# The broker's start-up lines keep the name operators know them by.
logger = logging.getLogger("odradek.server.broker")

# Start-up polls the loader's progress towards the quorum's high watermark this often
# (a single voter is there within one append linger), and logs the wait every 5 s.
CATCH_UP_POLL_S: Final = 0.01
CATCH_UP_LOG_EVERY_S: Final = 5.0


def forwarding_channel(broker: Broker) -> RemoteControllerChannel:
    """The channel a quorum's broker sends every change through: to the active
    controller over the controller listeners, whichever node (this one included) leads."""
    try:
        raft_config = RaftConfig.from_properties(broker.config.original)
    except ValueError:
        raft_config = RaftConfig()  # start() refuses the properties with one line
    client = ControllerClient(
        broker.config.quorum_voters,
        lambda: None if broker.raft_driver is None else broker.raft_driver.leader_id,
        connector(
            client_id=f"broker-{broker.node_id}-forwarding",
            versions={**FORWARDED_VERSIONS, DESCRIBE_QUORUM_KEY: DESCRIBE_QUORUM_VERSIONS},
            ssl_context=broker.config.controller_ssl_context,
            sasl=broker.config.controller_sasl,
        ),
        retry_backoff_s=raft_config.retry_backoff_ms / 1000,
        connect_timeout_s=raft_config.request_timeout_ms / 1000,
    )
    return RemoteControllerChannel(client, lambda: broker.image)


def load_metadata(broker: Broker) -> None:
    """Open ``__cluster_metadata-0`` from its recovery point and replay it: the
    newest valid snapshot beside it, then the batches after that snapshot.

    A clean restart trusts its flushed segments (replay still checks every CRC);
    after a crash only what follows the recovery point is re-read, and a torn tail
    there is cut. Damage to flushed metadata, or a missing metadata log beside
    partition data, stops the broker with one line and changes nothing, unless
    the operator chose ``truncate_damaged_metadata``.
    """
    first_dir = broker.config.metadata_log_dir
    state = broker.log_manager.reserved.get(METADATA_LOG_DIR)
    if state is not None and not first_dir.samefile(state.log_dir):
        raise MetadataLogDamagedError(
            f"{METADATA_LOG_DIR} is in {state.log_dir}, not in metadata.log.dir "
            f"{first_dir}: set metadata.log.dir={state.log_dir} (or move the directory)"
        )
    recovery_point, clean = (state.recovery_point, state.clean) if state else (0, True)
    partitions = sorted(f"{t}-{p}" for t, p in broker.log_manager.logs)
    directory = first_dir / METADATA_LOG_DIR
    # A snapshot is metadata too: the log below it may have been deleted.
    has_snapshot = any(directory.glob("*" + SNAPSHOT_SUFFIX))
    has_data = has_snapshot or any(p.stat().st_size for p in directory.glob("*.log"))
    if partitions and not has_data and not broker.truncate_damaged_metadata:
        # Checked before opening the log, which would create an empty one.
        raise MetadataLogDamagedError(missing_message(directory, partitions))
    opened: DiskRaftLog | None = None
    try:
        raft_log = opened = _open_metadata_log(broker, recovery_point, clean)
        broker.controller = raft_controller(broker, raft_log)
        broker.controller.replay()
    except MetadataSnapshotsUnusableError as error:  # truncating cannot help
        raise MetadataLogDamagedError(str(error)) from None
    except CommittedDataCorruptError as error:
        if not broker.truncate_damaged_metadata:
            raise MetadataLogDamagedError(damaged_message(error, first_dir)) from None
        logger.warning(
            "metadata log damaged (%s); keeping only the metadata before the damage", error
        )
        if opened is not None:
            opened.storage_log.close()
        # full recovery: cut at the first bad batch
        raft_log = _open_metadata_log(broker, 0, False)
        broker.controller = raft_controller(broker, raft_log)
        broker.controller.replay()
    log = raft_log.storage_log
    if log.log_end_offset == 0 and partitions and broker.image.offset < 0:
        if not broker.truncate_damaged_metadata:  # e.g. the first batch is torn
            raise MetadataLogDamagedError(missing_message(directory, partitions))
        logger.warning(
            "metadata log is empty; %d partition(s) it does not know will be set aside",
            len(partitions),
        )
    broker.metadata_log = log
    broker.raft_log = raft_log
    broker.log_manager.attach_reserved_log(METADATA_LOG_DIR, first_dir, log)


def _open_metadata_log(broker: Broker, recovery_point: int, clean: bool) -> DiskRaftLog:
    return open_metadata_log(
        broker.config.metadata_log_dir / METADATA_LOG_DIR,
        recovery_point,
        clean,
        strict=not broker.truncate_damaged_metadata,
    )


def raft_controller(broker: Broker, raft_log: DiskRaftLog) -> Controller:
    """The controller over the Raft writer of ``raft_log``, feeding a fresh loader
    (the driver starts later, on the loop: ``start_quorum``)."""
    broker.metadata_loader = MetadataLoader()
    policy = SnapshotPolicy(
        broker.config["metadata.log.max.record.bytes.between.snapshots"],
        broker.config["metadata.log.max.snapshot.interval.ms"],
    )
    writer = broker.metadata_writer = RaftMetadataWriter(
        raft_log,
        broker.metadata_loader,
        FileSnapshotStore(raft_log.storage_log.directory),
        policy,
    )
    controller = Controller(
        writer,
        broker.metadata_loader,
        broker.node_id,
        broker.dynamic_defaults,
        session_timeout_ms=broker.config["broker.session.timeout.ms"],
        heartbeat_interval_ms=broker.config["broker.heartbeat.interval.ms"],
        unclean_default=broker.unclean_election_default,
        silent_leader=writer.silent_predecessor,
        bootstrap=_bootstrap_records(broker),
    )
    # This node's broker runs in this process: its older incarnation is dead.
    controller.heartbeats.local_incarnation_id = broker.incarnation_id
    return controller


def _bootstrap_records(broker: Broker) -> list[Any]:
    """``storage format --add-scram``'s records for the controller (metadata/bootstrap.py);
    a damaged file stops the node with one line."""
    if "controller" not in broker.config.roles:
        return []  # only a controller ever commits them
    try:
        return read_bootstrap(broker.config.metadata_log_dir)
    except BootstrapError as error:
        raise MetadataLogDamagedError(str(error)) from None


async def start_quorum(broker: Broker) -> list[Any]:
    """Start the Raft driver over the opened metadata log (and the controller
    listeners when a quorum is configured); return once the loader has applied
    everything the quorum has committed (a single voter: once its LeaderChange
    commits). Returns the bound controller listeners."""
    raft_log, writer = broker.raft_log, broker.metadata_writer
    assert raft_log is not None and writer is not None
    voters: tuple[QuorumVoter, ...] = broker.config.quorum_voters or (
        QuorumVoter(broker.node_id, "localhost", 0),  # alone: elects itself, no network
    )
    store = FileElectionStore(
        raft_log.storage_log.directory, frozenset(v.node_id for v in voters), broker.cluster_id
    )
    seed_election_epoch(store, raft_log, writer.snapshots)
    try:
        raft_config = RaftConfig.from_properties(broker.config.original)
    except ValueError as error:
        raise ConfigError("controller.quorum", str(error)) from None
    driver = broker.raft_driver = RaftDriver(
        broker.node_id,
        voters,
        raft_log,
        store,
        writer.snapshots,
        raft_config,
        cluster_id=broker.cluster_id,
        node_options={"control_entry": leader_change_entry},
        ssl_context=broker.config.controller_ssl_context,
        sasl=broker.config.controller_sasl,
    )
    writer.attach(driver)
    bound = []
    if broker.config.quorum_voters and broker.config.controller_listeners:
        gate = GatedControllerChannel(
            broker.local_channel, lambda: writer.is_active, lambda: driver.leader_id
        )
        services = ControllerPlaneServices(
            raft=driver,
            metadata=broker.metadata_view,
            config=broker.config_view,
            controller=gate,
            brokers=broker.controller,
            # Every request on a controller listener needs CLUSTER_ACTION on the cluster
            # (server/dispatcher.py): it comes from a node, or is forwarded by one.
            peer_authorizer=broker.services.authorizer,
        )
        broker.controller_server = SocketServer(
            Dispatcher(services, Plane.CONTROLLER, broker.request_times),
            max_frame_bytes=broker.config["socket.request.max.bytes"],
            idle_timeout_ms=broker.config["connections.max.idle.ms"],
        )
        protocols = broker.config.protocol_map
        bound = [
            broker.controller_server.bind(
                li.name,
                li.host,
                li.port,
                security_protocol=protocols[li.name],
                tls=broker.config.listener_tls.get(li.name),
            )
            for li in broker.config.controller_listeners
        ]
        broker.controller_server.start()
        # The quorum APIs' codecs are built now, on a worker thread, not lazily
        # in the middle of this node's first election (a failover).
        broker.codec_warmup = asyncio.create_task(
            asyncio.to_thread(warm_codecs, supported_versions(Plane.CONTROLLER))
        )
        if bound:
            # This node's controller clients (forwarding, the broker lifecycle) reach
            # it at the listener it bound, whatever the voters entry says (port 0, a
            # name only the other nodes resolve).
            own = bound[0]
            host = "127.0.0.1" if own.host in ("", "0.0.0.0") else own.host
            host = "::1" if host == "::" else host
            broker.own_controller = QuorumVoter(broker.node_id, host, own.port)
            if broker.remote_channel is not None:
                await broker.remote_channel.client.set_address(broker.own_controller)
    _warn_without_bootstrap_login(broker)
    driver.start()
    await wait_caught_up(writer, driver)
    return bound


def _warn_without_bootstrap_login(broker: Broker) -> None:
    """A fresh node logging in to SCRAM controller listeners needs its credential in
    the other controllers' bootstrap files (their metadata logs are empty too): say
    so once here, since the quorum would otherwise just never form."""
    from odradek.server.sasl_settings import bootstrap_scram

    login = broker.config.controller_sasl
    if login is None or not login.mechanism.startswith("SCRAM-"):
        return
    if broker.metadata_view.image.offset >= 0 or "controller" not in broker.config.roles:
        return
    if (login.username, login.mechanism) not in bootstrap_scram(broker.config):
        logger.warning(
            "this node logs in to the controller listeners as %r with %s, but its "
            "bootstrap.checkpoint has no such credential: format the controllers with "
            "--add-scram '%s=[name=%s,password=...]' (or use PLAIN between nodes), or "
            "the controllers refuse each other until the metadata log has it",
            login.username,
            login.mechanism,
            login.mechanism,
            login.username,
        )


async def wait_caught_up(writer: RaftMetadataWriter, driver: RaftDriver) -> None:
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
