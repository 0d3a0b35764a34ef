"""TxnOffsetCommit in the group coordinator: offsets written in a transaction are pending
(invisible, reported unstable) until the transaction coordinator's marker reaches the
partition; COMMIT makes them committed, ABORT drops them, a plain commit written after
them wins, and a new leader's load replays all of it the same way."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from odradek.coordinator.group.offset_store import OffsetCommit, OffsetStore
from odradek.coordinator.group.records import OffsetKey, OffsetValue
from tests.coordinator.runtime_support import FakeWriter
from tests.coordinator.test_group_runtime import active, coordinator, image

PRODUCER = (7000, 3)


def commits(offset: int) -> list[OffsetCommit]:
    return [OffsetCommit("t", 0, offset, 0, None)]


def value(offset: int) -> OffsetValue:
    return OffsetValue(offset, 0, "", 1)


def test_store_pending_offsets_follow_their_marker() -> None:
    store = OffsetStore()
    key = OffsetKey("g", "t", 0)
    store.replay(key, value(1))
    store.replay_pending(10, key, value(5))
    store.replay_pending(11, OffsetKey("g", "t", 1), value(9))
    assert store.of("g") == {("t", 0): value(1)}
    assert store.unstable("g") == {("t", 0), ("t", 1)}
    assert store.end_transaction(10, commit=True) == 1
    assert store.of("g")[("t", 0)] == value(5)
    assert store.end_transaction(11, commit=False) == 0
    assert ("t", 1) not in store.of("g")
    assert store.unstable("g") == set()


def test_store_plain_commit_after_a_pending_one_wins() -> None:
    store = OffsetStore()
    key = OffsetKey("g", "t", 0)
    store.replay_pending(10, key, value(5))
    store.replay(key, value(8))  # written after the transactional one
    store.end_transaction(10, commit=True)
    assert store.of("g")[("t", 0)] == value(8)


def test_store_forgetting_a_group_drops_its_pending_offsets() -> None:
    store = OffsetStore()
    store.replay_pending(10, OffsetKey("g", "t", 0), value(5))
    store.forget("g")
    assert store.unstable("g") == set()
    store.end_transaction(10, commit=True)
    assert store.of("g") == {}


def test_coordinator_commits_on_marker_and_a_new_leader_replays_it() -> None:
    async def test() -> None:
        writer = FakeWriter()
        metadata = SimpleNamespace(image=image(), node_id=1)
        first = coordinator(writer, metadata)
        first.on_leadership(0, 0)
        await active(first)
        result = await first.txn_commit_offsets("g", *PRODUCER, -1, "", None, commits(42))
        assert result == {("t", 0): "NONE"}
        assert first.fetch_offsets("g", [("t", 0)]) == {("t", 0): None}
        assert first.unstable_offsets("g") == {("t", 0)}

        # A new leader loads the pending offset, then the marker arrives there.
        second = coordinator(writer, metadata)
        second.on_leadership(0, 1)
        await active(second)
        assert second.unstable_offsets("g") == {("t", 0)}
        assert await second.complete_transaction(0, *PRODUCER, 0, True) == "NONE"
        assert second.unstable_offsets("g") == set()
        found = second.fetch_offsets("g", [("t", 0)])[("t", 0)]
        assert found is not None and found.offset == 42

        # And a third sees the committed offset from the log alone.
        third = coordinator(writer, metadata)
        third.on_leadership(0, 2)
        await active(third)
        found = third.fetch_offsets("g", [("t", 0)])[("t", 0)]
        assert found is not None and found.offset == 42
        for c in (first, second, third):
            await c.stop()

    asyncio.run(test())


def test_coordinator_abort_marker_drops_pending_offsets_after_reload() -> None:
    async def test() -> None:
        writer = FakeWriter()
        metadata = SimpleNamespace(image=image(), node_id=1)
        first = coordinator(writer, metadata)
        first.on_leadership(0, 0)
        await active(first)
        await first.commit_offsets("g", -1, "", None, commits(10))
        await first.txn_commit_offsets("g", *PRODUCER, -1, "", None, commits(42))
        assert await first.complete_transaction(0, *PRODUCER, 0, False) == "NONE"
        second = coordinator(writer, metadata)
        second.on_leadership(0, 1)
        await active(second)
        found = second.fetch_offsets("g", [("t", 0)])[("t", 0)]
        assert found is not None and found.offset == 10
        assert second.unstable_offsets("g") == set()
        # The old leader no longer serves the partition: a marker sent there is refused
        # with an error the transaction coordinator retries elsewhere.
        first.on_leadership(0, None)
        assert await first.complete_transaction(0, *PRODUCER, 0, True) == "NOT_LEADER_OR_FOLLOWER"
        for c in (first, second):
            await c.stop()

    asyncio.run(test())
