"""SASL/OAUTHBEARER (RFC 7628, KIP-255) on the broker: the exchange, without I/O.

How this works and why: the client's first (and normally only) message is a GS2
header and ``\\x01``-separated key=value pairs, ``n,,\\x01auth=Bearer <token>\\x01\\x01``
(KIP-342 lets a client add SASL extensions as further pairs). The broker validates the
token — unsecured (``alg: none``) with Kafka's unsecured validator, or signed against
the identity provider's JWKS (security/jwt.py) — and on success the principal is the
token's ``sub`` (or the configured claim) and the session may last until the token's
``exp`` (KIP-368 caps SaslAuthenticate's session lifetime by it). On failure RFC 7628
has the server send a JSON error (``{"status":"invalid_token"}``) as a challenge, the
client answer it with a lone ``\\x01``, and the server then fail the exchange: Kafka
does the same, and so does this state machine. What was wrong with the token goes to
the broker's log only (``failure_reason``); the client learns just that it failed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

from odradek.security.jwt import TokenError, ValidToken

MECHANISM: Final = "OAUTHBEARER"
_KEY: Final = re.compile(r"[A-Za-z]+")
_BEARER: Final = re.compile(r"[Bb][Ee][Aa][Rr][Ee][Rr] +([A-Za-z0-9\-._~+/]+=*)")


class OAuthBearerFailed(Exception):
    """The exchange failed; ``str()`` is for the broker's log, not the client."""


@dataclass(frozen=True, slots=True)
class ClientFirst:
    token: str
    authzid: str | None
    extensions: Mapping[str, str] = field(default_factory=dict)


def parse_client_first(message: bytes) -> ClientFirst:
    """RFC 7628's initial client response; OAuthBearerFailed if it is not one."""
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError:
        raise OAuthBearerFailed("client message is not UTF-8") from None
    gs2, sep, rest = text.partition("\x01")
    # after the GS2 header's \x01: key=value pairs, each ending in \x01, then one more
    body = rest[:-1]
    if not sep or not rest.endswith("\x01") or (body and not body.endswith("\x01")):
        raise OAuthBearerFailed("client message's key=value pairs are not \\x01-terminated")
    parts = gs2.split(",")
    if len(parts) != 3 or parts[0] not in ("n", "y") or parts[2] != "":
        raise OAuthBearerFailed(f"bad GS2 header {gs2!r}")
    authzid = None
    if parts[1]:
        if not parts[1].startswith("a="):
            raise OAuthBearerFailed(f"bad GS2 authzid {parts[1]!r}")
        authzid = parts[1][2:]
    pairs: dict[str, str] = {}
    for item in body.split("\x01")[:-1]:
        key, eq, value = item.partition("=")
        if not eq or not _KEY.fullmatch(key):
            raise OAuthBearerFailed(f"bad key=value pair {item[:40]!r}")
        if key in pairs:
            raise OAuthBearerFailed(f"key {key!r} given twice")
        pairs[key] = value
    auth = pairs.pop("auth", None)
    if auth is None:
        raise OAuthBearerFailed("client message has no auth=Bearer <token>")
    match = _BEARER.fullmatch(auth)
    if match is None:
        raise OAuthBearerFailed("auth value is not 'Bearer <token>'")
    return ClientFirst(match.group(1), authzid, pairs)


TokenValidator = Callable[[str], ValidToken]  # raises TokenError


class OAuthBearerServer:
    """One connection's OAUTHBEARER exchange.

    ``respond(message)`` returns the bytes to send back; ``complete`` turns True after
    a valid token, with ``principal`` and ``expires_at_s`` set. Any failure raises
    OAuthBearerFailed — either at once (a malformed message) or, after a bad token,
    on the client's ``\\x01`` acknowledging the error challenge.
    """

    def __init__(self, validate: TokenValidator) -> None:
        self._validate = validate
        self._failed: str | None = None  # why, once the error challenge is out
        self.complete = False
        self.principal: str | None = None
        self.expires_at_s: float | None = None
        self.extensions: Mapping[str, str] = {}

    def respond(self, message: bytes) -> bytes:
        if self.complete:
            raise OAuthBearerFailed("exchange already complete")
        if self._failed is not None:
            if message != b"\x01":
                raise OAuthBearerFailed(f"{self._failed}; then no \\x01 after the error")
            raise OAuthBearerFailed(self._failed)
        first = parse_client_first(message)
        try:
            token = self._validate(first.token)
        except TokenError as error:
            self._failed = f"invalid token: {error}"
            return json.dumps({"status": "invalid_token"}).encode()
        if first.authzid is not None and first.authzid != token.principal:
            raise OAuthBearerFailed(
                f"authorization id {first.authzid!r} is not the token's principal"
            )
        self.complete = True
        self.principal = token.principal
        self.expires_at_s = token.expires_at_s
        self.extensions = first.extensions
        return b""


class OAuthBearerMechanism:
    """The SASL layer's face of the exchange (security/sasl_server.py's
    ``ServerMechanism``): OAuthBearerFailed becomes AuthenticationFailed."""

    name = MECHANISM

    def __init__(self, validate: TokenValidator) -> None:
        self._server = OAuthBearerServer(validate)
        self.complete = False
        self.username: str | None = None
        self.expires_at_s: float | None = None

    def respond(self, token: bytes) -> bytes:
        from odradek.security.sasl_server import AuthenticationFailed

        try:
            reply = self._server.respond(token)
        except OAuthBearerFailed as error:
            raise AuthenticationFailed(f"OAUTHBEARER: {error}") from None
        if self._server.complete:
            self.complete = True
            self.username = self._server.principal
            self.expires_at_s = self._server.expires_at_s
        return reply


def token_key_id(message: bytes) -> str | None:
    """The ``kid`` a client's first message's token names (None if it names none or
    the message does not parse: the exchange itself will say why)."""
    from odradek.security.jwt import decode_jws

    try:
        kid = decode_jws(parse_client_first(message).token).header.get("kid", "")
    except (OAuthBearerFailed, TokenError):
        return None
    return str(kid)
