"""Classic consumer-group membership for the asyncio consumer, eager or cooperative.

How this works and why: ``subscribe`` starts two tasks. The rebalance task joins the
group whenever a rejoin is needed, doing what ``rebalance.py`` decides: it
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

``max.poll.interval.ms`` (as librdkafka and Java enforce it): the faces call
``poll_begin``/``poll_end`` around every poll. Once the application has polled and
then stays out of poll longer than that, the heartbeat task stops the rebalance in
progress, sends LeaveGroup (dynamic members; a static one just stops heartbeating, so
its session runs out) and forgets its member id; the rebalance task gives the
partitions up as lost (``on_lost``) and does not rejoin until the next poll, which
also gets the error (``_MAX_POLL_EXCEEDED``, blocking face). ``unsubscribe`` gives
everything up (``on_revoke``) and leaves the group; a later ``subscribe`` joins anew.

Callbacks follow confluent-kafka: ``on_assign`` / ``on_revoke`` / ``on_lost`` get the
partitions (the change only, when cooperative) and return True if they changed the
assignment themselves (``assign``, ``incremental_assign``, ...); otherwise, or if
they fail, the member applies the change. With ``assign_first`` (aiokafka and Java
listeners) the new partitions are assigned before ``on_assign`` runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Final

from kio.schema.errors import ErrorCode

from odradek.client._core.config import ConfigError
from odradek.client._core.connection import KafkaConnectionError
from odradek.client._core.errors import KafkaError, LocalError
from odradek.client.consumer import assignors
from odradek.client.consumer import group_requests as requests
from odradek.client.consumer import protocol as consumer_protocol
from odradek.client.consumer.core import TP, ConsumerCore
from odradek.client.consumer.offsets import CommitFailedError, Generation
from odradek.client.consumer.rebalance import (
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
        if not core.group_id:
            raise ConfigError("group.id", "group membership needs a group.id")
        self.group_id: str = core.group_id
        self.instance_id: str | None = config["group.instance.id"]
        self.session_timeout_ms: int = config["session.timeout.ms"]
        self.rebalance_timeout_ms: int = config["max.poll.interval.ms"]
        self.max_poll_s = self.rebalance_timeout_ms / 1000
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
        self._current: asyncio.Task[None] | None = None  # the rebalance in progress
        self._loop = asyncio.get_running_loop()
        # max.poll.interval.ms: when the application last returned from a poll (None:
        # it never polled, so nothing expires yet), how many polls are under way, and
        # whether the member left for it (rejoining on the next poll).
        self._last_poll: float | None = None
        self._in_poll = 0
        self.poll_expired = False
        self.poll_error: KafkaError | None = None
        self.leave_static = False  # unsubscribe: a static member leaves too (librdkafka)
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

    def unsubscribe(self, leave_static: bool = False) -> None:
        """Give every partition up and leave the group (a static member sends
        LeaveGroup only with ``leave_static``, as librdkafka does and aiokafka not)."""
        self.topics, self.patterns = [], []
        self.leave_static = leave_static
        if self._tasks:
            self.rejoin()

    # -- max.poll.interval.ms ----------------------------------------------------------
    def poll_begin(self) -> KafkaError | None:
        """The application polls (from any thread). Returns the max.poll.interval.ms
        error, once; a member that left for it rejoins now."""
        self._in_poll += 1
        if self.poll_expired:
            self._loop.call_soon_threadsafe(self._poll_resumed)
        error, self.poll_error = self.poll_error, None
        return error

    def poll_end(self) -> None:
        self._last_poll = time.monotonic()
        self._in_poll -= 1

    def _poll_resumed(self) -> None:
        if self.poll_expired:
            self.poll_expired = False
            logger.info("group %s: the application polls again: rejoining", self.group_id)
            self._wake.set()

    def _poll_overdue_s(self) -> float:
        """How long ago the poll interval ran out (negative: still within it)."""
        if self._last_poll is None or self._in_poll or self.poll_expired:
            return -self.max_poll_s
        if not (self.topics or self.patterns):
            return -self.max_poll_s
        return time.monotonic() - self._last_poll - self.max_poll_s

    async def _poll_timeout(self, over_s: float) -> None:
        """Leave the group: the application stopped polling (see the module doc)."""
        message = (
            f"Application maximum poll interval ({self.rebalance_timeout_ms}ms) "
            f"exceeded by {int(over_s * 1000)}ms"
        )
        logger.warning("group %s: %s: leaving the group", self.group_id, message)
        self.poll_error = KafkaError(LocalError.max_poll_exceeded, message)
        self.poll_expired = True
        task, joining = self._current, self.joining
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task])
            if joining:  # the broker may hold its JoinGroup: leave on a new connection
                self.core.offsets.reconnect()
        member_id = self.member_id
        self.generation_id, self.member_id = -1, ""  # no more heartbeats
        self.rejoin_lost()  # released by the rebalance task, rejoined on the next poll
        if self.instance_id is None and member_id:
            await self._send_leave(member_id, "consumer poll timeout has expired")

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
                if self.poll_expired:  # give the partitions up; rejoin on the next poll
                    if self.lost:
                        await self._lose_all()
                    self._wake.clear()
                    if self.poll_expired:
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(self._wake.wait(), 1.0)
                    continue
                if self.need_rejoin:
                    in_rebalance = True
                    if not (self.topics or self.patterns):
                        self.need_rejoin = False
                        await self._leave_group("the consumer unsubscribed", self.leave_static)
                        continue
                    await self._run_rebalance()
                    continue
                now = time.monotonic()
                if self.auto_commit and now >= next_commit:
                    next_commit = now + self.auto_commit_s
                    await self.core.commit(changed_only=True)
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
                    and not error.retriable()
                    and error.code() not in _RETRY | _LOST
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

    async def _run_rebalance(self) -> None:
        """``_rebalance`` as a task of its own, which the poll timeout may stop."""
        self._current = self._loop.create_task(self._rebalance())
        try:
            await self._current
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if self.closed or (current is not None and current.cancelling()):
                raise
            logger.info("group %s: rebalance stopped by the poll timeout", self.group_id)
        finally:
            self._current = None

    async def _lose_all(self) -> None:
        """Give up, as lost, everything held: owned, or still assigned because a
        stopped rebalance never finished giving it up."""
        held = list(dict.fromkeys(self.owned + self.core.assignment()))
        self.generation_id, self.previous = -1, []
        await self._release(held, lost=True, notify_empty=False)
        self.lost = False

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
                    await self.core.commit(partitions=partitions, changed_only=True)
        if not await self._call(callback, partitions) and gone:
            await self.core.assign([tp for tp in self.core.assignment() if tp not in gone])

    async def _take(self, partitions: list[TP]) -> None:
        """Start on new partitions (eager: the whole assignment) and tell the application.
        They count as owned once that is done (a poll timeout may stop it midway)."""
        if self.assign_first:
            await self._assign_partitions(partitions)
            await self._call(self.on_assign, partitions)
        elif not await self._call(self.on_assign, partitions):
            await self._assign_partitions(partitions)
        self.owned += [tp for tp in partitions if tp not in set(self.owned)]

    async def _assign_partitions(self, partitions: list[TP]) -> None:
        if self.protocol == assignors.EAGER:
            await self.core.assign(partitions)
        else:
            current = self.core.assignment()
            await self.core.assign(current + [tp for tp in partitions if tp not in set(current)])

    async def _rebalance(self) -> None:
        self.need_rejoin = False
        topics = await self._matching_topics()
        lost = self.lost
        plan = plan_join(self.protocol, self.owned, self.generation_id, lost, topics)
        if lost:
            self.generation_id, self.previous = -1, []
            await self._release(list(plan.lose), lost=True, notify_empty=plan.notify_empty)
            self.lost = False
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
        sync = await requests.sync_group(
            await self.core.coordinator(),
            self.group_id,
            self.generation_id,
            self.member_id,
            self.instance_id,
            response.protocol_name,
            assignments,
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
            response = await requests.join_group(
                await self.core.coordinator(),
                self.group_id,
                self.member_id,
                self.instance_id,
                self.session_timeout_ms,
                self.rebalance_timeout_ms,
                protocols,
            )
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
            overdue = self._poll_overdue_s()
            await asyncio.sleep(min(self.heartbeat_s, max(-overdue, 0.0) + 0.001))
            overdue = self._poll_overdue_s()
            if overdue >= 0:
                try:
                    await self._poll_timeout(overdue)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    logger.exception("group %s: leaving on the poll timeout", self.group_id)
                continue
            if self.generation_id < 0 or self.joining:
                continue
            try:
                response = await requests.heartbeat(
                    await self.core.coordinator(),
                    self.group_id,
                    self.generation_id,
                    self.member_id,
                    self.instance_id,
                )
                if response.error_code != ErrorCode.none:
                    logger.info("heartbeat: %s", response.error_code.name)
                    self.core.coordinator_error(response.error_code, "")
                    self._handle_error(response.error_code)
            except asyncio.CancelledError:
                raise
            except (KafkaError, KafkaConnectionError) as error:
                logger.debug("heartbeat failed: %s", error)

    # -- leaving -----------------------------------------------------------------------
    async def _leave_group(self, reason: str, leave_static: bool) -> None:
        """Commit (auto-commit), revoke everything (or lose it, if the member was
        fenced), and leave the group (a static member only with ``leave_static``)."""
        # Lost partitions whose release never finished (closed meanwhile) go too.
        held = list(dict.fromkeys(self.owned + (self.core.assignment() if self.lost else [])))
        if held or self.generation_id >= 0:
            lost = self.lost or self.generation_id < 0
            eager = self.protocol == assignors.EAGER
            with contextlib.suppress(KafkaError, KafkaConnectionError):
                await self._release(held, lost, notify_empty=eager and not lost)
        with contextlib.suppress(KafkaError, KafkaConnectionError):
            await self.core.assign([])
        member_id = self.member_id
        self.generation_id, self.member_id, self.previous, self.lost = -1, "", [], False
        self.subscribed_topics = []
        if member_id and (self.instance_id is None or leave_static):
            await self._send_leave(member_id, reason)

    async def _send_leave(self, member_id: str, reason: str) -> None:
        """LeaveGroup, best effort (the session expires anyway)."""
        with contextlib.suppress(KafkaError, KafkaConnectionError, IndexError):
            response = await requests.leave_group(
                await self.core.coordinator(), self.group_id, member_id, self.instance_id, reason
            )
            logger.info("group %s: left (%s): %s", self.group_id, reason, response.error_code.name)

    async def close(self) -> None:
        """Commit (auto-commit), revoke everything (or lose it, if the member was
        fenced), and leave the group (dynamic members only)."""
        self.closed = True
        tasks = [*self._tasks, *([self._current] if self._current is not None else [])]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self._leave_group("the consumer is closing", leave_static=False)
