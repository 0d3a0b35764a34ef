"""Handlers with the authorizer on, in-process, for principals other than ANONYMOUS.

No SASL is needed to get a principal here: a ``Session`` is built with
``principal="User:alice"`` (what SASL or mTLS will set on a connection) and handed to
the handler with the request, so the ACL decisions per principal are checked through
the real handlers (Fetch, DescribeAcls) and the real ``Authorizer``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kio.index import load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from odradek.metadata.image import AclEntry, MetadataImage, acl_record
from odradek.network.connection import Response
from odradek.protocol.build import make
from odradek.protocol.messages import Request, RequestHeader
from odradek.protocol.session import Session
from odradek.security.acls import (
    AclOperation,
    AuthorizerSettings,
    PatternType,
    Permission,
    ResourceType,
)
from odradek.server.authorizer import Authorizer
from odradek.server.handlers.acls import describe_acls
from odradek.server.handlers.fetch import fetch
from tests.server.test_fetch_handler import FakeServices, _request
from tests.server.test_protocol import nested

ALICE = Session(principal="User:alice", peer="10.0.0.5:5000")
BOB = Session(principal="User:bob", peer="10.0.0.6:5000")
ADMIN = Session(principal="User:admin", peer="10.0.0.7:5000")


def entry(
    rtype: ResourceType,
    name: str,
    principal: str,
    op: AclOperation,
    perm: Permission = Permission.ALLOW,
) -> AclEntry:
    return AclEntry(rtype, name, PatternType.LITERAL, principal, "*", op, perm)


def services_with(*acls: AclEntry, super_users: frozenset[str] = frozenset()) -> FakeServices:
    services = FakeServices()
    records = [acl_record(f"id-{i}", a) for i, a in enumerate(acls)]
    services.metadata.image = services.metadata.image.apply(records, 11)
    services.authorizer = Authorizer(
        lambda: services.metadata.image.acls, AuthorizerSettings(super_users=super_users)
    )
    return services


def fetch_as(services: FakeServices, session: Session, **options: Any) -> Any:
    """A v12 Fetch of orders-0 and events-0 by ``session``'s principal, decoded."""
    body = _request(12, [("orders", [0]), ("events", [0])], **options)
    request = Request(RequestHeader(1, 12, 77, "t"), body, 0, "PLAINTEXT", session=session)
    response: Response = asyncio.run(fetch(services, request))  # type: ignore[arg-type]
    frame = b"".join(p for p in response.parts if isinstance(p, bytes))
    schema = load_response_schema(1, 12)
    _, offset = entity_reader(schema.__header_schema__)(frame, 0)
    return entity_reader(schema)(frame, offset)[0]


def errors(response: Any) -> dict[str, Any]:
    return {t.topic: t.partitions[0].error_code for t in response.responses}


def test_fetch_reads_only_the_topics_the_principal_may_read() -> None:
    services = services_with(entry(ResourceType.TOPIC, "orders", "User:alice", AclOperation.READ))
    assert errors(fetch_as(services, ALICE)) == {
        "orders": ErrorCode.none,
        "events": ErrorCode.topic_authorization_failed,
    }
    (params,) = services.replicas.asked
    assert [name for name, _ in params.topics] == ["orders"]  # events was never read
    assert set(errors(fetch_as(services, BOB)).values()) == {ErrorCode.topic_authorization_failed}


def test_a_follower_fetch_needs_cluster_action() -> None:
    services = services_with(
        entry(ResourceType.CLUSTER, "kafka-cluster", "User:admin", AclOperation.CLUSTER_ACTION)
    )
    denied = fetch_as(services, ALICE, replica_id=2)
    assert denied.error_code == ErrorCode.cluster_authorization_failed
    assert fetch_as(services, ADMIN, replica_id=2).error_code == ErrorCode.none


def test_super_users_read_everything() -> None:
    services = services_with(super_users=frozenset({"User:bob"}))
    assert set(errors(fetch_as(services, BOB)).values()) == {ErrorCode.none}
    assert set(errors(fetch_as(services, ALICE)).values()) == {ErrorCode.topic_authorization_failed}


def describe_as(services: FakeServices, session: Session) -> Any:
    module = nested(29, 3)
    body = make(
        module.DescribeAclsRequest,
        resource_type_filter=1,
        resource_name_filter=None,
        pattern_type_filter=1,
        principal_filter=None,
        host_filter=None,
        operation=1,
        permission_type=1,
    )
    request = Request(RequestHeader(29, 3, 1, "t"), body, 0, session=session)
    return asyncio.run(describe_acls(services, request))  # type: ignore[arg-type]


def test_describe_acls_needs_describe_on_the_cluster() -> None:
    services = services_with(
        entry(ResourceType.CLUSTER, "kafka-cluster", "User:admin", AclOperation.ALTER),
        entry(ResourceType.TOPIC, "orders", "User:alice", AclOperation.READ),
    )
    assert describe_as(services, ALICE).error_code == ErrorCode.cluster_authorization_failed
    answer = describe_as(services, ADMIN)  # ALTER implies DESCRIBE
    assert answer.error_code == ErrorCode.none
    assert sorted((r.resource_type, r.resource_name) for r in answer.resources) == [
        (ResourceType.TOPIC, "orders"),
        (ResourceType.CLUSTER, "kafka-cluster"),
    ]


def test_authorized_operations_per_principal() -> None:
    services = services_with(
        entry(ResourceType.TOPIC, "orders", "User:alice", AclOperation.WRITE),
        entry(ResourceType.TOPIC, "orders", "User:alice", AclOperation.DESCRIBE, Permission.DENY),
    )
    bits = services.authorizer.operations(True, ALICE, ResourceType.TOPIC, "orders")
    assert bits == 1 << AclOperation.WRITE  # DESCRIBE is implied by WRITE but denied
    assert services.authorizer.operations(True, BOB, ResourceType.TOPIC, "orders") == 0
    assert services.authorizer.operations(False, ALICE, ResourceType.TOPIC, "orders") == -(2**31)


def test_the_index_follows_the_image() -> None:
    services = services_with()
    assert not services.authorizer.allowed(ALICE, AclOperation.READ, ResourceType.TOPIC, "orders")
    grant = acl_record("new", entry(ResourceType.TOPIC, "orders", "User:alice", AclOperation.READ))
    image: MetadataImage = services.metadata.image
    services.metadata.image = image.apply([grant], image.offset + 1)
    assert services.authorizer.allowed(ALICE, AclOperation.READ, ResourceType.TOPIC, "orders")
