"""Admin operations on configs: DescribeConfigs, AlterConfigs and IncrementalAlterConfigs.

How this works and why: a broker resource named by a node id must be asked of that
broker (it answers only for itself); topic resources (and the cluster-wide broker
default, an empty name) may go to any broker. Resources are grouped by destination
into one request each, and every resource gets its own answer: an ``Outcome`` and, for
describe, its ``ConfigEntry`` values. AlterConfigs is the legacy call that replaces a
resource's whole dynamic config set (unlisted keys revert to their defaults);
IncrementalAlterConfigs sets, deletes, appends or subtracts single keys.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from odradek.client._core.cluster import Cluster
from odradek.client._core.connection import BrokerConnection, request_entity
from odradek.client.admin.core import (
    ALTER_CONFIGS,
    DESCRIBE_CONFIGS,
    INCREMENTAL_ALTER_CONFIGS,
    Answers,
    Outcome,
)
from odradek.client.admin.types import ConfigEntry, ConfigResource, ConfigSource, ResourceType


@dataclass(slots=True)
class ConfigsAnswer:
    """One resource's DescribeConfigs answer."""

    outcome: Outcome
    entries: dict[str, ConfigEntry] = field(default_factory=dict)


def _destination(resource: ConfigResource) -> int | None:
    """The node a resource must be sent to (None: any broker)."""
    if resource.restype == ResourceType.BROKER and resource.name.isdigit():
        return int(resource.name)
    return None


async def _per_destination(
    cluster: Cluster,
    resources: Sequence[ConfigResource],
    send: Callable[[BrokerConnection, list[ConfigResource]], Any],
) -> None:
    groups: dict[int | None, list[ConfigResource]] = {}
    for resource in resources:
        groups.setdefault(_destination(resource), []).append(resource)
    for node_id, members in groups.items():
        if node_id is None:
            connection = await cluster.any_connection()
        else:
            await cluster.refresh()
            connection = await cluster.connection(node_id)
        await send(connection, members)


# Config resources number groups 32 on the wire (Kafka's ConfigResource.Type.GROUP,
# KIP-848) where ACLs' ResourceType says 3: the client speaks ResourceType, as
# confluent-kafka does, and translates at the wire (librdkafka does the same).
CONFIG_GROUP_TYPE = 32


def _wire_type(restype: ResourceType) -> int:
    return CONFIG_GROUP_TYPE if restype == ResourceType.GROUP else int(restype)


def _key(resource_type: int, resource_name: str) -> ConfigResource:
    restype = ResourceType.GROUP if resource_type == CONFIG_GROUP_TYPE else resource_type
    return ConfigResource(ResourceType(restype), resource_name)


def _entry(c: Any) -> ConfigEntry:
    source = ConfigSource.of(c.config_source)
    return ConfigEntry(
        c.name,
        c.value,
        source=source,
        is_read_only=c.read_only,
        is_default=source == ConfigSource.DEFAULT_CONFIG,
        is_sensitive=c.is_sensitive,
        synonyms={
            s.name: ConfigEntry(s.name, s.value, ConfigSource.of(s.source), is_synonym=True)
            for s in c.synonyms
        },
    )


async def describe_configs(
    cluster: Cluster,
    resources: Sequence[ConfigResource],
    include_synonyms: bool = True,
    keys: Mapping[ConfigResource, Sequence[str] | None] | None = None,
) -> Answers[ConfigResource, ConfigsAnswer]:
    """Each resource's configs (only ``keys[resource]`` when given)."""
    found: Answers[ConfigResource, ConfigsAnswer] = Answers()

    async def send(connection: BrokerConnection, members: list[ConfigResource]) -> None:
        v = connection.version_for(DESCRIBE_CONFIGS)
        wanted = tuple(
            request_entity(
                DESCRIBE_CONFIGS,
                v,
                "DescribeConfigsResource",
                resource_type=_wire_type(r.restype),
                resource_name=r.name,
                configuration_keys=None
                if keys is None or keys.get(r) is None
                else tuple(keys[r] or ()),
            )
            for r in members
        )
        response = await connection.send(
            request_entity(
                DESCRIBE_CONFIGS,
                v,
                resources=wanted,
                include_synonyms=include_synonyms,
                include_documentation=False,
            )
        )
        found.throttled(response)
        for result in response.results:
            found[_key(result.resource_type, result.resource_name)] = ConfigsAnswer(
                Outcome(result.error_code, result.error_message),
                {c.name: _entry(c) for c in result.configs},
            )

    await _per_destination(cluster, resources, send)
    return found


async def alter_configs(
    cluster: Cluster, resources: Sequence[ConfigResource], validate_only: bool = False
) -> Answers[ConfigResource, Outcome]:
    """Replace each resource's dynamic configs with ``resource.set_config_dict``."""
    found: Answers[ConfigResource, Outcome] = Answers()

    async def send(connection: BrokerConnection, members: list[ConfigResource]) -> None:
        v = connection.version_for(ALTER_CONFIGS)
        wanted = tuple(
            request_entity(
                ALTER_CONFIGS,
                v,
                "AlterConfigsResource",
                resource_type=_wire_type(r.restype),
                resource_name=r.name,
                configs=tuple(
                    request_entity(ALTER_CONFIGS, v, "AlterableConfig", name=k, value=val)
                    for k, val in r.set_config_dict.items()
                ),
            )
            for r in members
        )
        response = await connection.send(
            request_entity(ALTER_CONFIGS, v, resources=wanted, validate_only=validate_only)
        )
        found.throttled(response)
        for r in response.responses:
            found[_key(r.resource_type, r.resource_name)] = Outcome(r.error_code, r.error_message)

    await _per_destination(cluster, resources, send)
    return found


async def incremental_alter_configs(
    cluster: Cluster, resources: Sequence[ConfigResource], validate_only: bool = False
) -> Answers[ConfigResource, Outcome]:
    """Apply each resource's ``incremental_configs`` (SET, DELETE, APPEND, SUBTRACT)."""
    found: Answers[ConfigResource, Outcome] = Answers()

    async def send(connection: BrokerConnection, members: list[ConfigResource]) -> None:
        v = connection.version_for(INCREMENTAL_ALTER_CONFIGS)
        wanted = tuple(
            request_entity(
                INCREMENTAL_ALTER_CONFIGS,
                v,
                "AlterConfigsResource",
                resource_type=_wire_type(r.restype),
                resource_name=r.name,
                configs=tuple(
                    request_entity(
                        INCREMENTAL_ALTER_CONFIGS,
                        v,
                        "AlterableConfig",
                        name=e.name,
                        config_operation=int(e.incremental_operation or 0),
                        value=e.value,
                    )
                    for e in r.incremental_configs
                ),
            )
            for r in members
        )
        response = await connection.send(
            request_entity(
                INCREMENTAL_ALTER_CONFIGS, v, resources=wanted, validate_only=validate_only
            )
        )
        found.throttled(response)
        for r in response.responses:
            found[_key(r.resource_type, r.resource_name)] = Outcome(r.error_code, r.error_message)

    await _per_destination(cluster, resources, send)
    return found
