"""Client quotas without I/O: Kafka's resolution order, the windowed rate and its
throttle, the broker's quota manager on an injected clock, and the controller's checks
and records (metadata/quota_changes.py)."""

from __future__ import annotations

import asyncio
import datetime
import time

import pytest

from odradek.metadata.errors import ControllerError
from odradek.metadata.image import MetadataImage
from odradek.metadata.quota_changes import (
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    QuotaAlteration,
    check_entity,
    describe,
    quota_change_records,
)
from odradek.security.quotas import (
    CLIENT_ID,
    IP,
    PRODUCER_BYTE_RATE,
    USER,
    WindowedRate,
    entity,
    resolve,
)
from odradek.server.quotas import ClientQuotaManager, TimedCall

KIB = 1024

# Kafka's docs, "Quotas": the order, most specific first.
LEVELS = [
    entity((USER, "alice"), (CLIENT_ID, "app")),
    entity((USER, "alice"), (CLIENT_ID, None)),
    entity((USER, "alice")),
    entity((USER, None), (CLIENT_ID, "app")),
    entity((USER, None), (CLIENT_ID, None)),
    entity((USER, None)),
    entity((CLIENT_ID, "app")),
    entity((CLIENT_ID, None)),
]


def test_resolution_follows_kafkas_precedence() -> None:
    quotas = {level: {PRODUCER_BYTE_RATE: float(i)} for i, level in enumerate(LEVELS)}
    for i, level in enumerate(LEVELS):
        found = resolve(quotas, "alice", "app", PRODUCER_BYTE_RATE)
        assert found is not None and found.entity == level and found.bound == i
        del quotas[level]
    assert resolve(quotas, "alice", "app", PRODUCER_BYTE_RATE) is None


def test_resolution_ignores_other_keys_and_names() -> None:
    quotas = {
        entity((USER, "alice")): {"consumer_byte_rate": 5.0},
        entity((USER, "bob")): {PRODUCER_BYTE_RATE: 6.0},
        entity((CLIENT_ID, None)): {PRODUCER_BYTE_RATE: 7.0},
    }
    found = resolve(quotas, "alice", "app", PRODUCER_BYTE_RATE)
    assert found is not None and found.bound == 7.0
    assert found.sensor_key == ("", "app")  # per client-id: the default is per client


def test_sensor_key_says_who_shares_the_budget() -> None:
    user_quota = {entity((USER, "alice")): {PRODUCER_BYTE_RATE: 1.0}}
    a = resolve(user_quota, "alice", "one", PRODUCER_BYTE_RATE)
    b = resolve(user_quota, "alice", "two", PRODUCER_BYTE_RATE)
    assert a is not None and b is not None and a.sensor_key == b.sensor_key == ("alice", "")
    default_user = {entity((USER, None)): {PRODUCER_BYTE_RATE: 1.0}}
    c = resolve(default_user, "carol", "x", PRODUCER_BYTE_RATE)
    assert c is not None and c.sensor_key == ("carol", "")


def test_rate_counts_at_least_samples_minus_one_windows() -> None:
    rate = WindowedRate(11, 1000)
    rate.record(10_000, 0)
    assert rate.rate(0) == pytest.approx(1000.0)  # 10 kB over 10 windows, not over 0 ms
    rate.record(10_000, 15_000)  # the first window has aged out
    assert rate.rate(15_000) == pytest.approx(1000.0)
    assert rate.rate(30_000) == 0.0


def test_throttle_brings_the_rate_back_to_the_bound() -> None:
    rate = WindowedRate(2, 1000)
    rate.record(3000, 0)  # 3000 B over a 1 s span, bound 1000 B/s
    wait = rate.throttle_ms(1000, 0)
    assert wait == 2000  # (3000 - 1000) / 1000 * 1000 ms
    assert rate.throttle_ms(1000, 500) > 0
    rate.unrecord(3000, 0)
    assert rate.throttle_ms(1000, 0) == 0


