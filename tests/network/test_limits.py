"""Limit accounting, without sockets: connection quotas, the request memory pool, fd caps."""

from __future__ import annotations

import asyncio
import random

import pytest

from odradek.network.limits import (
    FILE_RESERVE_MIN,
    INT_MAX,
    MIN_CONNECTIONS,
    SMALL_REQUEST_BYTES,
    ConnectionLimits,
    ConnectionQuotas,
    RequestMemoryPool,
    connection_fd_cap,
    normalize_ip,
    resolve_overrides,
)
from odradek.server.config import BrokerConfig, ConfigError, parse_ip_overrides

MIB = 1 << 20


def run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


# -- addresses and config ------------------------------------------------------------------
def test_normalize_ip() -> None:
    assert normalize_ip("127.0.0.1") == "127.0.0.1"
    assert normalize_ip("::ffff:10.0.0.7") == "10.0.0.7"
    assert normalize_ip("fe80::1%eth0") == "fe80::1"
    assert normalize_ip("0:0::1") == "::1"
    assert normalize_ip("not-an-ip") == "not-an-ip"


def test_parse_ip_overrides() -> None:
    key = "max.connections.per.ip.overrides"
    assert parse_ip_overrides(key, "") == ()
    assert parse_ip_overrides(key, "hostName:100, 127.0.0.1:200,[::1]:3") == (
        ("hostName", 100),
        ("127.0.0.1", 200),
        ("::1", 3),
    )
    for bad in ("127.0.0.1", ":5", "127.0.0.1:x", "127.0.0.1:-1", "h:2147483648"):
        with pytest.raises(ConfigError, match=key):
            parse_ip_overrides(key, bad)


def test_resolve_overrides() -> None:
    resolved = resolve_overrides([("127.0.0.1", 2), ("::ffff:10.1.1.1", 5), ("localhost", 7)])
    assert resolved["10.1.1.1"] == 5
    assert resolved["127.0.0.1"] == 7  # localhost resolves to it, later entries win
    assert resolve_overrides([("no-such-host.invalid", 1)]) == {}


def test_config_keys_and_zero_per_ip_needs_overrides() -> None:
    config = BrokerConfig({})
    assert config["max.connections"] == INT_MAX
    assert config["max.connections.per.ip"] == INT_MAX
    assert config["max.connections.per.ip.overrides"] is None
    assert config["queued.max.request.bytes"] == 100 * MIB
    with pytest.raises(ConfigError, match=r"max\.connections\.per\.ip"):
        BrokerConfig({"max.connections.per.ip": "0"})
    config = BrokerConfig(
        {"max.connections.per.ip": "0", "max.connections.per.ip.overrides": "10.0.0.1:4"}
    )
    assert config["max.connections.per.ip.overrides"] == (("10.0.0.1", 4),)


def test_fd_cap_keeps_a_reserve_for_files() -> None:
    assert connection_fd_cap(1024, 20) == 1024 - 256  # a quarter of the limit
    assert connection_fd_cap(256, 20) == 256 - FILE_RESERVE_MIN
    assert connection_fd_cap(1024, 300) == 1024 - 600  # twice the files open
    assert connection_fd_cap(100, 500) == MIN_CONNECTIONS
    assert connection_fd_cap(2**40, 10) == INT_MAX


# -- connection quotas -----------------------------------------------------------------------
def test_per_ip_limit_and_overrides() -> None:
    quotas = ConnectionQuotas(
        ConnectionLimits(max_per_ip=2, per_ip_overrides=(("127.0.0.2", 3), ("127.0.0.3", 0)))
    )

    def connect(ip: str) -> bool:
        assert quotas.try_acquire_slot()
        if quotas.admit(ip):
            return True
        quotas.release_slot()
        return False

    assert [connect("127.0.0.1") for _ in range(3)] == [True, True, False]
    assert [connect("127.0.0.2") for _ in range(4)] == [True, True, True, False]
    assert not connect("127.0.0.3")
    assert quotas.total == 5
    quotas.closed("127.0.0.1")
    assert connect("127.0.0.1")
    assert not connect("127.0.0.1")
    # Lowering the limit leaves open connections alone and refuses new ones.
    quotas.update(ConnectionLimits(max_per_ip=1))
    assert quotas.per_ip == {"127.0.0.1": 2, "127.0.0.2": 3}
    assert not connect("127.0.0.2")
    assert connect("127.0.0.9")
    for ip, count in list(quotas.per_ip.items()):
        for _ in range(count):
            quotas.closed(ip)
    assert quotas.total == 0 and quotas.per_ip == {}


