"""InitProducerId (key 22): producer ids for idempotent producers.

Ids come from blocks reserved in the metadata log (ProducerIds records), so no id is
ever handed out twice, even across restarts. As in Kafka, a producer without a
transactional id always gets a fresh id with epoch 0 (also when it asks again after
OUT_OF_ORDER_SEQUENCE_NUMBER or UNKNOWN_PRODUCER_ID). A transactional id goes to the
transaction coordinator (coordinator/transaction/), which bumps its epoch (v3+: KIP-360's
current producer id/epoch); PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before v4, and a
broker without a coordinator answers COORDINATOR_NOT_AVAILABLE. A broker of a quorum
gets its blocks from the active controller with AllocateProducerIds (67), served here
on the controller plane.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from odradek.metadata.controller_channel import ControllerError
from odradek.metadata.controller_rpc import ALLOCATE_PRODUCER_IDS_KEY, FORWARDED_VERSIONS
from odradek.protocol.build import error_code, make, response_module
from odradek.protocol.messages import Request
from odradek.server.authorized_operations import AclOperation, ResourceType
from odradek.server.handlers import Plane, handles

if TYPE_CHECKING:
    from odradek.server.services import BrokerServices, ControllerServices

INIT_PRODUCER_ID_KEY = 22


@handles(INIT_PRODUCER_ID_KEY, 0, 5)
async def init_producer_id(services: BrokerServices, request: Request) -> Any:
    module = response_module(INIT_PRODUCER_ID_KEY, request.header.api_version)
    body = request.body

    def respond(error: str, producer_id: int = -1, epoch: int = -1) -> Any:
        return make(
            module.InitProducerIdResponse,
            throttle_time=datetime.timedelta(0),
            error_code=error_code(error),
            producer_id=producer_id,
            producer_epoch=epoch,
        )

    denial = _denial(services, request)
    if denial is not None:
        return respond(denial)
    if body.transactional_id is not None:  # the transaction coordinator's (KIP-98/360)
        if services.txns is None:
            return respond("COORDINATOR_NOT_AVAILABLE")
        timeout_ms = int(body.transaction_timeout.total_seconds() * 1000)
        pid, epoch = getattr(body, "producer_id", -1), getattr(body, "producer_epoch", -1)
        result = await services.txns.init_producer_id(body.transactional_id, timeout_ms, pid, epoch)
        fenced = result.error == "PRODUCER_FENCED" and request.header.api_version < 4
        error = "INVALID_PRODUCER_EPOCH" if fenced else result.error
        return respond(error, result.producer_id, result.producer_epoch)
    try:
        return respond("NONE", await services.producer_ids.next_producer_id(), 0)
    except ControllerError as error:  # the id block could not be committed (disk full)
        return respond(error.code)


def _denial(services: BrokerServices, request: Request) -> str | None:
    """Kafka's checks: WRITE on the transactional id; without one (an idempotent
    producer) IDEMPOTENT_WRITE on the cluster, or WRITE on any topic (KIP-679)."""
    authorizer, session = services.authorizer, request.session
    txn_id = request.body.transactional_id
    if txn_id is not None:
        return authorizer.denial(session, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id)
    if authorizer.allowed(session, AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER):
        return None
    if authorizer.allowed_any(session, AclOperation.WRITE, ResourceType.TOPIC):
        return None
    return "CLUSTER_AUTHORIZATION_FAILED"


@handles(
    ALLOCATE_PRODUCER_IDS_KEY,
    *FORWARDED_VERSIONS[ALLOCATE_PRODUCER_IDS_KEY],
    plane=Plane.CONTROLLER,
)
async def allocate_producer_ids(services: ControllerServices, request: Request) -> Any:
    """AllocateProducerIds (67), Kafka's broker→controller RPC: a block of ids for the
    broker that asks, reserved by this node's controller if it is the active one
    (NOT_CONTROLLER otherwise, and the broker asks the next). The broker epoch is not
    checked yet: brokers get epochs with BrokerRegistration."""
    module = response_module(ALLOCATE_PRODUCER_IDS_KEY, request.header.api_version)
    body = request.body
    try:
        if body.broker_id < 0:
            raise ControllerError("INVALID_REQUEST", f"broker id {body.broker_id} is not valid")
        block = await services.controller.allocate_producer_ids(body.broker_id)
        error, first, count = "NONE", block.first_id, block.count
    except ControllerError as failure:
        error, first, count = failure.code, -1, 0
    return make(
        module.AllocateProducerIdsResponse,
        throttle_time=datetime.timedelta(0),
        error_code=error_code(error),
        producer_id_start=first,
        producer_id_len=count,
    )
