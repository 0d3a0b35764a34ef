"""The authorizer handlers ask: may this request's principal do this on that resource?

How this works and why: ``authorizer.class.name`` turns authorization on, as in
Kafka: ``org.apache.kafka.metadata.authorizer.StandardAuthorizer`` (the KRaft
authorizer, ACLs kept in the metadata log) and the ZooKeeper-era
``kafka.security.authorizer.AclAuthorizer`` (taken as the same, with a warning).
Unset, every request is allowed, as before. The decision is security/acls.py's
(DENY wins, implied operations, prefixed and wildcard patterns, ``super.users``,
``allow.everyone.if.no.acl.found``); this module reads the principal and host from
the request's ``Session`` and keeps an ``AclIndex`` of the image's ACLs. The image's
``acls`` mapping is replaced exactly when an ACL record is applied (the delta's
``security`` change), so the index is rebuilt when the image's mapping is a new
object — one identity check per decision, never a scan per request.

Handlers make one call per check: ``allowed`` (one resource), ``allowed_names``
(which of many names), ``allowed_any`` (Kafka's authorizeByResourceType) and
``operations`` (the KIP-430 authorized-operations fields). Requests that reach a
controller listener were authorized by the broker that forwarded them, so the
controller plane's services carry ``ALLOW_ALL``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

from odradek.protocol.session import Session
from odradek.security.acls import (
    CLUSTER_NAME,
    AclIndex,
    AclOperation,
    AuthorizerSettings,
    ResourceType,
)
from odradek.server.authorized_operations import requested

if TYPE_CHECKING:
    from odradek.server.config import BrokerConfig

logger = logging.getLogger(__name__)

STANDARD_AUTHORIZER: Final = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
LEGACY_AUTHORIZER: Final = "kafka.security.authorizer.AclAuthorizer"
AUTHORIZERS: Final = (STANDARD_AUTHORIZER, LEGACY_AUTHORIZER)
DENIAL_ERRORS: Final = {
    ResourceType.TOPIC: "TOPIC_AUTHORIZATION_FAILED",
    ResourceType.GROUP: "GROUP_AUTHORIZATION_FAILED",
    ResourceType.CLUSTER: "CLUSTER_AUTHORIZATION_FAILED",
    ResourceType.TRANSACTIONAL_ID: "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
    ResourceType.DELEGATION_TOKEN: "DELEGATION_TOKEN_AUTHORIZATION_FAILED",
    ResourceType.USER: "CLUSTER_AUTHORIZATION_FAILED",
}


class Authorizer:
    """Decisions for handlers; ``settings`` None means no authorizer (allow all)."""

    def __init__(
        self, acls: Callable[[], Mapping[str, Any]], settings: AuthorizerSettings | None
    ) -> None:
        self._acls = acls
        self.settings = settings
        self._indexed: Mapping[str, Any] | None = None
        self._index: AclIndex | None = None

    @property
    def enabled(self) -> bool:
        return self.settings is not None

    def _current(self) -> AclIndex:
        assert self.settings is not None
        acls = self._acls()
        if acls is not self._indexed or self._index is None:
            self._index = AclIndex(acls.values(), self.settings)
            self._indexed = acls
        return self._index

    def allowed(
        self,
        session: Session,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str = CLUSTER_NAME,
    ) -> bool:
        if self.settings is None:
            return True
        verdict = self._current().authorize(
            session.principal, session.host, operation, resource_type, name
        )
        if not verdict:
            logger.debug(
                "denied: principal=%s host=%s operation=%s resource=%s:%s",
                session.principal,
                session.host,
                operation.name,
                resource_type.name,
                name,
            )
        return verdict

    def denial(
        self,
        session: Session,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str = CLUSTER_NAME,
    ) -> str | None:
        """None if allowed, else the Kafka error a denial on this resource type is
        answered with (TOPIC_/GROUP_/CLUSTER_/TRANSACTIONAL_ID_AUTHORIZATION_FAILED)."""
        if self.allowed(session, operation, resource_type, name):
            return None
        return DENIAL_ERRORS[resource_type]

    def allowed_names(
        self,
        session: Session,
        operation: AclOperation,
        resource_type: ResourceType,
        names: Iterable[str],
    ) -> set[str]:
        """The names of ``names`` the principal may do ``operation`` on."""
        wanted = set(names)
        if self.settings is None:
            return wanted
        index = self._current()
        return {
            n
            for n in wanted
            if index.authorize(session.principal, session.host, operation, resource_type, n)
        }

    def allowed_any(
        self, session: Session, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        if self.settings is None:
            return True
        return self._current().authorize_any(
            session.principal, session.host, operation, resource_type
        )

    def operations(
        self,
        include: bool,
        session: Session,
        resource_type: ResourceType,
        name: str = CLUSTER_NAME,
    ) -> int:
        """A KIP-430 authorized-operations field (NOT_REQUESTED unless ``include``)."""
        if self.settings is None or not include:
            return requested(include, resource_type)
        index = self._current()

        def allowed(op: AclOperation) -> bool:
            return index.authorize(session.principal, session.host, op, resource_type, name)

        return requested(True, resource_type, allowed)


ALLOW_ALL: Final = Authorizer(lambda: {}, None)


def build_authorizer(config: BrokerConfig, acls: Callable[[], Mapping[str, Any]]) -> Authorizer:
    """The broker's authorizer from its properties."""
    name = config["authorizer.class.name"]
    if not name:
        return Authorizer(acls, None)
    if name == LEGACY_AUTHORIZER:
        logger.warning(
            "authorizer.class.name=%s is ZooKeeper-era Kafka's; odradek runs %s in its place",
            LEGACY_AUTHORIZER,
            STANDARD_AUTHORIZER,
        )
    settings = AuthorizerSettings(
        super_users=frozenset(config["super.users"] or ()),
        allow_if_no_acl=config["allow.everyone.if.no.acl.found"],
    )
    return Authorizer(acls, settings)


__all__ = [
    "ALLOW_ALL",
    "AUTHORIZERS",
    "DENIAL_ERRORS",
    "LEGACY_AUTHORIZER",
    "STANDARD_AUTHORIZER",
    "Authorizer",
    "build_authorizer",
]
