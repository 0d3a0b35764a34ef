"""Raft messages ⇄ kio entities, field by field.

How this works and why: the consensus core speaks ``odradek.raft.messages`` (one frozen
dataclass per message, the metadata partition implied); the network speaks Kafka's
schemas. This module is the only place that knows both, and it holds no state and no
logic beyond the mapping: the driver converts what it sends with ``*_to_kio`` and what
arrives with ``*_from_kio``. Every Kafka schema nests the partition in a topic list;
KRaft has one partition, ``__cluster_metadata``-0 (topic id ``…0001`` where a version
names topics by id), and a request for anything else is refused as Kafka refuses it:
``WireError(INVALID_REQUEST)``, answered as a top-level error.

Versions (what each adds, and which Kafka speaks it):

* Vote 0–2: v1 (3.9, KIP-853) voter_id and directory ids; v2 (4.0, KIP-996) pre_vote.
  A pre-vote cannot be expressed below v2 (``WireError``).
* BeginQuorumEpoch 0–1, EndQuorumEpoch 0–1, FetchSnapshot 0–1: v1 (3.9, KIP-853)
  directory ids, leader endpoints; EndQuorumEpoch v1 names candidates with directories.
* Fetch 12–17: v12 (KIP-595) diverging epoch, current leader, snapshot id, flexible;
  v13 topic ids; v15 ``replica_state`` replaces ``replica_id``; v16 node endpoints; v17
  replica directory id; v18 (4.1, KIP-1166) the high watermark the fetching replica
  knows, so a leader parks a fetch only from a replica that knows its high watermark.
  Kafka 3.7 controllers fetch at 16, 3.9–4.0 at 17, 4.1 at 18. MaxWait carries the
  long poll (``FetchRequest.max_wait_ms``).
* DescribeQuorum 0–2: v1 fetch/caught-up timestamps; v2 error message, directory ids,
  nodes.

Directory ids (KIP-853) and endpoints are sent empty: the quorum is static
(``controller.quorum.voters``).

Two neighbours hold what is not a message of the core: wire_records.py turns log
entries into a Fetch response's record bytes and back (the batch layout), and
wire_describe_quorum.py maps DescribeQuorum, an admin API the core answers with a
description rather than a message. Both build on this module's shared pieces: the
version table, ``WireError``, ``request_module``/``response_module``, and
``single_partition``/``metadata_topic`` for the one-partition topic list.
"""

from __future__ import annotations

import datetime
import uuid
from typing import Any, Final, Literal

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType
from kio.static.primitive import Records

from odradek.protocol.build import has_field, make
from odradek.raft.log import SnapshotId
from odradek.raft.messages import (
    HIGH_WATERMARK_NOT_REPORTED,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    EpochEndOffset,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    LeaderIdAndEpoch,
    Message,
    Request,
    Response,
    VoteRequest,
    VoteResponse,
)
from odradek.raft.wire_records import encode_entries, split_records
from odradek.records.errors import CorruptRecordError

METADATA_TOPIC: Final = "__cluster_metadata"
METADATA_TOPIC_ID: Final = uuid.UUID("00000000-0000-0000-0000-000000000001")
METADATA_PARTITION: Final = 0

FETCH_KEY: Final = 1
VOTE_KEY: Final = 52
BEGIN_QUORUM_EPOCH_KEY: Final = 53
END_QUORUM_EPOCH_KEY: Final = 54
DESCRIBE_QUORUM_KEY: Final = 55
FETCH_SNAPSHOT_KEY: Final = 59

# The versions served and sent (see the module docstring for what each adds).
VERSIONS: Final[dict[int, tuple[int, int]]] = {
    FETCH_KEY: (12, 18),
    VOTE_KEY: (0, 2),
    BEGIN_QUORUM_EPOCH_KEY: (0, 1),
    END_QUORUM_EPOCH_KEY: (0, 1),
    DESCRIBE_QUORUM_KEY: (0, 2),
    FETCH_SNAPSHOT_KEY: (0, 1),
}
API_KEY_OF: Final[dict[type, int]] = {
    VoteRequest: VOTE_KEY,
    BeginQuorumEpochRequest: BEGIN_QUORUM_EPOCH_KEY,
    EndQuorumEpochRequest: END_QUORUM_EPOCH_KEY,
    FetchRequest: FETCH_KEY,
    FetchSnapshotRequest: FETCH_SNAPSHOT_KEY,
}

_NO_THROTTLE: Final = datetime.timedelta(0)
# Errors Kafka answers at the top level of a quorum response (no partition data).
TOP_LEVEL_ERRORS: Final = frozenset({ErrorCode.inconsistent_cluster_id})


