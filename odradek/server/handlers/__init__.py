"""The handler registry: one entry per API key, also what ApiVersions advertises.

How this works and why: each module in this package handles one API family and
registers its functions with ``@handles(api_key, min_version, max_version)``. The
version range is the promise made to clients in ApiVersions, so it lists only
versions the handler implements and the tests exercise. Handlers are thin: decode is
done, they call the subsystem that owns the logic and build the response entity.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from odradek.protocol.messages import Request
    from odradek.server.broker import Broker

HandlerFunction = Callable[["Broker", "Request"], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class HandlerSpec:
    api_key: int
    min_version: int
    max_version: int
    function: HandlerFunction


REGISTRY: dict[int, HandlerSpec] = {}


def handles(
    api_key: int, min_version: int, max_version: int
) -> Callable[[HandlerFunction], HandlerFunction]:
    def register(function: HandlerFunction) -> HandlerFunction:
        assert api_key not in REGISTRY, f"API key {api_key} registered twice"
        REGISTRY[api_key] = HandlerSpec(api_key, min_version, max_version, function)
        return function

    return register


def supported_versions() -> dict[int, tuple[int, int]]:
    load_all()
    return {key: (spec.min_version, spec.max_version) for key, spec in REGISTRY.items()}


def load_all() -> None:
    """Import every handler module so that its ``@handles`` entries register."""
    from odradek.server.handlers import (  # noqa: F401
        api_versions,
        cluster_admin,
        configs,
        consumer_groups,
        fetch,
        group_offsets,
        groups,
        metadata,
        offsets,
        produce,
        producer_ids,
        records_admin,
        topics,
        topics_admin,
    )
