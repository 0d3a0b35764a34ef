"""Client configuration with Kafka's property names, defaults and validation.

How this works and why: users switching from confluent-kafka or the Java client pass
the same dict (``{"bootstrap.servers": ..., "acks": "all"}``). ``ClientConfig`` checks
every key against the table for its role (producer, consumer, admin) and parses the
value; an unknown key or a bad value raises ``ConfigError`` naming the key, before
any connection is made. Values are read back by name: ``config["linger.ms"]``.

librdkafka's names for settings odradek has under the Java name are aliases, honoured
as the setting they name (``ALIASES``): ``queue.buffering.max.ms`` = ``linger.ms``,
``message.timeout.ms`` = ``delivery.timeout.ms``, ``message.max.bytes`` =
``max.request.size`` (producer), ``compression.codec`` = ``compression.type``,
``queue.buffering.max.kbytes`` = ``buffer.memory`` / 1024, and
``topic.metadata.refresh.interval.ms`` = ``metadata.max.age.ms``.
Honoured librdkafka settings of their own: ``queue.buffering.max.messages`` (produce()
raises BufferError when that many records await their delivery report; unset, only
``buffer.memory`` bounds the queue) and ``sticky.partitioning.linger.ms`` (0: keyless
records go to a random partition each; any other value: they stick to one partition
per batch, odradek's stickiness, not for that many milliseconds).

Accepted, documented no-ops (they change no delivery or ordering semantics here):

- ``debug``: librdkafka's debug contexts; odradek logs through ``logging`` instead.
- ``statistics.interval.ms`` and ``stats_cb``: no statistics are emitted yet; a
  ``stats_cb`` with a positive interval is never called (a warning is logged once).
- ``socket.keepalive.enable``: no TCP keepalive is set; a silent peer is found by
  ``request.timeout.ms``.
- ``api.version.request``: odradek always negotiates versions with ApiVersions.
- ``log_level``, ``log.connection.close``: logging is Python's ``logging``.
- ``broker.address.family``: addresses are used as the resolver returns them.
- ``reconnect.backoff.ms`` / ``reconnect.backoff.max.ms``: reconnects back off by
  ``retry.backoff.ms`` / ``retry.backoff.max.ms``.
- ``message.max.bytes`` for a consumer or admin client: fetch sizes are
  ``fetch.max.bytes`` / ``max.partition.fetch.bytes``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from odradek.client._core.tls import TlsSettingsError, client_ssl_context

if TYPE_CHECKING:
    from odradek.client._core.oauth import TokenSource

logger = logging.getLogger(__name__)
_warned_stats = False


class ConfigError(ValueError):
    """A bad client property; the message names the key."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


def _int(low: int, high: int = 2**63 - 1) -> Callable[[str, Any], int]:
    def parse(key: str, raw: Any) -> int:
        if isinstance(raw, bool):
            raise ConfigError(key, f"expected an integer, got {raw!r}")
        try:
            value = int(raw)
        except (TypeError, ValueError):
            raise ConfigError(key, f"expected an integer, got {raw!r}") from None
        if not low <= value <= high:
            raise ConfigError(key, f"{value} is outside [{low}, {high}]")
        return value

    return parse


def _bool(key: str, raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise ConfigError(key, f"expected true or false, got {raw!r}")
    return text == "true"


def _choice(*choices: str) -> Callable[[str, Any], str]:
    def parse(key: str, raw: Any) -> str:
        text = str(raw).strip()
        if text not in choices:
            raise ConfigError(key, f"{raw!r} is not one of {', '.join(choices)}")
        return text

    return parse


def _text(key: str, raw: Any) -> str:
    if not isinstance(raw, str):
        raise ConfigError(key, f"expected a string, got {raw!r}")
    return raw


def _acks(key: str, raw: Any) -> int:
    text = str(raw).strip().lower()
    mapping = {"all": -1, "-1": -1, "0": 0, "1": 1}
    if text not in mapping:
        raise ConfigError(key, f"{raw!r} is not one of 0, 1, all, -1")
    return mapping[text]


# Protocols this client speaks; SASL_* arrive with the SASL client (issue 16).
CLIENT_PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def _protocol(key: str, raw: Any) -> str:
    """security.protocol, in any case (librdkafka's are lower case, Kafka's upper)."""
    text = str(raw).strip().upper()
    if text not in CLIENT_PROTOCOLS:
        raise ConfigError(key, f"{raw!r} is not one of {', '.join(CLIENT_PROTOCOLS)}")
    return text


def _any(key: str, raw: Any) -> Any:
    return raw


SASL_PROTOCOLS: Final = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})


@dataclass(frozen=True, slots=True)
class Prop:
    name: str
    parse: Callable[[str, Any], Any]
    default: Any
    roles: frozenset[str]
    note: str = ""  # non-empty: accepted and ignored, this says why (see NO_OPS)


_ALL = frozenset({"producer", "consumer", "admin"})
_P = frozenset({"producer"})
_C = frozenset({"consumer"})

