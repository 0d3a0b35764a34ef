"""``odradek configs`` for ``--entity-type users``: SCRAM credentials, as kafka-configs.sh.

How this works and why: Kafka manages SCRAM credentials as pseudo-configs of a user —
``--add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret]'`` sets one,
``--delete-config SCRAM-SHA-512`` removes one, ``--describe`` lists them as
``SCRAM credential configs for user-principal 'alice' are
SCRAM-SHA-256=iterations=8192`` — though on the wire they are
AlterUserScramCredentials / DescribeUserScramCredentials, not configs. The password is
salted here, in the client (odradek's ``AdminClient``), and never leaves this process.

A Kafka 3.x/4.x controller refuses two changes of one user in one request
(DUPLICATE_RESOURCE), which makes Kafka's own documented
``SCRAM-SHA-256=[...],SCRAM-SHA-512=[...]`` fail against KRaft; this tool sends one
request per mechanism instead, in the order given, and stops at the first refusal
(saying which mechanisms were already changed).

The users entity also carries client quotas (``producer_byte_rate``, ...), which are
not SCRAM keys: ``scram_change`` says whether a change is this module's, so configs.py
routes everything else to the quota path; mixing both in one command is refused with
Kafka's message.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import click
from kio.schema.errors import ErrorCode

from odradek.cli.common import (
    REQUEST_TIMEOUT_S,
    CliError,
    describe_failure,
    emit,
    error_code,
    result,
)
from odradek.client._core.types import KafkaException
from odradek.client.admin.blocking import AdminClient
from odradek.client.admin.scram import (
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialDeletion,
    UserScramCredentialsDescription,
    UserScramCredentialUpsertion,
)
from odradek.security.scram import DEFAULT_ITERATIONS, MECHANISMS

SCRAM_KEYS: Final = tuple(MECHANISMS)  # SCRAM-SHA-256, SCRAM-SHA-512


def is_scram_key(key: str) -> bool:
    return key in SCRAM_KEYS


def scram_change(to_set: dict[str, str], to_delete: Sequence[str]) -> bool:
    """Whether an ``alter`` of a user names a SCRAM credential (this module's to do)."""
    return any(is_scram_key(k) for k in (*to_set, *to_delete))


def _credential(mechanism: str, value: str) -> tuple[int, bytes]:
    """``iterations=8192,password=alice-secret`` as (iterations, password)."""
    fields: dict[str, str] = {}
    for part in value.split(","):
        key, sep, item = part.partition("=")
        key = key.strip()
        if not sep:  # never echo it: it may be the tail of a password holding a comma
            raise click.BadParameter(
                f"{mechanism}: expected [iterations=N,password=P] (a password cannot hold ',')",
                param_hint="--add-config",
            )
        if key not in ("iterations", "password"):
            raise click.BadParameter(
                f"{mechanism}: unknown key {key!r} (iterations, password)",
                param_hint="--add-config",
            )
        fields[key] = item
    password = fields.get("password", "")
    if not password:
        raise click.BadParameter(f"{mechanism}: password= is required", param_hint="--add-config")
    try:
        iterations = int(fields.get("iterations", DEFAULT_ITERATIONS))
    except ValueError:
        raise click.BadParameter(
            f"{mechanism}: iterations must be a number", param_hint="--add-config"
        ) from None
    return iterations, password.encode()


def alterations(
    user: str, to_set: dict[str, str], to_delete: Sequence[str]
) -> list[UserScramCredentialAlteration]:
    """The command's changes, deletions first (as kafka-configs.sh sends them)."""
    others = sorted(k for k in (*to_set, *to_delete) if not is_scram_key(k))
    if others:
        raise click.UsageError(
            "Cannot alter both quota and SCRAM credential configs simultaneously for "
            f"'users': {', '.join(others)}"
        )
    changes: list[UserScramCredentialAlteration] = [
        UserScramCredentialDeletion(user, ScramMechanism.from_name(name)) for name in to_delete
    ]
    for name, value in to_set.items():
        iterations, password = _credential(name, value)
        info = ScramCredentialInfo(ScramMechanism.from_name(name), iterations)
        changes.append(UserScramCredentialUpsertion(user, info, password))
    return changes


def _mechanism(change: UserScramCredentialAlteration) -> str:
    if isinstance(change, UserScramCredentialUpsertion):
        return change.scram_credential_info.mechanism.mechanism_name
    assert isinstance(change, UserScramCredentialDeletion)
    return change.mechanism.mechanism_name


def alter_user(
    admin: AdminClient, user: str, to_set: dict[str, str], to_delete: Sequence[str]
) -> None:
    """Apply the SCRAM changes of one user, one request per mechanism (module doc)."""
    done: list[str] = []
    for change in alterations(user, to_set, to_delete):
        futures = admin.alter_user_scram_credentials([change], request_timeout=REQUEST_TIMEOUT_S)
        try:
            result(futures[user], f"user {user}")
        except CliError as error:
            if done:
                raise CliError(f"{error} ({', '.join(done)} already changed)") from None
            raise
        done.append(_mechanism(change))


def _line(description: UserScramCredentialsDescription) -> str:
    infos = sorted(description.scram_credential_infos, key=lambda i: i.mechanism)
    shown = ", ".join(f"{i.mechanism.mechanism_name}=iterations={i.iterations}" for i in infos)
    return f"SCRAM credential configs for user-principal '{description.user}' are {shown}"


def describe_users(admin: AdminClient, user: str | None, output: str) -> None:
    """Kafka's lines for ``user`` (every user holding a credential when None); a named
    user without any prints nothing, as kafka-configs.sh."""
    found: list[UserScramCredentialsDescription] = []
    failures: list[str] = []
    if user is None:
        every = admin.describe_user_scram_credentials(request_timeout=REQUEST_TIMEOUT_S)
        assert not isinstance(every, dict)
        found = sorted(result(every, "users").values(), key=lambda d: d.user)
    else:
        futures = admin.describe_user_scram_credentials([user], request_timeout=REQUEST_TIMEOUT_S)
        assert isinstance(futures, dict)
        try:
            found = [futures[user].result(REQUEST_TIMEOUT_S + 5)]
        except KafkaException as error:
            if error_code(error) != ErrorCode.resource_not_found:  # none held: no line
                failures.append(
                    f"Error retrieving SCRAM credential configs for user-principal '{user}': "
                    f"{describe_failure(error)}"
                )
    if output == "json":
        rows: list[dict[str, Any]] = [
            {"user": d.user, "mechanism": i.mechanism.mechanism_name, "iterations": i.iterations}
            for d in found
            for i in sorted(d.scram_credential_infos, key=lambda i: i.mechanism)
        ]
        emit(output, rows, ["user", "mechanism", "iterations"])
    else:
        for description in found:
            click.echo(_line(description))
    for failure in failures:
        click.echo(failure, err=True)
    if failures:
        raise CliError(failures[0])


__all__ = ["SCRAM_KEYS", "alter_user", "describe_users", "is_scram_key", "scram_change"]
