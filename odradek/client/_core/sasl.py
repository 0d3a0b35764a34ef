"""The client's side of SASL PLAIN, SCRAM-SHA-256/512 and OAUTHBEARER (its tokens and
message: client/_core/oauth.py), over SaslAuthenticate.

How this works and why: after ApiVersions a connection to a SASL listener sends
SaslHandshake v1 with its mechanism, then the mechanism's tokens in SaslAuthenticate
requests (KIP-152), as librdkafka and the Java client do. The mechanisms are small
sans-IO state machines (``next_token(server_bytes)``), so they are checked without a
broker; ``authenticate`` runs one over a connection. SCRAM's client verifies the
broker's server signature too: a broker that does not know the password cannot pass.

Errors are ``SaslAuthenticationError`` (not retriable: a wrong password stays
wrong) with the broker's message, or the reason the client refused the exchange.

Re-authentication (KIP-368): when the broker gives a session lifetime, the
connection re-authenticates at 85% of it, before its next request that is not SASL,
once the requests in flight are answered (connection.py ``_reauthenticate``); the
broker keeps the principal and the session goes on.
"""

from __future__ import annotations

import base64
import hmac
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from kio.schema.errors import ErrorCode

from odradek.client._core.connection import KafkaConnectionError
from odradek.security.scram import MECHANISMS, MIN_ITERATIONS, hash_of, hmac_of, salted_password

if TYPE_CHECKING:
    from odradek.client._core.connection import BrokerConnection
    from odradek.client._core.oauth import OAuthBearerClient, TokenSource

SASL_HANDSHAKE_KEY: Final = 17
SASL_AUTHENTICATE_KEY: Final = 36
CLIENT_MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


class SaslAuthenticationError(KafkaConnectionError):
    """SASL failed: wrong credentials, a mechanism the broker does not enable, or a
    broker that failed SCRAM's mutual proof. A connection error (the connection is
    closed, and the client tries again later, as librdkafka does), but not one that
    retrying the request fixes."""

    retriable = False


def is_authentication(error: BaseException | None) -> bool:
    return isinstance(error, SaslAuthenticationError)


@dataclass(frozen=True, slots=True)
class SaslCredentials:
    mechanism: str  # one of CLIENT_MECHANISMS
    username: str = ""  # PLAIN and SCRAM
    password: str = ""
    oauth: TokenSource | None = None  # OAUTHBEARER: where its tokens come from (oauth.py)


class PlainClient:
    def __init__(self, username: str, password: str) -> None:
        self.message = f"\0{username}\0{password}".encode()
        self.done = False

    def next_token(self, server: bytes | None) -> bytes | None:
        """The next token to send (None: the exchange is over)."""
        if self.done:
            return None
        self.done = True
        return self.message


