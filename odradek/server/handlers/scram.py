"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51), KIP-554.

Describe is answered from this broker's image (metadata/scram_changes.py's
``describe_credentials``): mechanism and iteration count per user, never a salt or a
key. Alter goes to the active controller through the controller channel — this
node's own controller on a single node, forwarded over the controller listener on a
node of a quorum — and is answered per user with the controller's verdict; the
controller plane serves it too, for the requests brokers forward (behind the gated
channel: NOT_CONTROLLER unless this node is the active controller). Both have only
v0.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any, Final

from odradek.metadata.controller_channel import ControllerError
from odradek.metadata.scram_changes import ScramDeletion, ScramUpsertion, describe_credentials
from odradek.protocol.build import error_code, make, response_module
from odradek.protocol.messages import Request
from odradek.server.authorized_operations import AclOperation, ResourceType
from odradek.server.handlers import BOTH_PLANES, handles

if TYPE_CHECKING:
    from odradek.server.services import AdminServices, BrokerServices

DESCRIBE_SCRAM_KEY: Final = 50
ALTER_SCRAM_KEY: Final = 51


@handles(DESCRIBE_SCRAM_KEY, 0, 0)
async def describe_user_scram_credentials(services: BrokerServices, request: Request) -> Any:
    module = response_module(DESCRIBE_SCRAM_KEY, request.header.api_version)
    users = request.body.users
    denied = services.authorizer.denial(
        request.session, AclOperation.DESCRIBE, ResourceType.CLUSTER
    )
    if denied is not None:  # Kafka: DESCRIBE on the cluster, else the whole request fails
        return make(
            module.DescribeUserScramCredentialsResponse,
            throttle_time=datetime.timedelta(0),
            error_code=error_code(denied),
            error_message=None,
            results=(),
        )
    names = None if users is None else [u.name for u in users]
    answers = describe_credentials(services.metadata.image, names)
    results = tuple(
        make(
            module.DescribeUserScramCredentialsResult,
            user=answer.user,
            error_code=error_code(answer.error.code if answer.error else "NONE"),
            error_message=str(answer.error) if answer.error else None,
            credential_infos=tuple(
                make(module.CredentialInfo, mechanism=mechanism, iterations=iterations)
                for mechanism, iterations in answer.infos
            ),
        )
        for answer in answers
    )
    return make(
        module.DescribeUserScramCredentialsResponse,
        throttle_time=datetime.timedelta(0),
        error_code=error_code("NONE"),
        error_message=None,
        results=results,
    )


@handles(ALTER_SCRAM_KEY, 0, 0, plane=BOTH_PLANES)
async def alter_user_scram_credentials(services: AdminServices, request: Request) -> Any:
    module = response_module(ALTER_SCRAM_KEY, request.header.api_version)
    body = request.body
    deletions = [ScramDeletion(d.name, int(d.mechanism)) for d in body.deletions]
    upsertions = [
        ScramUpsertion(
            u.name, int(u.mechanism), int(u.iterations), bytes(u.salt), bytes(u.salted_password)
        )
        for u in body.upsertions
    ]
    users = dict.fromkeys([d.user for d in deletions] + [u.user for u in upsertions])
    denied = services.authorizer.denial(request.session, AclOperation.ALTER, ResourceType.CLUSTER)
    if denied is not None:  # Kafka: ALTER on the cluster, else every user fails
        refusal = ControllerError(denied, "")
        results: list[tuple[str, ControllerError | None]] = [(user, refusal) for user in users]
    else:
        try:
            results = await services.controller.alter_user_scram_credentials(deletions, upsertions)
        except ControllerError as failure:  # a channel failing as a whole: every user
            results = [(user, failure) for user in users]
    return make(
        module.AlterUserScramCredentialsResponse,
        throttle_time=datetime.timedelta(0),
        results=tuple(
            make(
                module.AlterUserScramCredentialsResult,
                user=user,
                error_code=error_code(error.code if error else "NONE"),
                error_message=str(error) if error else None,
            )
            for user, error in results
        ),
    )