class WireError(Exception):
    """A quorum message this node cannot take: the peer misbehaved (or is not ours).
    ``code`` is what Kafka answers at the top level of the response."""

    def __init__(self, code: ErrorCode, detail: str) -> None:
        super().__init__(f"{code.name}: {detail}")
        self.code = code


def _module(
    api_key: int, version: int, kind: Literal[EntityType.request, EntityType.response]
) -> Any:
    low, high = VERSIONS[api_key]
    if not low <= version <= high:
        raise WireError(ErrorCode.unsupported_version, f"API {api_key} v{version}")
    return load_payload_module(api_key, version, kind)


def request_module(api_key: int, version: int) -> Any:
    """kio's request module of ``api_key`` at ``version``; WireError outside VERSIONS."""
    return _module(api_key, version, EntityType.request)


def response_module(api_key: int, version: int) -> Any:
    """kio's response module of ``api_key`` at ``version``; WireError outside VERSIONS."""
    return _module(api_key, version, EntityType.response)


# --- shared pieces -------------------------------------------------------------------


def _topic_matches(topic: Any) -> bool:
    name = getattr(topic, "topic_name", None) or getattr(topic, "topic", None)
    name = name or getattr(topic, "name", None)
    if name is not None:
        return bool(name == METADATA_TOPIC)
    return getattr(topic, "topic_id", None) == METADATA_TOPIC_ID


def single_partition(entity: Any, topics_field: str = "topics") -> Any:
    """The one partition of ``__cluster_metadata`` a quorum message must carry."""
    topics = getattr(entity, topics_field)
    if len(topics) != 1 or not _topic_matches(topics[0]):
        raise WireError(ErrorCode.invalid_request, f"not {METADATA_TOPIC}-{METADATA_PARTITION}")
    partitions = topics[0].partitions
    if len(partitions) != 1:
        raise WireError(ErrorCode.invalid_request, "expected exactly one partition")
    partition = partitions[0]
    index = getattr(partition, "partition_index", None)
    if index is None:
        index = getattr(partition, "partition", None)
    if index is None:
        index = getattr(partition, "index", None)
    if index != METADATA_PARTITION:
        raise WireError(ErrorCode.invalid_request, f"partition {index} is not the metadata one")
    return partition


def metadata_topic(module: Any, class_name: str, partitions: tuple[Any, ...]) -> Any:
    """``module.class_name`` naming ``__cluster_metadata`` (by whichever field the version
    has: name or topic id), holding ``partitions``."""
    cls = getattr(module, class_name)
    return make(
        cls,
        topic_name=METADATA_TOPIC,
        topic=METADATA_TOPIC,
        name=METADATA_TOPIC,
        topic_id=METADATA_TOPIC_ID,
        partitions=partitions,
    )


# --- requests --------------------------------------------------------------------------


def request_to_kio(message: Request, version: int) -> Any:
    """The kio request entity of ``message`` at ``version``."""
    if isinstance(message, VoteRequest):
        return _vote_request(message, version)
    if isinstance(message, BeginQuorumEpochRequest):
        module = request_module(BEGIN_QUORUM_EPOCH_KEY, version)
        partition = make(
            module.PartitionData,
            partition_index=METADATA_PARTITION,
            voter_directory_id=None,
            leader_id=message.leader_id,
            leader_epoch=message.leader_epoch,
        )
        return make(
            module.BeginQuorumEpochRequest,
            cluster_id=message.cluster_id,
            voter_id=message.voter_id,
            topics=(metadata_topic(module, "TopicData", (partition,)),),
            leader_endpoints=(),
        )
    if isinstance(message, EndQuorumEpochRequest):
        module = request_module(END_QUORUM_EPOCH_KEY, version)
        candidates = (
            tuple(
                make(module.ReplicaInfo, candidate_id=c, candidate_directory_id=None)
                for c in message.preferred_candidates
            )
            if hasattr(module, "ReplicaInfo")
            else ()
        )
        partition = make(
            module.PartitionData,
            partition_index=METADATA_PARTITION,
            leader_id=message.leader_id,
            leader_epoch=message.leader_epoch,
            preferred_successors=message.preferred_candidates,
            preferred_candidates=candidates,
        )
        return make(
            module.EndQuorumEpochRequest,
            cluster_id=message.cluster_id,
            topics=(metadata_topic(module, "TopicData", (partition,)),),
            leader_endpoints=(),
        )
    if isinstance(message, FetchRequest):
        return _fetch_request(message, version)
    return _fetch_snapshot_request(message, version)


