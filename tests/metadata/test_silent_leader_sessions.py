"""The silent previous leader's broker session on a new active controller (module doc of
metadata/broker_heartbeats.py): dated from when this voter last heard from that leader,
but leaving a live broker at least MIN_HEARTBEATS_LEFT heartbeat intervals; every
other broker, and every case the rule does not cover, keeps Kafka's fresh session.
Also the session timer's delay: the earliest expiry, not a coarse tick."""

from __future__ import annotations

import pytest

from odradek.metadata.broker_heartbeats import (
    MIN_HEARTBEATS_LEFT,
    BrokerHeartbeat,
    BrokerHeartbeatManager,
)
from odradek.metadata.controller import Controller
from odradek.metadata.image import MetadataImage
from odradek.metadata.loader import MetadataLoader
from tests.metadata.test_broker_heartbeats import Clock, MemoryWriter, reg, run, tick

SESSION = 9000
INTERVAL = 2000
LEFT = MIN_HEARTBEATS_LEFT * INTERVAL  # 4 s


class Silent:
    """What the Raft layer reports for the current term: (node id, last heard) or None."""

    def __init__(self) -> None:
        self.value: tuple[int, int] | None = None

    def __call__(self) -> tuple[int, int] | None:
        return self.value


def make(node_id: int = 2) -> tuple[Controller, MemoryWriter, Clock, Silent]:
    loader = MetadataLoader()
    writer = MemoryWriter(loader)
    clock = Clock()
    silent = Silent()
    controller = Controller(
        writer,
        loader,
        node_id,
        lambda: {"num.partitions": 1, "default.replication.factor": 1},
        session_timeout_ms=SESSION,
        heartbeat_interval_ms=INTERVAL,
        now_ms=clock,
        silent_leader=silent,
    )
    controller.heartbeats.local_incarnation_id = f"i{node_id}"  # its broker: in-process
    return controller, writer, clock, silent


async def three_unfenced(controller: Controller) -> dict[int, int]:
    """Brokers 1, 2, 3 registered and unfenced under the first term; their epochs."""
    epochs = {b: await controller.register_broker(reg(b, f"i{b}")) for b in (1, 2, 3)}
    for b, epoch in epochs.items():
        await controller.broker_heartbeat(BrokerHeartbeat(b, epoch, 100))
    assert not any(controller.image.brokers[b].fenced for b in epochs)
    return epochs


def test_a_dead_previous_leaders_broker_is_fenced_a_session_after_it_was_last_heard() -> None:
    controller, writer, clock, silent = make()

    async def body() -> None:
        epochs = await three_unfenced(controller)
        # node 1 led the quorum (and its broker heartbeated it in-process) and died;
        # node 2 was elected 2.5 s after its last fetch answer from node 1
        writer.active_epoch = 2
        silent.value = (1, clock.now - 2500)
        elected = clock.now
        fenced_at = {}
        for _ in range(100):  # 10 s, the timer every 100 ms
            clock.now += 100
            for b in await controller.fence_stale_brokers():
                fenced_at[b] = clock.now - elected
            await controller.broker_heartbeat(BrokerHeartbeat(3, epochs[3], 100))
        # a session after it was last heard (timer step 100 ms), not after the election
        assert fenced_at == {1: SESSION - 2500 + 100}
        assert controller.image.brokers[1].fenced and not controller.image.brokers[3].fenced

    run(body())


def test_a_live_previous_leaders_broker_that_heartbeats_in_time_stays_unfenced() -> None:
    controller, writer, clock, silent = make()

    async def body() -> None:
        epochs = await three_unfenced(controller)
        writer.active_epoch = 2
        # the old leader was paused long: its session is left only LEFT from now
        silent.value = (1, clock.now - 8000)
        await controller.fence_stale_brokers()  # the term's sessions start here
        # it resumes and reaches the new controller just inside its margin, then
        # heartbeats every interval: never fenced
        assert await tick(controller, clock, LEFT - 100, step=100) == []
        for _ in range(20):
            await controller.broker_heartbeat(BrokerHeartbeat(1, epochs[1], 100))
            await controller.broker_heartbeat(BrokerHeartbeat(3, epochs[3], 100))
            assert await tick(controller, clock, INTERVAL, step=100) == []
        assert not controller.image.brokers[1].fenced

    run(body())


