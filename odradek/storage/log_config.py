"""Per-log (topic-level) configuration with Kafka's names, defaults and validation.

How this works and why: one table (``TOPIC_CONFIGS``) lists every topic config the
storage layer understands, with its Kafka name, type, default and legal range. The
same table serves parsing (``LogConfig.from_properties``), validation of CreateTopics
and AlterConfigs (later, in the broker), and DescribeConfigs. ``LogConfig`` itself is
an immutable value: changing a topic's config builds a new one and hands it to the
log, so a reader never sees half an update.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Final

from odradek.storage.errors import LogConfigError

LONG_MAX: Final = 2**63 - 1
INT_MAX: Final = 2**31 - 1

# Kafka's message.timestamp.type values.
CREATE_TIME_NAME: Final = "CreateTime"
LOG_APPEND_TIME_NAME: Final = "LogAppendTime"
COMPRESSION_TYPES: Final = ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")
CLEANUP_POLICIES: Final = ("delete", "compact")


def _parse_int(key: str, raw: object, low: int, high: int) -> int:
    if isinstance(raw, bool):
        raise LogConfigError(key, f"expected an integer, got {raw!r}")
    try:
        value = int(str(raw).strip()) if not isinstance(raw, int) else raw
    except ValueError:
        raise LogConfigError(key, f"expected an integer, got {raw!r}") from None
    if not low <= value <= high:
        raise LogConfigError(key, f"value {value} outside [{low}, {high}]")
    return value


def _parse_bool(key: str, raw: object) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise LogConfigError(key, f"expected true or false, got {raw!r}")
    return text == "true"


def _parse_choice(key: str, raw: object, choices: tuple[str, ...]) -> str:
    text = str(raw).strip()
    if text not in choices:
        raise LogConfigError(key, f"{raw!r} is not one of {', '.join(choices)}")
    return text


_THROTTLED_ENTRY: Final = re.compile(r"^\d+:\d+$")


def parse_throttled_replicas(key: str, raw: object) -> str:
    """leader/follower.replication.throttled.replicas (KIP-73): "" (none), "*" (every
    replica) or ``partitionId:brokerId,...``, whitespace dropped."""
    text = "".join(str(raw).split())
    if text in ("", "*") or all(_THROTTLED_ENTRY.match(e) for e in text.split(",")):
        return text
    raise LogConfigError(
        key,
        "must be the literal '*' or a list of replicas in the form "
        "[partitionId]:[brokerId],[partitionId]:[brokerId],...",
    )


def _parse_policy(key: str, raw: object) -> str:
    parts = [p.strip() for p in str(raw).split(",") if p.strip()]
    if not parts or any(p not in CLEANUP_POLICIES for p in parts):
        raise LogConfigError(key, f"{raw!r} is not a list of {', '.join(CLEANUP_POLICIES)}")
    return ",".join(sorted(set(parts), key=parts.index))


@dataclass(frozen=True, slots=True)
class ConfigDef:
    """One topic config: Kafka name, attribute on LogConfig, parser, default, doc."""

    name: str
    attribute: str
    parse: Callable[[str, object], Any]
    default: Any
    doc: str


def _int_def(name: str, default: int, low: int, high: int, doc: str) -> ConfigDef:
    return ConfigDef(
        name, name.replace(".", "_"), lambda k, v: _parse_int(k, v, low, high), default, doc
    )


TOPIC_CONFIGS: Final[tuple[ConfigDef, ...]] = (
    ConfigDef("cleanup.policy", "cleanup_policy", _parse_policy, "delete", "delete and/or compact"),
    ConfigDef(
        "compression.type",
        "compression_type",
        lambda k, v: _parse_choice(k, v, COMPRESSION_TYPES),
        "producer",
        "codec batches are stored with; producer keeps the producer's",
    ),
    _int_def("delete.retention.ms", 86_400_000, 0, LONG_MAX, "tombstone retention (compaction)"),
    _int_def(
        "file.delete.delay.ms", 60_000, 0, LONG_MAX, "delay before a deleted segment's files go"
    ),
    _int_def("flush.messages", LONG_MAX, 1, LONG_MAX, "fsync after this many messages"),
    _int_def(
        "flush.ms", LONG_MAX, 0, LONG_MAX, "fsync when the oldest unflushed write is this old"
    ),
    ConfigDef(
        "follower.replication.throttled.replicas",
        "follower_replication_throttled_replicas",
        parse_throttled_replicas,
        "",
        "partition:broker replicas whose follower fetches are throttled (KIP-73), or *",
    ),
    _int_def("index.interval.bytes", 4096, 0, INT_MAX, "log bytes between offset index entries"),
    ConfigDef(
        "leader.replication.throttled.replicas",
        "leader_replication_throttled_replicas",
        parse_throttled_replicas,
        "",
        "partition:broker replicas whose leader's sends are throttled (KIP-73), or *",
    ),
    _int_def(
        "local.retention.bytes",
        -2,
        -2,
        LONG_MAX,
        "tiered topics: local size limit per partition; -2 = retention.bytes",
    ),
    _int_def(
        "local.retention.ms",
        -2,
        -2,
        LONG_MAX,
        "tiered topics: age limit of local segments; -2 = retention.ms",
    ),
    _int_def("max.compaction.lag.ms", LONG_MAX, 1, LONG_MAX, "max time a record stays uncompacted"),
    _int_def("max.message.bytes", 1_048_588, 0, INT_MAX, "largest record batch accepted"),
    _int_def(
        "message.timestamp.after.max.ms", 3_600_000, 0, LONG_MAX, "allowed CreateTime lead over now"
    ),
    _int_def(
        "message.timestamp.before.max.ms",
        LONG_MAX,
        0,
        LONG_MAX,
        "allowed CreateTime lag behind now",
    ),
    ConfigDef(
        "message.timestamp.type",
        "message_timestamp_type",
        lambda k, v: _parse_choice(k, v, (CREATE_TIME_NAME, LOG_APPEND_TIME_NAME)),
        CREATE_TIME_NAME,
        "CreateTime keeps the producer's timestamp, LogAppendTime stamps the broker's",
    ),
    ConfigDef(
        "min.cleanable.dirty.ratio",
        "min_cleanable_dirty_ratio",
        lambda k, v: _parse_ratio(k, v),
        0.5,
        "dirty fraction that makes a log eligible for compaction",
    ),
    _int_def("min.compaction.lag.ms", 0, 0, LONG_MAX, "min time a record stays uncompacted"),
    _int_def("min.insync.replicas", 1, 1, INT_MAX, "replicas that must ack an acks=all write"),
    ConfigDef(
        "preallocate", "preallocate", _parse_bool, False, "accepted for compatibility; unused"
    ),
    ConfigDef(
        "remote.storage.enable",
        "remote_storage_enable",
        _parse_bool,
        False,
        "tiered storage (KIP-405): copy rolled segments to remote storage",
    ),
    _int_def("retention.bytes", -1, -1, LONG_MAX, "size limit per partition; -1 = none"),
    _int_def("retention.ms", 604_800_000, -1, LONG_MAX, "age limit of segments; -1 = none"),
    _int_def("segment.bytes", 1_073_741_824, 14, INT_MAX, "roll a segment at this size"),
    _int_def("segment.index.bytes", 10_485_760, 4, INT_MAX, "max size of a segment's index"),
    _int_def("segment.jitter.ms", 0, 0, LONG_MAX, "random reduction of segment.ms"),
    _int_def("segment.ms", 604_800_000, 1, LONG_MAX, "roll a segment at this age"),
    ConfigDef(
        "unclean.leader.election.enable",
        "unclean_leader_election_enable",
        _parse_bool,
        False,
        "allow an out-of-sync replica to become leader",
    ),
)


def _parse_ratio(key: str, raw: object) -> float:
    try:
        value = float(str(raw))
    except ValueError:
        raise LogConfigError(key, f"expected a number, got {raw!r}") from None
    if not 0.0 <= value <= 1.0:
        raise LogConfigError(key, f"value {value} outside [0, 1]")
    return value


CONFIGS_BY_NAME: Final = {definition.name: definition for definition in TOPIC_CONFIGS}


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Immutable topic configuration; attribute names are Kafka names with dots → _."""

    cleanup_policy: str = "delete"
    compression_type: str = "producer"
    delete_retention_ms: int = 86_400_000
    file_delete_delay_ms: int = 60_000
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    follower_replication_throttled_replicas: str = ""
    index_interval_bytes: int = 4096
    leader_replication_throttled_replicas: str = ""
    local_retention_bytes: int = -2
    local_retention_ms: int = -2
    max_compaction_lag_ms: int = LONG_MAX
    max_message_bytes: int = 1_048_588
    message_timestamp_after_max_ms: int = 3_600_000
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_type: str = CREATE_TIME_NAME
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    min_insync_replicas: int = 1
    preallocate: bool = False
    remote_storage_enable: bool = False
    retention_bytes: int = -1
    retention_ms: int = 604_800_000
    segment_bytes: int = 1_073_741_824
    segment_index_bytes: int = 10_485_760
    segment_jitter_ms: int = 0
    segment_ms: int = 604_800_000
    unclean_leader_election_enable: bool = False

    @classmethod
    def from_properties(
        cls, properties: Mapping[str, object], base: LogConfig | None = None
    ) -> LogConfig:
        """Build from Kafka-named properties over ``base``; LogConfigError names a bad key."""
        changes: dict[str, Any] = {}
        for name, raw in properties.items():
            definition = CONFIGS_BY_NAME.get(name)
            if definition is None:
                raise LogConfigError(name, "unknown topic config")
            changes[definition.attribute] = definition.parse(name, raw)
        config = replace(base or cls(), **changes)
        config.check_tiered()
        return config

    def check_tiered(self) -> None:
        """Kafka's checks of a tiered topic: not compacted, and local retention within
        retention (LogConfigError names the key)."""
        if self.remote_storage_enable and self.is_compacted:
            raise LogConfigError(
                "remote.storage.enable",
                "remote storage cannot be enabled on a compacted topic (cleanup.policy="
                f"{self.cleanup_policy})",
            )
        if not self.remote_storage_enable:
            return
        for local, total, local_key, key in (
            (self.local_retention_ms, self.retention_ms, "local.retention.ms", "retention.ms"),
            (
                self.local_retention_bytes,
                self.retention_bytes,
                "local.retention.bytes",
                "retention.bytes",
            ),
        ):
            if total != -1 and local != -2 and (local == -1 or local > total):
                raise LogConfigError(local_key, f"value {local} exceeds {key} {total}; it must not")

    @property
    def effective_local_retention_ms(self) -> int:
        """local.retention.ms, or retention.ms for -2."""
        return self.retention_ms if self.local_retention_ms == -2 else self.local_retention_ms

    @property
    def effective_local_retention_bytes(self) -> int:
        """local.retention.bytes, or retention.bytes for -2."""
        if self.local_retention_bytes == -2:
            return self.retention_bytes
        return self.local_retention_bytes

    def to_properties(self) -> dict[str, object]:
        return {d.name: getattr(self, d.attribute) for d in TOPIC_CONFIGS}

    @property
    def is_compacted(self) -> bool:
        return "compact" in self.cleanup_policy.split(",")

    @property
    def is_deleting(self) -> bool:
        return "delete" in self.cleanup_policy.split(",")

    @property
    def uses_log_append_time(self) -> bool:
        return self.message_timestamp_type == LOG_APPEND_TIME_NAME


def _check_table_matches_dataclass() -> None:
    attributes = {f.name: f.default for f in fields(LogConfig)}
    for definition in TOPIC_CONFIGS:
        assert attributes[definition.attribute] == definition.default, definition.name
    assert len(attributes) == len(TOPIC_CONFIGS)


_check_table_matches_dataclass()