def _vote_request(message: VoteRequest, version: int) -> Any:
    module = request_module(VOTE_KEY, version)
    if message.pre_vote and not has_field(module.PartitionData, "pre_vote"):
        raise WireError(ErrorCode.unsupported_version, f"a pre-vote needs Vote v2, not v{version}")
    partition = make(
        module.PartitionData,
        partition_index=METADATA_PARTITION,
        replica_epoch=message.replica_epoch,
        replica_id=message.replica_id,
        replica_directory_id=None,
        voter_directory_id=None,
        last_offset_epoch=message.last_offset_epoch,
        last_offset=message.last_offset,
        pre_vote=message.pre_vote,
    )
    return make(
        module.VoteRequest,
        cluster_id=message.cluster_id,
        voter_id=message.voter_id,
        topics=(metadata_topic(module, "TopicData", (partition,)),),
    )


def _fetch_request(message: FetchRequest, version: int) -> Any:
    module = request_module(FETCH_KEY, version)
    partition = make(
        module.FetchPartition,
        partition=METADATA_PARTITION,
        current_leader_epoch=message.current_leader_epoch,
        fetch_offset=message.fetch_offset,
        last_fetched_epoch=message.last_fetched_epoch,
        log_start_offset=message.log_start_offset,
        partition_max_bytes=message.partition_max_bytes,
        replica_directory_id=None,
        high_watermark=message.high_watermark,
    )
    replica_state = None
    if hasattr(module, "ReplicaState"):
        replica_state = module.ReplicaState(
            replica_id=message.replica_id, replica_epoch=message.replica_epoch
        )
    return make(
        module.FetchRequest,
        cluster_id=message.cluster_id,
        replica_id=message.replica_id,
        replica_state=replica_state,
        max_wait=datetime.timedelta(milliseconds=message.max_wait_ms),
        min_bytes=0,
        max_bytes=message.partition_max_bytes,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,  # no fetch session: every fetch is a full one
        topics=(metadata_topic(module, "FetchTopic", (partition,)),),
        forgotten_topics_data=(),
        rack_id="",
    )


def _fetch_snapshot_request(message: FetchSnapshotRequest, version: int) -> Any:
    module = request_module(FETCH_SNAPSHOT_KEY, version)
    snapshot_id = module.SnapshotId(
        end_offset=message.snapshot_id.end_offset, epoch=message.snapshot_id.epoch
    )
    partition = make(
        module.PartitionSnapshot,
        partition=METADATA_PARTITION,
        current_leader_epoch=message.current_leader_epoch,
        snapshot_id=snapshot_id,
        position=message.position,
        replica_directory_id=None,
    )
    return make(
        module.FetchSnapshotRequest,
        cluster_id=message.cluster_id,
        replica_id=message.replica_id,
        max_bytes=message.max_bytes,
        topics=(metadata_topic(module, "TopicSnapshot", (partition,)),),
    )


def _milliseconds(value: datetime.timedelta) -> int:
    """A kio i32 duration in whole milliseconds (a negative MaxWait is the peer's: the
    core treats anything ≤ 0 as "answer at once")."""
    return value // datetime.timedelta(milliseconds=1)


def request_from_kio(entity: Any) -> Request:
    """The raft request a kio entity carries; WireError when it is not for our partition."""
    api_key = int(entity.__api_key__)
    if api_key == VOTE_KEY:
        p = single_partition(entity)
        return VoteRequest(
            cluster_id=entity.cluster_id,
            voter_id=getattr(entity, "voter_id", -1),
            replica_epoch=p.replica_epoch,
            replica_id=p.replica_id,
            last_offset_epoch=p.last_offset_epoch,
            last_offset=p.last_offset,
            pre_vote=getattr(p, "pre_vote", False),
        )
    if api_key == BEGIN_QUORUM_EPOCH_KEY:
        p = single_partition(entity)
        return BeginQuorumEpochRequest(
            cluster_id=entity.cluster_id,
            voter_id=getattr(entity, "voter_id", -1),
            leader_id=p.leader_id,
            leader_epoch=p.leader_epoch,
        )
    if api_key == END_QUORUM_EPOCH_KEY:
        p = single_partition(entity)
        if hasattr(p, "preferred_candidates"):
            preferred = tuple(int(c.candidate_id) for c in p.preferred_candidates)
        else:
            preferred = tuple(int(c) for c in p.preferred_successors)
        return EndQuorumEpochRequest(
            cluster_id=entity.cluster_id,
            leader_id=p.leader_id,
            leader_epoch=p.leader_epoch,
            preferred_candidates=preferred,
        )
    if api_key == FETCH_KEY:
        p = single_partition(entity)
        state = getattr(entity, "replica_state", None)
        if state is not None:
            replica_id, replica_epoch = state.replica_id, state.replica_epoch
        else:
            replica_id, replica_epoch = entity.replica_id, -1
        return FetchRequest(
            cluster_id=entity.cluster_id,
            replica_id=replica_id,
            replica_epoch=replica_epoch,
            current_leader_epoch=p.current_leader_epoch,
            fetch_offset=p.fetch_offset,
            last_fetched_epoch=p.last_fetched_epoch,
            log_start_offset=p.log_start_offset,
            partition_max_bytes=p.partition_max_bytes,
            max_wait_ms=_milliseconds(entity.max_wait),
            high_watermark=getattr(p, "high_watermark", HIGH_WATERMARK_NOT_REPORTED),
        )
    if api_key == FETCH_SNAPSHOT_KEY:
        p = single_partition(entity)
        return FetchSnapshotRequest(
            cluster_id=entity.cluster_id,
            replica_id=entity.replica_id,
            max_bytes=entity.max_bytes,
            current_leader_epoch=p.current_leader_epoch,
            snapshot_id=SnapshotId(end_offset=p.snapshot_id.end_offset, epoch=p.snapshot_id.epoch),
            position=p.position,
        )
    raise WireError(ErrorCode.invalid_request, f"API key {api_key} is not a quorum request")


