"""Partition reassignment on the controller, sans-IO (module doc of metadata/reassignment.py):
start, progress through the leader's AlterPartition, completion, a leader moved off a
removed replica, cancel, errors, listing, and snapshots keeping an ongoing one exact."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.metadata.image import ImageReplay
from odradek.metadata.reassignment import (
    OngoingReassignment,
    ReassignmentRequest,
    ReassignmentResult,
    list_reassignments,
)
from tests.metadata.test_elections import Cluster, proposal, run


def move(topic: str, index: int, replicas: tuple[int, ...] | None) -> ReassignmentRequest:
    return ReassignmentRequest(topic, index, replicas)


def test_start_progress_and_completion_moving_the_leader_off_a_removed_replica() -> None:
    cluster = Cluster()

    async def body() -> None:
        await cluster.start((1, 2, 3))
        topic = await cluster.topic("t", {0: (1, 2)})
        before = cluster.state("t")
        assert before.leader == 1 and before.isr == (1, 2)
        (result,) = await cluster.controller.alter_partition_reassignments([move("t", 0, (2, 3))])
        assert result == ReassignmentResult("t", 0)
        started = cluster.state("t")
        # target first, then the replicas being removed; the leader keeps leading
        assert started.replicas == (2, 3, 1)
        assert started.adding_replicas == (3,) and started.removing_replicas == (1,)
        assert started.isr == (1, 2) and started.leader == 1
        assert started.leader_epoch == before.leader_epoch
        assert list_reassignments(cluster.image, None) == [
            OngoingReassignment("t", 0, (2, 3, 1), (3,), (1,))
        ]
        # the new replica is not yet in sync: a shrink leaves the reassignment running
        alter = cluster.controller.alter_partition
        (out,) = await alter(1, cluster.epochs[1], [proposal(topic, started, [1])])
        assert out.error == "NONE" and cluster.state("t").adding_replicas == (3,)
        # the leader brings 2 back and 3 in: every target replica is in sync → complete
        current = cluster.state("t")
        (out,) = await alter(1, cluster.epochs[1], [proposal(topic, current, [1, 2])])
        assert cluster.state("t").adding_replicas == (3,)
        current = cluster.state("t")
        (out,) = await alter(1, cluster.epochs[1], [proposal(topic, current, [1, 2, 3])])
        done = cluster.state("t")
        assert done.replicas == (2, 3) and done.isr == (2, 3)
        assert done.adding_replicas == () and done.removing_replicas == ()
        # the removed leader gave way to the first target replica, a new leader epoch
        assert done.leader == 2 and done.leader_epoch == current.leader_epoch + 1
        assert out.error == "NONE" and out.leader_id == 2 and out.isr == (2, 3)
        assert list_reassignments(cluster.image, None) == []

    run(body())


def test_a_target_already_in_sync_completes_at_once_and_a_reorder_is_immediate() -> None:
    cluster = Cluster()

    async def body() -> None:
        await cluster.start((1, 2, 3))
        await cluster.topic("t", {0: (1, 2, 3), 1: (1, 2, 3)})
        results = await cluster.controller.alter_partition_reassignments(
            [move("t", 0, (2, 3)), move("t", 1, (3, 2, 1))]
        )
        assert [r.error for r in results] == ["NONE", "NONE"]
        shrunk = cluster.state("t", 0)
        assert shrunk.replicas == (2, 3) and shrunk.isr == (2, 3) and shrunk.leader == 2
        reordered = cluster.state("t", 1)
        assert reordered.replicas == (3, 2, 1) and reordered.leader == 1
        assert list_reassignments(cluster.image, None) == []
        # the same assignment again writes nothing
        count = len(cluster.writer.batches)
        (again,) = await cluster.controller.alter_partition_reassignments([move("t", 0, (2, 3))])
        assert again.error == "NONE" and len(cluster.writer.batches) == count

    run(body())


def test_cancel_reverts_to_the_original_replicas() -> None:
    cluster = Cluster()

    async def body() -> None:
        await cluster.start((1, 2, 3, 4))
        topic = await cluster.topic("t", {0: (1, 2)})
        await cluster.controller.alter_partition_reassignments([move("t", 0, (3, 4))])
        started = cluster.state("t")
        assert started.replicas == (3, 4, 1, 2) and started.adding_replicas == (3, 4)
        # 3 catches up and joins the ISR; 4 does not, so it goes on
        alter = cluster.controller.alter_partition
        await alter(1, cluster.epochs[1], [proposal(topic, started, [1, 2, 3])])
        assert cluster.state("t").isr == (1, 2, 3) and cluster.state("t").adding_replicas
        (cancelled,) = await cluster.controller.alter_partition_reassignments([move("t", 0, None)])
        assert cancelled.error == "NONE"
        reverted = cluster.state("t")
        assert reverted.replicas == (1, 2) and reverted.isr == (1, 2) and reverted.leader == 1
        assert reverted.adding_replicas == () and reverted.removing_replicas == ()
        (again,) = await cluster.controller.alter_partition_reassignments([move("t", 0, None)])
        assert again.error == "NO_REASSIGNMENT_IN_PROGRESS"

    run(body())


def test_a_new_target_replaces_an_ongoing_one_from_the_current_set() -> None:
    cluster = Cluster()

    async def body() -> None:
        await cluster.start((1, 2, 3, 4))
        await cluster.topic("t", {0: (1, 2)})
        await cluster.controller.alter_partition_reassignments([move("t", 0, (1, 3))])
        assert cluster.state("t").replicas == (1, 3, 2)
        await cluster.controller.alter_partition_reassignments([move("t", 0, (1, 4))])
        state = cluster.state("t")
        # 3, added by the first move, leaves only once the new one completes (Kafka's way)
        assert state.replicas == (1, 4, 3, 2)
        assert state.adding_replicas == (4,) and state.removing_replicas == (3, 2)
        (cancelled,) = await cluster.controller.alter_partition_reassignments([move("t", 0, None)])
        assert cancelled.error == "NONE" and cluster.state("t").replicas == (1, 3, 2)

    run(body())


def test_errors_are_kafkas_codes_and_touch_nothing() -> None:
    cluster = Cluster()

    async def body() -> None:
        await cluster.start((1, 2, 3))
        await cluster.topic("t", {0: (1, 2)})
        count = len(cluster.writer.batches)
        results = await cluster.controller.alter_partition_reassignments(
            [
                move("nope", 0, (1, 2)),
                move("t", 7, (1, 2)),
                move("t", 0, (1, 9)),
            ]
        )
        assert [r.error for r in results] == [
            "UNKNOWN_TOPIC_OR_PARTITION",
            "UNKNOWN_TOPIC_OR_PARTITION",
            "INVALID_REPLICA_ASSIGNMENT",
        ]
        assert "broker 9" in (results[2].message or "")
        for replicas in ((2, 2), ()):
            (dup,) = await cluster.controller.alter_partition_reassignments(
                [move("t", 0, replicas)]
            )
            assert dup.error == "INVALID_REPLICA_ASSIGNMENT", replicas
        (rf,) = await cluster.controller.alter_partition_reassignments(
            [move("t", 0, (1, 2, 3))], allow_rf_change=False
        )
        assert rf == ReassignmentResult(
            "t", 0, "INVALID_REPLICATION_FACTOR", "The replication factor is changed from 2 to 3"
        )
        twice = await cluster.controller.alter_partition_reassignments(
            [move("t", 0, (2, 3)), move("t", 0, (1, 3))]
        )
        assert [r.error for r in twice] == ["NONE", "INVALID_REQUEST"]
        assert cluster.state("t").replicas == (2, 3, 1)
        assert len(cluster.writer.batches) == count + 1

    run(body())


def test_a_fenced_adding_replica_and_a_snapshot_keep_the_reassignment_exact() -> None:
    cluster = Cluster()

    async def body() -> None:
        await cluster.start((1, 2, 3))
        await cluster.topic("t", {0: (1, 2)})
        await cluster.controller.alter_partition_reassignments([move("t", 0, (2, 3))])
        await cluster.expire(1, 2)  # broker 3 dies before catching up
        state = cluster.state("t")
        assert state.adding_replicas == (3,) and state.isr == (1, 2) and state.leader == 1
        replay = ImageReplay()
        replay.apply(cluster.image.to_records(), cluster.image.offset)
        assert replay.image().topics == cluster.image.topics
        assert list_reassignments(replay.image(), [("t", 0), ("t", 5)]) == [
            OngoingReassignment("t", 0, (2, 3, 1), (3,), (1,))
        ]

    run(body())


Step = tuple[str, tuple[int, ...]]
STEPS = st.one_of(
    st.tuples(
        st.just("move"),
        st.lists(st.integers(1, 4), min_size=1, max_size=3, unique=True).map(tuple),
    ),
    st.tuples(st.just("cancel"), st.just(())),
    st.tuples(st.just("isr"), st.lists(st.integers(1, 4), max_size=4, unique=True).map(tuple)),
    st.tuples(st.just("isr"), st.just((1, 2, 3, 4))),  # every replica caught up
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(STEPS, min_size=1, max_size=12))
def test_any_sequence_keeps_the_partition_state_consistent(steps: list[Step]) -> None:
    """Moves, cancels and ISR changes in any order: the set always holds every adding
    and removing replica and the ISR, the leader leads from the ISR, a finished move
    leaves exactly its target, and a snapshot rebuilds the same state."""
    cluster = Cluster()

    async def body() -> None:
        await cluster.start((1, 2, 3, 4))
        topic = await cluster.topic("t", {0: (1, 2)})
        for kind, brokers in steps:
            state = cluster.state("t")
            if kind == "move":
                (result,) = await cluster.controller.alter_partition_reassignments(
                    [move("t", 0, brokers)]
                )
                assert result.error == "NONE"
                after = cluster.state("t")
                assert after.replicas[: len(brokers)] == brokers
            elif kind == "cancel":
                (result,) = await cluster.controller.alter_partition_reassignments(
                    [move("t", 0, None)]
                )
                was = state.adding_replicas or state.removing_replicas
                assert result.error == ("NONE" if was else "NO_REASSIGNMENT_IN_PROGRESS")
                if was:
                    original = [r for r in state.replicas if r not in state.adding_replicas]
                    assert list(cluster.state("t").replicas) == original
            elif state.leader > 0:
                isr = (
                    state.leader,
                    *(b for b in brokers if b in state.replicas and b != state.leader),
                )
                await cluster.controller.alter_partition(
                    state.leader, cluster.epochs[state.leader], [proposal(topic, state, isr)]
                )
            now = cluster.state("t")
            assert now.replicas and len(set(now.replicas)) == len(now.replicas)
            assert set(now.adding_replicas) <= set(now.replicas)
            assert set(now.removing_replicas) <= set(now.replicas)
            assert not set(now.adding_replicas) & set(now.removing_replicas)
            assert set(now.isr) <= set(now.replicas) and now.isr
            assert now.leader == -1 or now.leader in now.isr
            target = [r for r in now.replicas if r not in now.removing_replicas]
            if now.adding_replicas or now.removing_replicas:
                assert not set(target) <= set(now.isr)  # else it would have completed
        replay = ImageReplay()
        replay.apply(cluster.image.to_records(), cluster.image.offset)
        assert replay.image().topics == cluster.image.topics

    run(body())
