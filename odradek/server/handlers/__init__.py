"""The handler registry: one table per listener plane, also what ApiVersions advertises.

How this works and why: each module in this package handles one API family and
registers its functions with ``@handles(api_key, min_version, max_version, plane=...)``.
The version range is the promise made to clients in ApiVersions, so it lists only
versions the handler implements and the tests exercise. Handlers are thin: decode is
done, they call the subsystem that owns the logic (through the narrow interfaces of
``server/services.py``, never the Broker object) and build the response entity.

A listener serves one *plane*, as in Kafka: a broker listener answers the client APIs
(``Plane.BROKER``), a controller listener (``controller.listener.names``) the quorum
and broker-to-controller APIs (``Plane.CONTROLLER``: Vote, BeginQuorumEpoch,
EndQuorumEpoch, metadata Fetch, BrokerRegistration/Heartbeat, AlterPartition,
AllocateProducerIds, and the admin requests brokers forward: CreateTopics,
DeleteTopics, CreatePartitions, AlterConfigs, IncrementalAlterConfigs,
AlterUserScramCredentials, served by the broker plane's own handlers). Each plane has
its own table, so an API registered on one plane is, on the other, exactly an unknown
key: the Dispatcher of that plane closes the connection, and ApiVersions there does
not list it. ApiVersions is on both.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from odradek.protocol.messages import Request


class Plane(enum.Enum):
    """Which listeners serve an API: client-facing brokers, or the controller quorum."""

    BROKER = "broker"
    CONTROLLER = "controller"


# The admin APIs a node answers on either listener (forwarded or gated on the controller).
BOTH_PLANES: Final = (Plane.BROKER, Plane.CONTROLLER)


# The first argument is the plane's services: ``BrokerServices`` on the broker plane,
# ``ControllerServices`` on the controller plane (each handler annotates its own).
HandlerFunction = Callable[[Any, "Request"], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class HandlerSpec:
    api_key: int
    min_version: int
    max_version: int
    function: HandlerFunction


REGISTRY: dict[Plane, dict[int, HandlerSpec]] = {plane: {} for plane in Plane}


def handles(
    api_key: int,
    min_version: int,
    max_version: int,
    plane: Plane | Iterable[Plane] = Plane.BROKER,
) -> Callable[[HandlerFunction], HandlerFunction]:
    planes = (plane,) if isinstance(plane, Plane) else tuple(plane)
    assert planes, f"API key {api_key} registered on no plane"

    def register(function: HandlerFunction) -> HandlerFunction:
        for each in planes:
            table = REGISTRY[each]
            assert api_key not in table, f"API key {api_key} registered twice on {each.value}"
            table[api_key] = HandlerSpec(api_key, min_version, max_version, function)
        return function

    return register


def plane_handlers(plane: Plane = Plane.BROKER) -> Mapping[int, HandlerSpec]:
    """The handlers of one plane, by API key (every module loaded)."""
    load_all()
    return REGISTRY[plane]


def supported_versions(plane: Plane = Plane.BROKER) -> dict[int, tuple[int, int]]:
    specs = plane_handlers(plane)
    return {key: (spec.min_version, spec.max_version) for key, spec in specs.items()}


def load_all() -> None:
    """Import every handler module so that its ``@handles`` entries register."""
    from odradek.server.handlers import (  # noqa: F401
        acls,
        api_versions,
        broker_registration,
        cluster_admin,
        configs,
        consumer_groups,
        fetch,
        group_offsets,
        groups,
        leadership,
        metadata,
        offsets,
        produce,
        producer_ids,
        quorum,
        quotas,
        reassignments,
        records_admin,
        replica_log_dirs,
        sasl,
        scram,
        topics,
        topics_admin,
        transactions,
        txn_markers,
    )
