"""The replication throttles of ``odradek reassign-partitions`` (KIP-73), as Kafka's tool sets them.

How this works and why: a reassignment copies whole partitions to their new replicas,
which left alone takes every byte per second the links and disks give and starves the
clients. ``--execute --throttle N`` bounds the copy before it starts, with the configs
the brokers enforce (replica/replication_quota.py):

- on every broker the move involves (a current or a target replica of a moving
  partition) ``leader.replication.throttled.rate`` and
  ``follower.replication.throttled.rate`` = N bytes/s, and with
  ``--replica-alter-log-dirs-throttle M`` ``replica.alter.log.dirs.io.max.bytes.per.second``
  = M — each a per-broker config, so each is sent to its broker;
- on every moving topic ``leader.replication.throttled.replicas`` = the current
  replicas of its moving partitions (any of them may lead and send) and
  ``follower.replication.throttled.replicas`` = the replicas being added (the ones
  that fetch), as ``partition:broker`` entries. They are APPENDed to what the topic
  already lists, so an ``--additional`` move of the same topic keeps the first
  move's throttles (Kafka's tool recomputes both moves; the result is the same).

``--additional`` with ``--throttle`` sets the rates again — Kafka's way to change the
throttle of a running reassignment. ``--verify``, once every partition of the plan is
done, and ``--cancel`` remove the throttles again (the rates on every broker of the
cluster, the lists on the plan's topics) unless ``--preserve-throttles``: a throttle
left behind would slow the next broker recovery with nobody knowing why.

The changes are IncrementalAlterConfigs (API 44) requests; a broker's refusal ends the
run with one line naming the resource and Kafka's error.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Final

from kio.schema.errors import ErrorCode

from odradek.client._core.connection import (
    BrokerConnection,
    KafkaConnectionError,
    UnsupportedVersionError,
    request_entity,
)

INCREMENTAL_ALTER_KEY: Final = 44
TOPIC_TYPE: Final = 2
BROKER_TYPE: Final = 4
SET: Final = 0
DELETE: Final = 1
APPEND: Final = 2
LEADER_RATE: Final = "leader.replication.throttled.rate"
FOLLOWER_RATE: Final = "follower.replication.throttled.rate"
ALTER_LOG_DIRS_RATE: Final = "replica.alter.log.dirs.io.max.bytes.per.second"
LEADER_REPLICAS: Final = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS: Final = "follower.replication.throttled.replicas"
VERIFY_WARNING: Final = (
    "Warning: You must run --verify periodically, until the reassignment completes, "
    "to ensure the throttle is removed."
)

Assignment = Mapping[tuple[str, int], Sequence[int]]
Addresses = Mapping[int, tuple[str, int]]
Connect = Callable[[Sequence[tuple[str, int]]], AbstractAsyncContextManager[BrokerConnection]]
ConfigOps = list[tuple[str, int, str | None]]  # name, operation, value


class ThrottleError(Exception):
    """A throttle the brokers refused or could not be reached for (one line)."""


# -- what to throttle (pure) ---------------------------------------------------------------
def moving(current: Assignment, plan: Assignment) -> dict[tuple[str, int], tuple[int, ...]]:
    """The plan's partitions whose replica set changes."""
    return {
        tp: tuple(target)
        for tp, target in plan.items()
        if tuple(current.get(tp, ())) != tuple(target)
    }


def leader_throttles(current: Assignment, plan: Assignment) -> dict[str, str]:
    """Per moving topic, its moving partitions' current replicas (``p:b,...``)."""
    found: dict[str, set[tuple[int, int]]] = {}
    for topic, index in moving(current, plan):
        found.setdefault(topic, set()).update((index, b) for b in current.get((topic, index), ()))
    return {topic: _entries(pairs) for topic, pairs in sorted(found.items()) if pairs}


def follower_throttles(current: Assignment, plan: Assignment) -> dict[str, str]:
    """Per moving topic, the replicas its moving partitions gain (``p:b,...``)."""
    found: dict[str, set[tuple[int, int]]] = {}
    for (topic, index), target in moving(current, plan).items():
        have = set(current.get((topic, index), ()))
        found.setdefault(topic, set()).update((index, b) for b in target if b not in have)
    return {topic: _entries(pairs) for topic, pairs in sorted(found.items()) if pairs}


def involved_brokers(current: Assignment, plan: Assignment) -> list[int]:
    """Every broker holding a current or a target replica of a moving partition."""
    brokers: set[int] = set()
    for tp, target in moving(current, plan).items():
        brokers.update(current.get(tp, ()))
        brokers.update(target)
    return sorted(brokers)


def _entries(pairs: set[tuple[int, int]]) -> str:
    return ",".join(f"{p}:{b}" for p, b in sorted(pairs))