def test_a_session_too_short_for_several_heartbeats_is_fresh() -> None:
    manager = BrokerHeartbeatManager(4000, local_node_id=2, heartbeat_interval_ms=2000)
    controller, _, clock, _ = make()

    async def body() -> MetadataImage:
        await three_unfenced(controller)
        return controller.image

    image = run(body())
    now = clock.now
    assert manager.carried_session_start(image, 1, now - 100, now) is None
    manager.ensure_epoch(2, image, now, (1, now - 100))
    assert manager.last_contact_ms(1) == now


@pytest.mark.parametrize(
    ("last_heard", "start"),
    [
        (-2500, -2500),  # recent: dated from then
        (-7000, -(SESSION - LEFT)),  # too old: clamped to leave LEFT
        (-600_000, -(SESSION - LEFT)),
        (+400, 0),  # never after now
    ],
)
def test_the_carried_start_is_the_last_contact_clamped(last_heard: int, start: int) -> None:
    controller, _, clock, _ = make()

    async def body() -> MetadataImage:
        await three_unfenced(controller)
        return controller.image

    image = run(body())
    now = clock.now
    manager = BrokerHeartbeatManager(SESSION, local_node_id=2, heartbeat_interval_ms=INTERVAL)
    assert manager.carried_session_start(image, 1, now + last_heard, now) == now + start
    manager.ensure_epoch(7, image, now, (1, now + last_heard))
    assert manager.last_contact_ms(1) == now + start
    assert manager.last_contact_ms(3) == now  # every other broker: fresh


def test_who_keeps_a_fresh_session() -> None:
    controller, _writer, clock, _ = make()

    async def body() -> MetadataImage:
        epochs = await three_unfenced(controller)
        await controller.broker_heartbeat(BrokerHeartbeat(3, epochs[3], 100, want_fence=True))
        return controller.image

    image = run(body())
    now = clock.now
    manager = BrokerHeartbeatManager(SESSION, local_node_id=2, heartbeat_interval_ms=INTERVAL)
    assert image.brokers[3].fenced
    assert manager.carried_session_start(image, 3, now - 2500, now) is None  # fenced
    assert manager.carried_session_start(image, 2, now - 2500, now) is None  # this node
    assert manager.carried_session_start(image, 9, now - 2500, now) is None  # no broker
    # no silent leader (a resignation, or this node did not follow it): all fresh
    manager.ensure_epoch(3, image, now, None)
    assert manager.last_contact_ms(1) == now


def test_only_a_new_term_asks_for_the_silent_leader() -> None:
    controller, _writer, clock, silent = make()

    async def body() -> None:
        epochs = await three_unfenced(controller)
        silent.value = (1, clock.now - 8000)  # reported late, within the same term
        await controller.broker_heartbeat(BrokerHeartbeat(1, epochs[1], 100))
        # term 1's sessions are set already: broker 1 keeps its own last contact
        assert controller.heartbeats.last_contact_ms(1) == clock.now

    run(body())


def test_the_session_timer_sleeps_until_the_earliest_expiry() -> None:
    controller, writer, clock, _silent = make()

    async def body() -> None:
        epochs = await three_unfenced(controller)
        assert controller.session_check_delay_s(0.5) == 0.5  # 9 s away: capped
        clock.now += SESSION - 120
        await controller.broker_heartbeat(BrokerHeartbeat(3, epochs[3], 100))
        # brokers 1 and 2 expire 121 ms from now (one past the timeout)
        assert controller.session_check_delay_s(0.5) == pytest.approx(0.121)
        clock.now += 121
        assert await controller.fence_stale_brokers() == [1]  # 2 is this node's own
        # a new term not set up yet: run the timer soon; not active: the cap
        writer.active_epoch = 5
        assert controller.session_check_delay_s(0.5) == 0.05
        writer.active_epoch = -1
        assert controller.session_check_delay_s(0.5) == 0.5

    run(body())


def test_a_previous_leader_silent_past_its_margin_is_fenced_at_the_margin() -> None:
    controller, writer, clock, silent = make()

    async def body() -> None:
        await three_unfenced(controller)
        writer.active_epoch = 2
        silent.value = (1, clock.now - 8000)  # a long vote: clamped, LEFT from now
        await controller.fence_stale_brokers()
        assert await tick(controller, clock, LEFT, step=100) == []
        assert await tick(controller, clock, 100, step=100) == [1]

    run(body())