def _saslname(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


class ScramClient:
    """RFC 5802's client: client-first, then client-final with the proof, then the
    server's signature checked."""

    def __init__(
        self, mechanism: str, username: str, password: str, *, nonce: str | None = None
    ) -> None:
        self.mechanism = MECHANISMS[mechanism]
        self.password = password.encode("utf-8")
        self.nonce = nonce if nonce is not None else secrets.token_urlsafe(24)
        self.first_bare = f"n={_saslname(username)},r={self.nonce}"
        self.step = 0
        self.expected_signature = b""

    def next_token(self, server: bytes | None) -> bytes | None:
        step, self.step = self.step, self.step + 1
        if step == 0:
            return ("n,," + self.first_bare).encode("utf-8")
        assert server is not None
        text = server.decode("utf-8", "replace")
        if step == 1:
            return self._final(text).encode("utf-8")
        if step == 2:
            self._verify(text)
            return None
        raise SaslAuthenticationError("SCRAM: the broker sent more than the exchange has")

    def _final(self, server_first: str) -> str:
        fields = dict(item.partition("=")[::2] for item in server_first.split(","))
        nonce, salt_b64, iterations_text = fields.get("r"), fields.get("s"), fields.get("i")
        if not nonce or not salt_b64 or not iterations_text:
            raise SaslAuthenticationError("SCRAM: malformed server-first message")
        if not nonce.startswith(self.nonce) or len(nonce) == len(self.nonce):
            raise SaslAuthenticationError("SCRAM: the broker's nonce does not extend ours")
        try:
            iterations = int(iterations_text)
            salt = base64.b64decode(salt_b64, validate=True)
        except ValueError:
            raise SaslAuthenticationError("SCRAM: malformed salt or iteration count") from None
        if iterations < MIN_ITERATIONS:
            raise SaslAuthenticationError(
                f"SCRAM: {iterations} iterations is below the minimum {MIN_ITERATIONS}"
            )
        mechanism = self.mechanism
        salted = salted_password(mechanism, self.password, salt, iterations)
        client_key = hmac_of(mechanism, salted, b"Client Key")
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self.first_bare},{server_first},{without_proof}".encode()
        signature = hmac_of(mechanism, hash_of(mechanism, client_key), auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = hmac_of(mechanism, salted, b"Server Key")
        self.expected_signature = hmac_of(mechanism, server_key, auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode('ascii')}"

    def _verify(self, server_final: str) -> None:
        if server_final.startswith("e="):
            raise SaslAuthenticationError(f"SCRAM: the broker refused: {server_final[2:]}")
        if not server_final.startswith("v="):
            raise SaslAuthenticationError("SCRAM: malformed server-final message")
        try:
            signature = base64.b64decode(server_final[2:].split(",")[0], validate=True)
        except ValueError:
            raise SaslAuthenticationError("SCRAM: malformed server signature") from None
        if not hmac.compare_digest(signature, self.expected_signature):
            raise SaslAuthenticationError("SCRAM: the broker's signature is wrong")


def client_mechanism(credentials: SaslCredentials) -> PlainClient | ScramClient:
    """PLAIN's or SCRAM's client for one exchange (OAUTHBEARER: ``start_mechanism``)."""
    if credentials.mechanism == "OAUTHBEARER":
        raise SaslAuthenticationError("SASL OAUTHBEARER is not available on this connection")
    if credentials.mechanism == "PLAIN":
        return PlainClient(credentials.username, credentials.password)
    return ScramClient(credentials.mechanism, credentials.username, credentials.password)


async def start_mechanism(
    credentials: SaslCredentials,
) -> PlainClient | ScramClient | OAuthBearerClient:
    """A fresh client mechanism for one exchange; OAUTHBEARER's token is fetched from
    its source now, so a re-authentication logs in with a fresh one."""
    if credentials.mechanism != "OAUTHBEARER":
        return client_mechanism(credentials)
    from odradek.client._core.oauth import OAuthBearerClient, OAuthTokenError

    if credentials.oauth is None:
        raise SaslAuthenticationError("SASL OAUTHBEARER: no token source configured")
    try:
        return OAuthBearerClient(await credentials.oauth.token())
    except OAuthTokenError as error:
        raise SaslAuthenticationError(f"SASL OAUTHBEARER: {error}") from None


async def authenticate(connection: BrokerConnection, credentials: SaslCredentials) -> int:
    """Run SaslHandshake + SaslAuthenticate on a fresh connection; the session
    lifetime in ms the broker gave (0: none). Raises SaslAuthenticationError."""
    from odradek.client._core.connection import request_entity

    if not connection.supports(SASL_HANDSHAKE_KEY) or not connection.supports(
        SASL_AUTHENTICATE_KEY
    ):
        raise SaslAuthenticationError(
            "the broker does not offer SaslHandshake v1 and SaslAuthenticate (is this a "
            "SASL listener?)"
        )
    version = connection.version_for(SASL_HANDSHAKE_KEY)
    if version < 1:
        raise SaslAuthenticationError("the broker offers only SaslHandshake v0 (pre-KIP-152)")
    handshake: Any = await connection.send(
        request_entity(SASL_HANDSHAKE_KEY, version, mechanism=credentials.mechanism)
    )
    if handshake.error_code != ErrorCode.none:
        offered = ", ".join(handshake.mechanisms) or "none"
        raise SaslAuthenticationError(
            f"the broker does not enable SASL mechanism {credentials.mechanism} "
            f"({handshake.error_code.name.upper()}; enabled: {offered})"
        )
    mechanism = await start_mechanism(credentials)
    auth_version = connection.version_for(SASL_AUTHENTICATE_KEY)
    server: bytes | None = None
    lifetime_ms = 0
    while True:
        token = mechanism.next_token(server)
        if token is None:
            return lifetime_ms
        response: Any = await connection.send(
            request_entity(SASL_AUTHENTICATE_KEY, auth_version, auth_bytes=token)
        )
        if response.error_code != ErrorCode.none:
            raise SaslAuthenticationError(
                f"SASL {credentials.mechanism} authentication failed: "
                f"{response.error_message or response.error_code.name.upper()}"
            )
        server = bytes(response.auth_bytes)
        lifetime = getattr(response, "session_lifetime", None)
        if lifetime is not None:
            lifetime_ms = int(lifetime.total_seconds() * 1000)


def sasl_credentials(config: Any) -> SaslCredentials | None:
    """The SASL credentials a ``ClientConfig`` asks for (None without SASL)."""
    if not str(config["security.protocol"]).upper().startswith("SASL_"):
        return None
    if config["sasl.mechanism"] == "OAUTHBEARER":
        return SaslCredentials("OAUTHBEARER", oauth=config.oauth_tokens)
    return SaslCredentials(
        config["sasl.mechanism"], config["sasl.username"], config["sasl.password"]
    )
