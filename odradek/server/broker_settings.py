"""The settings objects the broker's parts are built with, read from its configs.

How this works and why: the group coordinator, the replica fetchers and the
replication quotas take plain settings dataclasses (CoordinatorSettings,
TransactionSettings, FetcherSettings, QuotaSettings) rather than the broker's
config table, so they can be built in tests without one; these functions are the one
place that maps Kafka's config names onto those fields. Split from broker.py, the
composition root, which calls them when it builds the parts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from odradek.coordinator.group.classic import GroupSettings
from odradek.coordinator.group.consumer_model import ConsumerGroupSettings
from odradek.coordinator.group.coordinator import CoordinatorSettings
from odradek.coordinator.transaction.coordinator import TransactionSettings
from odradek.replica.fetcher_state import FetcherSettings
from odradek.replica.replication_quota import (
    ALTER_LOG_DIRS_RATE,
    FOLLOWER_RATE,
    LEADER_RATE,
    WINDOW_NUM,
    WINDOW_SIZE_SECONDS,
    QuotaSettings,
    ReplicationQuotas,
)
from odradek.server.config import CONFIGS_BY_NAME, BrokerConfig, ConfigError
from odradek.storage.cleaner.manager import CleanerSettings


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
        compression=config["offsets.topic.compression.codec"],
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


def internal_min_isr(config: BrokerConfig, name: str) -> int:
    """An internal topic's min.insync.replicas config (transaction.state.log.min.isr):
    1 on the zero-config single node unless set, beside its replication factor of 1."""
    if not config.quorum_configured and not config.is_set(name):
        return 1
    return int(config[name])


def transaction_settings(config: BrokerConfig) -> TransactionSettings:
    return TransactionSettings(
        partitions=config["transaction.state.log.num.partitions"],
        replication_factor=internal_replication_factor(
            config, "transaction.state.log.replication.factor"
        ),
        min_isr=internal_min_isr(config, "transaction.state.log.min.isr"),
        segment_bytes=config["transaction.state.log.segment.bytes"],
        max_timeout_ms=config["transaction.max.timeout.ms"],
        id_expiration_ms=config["transactional.id.expiration.ms"],
        abort_check_interval_ms=config[
            "transaction.abort.timed.out.transaction.cleanup.interval.ms"
        ],
        expiration_check_interval_ms=config[
            "transaction.remove.expired.transaction.cleanup.interval.ms"
        ],
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


def replication_quotas(config: BrokerConfig, clock: Callable[[], int]) -> ReplicationQuotas:
    """KIP-73's quotas: the window configs, and the static rates the image's dynamic
    ones override (replica/replication_quota.py)."""
    return ReplicationQuotas(
        config.node_id,
        clock,
        QuotaSettings(
            samples=config[WINDOW_NUM],
            window_seconds=config[WINDOW_SIZE_SECONDS],
            static_rates={n: config[n] for n in (LEADER_RATE, FOLLOWER_RATE, ALTER_LOG_DIRS_RATE)},
        ),
    )


def dynamic_value(config: BrokerConfig, dynamic: Mapping[str, str], name: str) -> Any:
    """A broker property's dynamic value (AlterConfigs, already validated when it was
    set) over its static one; one that no longer parses falls back, never fatal."""
    raw = dynamic.get(name)
    if raw is not None:
        try:
            return CONFIGS_BY_NAME[name].parse(name, raw)
        except ConfigError:
            pass
    return config[name]


def cleaner_settings(config: BrokerConfig, dynamic: Mapping[str, str]) -> CleanerSettings:
    """The log cleaner's ``log.cleaner.*``, dynamic over static."""

    def value(name: str) -> Any:
        return dynamic_value(config, dynamic, name)

    return CleanerSettings(
        enable=config["log.cleaner.enable"],
        threads=value("log.cleaner.threads"),
        dedupe_buffer_size=value("log.cleaner.dedupe.buffer.size"),
        io_buffer_load_factor=value("log.cleaner.io.buffer.load.factor"),
        io_max_bytes_per_second=value("log.cleaner.io.max.bytes.per.second"),
        backoff_ms=value("log.cleaner.backoff.ms"),
    )