# --- responses -------------------------------------------------------------------------


def error_response(api_key: int, version: int, error: ErrorCode) -> Any:
    """A response with only a top-level error (Kafka's answer to a foreign cluster id or a
    request for another topic)."""
    module = response_module(api_key, version)
    cls = {
        VOTE_KEY: "VoteResponse",
        BEGIN_QUORUM_EPOCH_KEY: "BeginQuorumEpochResponse",
        END_QUORUM_EPOCH_KEY: "EndQuorumEpochResponse",
        FETCH_KEY: "FetchResponse",
        FETCH_SNAPSHOT_KEY: "FetchSnapshotResponse",
        DESCRIBE_QUORUM_KEY: "DescribeQuorumResponse",
    }[api_key]
    return make(
        getattr(module, cls),
        throttle_time=_NO_THROTTLE,
        error_code=error,
        error_message=None,
        session_id=0,
        topics=(),
        responses=(),
        nodes=(),
    )


def response_to_kio(message: Response, api_key: int, version: int) -> Any:
    """The kio response entity of ``message`` for a request of ``api_key`` at ``version``."""
    if message.error_code in TOP_LEVEL_ERRORS:
        return error_response(api_key, version, message.error_code)
    module = response_module(api_key, version)
    if isinstance(message, VoteResponse):
        partition = module.PartitionData(
            partition_index=METADATA_PARTITION,
            error_code=message.error_code,
            leader_id=message.leader_id,
            leader_epoch=message.leader_epoch,
            vote_granted=message.vote_granted,
        )
        return module.VoteResponse(
            error_code=ErrorCode.none, topics=(metadata_topic(module, "TopicData", (partition,)),)
        )
    if isinstance(message, BeginQuorumEpochResponse | EndQuorumEpochResponse):
        partition = module.PartitionData(
            partition_index=METADATA_PARTITION,
            error_code=message.error_code,
            leader_id=message.leader_id,
            leader_epoch=message.leader_epoch,
        )
        name = type(message).__name__
        return getattr(module, name)(
            error_code=ErrorCode.none, topics=(metadata_topic(module, "TopicData", (partition,)),)
        )
    if isinstance(message, FetchResponse):
        return _fetch_response(message, module)
    return _fetch_snapshot_response(message, module)


def _fetch_response(message: FetchResponse, module: Any) -> Any:
    diverging = message.diverging_epoch
    leader = message.current_leader
    snapshot = message.snapshot_id
    records = encode_entries(message.records)
    partition = make(
        module.PartitionData,
        partition_index=METADATA_PARTITION,
        error_code=message.error_code,
        high_watermark=message.high_watermark,
        last_stable_offset=-1,
        log_start_offset=message.log_start_offset,
        diverging_epoch=module.EpochEndOffset(
            epoch=diverging.epoch, end_offset=diverging.end_offset
        ),
        current_leader=module.LeaderIdAndEpoch(
            leader_id=leader.leader_id, leader_epoch=leader.leader_epoch
        ),
        snapshot_id=module.SnapshotId(end_offset=snapshot.end_offset, epoch=snapshot.epoch),
        aborted_transactions=None,
        preferred_read_replica=-1,
        records=Records(records),
    )
    return make(
        module.FetchResponse,
        throttle_time=_NO_THROTTLE,
        error_code=ErrorCode.none,
        session_id=0,
        responses=(metadata_topic(module, "FetchableTopicResponse", (partition,)),),
        node_endpoints=(),
    )


