"""Sessions end exactly when due: ``last request + session.timeout.ms``, for static
members too, whatever their last request was; and the coordinator's ticker wakes at
the earliest deadline instead of up to a tick later."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from odradek.coordinator import runtime as runtime_module
from odradek.coordinator.group.classic import GroupState
from odradek.coordinator.group.coordinator import CoordinatorSettings
from odradek.coordinator.group.shard import GroupShard
from odradek.coordinator.runtime import CoordinatorRuntime, PartitionState, _Context
from tests.coordinator.classic_support import Harness, request

S = GroupState
SESSION = 5_000


def static_pair() -> tuple[Harness, str, str]:
    """Stable: static "ia" (leader) and "ib", both with 5 s sessions."""
    h = Harness(min_session_timeout_ms=1_000)
    waiters = [
        h.join(request(instance="ia", session_ms=SESSION)),
        h.join(request(instance="ib", session_ms=SESSION)),
    ]
    h.advance(3_000)
    h.advance(3_000)
    results = [h.join_result(w) for w in waiters]
    h.stabilize(results)
    return h, results[0].member_id, results[1].member_id


def last_request(h: Harness, kind: str, member: str, instance: str) -> None:
    generation = h.group.generation_id
    if kind == "heartbeat":
        assert h.group.heartbeat(generation, member, instance) == "NONE"
    elif kind == "commit":
        assert h.group.validate_offset_commit(generation, member, instance) == "NONE"
    elif kind == "sync":  # a retried SyncGroup in Stable is answered at once
        assert h.sync_now(member, generation, instance=instance).error == "NONE"
    else:  # a static member rejoining in Stable with unchanged metadata: no rebalance
        assert h.join_now(request(member, instance=instance, session_ms=SESSION)).error == "NONE"


@pytest.mark.parametrize("kind", ["heartbeat", "commit", "sync", "rejoin"])
def test_static_member_that_goes_silent_expires_at_its_session(kind: str) -> None:
    h, a, b = static_pair()
    h.advance(1_234)
    last_request(h, kind, b, "ib")
    silent_since = h.now
    assert h.group.heartbeat(h.group.generation_id, a, "ia") == "NONE"
    assert h.group.next_deadline_ms() == silent_since + SESSION
    h.advance(SESSION - 1)
    assert b in h.group.members and h.group.state is S.STABLE
    h.group.heartbeat(h.group.generation_id, a, "ia")
    h.advance(1)  # exactly last request + session.timeout.ms
    assert b not in h.group.members and h.group.static_member_id("ib") is None
    assert h.group.state is S.PREPARING_REBALANCE


def test_lone_static_member_expires_at_its_session_and_empties_the_group() -> None:
    h = Harness(min_session_timeout_ms=1_000)
    waiter = h.join(request(instance="solo", session_ms=SESSION))
    h.advance(3_000)
    h.stabilize([h.join_result(waiter)])
    member = h.group.static_member_id("solo")
    assert member is not None
    h.advance(2_000)
    assert h.group.heartbeat(1, member, "solo") == "NONE"
    h.advance(SESSION - 1)
    assert h.group.state is S.STABLE
    h.advance(1)
    assert h.group.state is S.EMPTY and not h.group.members


def runtime_at(now: list[int]) -> tuple[CoordinatorRuntime[GroupShard], GroupShard]:
    """A runtime with partition 0 active on an empty shard."""
    unused: Any = SimpleNamespace()  # timers need no partition writer
    settings = CoordinatorSettings(partitions=1)
    shard = GroupShard(0, settings, lambda: now[0])
    runtime = CoordinatorRuntime("__consumer_offsets", unused, lambda p: shard, lambda: now[0])
    runtime._contexts[0] = _Context("__consumer_offsets", 0, 0, PartitionState.ACTIVE, shard)
    return runtime, shard


def test_ticker_wakes_at_the_earliest_deadline() -> None:
    now = [1_000]
    coordinator, shard = runtime_at(now)
    tick_s = runtime_module.TICK_S
    assert coordinator.next_tick_s() == tick_s  # nothing due: the longest sleep
    h = Harness(min_session_timeout_ms=1_000)
    h.now = now[0]
    waiter = h.join(request(instance="i", session_ms=1_000))
    h.advance(3_000)
    h.stabilize([h.join_result(waiter)])
    shard.groups["g"] = h.group
    deadline = h.group.next_deadline_ms()
    assert deadline is not None
    now[0] = deadline - 7
    assert coordinator.next_tick_s() == pytest.approx(0.008)  # not the 50 ms tick
    now[0] = deadline + 5  # overdue (a busy loop): the shortest sleep, never a spin
    assert coordinator.next_tick_s() == runtime_module.MIN_TICK_S
    now[0] = deadline - 10_000
    assert coordinator.next_tick_s() == tick_s  # later deadlines: wake each tick anyway
