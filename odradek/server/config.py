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

KRaft properties are typed (``QuorumVoter``, ``HostPort``, the protocol map as a dict)
and cross-checked as Kafka does (``BrokerConfig._check_kraft``), so the cluster code
reads ``config.roles``, ``config.quorum_voters``, ``config.controller_listeners``,
``config.broker_listeners``, ``config.inter_broker_listener`` and
``config.metadata_log_dir`` instead of re-parsing strings. A node with no quorum
configured is the zero-config combined node, whose quorum is in-process: it needs no
controller listener, which is why those checks apply only once a quorum is configured.
"""

from __future__ import annotations

import logging
import os
import re
import ssl
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from odradek.protocol.session import uses_tls
from odradek.security.acls import InvalidAcl, parse_super_users
from odradek.server.authorizer import AUTHORIZERS
from odradek.storage.errors import LogConfigError
from odradek.storage.log_config import LONG_MAX, LogConfig

if TYPE_CHECKING:
    from odradek.client._core.sasl import SaslCredentials
    from odradek.network.tls import ListenerTls

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


def _float(low: float, high: float) -> Callable[[str, str], float]:
    def parse(key: str, raw: str) -> float:
        try:
            value = float(raw.strip())
        except ValueError:
            raise ConfigError(key, f"expected a number, got {raw!r}") from None
        if not low <= value <= high or value != value:
            raise ConfigError(key, f"{value} is outside [{low}, {high}]")
        return value

    return parse


def _replica_selector(key: str, raw: str) -> str | None:
    """replica.selector.class (KIP-392): Kafka's LeaderSelector or
    RackAwareReplicaSelector, by full or short class name; empty: none."""
    from odradek.replica.replica_selector import known_selector

    if not raw.strip():
        return None
    try:
        return known_selector(raw)
    except ValueError as error:
        raise ConfigError(key, str(error)) from None


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


BROKER_ROLE: Final = "broker"
# The mechanisms this node's own clients log in with on SASL listeners (Kafka's names).
INTER_BROKER_SASL_MECHANISM: Final = "sasl.mechanism.inter.broker.protocol"
CONTROLLER_SASL_MECHANISM: Final = "sasl.mechanism.controller.protocol"
CONTROLLER_ROLE: Final = "controller"


def _roles(key: str, raw: str) -> tuple[str, ...]:
    roles = _list(key, raw)
    if not roles or any(role not in (BROKER_ROLE, CONTROLLER_ROLE) for role in roles):
        raise ConfigError(key, f"{raw!r} must be broker, controller or broker,controller")
    if len(set(roles)) != len(roles):
        raise ConfigError(key, f"{raw!r} names a role twice")
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


def _port(key: str, item: str, text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise ConfigError(key, f"{item!r}: port {text!r} is not in [1, 65535]")
    return int(text)


def _host_port(key: str, item: str, text: str, form: str) -> tuple[str, int]:
    """``host:port`` or ``[ipv6]:port`` (the brackets are dropped from the host)."""
    host, sep, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]") and len(host) > 2:
        host = host[1:-1]
    elif not _HOSTNAME.match(host):
        raise ConfigError(key, f"{item!r} is not {form}")
    if not sep:
        raise ConfigError(key, f"{item!r} is not {form}")
    return host, _port(key, item, port)


# A host name or IPv4 address; IPv6 addresses must be in brackets, as in Kafka.
_HOSTNAME = re.compile(r"^[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?$")


@dataclass(frozen=True, slots=True)
class QuorumVoter:
    """One entry of controller.quorum.voters: ``node_id@host:port``."""

    node_id: int
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class HostPort:
    """One entry of controller.quorum.bootstrap.servers: ``host:port``."""

    host: str
    port: int


def parse_quorum_voters(key: str, raw: str) -> tuple[QuorumVoter, ...]:
    """``1@host:9093,2@[::1]:9093``: every node id and every address at most once."""
    voters: list[QuorumVoter] = []
    for item in _list(key, raw):
        node, at, address = item.partition("@")
        node = node.strip()
        if not at or not node.isdigit() or int(node) > INT_MAX:
            raise ConfigError(key, f"{item!r} is not NODE_ID@HOST:PORT")
        host, port = _host_port(key, item, address.strip(), "NODE_ID@HOST:PORT")
        voter = QuorumVoter(int(node), host, port)
        for other in voters:
            if other.node_id == voter.node_id:
                raise ConfigError(key, f"{item!r}: node id {voter.node_id} is listed twice")
            if (other.host, other.port) == (host, port):
                raise ConfigError(key, f"{item!r}: {address.strip()} is listed twice")
        voters.append(voter)
    return tuple(voters)


def parse_bootstrap_servers(key: str, raw: str) -> tuple[HostPort, ...]:
    servers: list[HostPort] = []
    for item in _list(key, raw):
        server = HostPort(*_host_port(key, item, item, "HOST:PORT"))
        if server in servers:
            raise ConfigError(key, f"{item!r} is listed twice")
        servers.append(server)
    return tuple(servers)


SECURITY_PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
IMPLEMENTED_PROTOCOLS: Final = frozenset({"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"})


def parse_protocol_map(key: str, raw: str) -> dict[str, str]:
    """listener.security.protocol.map: ``LISTENER:PROTOCOL,...`` (names upper-cased)."""
    mapping: dict[str, str] = {}
    for item in _list(key, raw):
        name, sep, protocol = (part.strip().upper() for part in item.partition(":"))
        if not sep or not _LISTENER_NAME.match(name):
            raise ConfigError(key, f"{item!r} is not LISTENER_NAME:SECURITY_PROTOCOL")
        if protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(
                key,
                f"{item!r}: unknown security protocol {protocol!r} "
                f"({', '.join(SECURITY_PROTOCOLS)})",
            )
        if name in mapping:
            raise ConfigError(key, f"{item!r}: listener {name} is mapped twice")
        mapping[name] = protocol
    return mapping


def _listener_names(key: str, raw: str) -> tuple[str, ...]:
    """controller.listener.names, inter.broker.listener.name: names as listeners has them."""
    names = tuple(name.upper() for name in _list(key, raw))
    for name in names:
        if not _LISTENER_NAME.match(name):
            raise ConfigError(key, f"{name!r} is not a listener name")
    return names


def _one_listener_name(key: str, raw: str) -> str | None:
    names = _listener_names(key, raw)
    if len(names) > 1:
        raise ConfigError(key, f"{raw.strip()!r} names more than one listener")
    return names[0] if names else None


_LISTENER_NAME = re.compile(r"^[A-Z0-9_]+$")


# scheme://host:port[/path]: the scheme and path are checked apart, for clearer errors.
_METRICS_URL = re.compile(
    r"^(?P<scheme>[A-Za-z]+)://(?P<host>\[[^\]]*\]|[^:/\[\]]+):(?P<port>[0-9]+)"
    r"(?P<path>/[^?#]*)?$"
)


def parse_metrics_listener(key: str, raw: str) -> HostPort:
    """metrics.listener: ``http://HOST:PORT`` (port 0: any free port), where the broker
    serves Prometheus's ``/metrics``; a trailing ``/metrics`` path is allowed."""
    text = raw.strip()
    form = "http://HOST:PORT (e.g. http://127.0.0.1:9644)"
    match = _METRICS_URL.match(text)
    if match is None or match["path"] not in (None, "/", "/metrics"):
        raise ConfigError(key, f"{text!r} is not {form}")
    if match["scheme"].lower() != "http":
        raise ConfigError(key, f"{text!r}: only plain http is served, not {match['scheme']}")
    port = int(match["port"])
    if port > 65535:
        raise ConfigError(key, f"{text!r}: port {port} is out of range")
    return HostPort(match["host"].strip("[]"), port)


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


