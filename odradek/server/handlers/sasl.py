"""SaslHandshake (key 17) and SaslAuthenticate (key 36): SASL on a SASL listener, and
the gate that keeps every other request out until it succeeded.

How this works and why: Kafka's clients authenticate as KIP-152 describes:
ApiVersions, then SaslHandshake v1 naming a mechanism, then SaslAuthenticate frames
each carrying one token of the mechanism's exchange. The exchange itself is a sans-IO
state machine (security/sasl_server.py: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) kept in
the connection's ``session.state``; success sets ``session.principal`` to
``User:<name>`` and ``session.authenticated``. SCRAM's stored credentials are read
from this node's current metadata image at the exchange's first token, so a
credential added through the controller is usable as soon as the image has it;
until the image holds anything committed, from the node's ``storage format
--add-scram`` bootstrap file, so nodes can log in to each other's SASL controller
listeners with SCRAM while the quorum that commits those credentials forms.

``admit`` is the gate the Dispatcher runs before decoding: while a SASL connection is
not authenticated only ApiVersions, SaslHandshake and SaslAuthenticate pass; any
other request closes the connection (Kafka's "Unexpected Kafka request ... during
SASL handshake"), as does any request but these three once the session's lifetime
(``connections.max.reauth.ms``, KIP-368) has passed without re-authentication.
Re-authentication is a new SaslHandshake + SaslAuthenticate on the authenticated
connection; it must use the same mechanism and end in the same principal, as Kafka
requires.

Failures: SaslAuthenticate answers SASL_AUTHENTICATION_FAILED with one generic
message (never whether the user exists), after ``connection.failed.authentication.
delay.ms`` (an ``asyncio.sleep`` in this connection's own task, so no other
connection waits), then the connection is closed; the broker logs the peer, the
mechanism and the real reason, rate-limited per address.

Not supported: the pre-KIP-152 flow (SaslHandshake v0 followed by raw, unframed
tokens). A v0 handshake is answered UNSUPPORTED_VERSION with the mechanisms, a log
line says why, and the connection is closed. Every Kafka client of the last years
(Java 1.0+, librdkafka 1.0+, kafka-python, aiokafka) sends v1.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from odradek.network.connection import Response
from odradek.network.warn_limit import PeerWarnings
from odradek.protocol.build import error_code, make, response_module
from odradek.protocol.messages import API_VERSIONS_KEY, Request, encode_response
from odradek.protocol.session import Session, uses_sasl
from odradek.security.oauthbearer import token_key_id
from odradek.security.sasl_server import (
    CLIENT_MESSAGE,
    OAUTHBEARER,
    AuthenticationFailed,
    ServerMechanism,
    server_mechanism,
)
from odradek.security.scram import ScramCredential
from odradek.server.handlers import BOTH_PLANES, handles
from odradek.server.sasl_settings import ListenerSasl, bootstrap_scram, listener_sasl

if TYPE_CHECKING:
    from odradek.server.services import AdminServices

logger = logging.getLogger(__name__)

SASL_HANDSHAKE_KEY: Final = 17
SASL_AUTHENTICATE_KEY: Final = 36
PRE_AUTH_KEYS: Final = frozenset({API_VERSIONS_KEY, SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY})
STATE_KEY: Final = "sasl"

# Rate-limited per peer address, each kind apart.
_unexpected = PeerWarnings(logger, "unexpected-request-during-SASL lines")
_failures = PeerWarnings(logger, "failed-authentication lines")
_v0 = PeerWarnings(logger, "SaslHandshake v0 lines")
_mechanisms = PeerWarnings(logger, "refused-SASL-mechanism lines")


@dataclass(slots=True)
class SaslState:
    """One connection's SASL progress (in ``session.state["sasl"]``)."""

    mechanism_name: str | None = None
    mechanism: ServerMechanism | None = None  # the exchange in flight, if any
    expires_at: float | None = None  # monotonic; past it only re-authentication passes
    authenticated_once: bool = False


def _state(session: Session) -> SaslState:
    state = session.state.get(STATE_KEY)
    if not isinstance(state, SaslState):
        state = session.state[STATE_KEY] = SaslState()
    return state