@pytest.mark.parametrize(("samples", "request_bytes"), [(2, 16 * KIB), (11, 64 * KIB)])
def test_a_greedy_client_is_held_to_its_bound(samples: int, request_bytes: int) -> None:
    """A client that sends again as soon as its throttle ends: over a long run its
    bytes stay within 10% of the bound whatever the window count."""
    bound, now, rate, sent = 512 * KIB, 0, WindowedRate(samples, 1000), []
    while now < 120_000:
        rate.record(request_bytes, now)
        sent.append((now, request_bytes))
        now += max(rate.throttle_ms(bound, now), 5)
    steady = sum(size for at, size in sent if at >= 20_000) / 100
    assert steady == pytest.approx(bound, rel=0.1)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def test_manager_throttles_and_follows_quota_changes() -> None:
    clock = FakeClock()
    quotas = {entity((CLIENT_ID, "app")): {PRODUCER_BYTE_RATE: 1000.0}}
    current = {"map": quotas}
    manager = ClientQuotaManager(lambda: current["map"], clock, samples=2, window_ms=1000)
    assert manager.record_produce("ANONYMOUS", "app", 500) == 0
    assert manager.record_produce("ANONYMOUS", "app", 1500) == 1000
    assert manager.record_produce("ANONYMOUS", "other", 10**9) == 0  # no quota: unbound
    current["map"] = {}  # the image without the quota: applies at once
    assert manager.record_produce("ANONYMOUS", "app", 10**9) == 0
    assert not manager.enabled(PRODUCER_BYTE_RATE)


def test_manager_caps_a_consumers_fetch_to_what_its_quota_can_send() -> None:
    quotas = {entity((USER, None)): {"consumer_byte_rate": 100_000.0}}
    manager = ClientQuotaManager(lambda: quotas, FakeClock(), samples=11, window_ms=1000)
    assert manager.fetch_max_bytes("alice", "c", 50_000_000) == 1_000_000  # 10 windows
    assert manager.fetch_max_bytes("alice", "c", 4096) == 4096


def test_timed_call_counts_running_time_not_waiting() -> None:
    async def handler() -> str:
        await asyncio.sleep(0.2)  # a long poll: no time on the loop
        end = time.perf_counter() + 0.05
        while time.perf_counter() < end:  # work
            pass
        return "done"

    async def main() -> tuple[str, float]:
        timed = TimedCall(handler())
        return await timed, timed.seconds

    value, seconds = asyncio.run(main())
    assert value == "done"
    assert 0.04 <= seconds < 0.15


def test_timed_call_passes_cancellation_through() -> None:
    async def main() -> bool:
        task = asyncio.ensure_future(TimedCall(asyncio.sleep(10)))
        await asyncio.sleep(0.01)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return True
        return False

    assert asyncio.run(main())


# -- the controller's checks and records -------------------------------------------
@pytest.mark.parametrize(
    ("parts", "message"),
    [
        ([], "at least one"),
        ([("group", "g")], "unknown quota entity type"),
        ([(USER, "a"), (USER, "b")], "twice"),
        ([(IP, "10.0.0.1"), (USER, "a")], "combination"),
        ([(IP, "not-an-ip")], "not a valid IP"),
    ],
)
def test_bad_entities_are_invalid_requests(parts: list, message: str) -> None:
    with pytest.raises(ControllerError, match=message) as caught:
        check_entity(parts)
    assert caught.value.code == "INVALID_REQUEST"


@pytest.mark.parametrize(
    ("target", "ops", "message"),
    [
        (entity((USER, "a")), [("bogus_rate", 1.0)], "invalid quota key"),
        (entity((USER, "a")), [("connection_creation_rate", 1.0)], "invalid quota key"),
        (entity((IP, None)), [(PRODUCER_BYTE_RATE, 1.0)], "invalid quota key"),
        (entity((USER, "a")), [(PRODUCER_BYTE_RATE, -5.0)], "positive"),
        (entity((USER, "a")), [(PRODUCER_BYTE_RATE, 1.5)], "whole number"),
        (entity((USER, "a")), [(PRODUCER_BYTE_RATE, 1.0), (PRODUCER_BYTE_RATE, 2.0)], "twice"),
    ],
)
def test_bad_ops_are_invalid_requests(target: tuple, ops: list, message: str) -> None:
    with pytest.raises(ControllerError, match=message):
        quota_change_records(MetadataImage(), QuotaAlteration(target, tuple(ops)))


