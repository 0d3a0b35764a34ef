"""AlterUserScramCredentials to the active controller: the RPC channel's half.

How this works and why: a broker of a quorum forwards the request to the active
controller over the controller listener, as Kafka's brokers do (key 51, v0, the only
version), through ``ControllerClient`` (NOT_CONTROLLER answers and lost connections are
retried against the next controller until the deadline). The controller answers per
user; each answer becomes ``(user, None or ControllerError)`` exactly as the local
channel returns it. A success is then waited for in the local image
(``credentials_shown``: an upserted credential present with the salt and iteration
count sent, a deleted one gone), so the caller's next DescribeUserScramCredentials on
this broker already sees it — the channel's contract (controller_channel.py).
No controller in time fails every user with REQUEST_TIMED_OUT.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

from kio.schema.errors import ErrorCode

from odradek.client._core.connection import request_entity
from odradek.metadata.controller_client import ControllerClient
from odradek.metadata.errors import ControllerError
from odradek.metadata.image import MetadataImage
from odradek.metadata.scram_changes import ScramDeletion, ScramUpsertion, UserResult
from odradek.security.scram import BY_TYPE

ALTER_SCRAM_KEY: Final = 51
ALTER_SCRAM_VERSIONS: Final = (0, 0)


def _users(deletions: Sequence[ScramDeletion], upsertions: Sequence[ScramUpsertion]) -> list[str]:
    named = [d.user for d in deletions] + [u.user for u in upsertions]
    return list(dict.fromkeys(named))


async def alter_user_scram_credentials(
    client: ControllerClient,
    timeout_s: float,
    deletions: Sequence[ScramDeletion],
    upsertions: Sequence[ScramUpsertion],
) -> list[UserResult]:
    users = _users(deletions, upsertions)

    def build(version: int) -> Any:
        return request_entity(
            ALTER_SCRAM_KEY,
            version,
            deletions=tuple(
                request_entity(
                    ALTER_SCRAM_KEY,
                    version,
                    "ScramCredentialDeletion",
                    name=d.user,
                    mechanism=d.mechanism,
                )
                for d in deletions
            ),
            upsertions=tuple(
                request_entity(
                    ALTER_SCRAM_KEY,
                    version,
                    "ScramCredentialUpsertion",
                    name=u.user,
                    mechanism=u.mechanism,
                    iterations=u.iterations,
                    salt=u.salt,
                    salted_password=u.salted_password,
                )
                for u in upsertions
            ),
        )

    try:
        response = await client.send(ALTER_SCRAM_KEY, build, timeout_s=timeout_s)
    except ControllerError as failure:  # no controller answered: every user fails
        return [(user, failure) for user in users]
    answered: dict[str, ControllerError | None] = {}
    for result in response.results:
        code = result.error_code
        answered[result.user] = (
            None
            if code == ErrorCode.none
            else ControllerError(code.name.upper(), result.error_message or code.name.upper())
        )
    missing = ControllerError("UNKNOWN_SERVER_ERROR", "the controller did not answer this user")
    return [(user, answered.get(user, missing)) for user in users]


def credentials_shown(
    deletions: Sequence[ScramDeletion],
    upsertions: Sequence[ScramUpsertion],
    results: Sequence[UserResult],
) -> Callable[[MetadataImage], bool]:
    """Whether an image shows every accepted change of ``results``."""
    accepted = {user for user, error in results if error is None}
    wanted_present = [
        ((u.user, BY_TYPE[u.mechanism].name), u.salt, u.iterations)
        for u in upsertions
        if u.user in accepted
    ]
    wanted_absent = [(d.user, BY_TYPE[d.mechanism].name) for d in deletions if d.user in accepted]

    def shown(image: MetadataImage) -> bool:
        held = image.scram_credentials
        for key, salt, iterations in wanted_present:
            entry = held.get(key)
            if entry is None or entry.salt != salt or entry.iterations != iterations:
                return False
        return all(key not in held for key in wanted_absent)

    return shown


__all__ = [
    "ALTER_SCRAM_KEY",
    "ALTER_SCRAM_VERSIONS",
    "alter_user_scram_credentials",
    "credentials_shown",
]
