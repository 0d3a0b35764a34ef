"""SCRAM credential changes on the controller, and what a broker describes of them.

How this works and why (KIP-554, Kafka's ScramControlManager and ScramImage): an
AlterUserScramCredentials request carries deletions ``(user, mechanism)`` and
upsertions ``(user, mechanism, iterations, salt, salted password)``; the client salted
the password itself (PBKDF2), so the password never reaches the broker. The controller
turns each accepted upsertion into one ``UserScramCredential`` record holding the salt,
the iteration count and the two keys derived from the salted password (StoredKey and
ServerKey: ``security/scram.py``'s ``credential_from_salted``) — never the salted
password itself — and each accepted deletion into a ``RemoveUserScramCredential``.

The answer is per *user*, as Kafka's: a user named twice in one request (two
deletions, two upsertions, or one of each, whatever the mechanisms) is
DUPLICATE_RESOURCE and none of its changes is made — so SCRAM-SHA-256 and SCRAM-SHA-512
of one user take two requests, as against a Kafka 3.x/4.x controller; a user's first
failure wins and later entries for it are not looked at. The checks, in Kafka's order:
an empty user name is UNACCEPTABLE_CREDENTIAL, an unknown mechanism
UNSUPPORTED_SASL_MECHANISM, iterations outside [4096, 16384] UNACCEPTABLE_CREDENTIAL,
a deletion of a credential the image does not hold RESOURCE_NOT_FOUND. The accepted
changes of every user commit together in one batch.

``describe_credentials`` is DescribeUserScramCredentials read from an image: every user
holding a credential when no user is named, RESOURCE_NOT_FOUND for a named user without
one, DUPLICATE_RESOURCE for a user named twice; the answer carries mechanism and
iteration count only.

Nothing here writes or logs; the controller commits what ``alter_credentials`` returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from odradek.metadata.errors import ControllerError
from odradek.metadata.image import MetadataImage, MetadataRecord, ScramEntry, scram_record
from odradek.security.scram import (
    BY_TYPE,
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    credential_from_salted,
)

DUPLICATE_MESSAGE = "A user credential cannot be altered twice in the same request"


@dataclass(frozen=True, slots=True)
class ScramDeletion:
    user: str
    mechanism: int  # Kafka's ScramMechanism type: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512


@dataclass(frozen=True, slots=True)
class ScramUpsertion:
    user: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes = b""

    def __repr__(self) -> str:  # the salted password stays out of logs and tracebacks
        return (
            f"ScramUpsertion(user={self.user!r}, mechanism={self.mechanism}, "
            f"iterations={self.iterations})"
        )


@dataclass(frozen=True, slots=True)
class UserCredentials:
    """One user's DescribeUserScramCredentials answer: (mechanism type, iterations)s,
    or the error."""

    user: str
    error: ControllerError | None
    infos: tuple[tuple[int, int], ...] = ()


UserResult = tuple[str, ControllerError | None]


def _check_user_and_mechanism(user: str, mechanism: int) -> ControllerError | None:
    if not user:
        return ControllerError("UNACCEPTABLE_CREDENTIAL", "Username must not be empty")
    if mechanism not in BY_TYPE:
        return ControllerError("UNSUPPORTED_SASL_MECHANISM", "Unknown SCRAM mechanism")
    return None


def check_upsertion(upsertion: ScramUpsertion) -> ControllerError | None:
    error = _check_user_and_mechanism(upsertion.user, upsertion.mechanism)
    if error is not None:
        return error
    if upsertion.iterations < MIN_ITERATIONS:
        return ControllerError("UNACCEPTABLE_CREDENTIAL", "Too few iterations")
    if upsertion.iterations > MAX_ITERATIONS:
        return ControllerError("UNACCEPTABLE_CREDENTIAL", "Too many iterations")
    return None


def check_deletion(image: MetadataImage, deletion: ScramDeletion) -> ControllerError | None:
    error = _check_user_and_mechanism(deletion.user, deletion.mechanism)
    if error is not None:
        return error
    if (deletion.user, BY_TYPE[deletion.mechanism].name) not in image.scram_credentials:
        return ControllerError(
            "RESOURCE_NOT_FOUND", "Attempt to delete a user credential that does not exist"
        )
    return None


def upsertion_record(upsertion: ScramUpsertion) -> MetadataRecord:
    """The stored form: salt, StoredKey, ServerKey, iterations (no salted password)."""
    mechanism = BY_TYPE[upsertion.mechanism]
    credential = credential_from_salted(
        mechanism, upsertion.salted_password, upsertion.salt, upsertion.iterations
    )
    entry = ScramEntry(
        credential.salt, credential.stored_key, credential.server_key, credential.iterations
    )
    return scram_record(upsertion.user, mechanism.name, entry)


def deletion_record(deletion: ScramDeletion) -> MetadataRecord:
    return MetadataRecord(
        "RemoveUserScramCredential",
        {"name": deletion.user, "mechanism": BY_TYPE[deletion.mechanism].name},
    )


def alter_credentials(
    image: MetadataImage,
    deletions: Sequence[ScramDeletion],
    upsertions: Sequence[ScramUpsertion],
) -> tuple[list[UserResult], list[MetadataRecord]]:
    """Per user (first-seen order) None or its error, and the records of every accepted
    change (see the module doc for the rules)."""
    order: list[str] = []
    errors: dict[str, ControllerError] = {}
    accepted: dict[str, ScramDeletion | ScramUpsertion] = {}

    def consider(change: ScramDeletion | ScramUpsertion, error: ControllerError | None) -> None:
        user = change.user
        if user not in order:
            order.append(user)
        if user in errors:
            return
        if accepted.pop(user, None) is not None:
            errors[user] = ControllerError("DUPLICATE_RESOURCE", DUPLICATE_MESSAGE)
        elif error is not None:
            errors[user] = error
        else:
            accepted[user] = change

    for deletion in deletions:
        seen = deletion.user in errors or deletion.user in accepted
        consider(deletion, None if seen else check_deletion(image, deletion))
    for upsertion in upsertions:
        seen = upsertion.user in errors or upsertion.user in accepted
        consider(upsertion, None if seen else check_upsertion(upsertion))
    records = [
        deletion_record(change) if isinstance(change, ScramDeletion) else upsertion_record(change)
        for change in accepted.values()
    ]
    return [(user, errors.get(user)) for user in order], records


def describe_credentials(
    image: MetadataImage, users: Sequence[str] | None
) -> list[UserCredentials]:
    """DescribeUserScramCredentials from ``image``: every user with a credential when
    ``users`` is None or empty, else each named user once (sorted when listing all)."""
    held: dict[str, list[tuple[int, int]]] = {}
    for (user, mechanism_name), entry in image.scram_credentials.items():
        mechanism = next((m for m in BY_TYPE.values() if m.name == mechanism_name), None)
        if mechanism is not None:
            held.setdefault(user, []).append((mechanism.kafka_type, entry.iterations))
    if not users:
        return [UserCredentials(user, None, tuple(sorted(held[user]))) for user in sorted(held)]
    answers = []
    for user in dict.fromkeys(users):
        if users.count(user) > 1:
            error = ControllerError(
                "DUPLICATE_RESOURCE",
                "Cannot describe SCRAM credentials for the same user twice in a single "
                f"request: {user}",
            )
            answers.append(UserCredentials(user, error))
        elif user not in held:
            error = ControllerError(
                "RESOURCE_NOT_FOUND",
                f"Attempt to describe a user credential that does not exist: {user}",
            )
            answers.append(UserCredentials(user, error))
        else:
            answers.append(UserCredentials(user, None, tuple(sorted(held[user]))))
    return answers


__all__ = [
    "DUPLICATE_MESSAGE",
    "ScramDeletion",
    "ScramUpsertion",
    "UserCredentials",
    "UserResult",
    "alter_credentials",
    "describe_credentials",
]