def _image_with(*alterations: QuotaAlteration) -> MetadataImage:
    image = MetadataImage()
    for alteration in alterations:
        image = image.apply(quota_change_records(image, alteration), image.offset + 1)
    return image


def test_records_change_only_what_differs_and_describe_filters() -> None:
    alice_app = entity((USER, "alice"), (CLIENT_ID, "app"))
    image = _image_with(
        QuotaAlteration(entity((USER, "alice")), (("producer_byte_rate", 1024.0),)),
        QuotaAlteration(alice_app, (("consumer_byte_rate", 2048.0), ("request_percentage", 50.5))),
        QuotaAlteration(entity((USER, None)), (("producer_byte_rate", 10.0),)),
        QuotaAlteration(entity((CLIENT_ID, None)), (("controller_mutation_rate", 3.0),)),
        QuotaAlteration(entity((IP, "10.1.2.3")), (("connection_creation_rate", 7.0),)),
    )
    same = QuotaAlteration(entity((USER, "alice")), (("producer_byte_rate", 1024.0),))
    assert quota_change_records(image, same) == []
    gone = QuotaAlteration(entity((USER, "alice")), (("consumer_byte_rate", None),))
    assert quota_change_records(image, gone) == []  # removing an unset key: nothing

    def names(components: list, strict: bool) -> list:
        return [e for e, _ in describe(image, components, strict)]

    assert names([(USER, MATCH_EXACT, "alice")], True) == [entity((USER, "alice"))]
    assert names([(USER, MATCH_EXACT, "alice")], False) == [alice_app, entity((USER, "alice"))]
    assert names([(USER, MATCH_DEFAULT, None)], True) == [entity((USER, None))]
    assert names([(USER, MATCH_SPECIFIED, None)], True) == [
        entity((USER, None)),
        entity((USER, "alice")),
    ]
    assert names([(USER, MATCH_SPECIFIED, None), (CLIENT_ID, MATCH_EXACT, "app")], True) == [
        alice_app
    ]
    assert len(names([], False)) == 5
    assert describe(image, [(IP, MATCH_EXACT, "10.1.2.3")], True)[0][1] == {
        "connection_creation_rate": 7.0
    }
    with pytest.raises(ControllerError, match="twice"):
        describe(image, [(USER, MATCH_DEFAULT, None), (USER, MATCH_SPECIFIED, None)], False)
    # removing the last key removes the entity
    removed = _image_with(
        QuotaAlteration(entity((USER, "x")), (("producer_byte_rate", 1.0),)),
        QuotaAlteration(entity((USER, "x")), (("producer_byte_rate", None),)),
    )
    assert removed.client_quotas == {}


def test_dispatcher_throttle_fills_the_response_and_mutes() -> None:
    """Produce over its quota: the encoded response carries throttle_time_ms and the
    Response the mute; acks=0 (no response) still mutes, sending nothing."""
    from types import SimpleNamespace

    from odradek.protocol.build import make, response_module
    from odradek.protocol.session import Session
    from odradek.server.dispatcher import throttle

    quotas_map = {entity((CLIENT_ID, "p")): {PRODUCER_BYTE_RATE: 100.0}}
    manager = ClientQuotaManager(lambda: quotas_map, FakeClock(), samples=2, window_ms=1000)
    header = SimpleNamespace(api_key=0, api_version=9, correlation_id=7, client_id="p")
    request = SimpleNamespace(header=header, session=Session(), body=None)
    module = response_module(0, 9)
    result = make(
        module.ProduceResponse,
        responses=(),
        throttle_time=datetime.timedelta(0),
        node_endpoints=(),
    )
    from odradek.network.connection import Response

    response = throttle(manager, request, 300, None, result, Response([b"unthrottled"]))
    assert response is not None and response.throttle_ms == 2000  # (300 - 100) / 100 s
    assert response.parts != [b"unthrottled"]  # re-encoded with the throttle in it
    silent = throttle(manager, request, 300, None, None, None)
    assert silent is not None and silent.parts == [] and silent.throttle_ms > 0
    free = SimpleNamespace(header=SimpleNamespace(**{**vars(header), "client_id": "q"}))
    free.session, free.body = Session(), None
    untouched = Response([b"x"])
    assert throttle(manager, free, 10**6, None, result, untouched) is untouched
