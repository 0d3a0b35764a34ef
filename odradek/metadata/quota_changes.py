"""Client quota changes and queries on the metadata image (KIP-546's two APIs).

How this works and why: AlterClientQuotas ends as one ``ClientQuota`` record per key
that changes (image.py's ``quota_record``: a value sets it, ``remove`` drops it), so
the loader applies quotas key by key and every broker reads the same
``MetadataImage.client_quotas``. The checks are Kafka's (its controller's
ClientQuotaControlManager), each an INVALID_REQUEST for that entry alone:

- an entity is ``user``, ``client-id``, both, or ``ip`` alone; no type twice, none
  unknown, never empty. A name may be None: the type's default.
- a key must belong to the entity's kind (``security/quotas.py``: the byte rates,
  ``request_percentage`` and ``controller_mutation_rate`` for users and client-ids,
  ``connection_creation_rate`` for ips); no key twice in one entry; values are
  positive, and whole numbers for Kafka's integer-typed keys (the byte rates and the
  connection rate). An ip's name must be an IP address.

``describe`` answers DescribeClientQuotas from an image: filter components match a
type's exact name, its default, or any name (``SPECIFIED``); ``strict`` keeps only
entities with no types beyond the filter's.

Nothing here writes: the controller commits what ``quota_change_records`` returns.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from odradek.metadata.errors import ControllerError
from odradek.metadata.image import MetadataImage, MetadataRecord, QuotaEntity, quota_record
from odradek.security.quotas import (
    CLIENT_ID,
    CLIENT_KEYS,
    CONNECTION_CREATION_RATE,
    CONSUMER_BYTE_RATE,
    ENTITY_TYPES,
    IP,
    IP_KEYS,
    PRODUCER_BYTE_RATE,
    USER,
)

# DescribeClientQuotas' match types.
MATCH_EXACT: Final = 0
MATCH_DEFAULT: Final = 1
MATCH_SPECIFIED: Final = 2
# Keys Kafka types as integers (LONG/INT): a fraction is refused.
INTEGER_KEYS: Final = frozenset({PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, CONNECTION_CREATION_RATE})


@dataclass(frozen=True, slots=True)
class QuotaAlteration:
    """One AlterClientQuotas entry: an entity and its ops (value None removes the key)."""

    entity: QuotaEntity
    ops: tuple[tuple[str, float | None], ...]


def check_entity(parts: Sequence[tuple[str, str | None]]) -> QuotaEntity:
    """The entity, sorted as the image keys it; raises INVALID_REQUEST."""
    if not parts:
        raise ControllerError("INVALID_REQUEST", "a quota entity needs at least one type")
    types = [t for t, _ in parts]
    for entity_type in types:
        if entity_type not in ENTITY_TYPES:
            raise ControllerError("INVALID_REQUEST", f"unknown quota entity type {entity_type!r}")
    if len(set(types)) != len(types):
        raise ControllerError("INVALID_REQUEST", "a quota entity names a type twice")
    if IP in types and len(types) > 1:
        raise ControllerError(
            "INVALID_REQUEST", "invalid quota entity combination: ip cannot be combined"
        )
    for entity_type, name in parts:
        if entity_type == IP and name is not None:
            try:
                ipaddress.ip_address(name)
            except ValueError:
                raise ControllerError(
                    "INVALID_REQUEST", f"{name!r} is not a valid IP address"
                ) from None
    return tuple(sorted((t, n) for t, n in parts))


def check_ops(entity: QuotaEntity, ops: Sequence[tuple[str, float | None]]) -> None:
    """Raises INVALID_REQUEST for a key the entity cannot carry or a bad value."""
    allowed = IP_KEYS if any(t == IP for t, _ in entity) else CLIENT_KEYS
    keys = [k for k, _ in ops]
    if len(set(keys)) != len(keys):
        raise ControllerError("INVALID_REQUEST", "a quota key is set twice in one entry")
    for key, value in ops:
        if key not in allowed:
            raise ControllerError(
                "INVALID_REQUEST", f"invalid quota key {key!r} for entity {describe_entity(entity)}"
            )
        if value is None:
            continue
        if not math.isfinite(value) or value <= 0:
            raise ControllerError(
                "INVALID_REQUEST", f"quota {key} must be a positive number, not {value}"
            )
        if key in INTEGER_KEYS and value != int(value):
            raise ControllerError(
                "INVALID_REQUEST", f"quota {key} must be a whole number, not {value}"
            )


def quota_change_records(image: MetadataImage, alteration: QuotaAlteration) -> list[MetadataRecord]:
    """The records of one checked entry: only keys whose value changes."""
    check_ops(alteration.entity, alteration.ops)
    current = image.client_quotas.get(alteration.entity, {})
    records = []
    for key, value in alteration.ops:
        if value is None:
            if key in current:
                records.append(quota_record(alteration.entity, key, None))
        elif current.get(key) != value:
            records.append(quota_record(alteration.entity, key, float(value)))
    return records


def describe(
    image: MetadataImage,
    components: Sequence[tuple[str, int, str | None]],
    strict: bool,
) -> list[tuple[QuotaEntity, Mapping[str, float]]]:
    """The entities matching the filter, with their quotas; raises INVALID_REQUEST.
    ``components`` are (entity type, match type, match)."""
    exact: dict[str, str | None] = {}
    any_name: set[str] = set()
    for entity_type, match_type, match in components:
        if entity_type in exact or entity_type in any_name:
            raise ControllerError("INVALID_REQUEST", f"entity type {entity_type!r} filtered twice")
        if match_type == MATCH_EXACT:
            if match is None:
                raise ControllerError("INVALID_REQUEST", "an exact match needs a name")
            exact[entity_type] = match
        elif match_type == MATCH_DEFAULT:
            exact[entity_type] = None
        elif match_type == MATCH_SPECIFIED:
            any_name.add(entity_type)
        else:
            raise ControllerError("INVALID_REQUEST", f"unknown match type {match_type}")
    found = []
    for entity, values in image.client_quotas.items():
        parts = dict(entity)
        if strict and len(parts) != len(exact) + len(any_name):
            continue
        if any(t not in parts or parts[t] != name for t, name in exact.items()):
            continue
        if any(t not in parts for t in any_name):
            continue
        found.append((entity, values))
    found.sort(key=lambda item: [(t, n or "") for t, n in item[0]])
    return found


def describe_entity(entity: QuotaEntity) -> str:
    """``user 'alice', client-id <default>`` for messages."""
    return ", ".join(f"{t} {'<default>' if n is None else repr(n)}" for t, n in entity)


__all__ = [
    "CLIENT_ID",
    "MATCH_DEFAULT",
    "MATCH_EXACT",
    "MATCH_SPECIFIED",
    "USER",
    "QuotaAlteration",
    "check_entity",
    "check_ops",
    "describe",
    "describe_entity",
    "quota_change_records",
]
