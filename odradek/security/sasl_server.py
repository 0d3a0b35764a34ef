"""The broker's side of SASL PLAIN (RFC 4616) and SCRAM (RFC 5802, RFC 7677), sans-IO.

How this works and why: each mechanism is a small state machine fed the client's
tokens one at a time (``respond(token) -> reply``), exactly the bytes that
SaslAuthenticate carries (KIP-152), so the same objects run under any transport and
the unit tests drive them with RFC 7677's vector. A mechanism knows nothing of
connections, images or configs: PLAIN gets its users as a mapping (the JAAS
``user_<name>`` options), SCRAM a lookup from user name to stored credential (the
metadata image's), so both are pure.

Failures raise ``AuthenticationFailed`` whose ``reason`` is for the broker's log only:
a client is only ever told the one generic message (``CLIENT_MESSAGE``), so it cannot
learn whether a user exists. For the same reason SCRAM answers an unknown user with a
server-first message built from a salt derived from the name and a per-process
secret (the same salt each time, as a real user's would be) and fails only at the
proof, like a wrong password. Secrets are compared with ``hmac.compare_digest``.

Not supported: channel binding (a ``p=`` gs2 flag; Kafka does not support it either),
SCRAM's ``tokenauth`` extension (delegation tokens are not implemented here), and
``m=`` mandatory extensions (RFC 5802 says a server must then fail).
"""

from __future__ import annotations

import base64
import binascii
import hmac
import os
import secrets
from collections.abc import Callable, Mapping
from typing import Final, Protocol

from odradek.security.jwt import ValidToken
from odradek.security.scram import (
    DEFAULT_ITERATIONS,
    MECHANISMS,
    ScramCredential,
    ScramMechanism,
    hash_of,
    hmac_of,
)

PLAIN: Final = "PLAIN"
SCRAM_SHA_256: Final = "SCRAM-SHA-256"
SCRAM_SHA_512: Final = "SCRAM-SHA-512"
OAUTHBEARER: Final = "OAUTHBEARER"
SUPPORTED_MECHANISMS: Final = (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512, OAUTHBEARER)
# What a client is told on any authentication failure (Kafka's wording for SCRAM and
# PLAIN's credential failures is of this shape): never which part was wrong.
CLIENT_MESSAGE: Final = "Authentication failed: Invalid username or password"
# Per process: the fake salts of unknown users are stable while the broker runs.
_FAKE_SALT_SECRET: Final = os.urandom(32)


class AuthenticationFailed(Exception):
    """The exchange failed; ``reason`` is for the broker's log, never the client."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ServerMechanism(Protocol):
    name: str
    complete: bool
    username: str | None  # set once the exchange succeeded

    def respond(self, token: bytes) -> bytes:
        """The reply to one client token; raises AuthenticationFailed."""
        ...


class PlainServer:
    """RFC 4616: one message ``[authzid] NUL authcid NUL passwd``, one empty reply."""

    name = PLAIN

    def __init__(self, users: Mapping[str, str]) -> None:
        self.users = users
        self.complete = False
        self.username: str | None = None

    def respond(self, token: bytes) -> bytes:
        if self.complete:
            raise AuthenticationFailed("PLAIN: a token after the exchange completed")
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed("PLAIN: the message is not UTF-8") from None
        parts = text.split("\0")
        if len(parts) != 3:
            raise AuthenticationFailed("PLAIN: expected authzid NUL authcid NUL passwd")
        authzid, username, password = parts
        if not username:
            raise AuthenticationFailed("PLAIN: empty username")
        if authzid and authzid != username:
            raise AuthenticationFailed(
                "PLAIN: the authorization id differs from the authentication id"
            )
        expected = self.users.get(username)
        # Compared even for an unknown user, so both take the same time.
        matches = hmac.compare_digest(
            password.encode("utf-8"), (expected if expected is not None else "\0").encode("utf-8")
        )
        if expected is None:
            raise AuthenticationFailed(f"PLAIN: unknown user {username!r}")
        if not matches:
            raise AuthenticationFailed(f"PLAIN: wrong password for user {username!r}")
        self.complete = True
        self.username = username
        return b""


def decode_saslname(name: str) -> str:
    """RFC 5802's saslname: ``=2C`` is ',' and ``=3D`` is '='; any other '=' is bad."""
    out, i = [], 0
    while i < len(name):
        if name[i] == "=":
            escape = name[i : i + 3]
            if escape == "=2C":
                out.append(",")
            elif escape == "=3D":
                out.append("=")
            else:
                raise AuthenticationFailed("SCRAM: bad '=' escape in the user name")
            i += 3
        else:
            out.append(name[i])
            i += 1
    return "".join(out)


