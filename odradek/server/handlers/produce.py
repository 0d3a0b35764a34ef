"""Produce (key 0): validate each partition's batch, append it on the leader, await acks.

Two phases (review E.1, Redpanda's dispatched/produced): every partition is appended
first, in request order; then the acks=all ones are awaited together, each until the
high watermark passes its batch, up to the request's ``timeout_ms``
(REQUEST_TIMED_OUT; NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below
``min.insync.replicas`` meanwhile). acks=1 answers after the leader's append, as
Kafka; with one replica the HW moves with the append and nothing waits.

Batches stay bytes: the storage layer checks the header and CRC and stamps offsets in
place. Errors are per partition, with Kafka's codes; acks=0 gets no response at all.

A batch the topic's ``compression.type`` makes the broker recompress is converted on
a worker thread first (``_CONVERTERS``, two threads: the machine's cores, and a bound
on the memory conversions hold at once, each at most log_validator.expansion_limit),
so a compression bomb costs other connections nothing; the append itself stays on
the loop. Every other batch goes straight to the append, as before.

A transactional batch that would open a transaction in its partition is first
verified with the transaction coordinator (KIP-890 part 1, server/txn_verify.py), all
of a request's such partitions in one call, before any append.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from odradek.metadata.topic_changes import INTERNAL_TOPICS
from odradek.network.connection import CloseConnection
from odradek.protocol.build import error_code, make, response_module
from odradek.protocol.messages import Request
from odradek.records.batch import MAGIC_POSITION, MAGIC_V2, BatchHeader, iter_batches
from odradek.records.errors import CodedError
from odradek.replica.replica_manager import PartitionError, ProduceStatus
from odradek.server.authorized_operations import AclOperation, ResourceType
from odradek.server.handlers import handles
from odradek.server.handlers.metadata import request_listener
from odradek.server.txn_verify import produce_error

if TYPE_CHECKING:
    from odradek.server.services import BrokerServices

PRODUCE_KEY = 0
FIRST_VERSION_WITH_CURRENT_LEADER = 10  # KIP-951's current_leader and node_endpoints
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_CONVERTERS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="produce-convert")


# Versions 0-2 are advertised but never served, exactly as Kafka 4.0 does
# (KAFKA-18659): librdkafka before 2.11 (Debian's kcat) enables gzip/snappy/lz4 only
# when the broker lists Produce v0, yet always sends v3+. A real v0-2 request has no
# kio schema, so the dispatcher closes the connection, as for any unsupported version.
LEGACY_PRODUCE_VERSIONS = range(0, 3)


@handles(PRODUCE_KEY, 0, 11)
async def produce(services: BrokerServices, request: Request) -> Any:
    body = request.body
    module = response_module(PRODUCE_KEY, request.header.api_version)
    acks = body.acks
    # Phase zero: each partition's error response, or its one batch's header.
    checked: list[tuple[str, list[tuple[int, Any, bytes]]]] = []
    denied = _unauthorized(services, request)
    for topic in body.topic_data:
        partitions: list[tuple[int, Any, bytes]] = []
        for data in topic.partition_data:
            if acks not in (0, 1, -1):
                result = _error(module, data.index, "INVALID_REQUIRED_ACKS")
            elif topic.name in denied or None in denied:
                code = "TOPIC" if None not in denied else "TRANSACTIONAL_ID"
                result = _error(module, data.index, f"{code}_AUTHORIZATION_FAILED")
            elif topic.name in INTERNAL_TOPICS:
                # Kafka: "Cannot append to internal topic"; the coordinators write
                # there through the replica manager, and load what they find.
                result = _error(
                    module,
                    data.index,
                    "INVALID_TOPIC_EXCEPTION",
                    f"cannot append to internal topic {topic.name}",
                )
            else:
                result = _check(module, data.index, data.records)
            partitions.append((data.index, result, data.records))
        checked.append((topic.name, partitions))
    guards = await _verify(services, module, body.transactional_id, checked)
    # Phase one: (topic, [(index, an error response or the append's status)]).
    appended: list[tuple[str, list[tuple[int, Any]]]] = []
    for name, partitions in checked:
        results: list[tuple[int, Any]] = []
        for index, result, records in partitions:
            if isinstance(result, BatchHeader):
                result = await _append(
                    services, module, name, index, records, acks, guards.get((name, index))
                )
            results.append((index, result))
        appended.append((name, results))
    # Phase two: the acks=all partitions wait for their high watermarks together.
    statuses = [r for _, parts in appended for _, r in parts if isinstance(r, ProduceStatus)]
    timeout_ms = int(body.timeout.total_seconds() * 1000)
    await services.replicas.await_replication(statuses, timeout_ms)
    topics = [
        make(
            module.TopicProduceResponse,
            name=name,
            partition_responses=tuple(
                _answer(module, index, r) if isinstance(r, ProduceStatus) else r
                for index, r in parts
            ),
        )
        for name, parts in appended
    ]
    if acks == 0:
        # No response is expected; on any error Kafka closes the connection instead, so
        # the producer notices (and refreshes its metadata).
        if any(p.error_code != error_code("NONE") for t in topics for p in t.partition_responses):
            raise CloseConnection()
        return None
    endpoints: tuple[Any, ...] = ()
    if request.header.api_version >= FIRST_VERSION_WITH_CURRENT_LEADER:
        topics, endpoints = _current_leaders(services, request, module, topics)
    return make(
        module.ProduceResponse,
        responses=tuple(topics),
        throttle_time=datetime.timedelta(0),
        node_endpoints=endpoints,
    )


def _unauthorized(services: BrokerServices, request: Request) -> set[str | None]:
    """The topics the principal may not WRITE to, and None if the request names a
    transactional id the principal may not WRITE (every partition fails then)."""
    body = request.body
    authorizer = services.authorizer
    names = {topic.name for topic in body.topic_data}
    denied: set[str | None] = set(names)
    denied -= authorizer.allowed_names(
        request.session, AclOperation.WRITE, ResourceType.TOPIC, names
    )
    txn_id = body.transactional_id
    if txn_id is not None and not authorizer.allowed(
        request.session, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id
    ):
        denied.add(None)
    return denied


def _current_leaders(
    services: BrokerServices, request: Request, module: Any, topics: list[Any]
) -> tuple[list[Any], tuple[Any, ...]]:
    """KIP-951: a NOT_LEADER_OR_FOLLOWER partition names the leader this node's image
    knows (``current_leader``), and the response lists those leaders' endpoints on the
    request's listener (``node_endpoints``), so the client re-routes without a Metadata
    round trip. Leaders that are unknown, offline or this node itself are left out."""
    image = services.metadata.image
    wrong = error_code("NOT_LEADER_OR_FOLLOWER")
    named: set[int] = set()
    answered = []
    for topic in topics:
        state = image.topics.get(topic.name)
        partitions = []
        for answer in topic.partition_responses:
            part = state.partitions.get(answer.index) if state is not None else None
            if (
                answer.error_code == wrong
                and part is not None
                and part.leader not in (-1, services.metadata.node_id)
            ):
                current = make(
                    module.LeaderIdAndEpoch, leader_id=part.leader, leader_epoch=part.leader_epoch
                )
                answer = dataclasses.replace(answer, current_leader=current)
                named.add(part.leader)
            partitions.append(answer)
        answered.append(dataclasses.replace(topic, partition_responses=tuple(partitions)))
    listener = request_listener(services, request)
    endpoints = tuple(
        make(module.NodeEndpoint, node_id=e.node_id, host=e.host, port=e.port, rack=e.rack)
        for e in services.metadata.endpoints(image, listener)
        if e.node_id in named
    )
    return answered, endpoints


def _check(module: Any, index: int, records: bytes | None) -> Any:
    """The header of data that is one v2 batch, else the error response."""
    if not records:
        return _error(module, index, "INVALID_RECORD", "no records")
    if len(records) > MAGIC_POSITION and records[MAGIC_POSITION] < MAGIC_V2:
        return _error(
            module, index, "UNSUPPORTED_FOR_MESSAGE_FORMAT", "message format v0/v1 is not supported"
        )
    try:
        headers = list(iter_batches(records, verify_crc=False))
    except CodedError as error:
        return _error(module, index, error.code, str(error))
    if len(headers) != 1:
        return _error(module, index, "INVALID_RECORD", "produce v3+ carries exactly one batch")
    return headers[0]


async def _verify(
    services: BrokerServices,
    module: Any,
    transactional_id: str | None,
    checked: list[tuple[str, list[tuple[int, Any, bytes]]]],
) -> dict[tuple[str, int], object]:
    """KIP-890 part 1 (server/txn_verify.py): the verification guard of each
    transactional partition; a partition the coordinator does not confirm gets its
    error response in ``checked`` instead."""
    verifier = services.txn_verifier
    if verifier is None:
        return {}
    guards: dict[tuple[str, int], object] = {}
    # (producer id, epoch) -> the partitions whose first transactional batch this is
    unverified: dict[tuple[int, int], list[tuple[str, int]]] = {}
    for name, partitions in checked:
        for position, (index, header, records) in enumerate(partitions):
            if not isinstance(header, BatchHeader) or not header.is_transactional:
                continue
            if not transactional_id:
                answer = _error(module, index, "INVALID_TXN_STATE", "no transactional id")
                partitions[position] = (index, answer, records)
                continue
            producer = (header.producer_id, header.producer_epoch)
            try:
                guard, needed = services.replicas.verification_guard(name, index, *producer)
            except PartitionError as error:
                partitions[position] = (index, _error(module, index, error.code), records)
                continue
            guards[(name, index)] = guard
            if needed:
                unverified.setdefault(producer, []).append((name, index))
    refused: dict[tuple[str, int], str] = {}
    for (producer_id, epoch), tps in unverified.items():
        answers = await verifier.verify(transactional_id or "", producer_id, epoch, tps)
        for tp, answer in answers.items():
            if produce_error(answer) != "NONE":
                refused[tp] = answer
                services.replicas.drop_verification(*tp, producer_id, guards.pop(tp))
    if refused:
        for name, partitions in checked:
            for position, (index, _, records) in enumerate(partitions):
                answer = refused.get((name, index))
                if answer is not None:
                    message = f"transaction verification: {answer}"
                    response = _error(module, index, produce_error(answer), message)
                    partitions[position] = (index, response, records)
    return guards


async def _append(
    services: BrokerServices,
    module: Any,
    topic: str,
    index: int,
    records: bytes,
    acks: int,
    verification_guard: object | None,
) -> Any:
    """Phase one for one partition: its ProduceStatus, or the error response."""
    manager = services.replicas
    try:
        convert = manager.conversion(topic, index, records)
        if convert is not None:
            records = await asyncio.get_running_loop().run_in_executor(_CONVERTERS, convert)
        return manager.append_records(
            topic, index, records, acks, verification_guard=verification_guard
        )
    except PartitionError as error:
        return _error(module, index, error.code, str(error))
    except CodedError as error:
        return _error(module, index, error.code, str(error))


def _answer(module: Any, index: int, status: ProduceStatus) -> Any:
    if status.error != "NONE":
        return _error(module, index, status.error)
    info = status.info
    append_time = None
    if info.log_append_time >= 0:
        append_time = _EPOCH + datetime.timedelta(milliseconds=info.log_append_time)
    return make(
        module.PartitionProduceResponse,
        index=index,
        error_code=error_code("NONE"),
        base_offset=info.first_offset,
        log_append_time=append_time,
        log_start_offset=info.log_start_offset,
        record_errors=(),
        error_message=None,
    )


def _error(module: Any, index: int, code: str, message: str | None = None) -> Any:
    return make(
        module.PartitionProduceResponse,
        index=index,
        error_code=error_code(code),
        base_offset=-1,
        log_append_time=None,
        log_start_offset=-1,
        record_errors=(),
        error_message=message,
    )
