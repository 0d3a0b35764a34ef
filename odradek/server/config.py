"""Broker configuration: Kafka's property names and defaults, from a file and overrides.

How this works and why: ``BROKER_CONFIGS`` is the one table of broker properties
odradek understands (name, parser, default, whether it can change at runtime). A
Kafka ``server.properties`` parses unchanged: unknown keys produce a warning, not a
failure, because real files carry settings (SASL, JMX, ...) we do not implement. An
invalid value is fatal with a one-line message naming the key. The ``log.*`` family
provides the defaults of topic configs (``log.segment.bytes`` → ``segment.bytes``);
``topic_defaults()`` builds the LogConfig every topic without overrides uses, and the
same mapping gives DescribeConfigs its synonyms. Kafka broker properties that are
not in the table are accepted with a warning that they have no effect
(``server/config_catalogue.py``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from odradek.storage.errors import LogConfigError
from odradek.storage.log_config import LONG_MAX, LogConfig

logger = logging.getLogger(__name__)

INT_MAX: Final = 2**31 - 1


class ConfigError(ValueError):
    """A bad broker property; ``str(error)`` is the one-line message for the user."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"invalid value for {key}: {message}")
        self.key = key


def _int(low: int, high: int) -> Callable[[str, str], int]:
    def parse(key: str, raw: str) -> int:
        try:
            value = int(raw.strip())
        except ValueError:
            raise ConfigError(key, f"expected an integer, got {raw!r}") from None
        if not low <= value <= high:
            raise ConfigError(key, f"{value} is outside [{low}, {high}]")
        return value

    return parse


def _bool(key: str, raw: str) -> bool:
    text = raw.strip().lower()
    if text not in ("true", "false"):
        raise ConfigError(key, f"expected true or false, got {raw!r}")
    return text == "true"


def _text(key: str, raw: str) -> str:
    return raw.strip()


def _list(key: str, raw: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in raw.split(",") if part.strip())


def _assignors(key: str, raw: str) -> tuple[str, ...]:
    """group.consumer.assignors: short names (uniform, range) or Kafka's class names."""
    from odradek.coordinator.group.assignors import assignor_name

    names = []
    for item in _list(key, raw):
        name = assignor_name(item)
        if name is None:
            raise ConfigError(key, f"unknown assignor {item!r} (uniform or range)")
        if name not in names:
            names.append(name)
    if not names:
        raise ConfigError(key, "at least one assignor is required")
    return tuple(names)


def _roles(key: str, raw: str) -> tuple[str, ...]:
    roles = _list(key, raw)
    if not roles or any(role not in ("broker", "controller") for role in roles):
        raise ConfigError(key, f"{raw!r} must be broker, controller or broker,controller")
    return roles


_LISTENER = re.compile(r"^(?P<name>[A-Za-z0-9_]+)://(?P<host>\[[^\]]*\]|[^:/]*):(?P<port>[0-9]+)$")


@dataclass(frozen=True, slots=True)
class Listener:
    name: str
    host: str
    port: int

    def url(self, port: int | None = None) -> str:
        return f"{self.name}://{self.host}:{self.port if port is None else port}"


def parse_listeners(key: str, raw: str) -> tuple[Listener, ...]:
    listeners = []
    for item in _list(key, raw):
        match = _LISTENER.match(item)
        if match is None:
            raise ConfigError(key, f"{item!r} is not NAME://HOST:PORT")
        port = int(match["port"])
        if port > 65535:
            raise ConfigError(key, f"port {port} is out of range")
        listeners.append(Listener(match["name"].upper(), match["host"].strip("[]"), port))
    if not listeners:
        raise ConfigError(key, "no listener given")
    return tuple(listeners)


def parse_ip_overrides(key: str, raw: str) -> tuple[tuple[str, int], ...]:
    """max.connections.per.ip.overrides: ``host:count,host:count`` (IPv6 as ``[::1]:5``)."""
    overrides = []
    for item in _list(key, raw):
        host, sep, count = item.rpartition(":")
        host = host.strip().strip("[]")
        if not sep or not host:
            raise ConfigError(key, f"{item!r} is not HOST:COUNT")
        try:
            value = int(count)
        except ValueError:
            raise ConfigError(key, f"{item!r}: {count!r} is not an integer") from None
        if not 0 <= value <= INT_MAX:
            raise ConfigError(key, f"{item!r}: {value} is outside [0, {INT_MAX}]")
        overrides.append((host, value))
    return tuple(overrides)


