"""SCRAM credential admin: confluent-kafka's types and the two operations (KIP-554).

How this works and why: the client salts the password itself, as Kafka's clients do —
a random salt (or the caller's) and ``SaltedPassword = PBKDF2(password, salt,
iterations)`` over the mechanism's hash — and sends only the salt, the iteration
count and the salted password in AlterUserScramCredentials (to the controller, as
Kafka's admin routes it); the broker keeps the derived keys, never the password.
DescribeUserScramCredentials goes to any broker and lists mechanism and iteration count
per user. Both answer per user: an ``Outcome`` (alter) or a
``UserScramCredentialsDescription`` / ``KafkaError`` (describe), which the blocking
face turns into confluent-kafka's futures.

The value types mirror confluent-kafka 2.x's (``confluent_kafka.admin``):
``ScramMechanism``, ``ScramCredentialInfo``, ``UserScramCredentialsDescription``,
``UserScramCredentialUpsertion`` (password as bytes, optional salt) and
``UserScramCredentialDeletion``; ``check_alterations``/``check_users`` raise the
TypeError/ValueError confluent-kafka raises for malformed input, before any request.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Sequence
from typing import Final

from kio.schema.errors import ErrorCode

from odradek.client._core.cluster import Cluster
from odradek.client._core.connection import request_entity
from odradek.client._core.errors import KafkaError
from odradek.client.admin.core import (
    ALTER_USER_SCRAM_CREDENTIALS,
    DESCRIBE_USER_SCRAM_CREDENTIALS,
    Outcome,
    controller,
    send_any,
)
from odradek.security.scram import BY_TYPE, salted_password

SALT_BYTES: Final = 32


class ScramMechanism(enum.Enum):
    UNKNOWN = 0
    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, ScramMechanism):
            return NotImplemented
        return self.value < other.value

    @property
    def mechanism_name(self) -> str:
        """Kafka's name ("SCRAM-SHA-256"), or "UNKNOWN"."""
        return self.name.replace("_", "-") if self != ScramMechanism.UNKNOWN else "UNKNOWN"

    @classmethod
    def from_name(cls, name: str) -> ScramMechanism:
        """``SCRAM-SHA-256`` -> SCRAM_SHA_256; anything else UNKNOWN."""
        return next((m for m in cls if m.mechanism_name == name), cls.UNKNOWN)

    @classmethod
    def from_type(cls, value: int) -> ScramMechanism:
        return next((m for m in cls if m.value == value), cls.UNKNOWN)


class ScramCredentialInfo:
    """A credential's mechanism and iteration count."""

    def __init__(self, mechanism: ScramMechanism, iterations: int) -> None:
        self.mechanism = mechanism
        self.iterations = iterations

    def __repr__(self) -> str:
        return f"ScramCredentialInfo({self.mechanism.mechanism_name}, {self.iterations})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ScramCredentialInfo) and (self.mechanism, self.iterations) == (
            other.mechanism,
            other.iterations,
        )

    def __hash__(self) -> int:
        return hash((self.mechanism, self.iterations))


class UserScramCredentialsDescription:
    """Every SCRAM credential of one user (mechanism and iterations only)."""

    def __init__(self, user: str, scram_credential_infos: list[ScramCredentialInfo]) -> None:
        self.user = user
        self.scram_credential_infos = scram_credential_infos

    def __repr__(self) -> str:
        return f"UserScramCredentialsDescription({self.user!r}, {self.scram_credential_infos})"


class UserScramCredentialAlteration:
    def __init__(self, user: str) -> None:
        self.user = user


class UserScramCredentialUpsertion(UserScramCredentialAlteration):
    """Set ``user``'s credential for a mechanism from ``password`` (bytes); ``salt``
    random when None."""

    def __init__(
        self,
        user: str,
        scram_credential_info: ScramCredentialInfo,
        password: bytes,
        salt: bytes | None = None,
    ) -> None:
        super().__init__(user)
        self.scram_credential_info = scram_credential_info
        self.password = password
        self.salt = salt

    def __repr__(self) -> str:  # never the password
        return f"UserScramCredentialUpsertion({self.user!r}, {self.scram_credential_info})"


class UserScramCredentialDeletion(UserScramCredentialAlteration):
    def __init__(self, user: str, mechanism: ScramMechanism) -> None:
        super().__init__(user)
        self.mechanism = mechanism

    def __repr__(self) -> str:
        return f"UserScramCredentialDeletion({self.user!r}, {self.mechanism.mechanism_name})"


def check_users(users: object) -> None:
    """confluent-kafka's checks of ``describe_user_scram_credentials``'s users."""
    if users is None:
        return
    if not isinstance(users, list):
        raise TypeError("Expected input to be list of String")
    for user in users:
        if user is None:
            raise TypeError("'user' cannot be None")
        if not isinstance(user, str):
            raise TypeError("Each value should be a string")
        if not user:
            raise ValueError("'user' cannot be empty")