def admit(session: Session, api_key: int, api_version: int) -> str | None:
    """None if the request may be served; else why the connection must be closed."""
    if api_key in PRE_AUTH_KEYS:
        return None
    if not session.authenticated:
        return (
            f"Unexpected Kafka request of type {api_key} v{api_version} during SASL "
            f"handshake on listener {session.listener}"
        )
    state = session.state.get(STATE_KEY)
    expires_at = state.expires_at if isinstance(state, SaslState) else None
    if expires_at is not None and time.monotonic() > expires_at:
        return (
            f"SASL session of {session.principal} expired "
            "(connections.max.reauth.ms) and was not re-authenticated"
        )
    return None


def warn_refused(session: Session, reason: str) -> None:
    _unexpected.warn(session.peer, "closing connection from %s: %s", session.peer, reason)


def _respond(request: Request, body: Any, *, close: bool = False) -> Response:
    header = request.header
    frame = encode_response(header.api_key, header.api_version, header.correlation_id, body)
    return Response([frame], close_after=close)


def _handshake_body(version: int, error: str, mechanisms: tuple[str, ...]) -> Any:
    module = response_module(SASL_HANDSHAKE_KEY, version)
    return make(module.SaslHandshakeResponse, error_code=error_code(error), mechanisms=mechanisms)


def _settings(services: AdminServices, session: Session) -> ListenerSasl:
    return listener_sasl(services.config.static, session.listener)


@handles(SASL_HANDSHAKE_KEY, 0, 1, plane=BOTH_PLANES)
async def sasl_handshake(services: AdminServices, request: Request) -> Any:
    session = request.session
    version = request.header.api_version
    requested = str(request.body.mechanism)
    if not uses_sasl(session.security_protocol):
        # Kafka: a handshake on a listener without SASL is not expected there.
        return _handshake_body(version, "ILLEGAL_SASL_STATE", ())
    settings = _settings(services, session)
    state = _state(session)
    if version == 0:
        _v0.warn(
            session.peer,
            "closing connection from %s: SaslHandshake v0 (raw SASL tokens without "
            "SaslAuthenticate, before KIP-152) is not supported; the client must send "
            "SaslHandshake v1 and SaslAuthenticate",
            session.peer,
        )
        return _respond(
            request, _handshake_body(0, "UNSUPPORTED_VERSION", settings.mechanisms), close=True
        )
    if state.mechanism is not None:
        # A second handshake before the exchange finished.
        return _respond(request, _handshake_body(version, "ILLEGAL_SASL_STATE", ()), close=True)
    name = requested.upper()
    if state.authenticated_once and name != state.mechanism_name:
        # KIP-368: re-authentication keeps the mechanism.
        assert state.mechanism_name is not None
        _mechanisms.warn(
            session.peer,
            "closing connection from %s: re-authentication with %s, not %s",
            session.peer,
            requested,
            state.mechanism_name,
        )
        body = _handshake_body(version, "UNSUPPORTED_SASL_MECHANISM", (state.mechanism_name,))
        return _respond(request, body, close=True)
    if name not in settings.mechanisms or requested != name:
        _mechanisms.warn(
            session.peer,
            "closing connection from %s: SASL mechanism %r is not enabled on listener %s "
            "(enabled: %s)",
            session.peer,
            requested,
            session.listener,
            ", ".join(settings.mechanisms),
        )
        body = _handshake_body(version, "UNSUPPORTED_SASL_MECHANISM", settings.mechanisms)
        return _respond(request, body, close=True)
    metadata, static = services.metadata, services.config.static

    def scram_lookup(user: str, mechanism: str) -> ScramCredential | None:
        # Read at the first token: the newest image. Before the image holds anything
        # committed, the credentials of this node's bootstrap file (a fresh cluster's
        # nodes log in to each other's controller listeners before the quorum has
        # committed them; sasl_settings.bootstrap_scram).
        image = metadata.image
        known = image.scram_credentials if image.offset >= 0 else bootstrap_scram(static)
        entry = known.get((user, mechanism))
        if entry is None:
            return None
        return ScramCredential(
            mechanism, entry.salt, entry.stored_key, entry.server_key, entry.iterations
        )

    state.mechanism_name = name
    state.mechanism = server_mechanism(
        name,
        plain_users=settings.plain_users,
        scram_lookup=scram_lookup,
        token_validator=settings.oauth.validate if settings.oauth is not None else None,
    )
    return _handshake_body(version, "NONE", settings.mechanisms)


