"""BrokerRegistration (62) and BrokerHeartbeat (63) on the CONTROLLER plane (KIP-631).

How this works and why: brokers register with, and heartbeat to, the active
controller over its controller listener, as Kafka's do. Each handler turns the kio
request into the metadata layer's plain request (``broker_heartbeats.py``), asks the
node's controller (``services.brokers``: it decides, commits the records and answers
once they are committed) and encodes the answer. A node that is not the active
controller answers NOT_CONTROLLER, which the broker's controller client takes as
"ask the next one". A registration from another cluster is INCONSISTENT_CLUSTER_ID.
Every other refusal is the controller's error code (DUPLICATE_BROKER_REGISTRATION,
STALE_BROKER_EPOCH, BROKER_ID_NOT_REGISTERED, ...), never a closed connection.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any, Final

from odradek.metadata.broker_heartbeats import BrokerHeartbeat, BrokerRegistration
from odradek.metadata.errors import ControllerError
from odradek.protocol.build import error_code, make, response_module
from odradek.protocol.messages import Request
from odradek.server.handlers import Plane, handles

if TYPE_CHECKING:
    from odradek.server.services import ControllerServices

BROKER_REGISTRATION_KEY: Final = 62
BROKER_HEARTBEAT_KEY: Final = 63


def registration_from_kio(body: Any) -> BrokerRegistration:
    return BrokerRegistration(
        broker_id=int(body.broker_id),
        incarnation_id="" if body.incarnation_id is None else str(body.incarnation_id),
        endpoints=tuple((li.name, li.host, int(li.port)) for li in body.listeners),
        rack=body.rack,
        features=tuple(
            (f.name, int(f.min_supported_version), int(f.max_supported_version))
            for f in body.features
        ),
        log_dirs=tuple(str(d) for d in getattr(body, "log_dirs", ()) if d is not None),
    )


@handles(BROKER_REGISTRATION_KEY, 0, 4, plane=Plane.CONTROLLER)
async def broker_registration(services: ControllerServices, request: Request) -> Any:
    module = response_module(BROKER_REGISTRATION_KEY, request.header.api_version)

    def respond(code: str, epoch: int = -1) -> Any:
        return make(
            module.BrokerRegistrationResponse,
            throttle_time=datetime.timedelta(0),
            error_code=error_code(code),
            broker_epoch=epoch,
        )

    body = request.body
    cluster_id = services.raft.cluster_id
    if cluster_id and body.cluster_id != cluster_id:
        return respond("INCONSISTENT_CLUSTER_ID")
    try:
        epoch = await services.brokers.register_broker(registration_from_kio(body))
    except ControllerError as error:
        return respond(error.code)
    return respond("NONE", epoch)


@handles(BROKER_HEARTBEAT_KEY, 0, 2, plane=Plane.CONTROLLER)
async def broker_heartbeat(services: ControllerServices, request: Request) -> Any:
    module = response_module(BROKER_HEARTBEAT_KEY, request.header.api_version)
    body = request.body

    def respond(code: str, caught_up: bool = False, fenced: bool = True, stop: bool = False) -> Any:
        return make(
            module.BrokerHeartbeatResponse,
            throttle_time=datetime.timedelta(0),
            error_code=error_code(code),
            is_caught_up=caught_up,
            is_fenced=fenced,
            should_shut_down=stop,
        )

    heartbeat = BrokerHeartbeat(
        int(body.broker_id),
        int(body.broker_epoch),
        int(body.current_metadata_offset),
        bool(body.want_fence),
        bool(body.want_shut_down),
    )
    try:
        reply = await services.brokers.broker_heartbeat(heartbeat)
    except ControllerError as error:
        return respond(error.code)
    return respond("NONE", reply.is_caught_up, reply.is_fenced, reply.should_shut_down)
