"""Broker: wires storage, metadata, replicas and the network into one process.

How this works and why: start-up follows the order in which each part needs the one
before it — lock and recover the log dirs (LogManager), replay ``__cluster_metadata``
into an image (Controller), bind the listeners (so port 0 becomes a real port),
register this broker with those endpoints, create the partitions the image assigns
here (ReplicaManager), and only then accept connections and print the ready line.
Shutdown runs the other way: stop accepting, let in-flight requests finish, flush and
checkpoint every log, write the clean-shutdown marker.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from odradek.coordinator.group.classic import GroupSettings
from odradek.coordinator.group.consumer_model import ConsumerGroupSettings
from odradek.coordinator.group.coordinator import CoordinatorSettings, GroupCoordinator
from odradek.metadata.controller import METADATA_TOPIC, Controller, ControllerError, NewTopic
from odradek.metadata.image import BROKER_RESOURCE, MetadataImage
from odradek.network.limits import ConnectionLimits
from odradek.network.server import SocketServer
from odradek.replica.replica_manager import ReplicaManager
from odradek.server.config import BROKER_CONFIGS, CONFIGS_BY_NAME, BrokerConfig, ConfigError
from odradek.server.dispatcher import Dispatcher
from odradek.storage.errors import StorageError
from odradek.storage.log import Log, wall_clock_ms
from odradek.storage.log_config import LogConfig
from odradek.storage.log_loader import open_log
from odradek.storage.log_manager import LogManager, LogManagerSettings
from odradek.storage.meta_properties import ensure_meta_properties

logger = logging.getLogger(__name__)

METADATA_LOG_DIR: Final = f"{METADATA_TOPIC}-0"
# The metadata log is never truncated by retention: it is the cluster's history
# (snapshots, which would allow trimming it, come with the controller-quorum issue).
METADATA_LOG_CONFIG: Final = LogConfig(retention_ms=-1, retention_bytes=-1, segment_bytes=8 * 2**20)


@dataclass(frozen=True, slots=True)
class Endpoint:
    node_id: int
    host: str
    port: int
    rack: str | None


def coordinator_settings(config: BrokerConfig) -> CoordinatorSettings:
    return CoordinatorSettings(
        partitions=config["offsets.topic.num.partitions"],
        replication_factor=config["offsets.topic.replication.factor"],
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


def new_cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
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
        self.controller: Controller = None  # type: ignore[assignment]  # set in start()
        self.replica_manager = ReplicaManager(self.node_id, self.log_manager)
        self.server = SocketServer(
            Dispatcher(self),
            max_frame_bytes=config["socket.request.max.bytes"],
            idle_timeout_ms=config["connections.max.idle.ms"],
            limits=self.connection_limits(),
            queued_max_request_bytes=config["queued.max.request.bytes"],
        )
        self.default_listener_name = config.listeners[0].name
        self._topic_defaults_cache: tuple[tuple[tuple[str, str], ...], LogConfig] | None = None
        self.group_coordinator = GroupCoordinator(self, coordinator_settings(config), wall_clock_ms)
        self._housekeeping: asyncio.Task[None] | None = None
        self._producer_ids: tuple[int, int] = (0, 0)  # next id, end of the reserved block
        self.stopped = asyncio.Event()

    # -- lifecycle -----------------------------------------------------------------
    async def start(self) -> list[str]:
        """Bring the broker up; returns the listener URLs with their real ports."""
        loop = asyncio.get_running_loop()
        # Identity first: nothing in a log dir is loaded or written before it is known
        # to belong to this cluster and node.
        await loop.run_in_executor(None, self.log_manager.lock_dirs)
        self.cluster_id = ensure_meta_properties(
            self.config.log_dirs, self.node_id, new_cluster_id, reserved=(METADATA_LOG_DIR,)
        )
        await loop.run_in_executor(None, self.log_manager.load_logs)
        first_dir = self.config.log_dirs[0]
        metadata_log, _ = await loop.run_in_executor(
            None,
            lambda: open_log(
                first_dir / METADATA_LOG_DIR, METADATA_LOG_CONFIG, clean_shutdown=False
            ),
        )
        self.metadata_log = metadata_log
        self.controller = Controller(metadata_log, self.node_id, self.dynamic_defaults)
        self.controller.replay()
        self.replica_manager.check_loaded_logs(self.controller.image)
        bound = [self.server.bind(li.name, li.host, li.port) for li in self.config.listeners]
        ports = {b.name: b.port for b in bound}
        endpoints = []
        for listener in self.config.advertised_listeners:
            port = listener.port or ports.get(listener.name, listener.port)
            host = listener.host or "localhost"
            endpoints.append((listener.name, host, port))
        await self.controller.register_broker(endpoints, None)
        self.replica_manager.apply_image(self.controller.image, self.topic_config)
        self.controller.add_listener(self._on_metadata)
        self.group_coordinator.on_metadata(self.controller.image)
        self.group_coordinator.start()
        self._housekeeping = asyncio.create_task(self.log_manager.run())
        self.server.quotas.update(self.connection_limits())
        self.server.reserve_files()
        self.server.start()
        return [b.url() for b in bound]

    async def stop(self) -> None:
        self.replica_manager.stop_waiting()
        await self.group_coordinator.stop()  # parked joins/syncs answer at once
        await self.server.stop()
        if self._housekeeping is not None:
            self._housekeeping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._housekeeping
        loop = asyncio.get_running_loop()
        failure: Exception | None = None
        try:
            await loop.run_in_executor(None, self.log_manager.shutdown)
        except (StorageError, OSError) as error:  # a full disk: close the rest anyway
            failure = error
        if self.metadata_log is not None:
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

    # -- metadata --------------------------------------------------------------------
    @property
    def image(self) -> MetadataImage:
        return self.controller.image

    def _on_metadata(self, previous: MetadataImage, image: MetadataImage) -> None:
        self.replica_manager.apply_image(image, self.topic_config)
        self.group_coordinator.on_metadata(image)
        self.server.quotas.update(self.connection_limits())
        if image.topics is not previous.topics:
            self.server.reserve_files()  # new partitions hold files: keep them a reserve

    def brokers_for_listener(self, image: MetadataImage, listener: str) -> list[Endpoint]:
        endpoints = []
        for broker in sorted(image.brokers.values(), key=lambda b: b.broker_id):
            for name, host, port in broker.endpoints:
                if name == listener:
                    endpoints.append(Endpoint(broker.broker_id, host, port, broker.rack))
                    break
        return endpoints

    def dynamic_broker_configs(self) -> Mapping[str, str]:
        """Cluster-wide ("") then per-node dynamic broker configs from the image."""
        image = self.controller.image if self.controller else MetadataImage()
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

    async def auto_create_topics(self, names: Sequence[str]) -> list[ControllerError | None]:
        outcomes = await self.controller.create_topics([NewTopic(name) for name in names], False)
        return [o if isinstance(o, ControllerError) else None for o in outcomes]

    # -- producer ids ------------------------------------------------------------------
    async def next_producer_id(self) -> int:
        next_id, end = self._producer_ids
        if next_id >= end:
            first, count = await self.controller.allocate_producer_ids()
            next_id, end = first, first + count
        self._producer_ids = (next_id + 1, end)
        return next_id


def broker_config_names() -> list[str]:
    return [d.name for d in BROKER_CONFIGS]


__all__ = ["Broker", "Path"]