def encode_saslname(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _attributes(text: str, what: str) -> list[tuple[str, str]]:
    """``a=value,b=value`` as ordered pairs; a malformed one fails the exchange."""
    pairs = []
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if not sep or len(key) < 1:
            raise AuthenticationFailed(f"SCRAM: malformed {what}")
        pairs.append((key, value))
    return pairs


def _b64decode(value: str, what: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise AuthenticationFailed(f"SCRAM: {what} is not base64") from None


class ScramServer:
    """RFC 5802's server: client-first, server-first, client-final, server-final.

    ``lookup(user)`` gives the stored credential for this mechanism or None.
    ``server_nonce`` is injectable for RFC 7677's test vector; by default 24 random
    bytes, URL-safe base64 (printable, no ',').
    """

    def __init__(
        self,
        mechanism_name: str,
        lookup: Callable[[str], ScramCredential | None],
        *,
        server_nonce: Callable[[], str] = lambda: secrets.token_urlsafe(24),
    ) -> None:
        self.mechanism: ScramMechanism = MECHANISMS[mechanism_name]
        self.name = mechanism_name
        self.lookup = lookup
        self.server_nonce = server_nonce
        self.complete = False
        self.username: str | None = None
        self._step = 0
        self._user = ""
        self._gs2_header = ""
        self._nonce = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._credential: ScramCredential | None = None
        self._known = False
        self._server_nonce_length = 0

    def respond(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed("SCRAM: the message is not UTF-8") from None
        if self._step == 0:
            self._step = 1
            return self._client_first(text).encode("utf-8")
        if self._step == 1:
            self._step = 2
            return self._client_final(text).encode("utf-8")
        raise AuthenticationFailed("SCRAM: a token after the exchange completed")

    def _client_first(self, text: str) -> str:
        flag, sep1, rest = text.partition(",")
        authzid_part, sep2, bare = rest.partition(",")
        if not (sep1 and sep2):
            raise AuthenticationFailed("SCRAM: malformed client-first message")
        if flag.startswith("p="):
            raise AuthenticationFailed("SCRAM: channel binding is not supported")
        if flag not in ("n", "y"):
            raise AuthenticationFailed("SCRAM: malformed gs2 header")
        authzid = ""
        if authzid_part:
            if not authzid_part.startswith("a="):
                raise AuthenticationFailed("SCRAM: malformed authzid")
            authzid = decode_saslname(authzid_part[2:])
        attributes = _attributes(bare, "client-first message")
        if attributes[0][0] == "m":
            raise AuthenticationFailed("SCRAM: mandatory extensions are not supported")
        if len(attributes) < 2 or attributes[0][0] != "n" or attributes[1][0] != "r":
            raise AuthenticationFailed("SCRAM: client-first message lacks n= and r=")
        user = decode_saslname(attributes[0][1])
        client_nonce = attributes[1][1]
        if not user or not client_nonce:
            raise AuthenticationFailed("SCRAM: empty user name or nonce")
        if not client_nonce.isprintable():
            raise AuthenticationFailed("SCRAM: the client nonce is not printable")
        extensions = dict(attributes[2:])
        if extensions.get("tokenauth", "false").lower() == "true":
            raise AuthenticationFailed("SCRAM: delegation tokens (tokenauth) are not supported")
        if authzid and authzid != user:
            raise AuthenticationFailed("SCRAM: the authorization id differs from the user name")
        self._user = user
        self._gs2_header = text[: len(flag) + 1 + len(authzid_part) + 1]
        self._client_first_bare = bare
        server_nonce = self.server_nonce()
        self._server_nonce_length = len(server_nonce)
        self._nonce = client_nonce + server_nonce
        credential = self.lookup(user)
        self._known = credential is not None
        self._credential = credential if credential is not None else self._fake(user)
        salt = base64.b64encode(self._credential.salt).decode("ascii")
        self._server_first = f"r={self._nonce},s={salt},i={self._credential.iterations}"
        return self._server_first

    def _fake(self, user: str) -> ScramCredential:
        """A credential no proof matches, its salt stable per user name."""
        digest = self.mechanism.digest_size
        salt = hmac_of(self.mechanism, _FAKE_SALT_SECRET, user.encode("utf-8"))[:32]
        return ScramCredential(
            self.name, salt, os.urandom(digest), os.urandom(digest), DEFAULT_ITERATIONS
        )

    def _nonce_matches(self, nonce: str) -> bool:
        """RFC 5802: the combined nonce, echoed exactly. Also accepted: the client's
        nonce followed by the combined nonce, which librdkafka before 2.x (kcat 1.7's
        bundled 2.0.2) sends; Kafka's broker accepted it then (it checked only the
        end). Both forms are fixed by this exchange, and the proof signs the message
        as sent, so neither weakens the check."""
        client_nonce = self._nonce[: len(self._nonce) - self._server_nonce_length]
        combined = self._nonce.encode()
        candidate = nonce.encode()
        exact = hmac.compare_digest(candidate, combined)
        legacy = hmac.compare_digest(candidate, client_nonce.encode() + combined)
        return exact or legacy

    def _client_final(self, text: str) -> str:
        without_proof, sep, proof_b64 = text.rpartition(",p=")
        if not sep:
            raise AuthenticationFailed("SCRAM: client-final message lacks the proof")
        attributes = _attributes(without_proof, "client-final message")
        if len(attributes) < 2 or attributes[0][0] != "c" or attributes[1][0] != "r":
            raise AuthenticationFailed("SCRAM: client-final message lacks c= and r=")
        binding = _b64decode(attributes[0][1], "the channel binding")
        if binding != self._gs2_header.encode("utf-8"):
            raise AuthenticationFailed("SCRAM: the channel binding does not match the gs2 header")
        if not self._nonce_matches(attributes[1][1]):
            raise AuthenticationFailed("SCRAM: the nonce does not match")
        proof = _b64decode(proof_b64, "the proof")
        credential = self._credential
        assert credential is not None
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}"
        message = auth_message.encode("utf-8")
        signature = hmac_of(self.mechanism, credential.stored_key, message)
        if len(proof) != len(signature):
            raise AuthenticationFailed(f"SCRAM: a proof of the wrong size for {self._user!r}")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        matches = hmac.compare_digest(hash_of(self.mechanism, client_key), credential.stored_key)
        if not self._known:
            raise AuthenticationFailed(f"{self.name}: unknown user {self._user!r}")
        if not matches:
            raise AuthenticationFailed(f"{self.name}: wrong proof (password) for {self._user!r}")
        server_signature = hmac_of(self.mechanism, credential.server_key, message)
        self.complete = True
        self.username = self._user
        return "v=" + base64.b64encode(server_signature).decode("ascii")


def server_mechanism(
    name: str,
    *,
    plain_users: Mapping[str, str],
    scram_lookup: Callable[[str, str], ScramCredential | None],
    token_validator: Callable[[str], ValidToken] | None = None,
) -> ServerMechanism:
    """A fresh server mechanism for one exchange (``name`` in SUPPORTED_MECHANISMS;
    OAUTHBEARER needs the listener's ``token_validator``, security/oauthbearer.py)."""
    if name == PLAIN:
        return PlainServer(plain_users)
    if name == OAUTHBEARER:
        from odradek.security.oauthbearer import OAuthBearerMechanism

        if token_validator is None:
            raise ValueError("OAUTHBEARER without a token validator")
        return OAuthBearerMechanism(token_validator)
    return ScramServer(name, lambda user: scram_lookup(user, name))
