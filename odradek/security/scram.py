"""SCRAM credentials (RFC 5802, RFC 7677): what the broker stores instead of a password.

How this works and why: for SCRAM-SHA-256 / SCRAM-SHA-512 Kafka keeps, per user and
mechanism, a random salt, an iteration count and two keys derived from the password:
``StoredKey = H(HMAC(SaltedPassword, "Client Key"))`` and ``ServerKey =
HMAC(SaltedPassword, "Server Key")``, where ``SaltedPassword = PBKDF2(password, salt,
iterations)``. The stored key lets the server check a client's proof, the server key
lets it prove itself to the client; neither gives back the password. Kafka's clients
send the salted password only inside their proof, so these are all the broker needs.

Kafka's limits: iterations from 4096 (``MIN_ITERATIONS``, RFC 7677's minimum for
SHA-256) to 16384 (``MAX_ITERATIONS``).
"""

from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass
from typing import Final

MIN_ITERATIONS: Final = 4096
MAX_ITERATIONS: Final = 16384
DEFAULT_ITERATIONS: Final = 4096


@dataclass(frozen=True, slots=True)
class ScramMechanism:
    name: str  # "SCRAM-SHA-256"
    hash_name: str  # hashlib's name
    kafka_type: int  # Kafka's ScramMechanism id (DescribeUserScramCredentials)

    @property
    def digest_size(self) -> int:
        return hashlib.new(self.hash_name).digest_size


MECHANISMS: Final = {
    "SCRAM-SHA-256": ScramMechanism("SCRAM-SHA-256", "sha256", 1),
    "SCRAM-SHA-512": ScramMechanism("SCRAM-SHA-512", "sha512", 2),
}
BY_TYPE: Final = {m.kafka_type: m for m in MECHANISMS.values()}


@dataclass(frozen=True, slots=True)
class ScramCredential:
    mechanism: str  # a key of MECHANISMS
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def salted_password(
    mechanism: ScramMechanism, password: bytes, salt: bytes, iterations: int
) -> bytes:
    """RFC 5802's Hi(): PBKDF2 with HMAC over the mechanism's hash."""
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password, salt, iterations)


def hmac_of(mechanism: ScramMechanism, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, mechanism.hash_name).digest()


def hash_of(mechanism: ScramMechanism, data: bytes) -> bytes:
    return hashlib.new(mechanism.hash_name, data).digest()


def credential_from_salted(
    mechanism: ScramMechanism, salted: bytes, salt: bytes, iterations: int
) -> ScramCredential:
    """The stored form from a salted password (AlterUserScramCredentials sends this)."""
    client_key = hmac_of(mechanism, salted, b"Client Key")
    return ScramCredential(
        mechanism.name,
        salt,
        hash_of(mechanism, client_key),
        hmac_of(mechanism, salted, b"Server Key"),
        iterations,
    )


def make_credential(
    mechanism_name: str,
    password: str,
    *,
    salt: bytes | None = None,
    iterations: int = DEFAULT_ITERATIONS,
) -> ScramCredential:
    """The stored form of ``password`` (a fresh 32-byte random salt unless given)."""
    mechanism = MECHANISMS[mechanism_name]
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"iterations {iterations} outside [{MIN_ITERATIONS}, {MAX_ITERATIONS}]")
    salt = os.urandom(32) if salt is None else salt
    salted = salted_password(mechanism, password.encode(), salt, iterations)
    return credential_from_salted(mechanism, salted, salt, iterations)
