"""Raft messages ⇄ kio entities, field by field, and log entries ⇄ Fetch record bytes.

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

Records: an entry's payload is one v2 record batch (the metadata writer's batch);
``encode_entries`` concatenates them with baseOffset and partitionLeaderEpoch stamped
to the entry's offset and epoch (outside the CRC). A payload that is not a batch (the
core's LeaderChange marker, today a short text) travels wrapped in a one-record batch
marked with the ``odradek.raft.raw`` header and comes out unwrapped, so every replica
holds the same payload bytes. ``split_records`` walks batch headers: each batch is one
entry (offset = base offset, epoch = partitionLeaderEpoch, control bit, count = offsets
it spans); a trailing partial batch (a size-capped fetch) is left for the next fetch.
"""

from __future__ import annotations

import dataclasses
import datetime
import uuid
from collections.abc import Iterable, Sequence
from typing import Any, Final, Literal

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType
from kio.static.primitive import Records

from odradek.protocol.build import has_field, make
from odradek.raft.log import LogEntry, SnapshotId
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
from odradek.records.batch import (
    COMPRESSION_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    check_batch,
    stamp,
    unpack_header,
)
from odradek.records.codec import Header, Record, encode_batch, iter_records
from odradek.records.errors import CorruptRecordError

METADATA_TOPIC: Final = "__cluster_metadata"
# The listener name DescribeQuorum v2 gives voters' addresses under: the voters come from
# controller.quorum.voters, which names no listener (Kafka's default controller listener).
CONTROLLER_LISTENER: Final = "CONTROLLER"
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

RAW_PAYLOAD_HEADER: Final = "odradek.raft.raw"
LEADER_CHANGE_CONTROL_KEY: Final = b"\x00\x00\x00\x02"  # control record version 0, type 2
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


def _request_module(api_key: int, version: int) -> Any:
    return _module(api_key, version, EntityType.request)


def _response_module(api_key: int, version: int) -> Any:
    return _module(api_key, version, EntityType.response)


# --- records ------------------------------------------------------------------------


def _is_batch(payload: bytes) -> bool:
    if len(payload) < HEADER_SIZE:
        return False
    try:
        header = unpack_header(payload)
    except CorruptRecordError:
        return False
    return header.size == len(payload)


def _wrap(entry: LogEntry) -> bytes:
    key = LEADER_CHANGE_CONTROL_KEY if entry.control else None
    record = Record(entry.offset, -1, key, entry.payload, (Header(RAW_PAYLOAD_HEADER, None),))
    return encode_batch(
        [record],
        base_offset=entry.offset,
        partition_leader_epoch=entry.epoch,
        is_control=entry.control,
    )


def encode_entry(entry: LogEntry) -> bytes:
    """One entry as the v2 batch that carries it (stamped with its offset and epoch)."""
    if not _is_batch(entry.payload):
        return _wrap(entry)
    batch = bytearray(entry.payload)
    stamp(batch, 0, entry.offset, entry.epoch)
    return bytes(batch)


def encode_entries(entries: Iterable[LogEntry]) -> bytes:
    return b"".join(encode_entry(entry) for entry in entries)


@dataclasses.dataclass(frozen=True, slots=True)
class WireBatch:
    """One batch of a Fetch response: what becomes one LogEntry."""

    offset: int
    epoch: int
    payload: bytes
    control: bool
    count: int  # offsets the batch spans (lastOffsetDelta + 1)

    def entry(self) -> LogEntry:
        return LogEntry(self.offset, self.epoch, self.payload, self.control, self.count)


