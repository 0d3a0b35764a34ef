"""Transaction APIs: AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, DescribeTransactions,
ListTransactions.

Thin: each decodes its fields (which vary by version) and calls the
TransactionCoordinator (odradek/coordinator/transaction/), which owns the protocol.
What stays here is what depends on the request version or the image:

- AddPartitionsToTxn v0-v3 is the client's form (one transaction); v4+ is the
  brokers' batched form, where ``verify_only`` is KIP-890 part 1's check by a
  partition leader that a transactional produce's partition is in the transaction.
  A partition of a topic this node's image does not know is
  UNKNOWN_TOPIC_OR_PARTITION and the rest of that transaction OPERATION_NOT_ATTEMPTED,
  as in Kafka (nothing is added then).
- PRODUCER_FENCED (KIP-588) exists from AddPartitionsToTxn/AddOffsetsToTxn/EndTxn v2;
  older versions get INVALID_PRODUCER_EPOCH, as Kafka answers them.
- Without a transaction coordinator (``services.txns`` is None) every request is
  answered COORDINATOR_NOT_AVAILABLE (ListTransactions: nothing).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from odradek.protocol.build import error_code, make, response_module
from odradek.protocol.messages import Request
from odradek.server.authorized_operations import AclOperation, ResourceType
from odradek.server.handlers import handles

if TYPE_CHECKING:
    from odradek.coordinator.transaction.coordinator import TransactionDescription
    from odradek.server.services import BrokerServices

ADD_PARTITIONS_TO_TXN_KEY: Final = 24
ADD_OFFSETS_TO_TXN_KEY: Final = 25
END_TXN_KEY: Final = 26
DESCRIBE_TRANSACTIONS_KEY: Final = 65
LIST_TRANSACTIONS_KEY: Final = 66
# The first version of each API that knows PRODUCER_FENCED (KIP-588).
PRODUCER_FENCED_SINCE: Final = {
    ADD_PARTITIONS_TO_TXN_KEY: 2,
    ADD_OFFSETS_TO_TXN_KEY: 2,
    END_TXN_KEY: 2,
}
UNAVAILABLE: Final = "COORDINATOR_NOT_AVAILABLE"
_ZERO = datetime.timedelta(0)
TXN_ID: Final = ResourceType.TRANSACTIONAL_ID
WRITE: Final = AclOperation.WRITE
FIRST_BROKER_VERSION: Final = 4  # AddPartitionsToTxn v4+ is sent by brokers (KIP-890)
TopicPartition = tuple[str, int]


def _for_version(error: str, api_key: int, version: int) -> str:
    if error == "PRODUCER_FENCED" and version < PRODUCER_FENCED_SINCE[api_key]:
        return "INVALID_PRODUCER_EPOCH"
    return error


# -- AddPartitionsToTxn ------------------------------------------------------------------
@handles(ADD_PARTITIONS_TO_TXN_KEY, 0, 5)
async def add_partitions_to_txn(services: BrokerServices, request: Request) -> Any:
    version = request.header.api_version
    module = response_module(ADD_PARTITIONS_TO_TXN_KEY, version)
    body = request.body
    if version >= FIRST_BROKER_VERSION:
        denial = services.authorizer.denial(
            request.session, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER
        )
        if denial is not None:  # a broker's request: CLUSTER_ACTION, as Kafka asks
            return make(
                module.AddPartitionsToTxnResponse,
                throttle_time=_ZERO,
                error_code=error_code(denial),
                results_by_transaction=(),
            )
    if version <= 3:
        errors = await _add_or_verify(
            services,
            request,
            body.v3_and_below_transactional_id,
            body.v3_and_below_producer_id,
            body.v3_and_below_producer_epoch,
            body.v3_and_below_topics,
            verify_only=False,
            version=version,
        )
        return make(
            module.AddPartitionsToTxnResponse,
            throttle_time=_ZERO,
            results_by_topic_v3_and_below=_topic_results(module, errors),
        )
    results = []
    for txn in body.transactions:
        errors = await _add_or_verify(
            services,
            request,
            txn.transactional_id,
            txn.producer_id,
            txn.producer_epoch,
            txn.topics,
            verify_only=txn.verify_only,
            version=version,
        )
        results.append(
            make(
                module.AddPartitionsToTxnResult,
                transactional_id=txn.transactional_id,
                topic_results=_topic_results(module, errors),
            )
        )
    return make(
        module.AddPartitionsToTxnResponse,
        throttle_time=_ZERO,
        error_code=error_code("NONE"),
        results_by_transaction=tuple(results),
    )


async def _add_or_verify(
    services: BrokerServices,
    request: Request,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    topics: Sequence[Any],
    *,
    verify_only: bool,
    version: int,
) -> dict[TopicPartition, str]:
    partitions = list(dict.fromkeys((t.name, int(p)) for t in topics for p in t.partitions))
    coordinator = services.txns
    if coordinator is None:
        return {tp: UNAVAILABLE for tp in partitions}
    denied = _unauthorized(services, request, transactional_id, {t for t, _ in partitions})
    if denied:  # Kafka: the denied ones fail, the others are not attempted
        return {
            tp: denied.get(None) or denied.get(tp[0]) or "OPERATION_NOT_ATTEMPTED"
            for tp in partitions
        }
    if not verify_only:
        image = services.metadata.image
        unknown = {
            (topic, index)
            for topic, index in partitions
            if (known := image.topics.get(topic)) is None or index not in known.partitions
        }
        if unknown:
            return {
                tp: "UNKNOWN_TOPIC_OR_PARTITION" if tp in unknown else "OPERATION_NOT_ATTEMPTED"
                for tp in partitions
            }
        errors = await coordinator.add_partitions(
            transactional_id, producer_id, producer_epoch, partitions
        )
    else:
        errors = await coordinator.verify_partitions(
            transactional_id, producer_id, producer_epoch, partitions
        )
    return {
        tp: _for_version(error, ADD_PARTITIONS_TO_TXN_KEY, version) for tp, error in errors.items()
    }


def _unauthorized(
    services: BrokerServices, request: Request, transactional_id: str, topics: set[str]
) -> dict[str | None, str]:
    """WRITE on the transactional id (key None) and on each topic: the denials."""
    authorizer, session = services.authorizer, request.session
    denial = authorizer.denial(session, WRITE, TXN_ID, transactional_id)
    if denial is not None:
        return {None: denial}
    writable = authorizer.allowed_names(session, WRITE, ResourceType.TOPIC, topics)
    return {t: "TOPIC_AUTHORIZATION_FAILED" for t in topics - writable}


def _topic_results(module: Any, errors: Mapping[TopicPartition, str]) -> tuple[Any, ...]:
    by_topic: dict[str, list[Any]] = {}
    for (topic, index), error in errors.items():
        by_topic.setdefault(topic, []).append(
            make(
                module.AddPartitionsToTxnPartitionResult,
                partition_index=index,
                partition_error_code=error_code(error),
            )
        )
    return tuple(
        make(module.AddPartitionsToTxnTopicResult, name=topic, results_by_partition=tuple(results))
        for topic, results in by_topic.items()
    )


# -- AddOffsetsToTxn ---------------------------------------------------------------------
@handles(ADD_OFFSETS_TO_TXN_KEY, 0, 4)
async def add_offsets_to_txn(services: BrokerServices, request: Request) -> Any:
    version = request.header.api_version
    module = response_module(ADD_OFFSETS_TO_TXN_KEY, version)
    body = request.body
    coordinator = services.txns
    authorizer, session = services.authorizer, request.session
    denial = authorizer.denial(session, WRITE, TXN_ID, body.transactional_id) or (
        authorizer.denial(session, AclOperation.READ, ResourceType.GROUP, body.group_id)
    )
    if denial is not None:
        error = denial
    elif coordinator is None:
        error = UNAVAILABLE
    else:
        error = await coordinator.add_offsets(
            body.transactional_id,
            body.producer_id,
            body.producer_epoch,
            services.groups.partition_for(body.group_id),
        )
    error = _for_version(error, ADD_OFFSETS_TO_TXN_KEY, version)
    return make(module.AddOffsetsToTxnResponse, throttle_time=_ZERO, error_code=error_code(error))


# -- EndTxn ----------------------------------------------------------------------------------
@handles(END_TXN_KEY, 0, 4)
async def end_txn(services: BrokerServices, request: Request) -> Any:
    """v5 (KIP-890 part 2: an epoch bump at every end) is not served yet."""
    version = request.header.api_version
    module = response_module(END_TXN_KEY, version)
    body = request.body
    coordinator = services.txns
    denial = services.authorizer.denial(request.session, WRITE, TXN_ID, body.transactional_id)
    if denial is not None:
        error = denial
    elif coordinator is None:
        error = UNAVAILABLE
    else:
        error = await coordinator.end_txn(
            body.transactional_id, body.producer_id, body.producer_epoch, bool(body.committed)
        )
    error = _for_version(error, END_TXN_KEY, version)
    return make(module.EndTxnResponse, throttle_time=_ZERO, error_code=error_code(error))


# -- DescribeTransactions / ListTransactions ----------------------------------------------
@handles(DESCRIBE_TRANSACTIONS_KEY, 0, 0)
async def describe_transactions(services: BrokerServices, request: Request) -> Any:
    module = response_module(DESCRIBE_TRANSACTIONS_KEY, request.header.api_version)
    ids = list(request.body.transactional_ids)
    coordinator = services.txns
    states = []
    described: list[tuple[str, str, TransactionDescription | None]]
    if coordinator is None:
        described = [(i, UNAVAILABLE, None) for i in ids]
    else:
        visible = services.authorizer.allowed_names(
            request.session, AclOperation.DESCRIBE, TXN_ID, ids
        )
        # DESCRIBE on each transactional id, as Kafka asks; the others are not looked up
        denied = "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
        found = {
            d.transactional_id: d for d in coordinator.describe([i for i in ids if i in visible])
        }
        described = [
            (i, found[i].error, found[i]) if i in found else (i, denied, None) for i in ids
        ]
    for transactional_id, error, description in described:
        if description is None or error != "NONE":
            states.append(
                make(
                    module.TransactionState,
                    error_code=error_code(error),
                    transactional_id=transactional_id,
                    transaction_state="",
                    transaction_timeout=_ZERO,
                    transaction_start_time=_datetime(-1),
                    producer_id=-1,
                    producer_epoch=-1,
                    topics=(),
                )
            )
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, index in description.partitions:
            by_topic.setdefault(topic, []).append(index)
        states.append(
            make(
                module.TransactionState,
                error_code=error_code("NONE"),
                transactional_id=transactional_id,
                transaction_state=description.state,
                transaction_timeout=datetime.timedelta(milliseconds=description.timeout_ms),
                transaction_start_time=_datetime(description.start_ms),
                producer_id=description.producer_id,
                producer_epoch=description.producer_epoch,
                topics=tuple(
                    make(module.TopicData, topic=topic, partitions=tuple(indexes))
                    for topic, indexes in by_topic.items()
                ),
            )
        )
    return make(
        module.DescribeTransactionsResponse, throttle_time=_ZERO, transaction_states=tuple(states)
    )


def _datetime(ms: int) -> datetime.datetime:
    """A datetime that kio writes back as exactly ``ms`` (-1 included; a timestamp no
    datetime holds, from a damaged or foreign log, is shown as -1)."""
    try:
        return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    except (OverflowError, ValueError, OSError):
        return datetime.datetime.fromtimestamp(-0.001, tz=datetime.UTC)


@handles(LIST_TRANSACTIONS_KEY, 0, 2)
async def list_transactions(services: BrokerServices, request: Request) -> Any:
    module = response_module(LIST_TRANSACTIONS_KEY, request.header.api_version)
    body = request.body
    coordinator = services.txns
    if coordinator is None:
        return make(
            module.ListTransactionsResponse,
            throttle_time=_ZERO,
            error_code=error_code("NONE"),
            unknown_state_filters=(),
            transaction_states=(),
        )
    result = coordinator.list_transactions(
        states=tuple(body.state_filters),
        producer_ids=tuple(int(p) for p in body.producer_id_filters),
        duration_ms=int(getattr(body, "duration_filter", -1)),
        pattern=getattr(body, "transactional_id_pattern", None),
    )
    # only the transactional ids the principal may DESCRIBE, as Kafka filters them
    visible = services.authorizer.allowed_names(
        request.session, AclOperation.DESCRIBE, TXN_ID, (t for t, _, _ in result.transactions)
    )
    return make(
        module.ListTransactionsResponse,
        throttle_time=_ZERO,
        error_code=error_code(result.error),
        unknown_state_filters=result.unknown_state_filters,
        transaction_states=tuple(
            make(
                module.TransactionState,
                transactional_id=transactional_id,
                producer_id=producer_id,
                transaction_state=state,
            )
            for transactional_id, producer_id, state in result.transactions
            if transactional_id in visible
        ),
    )