# Kafka's default listener.security.protocol.map; when it is not set, KRaft also maps
# each controller listener name to PLAINTEXT (BrokerConfig.protocol_map).
DEFAULT_PROTOCOL_MAP: Final = (
    "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT"
)


@dataclass(frozen=True, slots=True)
class BrokerConfigDef:
    name: str
    parse: Callable[[str, str], Any]
    default: str | None
    dynamic: bool = False  # changeable with (Incremental)AlterConfigs
    topic_config: str | None = None  # the topic config this property provides the default of


def _authorizer_class(key: str, raw: str) -> str:
    """The authorizer's class name: "" (none) or Kafka's ACL authorizers (authorizer.py)."""
    name = raw.strip()
    if name and name not in AUTHORIZERS:
        raise ConfigError(
            key,
            f"{name!r}: odradek implements {AUTHORIZERS[0]} (and {AUTHORIZERS[1]} as an alias"
            " of it); leave it empty for no authorization",
        )
    return name


def _super_users(key: str, raw: str) -> frozenset[str]:
    """``super.users``: principals separated by semicolons (User:admin;User:ops)."""
    try:
        return parse_super_users(raw)
    except InvalidAcl as exc:
        raise ConfigError(key, str(exc)) from None


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
    BrokerConfigDef("controller.listener.names", _listener_names, "CONTROLLER"),
    BrokerConfigDef("controller.quorum.voters", parse_quorum_voters, None),
    BrokerConfigDef("controller.quorum.bootstrap.servers", parse_bootstrap_servers, None),
    BrokerConfigDef("inter.broker.listener.name", _one_listener_name, None),
    BrokerConfigDef("listener.security.protocol.map", parse_protocol_map, DEFAULT_PROTOCOL_MAP),
    BrokerConfigDef("log.dirs", _list, None),
    BrokerConfigDef("log.dir", _text, "./var"),
    BrokerConfigDef("metadata.log.dir", _text, None),
    # KRaft timing (Kafka's defaults); the raft and broker-lifecycle code reads them.
    BrokerConfigDef("controller.quorum.election.timeout.ms", _int(0, INT_MAX), "1000"),
    BrokerConfigDef("controller.quorum.fetch.timeout.ms", _int(0, INT_MAX), "2000"),
    BrokerConfigDef("controller.quorum.election.backoff.max.ms", _int(0, INT_MAX), "1000"),
    BrokerConfigDef("controller.quorum.request.timeout.ms", _int(0, INT_MAX), "2000"),
    BrokerConfigDef("controller.quorum.retry.backoff.ms", _int(0, INT_MAX), "20"),
    BrokerConfigDef(
        "metadata.log.max.record.bytes.between.snapshots", _int(1, LONG_MAX), "20971520"
    ),
    BrokerConfigDef("metadata.log.max.snapshot.interval.ms", _int(0, LONG_MAX), "3600000"),
    BrokerConfigDef("broker.session.timeout.ms", _int(1, INT_MAX), "9000"),
    BrokerConfigDef("broker.heartbeat.interval.ms", _int(1, INT_MAX), "2000"),
    BrokerConfigDef("broker.rack", _text, None),
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
    BrokerConfigDef("transaction.state.log.segment.bytes", _int(1, INT_MAX), "104857600"),
    BrokerConfigDef("transaction.max.timeout.ms", _int(1, INT_MAX), "900000"),
    BrokerConfigDef("transactional.id.expiration.ms", _int(1, INT_MAX), "604800000"),
    BrokerConfigDef("transaction.partition.verification.enable", _bool, "true"),
    BrokerConfigDef(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms", _int(1, INT_MAX), "10000"
    ),
    BrokerConfigDef(
        "transaction.remove.expired.transaction.cleanup.interval.ms", _int(1, INT_MAX), "3600000"
    ),
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
    # Replica fetchers (replica/fetcher.py): Kafka's names and defaults.
    BrokerConfigDef("num.replica.fetchers", _int(1, INT_MAX), "1"),
    BrokerConfigDef("replica.fetch.max.bytes", _int(0, INT_MAX), "1048576"),
    BrokerConfigDef("replica.fetch.response.max.bytes", _int(0, INT_MAX), "10485760"),
    BrokerConfigDef("replica.fetch.min.bytes", _int(0, INT_MAX), "1"),
    BrokerConfigDef("replica.fetch.backoff.ms", _int(0, INT_MAX), "1000"),
    BrokerConfigDef("replica.socket.timeout.ms", _int(1, INT_MAX), "30000"),
    BrokerConfigDef("replica.lag.time.max.ms", _int(0, LONG_MAX), "30000"),
    BrokerConfigDef("replica.selector.class", _replica_selector, None),
    BrokerConfigDef("unclean.leader.election.enable", _bool, "false", dynamic=True),
    # Replication quotas (KIP-73, replica/replication_quota.py): byte rates per broker,
    # dynamic (Long.MAX: no throttle), over windows of the two read-only window configs.
    BrokerConfigDef(
        "leader.replication.throttled.rate", _int(0, LONG_MAX), str(LONG_MAX), dynamic=True
    ),
    BrokerConfigDef(
        "follower.replication.throttled.rate", _int(0, LONG_MAX), str(LONG_MAX), dynamic=True
    ),
    BrokerConfigDef(
        "replica.alter.log.dirs.io.max.bytes.per.second",
        _int(0, LONG_MAX),
        str(LONG_MAX),
        dynamic=True,
    ),
    BrokerConfigDef("replication.quota.window.num", _int(1, INT_MAX), "11"),
    BrokerConfigDef("replication.quota.window.size.seconds", _int(1, INT_MAX), "1"),
    BrokerConfigDef("auto.leader.rebalance.enable", _bool, "true"),
    BrokerConfigDef("leader.imbalance.check.interval.seconds", _int(1, LONG_MAX), "300"),
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
    _topic("log.cleaner.delete.retention.ms", "delete.retention.ms", "86400000", _int(0, LONG_MAX)),
    _topic("log.cleaner.min.cleanable.ratio", "min.cleanable.dirty.ratio", "0.5", _float(0, 1)),
    _topic("log.cleaner.min.compaction.lag.ms", "min.compaction.lag.ms", "0", _int(0, LONG_MAX)),
    _topic(
        "log.cleaner.max.compaction.lag.ms",
        "max.compaction.lag.ms",
        str(LONG_MAX),
        _int(1, LONG_MAX),
    ),
    # The log cleaner (storage/cleaner/): compaction of cleanup.policy=compact topics.
    BrokerConfigDef("log.cleaner.enable", _bool, "true"),
    # Dynamic, as in Kafka (cluster-wide or per broker): Broker.update_cleaner applies them.
    BrokerConfigDef("log.cleaner.threads", _int(0, 64), "1", dynamic=True),
    BrokerConfigDef(
        "log.cleaner.dedupe.buffer.size",
        _int(1024 * 1024, LONG_MAX),
        "134217728",
        dynamic=True,
    ),
    BrokerConfigDef("log.cleaner.io.buffer.load.factor", _float(0.01, 1.0), "0.9", dynamic=True),
    BrokerConfigDef(
        "log.cleaner.io.max.bytes.per.second",
        _float(1.0, float("inf")),
        "1.7976931348623157E308",
        dynamic=True,
    ),
    BrokerConfigDef("log.cleaner.backoff.ms", _int(0, LONG_MAX), "15000", dynamic=True),
    BrokerConfigDef("offsets.topic.compression.codec", _int(0, 4), "0"),
    # Tiered storage (KIP-405, storage/remote/): Kafka's names and defaults.
    BrokerConfigDef("remote.log.storage.system.enable", _bool, "false"),
    BrokerConfigDef("remote.log.manager.task.interval.ms", _int(1, LONG_MAX), "30000"),
    BrokerConfigDef("remote.log.reader.threads", _int(1, INT_MAX), "10"),
    BrokerConfigDef("remote.log.storage.manager.class.name", _text, "filesystem"),
    BrokerConfigDef("remote.log.storage.manager.impl.prefix", _text, "rsm.config."),
    BrokerConfigDef("remote.log.metadata.manager.impl.prefix", _text, "rlmm.config."),
    BrokerConfigDef("remote.log.metadata.manager.class.name", _text, "topic"),
    BrokerConfigDef(
        "remote.log.index.file.cache.total.size.bytes", _int(1, LONG_MAX), "1073741824"
    ),
    _topic("log.local.retention.ms", "local.retention.ms", "-2", _int(-2, LONG_MAX)),
    _topic("log.local.retention.bytes", "local.retention.bytes", "-2", _int(-2, LONG_MAX)),
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
    # -- security (issue 16): TLS listeners (network/tls.py) ------------------------
    # Read by network/tls.py for each SSL/SASL_SSL listener, where a
    # listener.name.<listener>.ssl.* property overrides them; checked at startup by
    # building every TLS listener's context (BrokerConfig._build_listener_tls).
    # Dynamic as in Kafka (per broker; stores only with a listener prefix), but a
    # change is stored, not applied: contexts are built at startup (no hot reload).
    BrokerConfigDef("ssl.keystore.location", _text, None, dynamic=True),
    BrokerConfigDef("ssl.keystore.type", _text, "JKS", dynamic=True),
    BrokerConfigDef("ssl.keystore.password", _text, None, dynamic=True),
    BrokerConfigDef("ssl.key.password", _text, None, dynamic=True),
    BrokerConfigDef("ssl.truststore.location", _text, None, dynamic=True),
    BrokerConfigDef("ssl.truststore.type", _text, "JKS", dynamic=True),
    BrokerConfigDef("ssl.truststore.password", _text, None, dynamic=True),
    BrokerConfigDef("ssl.client.auth", _text, "none", dynamic=True),
    BrokerConfigDef("ssl.enabled.protocols", _text, "TLSv1.2,TLSv1.3", dynamic=True),
    BrokerConfigDef("ssl.cipher.suites", _text, "", dynamic=True),
    BrokerConfigDef("ssl.principal.mapping.rules", _text, "DEFAULT", dynamic=True),
    # The broker's own clients over TLS (network/tls.py build_peer_context); "": none.
    BrokerConfigDef("ssl.endpoint.identification.algorithm", _text, "https", dynamic=True),
    # -- end of TLS --
    #
    # -- security: SASL authentication (server/sasl_settings.py, handlers/sasl.py) ---
    # Each may also be given per listener (listener.name.<listener>.[<mechanism>.]<name>);
    # server/sasl_settings.py resolves them per listener and mechanism.
    BrokerConfigDef("sasl.enabled.mechanisms", _list, "GSSAPI"),
    BrokerConfigDef("sasl.jaas.config", _text, None),
    BrokerConfigDef("sasl.mechanism.inter.broker.protocol", _text, "GSSAPI"),
    BrokerConfigDef("sasl.mechanism.controller.protocol", _text, "GSSAPI"),
    BrokerConfigDef("sasl.server.max.receive.size", _int(1, INT_MAX), "524288"),
    BrokerConfigDef("connections.max.reauth.ms", _int(0, LONG_MAX), "0"),
    BrokerConfigDef("connection.failed.authentication.delay.ms", _int(0, INT_MAX), "100"),
    # OAUTHBEARER (server/oauth_settings.py): signed tokens checked against a JWKS
    BrokerConfigDef("sasl.server.callback.handler.class", _text, None),
    BrokerConfigDef("sasl.oauthbearer.jwks.endpoint.url", _text, None),
    BrokerConfigDef("sasl.oauthbearer.jwks.endpoint.refresh.ms", _int(1, LONG_MAX), "3600000"),
    BrokerConfigDef("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", _int(0, LONG_MAX), "100"),
    BrokerConfigDef(
        "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms", _int(0, LONG_MAX), "10000"
    ),
    BrokerConfigDef("sasl.oauthbearer.expected.audience", _list, None),
    BrokerConfigDef("sasl.oauthbearer.expected.issuer", _text, None),
    BrokerConfigDef("sasl.oauthbearer.sub.claim.name", _text, "sub"),
    BrokerConfigDef("sasl.oauthbearer.scope.claim.name", _text, "scope"),
    BrokerConfigDef("sasl.oauthbearer.clock.skew.seconds", _int(0, INT_MAX), "30"),
    # -- end of SASL --
    #
    # -- security: the authorizer and ACLs (server/authorizer.py) -------------------
    BrokerConfigDef("authorizer.class.name", _authorizer_class, ""),
    BrokerConfigDef("super.users", _super_users, ""),
    BrokerConfigDef("allow.everyone.if.no.acl.found", _bool, "false"),
    # -- end of authorizer --
    #
    # -- security: client quotas (server/quotas.py) --------------------------------
    # The windows client byte rates and request time are measured over (Kafka's
    # ClientQuotaManager): quotas are set per user/client-id with AlterClientQuotas.
    BrokerConfigDef("quota.window.num", _int(1, INT_MAX), "11"),
    BrokerConfigDef("quota.window.size.seconds", _int(1, INT_MAX), "1"),
    # -- end of quotas --
    #
    # odradek's own: the Prometheus /metrics endpoint (console/metrics.py); unset, none.
    BrokerConfigDef("metrics.listener", parse_metrics_listener, None),
)
CONFIGS_BY_NAME: Final = {d.name: d for d in BROKER_CONFIGS}
# The properties above that are odradek's, not Kafka's (every other name is Kafka's).
ODRADEK_CONFIGS: Final = frozenset({"metrics.listener"})
# Where several broker properties feed one topic config, the first set one wins
# (Kafka: log.roll.ms over log.roll.hours, log.retention.ms over minutes over hours).
_UNIT_MS: Final = {
    "log.roll.hours": 3_600_000,
    "log.roll.jitter.hours": 3_600_000,
    "log.retention.hours": 3_600_000,
    "log.retention.minutes": 60_000,
}


