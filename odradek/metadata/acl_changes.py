"""ACL changes on the controller: the records CreateAcls and DeleteAcls commit.

How this works and why: each ACL is one ``AccessControlEntry`` record under an id the
controller gives it (a random UUID, as Kafka's AclControlManager does), and removing
one is a ``RemoveAccessControlEntry`` of that id, so the image's ``acls`` (id ->
``AclEntry``) is exactly the committed bindings. A creation is checked first
(security/acls.py's ``validate_binding``: INVALID_REQUEST naming what is wrong); one
that exists already, or that the same request adds twice, makes no record and
succeeds, as in Kafka. A deletion filter removes every binding it selects
(``filter_matches``) and reports them; a binding two filters select is removed once
but reported under both. Nothing here writes: controller.py commits what this returns.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence

from odradek.metadata.errors import ControllerError
from odradek.metadata.image import AclEntry, MetadataImage, MetadataRecord, acl_record
from odradek.security.acls import (
    AclFilter,
    InvalidAcl,
    filter_matches,
    validate_binding,
    validate_filter,
)


def create_acl_records(
    image: MetadataImage,
    bindings: Sequence[AclEntry],
    new_id: Callable[[], str] = lambda: str(uuid.uuid4()),
) -> tuple[list[MetadataRecord], list[ControllerError | None]]:
    """The records that add ``bindings`` and, per binding, None or its error."""
    existing = set(image.acls.values())
    records: list[MetadataRecord] = []
    outcomes: list[ControllerError | None] = []
    for binding in bindings:
        try:
            validate_binding(binding)
        except InvalidAcl as exc:
            outcomes.append(ControllerError("INVALID_REQUEST", str(exc)))
            continue
        outcomes.append(None)
        if binding in existing:
            continue
        existing.add(binding)
        records.append(acl_record(new_id(), binding))
    return records, outcomes


def delete_acl_records(
    image: MetadataImage, filters: Sequence[AclFilter]
) -> tuple[list[MetadataRecord], list[ControllerError | list[AclEntry]]]:
    """The records that remove what ``filters`` select and, per filter, the bindings
    it removed or its error."""
    removed: set[str] = set()
    records: list[MetadataRecord] = []
    outcomes: list[ControllerError | list[AclEntry]] = []
    for acl_filter in filters:
        try:
            validate_filter(acl_filter)
        except InvalidAcl as exc:
            outcomes.append(ControllerError("INVALID_REQUEST", str(exc)))
            continue
        matched = []
        for acl_id, binding in sorted(image.acls.items()):
            if not filter_matches(acl_filter, binding):
                continue
            matched.append(binding)
            if acl_id not in removed:
                removed.add(acl_id)
                records.append(MetadataRecord("RemoveAccessControlEntry", {"id": acl_id}))
        outcomes.append(matched)
    return records, outcomes


__all__ = ["create_acl_records", "delete_acl_records"]