def _fetch_snapshot_response(message: FetchSnapshotResponse, module: Any) -> Any:
    snapshot = message.snapshot_id
    leader = message.current_leader
    partition = module.PartitionSnapshot(
        index=METADATA_PARTITION,
        error_code=message.error_code,
        snapshot_id=module.SnapshotId(end_offset=snapshot.end_offset, epoch=snapshot.epoch),
        current_leader=module.LeaderIdAndEpoch(
            leader_id=leader.leader_id, leader_epoch=leader.leader_epoch
        ),
        size=message.size,
        position=message.position,
        unaligned_records=Records(message.unaligned_records),
    )
    return make(
        module.FetchSnapshotResponse,
        throttle_time=_NO_THROTTLE,
        error_code=ErrorCode.none,
        topics=(metadata_topic(module, "TopicSnapshot", (partition,)),),
    )


def response_from_kio(entity: Any) -> Response:
    """The raft response a kio entity carries; WireError when it cannot be one of ours."""
    api_key = int(entity.__api_key__)
    top = entity.error_code
    if api_key == VOTE_KEY:
        if top != ErrorCode.none:
            return VoteResponse(error_code=top, leader_id=-1, leader_epoch=-1, vote_granted=False)
        p = single_partition(entity)
        return VoteResponse(
            error_code=p.error_code,
            leader_id=p.leader_id,
            leader_epoch=p.leader_epoch,
            vote_granted=p.vote_granted,
        )
    if api_key in (BEGIN_QUORUM_EPOCH_KEY, END_QUORUM_EPOCH_KEY):
        cls = (
            BeginQuorumEpochResponse
            if api_key == BEGIN_QUORUM_EPOCH_KEY
            else (EndQuorumEpochResponse)
        )
        if top != ErrorCode.none:
            return cls(error_code=top, leader_id=-1, leader_epoch=-1)
        p = single_partition(entity)
        return cls(error_code=p.error_code, leader_id=p.leader_id, leader_epoch=p.leader_epoch)
    if api_key == FETCH_KEY:
        return _fetch_response_from_kio(entity)
    if api_key == FETCH_SNAPSHOT_KEY:
        if top != ErrorCode.none:
            return FetchSnapshotResponse(
                error_code=top,
                snapshot_id=SnapshotId(),
                current_leader=LeaderIdAndEpoch(),
                size=-1,
                position=-1,
                unaligned_records=b"",
            )
        p = single_partition(entity)
        return FetchSnapshotResponse(
            error_code=p.error_code,
            snapshot_id=SnapshotId(end_offset=p.snapshot_id.end_offset, epoch=p.snapshot_id.epoch),
            current_leader=LeaderIdAndEpoch(
                leader_id=p.current_leader.leader_id, leader_epoch=p.current_leader.leader_epoch
            ),
            size=p.size,
            position=p.position,
            unaligned_records=bytes(p.unaligned_records),
        )
    raise WireError(ErrorCode.invalid_request, f"API key {api_key} is not a quorum response")


def _fetch_response_from_kio(entity: Any) -> FetchResponse:
    if entity.error_code != ErrorCode.none:
        return FetchResponse(
            error_code=entity.error_code,
            high_watermark=-1,
            log_start_offset=-1,
            diverging_epoch=EpochEndOffset(),
            current_leader=LeaderIdAndEpoch(),
            snapshot_id=SnapshotId(),
            records=(),
        )
    p = single_partition(entity, "responses")
    try:
        entries = split_records(p.records)
    except CorruptRecordError as error:
        raise WireError(ErrorCode.corrupt_message, str(error)) from None
    return FetchResponse(
        error_code=p.error_code,
        high_watermark=p.high_watermark,
        log_start_offset=p.log_start_offset,
        diverging_epoch=EpochEndOffset(
            epoch=p.diverging_epoch.epoch, end_offset=p.diverging_epoch.end_offset
        ),
        current_leader=LeaderIdAndEpoch(
            leader_id=p.current_leader.leader_id, leader_epoch=p.current_leader.leader_epoch
        ),
        snapshot_id=SnapshotId(end_offset=p.snapshot_id.end_offset, epoch=p.snapshot_id.epoch),
        records=entries,
    )


def api_key_of(message: Message) -> int:
    for cls, key in API_KEY_OF.items():
        if isinstance(message, cls):
            return key
    raise TypeError(f"not a quorum request: {type(message).__name__}")