@dataclass(frozen=True, slots=True)
class BrokerConfigDef:
    name: str
    parse: Callable[[str, str], Any]
    default: str | None
    dynamic: bool = False  # changeable with (Incremental)AlterConfigs
    topic_config: str | None = None  # the topic config this property provides the default of


def _topic(
    name: str, topic: str, default: str, parse: Callable[[str, str], Any]
) -> BrokerConfigDef:
    return BrokerConfigDef(name, parse, default, dynamic=True, topic_config=topic)


BROKER_CONFIGS: Final[tuple[BrokerConfigDef, ...]] = (
    BrokerConfigDef("node.id", _int(0, INT_MAX), "1"),
    BrokerConfigDef("broker.id", _int(-1, INT_MAX), None),
    BrokerConfigDef("process.roles", _roles, "broker,controller"),
    BrokerConfigDef("listeners", parse_listeners, "PLAINTEXT://127.0.0.1:9092"),
    BrokerConfigDef("advertised.listeners", parse_listeners, None),
    BrokerConfigDef("controller.listener.names", _list, "CONTROLLER"),
    BrokerConfigDef("controller.quorum.voters", _list, None),
    BrokerConfigDef("controller.quorum.bootstrap.servers", _list, None),
    BrokerConfigDef("inter.broker.listener.name", _text, None),
    BrokerConfigDef("listener.security.protocol.map", _list, None),
    BrokerConfigDef("log.dirs", _list, None),
    BrokerConfigDef("log.dir", _text, "./var"),
    BrokerConfigDef("num.partitions", _int(1, INT_MAX), "1", dynamic=True),
    BrokerConfigDef("default.replication.factor", _int(1, 32767), "1", dynamic=True),
    BrokerConfigDef("auto.create.topics.enable", _bool, "true"),
    BrokerConfigDef("delete.topic.enable", _bool, "true"),
    BrokerConfigDef("socket.request.max.bytes", _int(1, INT_MAX), "104857600"),
    BrokerConfigDef("connections.max.idle.ms", _int(-1, LONG_MAX), "600000"),
    BrokerConfigDef("queued.max.requests", _int(1, INT_MAX), "500"),
    # Connection and request-memory limits (odradek/network/limits.py). Kafka's
    # queued.max.request.bytes default is -1 (unbounded); here 100 MiB, see limits.py.
    BrokerConfigDef("max.connections", _int(0, INT_MAX), str(INT_MAX), dynamic=True),
    BrokerConfigDef("max.connections.per.ip", _int(0, INT_MAX), str(INT_MAX), dynamic=True),
    BrokerConfigDef("max.connections.per.ip.overrides", parse_ip_overrides, "", dynamic=True),
    BrokerConfigDef("queued.max.request.bytes", _int(-1, LONG_MAX), "104857600"),
    BrokerConfigDef("num.network.threads", _int(1, INT_MAX), "3"),
    BrokerConfigDef("num.io.threads", _int(1, INT_MAX), "8"),
    BrokerConfigDef("num.recovery.threads.per.data.dir", _int(1, INT_MAX), "1"),
    BrokerConfigDef("socket.send.buffer.bytes", _int(-1, INT_MAX), "102400"),
    BrokerConfigDef("socket.receive.buffer.bytes", _int(-1, INT_MAX), "102400"),
    BrokerConfigDef("offsets.topic.num.partitions", _int(1, INT_MAX), "50"),
    BrokerConfigDef("offsets.topic.replication.factor", _int(1, 32767), "3"),
    BrokerConfigDef("transaction.state.log.num.partitions", _int(1, INT_MAX), "50"),
    BrokerConfigDef("transaction.state.log.replication.factor", _int(1, 32767), "3"),
    BrokerConfigDef("transaction.state.log.min.isr", _int(1, INT_MAX), "2"),
    BrokerConfigDef("group.initial.rebalance.delay.ms", _int(0, INT_MAX), "3000"),
    BrokerConfigDef("group.min.session.timeout.ms", _int(0, INT_MAX), "6000"),
    BrokerConfigDef("group.max.session.timeout.ms", _int(0, INT_MAX), "1800000"),
    BrokerConfigDef("group.max.size", _int(1, INT_MAX), str(INT_MAX)),
    BrokerConfigDef("group.consumer.session.timeout.ms", _int(1, INT_MAX), "45000"),
    BrokerConfigDef("group.consumer.heartbeat.interval.ms", _int(1, INT_MAX), "5000"),
    # Bounds of the group configs consumer.session.timeout.ms / consumer.heartbeat.interval.ms.
    BrokerConfigDef("group.consumer.min.session.timeout.ms", _int(1, INT_MAX), "45000"),
    BrokerConfigDef("group.consumer.max.session.timeout.ms", _int(1, INT_MAX), "60000"),
    BrokerConfigDef("group.consumer.min.heartbeat.interval.ms", _int(1, INT_MAX), "5000"),
    BrokerConfigDef("group.consumer.max.heartbeat.interval.ms", _int(1, INT_MAX), "15000"),
    BrokerConfigDef("group.consumer.assignors", _assignors, "uniform,range"),
    BrokerConfigDef("group.consumer.max.size", _int(1, INT_MAX), str(INT_MAX)),
    BrokerConfigDef("offsets.topic.segment.bytes", _int(1, INT_MAX), "104857600"),
    BrokerConfigDef("offset.metadata.max.bytes", _int(0, INT_MAX), "4096"),
    BrokerConfigDef("offsets.retention.minutes", _int(1, INT_MAX), "10080"),
    BrokerConfigDef("offsets.retention.check.interval.ms", _int(1, LONG_MAX), "600000"),
    BrokerConfigDef("producer.id.expiration.ms", _int(1, INT_MAX), "86400000"),
    BrokerConfigDef("log.retention.check.interval.ms", _int(1, LONG_MAX), "300000"),
    BrokerConfigDef("log.flush.scheduler.interval.ms", _int(0, LONG_MAX), str(LONG_MAX)),
    BrokerConfigDef("log.flush.offset.checkpoint.interval.ms", _int(0, INT_MAX), "60000"),
    BrokerConfigDef("replica.high.watermark.checkpoint.interval.ms", _int(1, LONG_MAX), "5000"),
    BrokerConfigDef("replica.fetch.wait.max.ms", _int(0, INT_MAX), "500"),
    BrokerConfigDef("replica.lag.time.max.ms", _int(0, LONG_MAX), "30000"),
    BrokerConfigDef("unclean.leader.election.enable", _bool, "false", dynamic=True),
    # log.* : defaults of topic configs (DescribeConfigs lists them as synonyms).
    _topic("log.segment.bytes", "segment.bytes", "1073741824", _int(14, INT_MAX)),
    _topic("log.roll.ms", "segment.ms", "", _int(1, LONG_MAX)),
    _topic("log.roll.hours", "segment.ms", "168", _int(1, INT_MAX)),
    _topic("log.roll.jitter.ms", "segment.jitter.ms", "", _int(0, LONG_MAX)),
    _topic("log.roll.jitter.hours", "segment.jitter.ms", "0", _int(0, INT_MAX)),
    _topic("log.retention.ms", "retention.ms", "", _int(-1, LONG_MAX)),
    _topic("log.retention.minutes", "retention.ms", "", _int(-1, INT_MAX)),
    _topic("log.retention.hours", "retention.ms", "168", _int(-1, INT_MAX)),
    _topic("log.retention.bytes", "retention.bytes", "-1", _int(-1, LONG_MAX)),
    _topic("log.flush.interval.messages", "flush.messages", str(LONG_MAX), _int(1, LONG_MAX)),
    _topic("log.flush.interval.ms", "flush.ms", "", _int(0, LONG_MAX)),
    _topic("log.index.interval.bytes", "index.interval.bytes", "4096", _int(0, INT_MAX)),
    _topic("log.index.size.max.bytes", "segment.index.bytes", "10485760", _int(4, INT_MAX)),
    _topic("log.segment.delete.delay.ms", "file.delete.delay.ms", "60000", _int(0, LONG_MAX)),
    _topic("log.cleanup.policy", "cleanup.policy", "delete", _text),
    _topic("log.message.timestamp.type", "message.timestamp.type", "CreateTime", _text),
    _topic(
        "log.message.timestamp.before.max.ms",
        "message.timestamp.before.max.ms",
        str(LONG_MAX),
        _int(0, LONG_MAX),
    ),
    _topic(
        "log.message.timestamp.after.max.ms",
        "message.timestamp.after.max.ms",
        "3600000",
        _int(0, LONG_MAX),
    ),
    _topic("message.max.bytes", "max.message.bytes", "1048588", _int(0, INT_MAX)),
    _topic("compression.type", "compression.type", "producer", _text),
    _topic("min.insync.replicas", "min.insync.replicas", "1", _int(1, INT_MAX)),
    _topic("log.preallocate", "preallocate", "false", _bool),
)
CONFIGS_BY_NAME: Final = {d.name: d for d in BROKER_CONFIGS}
# Where several broker properties feed one topic config, the first set one wins
# (Kafka: log.roll.ms over log.roll.hours, log.retention.ms over minutes over hours).
_UNIT_MS: Final = {
    "log.roll.hours": 3_600_000,
    "log.roll.jitter.hours": 3_600_000,
    "log.retention.hours": 3_600_000,
    "log.retention.minutes": 60_000,
}


