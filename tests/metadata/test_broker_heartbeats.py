"""Broker registration, heartbeats and fencing on the controller, with a fake clock and
an in-memory writer (KIP-631 semantics; module doc of metadata/broker_heartbeats.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

import pytest

from odradek.metadata.broker_heartbeats import (
    BrokerHeartbeat,
    BrokerHeartbeatManager,
    BrokerRegistration,
)
from odradek.metadata.controller import Controller
from odradek.metadata.errors import ControllerError
from odradek.metadata.image import ImageReplay, MetadataImage, MetadataRecord
from odradek.metadata.loader import MetadataLoader
from odradek.metadata.topic_changes import NewTopic

T = TypeVar("T")
TIMEOUT = 9000
EP = (("PLAINTEXT", "localhost", 9092),)


class MemoryWriter:
    """Committed on append; ``active_epoch`` set by the test (leadership changes)."""

    def __init__(self, loader: MetadataLoader) -> None:
        self.loader = loader
        self.end = -1
        self.active_epoch = 1
        self.batches: list[list[MetadataRecord]] = []

    async def append(self, records: Sequence[MetadataRecord]) -> int:
        if self.active_epoch < 0:
            raise ControllerError("NOT_CONTROLLER", "not active")
        self.end += len(records)
        self.batches.append(list(records))
        self.loader.handle_commit(self.end, records)
        return self.end

    def replay(self) -> MetadataImage:
        return self.loader.image


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def make() -> tuple[Controller, MemoryWriter, Clock]:
    loader = MetadataLoader()
    writer = MemoryWriter(loader)
    clock = Clock()
    defaults = {"num.partitions": 1, "default.replication.factor": 1}
    controller = Controller(
        writer, loader, 1, lambda: defaults, session_timeout_ms=TIMEOUT, now_ms=clock
    )
    return controller, writer, clock


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


async def tick(controller: Controller, clock: Clock, ms: int, step: int = 500) -> list[int]:
    """Advance the clock by ``ms`` with the session timer running every ``step``; the
    brokers it fenced."""
    fenced: list[int] = []
    for _ in range(ms // step):
        clock.now += step
        fenced += await controller.fence_stale_brokers()
    return fenced


def reg(broker_id: int, incarnation: str, **kw: Any) -> BrokerRegistration:
    return BrokerRegistration(broker_id, incarnation, kw.pop("endpoints", EP), **kw)


def test_registration_is_fenced_at_its_record_offset_then_a_caught_up_heartbeat_unfences() -> None:
    controller, writer, _ = make()

    async def body() -> None:
        first = await controller.register_broker(
            reg(2, "inc-a", rack="r1", features=(("metadata.version", 1, 7),), log_dirs=("d1",))
        )
        second = await controller.register_broker(reg(3, "inc-b"))
        assert (first, second) == (0, 1)
        broker = controller.image.brokers[2]
        assert broker.fenced and broker.epoch == 0 and broker.incarnation_id == "inc-a"
        assert broker.features == (("metadata.version", 1, 7),) and broker.log_dirs == ("d1",)
        # behind its registration record: stays fenced, not caught up
        reply = await controller.broker_heartbeat(BrokerHeartbeat(3, 1, 0))
        assert (reply.is_caught_up, reply.is_fenced, reply.should_shut_down) == (
            False,
            True,
            False,
        )
        assert controller.image.brokers[3].fenced
        reply = await controller.broker_heartbeat(BrokerHeartbeat(3, 1, 1))
        assert reply.is_caught_up and not reply.is_fenced
        assert not controller.image.brokers[3].fenced
        assert writer.batches[-1][0].kind == "UnfenceBroker"
        # a heartbeat of an unfenced broker writes nothing
        count = len(writer.batches)
        reply = await controller.broker_heartbeat(BrokerHeartbeat(3, 1, 5))
        assert not reply.is_fenced and len(writer.batches) == count

    run(body())


def test_same_incarnation_is_idempotent_a_new_one_gets_a_new_epoch() -> None:
    controller, writer, _ = make()

    async def body() -> None:
        epoch = await controller.register_broker(reg(2, "inc-a"))
        count = len(writer.batches)
        assert await controller.register_broker(reg(2, "inc-a")) == epoch
        assert len(writer.batches) == count  # nothing written
        # same incarnation, new endpoints: a new registration record
        moved = await controller.register_broker(
            reg(2, "inc-a", endpoints=(("PLAINTEXT", "h2", 1),))
        )
        assert moved > epoch and controller.image.brokers[2].endpoints == (("PLAINTEXT", "h2", 1),)
        # fenced (never unfenced): a new incarnation takes the id at once
        newer = await controller.register_broker(reg(2, "inc-b"))
        assert newer > moved and controller.image.brokers[2].incarnation_id == "inc-b"

    run(body())


def test_a_live_other_incarnation_is_a_duplicate_until_its_session_expires() -> None:
    controller, _, clock = make()

    async def body() -> None:
        epoch = await controller.register_broker(reg(2, "old"))
        await controller.broker_heartbeat(BrokerHeartbeat(2, epoch, epoch))
        assert await tick(controller, clock, TIMEOUT // 2) == []
        with pytest.raises(ControllerError) as caught:
            await controller.register_broker(reg(2, "new"))
        assert caught.value.code == "DUPLICATE_BROKER_REGISTRATION"
        assert await tick(controller, clock, TIMEOUT) == [2]  # no heartbeat since
        assert controller.image.brokers[2].fenced
        assert await controller.register_broker(reg(2, "new")) > epoch

    run(body())


def test_the_controllers_own_node_may_replace_its_old_incarnation_at_once() -> None:
    controller, _, _ = make()  # node 1

    async def body() -> None:
        epoch = await controller.register_broker(reg(1, "before-crash"))
        await controller.broker_heartbeat(BrokerHeartbeat(1, epoch, epoch))
        controller.heartbeats.local_incarnation_id = "after-restart"
        assert await controller.register_broker(reg(1, "after-restart")) > epoch

    run(body())


def test_heartbeat_errors() -> None:
    controller, _, _ = make()

    async def body() -> None:
        epoch = await controller.register_broker(reg(2, "a"))
        for request, code in (
            (BrokerHeartbeat(7, 0, 0), "BROKER_ID_NOT_REGISTERED"),
            (BrokerHeartbeat(2, epoch + 5, 0), "STALE_BROKER_EPOCH"),
        ):
            with pytest.raises(ControllerError) as caught:
                await controller.broker_heartbeat(request)
            assert caught.value.code == code
        for bad_request in (
            reg(2, ""),
            reg(-1, "x"),
            reg(2, "x", endpoints=tuple(("L", "h", i) for i in range(65))),
            reg(2, "x", endpoints=(("L", "h", 1), ("L", "h", 2))),
            reg(2, "x", endpoints=(("L", "h" * 2000, 1),)),
            reg(2, "x", log_dirs=tuple(str(i) for i in range(2000))),
        ):
            with pytest.raises(ControllerError) as bad:
                await controller.register_broker(bad_request)
            assert bad.value.code == "INVALID_REQUEST"

    run(body())


def test_session_timeout_fences_only_the_silent_broker() -> None:
    controller, _, clock = make()

    async def body() -> None:
        epochs = {}
        for b in (2, 3):
            epochs[b] = await controller.register_broker(reg(b, f"i{b}"))
        for b in (2, 3):
            await controller.broker_heartbeat(BrokerHeartbeat(b, epochs[b], 10))
        assert await controller.fence_stale_brokers() == []
        fenced = []
        for _ in range(4):  # broker 3 keeps heartbeating, 2 falls silent
            assert controller.heartbeats.next_expiry_ms(controller.image.brokers) is not None
            fenced += await tick(controller, clock, 3000)
            await controller.broker_heartbeat(BrokerHeartbeat(3, epochs[3], 10))
        assert fenced == [2]
        assert controller.image.brokers[2].fenced and not controller.image.brokers[3].fenced
        # placement now sees one broker: RF 2 is refused
        (result,) = await controller.create_topics([NewTopic("t", 1, 2)], False)
        assert isinstance(result, ControllerError)
        assert result.code == "INVALID_REPLICATION_FACTOR"
        # the fenced broker comes back: a heartbeat unfences it again
        reply = await controller.broker_heartbeat(BrokerHeartbeat(2, epochs[2], 10))
        assert not reply.is_fenced
        (result,) = await controller.create_topics([NewTopic("t", 1, 2)], False)
        assert isinstance(result, MetadataImage)

    run(body())


def test_a_new_active_term_gives_every_broker_a_fresh_session() -> None:
    controller, writer, clock = make()

    async def body() -> None:
        epoch = await controller.register_broker(reg(2, "a"))
        await controller.broker_heartbeat(BrokerHeartbeat(2, epoch, epoch))
        writer.active_epoch = -1  # lost leadership: no decisions, no fencing
        clock.now += 5 * TIMEOUT
        assert await controller.fence_stale_brokers() == []
        with pytest.raises(ControllerError) as caught:
            await controller.broker_heartbeat(BrokerHeartbeat(2, epoch, epoch))
        assert caught.value.code == "NOT_CONTROLLER"
        writer.active_epoch = 3  # leads again, later: the silence was not witnessed
        assert await controller.fence_stale_brokers() == []
        assert not controller.image.brokers[2].fenced
        assert await tick(controller, clock, TIMEOUT + 500) == [2]

    run(body())


def test_controlled_shutdown_fences_and_lets_the_broker_go() -> None:
    controller, _, _ = make()

    async def body() -> None:
        epoch = await controller.register_broker(reg(2, "a"))
        await controller.broker_heartbeat(BrokerHeartbeat(2, epoch, epoch))
        reply = await controller.broker_heartbeat(
            BrokerHeartbeat(2, epoch, epoch, want_shut_down=True)
        )
        assert reply.should_shut_down and reply.is_fenced
        assert controller.image.brokers[2].fenced
        reply = await controller.broker_heartbeat(BrokerHeartbeat(2, epoch, epoch, want_fence=True))
        assert reply.is_fenced and not reply.should_shut_down  # want_fence keeps it fenced

    run(body())


def test_fence_records_of_an_older_epoch_change_nothing_and_unregister_removes() -> None:
    replay = ImageReplay()
    records = [
        MetadataRecord("RegisterBroker", {"broker_id": 1, "endpoints": [], "incarnation_id": "a"}),
        MetadataRecord(
            "RegisterBroker",
            {"broker_id": 1, "endpoints": [], "incarnation_id": "b", "fenced": True},
        ),
        MetadataRecord("UnfenceBroker", {"broker_id": 1, "broker_epoch": 0}),  # stale
    ]
    replay.apply(records, 2)
    image = replay.image()
    assert image.brokers[1].fenced and image.brokers[1].epoch == 1
    image = image.apply([MetadataRecord("UnfenceBroker", {"broker_id": 1, "broker_epoch": 1})], 3)
    assert not image.brokers[1].fenced
    image = image.apply([MetadataRecord("FenceBroker", {"broker_id": 1, "broker_epoch": 1})], 4)
    assert image.brokers[1].fenced
    # a snapshot keeps epoch, incarnation and the flag
    rebuilt = ImageReplay()
    rebuilt.apply(image.to_records(), 0)
    assert rebuilt.image().brokers == image.brokers
    gone = image.apply([MetadataRecord("UnregisterBroker", {"broker_id": 1, "broker_epoch": 1})], 5)
    assert 1 not in gone.brokers


def test_manager_drops_expired_sessions_of_fenced_brokers() -> None:
    manager = BrokerHeartbeatManager(100)
    image = MetadataImage().apply(
        [
            MetadataRecord(
                "RegisterBroker",
                {"broker_id": 1, "endpoints": [], "incarnation_id": "a", "fenced": True},
            )
        ],
        0,
    )
    manager.ensure_epoch(1, image, 0)
    assert manager.last_contact_ms(1) == 0
    assert manager.stale(image.brokers, 500) == []
    assert manager.last_contact_ms(1) is None


def test_a_stalled_controller_restarts_sessions_instead_of_fencing() -> None:
    controller, _, clock = make()

    async def body() -> None:
        epoch = await controller.register_broker(reg(2, "a"))
        await controller.broker_heartbeat(BrokerHeartbeat(2, epoch, epoch))
        assert await controller.fence_stale_brokers() == []
        clock.now += 3 * TIMEOUT  # the controller's process was paused: no timer runs
        assert await controller.fence_stale_brokers() == []
        assert not controller.image.brokers[2].fenced
        # silent on after the controller resumed: fenced a session later
        assert await tick(controller, clock, TIMEOUT + 500) == [2]

    run(body())


def test_the_controllers_own_broker_is_never_timed_out() -> None:
    controller, _, clock = make()  # node 1

    async def body() -> None:
        controller.heartbeats.local_incarnation_id = "me"
        epoch = await controller.register_broker(reg(1, "me"))
        await controller.broker_heartbeat(BrokerHeartbeat(1, epoch, epoch))
        other = await controller.register_broker(reg(2, "other"))
        await controller.broker_heartbeat(BrokerHeartbeat(2, other, other))
        assert await tick(controller, clock, 3 * TIMEOUT) == [2]
        assert not controller.image.brokers[1].fenced

    run(body())


def test_endpoints_leave_out_fenced_brokers_unless_asked() -> None:
    from odradek.metadata.view import endpoints_for_listener

    image = MetadataImage().apply(
        [
            MetadataRecord(
                "RegisterBroker",
                {"broker_id": b, "endpoints": [["PLAINTEXT", "h", 9090 + b]], "fenced": b == 2},
            )
            for b in (1, 2, 3)
        ],
        2,
    )
    assert [e.node_id for e in endpoints_for_listener(image, "PLAINTEXT")] == [1, 3]
    every = endpoints_for_listener(image, "PLAINTEXT", include_fenced=True)
    assert [(e.node_id, e.fenced) for e in every] == [(1, False), (2, True), (3, False)]
