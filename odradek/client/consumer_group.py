"""Classic consumer-group membership for the asyncio consumer, eager or cooperative.

How this works and why: ``subscribe`` starts two tasks. The rebalance task joins the
group whenever a rejoin is needed, doing what ``consumer_rebalance.py`` decides: it
gives partitions up (eager: all of them; cooperative, KIP-429: only those of topics
no longer subscribed — commit under auto-commit, then ``on_revoke``), sends JoinGroup
(repeating once with the member id the broker hands out on MEMBER_ID_REQUIRED) with
the partitions it kept as owned, and if it is the leader runs the assignor the group
chose over every member's subscription; SyncGroup gives each member its partitions.
A cooperative member then revokes only what it lost, assigns only what is new, and
rejoins at once if it revoked anything, so the partitions can move on in the next
rebalance; meanwhile it keeps fetching the partitions it kept. The same task
auto-commits every ``auto.commit.interval.ms`` and, for regex subscriptions, rejoins
when the set of matching topics changes. The heartbeat task runs independently of
``poll`` and pauses only while JoinGroup/SyncGroup are in flight: REBALANCE_IN_PROGRESS
asks for a rejoin, ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID mean
the partitions are lost (``on_lost``, no commit). Static members
(``group.instance.id``) keep their identity and do not LeaveGroup on close.

Callbacks follow confluent-kafka: ``on_assign`` / ``on_revoke`` / ``on_lost`` get the
partitions (the change only, when cooperative) and return True if they changed the
assignment themselves (``assign``, ``incremental_assign``, ...); otherwise, or if
they fail, the member applies the change. With ``assign_first`` (aiokafka and Java
listeners) the new partitions are assigned before ``on_assign`` runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import re
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Final

from kio.schema.errors import ErrorCode

from odradek.client import assignors, consumer_protocol
from odradek.client.cluster import KafkaError
from odradek.client.config import ConfigError
from odradek.client.connection import KafkaConnectionError, request_entity
from odradek.client.consumer import (
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    SYNC_GROUP,
    TP,
    ConsumerCore,
)
from odradek.client.consumer_offsets import CommitFailedError, Generation
from odradek.client.consumer_rebalance import (
    chosen_assignor,
    plan_join,
    plan_sync,
    rebalance_protocol,
)

logger = logging.getLogger(__name__)

# A rebalance callback; it returns True if it changed the assignment itself.
Callback = Callable[[list[TP]], Awaitable[bool | None]] | None
_LOST: Final = frozenset(
    {ErrorCode.illegal_generation, ErrorCode.unknown_member_id, ErrorCode.fenced_instance_id}
)
_RETRY: Final = frozenset(
    {
        ErrorCode.rebalance_in_progress,
        ErrorCode.not_coordinator,
        ErrorCode.coordinator_not_available,
        ErrorCode.coordinator_load_in_progress,
    }
)


class GroupMember:
    def __init__(self, core: ConsumerCore) -> None:
        config = core.config
        self.core = core
        self.group_id = core.group_id
        self.instance_id: str | None = config["group.instance.id"]
        self.session_timeout_ms: int = config["session.timeout.ms"]
        self.rebalance_timeout_ms: int = config["max.poll.interval.ms"]
        self.heartbeat_s: float = config["heartbeat.interval.ms"] / 1000
        self.auto_commit: bool = config["enable.auto.commit"]
        self.auto_commit_s: float = config["auto.commit.interval.ms"] / 1000
        try:
            self.strategies = [
                assignors.get_assignor(s)
                for s in config["partition.assignment.strategy"].split(",")
                if s.strip()
            ]
        except KeyError as error:
            raise ConfigError("partition.assignment.strategy", str(error.args[0])) from None
        if not self.strategies:
            raise ConfigError("partition.assignment.strategy", "no partition assignor given")
        self.protocol = rebalance_protocol(self.strategies)
        self.member_id = ""
        self.generation_id = -1
        self.topics: list[str] = []
        self.patterns: list[re.Pattern[str]] = []
        self.subscribed_topics: list[str] = []
        self.on_assign: Callback = None
        self.on_revoke: Callback = None
        self.on_lost: Callback = None
        self.assign_first = False
        self.need_rejoin = False
        self.lost = False
        self.closed = False
        self.joining = False  # JoinGroup/SyncGroup in flight: no heartbeats
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.error: Exception | None = None
        self.owned: list[TP] = []  # what the group gave this member and it still holds
        self.previous: list[TP] = []  # the last assignment (eager sticky's user data)
        core.offsets.generation = lambda: (self.generation_id, self.member_id, self.instance_id)
        core.offsets.on_commit_failed = self._commit_failed

    # -- control ---------------------------------------------------------------------
    def subscribe(
        self,
        topics: Iterable[str],
        on_assign: Callback = None,
        on_revoke: Callback = None,
        on_lost: Callback = None,
        *,
        assign_first: bool = False,
    ) -> None:
        """Subscribe to topic names; a name starting with ``^`` is a regex."""
        names = list(topics)
        self.topics = [t for t in names if not t.startswith("^")]
        self.patterns = [re.compile(t) for t in names if t.startswith("^")]
        self.on_assign, self.on_revoke, self.on_lost = on_assign, on_revoke, on_lost
        self.assign_first = assign_first
        self.rejoin()
        if not self._tasks:
            loop = asyncio.get_running_loop()
            self._tasks = [
                loop.create_task(self._rebalance_loop()),
                loop.create_task(self._heartbeat_loop()),
            ]

    def rejoin(self) -> None:
        self.need_rejoin = True
        self._wake.set()

    def rejoin_lost(self) -> None:
        self.lost = True
        self.rejoin()

    def _commit_failed(self, code: ErrorCode, generation: Generation) -> None:
        """The group refused a commit made in ``generation``."""
        if generation[:2] != (self.generation_id, self.member_id):
            return  # made in an older generation: this member has moved on already
        if code == ErrorCode.rebalance_in_progress:
            if not self.joining:
                self.rejoin()
            return
        self._handle_error(code)

    @property
    def stable(self) -> bool:
        return self.generation_id >= 0 and not self.need_rejoin

    # -- the rebalance task ------------------------------------------------------------
    async def _matching_topics(self) -> list[str]:
        if not self.patterns:
            return sorted(self.topics)
        metadata = await self.core.cluster.refresh(None)
        names = set(self.topics)
        for name, info in metadata.topics.items():
            if not info.is_internal and any(p.match(name) for p in self.patterns):
                names.add(name)
        return sorted(names)

    async def _rebalance_loop(self) -> None:
        next_commit = time.monotonic() + self.auto_commit_s
        next_check = time.monotonic() + self.core.cluster.metadata_max_age_s
        while not self.closed:
            in_rebalance = False
            try:
                if self.need_rejoin:
                    in_rebalance = True
                    await self._rebalance()
                    continue
                now = time.monotonic()
                if self.auto_commit and now >= next_commit:
                    next_commit = now + self.auto_commit_s
                    await self.core.commit()
                if self.patterns and now >= next_check:
                    next_check = now + min(self.core.cluster.metadata_max_age_s, 5.0)
                    if await self._matching_topics() != self.subscribed_topics:
                        self.rejoin()
                        continue
                self._wake.clear()
                wait = min(next_commit if self.auto_commit else now + 1, next_check) - now
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), max(wait, 0.01))
            except asyncio.CancelledError:
                raise
            except (KafkaError, KafkaConnectionError) as error:
                logger.info("group %s: %s", self.group_id, error)
                if in_rebalance:
                    self.need_rejoin = True  # the rebalance did not finish: try again
                if (
                    isinstance(error, KafkaError)
                    and not error.retriable
                    and error.code not in _RETRY | _LOST
                    and not isinstance(error, CommitFailedError)
                ):
                    self.error = error
                await asyncio.sleep(self.core.cluster.retry_backoff_s)
            except Exception as error:
                logger.exception("group %s rebalance failed", self.group_id)
                if in_rebalance:
                    self.need_rejoin = True
                self.error = error
                await asyncio.sleep(1.0)

    async def _call(self, callback: Callback, partitions: list[TP]) -> bool:
        """Run a rebalance callback; True if it changed the assignment itself. A failing
        callback is reported through ``poll`` and the member applies the change."""
        if callback is None:
            return False
        try:
            return bool(await callback(list(partitions)))
        except Exception as error:
            logger.warning("group %s: rebalance callback failed: %r", self.group_id, error)
            self.error = error
            return False

    async def _release(self, partitions: list[TP], lost: bool, notify_empty: bool) -> None:
        """Give partitions up: commit them (auto-commit, unless lost), tell the
        application (on_revoke, or on_lost falling back to on_revoke), stop fetching."""
        gone = set(partitions)
        self.owned = [tp for tp in self.owned if tp not in gone]
        if not partitions and not notify_empty:
            return
        self.core.hold(partitions)
        if lost:
            callback = self.on_lost or self.on_revoke
        else:
            callback = self.on_revoke
            if self.auto_commit and partitions:
                with contextlib.suppress(KafkaError, KafkaConnectionError):
                    await self.core.commit(partitions=partitions)
        if not await self._call(callback, partitions) and gone:
            await self.core.assign([tp for tp in self.core.assignment() if tp not in gone])

    async def _take(self, partitions: list[TP]) -> None:
        """Start on new partitions (eager: the whole assignment) and tell the application."""
        self.owned += [tp for tp in partitions if tp not in set(self.owned)]
        if self.assign_first:
            await self._assign_partitions(partitions)
            await self._call(self.on_assign, partitions)
        elif not await self._call(self.on_assign, partitions):
            await self._assign_partitions(partitions)

    async def _assign_partitions(self, partitions: list[TP]) -> None:
        if self.protocol == assignors.EAGER:
            await self.core.assign(partitions)
        else:
            current = self.core.assignment()
            await self.core.assign(current + [tp for tp in partitions if tp not in set(current)])

    async def _rebalance(self) -> None:
        self.need_rejoin = False
        topics = await self._matching_topics()
        lost, self.lost = self.lost, False
        plan = plan_join(self.protocol, self.owned, self.generation_id, lost, topics)
        if lost:
            self.generation_id, self.previous = -1, []
            await self._release(list(plan.lose), lost=True, notify_empty=plan.notify_empty)
        else:
            await self._release(list(plan.revoke), lost=False, notify_empty=plan.notify_empty)
        self.subscribed_topics = topics
        self.core.cluster.want_topics(topics)
        self.joining = True
        try:
            partitions = await self._join_and_sync(topics, list(plan.claim), plan.generation)
        finally:
            self.joining = False
        if self.need_rejoin and self.protocol == assignors.EAGER:
            return  # the next rebalance was asked for already; eager gives it all up anyway
        self.previous = partitions
        change = plan_sync(self.protocol, self.owned, partitions)
        await self._release(list(change.revoke), lost=False, notify_empty=False)
        await self._take(list(change.assign))
        logger.info(
            "group %s generation %s: assigned %s%s",
            self.group_id,
            self.generation_id,
            partitions,
            f", revoked {list(change.revoke)}" if change.revoke else "",
        )
        if change.rejoin:
            self.rejoin()  # the second rebalance: the revoked partitions move on

    async def _join_and_sync(self, topics: list[str], claim: list[TP], generation: int) -> list[TP]:
        response = await self._join(topics, claim, generation)
        self.generation_id = response.generation_id
        self.member_id = response.member_id
        assignor = chosen_assignor(self.strategies, response.protocol_name)
        assignments: dict[str, bytes] = {}
        if response.leader == self.member_id:
            assignments = await self._assign(assignor, response.members)
        connection = await self.core.coordinator()
        version = connection.version_for(SYNC_GROUP)
        sync = await connection.send(
            request_entity(
                SYNC_GROUP,
                version,
                group_id=self.group_id,
                generation_id=self.generation_id,
                member_id=self.member_id,
                group_instance_id=self.instance_id,
                protocol_type="consumer",
                protocol_name=response.protocol_name,
                assignments=tuple(
                    request_entity(
                        SYNC_GROUP,
                        version,
                        "SyncGroupRequestAssignment",
                        member_id=m,
                        assignment=a,
                    )
                    for m, a in assignments.items()
                ),
            )
        )
        if sync.error_code != ErrorCode.none:
            self._handle_error(sync.error_code)
            raise self.core.coordinator_error(sync.error_code, f"SyncGroup {self.group_id}")
        return [
            (tp.topic, tp.partition)
            for tp in consumer_protocol.decode_assignment(sync.assignment).partitions
        ]

    async def _join(self, topics: list[str], claim: list[TP], generation: int) -> Any:
        owned = tuple(consumer_protocol.TopicPartition(*tp) for tp in claim)
        previous = [consumer_protocol.TopicPartition(*tp) for tp in self.previous]
        protocols = [
            (
                a.name,
                consumer_protocol.encode_subscription(
                    consumer_protocol.Subscription(
                        tuple(topics),
                        a.subscription_user_data(topics, previous, generation),
                        owned,
                        generation,
                    )
                ),
            )
            for a in self.strategies
        ]
        while True:
            connection = await self.core.coordinator()
            version = connection.version_for(JOIN_GROUP)
            request = request_entity(
                JOIN_GROUP,
                version,
                group_id=self.group_id,
                session_timeout=datetime.timedelta(milliseconds=self.session_timeout_ms),
                rebalance_timeout=datetime.timedelta(milliseconds=self.rebalance_timeout_ms),
                member_id=self.member_id,
                group_instance_id=self.instance_id,
                protocol_type="consumer",
                protocols=tuple(
                    request_entity(
                        JOIN_GROUP, version, "JoinGroupRequestProtocol", name=name, metadata=data
                    )
                    for name, data in protocols
                ),
                reason=None,
            )
            # The broker holds a JoinGroup until the group has joined: up to the
            # rebalance timeout, as Java's client allows for.
            wait_s = max(connection.request_timeout_s, self.rebalance_timeout_ms / 1000 + 5)
            response = await connection.send(request, timeout_s=wait_s)
            code = response.error_code
            if code == ErrorCode.none:
                return response
            if code == ErrorCode.member_id_required:
                self.member_id = response.member_id
                continue
            if code == ErrorCode.unknown_member_id:
                self.member_id = ""
                if claim:  # removed from the group: what it still holds may be elsewhere
                    self.rejoin_lost()
                    raise KafkaError(code, f"JoinGroup {self.group_id}")
                continue
            if code in _RETRY:
                self.core.coordinator_error(code, "")
                await asyncio.sleep(self.core.cluster.retry_backoff_s)
                continue
            raise KafkaError(code, f"JoinGroup {self.group_id}")

    async def _assign(self, assignor: assignors.Assignor, members: Any) -> dict[str, bytes]:
        subscriptions = {
            m.member_id: consumer_protocol.decode_subscription(m.metadata, m.group_instance_id)
            for m in members
        }
        wanted = sorted({t for s in subscriptions.values() for t in s.topics})
        self.core.cluster.want_topics(wanted)
        metadata = await self.core.cluster.refresh(wanted)
        partitions = {t: len(metadata.topics[t].partitions) for t in wanted if t in metadata.topics}
        result = assignor.assign(subscriptions, partitions)
        return {m: consumer_protocol.encode_assignment(a) for m, a in result.items()}

    def _handle_error(self, code: ErrorCode) -> None:
        if code in _LOST:
            if code == ErrorCode.unknown_member_id:
                self.member_id = ""
            self.generation_id = -1
            self.rejoin_lost()
        elif code == ErrorCode.rebalance_in_progress:
            self.rejoin()

    # -- the heartbeat task ------------------------------------------------------------
    async def _heartbeat_loop(self) -> None:
        while not self.closed:
            await asyncio.sleep(self.heartbeat_s)
            if self.generation_id < 0 or self.joining:
                continue
            try:
                connection = await self.core.coordinator()
                version = connection.version_for(HEARTBEAT)
                response = await connection.send(
                    request_entity(
                        HEARTBEAT,
                        version,
                        group_id=self.group_id,
                        generation_id=self.generation_id,
                        member_id=self.member_id,
                        group_instance_id=self.instance_id,
                    )
                )
                if response.error_code != ErrorCode.none:
                    logger.info("heartbeat: %s", response.error_code.name)
                    self.core.coordinator_error(response.error_code, "")
                    self._handle_error(response.error_code)
            except asyncio.CancelledError:
                raise
            except (KafkaError, KafkaConnectionError) as error:
                logger.debug("heartbeat failed: %s", error)

    # -- close -----------------------------------------------------------------------
    async def close(self) -> None:
        """Commit (auto-commit), revoke everything (or lose it, if the member was
        fenced), and leave the group (dynamic members only)."""
        self.closed = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.owned or self.generation_id >= 0:
            lost = self.lost or self.generation_id < 0
            eager = self.protocol == assignors.EAGER
            with contextlib.suppress(KafkaError, KafkaConnectionError):
                await self._release(list(self.owned), lost, notify_empty=eager and not lost)
        with contextlib.suppress(KafkaError, KafkaConnectionError):
            await self.core.assign([])
        if self.instance_id is not None or not self.member_id:
            return
        with contextlib.suppress(KafkaError, KafkaConnectionError, IndexError):
            connection = await self.core.coordinator()
            version = connection.version_for(LEAVE_GROUP)
            await connection.send(
                request_entity(
                    LEAVE_GROUP,
                    version,
                    group_id=self.group_id,
                    member_id=self.member_id,
                    members=(
                        request_entity(
                            LEAVE_GROUP,
                            version,
                            "MemberIdentity",
                            member_id=self.member_id,
                            group_instance_id=None,
                            reason="the consumer is closing",
                        ),
                    ),
                )
            )
        self.generation_id, self.member_id = -1, ""