PROPERTIES: Final[tuple[Prop, ...]] = (
    Prop("bootstrap.servers", _text, None, _ALL),
    Prop("client.id", _text, "odradek-python", _ALL),
    Prop("request.timeout.ms", _int(1), 30_000, _ALL),
    Prop("retry.backoff.ms", _int(0), 100, _ALL),
    Prop("retry.backoff.max.ms", _int(0), 1_000, _ALL),
    Prop("metadata.max.age.ms", _int(0), 300_000, _ALL),
    Prop("socket.timeout.ms", _int(1), 60_000, _ALL),
    Prop("security.protocol", _protocol, "PLAINTEXT", _ALL),
    # TLS (client/_core/tls.py): librdkafka's names; ssl.context is aiokafka's ssl_context
    Prop("ssl.ca.location", _text, None, _ALL),
    Prop("ssl.certificate.location", _text, None, _ALL),
    Prop("ssl.key.location", _text, None, _ALL),
    Prop("ssl.key.password", _text, None, _ALL),
    Prop("enable.ssl.certificate.verification", _bool, True, _ALL),
    Prop("ssl.endpoint.identification.algorithm", _choice("https", "none"), "https", _ALL),
    Prop("ssl.context", _any, None, _ALL),
    # SASL (client/_core/sasl.py)
    Prop(
        "sasl.mechanism",
        _choice("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"),
        "PLAIN",
        _ALL,
    ),
    Prop("sasl.username", _text, None, _ALL),
    Prop("sasl.password", _text, None, _ALL),
    # OAUTHBEARER's token (client/_core/oauth.py): librdkafka's and confluent-kafka's
    # names; sasl.oauth.token.provider is aiokafka's sasl_oauth_token_provider
    Prop("sasl.oauthbearer.config", _any, "", _ALL),
    Prop("enable.sasl.oauthbearer.unsecure.jwt", _bool, False, _ALL),
    Prop("oauth_cb", _any, None, _ALL),
    Prop("sasl.oauth.token.provider", _any, None, _ALL),
    Prop("error_cb", _any, None, _ALL),
    Prop("logger", _any, None, _ALL),
    # producer
    Prop("acks", _acks, -1, _P),
    Prop("linger.ms", _int(0), 5, _P),
    Prop("batch.size", _int(1), 16_384, _P),
    Prop("batch.num.messages", _int(1), 10_000, _P),
    Prop("buffer.memory", _int(1), 33_554_432, _P),
    Prop("max.block.ms", _int(0), 60_000, _P),
    Prop("compression.type", _choice("none", "gzip", "snappy", "lz4", "zstd"), "none", _P),
    Prop("enable.idempotence", _bool, True, _P),
    Prop("delivery.timeout.ms", _int(1), 120_000, _P),
    Prop("retries", _int(0, 2**31 - 1), 2**31 - 1, _P),
    Prop("max.in.flight.requests.per.connection", _int(1, 5), 5, _P),
    Prop("max.request.size", _int(1), 1_048_576, _P),
    Prop("partitioner", _any, "consistent_random", _P),  # librdkafka's default
    Prop("transactional.id", _any, None, _P),
    Prop("transaction.timeout.ms", _int(1, 2**31 - 1), 60_000, _P),
    Prop("on_delivery", _any, None, _P),
    # consumer
    Prop("group.id", _any, None, _C),
    Prop("group.instance.id", _any, None, _C),
    Prop(
        "auto.offset.reset",
        _choice("earliest", "latest", "none", "smallest", "largest", "error"),
        "latest",
        _C,
    ),
    Prop("enable.auto.commit", _bool, True, _C),
    Prop("enable.auto.offset.store", _bool, True, _C),
    Prop("auto.commit.interval.ms", _int(0), 5_000, _C),
    Prop("session.timeout.ms", _int(1), 45_000, _C),
    Prop("heartbeat.interval.ms", _int(1), 3_000, _C),
    Prop("max.poll.interval.ms", _int(1), 300_000, _C),
    Prop("fetch.min.bytes", _int(1), 1, _C),
    Prop("fetch.max.bytes", _int(1), 52_428_800, _C),
    Prop("fetch.max.wait.ms", _int(0), 500, _C),
    Prop("max.partition.fetch.bytes", _int(1), 1_048_576, _C),
    Prop("isolation.level", _choice("read_uncommitted", "read_committed"), "read_uncommitted", _C),
    Prop("partition.assignment.strategy", _text, "range,roundrobin", _C),
    Prop("group.protocol", _choice("classic"), "classic", _C),
    Prop("check.crcs", _bool, False, _C),
    Prop("on_commit", _any, None, _C),
    # librdkafka settings honoured under their own name
    Prop("queue.buffering.max.messages", _int(1, 2**31 - 1), None, _P),
    Prop("sticky.partitioning.linger.ms", _int(0, 900_000), 10, _P),
    # accepted no-ops (documented above)
    Prop("debug", _any, "", _ALL, "odradek logs through logging"),
    Prop("statistics.interval.ms", _int(0), 0, _ALL, "no statistics are emitted yet"),
    Prop("stats_cb", _any, None, _ALL, "no statistics are emitted yet"),
    Prop("socket.keepalive.enable", _bool, False, _ALL, "no TCP keepalive is set"),
    Prop("api.version.request", _bool, True, _ALL, "versions are always negotiated"),
    Prop("log_level", _any, 6, _ALL, "odradek logs through logging"),
    Prop("log.connection.close", _bool, True, _ALL, "odradek logs through logging"),
    Prop(
        "broker.address.family",
        _choice("any", "v4", "v6"),
        "any",
        _ALL,
        "addresses are used as the resolver returns them",
    ),
    Prop("reconnect.backoff.ms", _int(0), 100, _ALL, "reconnects back off by retry.backoff.ms"),
    Prop(
        "reconnect.backoff.max.ms",
        _int(0),
        10_000,
        _ALL,
        "reconnects back off by retry.backoff.max.ms",
    ),
    Prop(
        "message.max.bytes",
        _int(1000, 1_000_000_000),
        1_000_000,
        frozenset({"consumer", "admin"}),
        "fetch sizes are fetch.max.bytes / max.partition.fetch.bytes",
    ),
)
_BY_NAME: Final = {p.name: p for p in PROPERTIES}
# librdkafka's name -> the property it sets, per role
ALIASES: Final[dict[str, tuple[str, frozenset[str]]]] = {
    "queue.buffering.max.ms": ("linger.ms", _P),
    "message.timeout.ms": ("delivery.timeout.ms", _P),
    "message.max.bytes": ("max.request.size", _P),
    "compression.codec": ("compression.type", _P),
    "queue.buffering.max.kbytes": ("buffer.memory", _P),  # KiB: scaled by _SCALE
    "topic.metadata.refresh.interval.ms": ("metadata.max.age.ms", _ALL),
    "sasl.mechanisms": ("sasl.mechanism", _ALL),  # librdkafka's name
}
_SCALE: Final = {"queue.buffering.max.kbytes": 1024}
NO_OPS: Final = {p.name: p.note for p in PROPERTIES if p.note}