def check_alterations(alterations: object) -> None:
    """confluent-kafka's checks of ``alter_user_scram_credentials``'s alterations."""
    if not isinstance(alterations, list):
        raise TypeError("Expected input to be list")
    if not alterations:
        raise ValueError("Expected at least one alteration")
    for alteration in alterations:
        if not isinstance(alteration, UserScramCredentialAlteration):
            raise TypeError(
                "Expected each element of list to be subclass of UserScramCredentialAlteration"
            )
        if alteration.user is None:
            raise TypeError("'user' cannot be None")
        if not isinstance(alteration.user, str):
            raise TypeError("'user' must be a string")
        if not alteration.user:
            raise ValueError("'user' cannot be empty")
        if isinstance(alteration, UserScramCredentialUpsertion):
            if not isinstance(alteration.password, bytes):
                raise TypeError("'password' must be bytes")
            if not alteration.password:
                raise ValueError("'password' cannot be empty")
            if alteration.salt is not None and not isinstance(alteration.salt, bytes):
                raise TypeError("'salt' must be bytes")
            if alteration.salt is not None and not alteration.salt:
                raise ValueError("'salt' can be None but cannot be empty")
            info = alteration.scram_credential_info
            if not isinstance(info, ScramCredentialInfo):
                raise TypeError("Expected credential_info to be ScramCredentialInfo Type")
            if info.iterations < 1:
                raise ValueError("Iterations should be positive")
            if not isinstance(info.mechanism, ScramMechanism):
                raise TypeError("Expected the mechanism to be ScramMechanism Type")
        elif isinstance(alteration, UserScramCredentialDeletion):
            if not isinstance(alteration.mechanism, ScramMechanism):
                raise TypeError("Expected the mechanism to be ScramMechanism Type")
        else:
            raise TypeError(
                "Expected each element of list 'alterations' to be either a "
                "UserScramCredentialUpsertion or a UserScramCredentialDeletion"
            )


def salted(upsertion: UserScramCredentialUpsertion) -> tuple[bytes, bytes]:
    """(salt, salted password) for an upsertion: PBKDF2 over the mechanism's hash. An
    unknown mechanism is sent as it is (with the password unsalted-away: empty) and
    the broker answers UNSUPPORTED_SASL_MECHANISM."""
    salt = upsertion.salt if upsertion.salt is not None else os.urandom(SALT_BYTES)
    info = upsertion.scram_credential_info
    mechanism = BY_TYPE.get(info.mechanism.value)
    if mechanism is None:
        return salt, b""
    return salt, salted_password(mechanism, upsertion.password, salt, info.iterations)


async def alter_user_scram_credentials(
    cluster: Cluster, alterations: Sequence[UserScramCredentialAlteration]
) -> dict[str, Outcome]:
    """One request with every alteration; the controller's answer per user."""
    connection = await controller(cluster)
    version = connection.version_for(ALTER_USER_SCRAM_CREDENTIALS)
    deletions = []
    upsertions = []
    for alteration in alterations:
        if isinstance(alteration, UserScramCredentialDeletion):
            deletions.append(
                request_entity(
                    ALTER_USER_SCRAM_CREDENTIALS,
                    version,
                    "ScramCredentialDeletion",
                    name=alteration.user,
                    mechanism=alteration.mechanism.value,
                )
            )
        elif isinstance(alteration, UserScramCredentialUpsertion):
            salt, salted_pw = salted(alteration)
            info = alteration.scram_credential_info
            upsertions.append(
                request_entity(
                    ALTER_USER_SCRAM_CREDENTIALS,
                    version,
                    "ScramCredentialUpsertion",
                    name=alteration.user,
                    mechanism=info.mechanism.value,
                    iterations=info.iterations,
                    salt=salt,
                    salted_password=salted_pw,
                )
            )
    response = await connection.send(
        request_entity(
            ALTER_USER_SCRAM_CREDENTIALS,
            version,
            deletions=tuple(deletions),
            upsertions=tuple(upsertions),
        )
    )
    return {r.user: Outcome(r.error_code, r.error_message) for r in response.results}


async def describe_user_scram_credentials(
    cluster: Cluster, users: Sequence[str] | None
) -> dict[str, UserScramCredentialsDescription | KafkaError]:
    """Each named user's credentials (every user with one when ``users`` is None)."""
    names = (
        None
        if users is None
        else tuple(
            request_entity(DESCRIBE_USER_SCRAM_CREDENTIALS, 0, "UserName", name=u) for u in users
        )
    )
    response = await send_any(cluster, DESCRIBE_USER_SCRAM_CREDENTIALS, users=names)
    if response.error_code != ErrorCode.none:
        raise KafkaError(
            response.error_code, f"DescribeUserScramCredentials: {response.error_message or ''}"
        )
    answers: dict[str, UserScramCredentialsDescription | KafkaError] = {}
    for result in response.results:
        if result.error_code != ErrorCode.none:
            message = result.error_message or result.error_code.name.upper()
            answers[result.user] = KafkaError(result.error_code, message)
            continue
        infos = [
            ScramCredentialInfo(ScramMechanism.from_type(int(i.mechanism)), int(i.iterations))
            for i in result.credential_infos
        ]
        answers[result.user] = UserScramCredentialsDescription(result.user, infos)
    return answers


__all__ = [
    "ScramCredentialInfo",
    "ScramMechanism",
    "UserScramCredentialAlteration",
    "UserScramCredentialDeletion",
    "UserScramCredentialUpsertion",
    "UserScramCredentialsDescription",
    "alter_user_scram_credentials",
    "check_alterations",
    "check_users",
    "describe_user_scram_credentials",
]
