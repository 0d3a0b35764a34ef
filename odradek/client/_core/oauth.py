"""The client's side of SASL/OAUTHBEARER (RFC 7628, KIP-255, KIP-342): where its
tokens come from, and the exchange.

How this works and why: the client sends one message, a GS2 header and
``\\x01``-separated pairs, ``n,,\\x01auth=Bearer <token>\\x01[<key>=<value>\\x01...]\\x01``
(the extra pairs are KIP-342's SASL extensions). A broker that takes the token answers
with an empty challenge and the exchange is over; one that does not sends RFC 7628's
JSON error as a challenge, the client answers with a lone ``\\x01``, and the broker
fails the exchange (``OAuthBearerClient.next_token``). The broker's session lifetime is
capped by the token's ``exp``, so KIP-368's re-authentication (connection.py) comes
back here before the token runs out and asks its source for a fresh one.

The token comes from one of three places, the faces of the clients odradek mirrors:

- ``UnsecuredJwt``: librdkafka's ``enable.sasl.oauthbearer.unsecure.jwt=true`` with
  ``sasl.oauthbearer.config`` (``principal=alice scope=a,b lifeSeconds=600
  principalClaimName=sub scopeClaimName=scope extension_<name>=<value>``): an
  ``alg: none`` token the client makes itself, for development against Kafka's
  unsecured validator.
- ``CallbackTokens``: confluent-kafka's ``oauth_cb(sasl.oauthbearer.config)``, returning
  ``(token, expiry seconds since the epoch)`` or also ``(..., principal, extensions)``.
  It is called on a worker thread (it may fetch from an identity provider) and its
  token reused until 80% of its lifetime has passed, as librdkafka refreshes.
- ``ProviderTokens``: aiokafka's ``sasl_oauth_token_provider``, whose ``token()``
  (async, or plain as kafka-python's) is asked at every login, its ``extensions()``
  (if it has one) sent as KIP-342 extensions, as aiokafka does.

A source that fails, or returns something that is not a token, makes the login fail
with ``SaslAuthenticationError`` naming the reason.
"""

from __future__ import annotations

import asyncio
import inspect
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

MECHANISM: Final = "OAUTHBEARER"
DEFAULT_LIFE_S: Final = 3600
REFRESH_AT: Final = 0.8  # librdkafka refreshes a token at 80% of its lifetime
_EXTENSION_KEY: Final = re.compile(r"[A-Za-z]+")
_EXTENSION_VALUE: Final = re.compile(r"[\x21-\x7E \t\r\n]*")
_TOKEN: Final = re.compile(r"[A-Za-z0-9\-._~+/]+=*")


class OAuthTokenError(ValueError):
    """Bad ``sasl.oauthbearer.config`` or a token source's bad answer (one line)."""


@dataclass(frozen=True, slots=True)
class OAuthToken:
    value: str
    expires_at_s: float | None = None  # seconds since the epoch, when known
    extensions: Mapping[str, str] = field(default_factory=dict)


def _check_extensions(extensions: Mapping[str, str]) -> dict[str, str]:
    """KIP-342's rules: names of letters only, never ``auth``; printable values."""
    checked: dict[str, str] = {}
    for key, value in extensions.items():
        if not isinstance(key, str) or not _EXTENSION_KEY.fullmatch(key) or key == "auth":
            raise OAuthTokenError(f"SASL extension name {key!r} is not allowed (letters, not auth)")
        if not isinstance(value, str) or not _EXTENSION_VALUE.fullmatch(value):
            raise OAuthTokenError(f"SASL extension {key!r} has a value that is not printable")
        checked[key] = value
    return checked


def client_first_message(token: OAuthToken) -> bytes:
    """RFC 7628's initial client response for ``token``."""
    if not _TOKEN.fullmatch(token.value):
        raise OAuthTokenError("the OAUTHBEARER token is not a bearer token (RFC 6750 b64token)")
    pairs = [f"auth=Bearer {token.value}"]
    pairs += [f"{k}={v}" for k, v in _check_extensions(token.extensions).items()]
    return ("n,,\x01" + "".join(p + "\x01" for p in pairs) + "\x01").encode("utf-8")


class OAuthBearerClient:
    """The exchange: the token, then (only after a refusal) RFC 7628's ``\\x01``."""

    def __init__(self, token: OAuthToken) -> None:
        self.message = client_first_message(token)
        self.step = 0

    def next_token(self, server: bytes | None) -> bytes | None:
        step, self.step = self.step, self.step + 1
        if step == 0:
            return self.message
        if step == 1 and server:
            return b"\x01"  # the broker's error challenge: acknowledge; it then fails us
        return None


# -- token sources ---------------------------------------------------------------------


def parse_oauthbearer_config(text: str) -> dict[str, str]:
    """librdkafka's ``sasl.oauthbearer.config``: space-separated ``name=value`` pairs."""
    pairs: dict[str, str] = {}
    for item in (text or "").split():
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise OAuthTokenError(f"sasl.oauthbearer.config: {item!r} is not name=value")
        if name in pairs:
            raise OAuthTokenError(f"sasl.oauthbearer.config: {name} given twice")
        pairs[name] = value
    return pairs