def _normalized(path: Path) -> str:
    return os.path.normpath(os.path.abspath(path))


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
        # listener name -> its TLS (SSL and SASL_SSL listeners), built by _check
        self.listener_tls: dict[str, ListenerTls] = {}
        # listener name -> the broker's own client context for it (TLS listeners only)
        self.peer_tls: dict[str, ssl.SSLContext] = {}
        # listener name -> how the broker's own clients log in to it (SASL listeners only)
        self.peer_sasl: dict[str, SaslCredentials] = {}
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
        # The remote storage and metadata plugins' own properties (rsm.config.*,
        # rlmm.config.* by default) are theirs to check.
        prefixes = tuple(
            self.original.get(name, CONFIGS_BY_NAME[name].default or "") or "\0"
            for name in (
                "remote.log.storage.manager.impl.prefix",
                "remote.log.metadata.manager.impl.prefix",
            )
        )
        for key in sorted(k for k in self.original if k not in CONFIGS_BY_NAME):
            if key.startswith(prefixes):
                continue
            definition = config_catalogue.definition(key)
            if definition is None:
                unknown.append(key)
            elif config_catalogue.listener_base(key) in CONFIGS_BY_NAME:
                definition.parse(key, self.original[key])  # used: network/tls.py
            else:
                definition.parse(key, self.original[key])
                if config_catalogue.listener_base(key) not in CONFIGS_BY_NAME:
                    inert.append(key)  # a per-listener form of an implemented one is used
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
        for name in ("process.roles", "listeners"):  # set to "" in a file or override
            if self.values[name] is None:
                raise ConfigError(name, "must not be empty")
        self._check_kraft()

    def _check_kraft(self) -> None:
        """Kafka's KRaft cross-checks of roles, quorum, listeners and their protocols.

        A node with no quorum configured (no controller.quorum.voters nor
        controller.quorum.bootstrap.servers) is the zero-config single combined node:
        its quorum is in-process, so it needs no controller listener.
        """
        self._check_listener_names()
        roles, controller_names = self.roles, set(self.controller_listener_names)
        all_names = [li.name for li in self.values["listeners"]]
        if not self.quorum_configured:
            if roles != {BROKER_ROLE, CONTROLLER_ROLE}:
                raise ConfigError(
                    "process.roles",
                    f"{','.join(self.values['process.roles'])} needs controller.quorum.voters "
                    "or controller.quorum.bootstrap.servers (only a combined broker,controller "
                    "node runs without a quorum configured)",
                )
        elif not self.quorum_voters:
            # Kafka's dynamic quorum (KIP-853) finds the voters through the bootstrap
            # servers; odradek's quorum is static: without the voters a broker-only node
            # could not tell whom to follow, and a controller would elect itself alone.
            raise ConfigError(
                "controller.quorum.voters",
                "must name the voters (id@host:port,...): a dynamic quorum found through "
                "controller.quorum.bootstrap.servers alone (KIP-853) is not implemented",
            )
        else:
            self._check_quorum_roles(roles, controller_names, all_names)
        if BROKER_ROLE in roles:
            self._check_broker_listeners(controller_names)
        self._check_protocols()
        self._check_metadata_log_dir()

    def _check_listener_names(self) -> None:
        names = [li.name for li in self.values["listeners"]]
        for name in names:
            if names.count(name) > 1:
                raise ConfigError("listeners", f"listener name {name} is used twice")
        advertised = self.values["advertised.listeners"] or ()
        for listener in advertised:
            if listener.name not in names:
                raise ConfigError(
                    "advertised.listeners",
                    f"{listener.url()}: listener {listener.name} is not in listeners",
                )
            if listener.name in self.controller_listener_names:
                raise ConfigError(
                    "advertised.listeners",
                    f"{listener.url()}: {listener.name} is a controller listener "
                    "(controller.listener.names); clients are given broker listeners only",
                )

    def _check_quorum_roles(
        self, roles: frozenset[str], controller_names: set[str], all_names: list[str]
    ) -> None:
        voters = {voter.node_id for voter in self.quorum_voters}
        node = self.node_id
        if not controller_names:
            raise ConfigError(
                "controller.listener.names", "must name at least one listener in KRaft mode"
            )
        if CONTROLLER_ROLE in roles:
            if voters and node not in voters:
                raise ConfigError(
                    "controller.quorum.voters",
                    f"node.id={node} has the controller role but is not one of the voters "
                    f"{sorted(voters)}",
                )
            for name in self.controller_listener_names:
                if name not in all_names:
                    raise ConfigError(
                        "controller.listener.names",
                        f"{name} is not in listeners ({', '.join(all_names)}); a node with "
                        "the controller role listens on every controller listener",
                    )
            if BROKER_ROLE not in roles:
                others = [n for n in all_names if n not in controller_names]
                if others:
                    raise ConfigError(
                        "listeners",
                        f"{', '.join(others)}: a controller-only node (process.roles="
                        "controller) has only controller listeners (controller.listener.names)",
                    )
        else:
            if node in voters:
                raise ConfigError(
                    "controller.quorum.voters",
                    f"node.id={node} is a voter but process.roles=broker has no controller role",
                )
            listed = [n for n in all_names if n in controller_names]
            if listed:
                raise ConfigError(
                    "listeners",
                    f"{', '.join(listed)} is a controller listener (controller.listener.names) "
                    "but process.roles=broker has no controller role",
                )

    def _check_broker_listeners(self, controller_names: set[str]) -> None:
        broker_names = [li.name for li in self.broker_listeners]
        if not broker_names:
            raise ConfigError(
                "listeners",
                "a node with the broker role needs a listener that is not a controller "
                "listener (controller.listener.names)",
            )
        name = self.values["inter.broker.listener.name"]
        if name is not None and name not in broker_names:
            what = "a controller listener" if name in controller_names else "not in listeners"
            raise ConfigError(
                "inter.broker.listener.name",
                f"{name} is {what}; broker listeners: {', '.join(broker_names)}",
            )

    def _check_protocols(self) -> None:
        protocols = self.protocol_map
        for listener in (*self.values["listeners"], *(self.values["advertised.listeners"] or ())):
            protocol = protocols.get(listener.name)
            if protocol is None:
                raise ConfigError(
                    "listener.security.protocol.map",
                    f"no security protocol for listener {listener.name} ({listener.url()})",
                )
            if protocol not in IMPLEMENTED_PROTOCOLS:
                raise ConfigError(
                    "listeners",
                    f"{listener.url()} uses {protocol} (listener.security.protocol.map): not "
                    f"implemented yet; implemented: {', '.join(sorted(IMPLEMENTED_PROTOCOLS))}",
                )
            if protocol.startswith("SASL_"):
                from odradek.server.sasl_settings import listener_sasl

                listener_sasl(self, listener.name)  # a bad SASL setup fails at startup
        self._check_internal_sasl(protocols)
        self._build_listener_tls(protocols)

    def _check_internal_sasl(self, protocols: dict[str, str]) -> None:
        """The credentials this node's own clients log in with on SASL inter-broker and
        controller listeners (server/sasl_settings.py ``peer_credentials``), read now so
        a missing or bad one stops the node with one line. The zero-config node without
        tiered storage never connects to its own listeners: it needs none."""
        self.peer_sasl = {}
        if not self.quorum_configured and not self.values["remote.log.storage.system.enable"]:
            return
        from odradek.server.sasl_settings import peer_credentials

        internal = [(name, CONTROLLER_SASL_MECHANISM) for name in self.controller_listener_names]
        inter = self.inter_broker_listener if BROKER_ROLE in self.roles else None
        if inter is not None:
            internal.append((inter.name, INTER_BROKER_SASL_MECHANISM))
        for name, key in internal:
            if protocols.get(name, "").startswith("SASL_") and name not in self.peer_sasl:
                self.peer_sasl[name] = peer_credentials(self, name, key)

    def _build_listener_tls(self, protocols: Mapping[str, str]) -> None:
        """Each TLS listener's context, built now so a bad keystore, password or
        setting stops the broker at startup with one line."""
        from odradek.network.tls import TlsConfigError, build_listener_tls, build_peer_context

        self.listener_tls = {}
        for listener in self.values["listeners"]:
            if not uses_tls(protocols.get(listener.name, "")):
                continue
            try:
                self.listener_tls[listener.name] = build_listener_tls(self.original, listener.name)
            except TlsConfigError as error:
                raise ConfigError(error.key, f"listener {listener.name}: {error.message}") from None
        # The broker's own clients (replica fetchers, transaction markers, the controller
        # and raft clients, tiered storage's metadata client) over TLS listeners: their
        # contexts too are built now, for the listeners they connect to.
        internal = list(self.controller_listener_names)
        inter_broker = self.inter_broker_listener if BROKER_ROLE in self.roles else None
        if inter_broker is not None:
            internal.append(inter_broker.name)
        for name in internal:
            if not uses_tls(protocols.get(name, "")) or name in self.peer_tls:
                continue
            try:
                self.peer_tls[name] = build_peer_context(self.original, name)
            except TlsConfigError as error:
                raise ConfigError(
                    error.key, f"listener {name} (this broker's client): {error.message}"
                ) from None

    def peer_ssl_context(self, listener: str | None) -> ssl.SSLContext | None:
        """The context the broker's own clients use to reach ``listener`` (None:
        PLAINTEXT)."""
        return self.peer_tls.get(listener) if listener is not None else None

    @property
    def controller_ssl_context(self) -> ssl.SSLContext | None:
        """For the controller and raft clients: the first controller listener's."""
        names = self.controller_listener_names
        return self.peer_ssl_context(names[0] if names else None)

    @property
    def inter_broker_ssl_context(self) -> ssl.SSLContext | None:
        listener = self.inter_broker_listener
        return self.peer_ssl_context(listener.name if listener is not None else None)

    @property
    def controller_sasl(self) -> SaslCredentials | None:
        """How the controller and raft clients log in (None: not a SASL listener)."""
        names = self.controller_listener_names
        return self.peer_sasl.get(names[0]) if names else None

    @property
    def inter_broker_sasl(self) -> SaslCredentials | None:
        """How replica fetchers, transaction markers and tiered storage's metadata
        clients log in (None: not a SASL listener)."""
        listener = self.inter_broker_listener
        return self.peer_sasl.get(listener.name) if listener is not None else None

    def _check_metadata_log_dir(self) -> None:
        if self.values["metadata.log.dir"] is None:
            return
        wanted = _normalized(self.metadata_log_dir)
        if all(_normalized(d) != wanted for d in self.log_dirs):
            # LogManager checkpoints the metadata log's recovery point in its log dir;
            # a metadata dir of its own comes with the KRaft work.
            raise ConfigError(
                "metadata.log.dir",
                f"{self.metadata_log_dir} is not one of log.dirs; odradek keeps "
                "__cluster_metadata in one of the log dirs for now",
            )

    @property
    def node_id(self) -> int:
        return int(self.values["node.id"])

    @property
    def log_dirs(self) -> list[Path]:
        dirs = self.values["log.dirs"] or (self.values["log.dir"],)
        return [Path(d) for d in dirs]

    @property
    def metadata_log_dir(self) -> Path:
        """Where ``__cluster_metadata-0`` lives: metadata.log.dir, else the first log dir."""
        value = self.values["metadata.log.dir"]
        return Path(value) if value else self.log_dirs[0]

    @property
    def identity_dirs(self) -> list[Path]:
        """Every dir that holds a meta.properties: the log dirs and the metadata log dir."""
        dirs = list(self.log_dirs)
        if all(_normalized(d) != _normalized(self.metadata_log_dir) for d in dirs):
            dirs.append(self.metadata_log_dir)
        return dirs

    @property
    def roles(self) -> frozenset[str]:
        return frozenset(self.values["process.roles"])

    @property
    def quorum_voters(self) -> tuple[QuorumVoter, ...]:
        return self.values["controller.quorum.voters"] or ()

    @property
    def quorum_bootstrap_servers(self) -> tuple[HostPort, ...]:
        return self.values["controller.quorum.bootstrap.servers"] or ()

    @property
    def quorum_configured(self) -> bool:
        """False for the zero-config single combined node, whose quorum is in-process."""
        return bool(self.quorum_voters or self.quorum_bootstrap_servers)

    @property
    def controller_listener_names(self) -> tuple[str, ...]:
        return self.values["controller.listener.names"] or ()

    @property
    def controller_listeners(self) -> tuple[Listener, ...]:
        """The listeners named by controller.listener.names (the broker serves them when a
        quorum is configured, on a server of their own)."""
        names = set(self.controller_listener_names)
        return tuple(li for li in self.values["listeners"] if li.name in names)

    @property
    def broker_listeners(self) -> tuple[Listener, ...]:
        """The listeners that are not controller listeners: what clients connect to."""
        names = set(self.controller_listener_names)
        return tuple(li for li in self.values["listeners"] if li.name not in names)

    @property
    def listeners(self) -> tuple[Listener, ...]:
        # What the broker's client-facing server binds. Controller listeners serve the
        # quorum, not clients (KRaft): the broker binds them apart, before it waits for
        # the quorum (controller_listeners).
        return self.broker_listeners

    @property
    def inter_broker_listener(self) -> Listener | None:
        """inter.broker.listener.name's listener (default: the first broker listener);
        None on a controller-only node."""
        name = self.values["inter.broker.listener.name"]
        for listener in self.broker_listeners:
            if name is None or listener.name == name:
                return listener
        return None

    @property
    def protocol_map(self) -> dict[str, str]:
        """listener name -> security protocol; unless the map is set, Kafka's default plus
        PLAINTEXT for each controller listener (as KRaft does)."""
        mapping = dict(self.values["listener.security.protocol.map"] or {})
        if not self.is_set("listener.security.protocol.map"):
            for name in self.controller_listener_names:
                mapping.setdefault(name, "PLAINTEXT")
        return mapping

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
