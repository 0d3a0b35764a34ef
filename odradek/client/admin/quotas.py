"""Admin operations on client quotas: DescribeClientQuotas and AlterClientQuotas (KIP-546).

confluent-kafka has no client-quota calls, so these follow Kafka's Java Admin
(``describeClientQuotas(ClientQuotaFilter)``, ``alterClientQuotas(Collection<
ClientQuotaAlteration>)``) in Python spelling: an entity is a mapping of entity type
(``user``, ``client-id``, ``ip``) to a name, None meaning the type's default. Describe
may go to any broker (each answers from its metadata); alter is forwarded by that
broker to the active controller. Each alteration gets its own answer.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from odradek.client._core.cluster import Cluster
from odradek.client._core.connection import request_entity
from odradek.client.admin.core import Answers, Outcome, check

DESCRIBE_CLIENT_QUOTAS: Final = 48
ALTER_CLIENT_QUOTAS: Final = 49
VERSIONS: Final = {DESCRIBE_CLIENT_QUOTAS: (0, 1), ALTER_CLIENT_QUOTAS: (0, 1)}
# ClientQuotaFilterComponent's match types on the wire.
MATCH_EXACT: Final = 0
MATCH_DEFAULT: Final = 1
MATCH_SPECIFIED: Final = 2


@dataclass(frozen=True, slots=True, init=False)
class ClientQuotaEntity(Mapping[str, str | None]):
    """``ClientQuotaEntity({"user": "alice", "client-id": None})``: alice's quota for
    client-ids without their own (the client-id default)."""

    entries: tuple[tuple[str, str | None], ...]

    def __init__(self, parts: Mapping[str, str | None]) -> None:
        object.__setattr__(self, "entries", tuple(sorted(parts.items())))

    def __getitem__(self, key: str) -> str | None:
        return dict(self.entries)[key]

    def __iter__(self) -> Iterator[str]:
        return iter(t for t, _ in self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def __hash__(self) -> int:
        return hash(self.entries)

    def __str__(self) -> str:
        return ", ".join(f"{t}={'<default>' if n is None else n}" for t, n in self.entries)


@dataclass(frozen=True, slots=True)
class ClientQuotaFilterComponent:
    """One entity type of a filter: an exact name, the default, or any name."""

    entity_type: str
    match: str | None = None
    match_type: int = MATCH_SPECIFIED

    @classmethod
    def of_entity(cls, entity_type: str, name: str) -> ClientQuotaFilterComponent:
        return cls(entity_type, name, MATCH_EXACT)

    @classmethod
    def of_default_entity(cls, entity_type: str) -> ClientQuotaFilterComponent:
        return cls(entity_type, None, MATCH_DEFAULT)

    @classmethod
    def of_entity_type(cls, entity_type: str) -> ClientQuotaFilterComponent:
        return cls(entity_type, None, MATCH_SPECIFIED)


@dataclass(frozen=True, slots=True)
class ClientQuotaFilter:
    """Entities with every component; ``strict``: and no other entity type."""

    components: tuple[ClientQuotaFilterComponent, ...] = ()
    strict: bool = False

    @classmethod
    def contains(cls, components: Sequence[ClientQuotaFilterComponent]) -> ClientQuotaFilter:
        return cls(tuple(components), False)

    @classmethod
    def contains_only(cls, components: Sequence[ClientQuotaFilterComponent]) -> ClientQuotaFilter:
        return cls(tuple(components), True)

    @classmethod
    def all(cls) -> ClientQuotaFilter:
        return cls((), False)


@dataclass(frozen=True, slots=True)
class ClientQuotaAlteration:
    """Set (a value) or remove (None) quota keys of one entity."""

    entity: ClientQuotaEntity
    ops: Mapping[str, float | None] = field(default_factory=dict)


async def describe_client_quotas(
    cluster: Cluster, quota_filter: ClientQuotaFilter
) -> dict[ClientQuotaEntity, dict[str, float]]:
    connection = await cluster.any_connection()
    v = connection.version_for(DESCRIBE_CLIENT_QUOTAS)
    components = tuple(
        request_entity(
            DESCRIBE_CLIENT_QUOTAS,
            v,
            "ComponentData",
            entity_type=c.entity_type,
            match_type=c.match_type,
            match=c.match,
        )
        for c in quota_filter.components
    )
    response = await connection.send(
        request_entity(DESCRIBE_CLIENT_QUOTAS, v, components=components, strict=quota_filter.strict)
    )
    check(response.error_code, "describe client quotas", response.error_message)
    return {
        ClientQuotaEntity({e.entity_type: e.entity_name for e in entry.entity}): {
            value.key: value.value for value in entry.values
        }
        for entry in response.entries or ()
    }


async def alter_client_quotas(
    cluster: Cluster, alterations: Sequence[ClientQuotaAlteration], validate_only: bool = False
) -> Answers[ClientQuotaEntity, Outcome]:
    connection = await cluster.any_connection()
    v = connection.version_for(ALTER_CLIENT_QUOTAS)
    entries = tuple(
        request_entity(
            ALTER_CLIENT_QUOTAS,
            v,
            "EntryData",
            entity=tuple(
                request_entity(ALTER_CLIENT_QUOTAS, v, "EntityData", entity_type=t, entity_name=n)
                for t, n in a.entity.entries
            ),
            ops=tuple(
                request_entity(
                    ALTER_CLIENT_QUOTAS,
                    v,
                    "OpData",
                    key=key,
                    value=0.0 if value is None else float(value),
                    remove=value is None,
                )
                for key, value in a.ops.items()
            ),
        )
        for a in alterations
    )
    response = await connection.send(
        request_entity(ALTER_CLIENT_QUOTAS, v, entries=entries, validate_only=validate_only)
    )
    found: Answers[ClientQuotaEntity, Outcome] = Answers()
    found.throttled(response)
    for entry in response.entries:
        entity = ClientQuotaEntity({e.entity_type: e.entity_name for e in entry.entity})
        found[entity] = Outcome(entry.error_code, entry.error_message)
    return found


def entity_of(parts: Any) -> ClientQuotaEntity:
    """A ``ClientQuotaEntity`` from itself or a plain mapping."""
    return parts if isinstance(parts, ClientQuotaEntity) else ClientQuotaEntity(parts)


__all__ = [
    "ClientQuotaAlteration",
    "ClientQuotaEntity",
    "ClientQuotaFilter",
    "ClientQuotaFilterComponent",
    "alter_client_quotas",
    "describe_client_quotas",
]