def read_properties_file(path: Path) -> dict[str, str]:
    """Java .properties subset: ``key=value`` or ``key: value``, ``#``/``!`` comments."""
    try:
        text = path.read_text()
    except OSError as error:
        raise ConfigError("--config", f"cannot read {path}: {error.strerror}") from None
    properties = {}
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped[0] in "#!":
            continue
        match = re.match(r"^([^=:\s]+)\s*[=:\s]\s*(.*)$", stripped)
        if match is None:
            properties[stripped] = ""
        else:
            properties[match[1]] = match[2]
    return properties


class BrokerConfig:
    """Parsed, validated broker properties; ``self[name]`` gives the typed value."""

    def __init__(self, properties: Mapping[str, str] | None = None) -> None:
        self.original: dict[str, str] = dict(properties or {})
        self.values: dict[str, Any] = {}
        self.unknown: list[str] = []
        for definition in BROKER_CONFIGS:
            raw = self.original.get(definition.name, definition.default)
            if raw is None or raw == "":
                self.values[definition.name] = None
                continue
            self.values[definition.name] = definition.parse(definition.name, raw)
        self.unknown, self.inert = self._other_keys()
        self.topic_defaults = self._build_topic_defaults()
        self._check()

    @classmethod
    def load(cls, config_file: Path | None = None, overrides: Iterable[str] = ()) -> BrokerConfig:
        properties = read_properties_file(config_file) if config_file else {}
        for item in overrides:
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise ConfigError("--override", f"{item!r} is not KEY=VALUE")
            properties[key.strip()] = value.strip()
        config = cls(properties)
        for key in config.unknown:
            logger.warning("unknown configuration %r ignored", key)
        for key in config.inert:
            logger.warning("Kafka configuration %r accepted; it has no effect in odradek", key)
        return config

    def _other_keys(self) -> tuple[list[str], list[str]]:
        """(not Kafka broker configs, Kafka broker configs odradek does not use).

        The second kind is type-checked against Kafka's catalogue
        (``server/config_catalogue.py``), so a bad value fails as in Kafka.
        """
        from odradek.server import config_catalogue  # it builds on this module

        unknown, inert = [], []
        for key in sorted(k for k in self.original if k not in CONFIGS_BY_NAME):
            definition = config_catalogue.definition(key)
            if definition is None:
                unknown.append(key)
            else:
                definition.parse(key, self.original[key])
                inert.append(key)
        return unknown, inert

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def is_set(self, name: str) -> bool:
        return name in self.original

    def _check(self) -> None:
        if (
            self.values["max.connections.per.ip"] == 0
            and not self.values["max.connections.per.ip.overrides"]
        ):
            raise ConfigError(
                "max.connections.per.ip",
                "0 is allowed only with max.connections.per.ip.overrides set",
            )
        broker_id = self.values["broker.id"]
        if broker_id is not None and broker_id >= 0 and broker_id != self.values["node.id"]:
            if self.is_set("node.id"):
                raise ConfigError("broker.id", f"{broker_id} differs from node.id")
            self.values["node.id"] = broker_id

    @property
    def node_id(self) -> int:
        return int(self.values["node.id"])

    @property
    def log_dirs(self) -> list[Path]:
        dirs = self.values["log.dirs"] or (self.values["log.dir"],)
        return [Path(d) for d in dirs]

    @property
    def listeners(self) -> tuple[Listener, ...]:
        names = set(self.values["controller.listener.names"] or ())
        # Controller listeners serve the quorum, not clients (KRaft); a single
        # combined node keeps its quorum in-process, so they are not opened yet.
        return tuple(li for li in self.values["listeners"] if li.name not in names)

    @property
    def advertised_listeners(self) -> tuple[Listener, ...]:
        return self.values["advertised.listeners"] or self.listeners

    def _build_topic_defaults(self) -> LogConfig:
        properties: dict[str, object] = {}
        for definition in BROKER_CONFIGS:
            topic = definition.topic_config
            value = self.values.get(definition.name)
            if topic is None or value is None or topic in properties:
                continue
            if definition.name in _UNIT_MS:
                value = value * _UNIT_MS[definition.name] if value >= 0 else -1
            properties[topic] = value
        try:
            return LogConfig.from_properties(properties)
        except LogConfigError as error:
            broker_names = [d.name for d in BROKER_CONFIGS if d.topic_config == error.key]
            raise ConfigError(broker_names[0] if broker_names else error.key, str(error)) from None