def test_acceptor_waits_for_a_slot_and_resumes() -> None:
    async def scenario() -> list[str]:
        quotas = ConnectionQuotas(ConnectionLimits(max_connections=2))
        events: list[str] = []
        for ip in ("a", "b"):
            await quotas.acquire_slot()
            assert quotas.admit(ip)

        async def acceptor() -> None:
            await quotas.acquire_slot()
            events.append("accepted")

        task = asyncio.create_task(acceptor())
        await asyncio.sleep(0.01)
        assert events == [] and quotas.total == 2
        quotas.closed("a")
        await asyncio.wait_for(task, 1)
        assert quotas.total == 2
        # Raising the limit at runtime wakes a waiting acceptor too.
        task = asyncio.create_task(acceptor())
        await asyncio.sleep(0.01)
        quotas.update(ConnectionLimits(max_connections=3))
        await asyncio.wait_for(task, 1)
        # A cancelled acceptor (shutdown) holds no slot.
        task = asyncio.create_task(acceptor())
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert quotas.total == 3
        return events

    assert run(scenario()) == ["accepted", "accepted"]


def test_fd_cap_bounds_max_connections() -> None:
    quotas = ConnectionQuotas(ConnectionLimits(max_connections=1000))
    quotas.set_fd_cap(3)
    assert quotas.max_connections == 3
    assert [quotas.try_acquire_slot() for _ in range(4)] == [True, True, True, False]
    quotas.update(ConnectionLimits(max_connections=2))
    assert quotas.max_connections == 2


# -- request memory pool -----------------------------------------------------------------------
def test_unbounded_pool_never_waits() -> None:
    pool = RequestMemoryPool(-1)
    assert all(pool.try_acquire(100 * MIB) for _ in range(10))
    assert pool.used == 1000 * MIB


def test_pool_is_non_strict_and_keeps_room_for_small_requests() -> None:
    pool = RequestMemoryPool(16 * MIB)  # large frames may use it up to 14 MiB
    assert pool.try_acquire(8 * MIB)
    assert pool.try_acquire(6 * MIB)
    assert not pool.try_acquire(SMALL_REQUEST_BYTES + 1)
    assert pool.try_acquire(100)  # small frames may use the last eighth
    assert pool.try_acquire(SMALL_REQUEST_BYTES)
    for size in (6 * MIB, 100, SMALL_REQUEST_BYTES):
        pool.release(size)
    assert pool.try_acquire(5 * MIB)  # 8 + 5 = 13 MiB held
    assert pool.try_acquire(8 * MIB)  # 13 < 14: admitted whole (Kafka's non-strict pool)
    assert pool.used == 21 * MIB
    assert not pool.try_acquire(SMALL_REQUEST_BYTES + 1)
    # Large frames past their share never take the small frames' eighth.
    admitted = sum(pool.try_acquire(SMALL_REQUEST_BYTES) for _ in range(100))
    assert admitted == 2 * MIB // SMALL_REQUEST_BYTES
    assert not pool.try_acquire(10)
    # A frame larger than the whole pool goes through alone.
    big = RequestMemoryPool(1 * MIB)
    assert big.try_acquire(50 * MIB)
    assert not big.try_acquire(SMALL_REQUEST_BYTES + 1)
    assert big.try_acquire(10)  # the small frames' eighth is still there


def test_pool_waiters_are_served_in_order_and_cancellation_returns_memory() -> None:
    async def scenario() -> None:
        pool = RequestMemoryPool(8 * MIB)  # large threshold 7 MiB
        assert pool.try_acquire(7 * MIB)
        order: list[str] = []

        async def take(name: str, size: int) -> None:
            await pool.acquire(size)
            order.append(name)

        first = asyncio.create_task(take("first", 4 * MIB))
        await asyncio.sleep(0)
        second = asyncio.create_task(take("second", 2 * MIB))
        small = asyncio.create_task(take("small", 1000))
        cancelled = asyncio.create_task(take("cancelled", 1 * MIB))
        await asyncio.sleep(0.01)
        assert order == ["small"]  # small requests do not queue behind large ones
        # A later large frame that would fit must not overtake a waiting one.
        assert not pool.try_acquire(100 * 1024)
        cancelled.cancel()
        pool.release(7 * MIB)
        await asyncio.wait_for(asyncio.gather(first, second, small), 1)
        assert order == ["small", "first", "second"]
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        assert pool.used == 6 * MIB + 1000

    run(scenario())


def test_pool_accounting_never_leaks_under_random_traffic() -> None:
    """Random acquire/release/cancel: held bytes stay within capacity plus one frame."""

    async def scenario(seed: int) -> None:
        rng = random.Random(seed)
        capacity, largest = 4 * MIB, 3 * MIB
        pool = RequestMemoryPool(capacity)
        peak = 0

        async def client() -> None:
            nonlocal peak
            for _ in range(30):
                size = rng.choice([10, 2000, SMALL_REQUEST_BYTES, 200_000, MIB, largest])
                try:
                    await asyncio.wait_for(pool.acquire(size), rng.choice([0.001, 0.05]))
                except TimeoutError:
                    continue
                peak = max(peak, pool.used)
                await asyncio.sleep(rng.random() / 1000)
                pool.release(size)

        await asyncio.gather(*(client() for _ in range(20)))
        assert pool.used == 0
        assert peak <= capacity + largest + SMALL_REQUEST_BYTES

    for seed in range(5):
        run(scenario(seed))