def split_batches(records: bytes | memoryview) -> list[WireBatch]:
    """The whole batches of ``records`` (CRC-checked; CorruptRecordError otherwise)."""
    view = memoryview(records)
    batches: list[WireBatch] = []
    position = 0
    while len(view) - position >= HEADER_SIZE:
        header = unpack_header(view, position)
        if position + header.size > len(view):
            break  # a partial batch at the end of a size-capped response
        check_batch(view, position)
        payload = bytes(view[position : position + header.size])
        if (
            header.record_count == 1
            and header.attributes & COMPRESSION_MASK == 0
            and header.size - HEADER_SIZE < 1 << 20
        ):
            payload = _unwrap(payload)
        batches.append(
            WireBatch(
                header.base_offset,
                header.partition_leader_epoch,
                payload,
                header.is_control,
                header.last_offset_delta + 1,
            )
        )
        position += header.batch_length + LOG_OVERHEAD
    return batches


def _unwrap(payload: bytes) -> bytes:
    """The original bytes of a wrapped non-batch payload; other batches stay whole."""
    records = list(iter_records(payload, unpack_header(payload)))
    if len(records) != 1:
        return payload
    (record,) = records
    if record.value is not None and any(h.key == RAW_PAYLOAD_HEADER for h in record.headers):
        return record.value
    return payload


def split_records(records: bytes | memoryview | None) -> tuple[LogEntry, ...]:
    if not records:
        return ()
    return tuple(batch.entry() for batch in split_batches(records))


# --- shared pieces -------------------------------------------------------------------


def _topic_matches(topic: Any) -> bool:
    name = getattr(topic, "topic_name", None) or getattr(topic, "topic", None)
    name = name or getattr(topic, "name", None)
    if name is not None:
        return bool(name == METADATA_TOPIC)
    return getattr(topic, "topic_id", None) == METADATA_TOPIC_ID


def _single_partition(entity: Any, topics_field: str = "topics") -> Any:
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


def _topic(module: Any, class_name: str, partitions: tuple[Any, ...]) -> Any:
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
        module = _request_module(BEGIN_QUORUM_EPOCH_KEY, version)
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
            topics=(_topic(module, "TopicData", (partition,)),),
            leader_endpoints=(),
        )
    if isinstance(message, EndQuorumEpochRequest):
        module = _request_module(END_QUORUM_EPOCH_KEY, version)
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
            topics=(_topic(module, "TopicData", (partition,)),),
            leader_endpoints=(),
        )
    if isinstance(message, FetchRequest):
        return _fetch_request(message, version)
    return _fetch_snapshot_request(message, version)


def _vote_request(message: VoteRequest, version: int) -> Any:
    module = _request_module(VOTE_KEY, version)
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
        topics=(_topic(module, "TopicData", (partition,)),),
    )


def _fetch_request(message: FetchRequest, version: int) -> Any:
    module = _request_module(FETCH_KEY, version)
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
        topics=(_topic(module, "FetchTopic", (partition,)),),
        forgotten_topics_data=(),
        rack_id="",
    )


def _fetch_snapshot_request(message: FetchSnapshotRequest, version: int) -> Any:
    module = _request_module(FETCH_SNAPSHOT_KEY, version)
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
        topics=(_topic(module, "TopicSnapshot", (partition,)),),
    )


def _milliseconds(value: datetime.timedelta) -> int:
    """A kio i32 duration in whole milliseconds (a negative MaxWait is the peer's: the
    core treats anything ≤ 0 as "answer at once")."""
    return value // datetime.timedelta(milliseconds=1)