def _check_sasl(values: dict[str, Any]) -> None:
    """A SASL protocol needs sasl.username and sasl.password (PLAIN and SCRAM)."""
    if values.get("security.protocol") not in SASL_PROTOCOLS:
        return
    if values.get("sasl.mechanism") == "OAUTHBEARER":
        return  # its token source is checked by client/_core/oauth.py token_source
    for key in ("sasl.username", "sasl.password"):
        if not values.get(key):
            raise ConfigError(key, f"required with security.protocol={values['security.protocol']}")


class ClientConfig:
    """Validated properties of one client; ``config["linger.ms"]`` reads a value."""

    def __init__(self, properties: Mapping[str, Any], role: str) -> None:
        assert role in _ALL
        self.role = role
        self.values: dict[str, Any] = {p.name: p.default for p in PROPERTIES if role in p.roles}
        explicit = set(properties)
        for key, raw in properties.items():
            alias = ALIASES.get(key)
            if alias is not None and role in alias[1]:
                target = _BY_NAME[alias[0]]
                scale = _SCALE.get(key, 1)
                self.values[target.name] = target.parse(
                    key, raw if scale == 1 else _int(1)(key, raw) * scale
                )
                explicit.add(target.name)
                continue
            prop = _BY_NAME.get(key)
            if prop is None or role not in prop.roles:
                raise ConfigError(key, f"unknown {role} configuration property")
            self.values[key] = prop.parse(key, raw)
        if not self.values.get("bootstrap.servers"):
            raise ConfigError("bootstrap.servers", "required")
        if role == "consumer":  # as librdkafka requires
            poll_ms = self.values["max.poll.interval.ms"]
            session_ms = self.values["session.timeout.ms"]
            if poll_ms < session_ms:
                message = f"{poll_ms} must be >= session.timeout.ms ({session_ms})"
                raise ConfigError("max.poll.interval.ms", message)
        self.explicit = frozenset(explicit)
        try:
            self.ssl_context = client_ssl_context(self.values)
        except TlsSettingsError as error:
            raise ConfigError(error.key, str(error)) from None
        _check_sasl(self.values)
        self.oauth_tokens: TokenSource | None = None  # OAUTHBEARER's (client/_core/oauth.py)
        if (
            self.values.get("security.protocol") in SASL_PROTOCOLS
            and self.values.get("sasl.mechanism") == "OAUTHBEARER"
        ):
            from odradek.client._core.oauth import OAuthTokenError, token_source

            try:
                self.oauth_tokens = token_source(self)
            except OAuthTokenError as error:
                key, _, rest = str(error).partition(": ")
                if key != "sasl.oauthbearer.config":
                    key, rest = "sasl.mechanism", str(error)
                raise ConfigError(key, rest) from None
        if self.values.get("stats_cb") is not None and self.values["statistics.interval.ms"] > 0:
            global _warned_stats
            if not _warned_stats:
                _warned_stats = True
                logger.warning("stats_cb: odradek emits no statistics yet; it is never called")

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)