# -- setting and clearing ------------------------------------------------------------------
async def set_throttles(
    connect: Connect,
    bootstrap: BrokerConnection,
    addresses: Addresses,
    current: Assignment,
    plan: Assignment,
    throttle: int,
    alter_dirs_throttle: int,
) -> list[str]:
    """The rates on the involved brokers and the lists on the moving topics, before the
    move starts; the lines Kafka's tool prints about them."""
    lines: list[str] = []
    broker_ops: ConfigOps = []
    if throttle >= 0:
        broker_ops += [(LEADER_RATE, SET, str(throttle)), (FOLLOWER_RATE, SET, str(throttle))]
    if alter_dirs_throttle >= 0:
        broker_ops.append((ALTER_LOG_DIRS_RATE, SET, str(alter_dirs_throttle)))
    if not broker_ops:
        return lines
    for broker in involved_brokers(current, plan):
        await _alter_broker(connect, addresses, broker, broker_ops)
    if throttle >= 0:
        leaders, followers = leader_throttles(current, plan), follower_throttles(current, plan)
        topics: dict[str, ConfigOps] = {}
        for name, value in leaders.items():
            topics.setdefault(name, []).append((LEADER_REPLICAS, APPEND, value))
        for name, value in followers.items():
            topics.setdefault(name, []).append((FOLLOWER_REPLICAS, APPEND, value))
        if topics:
            await alter(bootstrap, [(TOPIC_TYPE, name, ops) for name, ops in topics.items()])
        lines.append(VERIFY_WARNING)
        lines.append(f"The inter-broker throttle limit was set to {throttle} B/s")
    if alter_dirs_throttle >= 0:
        lines.append(f"The replica-alter-dir throttle limit was set to {alter_dirs_throttle} B/s")
    return lines


async def clear_throttles(
    connect: Connect, bootstrap: BrokerConnection, addresses: Addresses, topics: Sequence[str]
) -> list[str]:
    """Remove the three rates from every broker and both lists from ``topics``."""
    ops: ConfigOps = [(n, DELETE, None) for n in (LEADER_RATE, FOLLOWER_RATE, ALTER_LOG_DIRS_RATE)]
    brokers = sorted(addresses)
    for broker in brokers:
        await _alter_broker(connect, addresses, broker, ops)
    names = sorted(set(topics))
    if names:
        cleared: ConfigOps = [(LEADER_REPLICAS, DELETE, None), (FOLLOWER_REPLICAS, DELETE, None)]
        await alter(bootstrap, [(TOPIC_TYPE, name, cleared) for name in names])
    return [
        f"Clearing broker-level throttles on brokers {','.join(str(b) for b in brokers)}",
        *(f"Clearing topic-level throttles on topic {name}" for name in names),
    ]


async def _alter_broker(
    connect: Connect, addresses: Addresses, broker: int, ops: ConfigOps
) -> None:
    """A broker's own configs are changed on that broker (it answers only for itself)."""
    address = addresses.get(broker)
    if address is None:
        raise ThrottleError(f"broker {broker} is not in the cluster's metadata")
    async with connect([address]) as connection:
        await alter(connection, [(BROKER_TYPE, str(broker), ops)])


async def alter(
    connection: BrokerConnection, resources: Sequence[tuple[int, str, ConfigOps]]
) -> None:
    """One IncrementalAlterConfigs; ThrottleError naming the first refused resource."""
    try:
        version = connection.version_for(INCREMENTAL_ALTER_KEY)
    except UnsupportedVersionError:
        raise ThrottleError("the broker does not serve IncrementalAlterConfigs") from None
    request: Any = request_entity(
        INCREMENTAL_ALTER_KEY,
        version,
        validate_only=False,
        resources=tuple(
            request_entity(
                INCREMENTAL_ALTER_KEY,
                version,
                "AlterConfigsResource",
                resource_type=kind,
                resource_name=name,
                configs=tuple(
                    request_entity(
                        INCREMENTAL_ALTER_KEY,
                        version,
                        "AlterableConfig",
                        name=key,
                        config_operation=op,
                        value=value,
                    )
                    for key, op, value in ops
                ),
            )
            for kind, name, ops in resources
        ),
    )
    try:
        response = await connection.send(request)
    except (KafkaConnectionError, OSError) as error:
        raise ThrottleError(f"the broker connection failed: {error}") from None
    for result in response.responses:
        if result.error_code != ErrorCode.none:
            what = "broker" if int(result.resource_type) == BROKER_TYPE else "topic"
            message = f": {result.error_message}" if result.error_message else ""
            raise ThrottleError(
                f"setting the throttles of {what} {result.resource_name} failed: "
                f"{result.error_code.name.upper()}{message}"
            )
