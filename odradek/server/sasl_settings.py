"""A SASL listener's settings, resolved from Kafka's broker properties.

How this works and why: Kafka lets most SASL properties be given broker-wide or per
listener, and some per listener and mechanism:
``listener.name.<listener>.<mechanism>.sasl.jaas.config`` (the form Kafka documents
for brokers, the listener name lower-cased) before
``listener.name.<listener>.sasl.jaas.config`` before ``sasl.jaas.config``; the same
for ``connections.max.reauth.ms``; ``listener.name.<listener>.sasl.enabled.mechanisms``
before ``sasl.enabled.mechanisms``. ``listener_sasl`` resolves them once per config
and listener (cached), and raises ``ConfigError`` for what cannot work, so a bad
setup fails at startup (``BrokerConfig._check_protocols`` calls it) with one line.

Kafka's default mechanism is GSSAPI (Kerberos), which odradek does not implement: a
SASL listener with only GSSAPI enabled is refused; GSSAPI beside implemented ones is
dropped with a warning. OAUTHBEARER's validator (unsecured tokens, or signed ones
checked against a JWKS) comes from server/oauth_settings.py.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from odradek.client._core.sasl import SaslCredentials
from odradek.security.jaas import (
    PLAIN_LOGIN_MODULE,
    SCRAM_LOGIN_MODULE,
    JaasError,
    parse_broker_jaas,
)
from odradek.security.sasl_server import (
    OAUTHBEARER,
    PLAIN,
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    SUPPORTED_MECHANISMS,
)
from odradek.server.config import ConfigError
from odradek.server.oauth_settings import OAuthValidator, oauth_validator

if TYPE_CHECKING:
    from odradek.metadata.image import ScramEntry
    from odradek.server.config import BrokerConfig

logger = logging.getLogger(__name__)
# Kafka's mechanisms that odradek does not implement (refused alone, dropped beside others).
KNOWN_UNIMPLEMENTED = {"GSSAPI": "GSSAPI (Kerberos)"}


@dataclass(frozen=True, slots=True)
class ListenerSasl:
    listener: str
    mechanisms: tuple[str, ...]  # enabled and implemented, in the configured order
    plain_users: Mapping[str, str]  # PLAIN's user_<name> options (empty without PLAIN)
    reauth_ms: Mapping[str, int]  # connections.max.reauth.ms per mechanism (0: off)
    failed_delay_ms: int  # connection.failed.authentication.delay.ms
    max_receive_size: int  # sasl.server.max.receive.size
    oauth: OAuthValidator | None = None  # OAUTHBEARER's token validator, when enabled


def _prefixes(listener: str, mechanism: str | None) -> list[str]:
    """The property name prefixes to try, most specific first (Kafka lower-cases the
    listener name in them; the configured case is accepted too)."""
    names = dict.fromkeys((listener.lower(), listener))
    out = []
    for name in names:
        if mechanism is not None:
            out.append(f"listener.name.{name}.{mechanism.lower()}.")
    out.extend(f"listener.name.{name}." for name in names)
    return out


def _raw(config: BrokerConfig, listener: str, mechanism: str | None, key: str) -> str | None:
    for prefix in _prefixes(listener, mechanism):
        value = config.original.get(prefix + key)
        if value is not None:
            return value
    return None


def _int_setting(config: BrokerConfig, listener: str, mechanism: str | None, key: str) -> int:
    raw = _raw(config, listener, mechanism, key)
    if raw is None:
        return int(config[key])
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigError(key, f"expected an integer, got {raw!r}") from None
    if value < 0:
        raise ConfigError(key, f"{value} must not be negative")
    return value


def _mechanisms(config: BrokerConfig, listener: str) -> tuple[str, ...]:
    raw = _raw(config, listener, None, "sasl.enabled.mechanisms")
    key = "sasl.enabled.mechanisms"
    names = (
        tuple(part.strip() for part in raw.split(",") if part.strip())
        if raw is not None
        else tuple(config[key] or ())
    )
    enabled: list[str] = []
    dropped: list[str] = []
    for name in names:
        upper = name.upper()
        if upper in SUPPORTED_MECHANISMS:
            if upper not in enabled:
                enabled.append(upper)
        elif upper in KNOWN_UNIMPLEMENTED:
            dropped.append(upper)
        else:
            raise ConfigError(
                key,
                f"listener {listener}: unknown SASL mechanism {name!r} "
                f"(implemented: {', '.join(SUPPORTED_MECHANISMS)})",
            )
    if not enabled:
        what = ", ".join(KNOWN_UNIMPLEMENTED.get(n, n) for n in dropped) or "nothing"
        raise ConfigError(
            key,
            f"listener {listener} enables {what}: {what} is not implemented; enable "
            f"{', '.join(SUPPORTED_MECHANISMS)}",
        )
    for name in dropped:
        logger.warning(
            "listener %s: SASL mechanism %s is not implemented; it is not offered",
            listener,
            KNOWN_UNIMPLEMENTED[name],
        )
    return tuple(enabled)


def _plain_users(config: BrokerConfig, listener: str) -> dict[str, str]:
    key = "sasl.jaas.config"
    raw = _raw(config, listener, PLAIN, key) or config[key]
    if not raw:
        raise ConfigError(
            key,
            f"listener {listener} enables PLAIN but has no JAAS config "
            f"(listener.name.{listener.lower()}.plain.sasl.jaas.config)",
        )
    try:
        entry = parse_broker_jaas(raw)
    except JaasError as error:
        raise ConfigError(key, f"listener {listener}: {error}") from None
    if entry.login_module != PLAIN_LOGIN_MODULE:
        raise ConfigError(
            key,
            f"listener {listener}: PLAIN needs {PLAIN_LOGIN_MODULE}, got {entry.login_module}",
        )
    return entry.plain_users()


@functools.lru_cache(maxsize=64)
def listener_sasl(config: BrokerConfig, listener: str) -> ListenerSasl:
    """The SASL settings of ``listener``; ConfigError for a setup that cannot work."""
    mechanisms = _mechanisms(config, listener)
    users = _plain_users(config, listener) if PLAIN in mechanisms else {}
    for name in mechanisms:  # a SCRAM JAAS entry (inter-broker credentials) must parse
        raw = _raw(config, listener, name, "sasl.jaas.config")
        if raw and name != PLAIN:
            try:
                parse_broker_jaas(raw)
            except JaasError as error:
                raise ConfigError("sasl.jaas.config", f"listener {listener}: {error}") from None
    reauth = {
        name: _int_setting(config, listener, name, "connections.max.reauth.ms")
        for name in mechanisms
    }
    oauth = None
    if OAUTHBEARER in mechanisms:

        def oauth_raw(key: str) -> str | None:
            # Only the mechanism's own JAAS entry: another's (PLAIN's) is not for it.
            if key == "sasl.jaas.config":
                return next(
                    (
                        config.original[prefix + key]
                        for prefix in _prefixes(listener, OAUTHBEARER)
                        if prefix.endswith(".oauthbearer.") and prefix + key in config.original
                    ),
                    None,
                )
            value = _raw(config, listener, OAUTHBEARER, key)
            return value if value is not None else config[key]

        oauth = oauth_validator(config, listener, oauth_raw)
    return ListenerSasl(
        listener,
        mechanisms,
        users,
        reauth,
        int(config["connection.failed.authentication.delay.ms"]),
        _int_setting(config, listener, None, "sasl.server.max.receive.size"),
        oauth,
    )


# -- this node's own clients (replica fetchers, the controller and raft clients, ...) --
# Kafka's rule: on a SASL inter-broker or controller listener the broker logs in with
# sasl.mechanism.inter.broker.protocol / sasl.mechanism.controller.protocol, and for
# PLAIN and SCRAM its credentials are the username/password options of that
# listener's JAAS entry for the mechanism (the same entry that lists PLAIN's users).
PEER_MECHANISMS: Final = (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512)
_LOGIN_MODULES: Final = {
    PLAIN: PLAIN_LOGIN_MODULE,
    SCRAM_SHA_256: SCRAM_LOGIN_MODULE,
    SCRAM_SHA_512: SCRAM_LOGIN_MODULE,
}


def peer_credentials(config: BrokerConfig, listener: str, mechanism_key: str) -> SaslCredentials:
    """How this node's own clients log in to the SASL listener ``listener``;
    ``mechanism_key`` names the property choosing the mechanism. ConfigError (one
    line, never a password) for a setup that cannot log in."""
    mechanism = str(config[mechanism_key] or "").strip().upper()
    if mechanism not in PEER_MECHANISMS:
        what = KNOWN_UNIMPLEMENTED.get(mechanism, repr(mechanism))
        raise ConfigError(
            mechanism_key,
            f"listener {listener} uses SASL: this node's own clients would log in with "
            f"{what}, which they cannot; set {mechanism_key} to one of "
            f"{', '.join(PEER_MECHANISMS)}",
        )
    if any(li.name == listener for li in config.values["listeners"]):
        enabled = listener_sasl(config, listener).mechanisms
        if mechanism not in enabled:
            raise ConfigError(
                mechanism_key,
                f"{mechanism} is not enabled on listener {listener} (sasl.enabled.mechanisms: "
                f"{', '.join(enabled)})",
            )
    key = "sasl.jaas.config"
    where = f"listener.name.{listener.lower()}.{mechanism.lower()}.{key}"
    raw = _raw(config, listener, mechanism, key) or config[key]
    if not raw:
        raise ConfigError(
            key,
            f"listener {listener}: this node logs in to it with {mechanism} but {where} is "
            "not set (it needs username= and password= options)",
        )
    try:
        entry = parse_broker_jaas(raw)
    except JaasError as error:
        raise ConfigError(key, f"listener {listener}: {error}") from None
    module = _LOGIN_MODULES[mechanism]
    if entry.login_module != module:
        raise ConfigError(
            key, f"listener {listener}: {mechanism} needs {module}, got {entry.login_module}"
        )
    missing = [name for name in ("username", "password") if not entry.options.get(name)]
    if missing:
        raise ConfigError(
            key,
            f"listener {listener}: {where} has no {' and no '.join(missing)} option: this "
            f"node's own clients log in to {listener} with them",
        )
    return SaslCredentials(mechanism, entry.options["username"], entry.options["password"])


@functools.lru_cache(maxsize=8)
def bootstrap_scram(config: BrokerConfig) -> Mapping[tuple[str, str], ScramEntry]:
    """The SCRAM credentials ``storage format --add-scram`` left in this node's
    bootstrap file (metadata/bootstrap.py).

    Why: the credentials live in the metadata log, and the metadata log needs a quorum
    that, with SCRAM on the controller listener, needs the credentials. Until this
    node's image holds its first committed batch (the bootstrap batch itself, on a
    freshly formatted cluster) the SASL handler checks logins against these; once
    anything is committed only the image counts, so a credential changed or deleted
    later stays so. A file that cannot be read gives none here: the controller's own
    start-up reports it (broker_quorum.py)."""
    from odradek.metadata.bootstrap import BootstrapError, read_bootstrap
    from odradek.metadata.image import MetadataImage

    try:
        records = read_bootstrap(config.metadata_log_dir)
    except BootstrapError:
        return {}
    wanted = [record for record in records if record.kind == "UserScramCredential"]
    return MetadataImage().apply(wanted, 0).scram_credentials if wanted else {}
