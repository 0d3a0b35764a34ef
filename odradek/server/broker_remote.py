"""The broker's tiered storage (KIP-405): the RemoteLogManager it builds from its
properties, and the check that keeps ``remote.storage.enable`` off where it cannot work.

How this works and why: with ``remote.log.storage.system.enable=true`` the broker
builds the RemoteStorageManager that ``remote.log.storage.manager.class.name`` names
(with its ``rsm.config.*`` properties, storage_manager.py), the metadata manager
``remote.log.metadata.manager.class.name`` names — ``topic`` (the default, or
Kafka's TopicBasedRemoteLogMetadataManager class name): the events go through
``__remote_log_metadata`` (topic_metadata_manager.py, with the broker's client from
remote_metadata_transport.py), sized by Kafka's ``rlmm.config.``-prefixed
``remote.log.metadata.topic.num.partitions`` (50), ``.replication.factor`` (3; 1 on
the zero-config single node, as the other internal topics) and ``.retention.ms``
(-1); ``file``: the single-node stand-in under the first log dir's
``remote-log-metadata/`` — and the RemoteLogManager over the partitions this broker
leads (copies) and follows (local retention of what is copied). Without the
flag there is no manager, and a topic may not set ``remote.storage.enable=true``
(``check_remote_storage``, called by CreateTopics and AlterConfigs), as in Kafka.

Concurrency: built in Broker.__init__, run as a background task on its loop.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING

from odradek.coordinator.internal_topic import InternalTopic
from odradek.metadata.controller_channel import ControllerError
from odradek.storage.remote.log_manager import RemoteLogManager
from odradek.storage.remote.metadata import TopicIdPartition
from odradek.storage.remote.metadata_manager import (
    METADATA_DIR,
    FileRemoteLogMetadataManager,
    RemoteLogMetadataManager,
)
from odradek.storage.remote.reader import INDEX_CACHE_DIR
from odradek.storage.remote.storage_manager import (
    CLASS_NAME_CONFIG,
    IMPL_PREFIX_CONFIG,
    remote_storage_manager_from_config,
)
from odradek.storage.remote.topic_metadata_manager import (
    TOPIC,
    MetadataTransport,
    TopicBasedRemoteLogMetadataManager,
)

if TYPE_CHECKING:
    from odradek.replica.replica_manager import ReplicaManager
    from odradek.server.config import BrokerConfig
    from odradek.storage.log import Log

SYSTEM_ENABLE = "remote.log.storage.system.enable"
TOPIC_ENABLE = "remote.storage.enable"


TOPIC_BASED = frozenset(
    {
        "topic",
        "org.apache.kafka.server.log.remote.metadata.storage.TopicBasedRemoteLogMetadataManager",
    }
)
TOPIC_PARTITIONS = "remote.log.metadata.topic.num.partitions"
TOPIC_REPLICATION = "remote.log.metadata.topic.replication.factor"
TOPIC_RETENTION = "remote.log.metadata.topic.retention.ms"


def metadata_topic(config: BrokerConfig) -> InternalTopic:
    """``__remote_log_metadata`` as the rlmm.config.* properties size it."""
    prefix = config["remote.log.metadata.manager.impl.prefix"] or ""
    original = config.original

    def prop(name: str, default: int) -> int:
        raw = original.get(prefix + name, original.get(name))
        return default if raw is None else int(str(raw))

    replication = prop(TOPIC_REPLICATION, 3 if config.quorum_configured else 1)
    return InternalTopic(
        TOPIC,
        prop(TOPIC_PARTITIONS, 50),
        replication,
        prefix + TOPIC_REPLICATION,
        {"retention.ms": str(prop(TOPIC_RETENTION, -1)), "cleanup.policy": "delete"},
    )


def build_metadata_manager(
    config: BrokerConfig, transport: Callable[[InternalTopic], MetadataTransport] | None
) -> RemoteLogMetadataManager:
    name = (config["remote.log.metadata.manager.class.name"] or "topic").strip()
    if name == "file" or transport is None:
        return FileRemoteLogMetadataManager(config.log_dirs[0] / METADATA_DIR)
    if name not in TOPIC_BASED:
        raise ValueError(f"remote.log.metadata.manager.class.name: unknown manager {name!r}")
    topic = metadata_topic(config)
    return TopicBasedRemoteLogMetadataManager(
        transport(topic), num_partitions=topic.partitions, broker_id=config.node_id
    )


def build_remote_log_manager(
    config: BrokerConfig,
    replica_manager: ReplicaManager,
    transport: Callable[[InternalTopic], MetadataTransport] | None = None,
) -> RemoteLogManager | None:
    """The RemoteLogManager the properties ask for, or None (tiering disabled);
    ``transport`` builds the topic-based manager's client (None: the file store)."""
    if not config[SYSTEM_ENABLE]:
        return None
    prefix = config[IMPL_PREFIX_CONFIG] or ""
    props = {k: v for k, v in config.original.items() if k.startswith(prefix)}
    props[IMPL_PREFIX_CONFIG] = prefix
    props[CLASS_NAME_CONFIG] = config[CLASS_NAME_CONFIG] or "filesystem"
    rsm = remote_storage_manager_from_config(props)  # ValueError names a bad key
    first_dir = config.log_dirs[0]
    rlmm = build_metadata_manager(config, transport)

    def hosted(leading: bool) -> Iterator[tuple[TopicIdPartition, Log]]:
        for partition in list(replica_manager.partitions.values()):
            if partition.is_leader == leading and partition.log.config.remote_storage_enable:
                tp = TopicIdPartition(
                    uuid.UUID(str(partition.topic_id)), partition.topic, partition.index
                )
                yield tp, partition.log

    def leaders() -> Iterator[tuple[TopicIdPartition, Log]]:
        return hosted(True)

    def followers() -> Iterator[tuple[TopicIdPartition, Log]]:
        return hosted(False)

    return RemoteLogManager(
        rsm,
        rlmm,
        broker_id=config.node_id,
        leaders=leaders,
        followers=followers,
        index_cache_dir=first_dir / INDEX_CACHE_DIR,
        index_cache_bytes=config["remote.log.index.file.cache.total.size.bytes"],
        task_interval_ms=config["remote.log.manager.task.interval.ms"],
        reader_threads=config["remote.log.reader.threads"],
    )


def _enabled(configs: Mapping[str, object]) -> bool:
    value = configs.get(TOPIC_ENABLE)
    return value is not None and str(value).strip().lower() == "true"


def check_remote_storage(
    system_enabled: Callable[[], bool],
    configs: Mapping[str, object],
    current: Mapping[str, object] | None = None,
) -> None:
    """ControllerError INVALID_CONFIG when a topic's configs enable remote storage on a
    broker whose tiered storage is off, or turn it off on a tiered topic (``current``:
    its configs before the change; Kafka refuses that too: the remote data would be
    orphaned and the log start below the local log)."""
    if _enabled(configs) and not system_enabled():
        raise ControllerError(
            "INVALID_CONFIG",
            f"{TOPIC_ENABLE}=true needs {SYSTEM_ENABLE}=true on the brokers "
            "(tiered storage is disabled)",
        )
    if current is not None and _enabled(current) and not _enabled(configs):
        raise ControllerError(
            "INVALID_CONFIG",
            f"disabling remote storage on a tiered topic is not supported ({TOPIC_ENABLE})",
        )