def _authenticate_body(
    version: int, error: str, message: str | None, auth_bytes: bytes, lifetime_ms: int
) -> Any:
    module = response_module(SASL_AUTHENTICATE_KEY, version)
    return make(
        module.SaslAuthenticateResponse,
        error_code=error_code(error),
        error_message=message,
        auth_bytes=auth_bytes,
        session_lifetime=datetime.timedelta(milliseconds=lifetime_ms),
    )


async def _fail(
    request: Request, settings: ListenerSasl | None, mechanism: str, reason: str, message: str
) -> Response:
    session = request.session
    _failures.warn(
        session.peer,
        "failed authentication with %s on listener %s (mechanism %s): %s",
        session.peer,
        session.listener,
        mechanism,
        reason,
    )
    delay_ms = settings.failed_delay_ms if settings is not None else 0
    if delay_ms > 0:
        await asyncio.sleep(delay_ms / 1000)  # this connection's task only
    body = _authenticate_body(
        request.header.api_version, "SASL_AUTHENTICATION_FAILED", message, b"", 0
    )
    return _respond(request, body, close=True)


@handles(SASL_AUTHENTICATE_KEY, 0, 2, plane=BOTH_PLANES)
async def sasl_authenticate(services: AdminServices, request: Request) -> Any:
    session = request.session
    version = request.header.api_version
    state = _state(session)
    mechanism = state.mechanism
    if not uses_sasl(session.security_protocol) or mechanism is None:
        body = _authenticate_body(
            version,
            "ILLEGAL_SASL_STATE",
            "SaslAuthenticate is expected only after a successful SaslHandshake",
            b"",
            0,
        )
        return _respond(request, body, close=True)
    settings = _settings(services, session)
    token = bytes(request.body.auth_bytes)
    if len(token) > settings.max_receive_size:
        reason = f"a token of {len(token)} bytes exceeds sasl.server.max.receive.size"
        return await _fail(request, settings, mechanism.name, reason, CLIENT_MESSAGE)
    jwks = settings.oauth.jwks if settings.oauth is not None else None
    if mechanism.name == OAUTHBEARER and jwks is not None:
        kid = token_key_id(token)
        if kid is not None:  # fetched now if stale or unknown (rate-limited)
            await jwks.keys_for(kid)
    try:
        reply = mechanism.respond(token)
    except AuthenticationFailed as error:
        state.mechanism = None
        return await _fail(request, settings, mechanism.name, error.reason, CLIENT_MESSAGE)
    if not mechanism.complete:
        return _authenticate_body(version, "NONE", None, reply, 0)
    state.mechanism = None
    principal = f"User:{mechanism.username}"
    if state.authenticated_once and principal != session.principal:
        message = (
            f"Cannot change principals during re-authentication from {session.principal}: "
            f"{principal}"
        )
        return await _fail(request, settings, mechanism.name, message, message)
    session.principal = principal
    session.authenticated = True
    state.authenticated_once = True
    lifetime_ms = settings.reauth_ms.get(mechanism.name, 0)
    expires_at_s = getattr(mechanism, "expires_at_s", None)
    if lifetime_ms > 0 and expires_at_s is not None:
        # KIP-368: no longer than the credential (the OAUTHBEARER token's exp) lasts
        lifetime_ms = max(1, min(lifetime_ms, int((expires_at_s - time.time()) * 1000)))
    # KIP-368: the session ends after connections.max.reauth.ms whatever the client's
    # version; v1+ clients are told, so they can re-authenticate in time.
    state.expires_at = time.monotonic() + lifetime_ms / 1000 if lifetime_ms > 0 else None
    return _authenticate_body(version, "NONE", None, reply, lifetime_ms)