def request_from_kio(entity: Any) -> Request:
    """The raft request a kio entity carries; WireError when it is not for our partition."""
    api_key = int(entity.__api_key__)
    if api_key == VOTE_KEY:
        p = _single_partition(entity)
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
        p = _single_partition(entity)
        return BeginQuorumEpochRequest(
            cluster_id=entity.cluster_id,
            voter_id=getattr(entity, "voter_id", -1),
            leader_id=p.leader_id,
            leader_epoch=p.leader_epoch,
        )
    if api_key == END_QUORUM_EPOCH_KEY:
        p = _single_partition(entity)
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
        p = _single_partition(entity)
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
        p = _single_partition(entity)
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
    module = _response_module(api_key, version)
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
    module = _response_module(api_key, version)
    if isinstance(message, VoteResponse):
        partition = module.PartitionData(
            partition_index=METADATA_PARTITION,
            error_code=message.error_code,
            leader_id=message.leader_id,
            leader_epoch=message.leader_epoch,
            vote_granted=message.vote_granted,
        )
        return module.VoteResponse(
            error_code=ErrorCode.none, topics=(_topic(module, "TopicData", (partition,)),)
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
            error_code=ErrorCode.none, topics=(_topic(module, "TopicData", (partition,)),)
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
        responses=(_topic(module, "FetchableTopicResponse", (partition,)),),
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
        topics=(_topic(module, "TopicSnapshot", (partition,)),),
    )


def response_from_kio(entity: Any) -> Response:
    """The raft response a kio entity carries; WireError when it cannot be one of ours."""
    api_key = int(entity.__api_key__)
    top = entity.error_code
    if api_key == VOTE_KEY:
        if top != ErrorCode.none:
            return VoteResponse(error_code=top, leader_id=-1, leader_epoch=-1, vote_granted=False)
        p = _single_partition(entity)
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
        p = _single_partition(entity)
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
        p = _single_partition(entity)
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
    p = _single_partition(entity, "responses")
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


# --- DescribeQuorum ------------------------------------------------------------------


def check_describe_quorum_request(entity: Any) -> None:
    """WireError unless the request asks about the metadata partition (only)."""
    _single_partition(entity)


def describe_quorum_to_kio(
    description: Any,
    version: int,
    wall_offset_ms: int = 0,
    nodes: Sequence[tuple[int, str, int]] = (),
) -> Any:
    """DescribeQuorumResponse from a ``QuorumDescription``; ``wall_offset_ms`` turns the
    node's clock (monotonic) into wall-clock timestamps, as Kafka reports them. ``nodes``
    (v2): each voter's ``(node id, host, port)`` on the controller listener, so a tool
    that asked a follower can find the leader."""
    module = _response_module(DESCRIBE_QUORUM_KEY, version)

    def replica(r: Any) -> Any:
        def wall(ms: int) -> int:
            return ms + wall_offset_ms if ms >= 0 else -1

        return make(
            module.ReplicaState,
            replica_id=r.replica_id,
            replica_directory_id=None,
            log_end_offset=r.log_end_offset,
            last_fetch_timestamp=wall(r.last_fetch_timestamp),
            last_caught_up_timestamp=wall(r.last_caught_up_timestamp),
        )

    partition = make(
        module.PartitionData,
        partition_index=METADATA_PARTITION,
        error_code=description.error_code,
        error_message=None,
        leader_id=description.leader_id,
        leader_epoch=description.leader_epoch,
        high_watermark=description.high_watermark,
        current_voters=tuple(replica(r) for r in description.current_voters),
        observers=tuple(replica(r) for r in description.observers),
    )
    return make(
        module.DescribeQuorumResponse,
        error_code=ErrorCode.none,
        error_message=None,
        topics=(_topic(module, "TopicData", (partition,)),),
        nodes=tuple(
            make(
                module.Node,
                node_id=node_id,
                listeners=(make(module.Listener, name=CONTROLLER_LISTENER, host=host, port=port),),
            )
            for node_id, host, port in nodes
        )
        if version >= 2
        else (),
    )


def describe_quorum_request(version: int) -> Any:
    module = _request_module(DESCRIBE_QUORUM_KEY, version)
    partition = module.PartitionData(partition_index=METADATA_PARTITION)
    return module.DescribeQuorumRequest(topics=(_topic(module, "TopicData", (partition,)),))


def api_key_of(message: Message) -> int:
    for cls, key in API_KEY_OF.items():
        if isinstance(message, cls):
            return key
    raise TypeError(f"not a quorum request: {type(message).__name__}")
