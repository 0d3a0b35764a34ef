"""A fake clock, counted member ids and named waiters around one ClassicGroup."""

from __future__ import annotations

import itertools
import struct
from collections.abc import Mapping
from dataclasses import replace

from odradek.coordinator.group.classic import (
    ClassicGroup,
    GroupSettings,
    JoinRequest,
    JoinResult,
    SyncResult,
)

RANGE = ("range", b"range-meta")
ROUNDROBIN = ("roundrobin", b"rr-meta")
STICKY = ("sticky", b"sticky-meta")
SESSION_MS = 10_000
REBALANCE_MS = 20_000


class Waiter:
    """An opaque parked-request token, named for readable failures."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Waiter({self.name})"


def request(
    member_id: str = "",
    *,
    instance: str | None = None,
    protocols: tuple[tuple[str, bytes], ...] = (RANGE,),
    session_ms: int = SESSION_MS,
    rebalance_ms: int = REBALANCE_MS,
    require_known: bool = False,
    protocol_type: str = "consumer",
    client_id: str = "client",
    skip_assignment: bool = False,
) -> JoinRequest:
    return JoinRequest(
        member_id=member_id,
        group_instance_id=instance,
        client_id=client_id,
        client_host="/127.0.0.1",
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=rebalance_ms,
        protocol_type=protocol_type,
        protocols=protocols,
        require_known_member_id=require_known,
        supports_skip_assignment=skip_assignment,
    )


def consumer_subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0: version, topics, user data."""
    out = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        out += struct.pack(">h", len(topic)) + topic.encode()
    return out + struct.pack(">i", -1)


class Harness:
    def __init__(self, **settings: int) -> None:
        self.now = 1_000
        counter = itertools.count(1)
        self.settings = replace(GroupSettings(), **settings)
        self.group = ClassicGroup(
            "g",
            self.settings,
            clock=lambda: self.now,
            new_member_id=lambda prefix: f"{prefix}-{next(counter)}",
        )
        self.done: dict[Waiter, JoinResult | SyncResult] = {}
        self._names = itertools.count(1)

    # -- driving ---------------------------------------------------------------------
    def collect(self) -> None:
        for waiter, result in self.group.drain():
            assert isinstance(waiter, Waiter)
            assert waiter not in self.done, f"{waiter} completed twice"
            self.done[waiter] = result

    def waiter(self, name: str = "") -> Waiter:
        return Waiter(name or f"w{next(self._names)}")

    def join(self, req: JoinRequest, waiter: Waiter | None = None) -> JoinResult | Waiter:
        """The immediate result, or the waiter it is parked under."""
        waiter = waiter or self.waiter(f"join:{req.member_id or req.client_id}")
        result = self.group.join(req, waiter)
        self.collect()
        return waiter if result is None else result

    def sync(
        self,
        member_id: str,
        generation: int | None = None,
        assignments: Mapping[str, bytes] | None = None,
        *,
        instance: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> SyncResult | Waiter:
        waiter = self.waiter(f"sync:{member_id}")
        result = self.group.sync(
            self.group.generation_id if generation is None else generation,
            member_id,
            instance,
            protocol_type,
            protocol_name,
            assignments or {},
            waiter,
        )
        self.collect()
        return waiter if result is None else result

    def join_now(self, req: JoinRequest) -> JoinResult:
        result = self.join(req)
        assert isinstance(result, JoinResult), f"{result} was parked"
        return result

    def sync_now(
        self,
        member_id: str,
        generation: int | None = None,
        assignments: Mapping[str, bytes] | None = None,
        **kwargs: str | None,
    ) -> SyncResult:
        result = self.sync(member_id, generation, assignments, **kwargs)
        assert isinstance(result, SyncResult), f"{result} was parked"
        return result

    def advance(self, ms: int) -> None:
        self.now += ms
        self.group.tick()
        self.collect()

    def advance_to_deadline(self) -> None:
        deadline = self.group.next_deadline_ms()
        assert deadline is not None
        self.advance(max(0, deadline - self.now))

    def result(self, waiter: JoinResult | SyncResult | Waiter) -> JoinResult | SyncResult:
        assert isinstance(waiter, Waiter), f"expected a parked request, got {waiter}"
        self.collect()
        assert waiter in self.done, f"{waiter} is still parked"
        return self.done.pop(waiter)

    def join_result(self, waiter: JoinResult | SyncResult | Waiter) -> JoinResult:
        result = self.result(waiter)
        assert isinstance(result, JoinResult)
        return result

    def sync_result(self, waiter: JoinResult | SyncResult | Waiter) -> SyncResult:
        result = self.result(waiter)
        assert isinstance(result, SyncResult)
        return result

    # -- scenarios -------------------------------------------------------------------
    def new_member(self, **kwargs: object) -> str:
        """The first step of a KIP-394 join: returns the member id the group handed out."""
        first = self.join(request(require_known=True, **kwargs))  # type: ignore[arg-type]
        assert isinstance(first, JoinResult) and first.error == "MEMBER_ID_REQUIRED"
        return first.member_id

    def form(self, *requests: JoinRequest) -> list[JoinResult]:
        """Members join an Empty group; the initial delay runs out; the leader syncs."""
        waiters = [self.join(req) for req in requests]
        self.advance(self.settings.initial_rebalance_delay_ms)
        self.advance(self.settings.initial_rebalance_delay_ms)
        results = [self.join_result(w) for w in waiters]
        assert all(r.error == "NONE" for r in results), results
        self.stabilize(results)
        return results

    def stabilize(self, results: list[JoinResult]) -> dict[str, bytes]:
        """Everyone syncs, the leader last; every sync answers NONE."""
        leader = next(r for r in results if r.member_id == r.leader_id)
        assignment = {m.member_id: f"a:{m.member_id}".encode() for m in leader.members}
        followers = [self.sync(r.member_id, r.generation_id) for r in results if r is not leader]
        leader_sync = self.sync(leader.member_id, leader.generation_id, assignment)
        for waiter in [*followers, leader_sync]:
            assert self.sync_result(waiter).error == "NONE"
        assert self.group.state.value == "Stable"
        return assignment
