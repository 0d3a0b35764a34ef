"""WriteTxnMarkers (27) and DescribeProducers (61): the partition side of transactions.

WriteTxnMarkers is the transaction coordinator's request to a partition leader
(broker to broker): write the COMMIT/ABORT marker of each listed producer into each
listed partition, answering per partition once the marker is replicated (acks=all);
``server/txn_markers.py`` does the writing, the same code the coordinator uses for the
partitions its own node leads. DescribeProducers (KIP-664, ``odradek transactions
describe-producers``) lists a partition leader's active producers with their epoch,
last sequence and the start offset of their open transaction, which is how a hanging
transaction is found.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from odradek.coordinator.transaction.markers import MarkerEntry
from odradek.protocol.build import error_code, make, response_module
from odradek.protocol.messages import Request
from odradek.replica.replica_manager import PartitionError
from odradek.server.authorized_operations import AclOperation, ResourceType
from odradek.server.handlers import handles

if TYPE_CHECKING:
    from odradek.server.services import BrokerServices

WRITE_TXN_MARKERS_KEY = 27
DESCRIBE_PRODUCERS_KEY = 61
_ZERO = datetime.timedelta(0)


@handles(WRITE_TXN_MARKERS_KEY, 1, 1)
async def write_txn_markers(services: BrokerServices, request: Request) -> Any:
    module = response_module(WRITE_TXN_MARKERS_KEY, request.header.api_version)
    answers = []
    # a coordinator's request: CLUSTER_ACTION on the cluster, as Kafka asks
    denial = services.authorizer.denial(
        request.session, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER
    )
    for marker in request.body.markers:
        entry = MarkerEntry(
            marker.producer_id,
            marker.producer_epoch,
            marker.coordinator_epoch,
            marker.transaction_result,
            tuple((t.name, index) for t in marker.topics for index in t.partition_indexes),
        )
        if denial is not None:
            results = dict.fromkeys(entry.partitions, denial)
        else:
            results = await services.txn_markers.write_local(entry)
        topics = tuple(
            make(
                module.WritableTxnMarkerTopicResult,
                name=t.name,
                partitions=tuple(
                    make(
                        module.WritableTxnMarkerPartitionResult,
                        partition_index=index,
                        error_code=error_code(results[(t.name, index)]),
                    )
                    for index in t.partition_indexes
                ),
            )
            for t in marker.topics
        )
        answers.append(
            make(module.WritableTxnMarkerResult, producer_id=marker.producer_id, topics=topics)
        )
    return make(module.WriteTxnMarkersResponse, markers=tuple(answers))


@handles(DESCRIBE_PRODUCERS_KEY, 0, 0)
async def describe_producers(services: BrokerServices, request: Request) -> Any:
    module = response_module(DESCRIBE_PRODUCERS_KEY, request.header.api_version)
    readable = services.authorizer.allowed_names(
        request.session,
        AclOperation.READ,
        ResourceType.TOPIC,
        (t.name for t in request.body.topics),
    )
    topics = []
    for topic in request.body.topics:
        partitions = []
        for index in topic.partition_indexes:
            try:
                if topic.name not in readable:
                    raise PartitionError("TOPIC_AUTHORIZATION_FAILED")
                producers = services.replicas.describe_producers(topic.name, index)
                error, message = "NONE", None
            except PartitionError as failure:
                producers, error, message = [], failure.code, str(failure)
            partitions.append(
                make(
                    module.PartitionResponse,
                    partition_index=index,
                    error_code=error_code(error),
                    error_message=message,
                    active_producers=tuple(
                        make(
                            module.ProducerState,
                            producer_id=p.producer_id,
                            producer_epoch=p.epoch,
                            last_sequence=p.last_sequence,
                            last_timestamp=p.last_timestamp,
                            coordinator_epoch=p.coordinator_epoch,
                            current_txn_start_offset=p.current_txn_start_offset,
                        )
                        for p in producers
                    ),
                )
            )
        topics.append(make(module.TopicResponse, name=topic.name, partitions=tuple(partitions)))
    return make(module.DescribeProducersResponse, throttle_time=_ZERO, topics=tuple(topics))
