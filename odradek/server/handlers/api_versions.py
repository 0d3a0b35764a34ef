"""ApiVersions (key 18): the versions this listener's plane implements, from the registry.

Registered once per plane (``_answer_for``), so a controller listener lists only the
controller plane's APIs and a broker listener only the client APIs.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from odradek.protocol.build import error_code, make, response_module
from odradek.protocol.messages import API_VERSIONS_KEY, Request, encode_response
from odradek.server.handlers import Plane, handles, supported_versions

if TYPE_CHECKING:
    from odradek.server.handlers import HandlerFunction
    from odradek.server.services import BrokerServices

_NO_THROTTLE = datetime.timedelta(0)


def _body(version: int, supported: dict[int, tuple[int, int]], error: str) -> Any:
    module = response_module(API_VERSIONS_KEY, version)
    keys = tuple(
        make(module.ApiVersion, api_key=key, min_version=low, max_version=high)
        for key, (low, high) in sorted(supported.items())
    )
    return make(
        module.ApiVersionsResponse,
        error_code=error_code(error),
        api_keys=keys,
        throttle_time=_NO_THROTTLE,
        supported_features=(),
        finalized_features_epoch=-1,
        finalized_features=(),
        zk_migration_ready=False,
    )


def unsupported_version_response(
    correlation_id: int, supported: dict[int, tuple[int, int]]
) -> bytes:
    """Kafka answers an ApiVersions version it does not know with a v0 response."""
    return encode_response(
        API_VERSIONS_KEY, 0, correlation_id, _body(0, supported, "UNSUPPORTED_VERSION")
    )


def _answer_for(plane: Plane) -> HandlerFunction:
    async def api_versions(services: BrokerServices, request: Request) -> Any:
        return _body(request.header.api_version, supported_versions(plane), "NONE")

    api_versions.__name__ = f"api_versions_{plane.value}"
    return api_versions


for _plane in Plane:
    handles(API_VERSIONS_KEY, 0, 4, plane=_plane)(_answer_for(_plane))