class UnsecuredJwt:
    """librdkafka's builtin unsecured token maker (``alg: none``)."""

    _NAMES: Final = ("principal", "principalClaimName", "scope", "scopeClaimName", "lifeSeconds")

    def __init__(self, config_text: str, clock: Callable[[], float] = time.time) -> None:
        pairs = parse_oauthbearer_config(config_text)
        extensions = {
            k[len("extension_") :]: v for k, v in pairs.items() if k.startswith("extension_")
        }
        unknown = [k for k in pairs if k not in self._NAMES and not k.startswith("extension_")]
        if unknown:
            raise OAuthTokenError(
                f"sasl.oauthbearer.config: unknown name {unknown[0]!r} (unsecured JWT takes "
                f"{', '.join(self._NAMES)}, extension_<name>)"
            )
        self.principal = pairs.get("principal", "")
        if not self.principal:
            raise OAuthTokenError("sasl.oauthbearer.config: the unsecured JWT needs principal=")
        self.principal_claim = pairs.get("principalClaimName", "sub") or "sub"
        self.scope_claim = pairs.get("scopeClaimName", "scope") or "scope"
        self.scopes = [s for s in pairs.get("scope", "").split(",") if s]
        life = pairs.get("lifeSeconds", str(DEFAULT_LIFE_S))
        if not life.isdigit() or int(life) < 1:
            raise OAuthTokenError(
                f"sasl.oauthbearer.config: lifeSeconds={life} is not a positive integer"
            )
        self.life_s = int(life)
        self.extensions = _check_extensions(extensions)
        self.clock = clock

    async def token(self) -> OAuthToken:
        from odradek.security.jwt import unsecured_token  # cryptography: only when used

        now = self.clock()
        claims: dict[str, Any] = {
            self.principal_claim: self.principal,
            "iat": round(now, 3),
            "exp": round(now + self.life_s, 3),
        }
        if self.scopes:
            claims[self.scope_claim] = self.scopes
        return OAuthToken(unsecured_token(claims), now + self.life_s, self.extensions)


class CallbackTokens:
    """confluent-kafka's ``oauth_cb``: called with ``sasl.oauthbearer.config``."""

    def __init__(
        self,
        callback: Callable[[str], Any],
        config_text: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.callback = callback
        self.config_text = config_text
        self.clock = clock
        self._cached: OAuthToken | None = None
        self._refresh_at = 0.0
        self._lock = asyncio.Lock()

    async def token(self) -> OAuthToken:
        async with self._lock:  # one call for the connections logging in at once
            if self._cached is not None and self.clock() < self._refresh_at:
                return self._cached
            try:
                answer = await asyncio.to_thread(self.callback, self.config_text)
            except Exception as error:
                raise OAuthTokenError(f"oauth_cb failed: {type(error).__name__}: {error}") from None
            token = self._shape(answer)
            now = self.clock()
            assert token.expires_at_s is not None
            self._cached = token
            self._refresh_at = now + max(0.0, token.expires_at_s - now) * REFRESH_AT
            return token

    @staticmethod
    def _shape(answer: Any) -> OAuthToken:
        if not isinstance(answer, tuple) or not 2 <= len(answer) <= 4:
            raise OAuthTokenError(
                "oauth_cb must return (token, expiry seconds since the epoch[, principal"
                f"[, extensions]]), not {type(answer).__name__}"
            )
        value, expiry = answer[0], answer[1]
        if not isinstance(value, str) or not value:
            raise OAuthTokenError("oauth_cb returned an empty or non-string token")
        if isinstance(expiry, bool) or not isinstance(expiry, int | float):
            raise OAuthTokenError("oauth_cb's expiry is not a number of seconds since the epoch")
        extensions = answer[3] if len(answer) == 4 and answer[3] is not None else {}
        if not isinstance(extensions, Mapping):
            raise OAuthTokenError("oauth_cb's extensions are not a dict")
        return OAuthToken(value, float(expiry), _check_extensions(extensions))


class ProviderTokens:
    """aiokafka's (and kafka-python's) ``sasl_oauth_token_provider``."""

    def __init__(self, provider: Any) -> None:
        if not callable(getattr(provider, "token", None)):
            raise OAuthTokenError("sasl_oauth_token_provider has no token() method")
        self.provider = provider

    async def token(self) -> OAuthToken:
        try:
            value = self.provider.token()
            if inspect.isawaitable(value):
                value = await value
            extensions = getattr(self.provider, "extensions", None)
            found = extensions() if callable(extensions) else {}
            if inspect.isawaitable(found):
                found = await found
        except Exception as error:
            raise OAuthTokenError(
                f"sasl_oauth_token_provider failed: {type(error).__name__}: {error}"
            ) from None
        if not isinstance(value, str) or not value:
            raise OAuthTokenError("sasl_oauth_token_provider.token() returned no string token")
        return OAuthToken(value, None, _check_extensions(found or {}))


TokenSource = UnsecuredJwt | CallbackTokens | ProviderTokens


def token_source(config: Any) -> TokenSource:
    """The token source a ``ClientConfig`` asks for (OAuthTokenError: none fits).

    Precedence as in the clients mirrored: a provider or ``oauth_cb`` given wins; the
    builtin unsecured token only when asked for with
    ``enable.sasl.oauthbearer.unsecure.jwt``."""
    provider = config.values.get("sasl.oauth.token.provider")
    if provider is not None:
        return ProviderTokens(provider)
    callback = config.values.get("oauth_cb")
    text = config.values.get("sasl.oauthbearer.config") or ""
    if callback is not None:
        if not callable(callback):
            raise OAuthTokenError("oauth_cb is not callable")
        return CallbackTokens(callback, text)
    if config.values.get("enable.sasl.oauthbearer.unsecure.jwt"):
        return UnsecuredJwt(text)
    raise OAuthTokenError(
        "sasl.mechanism=OAUTHBEARER needs a token: oauth_cb, sasl_oauth_token_provider, or "
        "enable.sasl.oauthbearer.unsecure.jwt=true with sasl.oauthbearer.config"
    )
