"""The security session of one connection: who the peer is, and over what.

How this works and why: Kafka gives every request a context naming the listener, the
listener's security protocol, the client's address and the authenticated principal
(``KafkaPrincipal``, written ``User:<name>``); the authorizer decides on that
principal and quotas are kept per user and client id. Here one ``Session`` belongs to
each connection (network/connection.py makes it at accept) and every request decoded
on that connection carries it, so handlers and the authorizer read the principal from
``request.session``. It is mutable because authentication happens on the connection:
TLS sets the principal from the client certificate when the handshake ends (mTLS),
SASL when SaslAuthenticate succeeds, and re-authentication (KIP-368) may replace it.

On a SASL listener the session starts unauthenticated; until SASL succeeds the
dispatcher lets only ApiVersions, SaslHandshake and SaslAuthenticate through.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

ANONYMOUS: Final = "User:ANONYMOUS"
SECURITY_PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def uses_sasl(security_protocol: str) -> bool:
    return security_protocol.startswith("SASL_")


def uses_tls(security_protocol: str) -> bool:
    return security_protocol in ("SSL", "SASL_SSL")


@dataclass(slots=True)
class Session:
    listener: str = ""  # the listener's name, e.g. PLAINTEXT, SASL_SSL, INTERNAL
    security_protocol: str = "PLAINTEXT"
    peer: str = ""  # "host:port" of the client
    principal: str = ANONYMOUS  # "User:<name>", Kafka's KafkaPrincipal as a string
    # False on a SASL listener until SaslAuthenticate succeeds; True elsewhere.
    authenticated: bool = True
    # Per-connection state of the authentication layers (the SASL exchange in flight,
    # the mechanism, the session's expiry for KIP-368): owned by network/ and the SASL
    # handlers, opaque to everyone else.
    state: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def for_listener(cls, listener: str, security_protocol: str, peer: str) -> Session:
        return cls(
            listener,
            security_protocol,
            peer,
            authenticated=not uses_sasl(security_protocol),
        )

    @property
    def host(self) -> str:
        """The client's address without its port (ACLs match hosts)."""
        host, _, _ = self.peer.rpartition(":")
        return host.strip("[]") if host else self.peer

    @property
    def user(self) -> str:
        """The principal's name without its ``User:`` type."""
        return self.principal.partition(":")[2]
