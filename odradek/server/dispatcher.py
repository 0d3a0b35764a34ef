"""Dispatcher: frame → decoded request → handler → encoded response, for one plane.

There is one Dispatcher per listener plane (handlers/__init__.py): it knows only its
plane's handlers, so an API of the other plane is refused exactly like an unknown key
(closed connection; ApiVersions there does not list it). Handlers get their plane's
narrow services (services.py: ``BrokerServices``, or ``ControllerServices`` on a
controller listener), not the Broker.

How this works and why: this is the API layer of seeds/002. It owns the three ways a
request can fail before a handler runs: an unsupported ApiVersions version is
answered with UNSUPPORTED_VERSION and the supported list (clients then retry with
v0); any other unsupported key or version, and any frame that does not decode, closes
the connection with a log line, as Kafka does — there is no way to answer a request
whose schema we do not know. A handler that raises by mistake gets the same
treatment plus a logged traceback, so one bad request never takes the broker down.

Each request that reaches a handler is timed, from its frame to its response, into a
``RequestTimes`` histogram by Kafka's request name (request_metrics.py; Kafka's
RequestMetrics TotalTimeMs), which /metrics exports.

On a SASL listener, requests pass a gate first (``_gate``, rules in
handlers/sasl.py): until the connection has authenticated, and once its session
lifetime (KIP-368) has passed, only ApiVersions, SaslHandshake and SaslAuthenticate
are served; anything else closes the connection with a log line. The gate reads only
the fixed header, so an unauthenticated peer's requests are never decoded.

The lines about bad requests are rate-limited per peer address, malformed and
unsupported apart (``PeerWarnings``: one per address per 10 s, then a periodic "N
more suppressed" count), so a client sending garbage in a loop cannot fill the log.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import time
from typing import TYPE_CHECKING, Any

from odradek.network.connection import CloseConnection, ConnectionContext, Response
from odradek.network.warn_limit import PeerWarnings
from odradek.protocol.messages import (
    API_VERSIONS_KEY,
    MalformedRequest,
    UnsupportedRequest,
    decode_request,
    encode_response,
    peek_header,
)
from odradek.security.quotas import REQUEST_PERCENTAGE
from odradek.server import mutation_quota
from odradek.server.authorized_operations import AclOperation, ResourceType
from odradek.server.handlers import Plane, plane_handlers
from odradek.server.quotas import ClientQuotaManager, TimedCall
from odradek.server.request_metrics import RequestTimes

if TYPE_CHECKING:
    from odradek.server.authorizer import Authorizer
    from odradek.server.services import BrokerServices, ControllerServices

logger = logging.getLogger(__name__)

PRODUCE_KEY = 0
FETCH_KEY = 1
_BEFORE_LOGIN = frozenset({API_VERSIONS_KEY, 17, 36})  # + SaslHandshake, SaslAuthenticate


class Dispatcher:
    def __init__(
        self,
        services: BrokerServices | ControllerServices,
        plane: Plane = Plane.BROKER,
        request_times: RequestTimes | None = None,
    ) -> None:
        self.services = services
        self.plane = plane
        # Shared by the planes' dispatchers: one histogram per request name per process.
        self.request_times = request_times if request_times is not None else RequestTimes()
        self.handlers = dict(plane_handlers(plane))
        # Client quotas (server/quotas.py): the broker plane's services carry them.
        self.client_quotas: ClientQuotaManager | None = getattr(services, "client_quotas", None)
        self.supported = {k: (s.min_version, s.max_version) for k, s in self.handlers.items()}
        # Two kinds, limited apart: a flood of one does not hide the first of the other.
        self.malformed = PeerWarnings(logger, "malformed-request lines")
        self.unsupported = PeerWarnings(logger, "unsupported-request lines")
        # A controller listener serves nodes: with an authorizer on, each request needs
        # CLUSTER_ACTION on the cluster (Kafka's rule for the controller's APIs and for
        # forwarded requests), or the connection is closed with a line saying why.
        gate = getattr(services, "peer_authorizer", None)
        self.peer_authorizer: Authorizer | None = (
            gate if gate is not None and gate.settings is not None else None
        )
        self.refused_peers = PeerWarnings(logger, "unauthorized-controller-request lines")

    async def __call__(self, frame: bytes, context: ConnectionContext) -> Response | None:
        start = time.perf_counter()
        session = context.session
        if not session.authenticated or session.state:
            self._gate(frame, context)
        try:
            request = decode_request(
                frame,
                self.supported,
                listener=context.listener,
                peer=context.peer,
                session=context.session,
            )
        except UnsupportedRequest as error:
            if error.api_key == API_VERSIONS_KEY:
                from odradek.server.handlers.api_versions import unsupported_version_response

                return Response(
                    [unsupported_version_response(error.correlation_id, self.supported)]
                )
            self.unsupported.warn(
                context.peer, "closing connection from %s: %s", context.peer, error
            )
            raise CloseConnection() from None
        except MalformedRequest as error:
            self.malformed.warn(
                context.peer,
                "closing connection from %s: malformed request: %s",
                context.peer,
                error,
            )
            raise CloseConnection() from None
        header = request.header
        if self.peer_authorizer is not None and header.api_key not in _BEFORE_LOGIN:
            self._check_peer(request, context)
        spec = self.handlers[header.api_key]
        quotas = self.client_quotas
        timed = None
        mutations: list[int] | None = None
        if quotas is not None and mutation_quota.applies(quotas, header.api_key):
            refused = mutation_quota.refusal(quotas, request)
            if refused is not None:  # KIP-599: already past the bound
                body, throttle_ms = refused
                encoded = encode_response(
                    header.api_key, header.api_version, header.correlation_id, body
                )
                return Response([encoded], throttle_ms=throttle_ms)
            mutations = mutation_quota.mutations(
                request,
                self.services.metadata.image,
                self.services.config.static["num.partitions"],
            )
        try:
            if quotas is not None and quotas.enabled(REQUEST_PERCENTAGE):
                timed = TimedCall(spec.function(self.services, request))
                result = await timed
            else:
                result = await spec.function(self.services, request)
        except CloseConnection:
            raise
        except Exception:
            logger.exception(
                "handler for API %d v%d failed; closing connection from %s",
                header.api_key,
                header.api_version,
                context.peer,
            )
            raise CloseConnection() from None
        if result is None or isinstance(result, Response):  # None: produce with acks=0
            response = result
        else:
            response = Response(
                [encode_response(header.api_key, header.api_version, header.correlation_id, result)]
            )
        if quotas is not None:
            extra = (
                0
                if mutations is None
                else mutation_quota.record(quotas, request, mutations, result)
            )
            response = throttle(quotas, request, len(frame), timed, result, response, extra)
        times = self.request_times
        times.observe(
            times.request_name(header.api_key, request.body), (time.perf_counter() - start) * 1e3
        )
        return response

    def _check_peer(self, request: Any, context: ConnectionContext) -> None:
        assert self.peer_authorizer is not None
        session = request.session
        if self.peer_authorizer.allowed(session, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER):
            return
        self.refused_peers.warn(
            context.peer,
            "closing connection from %s: %s may not send API %d to a controller listener "
            "(it needs CLUSTER_ACTION on the cluster, or to be in super.users)",
            context.peer,
            session.principal,
            request.header.api_key,
        )
        raise CloseConnection()

    def _gate(self, frame: bytes, context: ConnectionContext) -> None:
        """SASL's gate (handlers/sasl.py): before authentication, or past the session's
        lifetime, only ApiVersions, SaslHandshake and SaslAuthenticate are served."""
        from odradek.server.handlers.sasl import admit, warn_refused

        try:
            api_key, api_version, _ = peek_header(frame)
        except MalformedRequest:
            return  # decode_request says so
        refusal = admit(context.session, api_key, api_version)
        if refusal is not None:
            warn_refused(context.session, refusal)
            raise CloseConnection()


def throttle(
    quotas: ClientQuotaManager,
    request: Any,
    frame_bytes: int,
    timed: TimedCall | None,
    result: Any,
    response: Response | None,
    extra_ms: int = 0,
) -> Response | None:
    """Charge the request to its client's produce and request-time quotas (``extra_ms``:
    a throttle already decided, as the mutation quota's); past one,
    the response carries the throttle (``throttle_time_ms`` where its schema has it)
    and the connection mutes for it (KIP-219). Fetch charges its bytes itself
    (handlers/fetch.py); a follower's fetch is charged nothing."""
    header = request.header
    user, client_id = request.session.user, header.client_id or ""
    throttle_ms = extra_ms  # e.g. controller mutations (mutation_quota.py)
    if header.api_key == PRODUCE_KEY:
        throttle_ms = quotas.record_produce(user, client_id, frame_bytes)
    if timed is not None and not (
        header.api_key == FETCH_KEY and getattr(request.body, "replica_id", -1) >= 0
    ):
        throttle_ms = max(throttle_ms, quotas.record_request_time(user, client_id, timed.seconds))
    if throttle_ms <= 0:
        return response
    if response is None:  # acks=0: nothing to send, but the mute still holds
        return Response([], throttle_ms=throttle_ms)
    if result is response or not hasattr(result, "throttle_time"):
        response.throttle_ms = max(response.throttle_ms, throttle_ms)
        return response
    carried = max(throttle_ms, int(result.throttle_time.total_seconds() * 1000))
    result = dataclasses.replace(result, throttle_time=datetime.timedelta(milliseconds=carried))
    encoded = encode_response(header.api_key, header.api_version, header.correlation_id, result)
    return Response([encoded], throttle_ms=carried)
