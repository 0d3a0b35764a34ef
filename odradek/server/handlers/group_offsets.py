"""Committed offsets: OffsetCommit, TxnOffsetCommit, OffsetFetch (single and multi-group),
OffsetDelete.

The GroupCoordinator checks generation and membership and persists commits in
``__consumer_offsets`` before answering; this module only maps the per-version
request and response shapes. A TxnOffsetCommit's offsets stay pending until their
transaction's marker; an OffsetFetch asking for stable offsets (v7+ ``require_stable``,
KIP-447: what read_committed consumers send) gets UNSTABLE_OFFSET_COMMIT for a
partition with one pending, and retries.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from odradek.coordinator.group.coordinator import CoordinatorError
from odradek.coordinator.group.offset_store import OffsetCommit
from odradek.protocol.build import error_code, make, response_module
from odradek.protocol.messages import Request
from odradek.server.authorized_operations import AclOperation, ResourceType
from odradek.server.handlers import handles

if TYPE_CHECKING:
    from odradek.server.services import BrokerServices

OFFSET_COMMIT_KEY = 8
OFFSET_FETCH_KEY = 9
OFFSET_DELETE_KEY = 47
TXN_OFFSET_COMMIT_KEY = 28
_ZERO = datetime.timedelta(0)
READ = AclOperation.READ
DESCRIBE = AclOperation.DESCRIBE
GROUP = ResourceType.GROUP
TOPIC = ResourceType.TOPIC


def _authorized(
    services: BrokerServices,
    request: Request,
    group_op: AclOperation,
    group_id: str,
    commits: list[OffsetCommit],
    txn_id: str | None = None,
) -> tuple[list[OffsetCommit], dict[tuple[str, int], str]]:
    """Kafka's checks of an offset commit: WRITE on the transactional id (a
    TxnOffsetCommit), ``group_op`` on the group, READ on each topic. The commits that
    may go ahead, and the errors of the others by partition."""
    authorizer, session = services.authorizer, request.session
    denial = None
    if txn_id is not None:
        denial = authorizer.denial(
            session, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id
        )
    denial = denial or authorizer.denial(session, group_op, GROUP, group_id)
    if denial is not None:
        return [], {(c.topic, c.partition): denial for c in commits}
    readable = authorizer.allowed_names(session, READ, TOPIC, {c.topic for c in commits})
    denied = {
        (c.topic, c.partition): "TOPIC_AUTHORIZATION_FAILED"
        for c in commits
        if c.topic not in readable
    }
    return [c for c in commits if c.topic in readable], denied


@handles(OFFSET_COMMIT_KEY, 2, 9)
async def offset_commit(services: BrokerServices, request: Request) -> Any:
    module = response_module(OFFSET_COMMIT_KEY, request.header.api_version)
    body = request.body
    generation = getattr(body, "generation_id_or_member_epoch", None)
    if generation is None:
        generation = body.generation_id
    commits, denied = _authorized(services, request, READ, body.group_id, _commits(body.topics))
    try:
        results = (
            await services.groups.commit_offsets(
                body.group_id,
                generation,
                body.member_id,
                getattr(body, "group_instance_id", None),
                commits,
                request.header.api_version,
            )
            if commits
            else {}
        )
    except CoordinatorError as failure:
        results = {(c.topic, c.partition): failure.code for c in commits}
    results.update(denied)
    topics = tuple(
        make(
            module.OffsetCommitResponseTopic,
            name=topic.name,
            partitions=tuple(
                make(
                    module.OffsetCommitResponsePartition,
                    partition_index=p.partition_index,
                    error_code=error_code(results[(topic.name, p.partition_index)]),
                )
                for p in topic.partitions
            ),
        )
        for topic in body.topics
    )
    return make(module.OffsetCommitResponse, throttle_time=_ZERO, topics=topics)


@handles(TXN_OFFSET_COMMIT_KEY, 0, 3)
async def txn_offset_commit(services: BrokerServices, request: Request) -> Any:
    module = response_module(TXN_OFFSET_COMMIT_KEY, request.header.api_version)
    body = request.body
    commits, denied = _authorized(
        services, request, READ, body.group_id, _commits(body.topics), body.transactional_id
    )
    try:
        results = (
            await services.groups.txn_commit_offsets(
                body.group_id,
                body.producer_id,
                body.producer_epoch,
                getattr(body, "generation_id", -1),
                getattr(body, "member_id", ""),
                getattr(body, "group_instance_id", None),
                commits,
            )
            if commits
            else {}
        )
    except CoordinatorError as failure:
        results = {(c.topic, c.partition): failure.code for c in commits}
    results.update(denied)
    topics = tuple(
        make(
            module.TxnOffsetCommitResponseTopic,
            name=topic.name,
            partitions=tuple(
                make(
                    module.TxnOffsetCommitResponsePartition,
                    partition_index=p.partition_index,
                    error_code=error_code(results[(topic.name, p.partition_index)]),
                )
                for p in topic.partitions
            ),
        )
        for topic in body.topics
    )
    return make(module.TxnOffsetCommitResponse, throttle_time=_ZERO, topics=topics)


def _commits(topics: Any) -> list[OffsetCommit]:
    return [
        OffsetCommit(
            topic.name,
            p.partition_index,
            p.committed_offset,
            getattr(p, "committed_leader_epoch", -1),
            p.committed_metadata,
        )
        for topic in topics
        for p in topic.partitions
    ]


@handles(OFFSET_FETCH_KEY, 1, 9)
async def offset_fetch(services: BrokerServices, request: Request) -> Any:
    module = response_module(OFFSET_FETCH_KEY, request.header.api_version)
    body = request.body
    if hasattr(body, "groups"):  # v8+: several groups per request
        groups = tuple(
            _fetch_group(
                services,
                request,
                module,
                g.group_id,
                g.topics,
                True,
                getattr(g, "member_id", None),
                getattr(g, "member_epoch", -1),
                body.require_stable,
            )
            for g in body.groups
        )
        return make(module.OffsetFetchResponse, throttle_time=_ZERO, groups=groups)
    topics, error = _fetch_group(
        services,
        request,
        module,
        body.group_id,
        body.topics,
        grouped=False,
        require_stable=getattr(body, "require_stable", False),
    )
    return make(
        module.OffsetFetchResponse, throttle_time=_ZERO, topics=topics, error_code=error_code(error)
    )


def _fetch_group(
    services: BrokerServices,
    request: Request,
    module: Any,
    group_id: str,
    wanted: Any,
    grouped: bool,
    member_id: str | None = None,  # v9 (KIP-848): checked against consumer groups
    member_epoch: int = -1,
    require_stable: bool = False,
) -> Any:
    partitions = None
    if wanted is not None:
        partitions = [(t.name, p) for t in wanted for p in t.partition_indexes]
    error = "NONE"
    unstable: set[tuple[str, int]] = set()
    topic_errors: dict[str, str] = {}
    try:
        denial = services.authorizer.denial(request.session, DESCRIBE, GROUP, group_id)
        if denial is not None:
            raise CoordinatorError(denial)
        found = services.groups.fetch_offsets(group_id, partitions, member_id, member_epoch)
        if require_stable:
            unstable = services.groups.unstable_offsets(group_id)
            found.update(dict.fromkeys(unstable - found.keys()) if partitions is None else {})
        # topics without DESCRIBE: left out of an all-topics fetch, an error if named
        topics_seen = {topic for topic, _ in found}
        visible = services.authorizer.allowed_names(request.session, DESCRIBE, TOPIC, topics_seen)
        if partitions is None:
            found = {tp: v for tp, v in found.items() if tp[0] in visible}
        else:
            topic_errors = {t: "TOPIC_AUTHORIZATION_FAILED" for t in topics_seen - visible}
            found = {tp: (None if tp[0] in topic_errors else v) for tp, v in found.items()}
    except CoordinatorError as failure:
        error, found = failure.code, {}
        # v8+ says a group's error once, with no topics (as Kafka): partitions listed
        # with offset -1 beside it would read as "nothing committed" to a client that
        # looks at them first, and send a consumer back to auto.offset.reset (a
        # STALE_MEMBER_EPOCH race re-read a whole partition that way). Below v8 the
        # error goes with each partition asked for.
        if partitions is not None and not grouped:
            found = dict.fromkeys(partitions)
    by_topic: dict[str, list[Any]] = {}
    topic_class = module.OffsetFetchResponseTopics if grouped else module.OffsetFetchResponseTopic
    partition_class = (
        module.OffsetFetchResponsePartitions if grouped else module.OffsetFetchResponsePartition
    )
    for (topic, partition), value in sorted(found.items()):
        by_topic.setdefault(topic, []).append(
            make(
                partition_class,
                partition_index=partition,
                committed_offset=value.offset if value else -1,
                committed_leader_epoch=value.leader_epoch if value else -1,
                metadata=value.metadata if value else "",
                error_code=error_code(
                    topic_errors.get(topic)
                    or _partition_error(error, grouped, (topic, partition), unstable)
                ),
            )
        )
    topics = tuple(make(topic_class, name=t, partitions=tuple(ps)) for t, ps in by_topic.items())
    if grouped:
        return make(
            module.OffsetFetchResponseGroup,
            group_id=group_id,
            topics=topics,
            error_code=error_code(error),
        )
    return topics, error


def _partition_error(
    error: str, grouped: bool, tp: tuple[str, int], unstable: set[tuple[str, int]]
) -> str:
    if error != "NONE":
        return "NONE" if grouped else error
    return "UNSTABLE_OFFSET_COMMIT" if tp in unstable else "NONE"


@handles(OFFSET_DELETE_KEY, 0, 0)
async def offset_delete(services: BrokerServices, request: Request) -> Any:
    module = response_module(OFFSET_DELETE_KEY, request.header.api_version)
    body = request.body
    wanted = [(t.name, p.partition_index) for t in body.topics for p in t.partitions]
    # As Kafka's KafkaApis: partitions the cluster does not have are answered here.
    image = services.metadata.image
    known = [(t, p) for t, p in wanted if t in image.topics and p in image.topics[t].partitions]
    readable = services.authorizer.allowed_names(
        request.session, READ, TOPIC, {t for t, _ in known}
    )
    try:
        denial = services.authorizer.denial(
            request.session, AclOperation.DELETE, GROUP, body.group_id
        )
        if denial is not None:
            raise CoordinatorError(denial)
        results = await services.groups.delete_offsets(
            body.group_id, [(t, p) for t, p in known if t in readable]
        )
        results.update({tp: "TOPIC_AUTHORIZATION_FAILED" for tp in known if tp[0] not in readable})
        results.update({tp: "UNKNOWN_TOPIC_OR_PARTITION" for tp in wanted if tp not in results})
        top = "NONE"
    except CoordinatorError as failure:
        results, top = {}, failure.code
    topics = (
        tuple(
            make(
                module.OffsetDeleteResponseTopic,
                name=t.name,
                partitions=tuple(
                    make(
                        module.OffsetDeleteResponsePartition,
                        partition_index=p.partition_index,
                        error_code=error_code(results.get((t.name, p.partition_index), "NONE")),
                    )
                    for p in t.partitions
                ),
            )
            for t in body.topics
        )
        if top == "NONE"
        else ()
    )
    return make(
        module.OffsetDeleteResponse, error_code=error_code(top), throttle_time=_ZERO, topics=topics
    )
